"""Hierarchical ranges (`wb/step`, `wb/L07/fwd`, `wb/L07/attn`, `wb/L07/bwd`, `wb/L07/recompute`, ...).

Each range is emitted as NVTX (the `nvtx` package, domain "workbench"; `torch.cuda.nvtx` where the package is
missing: `nvtx_backend()`, recorded in meta.json as `instrument.nvtx_backend`) and, while a torch.profiler session
is recording, as a `record_function`. With ranges off, `span` returns one shared no-op context: no allocation, no
call into NVTX.

Per-layer ranges come from `instrument_layers(model)`, which gives each decoder layer an instrumented subclass
(the pattern transformers itself supports for FSDP's layer subclasses): its `forward` runs *inside* the
checkpoint in transformers 5.17 (which checkpoints `__call__`) and 5.23+ (which wraps the class `forward`), so
the non-reentrant recompute emits `wb/Lxx/recompute`, nested in `wb/Lxx/bwd`. Forward pre/post hooks are not
used: under non-reentrant checkpointing the recompute stops early and a post-hook never fires.
"""
from __future__ import annotations

import contextlib
import os

import torch

from workbench.errors import WorkbenchError
from workbench.instrument import state

try:  # the nvtx package works without a GPU (~0.7 us per no-op range)
    import nvtx as _nvtx_pkg
except ImportError:  # pragma: no cover - depends on the environment
    _nvtx_pkg = None

_NULL = contextlib.nullcontext()

NVTX_BACKENDS = ("nvtx", "torch.cuda.nvtx", "off")
"""What NVTX ranges go through: the `nvtx` package (domain API), torch's own `torch.cuda.nvtx` (the package is
missing, CUDA is there), or nothing (neither: a CPU build without the package)."""


FORCE_TORCH_NVTX_ENV = "WORKBENCH_NVTX_BACKEND"
"""Set to `torch.cuda.nvtx` to take torch's ranges although the package is there: the A/B of the two backends
(`studies/heldout_replication/nvtx_ab.sh`: the staging bug ran some processes of one campaign on each)."""


def nvtx_backend() -> str:
    """The NVTX backend `Ranges(nvtx=True)` uses in this process (one of `NVTX_BACKENDS`): recorded in every run's
    meta.json (`instrument.nvtx_backend`), so a reader need not infer it from `versions.nvtx`."""
    forced = os.environ.get(FORCE_TORCH_NVTX_ENV)
    if forced not in (None, "", "nvtx", "torch.cuda.nvtx"):
        raise WorkbenchError(f"${FORCE_TORCH_NVTX_ENV}={forced!r}: use nvtx or torch.cuda.nvtx")
    if _nvtx_pkg is not None and forced != "torch.cuda.nvtx":
        return "nvtx"
    return "torch.cuda.nvtx" if torch.cuda.is_available() else "off"


class Ranges:
    """Which range sinks are on. One is active at a time (`Ranges.activate`); the default is all off."""

    def __init__(self, nvtx: bool = True, profiler: bool = True):
        self.nvtx = bool(nvtx)
        self.profiler = bool(profiler)
        self._domain = None
        self._attrs: dict[str, object] = {}
        self._torch_nvtx = None
        if self.nvtx:
            backend = nvtx_backend()
            if backend == "nvtx":
                self._domain = _nvtx_pkg.get_domain("workbench")
            elif backend == "torch.cuda.nvtx":  # on a CPU build every torch.cuda.nvtx call raises
                self._torch_nvtx = torch.cuda.nvtx
            else:
                self.nvtx = False

    @property
    def enabled(self) -> bool:
        return self.nvtx or self.profiler

    def push(self, name: str):
        """Open a range; returns a token for `pop`. Same-thread push/pop must nest."""
        rf = None
        if self.profiler and torch.autograd.profiler._is_profiler_enabled:
            rf = torch.autograd.profiler.record_function(name)
            rf.__enter__()
        if self._domain is not None:
            attrs = self._attrs.get(name)
            if attrs is None:  # registered once per name: later pushes pass a handle, not a string
                attrs = self._attrs[name] = self._domain.get_event_attributes(message=name)
            self._domain.push_range(attrs)
        elif self._torch_nvtx is not None:
            self._torch_nvtx.range_push(name)
        return rf

    def pop(self, token) -> None:
        if self._domain is not None:
            self._domain.pop_range()
        elif self._torch_nvtx is not None:
            self._torch_nvtx.range_pop()
        if token is not None:
            token.__exit__(None, None, None)

    _active: "Ranges | None" = None

    @classmethod
    def active(cls) -> "Ranges | None":
        return cls._active

    @contextlib.contextmanager
    def activate(self):
        """Make these ranges the ones `span` and the layer wrappers emit to, for the block."""
        prev = Ranges._active
        Ranges._active = self if self.enabled else None
        try:
            yield self
        finally:
            Ranges._active = prev


class _Span:
    __slots__ = ("ranges", "name", "token")

    def __init__(self, ranges: Ranges, name: str):
        self.ranges, self.name, self.token = ranges, name, None

    def __enter__(self):
        self.token = self.ranges.push(self.name)
        return self

    def __exit__(self, *exc):
        self.ranges.pop(self.token)
        return False


