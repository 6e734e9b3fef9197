"""Tests of workbench.stats: the statistics every report uses. Seeded; no wall-clock thresholds."""

import math

import numpy as np
import pytest
from scipy import stats as sps

from workbench import stats

N_RESAMPLES = 1999
VALUES = [12.0, 3.5, 7.25, 9.0, 1.0, 15.5, 4.0, 8.0, 10.0, 6.5]  # 10 values: p20, p80 and the median interpolate


def _arms(seed, n, effect=1.0, noise=0.02, base=None):
    """Paired baseline/optimized step times: optimized = baseline time / effect, each with multiplicative noise."""
    rng = np.random.default_rng(seed)
    base = np.full(n, 100.0) if base is None else base
    baseline = base * (1 + noise * rng.standard_normal(n))
    optimized = base / effect * (1 + noise * rng.standard_normal(n))
    return baseline, optimized


# --- quantiles and summaries ---------------------------------------------------------------------------------

@pytest.mark.parametrize("q", [0.0, 0.2, 0.5, 0.8, 1.0, 0.33])
def test_quantile_matches_numpy_linear(q):
    assert stats.quantile(VALUES, q) == pytest.approx(float(np.quantile(VALUES, q)), abs=0, rel=1e-12)


def test_quantile_drops_missing_and_empty_is_nan():
    with_missing = VALUES[:5] + [None, math.nan] + VALUES[5:] + [float("nan")]
    assert stats.quantile(with_missing, 0.2) == pytest.approx(float(np.quantile(VALUES, 0.2)), rel=1e-12)
    assert math.isnan(stats.quantile([], 0.5))
    assert math.isnan(stats.quantile([None, math.nan], 0.5))


def test_summarize_matches_numpy():
    s = stats.summarize(VALUES + [None, math.nan])
    assert s["n"] == len(VALUES)
    assert s["median"] == pytest.approx(float(np.median(VALUES)), rel=1e-12)
    assert s["p20"] == pytest.approx(float(np.quantile(VALUES, 0.2)), rel=1e-12)
    assert s["p80"] == pytest.approx(float(np.quantile(VALUES, 0.8)), rel=1e-12)
    assert s["mean"] == pytest.approx(float(np.mean(VALUES)), rel=1e-12)
    assert all(isinstance(s[k], float) for k in ("median", "p20", "p80", "mean"))


def test_summarize_empty():
    for empty in ([], [None], [math.nan]):
        assert stats.summarize(empty) == {"median": None, "p20": None, "p80": None, "mean": None, "n": 0}


def test_mad_unscaled():
    # median 4; |x - 4| = 3, 2, 0, 1, 96 -> median 2
    assert stats.mad([1, 2, 4, 5, 100, None]) == 2.0
    assert math.isnan(stats.mad([]))


# --- outliers ------------------------------------------------------------------------------------------------

def test_outlier_mask_flags_3x_step():
    rng = np.random.default_rng(0)
    cell = 100 * (1 + 0.01 * rng.standard_normal(10))
    cell[4] *= 3
    mask = stats.outlier_mask(cell)
    assert mask.dtype == bool and mask.shape == (10,)
    assert mask.tolist() == [i == 4 for i in range(10)]


@pytest.mark.parametrize("seed", range(5))
def test_outlier_mask_quiet_on_pure_noise(seed):
    cell = 100 * (1 + 0.01 * np.random.default_rng(seed).standard_normal(10))
    assert not stats.outlier_mask(cell).any()


def test_outlier_mask_floor_spares_small_step_in_tight_cell():
    cell = [100.0, 100.05, 102.0]  # MAD 0.05: without the floor 102 is 39 MADs out
    assert not stats.outlier_mask(cell).any()
    assert stats.outlier_mask(cell, floor=0.0).tolist() == [False, False, True]  # the floor is what spares it


