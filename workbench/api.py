"""Public API: make a user's own Hugging Face model faster in their own Trainer or training loop.

    from workbench import apply_optimizations
    opt = apply_optimizations(model, packing="cached", moe="grouped")
    trainer = Trainer(model=model, data_collator=DataCollatorWithFlattening(return_flash_attn_kwargs=True), ...)
    trainer.train()
    opt.revert()   # the model is as it was

Both arms were measured faster than what transformers does today (`cached` than the per-layer rebuild, `grouped`
than transformers' `grouped_mm` experts); the arms to use on your machine are the ones `python -m workbench.ab`
recommends in its closing lines (`workbench.ab.recommend`). An arm measured slower than transformers' default (an
optimization's `SLOWER_THAN_DEFAULT`: moe="sort_bincount" or "eager" against grouped_mm; offload="double_buffer", which
frees activation memory at a cost in step time) is applied when asked for, with one warning line. Under
`Trainer(gradient_checkpointing=True)` and TRL's padding-free batches every arm is active or refuses in one line
(`cached` / `precomputed` use the batch's `cu_seq_lens_q/k` and `max_length_q/k`; the offload arms keep their
checkpointing when `train()` re-enables torch's).

The same `apply` the A/B runner measures (`workbench.opts.<opt>.apply`); each argument is an arm name of that
optimization (None leaves it alone). Packing needs packed batches with `position_ids` restarting at 0 in every
document and batch size 1 (`DataCollatorWithFlattening`, TRL's padding-free collator). The `precomputed`
packing arm builds its metadata at collate time: call `handle.prepare_batch` in your collator and pass
`handle.inputs_fn(model, batch)` to the model; every other arm needs nothing but the model call.

Precision: the workbench times the step `transformers.Trainer(bf16=True)` runs (`workbench.step.precision_mode`): a bf16 base,
fp32 LoRA adapters (peft's default), forward and loss under bf16 autocast, backward outside it. Under Trainer with
`bf16=True` nothing more is needed (accelerate wraps the forward). In your own loop, the same step is

    from workbench.api import forward_context
    with forward_context("autocast", "cuda"):      # or "bf16" / "fp32-adapters": no autocast
        loss = model(**batch).loss
    loss.backward()

and `lora_kwargs(precision)` gives the keyword of `peft.get_peft_model` for each precision (adapters in the base
dtype for "bf16").
"""
from __future__ import annotations

import inspect

from workbench.opts import registry as opt_registry
from workbench import opts as _opts
from workbench.errors import WorkbenchError
from workbench.step.precision_mode import forward_context, lora_kwargs  # noqa: F401 - public: the timed step's precision

def _order() -> tuple[str, ...]:
    """The optimizations in application order (SPEC `apply_order`, else `order`; reverted in reverse): attention,
    experts, then the checkpoint function."""
    return tuple(sorted(opt_registry.names(), key=lambda o: opt_registry.spec(o).get("apply_order",
                                                                                      opt_registry.spec(o)["order"])))


class Optimizations(_opts.Combined):
    """The applied optimizations: `revert()` undoes all of them; also a context manager.

    `handles` ({opt: Handle}), `info` ({opt: what each arm reports}), `prepare_batch` / `inputs_fn` (for arms
    that precompute at collate time)."""

    def __init__(self, handles: list):
        super().__init__(handles)
        self.by_opt = {h.opt: h for h in handles}
        self.different_function: dict = {}
        """{opt: why} of the applied arms that compute a different function by design (`allow_different_function`)."""

    @property
    def info(self) -> dict:
        return {h.opt: dict(h.info) for h in self.handles}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.revert()
        return False

    def __repr__(self) -> str:
        return "Optimizations(" + ", ".join(f"{h.opt}={h.arm!r}" for h in self.handles) + ")"


def _named_params(fn) -> set[str]:
    ps = inspect.signature(fn).parameters
    return {n for n, p in ps.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)} - {"model", "arm"}


