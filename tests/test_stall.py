"""meta_stall_ms on hand-built Chrome traces whose GPU idle is known exactly."""
import gzip
import json
import math

import pytest

from workbench.traces.stall import _covered, _merge, meta_stall_ms

HOST, BWD_THREAD, STREAM = 10, 20, 7


def X(name, ts, dur, cat, tid=HOST, pid=1, **args):
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": pid, "tid": tid, "args": args}


def launch(ts, corr=None, tid=HOST, name="cudaLaunchKernel"):
    return X(name, ts, 3, "cuda_runtime", tid=tid, **({} if corr is None else {"correlation": corr}))


def kernel(ts, dur, corr=None, name="k"):
    return X(name, ts, dur, "kernel", tid=STREAM, pid=0, **({} if corr is None else {"correlation": corr}))


def trace():
    ev = [
        # build 1: forward of L03 on the main thread, meta range [100, 150]
        X("wb/L03/fwd", 90, 210, "user_annotation"),
        X("wb/L03/attn/meta", 100, 50, "user_annotation"),
        kernel(80, 40, corr=900, name="queued"),        # overlaps the window start: 20 us inside [100, 190]
        launch(105, corr=1), kernel(125, 5, corr=1),    # the build's own kernel: 5 us
        launch(140, corr=3), kernel(135, 3, corr=3),    # launched inside the range: 3 us busy, not "next"
        X("Memcpy DtoH (Device -> Pinned)", 132, 2, "gpu_memcpy", tid=STREAM, pid=0, correlation=4),  # 2 us
        launch(160, corr=2, name="cudaLaunchKernelExC"), kernel(190, 10, corr=2, name="next1"),
        # window [100, 190] = 90 us, busy 20 + 5 + 3 + 2 = 30 us -> idle 60 us
        # build 2: recompute of L03 on the backward thread, meta [410, 430]
        X("wb/bwd", 380, 400, "user_annotation", tid=BWD_THREAD),
        X("wb/L03/recompute", 400, 200, "user_annotation", tid=BWD_THREAD),
        X("wb/L03/attn/meta", 410, 20, "user_annotation", tid=BWD_THREAD),
        launch(435, corr=99, tid=BWD_THREAD),           # its kernel is not in the trace: skipped
        launch(440, tid=BWD_THREAD),                    # no correlation arg: linked through the flow events
        {"ph": "s", "id": 77, "pid": 1, "tid": BWD_THREAD, "ts": 440, "cat": "ac2g", "name": "ac2g"},
        kernel(480, 5, name="next2"),
        {"ph": "f", "id": 77, "pid": 0, "tid": STREAM, "ts": 480, "cat": "ac2g", "name": "ac2g", "bp": "e"},
        # window [410, 480] = 70 us, nothing on the GPU -> idle 70 us
        # build 3: inside wb/bwd only, nothing launched afterwards -> unmeasured
        X("wb/L01/attn/meta", 700, 10, "user_annotation", tid=BWD_THREAD),
        X("wb/bwd", 690, 100, "user_annotation", tid=BWD_THREAD),
        X("aten::mm", 100, 5, "cpu_op"),
    ]
    return {"traceEvents": ev}


def test_known_idle_per_build():
    r = meta_stall_ms(trace())
    rows = r["rows"]
    assert [x["layer"] for x in rows] == ["L03", "L03", "L01"]
    assert [x["pass"] for x in rows] == ["fwd", "recompute", "recompute"]
    a, b, c = rows
    assert a["host_ms"] == pytest.approx(0.050)
    assert a["window_ms"] == pytest.approx(0.090)
    assert a["gpu_busy_ms"] == pytest.approx(0.030)
    assert a["gpu_idle_ms"] == pytest.approx(0.060)
    assert a["next_kernel"] == "next1"
    assert b["window_ms"] == pytest.approx(0.070)
    assert b["gpu_busy_ms"] == pytest.approx(0.0)
    assert b["gpu_idle_ms"] == pytest.approx(0.070)
    assert b["next_kernel"] == "next2"
    assert c["gpu_idle_ms"] is None
    assert r["n"] == 3 and r["n_measured"] == 2
    assert r["s_stall_ms"] == pytest.approx(0.065)
    assert r["median_gpu_idle_ms"] == pytest.approx(0.065)
    assert r["by_pass"]["fwd"]["mean_gpu_idle_ms"] == pytest.approx(0.060)
    assert r["by_pass"]["recompute"]["n"] == 1
    assert r["why"] is None


def test_kernel_covering_whole_window_means_no_idle():
    ev = [X("wb/L00/attn/meta", 100, 10, "user_annotation"), kernel(50, 200, corr=1, name="long"),
          launch(120, corr=2), kernel(260, 1, corr=2)]
    # window [100, 260]: "long" covers [100, 250] -> idle 10 us
    (row,) = meta_stall_ms({"traceEvents": ev})["rows"]
    assert row["gpu_idle_ms"] == pytest.approx(0.010)
    assert row["pass"] is None


def test_gz_path_and_list_input(tmp_path):
    p = tmp_path / "t.json.gz"
    with gzip.open(p, "wt") as f:
        json.dump(trace(), f)
    assert meta_stall_ms(str(p))["s_stall_ms"] == pytest.approx(0.065)
    assert meta_stall_ms(trace()["traceEvents"])["s_stall_ms"] == pytest.approx(0.065)


def test_cpu_trace_degrades_to_nan():
    ev = [e for e in trace()["traceEvents"] if e.get("cat") in ("user_annotation", "cpu_op", "cuda_runtime")]
    r = meta_stall_ms({"traceEvents": ev})
    assert r["n"] == 3 and r["n_measured"] == 0
    assert math.isnan(r["s_stall_ms"]) and "no GPU" in r["why"]
    assert meta_stall_ms({"traceEvents": []})["why"].startswith("no wb/")


def test_covered_clips_both_ends():
    m = _merge([(0, 10), (5, 20), (30, 40)])
    assert _covered(m, 8, 35) == pytest.approx(12 + 5)
    assert _covered(m, 21, 29) == 0.0
    assert _covered(m, 40, 50) == 0.0
