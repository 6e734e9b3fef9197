"""The A/B under torchrun + FSDP2 (workbench/ab/distributed/) on the CPU with gloo, and the collective wait estimator
(workbench/traces/dist_waits.py) on synthetic per-rank events.

The end-to-end tests run `python -m workbench.ab` under `python -m torch.distributed.run --standalone
--nproc-per-node 2` on a tiny preset (a few seconds of work per run on 2 cores; the three runs one after another in
the session's one launch, conftest.TorchrunSeries): per-rank rows, one folder written by rank 0, the FSDP2 run
against one process over the global batch (and the negative control: a rank that drops its batch), and a failing
rank (one `failed: rank 1: ...` line on rank 0, meta.json failed)."""
import csv
import json
import os

import pandas as pd
import pytest

from workbench.traces import dist_waits
from workbench.ab import distributed

TINY = ["--opt", "packing", "--model", "tiny-llama", "--tokens", "64", "--steps", "1", "--reps", "1", "--warmup",
        "0", "--warmup-max", "0", "--batches", "1", "--device", "cpu"]


def _rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def _json(path):
    with open(path) as f:
        return json.load(f)


# --- end to end: torchrun, 2 ranks, gloo --------------------------------------------------------------------------

_RUNS = {"good": ({}, False), "drop": ({distributed.DROP_ENV: "1"}, False),
         "fail": ({distributed.FAIL_ENV: "1:3"}, True)}
"""name -> (environment, last): the three runs, one after another in the session's one torchrun launch (conftest's
TorchrunSeries; the failing one last: its rank 0 may end its process)."""


def early_start(tmp_path_factory, items):
    """At collection (conftest's pytest_collection_finish): the runs join the session's torchrun launch, which runs
    beside the tests before this file."""
    if any("launches" in item.fixturenames for item in items):
        from conftest import torchrun_series
        series = torchrun_series(tmp_path_factory)
        for name, (env, last) in _RUNS.items():
            series.add(name, "workbench.ab", [*TINY, "--out", series.root / name / "run"], env, last)
        return series


@pytest.fixture(scope="module")
def launches(tmp_path_factory):
    from conftest import early
    return early(__name__) or early_start(tmp_path_factory, [type("I", (), {"fixturenames": ["launches"]})])


def _result(launches, name):
    r = launches.result(name)
    return launches.root / name / "run", r


@pytest.fixture(scope="module")
def good_run(launches):
    return _result(launches, "good")


def test_torchrun_runs_and_rank0_writes_one_folder(good_run):
    out, r = good_run
    assert r["rcs"] == [0, 0], r["stderr"][-3000:] + r["logs"][-2000:]
    # one JSON summary line on stdout (rank 0 alone prints it)
    js = [ln for ln in r["stdout"].splitlines() if ln.startswith("{")]
    assert len(js) == 1, r["stdout"][-2000:]
    last = json.loads(js[0])
    assert last["complete"] and last["status"] == "complete"
    # the folder: the run files, written once; no temp files, no per-rank copies of them
    names = sorted(os.listdir(out))
    assert names == ["meta.json", "results.csv", "summary.json"], names
    meta = _json(out / "meta.json")
    assert meta["status"] == "complete"
    assert meta["distributed"]["world_size"] == 2 and meta["distributed"]["backend"] == "gloo"
    assert meta["command"].startswith("torchrun --nproc-per-node=2 -m workbench.ab")
    with open(out / "results.csv") as f:
        text = f.read()
    assert text.count("run_id,comparison") == 1  # one header: not two writers appending
    rows = _rows(out / "results.csv")
    assert rows and all(len(r) == len(rows[0]) and None not in r for r in rows)
    assert {r["run_id"] for r in rows} == {last["run_id"]}


