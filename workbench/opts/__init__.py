"""Optimizations as registered, revertible model transforms.

Each optimization (a module of this package with a `SPEC`, or one named in $WORKBENCH_OPTS: `workbench.opts.registry`)
honours the contract of `workbench.opts.protocol`: the members ARMS, BASELINE, OPTIMIZED, unsupported(arm, model,
device) and apply(model, arm, **options) -> Handle; optional hooks read through `protocol.hook`; its SPEC. The
harness never branches on an optimization: everything an arm needs goes through the model (transformers' extension
points) or through the handle's `prepare_batch` (CPU, collate time) and `inputs_fn` (batch -> model kwargs).
"""
from __future__ import annotations

import dataclasses
import importlib
from typing import Callable

from workbench.errors import WorkbenchError

from workbench.opts import registry

OPTS = registry.names()
"""The optimizations, in their order (`workbench.opts.registry`: this package's modules with a SPEC, and $WORKBENCH_OPTS)."""


@dataclasses.dataclass
class Handle:
    opt: str
    arm: str
    inputs_fn: Callable | None = None
    """batch -> model(...) kwargs, replacing `workbench.step.models.model_inputs` (None: the default)."""
    prepare_batch: Callable | None = None
    """CPU batch -> CPU batch at collate time, before the copy to the device (None: unchanged)."""
    info: dict = dataclasses.field(default_factory=dict)
    """What the arm wants reported (e.g. pinned_bytes, fallbacks taken)."""
    precision: str | None = None
    """The precision the arm's steps run at (`workbench.step.precision_mode`; the precision lever), passed to
    `harness.train_step`; None: the run's."""
    undo: list = dataclasses.field(default_factory=list)
    """Callables run in reverse order by revert()."""

    def revert(self) -> None:
        while self.undo:
            self.undo.pop()()


def module(opt: str):
    """The optimization's module, imported and checked against `workbench.opts.protocol`. A module that fails to
    import, or breaks the contract, is a one-line WorkbenchError naming it (never skipped: its arms and hooks would
    vanish without a word)."""
    path = registry.module_path(opt)
    try:
        mod = importlib.import_module(path)
    except WorkbenchError:
        raise
    except Exception as e:  # noqa: BLE001 - any import error, said in one line
        raise WorkbenchError(f"optimization {opt!r}: module {path} failed to import: {type(e).__name__}: "
                             f"{' '.join(str(e).split())}") from e
    if path not in _CONFORMS:
        from workbench.opts import protocol

        bad = protocol.problems(mod)
        if bad:
            raise WorkbenchError(f"optimization {opt!r}: module {path} breaks the contract of "
                                 f"workbench/opts/protocol.py: {'; '.join(bad)}")
        _CONFORMS.add(path)
    return mod


_CONFORMS: set = set()
"""The module paths `module` has checked (once each)."""


def load_all() -> None:
    """Import every optimization, so what they register on import is there (opts/moe's wb_* experts names, which
    `--experts` may name): the CLIs that take model options call it before checking them."""
    for opt in OPTS:
        module(opt)


def apply(model, opt: str, arm: str, **options) -> Handle:
    mod = module(opt)
    if arm not in mod.ARMS:
        raise WorkbenchError(f"unknown arm {arm!r} for --opt {opt}; arms: {', '.join(mod.ARMS)}")
    return mod.apply(model, arm, **options)


class Combined:
    """Several handles applied to one model, in order; reverted in reverse order."""

    def __init__(self, handles: list[Handle]):
        self.handles = handles

    @property
    def inputs_fn(self) -> Callable:
        from workbench.step.models import model_inputs  # (this package's face stays torch-free: the savings modules)

        fns = [h.inputs_fn for h in self.handles if h.inputs_fn is not None]
        if len(fns) > 1:
            raise WorkbenchError("two optimizations both replace the model inputs; they cannot be combined")
        return fns[0] if fns else model_inputs

    def precision(self, run_precision: str) -> str:
        """The precision these arms' steps run at: an arm's own (`Handle.precision`), else `run_precision`."""
        own = {h.precision for h in self.handles if h.precision is not None}
        if len(own) > 1:
            raise WorkbenchError(f"two optimizations set the step's precision ({', '.join(sorted(own))}); they "
                                 "cannot be combined")
        return own.pop() if own else run_precision

    def prepare_batch(self, batch):
        for h in self.handles:
            if h.prepare_batch is not None:
                batch = h.prepare_batch(batch)
        return batch

    def revert(self) -> None:
        for h in reversed(self.handles):
            h.revert()


