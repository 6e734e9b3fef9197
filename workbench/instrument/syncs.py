"""Count every op that forces a device-to-host sync, attributed to layer, pass and source line.

A `TorchDispatchMode` sees the aten ops that read device memory back to the host on CUDA, on any device
(on any device: a dispatch mode sees the aten ops that would read back on CUDA): `_local_scalar_dense` (`.item()`, `bool()`, `int()`, 0-d tensor indexing), `nonzero`
(one-argument `where`), `is_nonzero`, `unique*`, `masked_select`, `equal`, `bincount`, `repeat_interleave`
without `output_size` (2 reads), boolean-mask `index` / `index_put_`, and blocking device-to-host copies. `.tolist()`
issues no aten op on CPU, so the counter wraps `Tensor.tolist` (and the copy it makes on CUDA is not counted
twice); both are patched in for the counter's block. On CPU the counter reports what *would* sync on CUDA; syncs that happen only on CPU (`F.one_hot`'s
min/max checks) are marked `cpu_only` and kept out of the total.

On CUDA, `cross_check=True` also records `torch.cuda.set_sync_debug_mode("warn")` warnings, the second witness.

    # weights: device-to-host reads one op makes on CUDA, checked against sync debug mode on an H100
    # (workbench.bench.witness): bincount reads min and max back (2), repeat_interleave without output_size 2
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import sys
import warnings

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from workbench.instrument import state

aten = torch.ops.aten
_SYNC_WARNING = "called a synchronizing CUDA operation"  # torch.cuda.set_sync_debug_mode("warn")

# op -> device-to-host reads it makes on CUDA
_ALWAYS: dict = {
    aten._local_scalar_dense.default: 1,
    aten.is_nonzero.default: 1,
    aten.nonzero.default: 1,
    aten.masked_select.default: 1,
    aten.equal.default: 1,
    aten.bincount.default: 2,
    aten._unique.default: 1,
    aten._unique2.default: 1,
    aten.unique_dim.default: 1,
    aten.unique_consecutive.default: 1,
}
_INDEX_OPS = {aten.index.Tensor, aten.index_put_.default, aten.index_put.default, aten._index_put_impl_.default}
_COPY_OPS = {aten._to_copy.default, aten.copy_.default}

_SKIP_MODULES = ("torch", "workbench.instrument", "contextlib", "functools")


def _skipped(module: str) -> bool:
    return any(module == m or module.startswith(m + ".") for m in _SKIP_MODULES)


def _source_line(depth: int = 2) -> str:
    """The first Python frame outside torch and the instruments: `file.py:123 (function)`.

    Frames are matched by module name, not path: a virtualenv may itself live under a folder named torch.
    """
    f = sys._getframe(depth)
    while f is not None:
        if not _skipped(f.f_globals.get("__name__", "")):
            return f"{os.path.basename(f.f_code.co_filename)}:{f.f_lineno} ({f.f_code.co_name})"
        f = f.f_back
    return "<unknown>"


def _first_tensor_on_cpu(args) -> bool:
    for a in args:
        if isinstance(a, torch.Tensor):
            return a.device.type == "cpu"
    return False


def _is_bool_index(indices) -> bool:
    for t in indices:
        if isinstance(t, torch.Tensor) and t.dtype in (torch.bool, torch.uint8):
            return True
    return False


def _sync_reads(func, args, kwargs) -> int:
    n = _ALWAYS.get(func)
    if n is not None:
        return n
    if func is aten.repeat_interleave.Tensor:  # CUDA reads the total and checks the repeats: 2 reads
        return 0 if kwargs.get("output_size") is not None else 2
    if func in _INDEX_OPS:
        return 1 if len(args) > 1 and _is_bool_index(args[1]) else 0
    if func in _COPY_OPS:
        src = args[0] if func is aten._to_copy.default else args[1]
        dst_dev = kwargs.get("device") if func is aten._to_copy.default else args[0].device
        non_blocking = kwargs.get("non_blocking", False) if func is aten._to_copy.default else (
            args[2] if len(args) > 2 else kwargs.get("non_blocking", False))
        if isinstance(src, torch.Tensor) and src.device.type == "cuda" and dst_dev is not None \
                and torch.device(dst_dev).type == "cpu" and not non_blocking:
            return 1
    return 0


@dataclasses.dataclass
class SyncEvent:
    op: str
    reads: int
    layer: str
    pass_: str
    source: str
    declared: str | None
    cpu_only: bool


class _DispatchWatch(TorchDispatchMode):
    supports_higher_order_operators = True
    """Higher-order operators (flex_attention, ...) pass through `__torch_dispatch__`: without this torch refuses to run
    them under the mode at all. They run as called; the syncs of their
    inner ops are not counted one by one (flex_attention's kernels make none: its BlockMask is built outside it)."""

    def __init__(self, counter: "SyncCounter"):
        super().__init__()
        self.counter = counter

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if isinstance(func, torch._ops.HigherOrderOperator):
            return func(*args, **kwargs)
        c = self.counter
        if not c._in_tolist:
            n = _sync_reads(func, args, kwargs)
            if n and c.device_type == "cuda" and func not in _COPY_OPS and _first_tensor_on_cpu(args):
                n = 0  # reading a host tensor in a CUDA run is no sync
            if n:
                c._record(str(func.overloadpacket.__name__), n)
        return func(*args, **kwargs)


def _patched_tolist(counter: "SyncCounter"):
    orig = torch.Tensor.tolist

    def tolist(self):
        if counter._in_tolist:
            return orig(self)
        if self.device.type != "cpu" or counter.device_type == "cpu":
            counter._record("tolist", 1)
        counter._in_tolist = True  # on CUDA tolist copies to the host through aten: that is the same sync
        try:
            return orig(self)
        finally:
            counter._in_tolist = False

    return orig, tolist


def _patched_one_hot():
    orig = torch.nn.functional.one_hot

    def one_hot(*args, **kwargs):
        with host_only("CPU one_hot checks min/max with .item(); CUDA one_hot does not"):
            return orig(*args, **kwargs)

    return orig, one_hot


def outside_dispatch_modes():
    """A context that steps out of the active TorchDispatchModes, if any. flex_attention runs through torch.compile,
    which refuses to trace under a non-infra dispatch mode such as the sync counter's:
    a counted pass of flex attention fails without this. flex's kernels make no device-to-host sync (its
    BlockMask is built outside, once per batch), so the count loses nothing."""
    from torch.utils._python_dispatch import _disable_current_modes, _get_current_dispatch_mode_stack
    return _disable_current_modes() if _get_current_dispatch_mode_stack() else contextlib.nullcontext()


def _patched_hf_flex():
    """transformers' own flex_attention (`--attn flex_attention`, `ALL_ATTENTION_FUNCTIONS["flex_attention"]`) run
    outside the counter's dispatch mode while it is active (`outside_dispatch_modes`, which the workbench's own
    flex kernels use): under the mode torch.compile does not compile it and the flex higher-order op falls back to its
    dense math path, B x H x T x T fp32 scores. The fused_ce counted pass on the H100 (llama-3.1-8b, 16381 tokens, 32
    heads) asked for exactly those 31.99 GiB and failed on every arm. Returns the function that restores the entry."""
    try:
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    except ImportError:
        return lambda: None
    key = "flex_attention"
    if key not in ALL_ATTENTION_FUNCTIONS:
        return lambda: None

    had_local, orig = key in ALL_ATTENTION_FUNCTIONS._local_mapping, ALL_ATTENTION_FUNCTIONS[key]

    def flex_attention(*args, **kwargs):
        with outside_dispatch_modes():
            return orig(*args, **kwargs)

    ALL_ATTENTION_FUNCTIONS[key] = flex_attention  # the instance's own mapping: the global one stays as it was

    def restore():
        if had_local:
            ALL_ATTENTION_FUNCTIONS[key] = orig
        else:
            del ALL_ATTENTION_FUNCTIONS[key]
    return restore


_declared: list[str] = []
_host_only: list[str] = []


@contextlib.contextmanager
def host_only(why: str):
    """Mark reads in this block as host-only: they read CPU memory even in a CUDA run (e.g. AdamW's step
    counters, kept on the host), or happen only on the CPU path. Reported as `cpu_only`, not in the total."""
    _host_only.append(why)
    try:
        yield
    finally:
        _host_only.pop()


@contextlib.contextmanager
def expected_sync(why: str):
    """Declare the syncs in this block intended (e.g. "loss for logging"); reported apart from the rest."""
    _declared.append(why)
    try:
        yield
    finally:
        _declared.pop()


class SyncCounter:
    """Counts device-to-host syncs while active (`with counter:`), with attribution.

    `total` counts undeclared reads that happen on CUDA; `declared` the `expected_sync` ones; `cpu_only` the
    ones that only the CPU path makes. `events` keeps one row per sync op.
    """

    def __init__(self, cross_check: bool = False, device_type: str | None = None):
        self.device_type = device_type or ("cuda" if torch.cuda.is_available() else "cpu")
        """cuda: reads of host tensors are not syncs; cpu: every read counts (what would sync on CUDA)."""
        self.events: list[SyncEvent] = []
        self.cross_check = cross_check and torch.cuda.is_available()
        self.cuda_warnings = 0
        self.cuda_warning_sources: collections.Counter = collections.Counter()
        """Where sync-debug-mode warnings were raised (file:line of the Python caller), to explain a mismatch."""
        self._in_tolist = False
        self._modes: list = []
        self._warn_ctx = None
        self._warn_log = None
        self._prev_debug_mode = None

    # -- recording --------------------------------------------------------------------------------------
    def _record(self, op: str, reads: int) -> None:
        cpu_only = bool(_host_only)
        self.events.append(SyncEvent(op=op, reads=reads, layer=state.current_layer(), pass_=state.current_pass(),
                                     source=_source_line(3), declared=_declared[-1] if _declared else None,
                                     cpu_only=cpu_only))

    # -- context ------------------------------------------------------------------------------------------
    def __enter__(self):
        if self.cross_check:
            self._warn_ctx = warnings.catch_warnings(record=True)
            self._warn_log = self._warn_ctx.__enter__()
            warnings.simplefilter("always")
            self._prev_debug_mode = torch.cuda.get_sync_debug_mode()
            torch.cuda.set_sync_debug_mode("warn")
        # .tolist() issues no aten op on CPU and F.one_hot's checks are CPU-only: patched for the block, since a
        # TorchFunctionMode is not active on the thread that runs backward (and so misses the recompute)
        self._orig_tolist, torch.Tensor.tolist = _patched_tolist(self)
        self._orig_one_hot, torch.nn.functional.one_hot = _patched_one_hot()
        self._restore_flex = _patched_hf_flex()
        self._modes = [_DispatchWatch(self)]
        for m in self._modes:
            m.__enter__()
        return self

    def __exit__(self, *exc):
        for m in reversed(self._modes):
            m.__exit__(*exc)
        self._modes = []
        torch.Tensor.tolist = self._orig_tolist
        torch.nn.functional.one_hot = self._orig_one_hot
        self._restore_flex()
        if self.cross_check:
            torch.cuda.set_sync_debug_mode(self._prev_debug_mode)
            for w in self._warn_log:
                if _SYNC_WARNING in str(w.message):
                    self.cuda_warnings += 1
                    self.cuda_warning_sources[f"{os.path.basename(w.filename)}:{w.lineno}"] += 1
            self._warn_ctx.__exit__(*exc)
            self._warn_ctx = self._warn_log = None
        return False

    # -- results ------------------------------------------------------------------------------------------
    def _counted(self):
        return (e for e in self.events if not e.cpu_only and e.declared is None)

    @property
    def total(self) -> int:
        """Undeclared device-to-host reads (what would sync on CUDA)."""
        return sum(e.reads for e in self._counted())

    @property
    def declared(self) -> int:
        return sum(e.reads for e in self.events if e.declared is not None and not e.cpu_only)

    @property
    def cpu_only(self) -> int:
        return sum(e.reads for e in self.events if e.cpu_only)

    def by(self, *keys: str) -> dict:
        """Undeclared reads grouped by event fields, e.g. `by("layer")`, `by("layer", "pass_")`, `by("source")`."""
        out: dict = collections.Counter()
        for e in self._counted():
            k = tuple(getattr(e, key) for key in keys)
            out[k[0] if len(k) == 1 else k] += e.reads
        return dict(out)

    def by_layer(self) -> dict[str, int]:
        return self.by("layer")

    def reset(self) -> None:
        self.events.clear()
        self.cuda_warnings = 0
        self.cuda_warning_sources.clear()
