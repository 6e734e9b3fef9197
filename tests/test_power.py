"""workbench.measure.power: the engine's statistic, simulated with rep (block) effects and drift, covers at its nominal level;
the retired analysis (pairs resampled as independent) does not (the negative control). Seeded; no timings."""
import json
import math
import os

import pytest

from workbench.measure import power

SIMS = 1000
TOL = 3 * math.sqrt(0.95 * 0.05 / SIMS)  # binomial tolerance around 0.95 at 1000 runs (3 SE: 0.021)


def test_default_gpu_protocol_covers_at_its_nominal_level_with_rep_effects_and_drift():
    r = power.calibrate(power.Noise(), power.Design(), sims=SIMS, seed=0)
    assert abs(r["coverage"] - 0.95) <= TOL, r
    assert 0.03 <= r["false_verdict_rate"] <= 0.07, r


def test_offload_like_noise_covers_too():
    r = power.calibrate(power.Noise(rep_sd_pct=0.2, step_sd_pct=0.15, batch_sd_pct=0.5), power.Design(),
                        sims=SIMS, seed=3)
    assert abs(r["coverage"] - 0.95) <= TOL, r


def test_negative_control_pairs_as_independent_under_cover():
    """The analysis this replaced (BCa over pairs as if independent), on the old protocol (3 reps x 4 steps): its CI
    misses the truth far more than 5% of the time, and the coverage test above would fail it."""
    r = power.calibrate(power.Noise(), power.Design(reps=3, steps=4, batches=4), sims=300, seed=0,
                        analysis="iid-pairs")
    assert r["coverage"] < 0.95 - TOL, r
    assert r["false_verdict_rate"] > 0.15, r


def test_without_rep_effects_the_two_analyses_agree_on_coverage():
    """A sanity check of the simulator: with no block effect and no drift, pairs are independent and both cover."""
    noise = power.Noise(rep_sd_pct=0.0, drift_pct=0.0)
    rep = power.calibrate(noise, power.Design(), sims=400, seed=1)
    assert abs(rep["coverage"] - 0.95) <= 3 * math.sqrt(0.95 * 0.05 / 400)


def test_a_real_speedup_is_found_and_min_detectable_is_above_one():
    d = power.Design()
    r = power.calibrate(power.Noise(), d, sims=300, speedup=1.05, seed=2)
    assert r["faster_rate"] > 0.95
    mds = power.min_detectable_speedup(power.Noise(), d, sims=150)
    assert 1.0 < mds < 1.05


def test_gpu_seconds_counts_the_protocol():
    d = power.Design(reps=8, steps=2, arms=3, warmup=3)
    assert power.gpu_seconds(d, step_ms=500) == pytest.approx(8 * 3 * 5 * 0.5)


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
    runs = sorted(os.path.dirname(os.path.join(dp, "results.csv")) for dp, _, fs in os.walk(root) if "results.csv" in fs)
    assert runs
    noise, step_ms, details = power.components_from_run(runs[0])
    assert step_ms > 0 and noise.step_sd_pct > 0 and noise.rep_sd_pct >= 0
    assert details["per_comparison"]
