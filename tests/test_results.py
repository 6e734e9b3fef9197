"""workbench.results (run folder, atomic writes, long-format CSV) and workbench.report (tables, figures)."""
import csv
import dataclasses
import json
import os

import pytest

from workbench import report
from workbench.harness import StepRecord
from workbench.results import (ENV_COLUMNS, RESULT_COLUMNS, RunWriter, atomic_write_json, load_run, new_run_id,
                               step_stats)


def _rec(step, ms):
    known = dict(step=step, step_ms=ms, fwd_ms=ms / 3, bwd_ms=ms / 2, opt_ms=ms / 6, syncs=2, syncs_declared=0,
                 cuda_sync_warnings=None, peak_mem_mib=float("nan"), tokens=128, loss=5.5)
    # fields the harness adds later (attribution dicts, ...) get an empty value
    return StepRecord(**{f.name: known.get(f.name, {}) for f in dataclasses.fields(StepRecord)})


def test_run_writer_files(tmp_path):
    w = RunWriter(str(tmp_path), "rid", argv=["python", "-m", "workbench.ab", "--opt", "packing"],
                  env={"device": "cpu", "model": "tiny-qwen3"}, extra_meta={"device": {"type": "cpu"}})
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["status"] == "running" and meta["command"] == "python -m workbench.ab --opt packing"
    assert meta["versions"]["torch"] and "python" in meta["versions"]
    w.add_steps("packing", "rebuild", 0, [_rec(0, 10.0), _rec(1, 12.0)], layers=2)
    w.add("packing", "cached", "speedup", 1.5, "x")
    w.finish("complete", nvml={})
    df, summary, meta = load_run(str(tmp_path))
    assert list(df.columns) == RESULT_COLUMNS + ENV_COLUMNS
    assert meta["status"] == "complete" and meta["ended"]
    assert summary == {}
    steps = df[df["metric"] == "step_ms"]
    assert steps["value"].tolist() == [10.0, 12.0] and set(steps["unit"]) == {"ms"}
    assert set(df["model"]) == {"tiny-qwen3"} and set(df[df["metric"] == "step_ms"]["layers"]) == {2}
    # None values (cuda_sync_warnings on CPU) are not written; NaN (peak memory on CPU) is an empty cell
    assert "cuda_sync_warnings" not in set(df["metric"])
    assert df[df["metric"] == "peak_mem_mib"]["value"].isna().all()
    assert not [p for p in os.listdir(tmp_path) if ".tmp" in p]


def test_interrupted_flush_keeps_previous_file(tmp_path, monkeypatch):
    w = RunWriter(str(tmp_path), "rid")
    w.add("packing", "rebuild", "step_ms", 1.0, "ms", rep=0, step=0)
    w.flush()
    before = (tmp_path / "results.csv").read_text()
    w.add("packing", "cached", "step_ms", 2.0, "ms", rep=0, step=0)

    def boom(self, row):
        raise KeyboardInterrupt
    monkeypatch.setattr(csv.DictWriter, "writerow", boom)
    with pytest.raises(KeyboardInterrupt):
        w.flush()
    assert (tmp_path / "results.csv").read_text() == before  # the half-written temp file never replaced it


def test_atomic_json_strict(tmp_path):
    p = str(tmp_path / "s.json")
    atomic_write_json(p, {"a": float("nan"), "b": [1.0, float("inf")], "c": {1: 2}})
    assert json.loads(open(p).read()) == {"a": None, "b": [1.0, None], "c": {"1": 2}}


def test_step_stats_and_run_id():
    s = step_stats([1.0, 2.0, 3.0, 4.0, 5.0, None, float("nan")])
    assert s == {"median": 3.0, "p20": 1.8, "p80": 4.2, "n": 5}
    assert step_stats([])["n"] == 0
    assert new_run_id("packing-cpu") != new_run_id("packing-cpu")


def _summary():
    arm = dict(step_ms=10.0, step_ms_p20=9.0, step_ms_p80=11.0, n=4, fwd_ms=3.0, bwd_ms=6.0, syncs_per_step=8.0,
               peak_mem_mib=None, tokens_per_s=1000.0, loss=5.5, status="ok")
    return {"opt": "packing", "model": "tiny-qwen3", "layers": 2, "tokens": 128, "attn": "sdpa",
            "baseline": {**arm, "arm": "rebuild", "equivalent": True, "bitwise": True},
            "optimized": {**arm, "arm": "cached", "step_ms": 8.0, "syncs_per_step": 2.0, "equivalent": True,
                          "bitwise": False},
            "others": [{**arm, "arm": "precomputed", "status": "failed", "error": "out of memory"}],
            "speedup": 1.25, "equivalent": True,
            "savings_model": {"formula": "(L-1)*s", "predicted_ms": None, "measured_ms": 2.0, "inputs": {},
                              "reason": "no trace"}}


def test_comparison_table():
    t = report.comparison_table(_summary())
    lines = t.splitlines()
    assert lines[0].startswith("packing: tiny-qwen3")
    assert "rebuild" in lines[2] and "ref" in lines[2]
    assert "cached" in lines[3] and "yes" in lines[3] and "8.00" in lines[3]
    assert "failed" in lines[4]
    assert "speedup 1.250x" in t and "measured 2.00 ms" in t and "(no trace)" in t


def test_figures_from_results(tmp_path):
    w = RunWriter(str(tmp_path), "rid")
    for rep in range(2):
        w.add_steps("packing", "rebuild", rep, [_rec(0, 10.0 + rep)])
        w.add_steps("packing", "cached", rep, [_rec(0, 8.0 + rep)])
    w.finish("complete")
    df, _, _ = load_run(str(tmp_path))
    st = report.step_times(df).set_index("arm")
    assert st.loc["cached", "step_ms"] == 8.5 and st.loc["rebuild", "n"] == 2
    fig = report.step_time_figure(df)
    assert len(fig.data) == 2
    sf = report.savings_frame({"comparisons": [_summary()]})
    assert sf.loc[0, "measured_ms"] == 2.0