def span(name: str):
    """A range named `name` in the active sinks; a shared no-op when ranges are off, and inside a graph dynamo is
    tracing (the compile lever's regional compile: dynamo cannot trace an NVTX push, and the compiled layer's own range
    is opened outside the graph, `_layer_forward`). Without this, +compile beside flex fails: the
    BlockMask build's `wb/L00/attn/meta` span is a graph break."""
    r = Ranges._active
    if r is None or torch.compiler.is_compiling():
        return _NULL
    return _Span(r, name)


def layer_label(index: int) -> str:
    return f"L{index:02d}"


# --- backward ranges: opened by a grad hook on each layer's output, closed by the next one to open -------------

_bwd_token = None
_bwd_ranges: Ranges | None = None
_bwd_callback_queued = False


def _close_bwd() -> None:
    global _bwd_token, _bwd_ranges, _bwd_callback_queued
    if _bwd_ranges is not None:
        _bwd_ranges.pop(_bwd_token)
    _bwd_token, _bwd_ranges = None, None
    _bwd_callback_queued = False
    state.bwd_layer = None


def _bwd_hook(label: str):
    def hook(grad):
        global _bwd_token, _bwd_ranges, _bwd_callback_queued
        # The grad of layer i's output is complete: layer i+1's backward is over, layer i's begins.
        _close_bwd()
        state.bwd_layer = label
        r = Ranges._active
        if r is not None:
            _bwd_ranges, _bwd_token = r, r.push(f"wb/{label}/bwd")
        if not _bwd_callback_queued:  # close the last open range when this backward ends, on its thread
            torch.autograd.Variable._execution_engine.queue_callback(_close_bwd)
            _bwd_callback_queued = True
        return None

    return hook


def _first_tensor(out):
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    return getattr(out, "last_hidden_state", None)


def _layer_forward(layer, parent_forward, args, kwargs):
    label = layer._wb_label
    kind = "recompute" if state.pass_name == state.BACKWARD else "fwd"
    state.layer_stack.append(label)
    try:
        with span(f"wb/{label}/{kind}"):
            out = parent_forward(*args, **kwargs)
    finally:
        state.layer_stack.pop()
    if kind == "fwd":
        t = _first_tensor(out)
        if t is not None and t.requires_grad:
            t.register_hook(_bwd_hook(label))
    return out


_SUBCLASSES: dict[type, type] = {}


def _instrumented_class(cls: type) -> type:
    sub = _SUBCLASSES.get(cls)
    if sub is None:
        def forward(self, *args, **kwargs):
            return _layer_forward(self, super(sub, self).forward, args, kwargs)

        sub = type(cls.__name__, (cls,), {"forward": forward, "__module__": cls.__module__,
                                          "_wb_base_class": cls})
        _SUBCLASSES[cls] = sub
    return sub


def _wrap_submodule(module: torch.nn.Module, name: str) -> None:
    inner = module.forward  # a bound method (or an earlier instance-level wrapper)

    def forward(*args, **kwargs):
        with span(name):
            return inner(*args, **kwargs)

    forward._wb_range = name
    module.forward = forward


def range_name_of(forward) -> str | None:
    """The range name of an instance forward that `instrument_layers` wrapped (None for any other callable)."""
    return getattr(forward, "_wb_range", None)


def wrap_in_range(module: torch.nn.Module, name: str) -> None:
    """Wrap `module`'s current forward in range `name` again: for a patch (e.g. Liger's) that replaced the wrapper with
    its own instance forward."""
    _wrap_submodule(module, name)


def find_decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    """The decoder's layer list of an HF causal LM (also under a peft wrapper)."""
    best = None
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.ModuleList) and name.endswith("layers") and len(mod) > 0:
            if best is None or len(mod) > len(best):
                best = mod
    if best is None:
        raise ValueError("no decoder layer list ('...layers' ModuleList) found in the model")
    return best


class LayerInstrumentation:
    """Handle returned by `instrument_layers`; `revert()` restores the classes and forwards."""

    def __init__(self, layers):
        self.layers = list(layers)

    def revert(self) -> None:
        for layer in self.layers:
            base = getattr(type(layer), "_wb_base_class", None)
            if base is not None:
                layer.__class__ = base
            for sub in (getattr(layer, "self_attn", None), getattr(layer, "mlp", None)):
                if sub is not None and "forward" in vars(sub):
                    del sub.forward
            if "_wb_label" in vars(layer):
                del layer._wb_label


def instrument_layers(model: torch.nn.Module) -> LayerInstrumentation:
    """Give every decoder layer `wb/Lxx/{fwd,recompute,bwd,attn,mlp}` ranges and layer attribution.

    Idempotent: already-instrumented layers are left alone.
    """
    layers = find_decoder_layers(model)
    for i, layer in enumerate(layers):
        if getattr(type(layer), "_wb_base_class", None) is not None:
            continue
        label = layer_label(i)
        layer._wb_label = label
        layer.__class__ = _instrumented_class(type(layer))
        if hasattr(layer, "self_attn"):
            _wrap_submodule(layer.self_attn, f"wb/{label}/attn")
        if hasattr(layer, "mlp"):
            _wrap_submodule(layer.mlp, f"wb/{label}/mlp")
    return LayerInstrumentation(layers)
