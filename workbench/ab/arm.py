"""One arm on the device: its session (applied arms, batches on the device, an optimizer), fresh batch copies,
memory released between arms, the model parked on the CPU while a child process uses the GPU."""
from __future__ import annotations

import dataclasses
import gc

import torch


def _fresh(batches):
    # opt modules may write into batch.meta at collate time: give each arm its own copies
    return [dataclasses.replace(b, doc_lens=list(b.doc_lens), meta=dict(b.meta)) for b in batches]


class _Parked:
    """The model on the CPU while child processes use the GPU (nsys captures), back on `device` after: a child
    running an arm without checkpointing needs the memory the parent's copy would hold."""

    def __init__(self, model, device):
        self.model, self.device = model, torch.device(device)

    def __enter__(self):
        if self.device.type == "cuda":
            self.model.to("cpu")
            _free(self.device)
        return self

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            self.model.to(self.device)
        return False


class _Session:
    """One arm applied to the model, its batches on the device and its optimizer: `step(i, s)` runs one
    uninstrumented step on batch i (NVTX ranges only when the arm asks for them), or counted with `counter`, at
    `precision` (the run's, or the arm's own: `Combined.precision`)."""

    def __init__(self, model, batches, handle, lr, ranges: bool, precision: str):
        from workbench.step.harness import make_optimizer
        from workbench.instrument import Ranges

        self.model, self.batches, self.handle, self.precision = model, batches, handle, precision
        self.optimizer = make_optimizer(model, lr)
        self.ranges = Ranges(nvtx=ranges, profiler=False)

    def step(self, index: int, step: int, counter=None):
        from workbench.step.harness import train_step

        return train_step(self.model, self.batches[index], self.optimizer, step=step, ranges=self.ranges,
                          counter=counter, inputs_fn=self.handle.inputs_fn, precision=self.precision)


def _plain(v) -> bool:
    """JSON-friendly values only (handles may keep live objects in their info)."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return True
    if isinstance(v, (list, tuple)):
        return all(_plain(x) for x in v)
    if isinstance(v, dict):
        return all(isinstance(k, str) and _plain(x) for k, x in v.items())
    return False


def freeze_long_lived() -> None:
    """What a run holds before its first model is built (the imports: torch, transformers, the workbench; the plan)
    lives as long as the process: frozen (`gc.freeze`), so that each arm's collection (`_free`) walks only what the
    arms made. Without it each collection walked every object the imports made (~0.3 s of a CPU per arm, 14 arms in
    a tiny torchrun packing run)."""
    gc.collect()
    gc.freeze()


def _free(device) -> None:
    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()
