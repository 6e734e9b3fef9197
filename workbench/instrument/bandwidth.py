"""Pinned host<->device copy bandwidth of this machine: the second source of the offload model's reload time c.

The reload c of a layer is read from the trace (its host-to-device copy); `bytes / pinned_h2d_gb_per_s` must
agree with it (`workbench.savings.common.check_inputs`). Measured once per run, in a separate pass, with CUDA events
around `reps` copies of `nbytes` from page-locked memory (the offload arms' host buffers are page-locked).
"""
from __future__ import annotations

import statistics

import torch


def pinned_copy_gb_per_s(device, nbytes: int = 256 << 20, reps: int = 5) -> dict:
    """{"h2d_gb_per_s", "d2h_gb_per_s", "nbytes", "reps"} (medians over `reps` copies, 1 GB = 1e9 bytes);
    {} on a device without CUDA."""
    device = torch.device(device)
    if device.type != "cuda":
        return {}
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(nbytes, dtype=torch.uint8, device=device)
    out = {"nbytes": int(nbytes), "reps": int(reps)}
    for name, dst, src in (("h2d_gb_per_s", dev, host), ("d2h_gb_per_s", host, dev)):
        dst.copy_(src, non_blocking=True)  # warm
        torch.cuda.synchronize(device)
        ms = []
        for _ in range(reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            dst.copy_(src, non_blocking=True)
            b.record()
            b.synchronize()
            ms.append(a.elapsed_time(b))
        out[name] = nbytes / (statistics.median(ms) / 1e3) / 1e9
    del host, dev
    torch.cuda.empty_cache()
    return out
