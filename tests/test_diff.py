"""The run diff (`workbench.compare.rundiff`, `workbench diff`): A/A traces flag (almost) nothing, an injected sync
per layer is flagged as sync_stall in exactly those layers, the components close on the step change, bad input is
one line and exit 2."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from synthetic_runs import ARM, COMPARISON, write_run
from workbench.compare import rundiff_cli as diff, rundiff
from workbench.cli import run_main
from workbench.traces.events import load_events

TRACED = os.path.join(os.path.dirname(__file__), "..", "profiles", "2026-11-23_h100_verdicts", "ab_traced")
LAYERS = 4


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    rng = np.random.default_rng(0)
    root = tmp_path_factory.mktemp("runs")
    a = write_run(str(root / "a"), rng=rng, trace_kw=dict(layers=LAYERS))
    aa = write_run(str(root / "aa"), rng=rng, trace_kw=dict(layers=LAYERS))
    sync = write_run(str(root / "sync"), rng=rng, trace_kw=dict(layers=LAYERS, stall_us=5.0))
    return a, aa, sync


def _flagged(d):
    return [(r["component"], r["layer"], r["pass"]) for r in d["rows"] if r["flagged"]]


@pytest.mark.parametrize("by", ["component", "layer"])
def test_synthetic_aa_flags_at_most_5pct(runs, by):
    d = rundiff.diff_runs(runs[0], runs[1], by=by)
    assert len(_flagged(d)) <= 0.05 * len(d["rows"])
    assert d["comparison"] == COMPARISON and d["arm"] == ARM  # the summary's optimized arm by default


@pytest.mark.parametrize("arm", ["sync_reload", "none"])
def test_committed_trace_split_in_halves_flags_at_most_5pct(arm):
    steps = rundiff.component_steps(load_events(rundiff.trace_path(TRACED, "offload", arm)), by_layer=True)
    for a, b in ((steps.iloc[0::2], steps.iloc[1::2]), (steps.iloc[: len(steps) // 2], steps.iloc[len(steps) // 2:])):
        d = rundiff.diff_tables(a, b)
        assert len(d["rows"]) > 20
        assert sum(r["flagged"] for r in d["rows"]) <= 0.05 * len(d["rows"])


def test_injected_sync_per_layer_is_sync_stall_in_those_layers_only(runs):
    d = rundiff.diff_runs(runs[0], runs[2], by="layer")
    assert sorted(_flagged(d)) == [("sync_stall", f"L{i:02d}", "fwd") for i in range(LAYERS)]
    for r in rundiff.moved(d):
        assert r["delta_ms"] == pytest.approx(0.005, abs=1e-6) and r["ci95"][0] > 0
    step = d["traced"]["delta_ms"]
    assert step > 0 and abs(d["closure"]["residual_ms"]) <= 0.10 * abs(step)
    c = rundiff.diff_runs(runs[0], runs[2], by="component")
    assert _flagged(c) == [("sync_stall", "", "")]
    assert abs(c["closure"]["residual_ms"]) <= 0.10 * abs(c["traced"]["delta_ms"])


def test_welch_matches_scipy_and_handles_constant_samples():
    w = rundiff.welch([1.0, 2.0, 3.0], [2.0, 3.5, 4.0])
    assert w["delta_ms"] == pytest.approx(3.1666667 - 2.0) and w["ci95"][0] < w["delta_ms"] < w["ci95"][1]
    assert rundiff.welch([1.0, 1.0], [2.0, 2.0]) == {"delta_ms": 1.0, "ci95": [1.0, 1.0], "p": 0.0, "n_a": 2, "n_b": 2}
    assert rundiff.welch([1.0], [2.0])["p"] is None


def test_timed_change_uses_reps_as_units(runs):
    d = rundiff.diff_runs(runs[0], runs[2])
    assert d["timed"]["n_a"] == 8 and d["timed"]["n_b"] == 8  # 8 reps, not 16 steps


def test_cli_table_and_json_last_line(runs, capsys):
    assert diff.main([runs[0], runs[2], "--by", "layer"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    j = json.loads(out[-1])
    assert j["by"] == "layer" and any("sync_stall" in line and "*" in line for line in out[:-1])
    assert any(line.startswith("timed step time") for line in out) and any("residual" in line for line in out)


@pytest.mark.parametrize("argv", [["/nonexistent/a", "/nonexistent/b"], ["RUNS0", "RUNS2", "--arm", "nope"],
                                  ["RUNS0", "RUNS2", "--comparison", "offload"], ["RUNS0", "RUNS2", "--by", "x"]])
def test_bad_input_is_one_line_and_rc_2(runs, capsys, argv):
    argv = [runs[0] if a == "RUNS0" else runs[2] if a == "RUNS2" else a for a in argv]
    assert run_main(diff.main, argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ")


def test_module_bad_input_is_one_line_on_stderr():
    r = subprocess.run([sys.executable, "-m", "workbench.compare.rundiff_cli", "/nonexistent/a", "/nonexistent/b"],
                       capture_output=True, text=True, cwd=os.path.join(os.path.dirname(__file__), ".."))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and r.stdout == ""


def test_changes_figure_draws_a_stacked_bar(runs):
    pytest.importorskip("matplotlib")
    from workbench.compare.figure import changes_figure
    fig = changes_figure(rundiff.diff_runs(runs[0], runs[2], by="layer"), top=3)
    ax = fig.axes[0]
    assert len(ax.patches) >= 3 + 1 + 2  # three named segments, "other", two step bars


def test_pairing_by_batch_finds_a_change_that_batch_spread_hides():
    """Steps that differ by batch (documents per batch move attention) hide a small per-batch change from Welch;
    paired by batch it is found, and only it (a negative control: Welch on the same data flags nothing)."""
    import pandas as pd
    rng = np.random.default_rng(0)
    batch_ms = np.array([500.0, 620.0, 540.0, 700.0])
    a = pd.DataFrame({"attention": batch_ms + rng.normal(0, 0.3, 4), "gemm": 280 + rng.normal(0, 0.2, 4)})
    b = pd.DataFrame({"attention": batch_ms + rng.normal(0, 0.3, 4), "gemm": 300 + rng.normal(0, 0.2, 4)})
    b["attention"] += 5.0  # the change to find: +5 ms of attention on every batch
    b["gemm"] = a["gemm"] + rng.normal(0, 0.2, 4)  # gemm unchanged
    for df in (a, b):
        df["step_ms"] = df["attention"] + df["gemm"]
    paired = rundiff.diff_tables(a, b, pair=True)
    assert paired["test"] == "paired by batch" and _flagged(paired) == [("attention", "", "")]
    welch = rundiff.diff_tables(a, b, pair=False)
    assert welch["test"] == "Welch" and _flagged(welch) == []


def test_same_batches_needs_the_same_data_args_and_step_count(tmp_path):
    import json
    def run(name, **args):
        d = tmp_path / name
        d.mkdir()
        (d / "meta.json").write_text(json.dumps({"args": {"model": "m", "tokens": 64, "lengths": "fixed:8", "seed": 0,
                                                          "batches": 2, "steps": 2, **args}}))
        (d / "results.csv").write_text("comparison,arm,metric,value,rep\n")
        return str(d)
    a, b, c = run("a"), run("b", precision="fp32-adapters"), run("c", seed=1)
    assert rundiff.same_batches(a, b, 2, 2)       # precision is not a data argument
    assert not rundiff.same_batches(a, c, 2, 2)   # another seed: other batches
    assert not rundiff.same_batches(a, b, 2, 3)   # another traced-step count


def test_untraced_runs_are_told_to_trace_not_to_give_a_comparison(runs, tmp_path, capsys):
    """Issue 38, item 11: `--comparison` cannot fix runs without traces; the line says to add --trace torch."""
    bare = write_run(str(tmp_path / "bare"), rng=np.random.default_rng(1))  # timed steps, no traces
    assert run_main(diff.main, [runs[0], bare]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--trace torch" in err and f"{bare} has no traces" in err
    assert "give --comparison" not in err
