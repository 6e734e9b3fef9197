"""Tests of workbench.measure.stats: the statistics every report uses. Seeded; no wall-clock thresholds."""

import math

import numpy as np
import pytest
from scipy import stats as sps

from workbench.measure import stats

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


# --- paired speedup and verdicts (the rep is the unit) --------------------------------------------------------

def _reps(n, per=2):
    return [i // per for i in range(n)]


def test_real_3pct_speedup_is_faster():
    b, o = _arms(seed=1, n=40, effect=1.03)
    r = stats.paired_speedup(b, o, _reps(40))
    lo, hi = r["ci95"]
    assert r["verdict"] == "faster"
    assert lo > 1 and lo <= 1.03 <= hi
    assert lo <= r["speedup"] <= hi
    assert r["n_pairs"] == 40 and r["n_units"] == 20
    assert r["method"] == "t-interval on per-rep log ratios of means (20 reps, 19 df)"
    assert r["half_width_pct"] == pytest.approx(100 * (hi - lo) / 2 / r["speedup"])


def test_estimate_and_ci_are_the_t_interval_of_per_rep_log_ratios():
    """The reference: per rep log(mean b / mean o), scipy's t interval, exponentiated."""
    b, o = _arms(seed=11, n=24, effect=1.02)
    reps = _reps(24, per=3)
    r = stats.paired_speedup(b, o, reps)
    lr = [math.log(np.mean(b[i:i + 3]) / np.mean(o[i:i + 3])) for i in range(0, 24, 3)]
    lo, hi = sps.t.interval(0.95, len(lr) - 1, loc=np.mean(lr), scale=sps.sem(lr))
    assert r["speedup"] == pytest.approx(math.exp(np.mean(lr)), rel=1e-12)
    assert r["ci95"] == pytest.approx([math.exp(lo), math.exp(hi)], rel=1e-12)


def test_pairs_of_one_rep_are_not_independent():
    """Negative control of the unit: 4 reps whose pairs share a rep effect. Treated as 16 independent pairs the CI
    is far narrower than the rep-level one, which is the honest one (its coverage: tests/test_power.py)."""
    rng = np.random.default_rng(5)
    rep_eff = np.repeat(0.02 * rng.standard_normal(4), 4)
    b = 100 * (1 + rep_eff + 0.002 * rng.standard_normal(16))
    o = 100 * (1 + 0.002 * rng.standard_normal(16))
    by_rep = stats.paired_speedup(b, o, _reps(16, per=4))
    by_pair = stats.paired_speedup(b, o)
    assert by_pair["half_width_pct"] < by_rep["half_width_pct"] / 2


def test_real_3pct_slowdown_is_slower():
    b, o = _arms(seed=2, n=40, effect=1 / 1.03)
    r = stats.paired_speedup(b, o, _reps(40))
    assert r["verdict"] == "slower"
    assert r["ci95"][1] < 1


def test_pairing_cancels_shared_per_batch_variation():
    rng = np.random.default_rng(7)
    base = 100 * rng.uniform(0.7, 1.3, 40)  # batch content: ±30% between pairs, shared by both arms
    b, o = _arms(seed=8, n=40, effect=1.03, base=base)
    r = stats.paired_speedup(b, o, _reps(40))
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
    r = stats.paired_speedup(b_m, o_m, _reps(22))
    assert r["n_pairs"] == 20
    assert r == stats.paired_speedup(b, o, _reps(20))


def test_identical_values_do_not_raise():
    r = stats.paired_speedup([50.0] * 10, [50.0] * 10, _reps(10))
    assert r["speedup"] == 1.0 and r["n_pairs"] == 10
    assert r["ci95"] == [1.0, 1.0]


@pytest.mark.parametrize("b, o, u", [([10.0], [9.0], [0]), ([], [], []), ([10.0, None], [9.0, 8.0], [0, 1]),
                                     ([10.0, 11.0], [9.0, 8.0], [0, 0])])
def test_fewer_than_two_units_no_ci(b, o, u):
    r = stats.paired_speedup(b, o, u)
    assert r["ci95"] is None and r["half_width_pct"] is None
    assert r["verdict"] == "no verdict (fewer than 2 paired samples)"


def test_unequal_lengths_raise():
    with pytest.raises(ValueError):
        stats.paired_speedup([1.0, 2.0, 3.0], [1.0, 2.0])
    with pytest.raises(ValueError):
        stats.paired_speedup([1.0, 2.0], [1.0, 2.0], [0])


def test_fewer_than_min_units_get_a_ci_but_no_verdict():
    """A clear 10% effect over 3 reps: the CI is reported, the verdict withheld; 4 reps of the same effect get
    "faster"."""
    b4, o4 = [110.0, 111.0, 109.0, 110.5], [100.0, 100.5, 99.5, 100.2]
    r = stats.paired_speedup(b4[:3], o4[:3], [0, 1, 2])
    assert r["ci95"] is not None and r["verdict"] == "no verdict (n=3 reps < 4)"
    assert stats.paired_speedup(b4, o4, [0, 1, 2, 3])["verdict"] == "faster"


def test_paired_difference_is_the_t_interval_of_per_rep_mean_differences():
    b, o = _arms(seed=12, n=16, effect=1.05)
    d = stats.paired_difference(b, o, _reps(16, per=4))
    per = [np.mean(b[i:i + 4] - o[i:i + 4]) for i in range(0, 16, 4)]
    lo, hi = sps.t.interval(0.95, 3, loc=np.mean(per), scale=sps.sem(per))
    assert d["mean"] == pytest.approx(np.mean(per)) and d["ci95"] == pytest.approx([lo, hi])
    assert d["n_units"] == 4 and d["df"] == 3 and d["se"] == pytest.approx(sps.sem(per))


def test_holm_matches_the_step_down_rule():
    assert stats.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert stats.holm([0.5, None]) == [0.5, None]


def test_weighted_fit_follows_the_precise_points():
    """WLS with 1/se² weights: a noisy point with a huge se barely moves the line; OLS is pulled by it."""
    x, y, se = [1, 2, 3, 4], [1.0, 2.0, 3.0, 10.0], [0.1, 0.1, 0.1, 50.0]
    w = stats.linear_fit(x, y, se=se, at=1)
    o = stats.linear_fit(x, y)
    assert w["slope"] == pytest.approx(1.0, abs=0.01) and o["slope"] > 2
    assert w["weighted"] and not o["weighted"]
    assert w["at"]["ci95"][0] < 1.0 < w["at"]["ci95"][1]


def test_variance_components_recover_simulated_sds():
    """rep / batch / step SDs of log step time from a simulated balanced run (the power tool's model)."""
    rng = np.random.default_rng(0)
    samples = []
    batch = 0.03 * rng.standard_normal(4)
    for arm in ("A", "B"):
        for rep in range(40):
            blk = 0.01 * rng.standard_normal()
            for step in range(8):
                t = 100 * math.exp(batch[step % 4] + blk + 0.004 * rng.standard_normal())
                samples.append(dict(arm=arm, rep=rep, batch=step % 4, step_ms=t))
    vc = stats.variance_components(samples)
    assert vc["rep_sd_pct"] == pytest.approx(1.0, rel=0.25)
    assert vc["step_sd_pct"] == pytest.approx(0.4, rel=0.1)
    assert vc["batch_sd_pct"] == pytest.approx(100 * np.std(batch, ddof=1), rel=0.1)  # the 4 batches drawn


def test_verdict_rules():
    assert stats.verdict((1.01, 1.05)) == "faster"
    assert stats.verdict([0.9, 0.99]) == "slower"
    assert stats.verdict((0.98, 1.03)) == "no detectable difference (±3.0%)"
    assert stats.verdict((0.95, 1.01)) == "no detectable difference (±5.0%)"
    assert stats.verdict((1.0, 1.02)) == "no detectable difference (±2.0%)"  # touching 1 is not excluding it
    assert stats.verdict(None) == "no verdict (fewer than 2 paired samples)"
    assert stats.verdict((1.01, 1.05), 3) == "no verdict (n=3 reps < 4)"


def test_a_timing_is_a_result_on_a_gpu_only():
    """`timing_on`, the one owner of the CPU-timing rule (the runner and the analysis both call it)."""
    c = stats.paired_speedup([10.0, 10.2, 10.1, 10.3], [9.0, 9.1, 9.0, 9.2], [0, 1, 2, 3])
    assert stats.timing_on(c, "cuda") == c and c["ci95"] and c["verdict"] == "faster"
    for device in ("cpu", "mps", None):
        cpu = stats.timing_on(c, device)
        assert (cpu["verdict"], cpu["ci95"], cpu["half_width_pct"]) == (stats.NOT_A_RESULT, None, None)
        assert cpu["speedup"] == c["speedup"] and c["ci95"]  # the estimate stays; the input is not changed


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


def test_no_weights_from_a_2_rep_point_that_agreed_by_chance():
    """The L sweep that "refuted" (L-1): its L = 1 point came from 2 reps that agreed by chance (se 0.0007 ms on
    1 df), a weight 10^6 times the others', so the weighted fit went through it with a CI of nothing. With the df
    given, `linear_fit` refuses the weights (df < MIN_WEIGHT_DF): OLS, a robust se, and a wide CI at L = 1 that no
    longer excludes 0. The negative control is the same call without df (the old weighted fit)."""
    x = [1, 2, 4, 8]
    y = [1.7, 2.3, 7.9, 17.2]
    se = [0.0007, 1.0, 1.1, 0.9]
    df = [1, 3, 3, 3]
    old = stats.linear_fit(x, y, se=se, at=1)
    assert old["weighted"] and old["at"]["y"] == pytest.approx(1.7, abs=0.01)
    assert old["at"]["ci95"][1] - old["at"]["ci95"][0] < 0.01  # "1.7 [1.7, 1.7]"
    new = stats.linear_fit(x, y, se=se, df=df, at=1)
    ols = stats.linear_fit(x, y, at=1)
    assert not new["weighted"] and new["robust"] and new["slope"] == pytest.approx(ols["slope"])
    lo, hi = new["at"]["ci95"]
    assert lo < 0 < hi and hi - lo > 2
    # with enough df per point the weights stand
    assert stats.linear_fit(x, y, se=[0.5, 1.0, 1.1, 0.9], df=[7] * 4)["weighted"]


def test_welch_is_scipys_public_ttest_ind_bit_for_bit():
    """`welch` skips scipy's axis / NaN-policy decorator on finite samples (`_TTEST_IND_1D`, for speed): its CI and p
    equal the public `ttest_ind`'s exactly, on random pairs of mixed sizes and scales; a NaN sample takes the public
    path and gives NaN."""
    rng = np.random.default_rng(3)
    for _ in range(300):
        a = rng.standard_normal(rng.integers(2, 10)) * rng.choice([1e-6, 1.0, 50.0])
        b = rng.standard_normal(rng.integers(2, 10)) + rng.normal()
        w = stats.welch(a, b)
        t = sps.ttest_ind(b, a, equal_var=False)
        ci = t.confidence_interval(0.95)
        assert (w["ci95"], w["p"]) == ([float(ci.low), float(ci.high)], float(t.pvalue))
    w = stats.welch([1.0, float("nan"), 2.0], [3.0, 4.0])
    assert math.isnan(w["p"]) and all(math.isnan(x) for x in w["ci95"])
