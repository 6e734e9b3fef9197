"""A deliberate slowdown, for checking that the regression gate catches one: `WORKBENCH_INJECT_GEMMS=N:SIZE`.

When the variable is set, every training step (`harness.train_step`) runs N extra SIZE x SIZE matmuls on the step's
device, inside the backward range, in bf16 on CUDA (fp32 on a CPU): device work with no sync and no sleep, so it slows the step
as a real regression does (more kernels), and a trace shows it as GEMM time in the backward pass. Unset, nothing runs.
Used by the gate's detection run (profiles/*_gate/COMMAND.txt); never set it for a measurement.
"""
from __future__ import annotations

import os

import torch

ENV = "WORKBENCH_INJECT_GEMMS"


def spec(value: str | None = None) -> tuple[int, int] | None:
    """(N, SIZE) from the variable (or `value`), None when unset or empty; ValueError for a malformed one."""
    value = os.environ.get(ENV, "") if value is None else value
    if not value.strip():
        return None
    try:
        n, size = (int(x) for x in value.split(":"))
    except ValueError:
        raise ValueError(f"{ENV}={value!r}: expected N:SIZE, two positive integers") from None
    if n < 1 or size < 1:
        raise ValueError(f"{ENV}={value!r}: expected N:SIZE, two positive integers")
    return n, size


def extra_gemms(device: torch.device, value: str | None = None) -> int:
    """Run the injected matmuls (if any); returns their FLOPs (0 when none)."""
    s = spec(value)
    if s is None:
        return 0
    n, size = s
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    a = torch.ones(size, size, device=device, dtype=dtype)
    for _ in range(n):
        a = torch.mm(a, a) * (1.0 / size)  # stays at ones: finite however many
    return 2 * n * size ** 3