def test_rows_per_rank(good_run):
    out, r = good_run
    assert r["rcs"] == [0, 0], r["stderr"][-3000:]
    rows = _rows(out / "results.csv")
    arms = ("rebuild", "cached")
    for rank in ("0", "1"):
        for arm in arms:
            mine = [r for r in rows if r["rank"] == rank and r["arm"] == arm]
            metrics = {r["metric"] for r in mine}
            assert {"step_ms", "dp_step_ms", "syncs", "instrumented_step_ms", "loss"} <= metrics, (rank, arm, metrics)
    # the data-parallel step is the slowest rank's: the same on both ranks, at least each rank's own
    for arm in arms:
        own = {r["rank"]: float(r["value"]) for r in rows if r["arm"] == arm and r["metric"] == "step_ms"}
        dp = {r["rank"]: float(r["value"]) for r in rows if r["arm"] == arm and r["metric"] == "dp_step_ms"}
        assert dp["0"] == dp["1"] == pytest.approx(max(own.values()))
    # ranks draw different batches: different losses
    loss = {r["rank"]: float(r["value"]) for r in rows if r["arm"] == "rebuild" and r["metric"] == "loss"}
    assert loss["0"] != loss["1"]
    s = _json(out / "summary.json")
    c = s["comparisons"][0]
    assert set(c["ranks"]) == {"0", "1"}
    for rank in ("0", "1"):
        for arm in arms:
            a = c["ranks"][rank][arm]
            assert a["step_ms"] > 0 and a["syncs_per_step"] is not None
    assert c["speedup"] is not None and c["baseline"]["step_ms"] == pytest.approx(
        max(c["ranks"][r]["rebuild"]["dp_step_ms"] for r in ("0", "1")))
    assert c["distributed"]["speedup_basis"].startswith("max across ranks")


def test_fsdp2_matches_one_process_over_the_global_batch(good_run):
    out, r = good_run
    assert r["rcs"] == [0, 0], r["stderr"][-3000:]
    c = _json(out / "summary.json")["comparisons"][0]
    e = c["distributed"]["equivalence_single_process"]
    assert e["equivalent"] is True, e
    assert e["grad_max_rel_l2"] <= e["rtol"] and max(e["loss_rel_diff_per_rank"]) <= e["rtol"]
    assert c["equivalent"] is True  # and the arms against their baseline, on the sharded model


def test_negative_control_a_rank_that_drops_its_batch_fails(launches):
    run, r = _result(launches, "drop")
    assert r["rcs"][0] == 1, r["stderr"][-3000:] + r["logs"][-2000:]  # rank 0's status is the run's
    s = _json(run / "summary.json")
    e = s["comparisons"][0]["distributed"]["equivalence_single_process"]
    assert e["equivalent"] is False and e["dropped_batch_ranks"] == [1]
    assert e["grad_max_rel_l2"] > 100 * e["rtol"]
    assert _json(run / "meta.json")["status"] == "failed"
    assert any("differs from one process" in f for f in s["failures"])


def test_failing_rank_one_line_on_rank0_and_folder_marked(launches):
    # rank 1 raises at its 3rd step: inside the arms' equivalence steps, with rank 0 in FSDP2's collectives
    run, r = _result(launches, "fail")
    assert r["launch_rc"] not in (0, None) and r["rcs"][0] != 0, r  # rank 0 ended by its watcher: rcs[0] None
    # the one line, on rank 0 (rank 0's stderr comes first; rank 1 says nothing)
    lines = [ln for ln in r["stderr"].splitlines() if ln.startswith("failed: rank")]
    assert len(lines) == 1, r["stderr"][-3000:] + r["logs"][-2000:]
    rank0 = (launches.root / "fail" / "rank0.stderr").read_text()
    assert lines[0].startswith("failed: rank 1: RuntimeError: injected failure") and lines[0] in rank0
    meta = _json(run / "meta.json")
    assert meta["status"] == "failed" and "rank 1" in meta["reason"]
    assert _json(run / "summary.json")["complete"] is False
    with open(run / "errors.log") as f:
        assert "injected failure" in f.read()


# --- without torchrun: untouched ------------------------------------------------------------------------------------