def _filter_kwargs(fn, options: dict) -> dict:
    """The keyword arguments of `options` that `fn` takes (all of them when it takes **kwargs)."""
    import inspect
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return dict(options)
    return {k: v for k, v in options.items() if k in params}


def apply_all(model, arms: dict, options: dict | None = None) -> Combined:
    """Apply {opt: arm} in order; `options` = {opt: apply kwargs}, each passed only where that opt's `apply` takes
    it. Returns a `Combined` handle (reverted in reverse order); on an error the arms already applied are reverted.
    The one loop that applies arms: `workbench.ab` and `workbench.api.apply_optimizations` both call it."""
    handles = []
    try:
        for opt, arm in arms.items():
            mod = module(opt)
            if arm not in mod.ARMS:
                raise WorkbenchError(f"unknown arm {arm!r} for {opt}; arms: {', '.join(mod.ARMS)}")
            handles.append(mod.apply(model, arm, **_filter_kwargs(mod.apply, (options or {}).get(opt, {}))))
    except BaseException:
        for h in reversed(handles):
            h.revert()
        raise
    return Combined(handles)


def unsupported_reason(model, arms: dict, device, options: dict | None = None) -> str | None:
    """Why this model / device cannot run {opt: arm} ("opt=arm: why"), None when it can."""
    for opt, arm in arms.items():
        mod = module(opt)
        why = mod.unsupported(arm, model, device, **_filter_kwargs(mod.unsupported, (options or {}).get(opt, {})))
        if why:
            return f"{opt}={arm}: {why}"
    return None


def conflict(arms: dict, device_type: str) -> tuple[str, str] | None:
    """(opt, why) for the first optimization in {opt: arm} whose `path_conflict` hook says its arm cannot run beside
    the others' arms (compile="regional" beside attention="varlen"); None when they can run together. Read by the
    levers' path (`workbench.ab.levers.prune_path`) and `workbench.apply_optimizations`."""
    return next(iter(conflicts(arms, device_type).items()), None)


def conflicts(arms: dict, device_type: str) -> dict[str, str]:
    """{opt: why} for every optimization in {opt: arm} whose `path_conflict` hook says its arm cannot run beside the
    others' arms, in the order of `arms`."""
    from workbench.opts.protocol import hook

    out = {}
    for o in arms:
        fn = hook(module(o), "path_conflict")
        why = fn(arms, device_type) if fn is not None else None
        if why:
            out[o] = why
    return out


def _stated_off_baseline(arms: dict, name: str) -> dict:
    """{opt: its hook `name`} of the optimizations `arms` ({opt: arm}) applies other than at their BASELINE, where
    the hook is set."""
    from workbench.opts.protocol import hook

    out = {}
    for opt, arm in arms.items():
        mod = module(opt)
        v = hook(mod, name)
        if v and arm != mod.BASELINE:
            out[opt] = v
    return out


def numerics_change(arms: dict) -> str | None:
    """The NUMERICS_CHANGE sentences of the optimizations `arms` ({opt: arm}) applies other than at their BASELINE,
    joined; None when the arms compute the baseline's function exactly (`workbench.measure.numerics` judges them)."""
    return "; ".join(f"{opt}: {what}" for opt, what in _stated_off_baseline(arms, "NUMERICS_CHANGE").items()) or None


def different_functions(arms: dict) -> dict:
    """{opt: its DIFFERENT_FUNCTION} of the optimizations `arms` ({opt: arm}) applies other than at their BASELINE;
    empty when every arm is meant to compute the baseline's function (`workbench.measure.numerics.judge_different`
    judges the others)."""
    return _stated_off_baseline(arms, "DIFFERENT_FUNCTION")
