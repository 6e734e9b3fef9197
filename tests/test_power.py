"""workbench.measure.power: the engine's statistic, simulated with rep (block) effects and drift, covers at its nominal level;
the retired analysis (pairs resampled as independent) does not (the negative control). Scenarios that break a single
run's claim, and the designs that survive them: a process component at tau / sigma = 0.69 (one 8-rep run covers a
rerun's truth ~0.7 of the time; K = 4 processes cover at 0.95) and carryover with 4 arms (the rotation by one
under-covers; the Williams order does not). Seeded; no timings."""
import json
import math
import os

import pytest

from workbench.measure import power
from workbench.measure.engine import Protocol

GPU = power.GPU_PROTOCOL

SIMS = 1000
TOL = 3 * math.sqrt(0.95 * 0.05 / SIMS)  # binomial tolerance around 0.95 at 1000 runs (3 SE: 0.021)


def test_default_gpu_protocol_covers_at_its_nominal_level_with_rep_effects_and_drift():
    r = power.calibrate(power.Noise(), GPU, sims=SIMS, seed=0)
    assert abs(r["coverage"] - 0.95) <= TOL, r
    assert 0.03 <= r["false_verdict_rate"] <= 0.07, r


def test_offload_like_noise_covers_too():
    r = power.calibrate(power.Noise(rep_sd_pct=0.2, step_sd_pct=0.15, batch_sd_pct=0.5), GPU,
                        sims=SIMS, seed=3)
    assert abs(r["coverage"] - 0.95) <= TOL, r


def test_negative_control_pairs_as_independent_under_cover():
    """The analysis this replaced (BCa over pairs as if independent), on the old protocol (3 reps x 4 steps): its CI
    misses the truth far more than 5% of the time, and the coverage test above would fail it."""
    r = power.calibrate(power.Noise(), Protocol(reps=3, steps=4, batches=4), sims=300, seed=0,
                        analysis="iid-pairs")
    assert r["coverage"] < 0.95 - TOL, r
    assert r["false_verdict_rate"] > 0.15, r


def test_without_rep_effects_the_two_analyses_agree_on_coverage():
    """A sanity check of the simulator: with no block effect and no drift, pairs are independent and both cover."""
    noise = power.Noise(rep_sd_pct=0.0, drift_pct=0.0)
    rep = power.calibrate(noise, GPU, sims=400, seed=1)
    assert abs(rep["coverage"] - 0.95) <= 3 * math.sqrt(0.95 * 0.05 / 400)


def test_a_real_speedup_is_found_and_min_detectable_is_above_one():
    d = GPU
    r = power.calibrate(power.Noise(), d, sims=300, speedup=1.05, seed=2)
    assert r["faster_rate"] > 0.95
    mds = power.min_detectable_speedup(power.Noise(), d, sims=150)
    assert 1.0 < mds < 1.05


def test_gpu_seconds_counts_the_protocol():
    d = Protocol(reps=8, steps=2, arms=3, warmup_min=3, batches=1, discard_reps=0)
    assert power.gpu_seconds(d, step_ms=500) == pytest.approx(8 * 3 * 5 * 0.5)
    # the discarded rep, the settle rule's 2 passes over the batches and K processes count too
    d = Protocol(reps=8, steps=2, arms=2, warmup_min=3, batches=2, discard_reps=1)
    assert power.gpu_seconds(d, step_ms=500, processes=4) == pytest.approx(4 * 9 * 2 * (4 + 2) * 0.5)