def test_not_launched_without_torchrun_env(monkeypatch):
    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    assert not distributed.launched()
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    assert not distributed.launched()
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert distributed.launched()


def test_budget_and_nsys_refused_under_torchrun():
    from workbench import ab
    from workbench.errors import WorkbenchError
    with pytest.raises(WorkbenchError, match="budget"):
        distributed.check_args(ab.parse_args(["--budget-s", "10"]))
    with pytest.raises(WorkbenchError, match="nsys"):
        distributed.check_args(ab.parse_args(["--trace", "nsys"]))


def test_rank_writer(tmp_path):
    W = distributed.RankWriter
    w0 = W(str(tmp_path / "run"), "rid", rank=0)
    w1 = W(str(tmp_path / "run"), "rid", rank=1)
    try:
        w1.add("c", "a", "step_ms", 1.0, "ms")
        w1.add_sample("c", {"arm": "a", "rep": 0, "step": 0, "batch": 0, "step_ms": 5.0, "rank_step_ms": 3.0})
        assert sorted(os.listdir(tmp_path / "run")) == ["RUNNING", "meta.json"]  # rank 0's; rank 1 writes nothing there
        rows = w1.take_rows()
        assert {r["rank"] for r in rows} == {1}
        assert {(r["metric"], r["value"]) for r in rows} >= {("step_ms", 3.0), ("dp_step_ms", 5.0)}
        w0.rows.extend(rows)
        w0.add("c", "a", "step_ms", 2.0, "ms")
        w0.flush()
        df = pd.read_csv(tmp_path / "run" / "results.csv")
        assert "rank" in df.columns and set(df["rank"]) == {0, 1}
        p = w1.path("traces", "cmp", "arm")
        assert p == os.path.join(str(tmp_path / "run"), "traces", "cmp", "arm.rank1")
    finally:
        w1.close()


# --- the wait estimator on synthetic events --------------------------------------------------------------------------

def _ev(rows):
    from workbench.traces.events import COLUMNS
    df = pd.DataFrame([{**dict.fromkeys(COLUMNS), "source": "torch", **r} for r in rows], columns=COLUMNS)
    return df


def _k(name, start, end, layer=None, pass_=None):
    return {"kind": "kernel", "name": name, "start_ns": start, "end_ns": end, "stream": 7.0, "layer": layer,
            "pass": pass_}


AG, RS = "ncclDevKernel_AllGather_RING_LL", "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL"


def test_wait_is_the_start_skew_of_matched_collectives():
    # rank 1 arrives 300 ns late at the first all-gather, rank 0 400 ns late at the reduce-scatter
    r0 = _ev([_k(AG, 1000, 2000, "L00", "fwd"), _k("gemm", 2000, 2500, "L00", "fwd"),
              _k(RS, 5400, 6000, "L00", "bwd")])
    r1 = _ev([_k(AG, 1300, 2010, "L00", "fwd"), _k(RS, 5000, 6005, "L00", "bwd")])
    w, unmatched = dist_waits.collective_waits({0: r0, 1: r1})
    assert unmatched == {}
    assert len(w) == 4  # two collectives x two ranks; the gemm is not a collective
    g = w.set_index(["rank", "kind"])
    assert g.loc[(0, "AllGather"), "wait_ns"] == 300 and g.loc[(1, "AllGather"), "wait_ns"] == 0
    assert g.loc[(0, "AllGather"), "transfer_ns"] == 700 and g.loc[(1, "AllGather"), "transfer_ns"] == 710
    assert g.loc[(1, "ReduceScatter"), "wait_ns"] == 400 and g.loc[(0, "ReduceScatter"), "wait_ns"] == 0
    assert g.loc[(0, "AllGather"), "last_rank"] == 1 and g.loc[(0, "ReduceScatter"), "last_rank"] == 0
    assert (w["wait_ns"] + w["transfer_ns"] == w["dur_ns"]).all()

    by = dist_waits.wait_by_layer(w, steps=1)
    row = by[(by["rank"] == 0) & (by["pass"] == "fwd")].iloc[0]
    assert row["wait_ms"] == pytest.approx(300e-6) and row["collectives"] == 1
    per = dist_waits.wait_per_rank(w)
    assert per[0]["wait_ms"] == pytest.approx(300e-6) and per[1]["wait_ms"] == pytest.approx(400e-6)
    assert per[0]["last_to_arrive"] == 1 and per[1]["last_to_arrive"] == 1


