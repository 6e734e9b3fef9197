"""The one training loop every arm shares: forward, backward, AdamW on the LoRA parameters.

It never branches on an optimization: optimizations change the model (or how a batch becomes model inputs,
through `inputs_fn`) before it is called. Warmup steps are run and dropped; each timed step becomes a
`StepRecord`. Timing uses CUDA events on a GPU (perf_counter on CPU); the loss is read back after the step's
timing ends, so logging adds no sync inside the measured region.
"""
from __future__ import annotations

import contextlib
import dataclasses
from typing import Callable

import torch

from workbench.step import inject
from workbench.instrument.syncs import host_only
from workbench.instrument import Ranges, StepTimer, SyncCounter, peak_mem_mib, reset_peak_mem, span, state
from workbench.step.models import lora_parameters, model_inputs
from workbench.step.step_guard import clean_after_failure


@dataclasses.dataclass
class StepRecord:
    step: int
    step_ms: float
    fwd_ms: float
    bwd_ms: float
    opt_ms: float
    syncs: int | None
    """Undeclared device-to-host syncs in the step (None when not counted)."""
    syncs_declared: int | None
    syncs_by_layer: dict
    syncs_by_pass: dict
    syncs_by_layer_pass: dict
    """{(layer, pass): syncs}"""
    syncs_by_source: dict
    cuda_sync_warnings: int | None
    """Sync-debug-mode warnings on CUDA (the second witness), None when not cross-checked."""
    cuda_sync_warning_sources: dict
    """file:line -> sync-debug-mode warnings raised there (empty when not cross-checked)."""
    peak_mem_mib: float
    tokens: int
    loss: float

    def as_row(self) -> dict:
        return dataclasses.asdict(self)


def mean_per_step(records, field: str) -> dict:
    """{key: count per step} of a by-key field of StepRecords (`syncs_by_source`, `syncs_by_layer_pass`,
    `cuda_sync_warning_sources`, ...): summed over the records, divided by their number."""
    acc: dict = {}
    for r in records:
        for k, v in (getattr(r, field, None) or {}).items():
            acc[k] = acc.get(k, 0) + v
    return {k: v / len(records) for k, v in acc.items()}


def make_optimizer(model, lr: float = 1e-4) -> torch.optim.Optimizer:
    params = [p for _, p in lora_parameters(model)]
    if not params:
        raise ValueError("the model has no trainable parameters (LoRA not applied?)")
    fused = all(p.is_cuda for p in params)
    return torch.optim.AdamW(params, lr=lr, fused=fused or None)


def train_step(model, batch, optimizer, *, step: int = 0, ranges: Ranges | None = None,
               counter: SyncCounter | None = None, inputs_fn: Callable = model_inputs,
               precision: str = "fp32-adapters") -> StepRecord:
    """One training step (forward, backward, AdamW) on `batch`, timed; the StepRecord of it.

    The forward and the loss run under `workbench.step.precision_mode.forward_context` of `precision` (resolved: the run's
    `StepConfig.resolved(device).precision`, or an arm's own; the default fp32-adapters runs no autocast): bf16
    autocast as Trainer(bf16=True) runs it, or nothing; the backward and the optimizer step run outside it. A step that raises leaves no autograd or compiler state behind
    (`workbench.step.step_guard`). With `counter` None and `ranges` NVTX-only this is an uninstrumented step (what
    the engine times); the loss is read back after the timer has synchronized, outside the measured region.
    """
    from workbench.step import precision_mode as prec

    device = next(model.parameters()).device
    fwd_ctx = prec.forward_context(precision, device.type)
    ranges = ranges or Ranges(nvtx=False, profiler=False)
    timer = StepTimer(device)
    reset_peak_mem(device)
    with clean_after_failure(), ranges.activate(), (counter if counter is not None else contextlib.nullcontext()):
        timer.mark("start")
        with span("wb/step"):
            with state.phase(state.FORWARD), span("wb/fwd"), fwd_ctx:
                loss = model(**inputs_fn(model, batch)).loss
            timer.mark("fwd")
            with state.phase(state.BACKWARD), span("wb/bwd"):
                loss.backward()
                inject.extra_gemms(device)  # nothing unless WORKBENCH_INJECT_GEMMS is set (the gate's check)
            timer.mark("bwd")
            with state.phase(state.OPTIMIZER), span("wb/opt"), host_only("AdamW step counters live on the host"):
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            timer.mark("opt")
    ms = timer.split_ms()  # synchronizes once, after the step, outside the counter
    c = counter
    return StepRecord(
        step=step, step_ms=ms["fwd"] + ms["bwd"] + ms["opt"], fwd_ms=ms["fwd"], bwd_ms=ms["bwd"], opt_ms=ms["opt"],
        syncs=c.total if c else None, syncs_declared=c.declared if c else None,
        syncs_by_layer=c.by("layer") if c else {}, syncs_by_pass=c.by("pass_") if c else {},
        syncs_by_layer_pass=c.by("layer", "pass_") if c else {}, syncs_by_source=c.by("source") if c else {},
        cuda_sync_warnings=c.cuda_warnings if (c and c.cross_check) else None,
        cuda_sync_warning_sources=dict(c.cuda_warning_sources) if c else {},
        peak_mem_mib=peak_mem_mib(device), tokens=batch.tokens, loss=float(loss.detach().float().item()))


def train_steps(model, batches, *, steps: int, warmup: int = 0, optimizer: torch.optim.Optimizer | None = None,
                lr: float = 1e-4, ranges: Ranges | None = None, count_syncs: bool = True, cross_check: bool = False,
                inputs_fn: Callable = model_inputs, on_step: Callable[[StepRecord], None] | None = None,
                precision: str = "fp32-adapters") -> list[StepRecord]:
    """Run `warmup + steps` training steps over `batches` (cycled; already on the model's device).

    Returns the timed steps' records. `on_step` is called after every timed step (progress display). A fixed
    warmup count, for `workbench.run` and the trace passes; the A/B timings come from `workbench.measure.engine`, which
    warms up until the step time settles.
    """
    device = next(model.parameters()).device
    optimizer = optimizer or make_optimizer(model, lr)
    records: list[StepRecord] = []
    for i in range(warmup + steps):
        counter = SyncCounter(cross_check=cross_check, device_type=device.type) if count_syncs else None
        rec = train_step(model, batches[i % len(batches)], optimizer, step=i - warmup, ranges=ranges,
                         counter=counter, inputs_fn=inputs_fn, precision=precision)
        if i < warmup:
            continue
        records.append(rec)
        if on_step is not None:
            on_step(rec)
    return records


def enable_checkpointing(model, checkpoint_fn: Callable | None = None) -> None:
    """Non-reentrant checkpointing of every decoder layer through transformers' own hook.

    `checkpoint_fn(partial_forward, hidden_states)` replaces torch's checkpoint (the offload arms use this).
    """
    import functools
    from torch.utils.checkpoint import checkpoint

    from workbench.step.models import base_model_of
    fn = checkpoint_fn or functools.partial(checkpoint, use_reentrant=False)
    base_model_of(model)._set_gradient_checkpointing(enable=True, gradient_checkpointing_func=fn)


def disable_checkpointing(model) -> None:
    from workbench.step.models import base_model_of
    base_model_of(model)._set_gradient_checkpointing(enable=False)