def test_cli_last_line_json(capsys):
    assert power.main(["--sims", "200", "--no-mds"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for k in ("aa_false_verdict_rate", "coverage", "min_detectable_speedup", "gpu_s", "mean_half_width_pct"):
        assert k in out


@pytest.mark.parametrize("argv", [["--reps", "1"], ["--sims", "3"], ["--rep-sd", "-1"], ["--from", "/nonexistent"]])
def test_cli_bad_input_one_line_rc2(argv, capsys):
    assert power.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:")


def test_components_from_a_committed_run():
    root = os.path.join(os.path.dirname(__file__), "..", "profiles")
    runs = sorted(dp for dp, _, fs in os.walk(root) if {"results.csv", "results.csv.gz"} & set(fs))
    assert runs
    noise, step_ms, details = power.components_from_run(runs[0])
    assert step_ms > 0 and noise.step_sd_pct > 0 and noise.rep_sd_pct >= 0
    assert details["per_comparison"]


# --- scenarios that break a single run's claim -------------------------------------------------------------------

TAU_PCT = 0.69 * math.sqrt(2 * 1.0 ** 2 + 2 * 0.4 ** 2 / 2)  # tau / sigma = 0.69, sigma = the per-rep log-ratio SD


def test_negative_control_a_process_effect_breaks_one_runs_ci_and_processes_restore_it():
    """tau / sigma = 0.69 (the pooled H100/H200 repeats): the single run's 8-rep CI covers the population truth
    (what a rerun estimates) about 0.7 of the time, far below 0.95; the process as the unit (K = 4 processes of 8
    reps, t over processes) covers at 0.95."""
    noise = power.Noise(process_sd_pct=TAU_PCT)
    one = power.calibrate(noise, GPU, sims=800, seed=5)
    assert 0.6 <= one["coverage"] <= 0.8, one
    assert one["false_verdict_rate"] > 0.2, one
    k = power.calibrate(noise, GPU, sims=500, seed=6, analysis="process", processes=4)
    assert abs(k["coverage"] - 0.95) <= 3 * math.sqrt(0.95 * 0.05 / 500), k
    assert k["false_verdict_rate"] <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 500), k


def test_negative_control_carryover_with_4_arms_breaks_the_rotation_not_the_williams_order():
    """A third arm (the last) leaves the next block 1% slower. Rotating by one, the baseline follows it in 3 of 4
    reps and the compared arm never: a bias the CI does not know. The Williams order puts each arm after it once
    per cycle: covered (conservatively: 0.975 here)."""
    noise = power.Noise(carryover_pct=1.0)
    d = Protocol(reps=8, steps=2, arms=4, batches=2)
    old = power.calibrate(noise, d, sims=800, seed=7, order="rotate")
    new = power.calibrate(noise, d, sims=800, seed=7)
    assert old["coverage"] < 0.88, old
    # at or above nominal: the carryover cancels over each cycle, its rep-to-rep pattern only widens the CI
    assert new["coverage"] >= 0.95 - 3 * math.sqrt(0.95 * 0.05 / 800), new
    assert new["false_verdict_rate"] <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 800), new


def test_target_ci_stops_at_even_reps_and_still_covers():
    d = Protocol(reps=3, steps=2, batches=2, arms=2, target_ci_pct=1.5, max_reps=20)
    rng = __import__("numpy").random.default_rng(0)
    reps = [power.run_once(rng, power.Noise(), d, 1.0)["reps"] for _ in range(200)]
    assert all(r % 2 == 0 for r in reps) and min(reps) >= 4
    r = power.calibrate(power.Noise(), d, sims=600, seed=8)
    assert r["coverage"] >= 0.95 - 3 * math.sqrt(0.95 * 0.05 / 600), r


def test_tau_from_repeated_runs(tmp_path):
    """Three synthetic run folders of one comparison, each a process whose speedup is shifted by its own process
    effect: `--from A B C` estimates tau by REML (here against the known process shifts)."""
    from synthetic_runs import write_run
    import numpy as np
    rng = np.random.default_rng(0)
    dirs = []
    for k, shift in enumerate((0.0, 0.03, -0.02)):
        d = tmp_path / f"run{k}"
        write_run(str(d), slowdown=math.exp(shift) / 1.1, rng=rng, reps=6)
        dirs.append(str(d))
    from synthetic_runs import COMPARISON
    c = power.process_components_from_runs(dirs, COMPARISON)
    assert c["K"] == 3 and c["R"] == [6, 6, 6]
    assert 1.0 < c["tau_pct"] < 5.0 and c["tau_ci95_pct"][0] <= c["tau_pct"] <= c["tau_ci95_pct"][1]
    assert power.main(["--from", *dirs, "--comparison", COMPARISON, "--sims", "50", "--no-mds"]) == 0
    with pytest.raises(ValueError):
        power.process_components_from_runs(dirs[:1], COMPARISON)
