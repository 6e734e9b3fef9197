"""The regression gate (`workbench.compare.gate`, `workbench.compare.gate_stats`): its A/A false-fail rate over 100 simulated gates
is at most 5% (power's simulator, seeded), its detection rate for a 2% slowdown is computed and reported, and the
whole gate runs on a CPU with the re-run injected (synthetic run folders)."""
import json
import os

import numpy as np
import pytest

from synthetic_runs import ARM, COMPARISON, write_run
from workbench.compare import gate, gate_stats
from workbench.measure import power
from workbench.cli import run_main

TRACED = os.path.join(os.path.dirname(__file__), "..", "profiles", "2026-11-23_h100_verdicts", "ab_traced")


def test_aa_false_fail_rate_at_most_5pct_over_100_simulated_gates():
    noise, design = power.Noise(), gate_stats.GateDesign()
    tol = gate_stats.tolerance_pct(noise, design, sims=1000, seed=0)
    sim = gate_stats.simulate_gates(noise, design, tol, sims=100, seed=12345)  # fresh random numbers
    assert 0 < tol < 10
    assert sim["fail_rate"] <= 0.05


def test_detection_rate_for_a_2pct_slowdown_at_the_default_budget_is_reported(capsys):
    noise, design = power.Noise(), gate_stats.GateDesign()
    tol = gate_stats.tolerance_pct(noise, design, sims=1000, seed=0)
    det = gate_stats.detection_rate(noise, design, tol, slowdown_pct=2.0, sims=400, seed=1)
    with capsys.disabled():
        print(f"\ngate at the default design ({design.reps} reps x {design.steps} steps), power's default noise: "
              f"tolerance {tol:.2f}%, 2% slowdown detected {det:.3f}")
    assert 0.0 <= det <= 1.0


def test_speedup_ci_and_decide():
    s = gate_stats.speedup_ci([100.0, 101.0, 99.0, 100.0], [110.0, 111.0, 109.0, 110.5])
    assert s["speedup"] < 1 and s["ci95"][1] < 1 and s["n_base"] == s["n_new"] == 4
    assert gate_stats.decide(s["ci95"], 5.0) == "fail" and gate_stats.decide(s["ci95"], 15.0) == "pass"
    assert gate_stats.decide(None, 1.0) == "no verdict"


def _injected(slowdown, stall_us, seed):
    def rerun(args, out_dir, reps, budget_s):
        assert args["opt"] == "packing" and reps >= 2
        return write_run(out_dir, rng=np.random.default_rng(seed), reps=reps, slowdown=slowdown,
                         trace_kw=dict(layers=4, stall_us=stall_us))
    return rerun


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    return write_run(str(tmp_path_factory.mktemp("base") / "run"), rng=np.random.default_rng(0),
                     trace_kw=dict(layers=4))


def test_gate_passes_an_aa_rerun(baseline, tmp_path):
    r = gate.gate(baseline, tolerance_pct=2.0, rerun=_injected(1.0, 0.0, 1), out_dir=str(tmp_path / "new"))
    assert r["verdict"] == "pass" and r["comparison"] == COMPARISON and r["arm"] == ARM
    assert not any(m["component"] == "sync_stall" for m in r["moved"])


def test_gate_fails_a_slow_rerun_and_names_sync_stall(baseline, tmp_path, capsys):
    rc = gate.main(["--baseline", baseline, "--tolerance-pct", "1", "--out", str(tmp_path / "new")],
                   rerun=_injected(1.05, 5.0, 2))
    out = capsys.readouterr().out.strip().splitlines()
    j = json.loads(out[-1])
    assert rc == 1 and j["verdict"] == "fail" and j["ci95"][1] < 0.99
    assert [m["component"] for m in j["moved"] if m["by"] == "component"] == ["sync_stall"]
    assert sorted(m["layer"] for m in j["moved"] if m["by"] == "layer") == ["L00", "L01", "L02", "L03"]


def test_gate_tolerance_from_an_aa_folder_and_budget(baseline, tmp_path):
    aa = write_run(str(tmp_path / "aa"), rng=np.random.default_rng(3), arms=("rebuild", "rebuild#2"))
    r = gate.gate(baseline, aa=aa, budget_s=0.5, rerun=_injected(1.0, 0.0, 4), out_dir=str(tmp_path / "new"),
                  sims=200)
    # 2 arms x (2 warmup + 2 steps) x 100 ms = 0.8 s a rep: the budget leaves the floor of 2 reps
    assert r["design"]["reps"] == 2 and r["n_new"] == 2
    assert r["tolerance"]["source"].startswith("A/A run") and r["tolerance_pct"] >= 0
    assert 0 <= r["tolerance"]["detection_rate_2pct"] <= 1


def test_rerun_argv_repeats_the_baseline_args():
    _, meta = gate._meta(TRACED)
    argv = gate.ab_argv(meta["args"], "/tmp/x", 5, 60.0)
    assert argv[1:3] == ["-m", "workbench.ab"]
    assert argv[argv.index("--opt") + 1] == "all" and argv[argv.index("--trace") + 1] == "torch"
    assert argv[argv.index("--reps") + 1] == "5" and argv.count("--reps") == 1
    assert argv[-2:] == ["--out", "/tmp/x"] and "--force" not in argv and "--aa" not in argv


@pytest.mark.parametrize("argv", [["--baseline", "/nonexistent"], ["--baseline", "B", "--tolerance-pct", "1", "--aa", "B"],
                                  ["--baseline", "B", "--budget-s", "-1"], ["--baseline", "B", "--comparison", "nope"]])
def test_bad_input_is_one_line_and_rc_2(baseline, argv, capsys):
    argv = [baseline if a == "B" else a for a in argv]
    assert run_main(lambda v: gate.main(v, rerun=_injected(1.0, 0.0, 5)), argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ")


def test_a_rerun_without_the_arm_is_no_verdict_and_rc_2(baseline, tmp_path, capsys):
    def empty(args, out_dir, reps, budget_s):
        return write_run(out_dir, rng=np.random.default_rng(6), reps=reps, arms=("rebuild",))
    assert gate.main(["--baseline", baseline, "--tolerance-pct", "1", "--out", str(tmp_path / "n")], rerun=empty) == 2
    assert "no verdict" in capsys.readouterr().err


def test_an_aa_folder_too_small_to_estimate_noise_is_refused(baseline, tmp_path):
    """An A/A run with under 3 timed steps per arm has no noise estimate: a tolerance of 0 from it would be a lie."""
    aa = write_run(str(tmp_path / "aa"), rng=np.random.default_rng(3), arms=("rebuild", "rebuild#2"), reps=1, steps=1)
    with pytest.raises(gate.GateInputError, match="too few timed steps"):
        gate.gate(baseline, aa=aa, rerun=_injected(1.0, 0.0, 4), out_dir=str(tmp_path / "new"))