def test_outlier_mask_missing_never_flagged():
    mask = stats.outlier_mask([100.0, None, 101.0, math.nan, 99.5, 400.0])
    assert mask.tolist() == [False, False, False, False, False, True]


# --- paired speedup and verdicts -----------------------------------------------------------------------------

def test_real_3pct_speedup_is_faster():
    b, o = _arms(seed=1, n=40, effect=1.03)
    r = stats.paired_speedup(b, o, n_resamples=N_RESAMPLES, seed=1)
    lo, hi = r["ci95"]
    assert r["verdict"] == "faster"
    assert lo > 1 and lo <= 1.03 <= hi
    assert lo <= r["speedup"] <= hi
    assert r["speedup"] == pytest.approx(np.mean(b) / np.mean(o), rel=1e-12)
    assert r["n_pairs"] == 40
    assert r["method"] == f"paired bootstrap (BCa) of mean(baseline)/mean(optimized), {N_RESAMPLES} resamples"
    assert r["half_width_pct"] == pytest.approx(100 * (hi - lo) / 2 / r["speedup"])


def test_real_3pct_slowdown_is_slower():
    b, o = _arms(seed=2, n=40, effect=1 / 1.03)
    r = stats.paired_speedup(b, o, n_resamples=N_RESAMPLES, seed=2)
    assert r["verdict"] == "slower"
    assert r["ci95"][1] < 1


def test_aa_mostly_no_detectable_difference():
    verdicts = []
    for seed in range(100):
        b, o = _arms(seed=seed, n=24)
        verdicts.append(stats.paired_speedup(b, o, n_resamples=N_RESAMPLES, seed=seed)["verdict"])
    no_diff = sum(v.startswith("no detectable difference (±") for v in verdicts)
    assert no_diff >= 90, f"{no_diff}/100 A/A trials said no detectable difference"
    assert set(verdicts) <= {"faster", "slower"} | {v for v in verdicts if v.startswith("no detectable")}


def test_pairing_cancels_shared_per_batch_variation():
    rng = np.random.default_rng(7)
    base = 100 * rng.uniform(0.7, 1.3, 40)  # batch content: ±30% between pairs, shared by both arms
    b, o = _arms(seed=8, n=40, effect=1.03, base=base)
    r = stats.paired_speedup(b, o, n_resamples=N_RESAMPLES, seed=0)
    assert r["verdict"] == "faster"
    assert r["ci95"][0] <= 1.03 <= r["ci95"][1]
    # The same data, resampled without pairing, cannot tell: the per-batch spread swamps the 3% effect.
    unpaired = sps.bootstrap((b, o), lambda x, y, axis=-1: np.mean(x, axis=axis) / np.mean(y, axis=axis),
                             paired=False, vectorized=True, axis=-1, n_resamples=N_RESAMPLES,
                             **{stats._BOOTSTRAP_SEED_KW: np.random.default_rng(0)})
    assert unpaired.confidence_interval.low < 1 < unpaired.confidence_interval.high


def test_missing_pairs_dropped():
    b, o = _arms(seed=3, n=20, effect=1.03)
    b_m, o_m = list(b) + [None, 100.0], list(o) + [90.0, math.nan]
    r = stats.paired_speedup(b_m, o_m, n_resamples=N_RESAMPLES)
    assert r["n_pairs"] == 20
    assert r == stats.paired_speedup(b, o, n_resamples=N_RESAMPLES)


def test_identical_values_do_not_raise():
    r = stats.paired_speedup([50.0] * 10, [50.0] * 10, n_resamples=N_RESAMPLES)
    assert r["speedup"] == 1.0 and r["n_pairs"] == 10
    assert r["verdict"].startswith("no detectable difference")
    assert "percentile" in r["method"]  # BCa is degenerate here; the method says what was used


def test_two_pairs_use_percentile():
    r = stats.paired_speedup([10.0, 12.0], [9.0, 11.0], n_resamples=N_RESAMPLES)
    assert r["ci95"] is not None and "percentile" in r["method"]


