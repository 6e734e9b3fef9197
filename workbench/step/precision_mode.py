"""Precision of the timed step: what dtype the base and the LoRA adapters hold, and whether the forward autocasts.

    autocast        bf16 base, fp32 LoRA adapters, forward and loss under torch.autocast(device, bfloat16); backward
                    outside autocast. What transformers.Trainer(bf16=True) runs: accelerate wraps the model's forward
                    in `torch.autocast(device_type, dtype=torch.bfloat16)` (`Accelerator.prepare_model`,
                    `get_mixed_precision_context_manager`), and the loss is computed inside that forward (labels
                    passed). The default on CUDA.
    bf16            adapters in the base dtype (peft `autocast_adapter_dtype=False`), no autocast.
    fp32-adapters   bf16 base on CUDA (fp32 on a CPU), LoRA adapters fp32 (peft's default), no autocast: the
                    workbench's step before precision was a setting, kept for comparison. The default on a CPU.
    auto            autocast on CUDA, fp32-adapters on a CPU (where the model is fp32 anyway).

A run resolves its precision once (`workbench.step.config.StepConfig.resolved`) and passes it down: to
`workbench.step.models.build_model` (the dtypes it builds) and to every step (`harness.train_step(precision=...)`,
which runs its forward under `forward_context(precision, device_type)`). Nothing is stored on the model; an arm that
runs another precision (the precision lever) says so on its handle (`workbench.opts.Handle.precision`), and the fp32
equivalence reference runs fp32-adapters. In your own loop:

    with workbench.step.precision_mode.forward_context("autocast", "cuda"):
        loss = model(**batch).loss
    loss.backward()
"""
from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


AUTOCAST = "autocast"
BF16 = "bf16"
FP32_ADAPTERS = "fp32-adapters"
AUTO = "auto"
PRECISIONS = (AUTOCAST, BF16, FP32_ADAPTERS)
"""Resolved precisions."""
CHOICES = (AUTO, *PRECISIONS)
"""What a CLI accepts (`--precision`)."""

HELP = ("precision of the timed step: autocast = bf16 base, fp32 LoRA adapters, forward and loss under "
        "torch.autocast(bfloat16) as transformers.Trainer(bf16=True) runs it; bf16 = adapters in the base dtype, no "
        "autocast; fp32-adapters = fp32 LoRA adapters on the base dtype, no autocast (the earlier step, for "
        "comparison); auto = autocast on CUDA, fp32-adapters on a CPU")
"""One paragraph for CLI help."""

def resolve(device, requested: str = AUTO) -> str:
    """The precision a run uses: `requested` itself, or for `auto` autocast on CUDA and fp32-adapters elsewhere.

    `device` is a torch.device, a device string or a device type ("cuda", "cpu"). Raises ValueError for an unknown
    name (CLIs restrict choices first, so users see argparse's message).
    """
    import torch  # lazily: `--help` of the CLIs must not import torch

    if requested not in CHOICES:
        raise ValueError(f"unknown precision {requested!r}; choose from {', '.join(CHOICES)}")
    if requested != AUTO:
        return requested
    return AUTOCAST if torch.device(device).type == "cuda" else FP32_ADAPTERS


def model_dtype(precision: str, device) -> torch.dtype:
    """The base model's dtype when none is asked for: bf16 for autocast and bf16; for fp32-adapters bf16 on CUDA and
    fp32 on a CPU (workbench.step.models.default_dtype)."""
    import torch  # lazily: `--help` of the CLIs must not import torch

    p = resolve(device, precision)
    if p in (AUTOCAST, BF16):
        return torch.bfloat16
    return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32


def lora_kwargs(precision: str) -> dict:
    """Keyword arguments of `peft.get_peft_model` for `precision`: adapters fp32 (peft's default) except for bf16."""
    return {"autocast_adapter_dtype": precision != BF16}


def forward_context(precision: str, device_type: str):
    """The context the forward (and loss) of a step runs in: `torch.autocast(device_type, dtype=bfloat16)` for
    autocast (cache on, as accelerate leaves it), a null context otherwise. The backward runs outside it."""
    import torch  # lazily: `--help` of the CLIs must not import torch

    if precision == AUTOCAST:
        return torch.autocast(device_type=device_type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def compute_dtype(model, precision: str) -> torch.dtype:
    """The dtype the step's matmuls run in at `precision` (resolved), which picks the equivalence criterion's
    tolerance: bf16 under autocast (whatever the parameters hold), else the base parameters' dtype."""
    import torch  # lazily: `--help` of the CLIs must not import torch

    if precision == AUTOCAST:
        return torch.bfloat16
    return next(model.parameters()).dtype


def criterion_dtype(precision: str, param_dtype: torch.dtype) -> torch.dtype:
    """`compute_dtype` before a model exists (meta.json's criterion): bf16 under autocast, else `param_dtype`."""
    import torch  # lazily: `--help` of the CLIs must not import torch

    return torch.bfloat16 if precision == AUTOCAST else param_dtype
