"""An events frame (`workbench.traces.events`) written back as a Kineto-format Chrome trace (`.json.gz`), the format
torch.profiler writes and HTA (HolisticTraceAnalysis), TensorBoard's profiler plugin and Perfetto open.

    workbench kineto_export EVENTS [EVENTS ...] [--steps N]   # each X.events.parquet -> X.kineto.json.gz

For run folders that keep only the parsed events: the export holds every event the frame holds (host ranges, runtime
calls, kernels, copies, syncs, with their streams and correlation ids), not the raw trace's extra fields (shapes,
call stacks, flow events). Timestamps are the frame's, in microseconds as Kineto writes them.
"""
from __future__ import annotations

import gzip
import json
import math
import os
import sys

import pandas as pd

SUFFIX = ".kineto.json.gz"
"""What an export's file name ends with (beside its `.events.parquet`)."""

_CATEGORY = {"range": "user_annotation", "runtime": "cuda_runtime", "kernel": "kernel", "memcpy": "gpu_memcpy",
             "sync": "cuda_sync"}
"""Kineto's category of each event kind."""
_GPU_KINDS = ("kernel", "memcpy")
_HOST_PID, _GPU_PID = 1, 0


def _num(v):
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


def to_kineto(events: pd.DataFrame, *, rank: int = 0) -> dict:
    """The Chrome-trace dict of `events`: one complete event ("ph": "X") per row, GPU work (kernels, copies) on process
    0 with one thread per stream, host events (ranges, runtime calls, syncs) on process 1 with their threads."""
    out = []
    for r in events.itertuples(index=False):
        gpu = r.kind in _GPU_KINDS and _num(r.stream) is not None
        args = {}
        if _num(r.correlation) is not None:
            args["correlation"] = int(r.correlation)
            if r.kind == "kernel" or r.kind == "memcpy":
                args["External id"] = int(r.correlation)
        if gpu:
            args.update(device=0, stream=int(r.stream))
        if _num(r.bytes) is not None:
            args["bytes"] = int(r.bytes)
        name = f"Memcpy {r.name}" if r.kind == "memcpy" else r.name  # Kineto's memcpy names, which HTA classifies
        ev = {"ph": "X", "cat": _CATEGORY.get(r.kind, r.kind), "name": name,
              "pid": _GPU_PID if gpu else _HOST_PID,
              "tid": int(r.stream) if gpu else int(_num(r.tid) or 0),
              "ts": r.start_ns / 1000.0, "dur": max(r.end_ns - r.start_ns, 0) / 1000.0, "args": args}
        if r.kind == "range" and str(r.name).startswith("ProfilerStep#"):
            ev["cat"] = "cpu_op"
        out.append(ev)
    return {"schemaVersion": 1, "distributedInfo": {"rank": rank}, "deviceProperties": [],
            "displayTimeUnit": "ms", "traceEvents": out}


def export(events_path: str, out_path: str | None = None, *, steps: int | None = None) -> str:
    """Write `events_path`'s frame (its first `steps` traced steps, `traces.analysis.first_steps`; None: all) as a
    Kineto trace beside it (`SUFFIX`), or at `out_path`; returns the path."""
    from workbench.traces.analysis import first_steps
    from workbench.traces.events import load_events

    out_path = out_path or events_path.rsplit(".events.", 1)[0] + SUFFIX
    events = load_events(events_path)
    doc = to_kineto(first_steps(events, steps) if steps else events)
    with gzip.open(out_path, "wt", encoding="utf-8", compresslevel=9) as f:
        json.dump(doc, f, separators=(",", ":"))
    return out_path


def main(argv=None) -> int:
    from workbench.cli import parser
    from workbench.errors import WorkbenchError

    p = parser("workbench kineto_export", __doc__.split("\n\n")[0])
    p.add_argument("events", nargs="+", help="saved events files (X.events.parquet or X.events.csv.gz)")
    p.add_argument("--steps", type=int, default=None, help="only the first N traced steps (default: every step)")
    a = p.parse_args(argv)
    if a.steps is not None and a.steps < 1:
        raise WorkbenchError(f"--steps {a.steps}: give 1 or more")
    for path in a.events:
        if not os.path.isfile(path) or ".events." not in os.path.basename(path):
            raise WorkbenchError(f"{path}: not a saved events file (X.events.parquet / X.events.csv.gz)")
    for path in a.events:
        print(export(path, steps=a.steps))
    return 0


if __name__ == "__main__":
    from workbench.cli import run_main
    sys.exit(run_main(main))