@pytest.mark.parametrize("b, o", [([10.0], [9.0]), ([], []), ([10.0, None], [9.0, 8.0])])
def test_fewer_than_two_pairs_no_verdict(b, o):
    r = stats.paired_speedup(b, o)
    assert r["ci95"] is None and r["half_width_pct"] is None
    assert r["verdict"] == "no verdict (fewer than 2 paired samples)"


def test_unequal_lengths_raise():
    with pytest.raises(ValueError):
        stats.paired_speedup([1.0, 2.0, 3.0], [1.0, 2.0])


def test_seed_reproducible_and_matters():
    b, o = _arms(seed=4, n=24, effect=1.01)
    r0 = stats.paired_speedup(b, o, n_resamples=N_RESAMPLES, seed=0)
    assert r0 == stats.paired_speedup(b, o, n_resamples=N_RESAMPLES, seed=0)
    assert r0["ci95"] != stats.paired_speedup(b, o, n_resamples=N_RESAMPLES, seed=1)["ci95"]


def test_verdict_rules():
    assert stats.verdict((1.01, 1.05)) == "faster"
    assert stats.verdict([0.9, 0.99]) == "slower"
    assert stats.verdict((0.98, 1.03)) == "no detectable difference (±3.0%)"
    assert stats.verdict((0.95, 1.01)) == "no detectable difference (±5.0%)"
    assert stats.verdict((1.0, 1.02)) == "no detectable difference (±2.0%)"  # touching 1 is not excluding it
    assert stats.verdict(None) == "no verdict (fewer than 2 paired samples)"


def test_half_width_pct():
    assert stats.half_width_pct((0.98, 1.02), 1.0) == pytest.approx(2.0)
    assert stats.half_width_pct([1.9, 2.1], 2.0) == pytest.approx(5.0)


# --- linear fit ----------------------------------------------------------------------------------------------

def test_linear_fit_recovers_slope():
    rng = np.random.default_rng(5)
    x = np.arange(1.0, 21.0)
    y = 2.5 * x + 10 + 0.3 * rng.standard_normal(x.size)
    f = stats.linear_fit(x, y)
    lo, hi = f["slope_ci95"]
    assert lo < 2.5 < hi and hi - lo < 0.2
    assert f["slope"] == pytest.approx(2.5, abs=0.05)
    assert f["intercept"] == pytest.approx(10, abs=0.6)
    assert f["r2"] > 0.99 and f["n"] == 20
    # the CI is the t interval on linregress's stderr
    ref = sps.linregress(x, y)
    half = sps.t.ppf(0.975, 18) * ref.stderr
    assert (lo, hi) == pytest.approx((ref.slope - half, ref.slope + half), rel=1e-12)


def test_linear_fit_small_n():
    f = stats.linear_fit([1, 2], [3, 5])
    assert f["slope"] == pytest.approx(2.0) and f["intercept"] == pytest.approx(1.0)
    assert f["slope_ci95"] is None and f["n"] == 2
    assert stats.linear_fit([1, None, 3], [2, 4, math.nan])["n"] == 1
    assert stats.linear_fit([1], [2])["slope"] is None


def test_fewer_than_min_pairs_get_a_ci_but_no_verdict():
    """A clear 10% effect over 4 pairs: the CI is reported, the verdict withheld (a bootstrap over so few pairs
    understates its uncertainty); 6 pairs of the same effect get "faster"."""
    b4, o4 = [110.0, 111.0, 109.0, 110.5], [100.0, 100.5, 99.5, 100.2]
    r = stats.paired_speedup(b4, o4)
    assert r["ci95"] is not None and r["verdict"].startswith("no verdict (n=4")
    r6 = stats.paired_speedup(b4 + [110.2, 109.6], o4 + [100.1, 99.8])
    assert r6["verdict"] == "faster"
