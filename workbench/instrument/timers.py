"""Step timers (CUDA events on a GPU, perf_counter on CPU) and peak memory."""
from __future__ import annotations

import time

import torch


class StepTimer:
    """Marks named points in a step; `split_ms()` gives the milliseconds between consecutive marks.

    On CUDA the marks are events on the current stream, read after one synchronize at the end of the step
    (outside the counted region), so timing adds no sync inside the step.
    """

    def __init__(self, device: torch.device):
        self.cuda = torch.device(device).type == "cuda"
        self.marks: list[tuple[str, object]] = []

    def mark(self, name: str) -> None:
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self.marks.append((name, ev))
        else:
            self.marks.append((name, time.perf_counter()))

    def split_ms(self) -> dict[str, float]:
        """{"<name>": ms from the previous mark to this one} for every mark but the first."""
        if self.cuda:
            self.marks[-1][1].synchronize()
        out = {}
        for (_, a), (name, b) in zip(self.marks, self.marks[1:]):
            out[name] = a.elapsed_time(b) if self.cuda else (b - a) * 1e3
        self.marks = []
        return out


def reset_peak_mem(device: torch.device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_mem_mib(device: torch.device) -> float:
    """Peak allocated device memory since the last reset (CUDA); NaN on CPU, where it is not tracked."""
    if torch.device(device).type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return float("nan")
