"""Synthetic run folders (results.csv, summary.json, meta.json, traces/<cmp>/<arm>.events.parquet) with known
answers, for the run diff and the gate: a layered trace whose kernels jitter from step to step, optionally with one
extra blocking readback per layer (a sync stall) in the forward pass."""
from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd

from synthetic_traces import Trace
from workbench.traces.events import save_events

COMPARISON, BASELINE_ARM, ARM = "packing", "rebuild", "cached"


def layered_trace(rng, *, layers=4, steps=8, gemm_us=50.0, elem_us=10.0, gap_us=4.0, jitter_us=1.0,
                  stall_us=0.0):
    """Per step and layer, forward then backward: a GEMM, an elementwise kernel right after it (no gap), then a
    launch gap before the next layer. `stall_us` > 0: in every forward layer a small DtoH readback runs under the
    GEMM's tail and the host blocks on it (cudaStreamSynchronize), so the GPU idles `stall_us` between the GEMM and
    the elementwise kernel: one sync stall per layer, charged to that layer's forward."""
    t = Trace()
    now = 0.0
    for _ in range(steps):
        step_row = len(t.rows)
        t.range("wb/step", now, now + 1)
        now += 2
        for pass_, order in (("fwd", range(layers)), ("bwd", reversed(range(layers)))):
            t.range(f"wb/{pass_}", now, now + 1)
            pass_row = len(t.rows) - 1
            for i in order:
                a = now
                g = gemm_us + rng.normal(0, jitter_us)
                e = elem_us + rng.normal(0, jitter_us / 4)
                t.range(f"wb/L{i:02d}/{pass_}", a, a + 1)
                row = len(t.rows) - 1
                t.launch(a + 0.1, "kernel", "sm90_xmma_gemm_bf16", a + 1, a + 1 + g)
                k = a + 1 + g
                if stall_us and pass_ == "fwd":
                    t.launch(a + 0.2, "memcpy", "DtoH", k - 0.5, k - 0.2, stream=9, nbytes=8)
                    t.runtime("cudaStreamSynchronize", a + 0.3, k + 0.1)
                    k += stall_us
                t.launch(k - 0.05, "kernel", "vectorized_elementwise_kernel", k, k + e)
                now = k + e + gap_us + rng.normal(0, jitter_us / 4) ** 2
                t.rows[row]["end_ns"] = int((k + e) * 1000)
            t.rows[pass_row]["end_ns"] = int(now * 1000)
        t.rows[step_row]["end_ns"] = int(now * 1000)
        now += 20
    return t.events()


GPU = {"type": "cuda", "name": "NVIDIA H100 80GB HBM3"}


def write_run(path, *, rng, reps=8, steps=2, step_ms=100.0, slowdown=1.0, rep_sd=0.005, step_sd=0.002,
              trace_kw: dict | None = None, arms=(BASELINE_ARM, ARM), device: dict = GPU, git_sha="c0ffee",
              run_offset=1.0) -> str:
    """A run folder of one comparison: timed step_ms rows (per rep a block effect, per step noise; the gated arm
    `slowdown` x slower; every step x `run_offset`, the whole run's shift) and, with `trace_kw`, a layered trace of
    every arm. Its summary names arms[0] the baseline and arms[1] the optimized arm; meta.json records `device`
    and `git_sha`."""
    os.makedirs(path, exist_ok=True)
    rows = []
    for rep in range(reps):
        for arm in arms:
            block = rng.normal(0, rep_sd)
            for s in range(steps):
                v = step_ms * run_offset * (slowdown if arm == ARM else 1.0) * np.exp(block + rng.normal(0, step_sd))
                rows.append(dict(run_id="syn", comparison=COMPARISON, arm=arm, rep=rep, batch=s % 2, step=s,
                                 metric="step_ms", value=v, unit="ms"))
    pd.DataFrame(rows).to_csv(os.path.join(path, "results.csv"), index=False)
    summary = {"comparisons": [{"name": COMPARISON, "baseline": {"arm": arms[0]},
                                "optimized": {"arm": arms[1]} if len(arms) > 1 else None}]}
    meta = {"status": "complete", "device": dict(device), "git_sha": git_sha, "args": {"opt": "packing", "reps": reps, "steps": steps, "batches": 2, "seed": 500,
                                           "trace": "torch", "only": None, "aa": False, "out": path},
            "protocol": {"reps": reps, "steps": steps, "warmup_min": 2}}
    for name, obj in (("summary.json", summary), ("meta.json", meta)):
        with open(os.path.join(path, name), "w") as f:
            json.dump(obj, f)
    if trace_kw is not None:
        d = os.path.join(path, "traces", COMPARISON)
        os.makedirs(d, exist_ok=True)
        for arm in arms:
            save_events(layered_trace(rng, **trace_kw), os.path.join(d, arm))
    return path