def apply_optimizations(model, **arms_and_options) -> Optimizations:
    """Apply the chosen arm of each optimization to `model` (HF or peft-wrapped) in place.

    One keyword per optimization of the registry (`workbench.opts.registry`), its value an arm name (None leaves it
    alone), e.g. packing="cached", moe="grouped"; each module's `ARMS` lists its arms
    (`python -m workbench.ab --help` too). The other keywords are options that go to the `apply` of the optimization
    that takes them (e.g. `backend="sdpa"` for packing, `min_free_mib=` for offload, `gemm="triton"` for moe);
    `<opt>_options={...}` passes them to one optimization explicitly.

    An arm whose optimization states DIFFERENT_FUNCTION (`workbench.opts.protocol`; moe_balance="balanced": another
    routing) computes a different function by design, not the model's: no speed lever for training. It is refused
    unless `allow_different_function=True` says the caller knows; the handle's `different_function` ({opt: why})
    says it again.

    Raises WorkbenchError for an unknown arm or option, an arm this model / device cannot run, or arms that cannot run
    together (compile="regional" with attention="varlen": `workbench.opts.conflict`); nothing stays applied when it
    raises. Returns an `Optimizations` handle whose `revert()` undoes everything.
    """
    order = _order()
    options = dict(arms_and_options)
    allow_different = bool(options.pop("allow_different_function", False))
    chosen = {o: options.pop(o, None) for o in order}
    per_opt = {o: dict(options.pop(f"{o}_options", None) or {}) for o in order}
    mods = {o: _opts.module(o) for o in order if chosen[o] is not None}
    if not mods:
        raise WorkbenchError("apply_optimizations: choose at least one of " + ", ".join(f"{o}=" for o in order))
    used = set()
    for o, mod in mods.items():
        for k in _named_params(mod.apply) & set(options):
            per_opt[o].setdefault(k, options[k])
            used.add(k)
    unknown = set(options) - used
    if unknown:
        raise WorkbenchError(f"apply_optimizations: unknown options {', '.join(sorted(unknown))} for "
                             f"{', '.join(mods)}")
    try:
        device = next(model.parameters()).device
    except StopIteration:
        raise WorkbenchError("apply_optimizations: the model has no parameters") from None
    arms = {o: chosen[o] for o in mods}
    for o, arm in arms.items():  # every arm named before any is applied
        if arm not in mods[o].ARMS:
            raise WorkbenchError(f"unknown arm {arm!r} for {o}; arms: {', '.join(mods[o].ARMS)}")
    different = {o: d["why"] for o, d in _opts.different_functions(arms).items()}
    if different and not allow_different:
        o = next(iter(different))
        raise WorkbenchError(f"apply_optimizations: {o}={arms[o]!r} computes a different function by design, not the "
                             f"model's ({different[o]}); pass allow_different_function=True to apply it anyway")
    why = _opts.unsupported_reason(model, arms, device, per_opt)
    if why:
        raise _opts_unsupported(why)
    clash = _opts.conflict(arms, device.type)
    if clash is not None:
        raise WorkbenchError(f"apply_optimizations: {clash[1]}")
    _warn_slower(mods, arms)
    handles = _opts.apply_all(model, arms, per_opt).handles  # the one loop that applies arms (ab uses it too)
    out = Optimizations(handles)
    out.different_function = different
    return out


_WARNED: set = set()
"""(opt, arm) pairs already warned about in this process (`_warn_slower`: once each)."""


def _warn_slower(mods: dict, arms: dict) -> None:
    """One warning line a process for each asked-for arm its module measured slower than transformers' default
    (`SLOWER_THAN_DEFAULT`)."""
    import warnings
    from workbench.opts.protocol import hook
    for o, arm in arms.items():
        why = hook(mods[o], "SLOWER_THAN_DEFAULT").get(arm)
        if why and (o, arm) not in _WARNED:
            _WARNED.add((o, arm))
            default = hook(mods[o], "TRANSFORMERS_DEFAULT") or mods[o].BASELINE
            warnings.warn(f"{o}={arm!r} was measured slower than {default} (what transformers does by default): "
                          f"{why}; applied as asked", UserWarning, stacklevel=3)


def winning_arms(run_dir: str) -> dict:
    """{opt: arm} of the path's last point of a `python -m workbench.ab --opt levers` run folder, to pass on:
    `apply_optimizations(model, **winning_arms("runs/levers_..."))` (`workbench.ab.lever_path.winning_arms`)."""
    from workbench.ab.lever_path import winning_arms as _winning
    return _winning(run_dir)


def _signature() -> inspect.Signature:
    """apply_optimizations(model, <opt>=None for each optimization, allow_different_function=False, **options):
    what help() and IDEs show."""
    P = inspect.Parameter
    return inspect.Signature([P("model", P.POSITIONAL_OR_KEYWORD)]
                             + [P(o, P.KEYWORD_ONLY, default=None, annotation="str | None") for o in _order()]
                             + [P("allow_different_function", P.KEYWORD_ONLY, default=False, annotation="bool")]
                             + [P("options", P.VAR_KEYWORD)], return_annotation="Optimizations")


apply_optimizations.__signature__ = _signature()


def _opts_unsupported(msg: str):
    from workbench.errors import UnsupportedArm
    return UnsupportedArm(msg)