def test_matching_by_order_per_kind_and_unmatched():
    # the kinds interleave differently in time on the two ranks; matching is by order within a kind
    r0 = _ev([_k(AG, 0, 100), _k(AG, 200, 300), _k(RS, 400, 500)])
    r1 = _ev([_k("ncclDevKernel_AllGather_RING_LL128", 50, 120), _k(RS, 130, 480), _k(AG, 250, 320),
              _k(AG, 600, 700)])
    w, unmatched = dist_waits.collective_waits({0: r0, 1: r1})
    assert unmatched == {"AllGather": 1}
    ag = w[(w["kind"] == "AllGather")].set_index(["rank", "seq"])
    assert ag.loc[(0, 0), "wait_ns"] == 50 and ag.loc[(0, 1), "wait_ns"] == 50
    rs = w[w["kind"] == "ReduceScatter"].set_index("rank")
    assert rs.loc[1, "wait_ns"] == 270 and rs.loc[0, "wait_ns"] == 0
    # the wait never exceeds the kernel's duration (clock noise, a skew larger than the kernel)
    r0 = _ev([_k(AG, 0, 10)])
    r1 = _ev([_k(AG, 50, 60)])
    w, _ = dist_waits.collective_waits({0: r0, 1: r1})
    assert w.set_index("rank").loc[0, "wait_ns"] == 10


def test_wait_table_baseline_against_optimized_and_empty_cases():
    r0 = _ev([_k(AG, 0, 100, "L00", "fwd"), _k(AG, 200, 300, "L01", "fwd")])
    r1 = _ev([_k(AG, 40, 100, "L00", "fwd"), _k(AG, 210, 300, "L01", "fwd")])
    wb, _ = dist_waits.collective_waits({0: r0, 1: r1})
    r1b = _ev([_k(AG, 5, 100, "L00", "fwd"), _k(AG, 200, 300, "L01", "fwd")])
    wo, _ = dist_waits.collective_waits({0: r0, 1: r1b})
    t = dist_waits.wait_table({"base": dist_waits.wait_by_layer(wb), "opt": dist_waits.wait_by_layer(wo)},
                              "base", "opt")
    t = t.set_index("layer")
    assert t.loc["L00", "base:wait_ms"] == pytest.approx(40e-6 / 2)  # mean over ranks (rank 1 waited 0)
    assert t.loc["L00", "opt:wait_ms"] == pytest.approx(5e-6 / 2)
    assert t.loc["L01", "base:wait_ms_max"] == pytest.approx(10e-6)
    # CPU traces (no NCCL kernels): empty, not an error
    w, unmatched = dist_waits.collective_waits({0: _ev([_k("gemm", 0, 1)]), 1: _ev([])})
    assert len(w) == 0 and unmatched == {}
    assert len(dist_waits.wait_by_layer(w)) == 0


def test_absolute_events_and_trace_base(tmp_path):
    import gzip
    p = tmp_path / "t.pt.trace.json.gz"
    with gzip.open(p, "wt") as f:
        json.dump({"baseTimeNanoseconds": 1_000_000_000, "traceEvents": []}, f)
    assert dist_waits.trace_base_ns(str(p)) == 1_000_000_000
    ev = _ev([_k(AG, 5, 10)])
    a = dist_waits.absolute_events(ev, 1_000_000_000)
    assert a["start_ns"].iloc[0] == 1_000_000_005 and a["end_ns"].iloc[0] == 1_000_000_010
