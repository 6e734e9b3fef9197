"""Saved events written back as a Kineto trace (`workbench.traces.kineto_export`), and HolisticTraceAnalysis opening
the committed headline arms' traces and a fresh CPU run's raw trace."""
import glob
import gzip
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from workbench.paths import REPO_ROOT
from workbench.traces import kineto_export

HEADLINE = os.path.join(REPO_ROOT, "profiles", "2026-11-23_h100_verdicts")
ARM = os.path.join(HEADLINE, "ab_traced", "kineto", "offload", "sync_reload")


def _events():
    rows = [("torch", "range", "wb/step", 0, 10_000, np.nan, 7.0, np.nan, np.nan),
            ("torch", "runtime", "cudaLaunchKernel", 100, 200, np.nan, 7.0, 1.0, np.nan),
            ("torch", "kernel", "gemm", 300, 2_300, 7.0, np.nan, 1.0, np.nan),
            ("torch", "memcpy", "HtoD", 2_400, 3_400, 8.0, np.nan, 2.0, 4096.0),
            ("torch", "sync", "stream_sync", 3_500, 3_600, 7.0, np.nan, np.nan, np.nan)]
    return pd.DataFrame(rows, columns=["source", "kind", "name", "start_ns", "end_ns", "stream", "tid", "correlation",
                                       "bytes"])


def test_each_event_becomes_one_kineto_event_on_its_track():
    doc = kineto_export.to_kineto(_events())
    ev = {e["name"]: e for e in doc["traceEvents"]}
    assert len(doc["traceEvents"]) == 5 and doc["distributedInfo"] == {"rank": 0}
    k = ev["gemm"]
    assert (k["cat"], k["pid"], k["tid"], k["ts"], k["dur"]) == ("kernel", 0, 7, 0.3, 2.0)
    assert k["args"] == {"correlation": 1, "External id": 1, "device": 0, "stream": 7}
    assert ev["Memcpy HtoD"]["cat"] == "gpu_memcpy" and ev["Memcpy HtoD"]["args"]["bytes"] == 4096
    assert ev["cudaLaunchKernel"]["pid"] == 1 and ev["cudaLaunchKernel"]["args"] == {"correlation": 1}
    assert ev["stream_sync"]["pid"] == 1 and ev["wb/step"]["cat"] == "user_annotation"  # host side


def test_the_committed_headline_exports_are_what_the_events_give(tmp_path):
    arms = sorted(glob.glob(os.path.join(HEADLINE, "*", "kineto", "*", "*", "*.pt.trace.json.gz")))
    assert len(arms) == 8  # baseline and optimized arm of packing, offload, moe and all
    src = os.path.join(HEADLINE, "ab_traced", "traces", "offload", "sync_reload.events.parquet")
    out = kineto_export.export(src, str(tmp_path / "x.json.gz"), steps=1)
    with gzip.open(out, "rt") as a, gzip.open(os.path.join(ARM, "sync_reload.pt.trace.json.gz"), "rt") as b:
        assert json.load(a) == json.load(b)


def test_a_bad_input_is_one_line(tmp_path, capsys):
    from workbench.cli import run_main
    assert run_main(kineto_export.main, [str(tmp_path / "nope.parquet")]) == 2
    assert "not a saved events file" in capsys.readouterr().err


def _hta(trace_dir):
    hta = pytest.importorskip("hta.trace_analysis")
    return hta.TraceAnalysis(trace_dir=str(trace_dir))


def test_hta_opens_a_committed_headline_arm_and_agrees_on_its_gpu_span():
    from workbench.traces.analysis import first_steps
    from workbench.traces.events import load_events

    ta = _hta(ARM)
    assert ta.t.get_ranks() == [0]
    b = ta.get_temporal_breakdown(visualize=False).iloc[0]
    ev = first_steps(load_events(os.path.join(HEADLINE, "ab_traced", "traces", "offload",
                                              "sync_reload.events.parquet")), 1)
    gpu = ev[ev["kind"].isin(["kernel", "memcpy"])]
    span_us = (gpu["end_ns"].max() - gpu["start_ns"].min()) / 1e3
    assert b["kernel_time(us)"] == pytest.approx(span_us, rel=1e-4)  # HTA's span of GPU work: the step's
    assert b["compute_time(us)"] > 0 and b["idle_time(us)"] > 0


def test_hta_opens_a_fresh_cpu_runs_raw_trace(tmp_path):
    pytest.importorskip("hta.trace_analysis")
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "workbench.ab", "--opt", "packing", "--device", "cpu", "--trace", "torch",
                        "--reps", "1", "--steps", "1", "--warmup", "0", "--out", str(out)], capture_output=True,
                       text=True, cwd=REPO_ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    arm = tmp_path / "rebuild"
    arm.mkdir()
    shutil.copy(out / "traces" / "packing" / "rebuild.pt.trace.json.gz", arm)
    ta = _hta(arm)
    assert ta.t.get_ranks() == [0] and len(ta.t.get_trace(0)) > 0
