"""Adapter precision as a lever: peft's fp32 adapters vs autocast vs adapters in the base dtype.

Arms (module contract in `workbench.opts`), the precisions of `workbench.step.precision_mode` applied to a built model in place:
- `fp32-adapters` (baseline): peft's default, fp32 LoRA weights on the base (bf16 on a GPU), no autocast. Every LoRA
  matmul casts its bf16 input to fp32 and its output back: the dtype-cast copies the breakdown names (lever `copy`).
- `autocast`: the same fp32 adapters, forward and loss under `torch.autocast(bfloat16)`: the step
  `transformers.Trainer(bf16=True)` runs (`--precision autocast`). Autocast still casts each fp32 adapter weight to
  bf16 at every use.
- `bf16` (optimized): the adapters in the base dtype (peft `autocast_adapter_dtype=False`), no autocast: no casts.

`apply` casts the trainable (LoRA) parameters in place (the same Parameter objects, so an optimizer made after it
sees them) to fp32 or to the base dtype, and names the arm as the step's precision on its handle
(`Handle.precision`), which the runner passes to `harness.train_step` for its forward context. That is what
`build_model(precision=arm)` builds (peft reads the adapters' dtype at every forward, not at creation): the tests check
it bitwise. No build hook is needed: every arm runs on the model the runner built. `revert` restores the dtypes and
the adapters' dtypes (nothing else was changed on the model).

On an fp32 base (the CPU default) `bf16` keeps the adapters fp32, so it computes the same function as the baseline;
`autocast` computes the forward's matmuls in bf16 on any device.
"""
from __future__ import annotations

import torch

from workbench.step import precision_mode as prec
from workbench.errors import UnsupportedArm, WorkbenchError
from workbench.step.models import base_model_of, lora_parameters
from workbench.opts import Handle

SPEC = {"order": 10,
        "help": "fp32-adapters (baseline: peft's fp32 LoRA adapters, no autocast), bf16 (optimized: adapters in the "
                "base dtype; numerics change), autocast (fp32 adapters under torch.autocast(bfloat16), as "
                "Trainer(bf16=True))",
        "cpu": {"model": "tiny-qwen3"}, "gpu": {"model": "qwen3-0.6b", "tokens": 16384}, "all_variants": (),
        "in_all": False, "lever": "copy"}
"""What the CLIs say of this optimization (`workbench.opts.registry`); a lever (`lever`), not part of `--opt all`."""

ARMS = (prec.FP32_ADAPTERS, prec.BF16, prec.AUTOCAST)
BASELINE = prec.FP32_ADAPTERS
OPTIMIZED = prec.BF16

NUMERICS_CHANGE = ("on a bf16 base, bf16 holds the LoRA weights, gradients and optimizer state in bf16 and autocast "
                   "runs the forward's matmuls in bf16, so both differ from the fp32-adapters baseline by bf16 "
                   "rounding (on an fp32 base bf16 is the same function).")
"""One sentence: what the optimized arms change in the numbers (`workbench.opts.registry`, lever arms)."""


def lever_baseline(args, device) -> str:
    """The arm the precision lever starts from in `--opt levers` (`workbench.ab.planner.lever_baseline`): the
    precision the run times (`--precision`, autocast on a GPU: the step Trainer(bf16=True) runs; fp32-adapters on a
    CPU), so the levers' traced baseline and the path start from the realistic recipe. `--precision fp32-adapters`
    starts it from peft's default instead; under `--precision bf16` the lever has nothing to do (it is skipped)."""
    return args.step.resolved(device).precision


def base_dtype(model) -> torch.dtype:
    """The dtype of the frozen base weights (what `bf16` puts the adapters in)."""
    frozen = [p.dtype for p in base_model_of(model).parameters() if not p.requires_grad]
    if not frozen:
        raise WorkbenchError("precision: the model has no frozen base parameters (is LoRA applied?)")
    return frozen[0]


def adapter_dtype(model, arm: str) -> torch.dtype:
    """The adapters' dtype under `arm`: fp32 (peft's `autocast_adapter_dtype`) except for bf16 (the base dtype)."""
    return base_dtype(model) if arm == prec.BF16 else torch.float32


def unsupported(arm: str, model, device) -> str | None:
    if arm not in ARMS:
        return f"unknown precision arm {arm!r}; arms: {', '.join(ARMS)}"
    if not lora_parameters(model):
        return "the model has no trainable (LoRA) parameters"
    return None


def _cast(params, dtype) -> None:
    with torch.no_grad():
        for _, p in params:
            if p.dtype != dtype:
                p.data = p.data.to(dtype)
                p.grad = None  # a gradient of the other dtype is stale: the next backward makes a new one


def apply(model, arm: str, **options) -> Handle:
    """Put the adapters in the arm's dtype and run the step at the arm's precision; returns a Handle whose revert()
    restores both."""
    if options:
        raise WorkbenchError(f"precision: unknown options {', '.join(sorted(options))}")
    why = unsupported(arm, model, next(model.parameters()).device)
    if why is not None:
        raise UnsupportedArm(why)
    params = lora_parameters(model)
    before = {n: p.dtype for n, p in params}
    dtype = adapter_dtype(model, arm)
    h = Handle(opt="precision", arm=arm, precision=arm, info={"adapter_dtype": str(dtype).replace("torch.", ""),
                                               "base_dtype": str(base_dtype(model)).replace("torch.", ""),
                                               "autocast": arm == prec.AUTOCAST})
    _cast(params, dtype)

    def restore():
        with torch.no_grad():
            for n, p in params:
                if p.dtype != before[n]:
                    p.data = p.data.to(before[n])
                    p.grad = None
    h.undo.append(restore)
    return h
