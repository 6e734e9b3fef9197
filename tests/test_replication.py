"""workbench.measure.replication: the process as the unit of a claim. REML against the ANOVA estimator (balanced) and
a direct maximisation of the likelihood (unbalanced); coverage of the process-level CI and the prediction interval by
simulation at the pooled tau / sigma the H100 runs showed (0.69), with the negative control that a single run's
rep-level CI does not cover a rerun; `runs_agree` as a test where CI overlap says "agree"; `design_for` against a
brute-force search; `heldout_check` passing under its null and failing when held-out processes scatter more. Seeded;
no timings."""
import math

import numpy as np
import pytest
from scipy import optimize

from workbench.measure import replication as rp
from workbench.measure import stats

TAU_OVER_SIGMA = 0.69
SIGMA = 0.01


def _processes(rng, K, R, tau=TAU_OVER_SIGMA * SIGMA, sigma=SIGMA, mu=0.05):
    return [mu + rng.standard_normal() * tau + rng.standard_normal(R) * sigma for _ in range(K)]


def test_reml_equals_the_anova_estimator_on_balanced_data():
    rng = np.random.default_rng(1)
    for K, R in [(4, 8), (6, 3), (3, 12)]:
        g = _processes(rng, K, R)
        y = np.asarray(g)
        msw = float(((y - y.mean(axis=1, keepdims=True)) ** 2).sum() / (K * (R - 1)))
        msb = R * float(y.mean(axis=1).var(ddof=1))
        c = rp.reml_components(g)
        assert c["sigma"] == pytest.approx(math.sqrt(msw), rel=1e-5)
        assert c["tau"] == pytest.approx(math.sqrt(max(0.0, (msb - msw) / R)), rel=1e-4, abs=1e-7)
        assert c["sigma_df"] == K * (R - 1) and c["K"] == K and c["R"] == [R] * K


def test_reml_on_unbalanced_data_maximises_the_restricted_likelihood():
    """Against a direct 2-D Nelder-Mead maximisation of the REML likelihood (another path than the profile over
    tau^2/sigma^2); and the tau CI brackets tau-hat."""
    rng = np.random.default_rng(2)
    g = [x[:n] for x, n in zip(_processes(rng, 5, 9), (3, 9, 5, 7, 4))]
    c = rp.reml_components(g)
    d = rp._Design(rp._groups(g))
    r = optimize.minimize(lambda p: -d.loglik(math.exp(p[0]), math.exp(p[1])),
                          x0=[math.log(SIGMA ** 2), math.log((0.5 * SIGMA) ** 2)], method="Nelder-Mead",
                          options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 4000})
    assert c["sigma"] == pytest.approx(math.exp(r.x[0] / 2), rel=1e-3)
    assert c["tau"] == pytest.approx(math.exp(r.x[1] / 2), rel=1e-2)
    lo, hi = c["tau_ci95"]
    assert lo <= c["tau"] <= hi and c["R"] == [3, 9, 5, 7, 4]


def test_lr_test_of_tau_zero_holds_its_level_and_finds_the_pooled_tau():
    rng = np.random.default_rng(3)
    null_p = [rp.reml_components(_processes(rng, 4, 8, tau=0.0), ci=False)["lr_p"] for _ in range(300)]
    alt_p = [rp.reml_components(_processes(rng, 4, 8), ci=False)["lr_p"] for _ in range(200)]
    assert np.mean(np.asarray(null_p) < 0.05) <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 300)
    assert np.mean(np.asarray(alt_p) < 0.05) > 0.4  # at tau/sigma = 0.69, 4 processes of 8 reps: about half the time


def test_tau_profile_ci_covers():
    rng = np.random.default_rng(4)
    tau = TAU_OVER_SIGMA * SIGMA
    cover = sum(lo <= tau <= hi for lo, hi in (rp.reml_components(_processes(rng, 6, 8))["tau_ci95"]
                                               for _ in range(100)))
    assert cover >= 88, cover


def test_process_ci_and_prediction_interval_cover_a_rerun_where_a_single_run_ci_does_not():
    """tau / sigma = 0.69 (the pooled H100 figure). The process-level 95% CI over K = 4 processes of 8 reps covers
    the mean over processes, and the prediction interval covers one more process's mean, at about 95%. Negative
    control: one 8-rep run's rep-level CI (the old claim) covers it only about 70% of the time."""
    rng = np.random.default_rng(5)
    sims, mu = 600, 0.05
    ci_cover = pi_cover = single_cover = 0
    for _ in range(sims):
        g = _processes(rng, 5, 8, mu=mu)
        est = rp.process_estimate(g[:4], components=False)
        assert est["population"] == rp.RERUN and est["df"] == 3
        ci_cover += est["ci95"][0] <= math.exp(mu) <= est["ci95"][1]
        pi_cover += est["pi95"][0] <= math.exp(g[4].mean()) <= est["pi95"][1]
        one = rp.process_estimate(g[:1], components=False)
        assert one["population"] == rp.WITHIN and one["pi95"] is None
        single_cover += one["ci95"][0] <= math.exp(mu) <= one["ci95"][1]
    tol = 3 * math.sqrt(0.05 * 0.95 / sims)
    assert abs(ci_cover / sims - 0.95) <= tol, ci_cover
    assert abs(pi_cover / sims - 0.95) <= tol, pi_cover
    assert single_cover / sims < 0.80, single_cover
    # and without a process effect the single run's CI covers: the control is the process effect, not the code
    rng = np.random.default_rng(6)
    ok = sum((lambda e: e["ci95"][0] <= math.exp(mu) <= e["ci95"][1])(rp.process_estimate(_processes(rng, 1, 8, tau=0), components=False))
             for _ in range(sims))
    assert abs(ok / sims - 0.95) <= tol


def test_process_estimate_matches_its_formulas():
    g = [[0.01, 0.02, 0.03], [0.05, 0.04], [0.0, 0.02, 0.01, 0.03]]
    e = rp.process_estimate(g)
    m = np.array([0.02, 0.045, 0.015])
    ti = stats.t_interval(m)
    assert e["speedup"] == pytest.approx(math.exp(m.mean()))
    assert e["ci95"] == pytest.approx([math.exp(v) for v in ti["ci"]])
    half = stats.t_quantile(0.975, 2) * m.std(ddof=1) * math.sqrt(1 + 1 / 3)
    assert e["pi95"] == pytest.approx([math.exp(m.mean() - half), math.exp(m.mean() + half)])
    assert e["K"] == 3 and e["R"] == [3, 2, 4]


def test_runs_agree_is_a_test_where_ci_overlap_says_agree():
    """Two runs 2.5 se apart: their 95% CIs overlap (the old "agree"), the test says they differ (p ~ 0.02)."""
    se = 0.004
    a = {"speedup": math.exp(0.0), "se_log": se}
    b = {"speedup": math.exp(2.5 * math.sqrt(2) * se), "se_log": se}
    r = rp.runs_agree(a, b)
    assert r["z"] == pytest.approx(-2.5) and r["p"] == pytest.approx(0.0124, abs=1e-3) and r["agree"] is False
    a_ci = [math.exp(-1.96 * se), math.exp(1.96 * se)]
    b_ci = [b["speedup"] * math.exp(-1.96 * se), b["speedup"] * math.exp(1.96 * se)]
    assert a_ci[1] > b_ci[0]  # the CIs overlap
    assert rp.runs_agree(a, dict(a))["agree"] is True
    # from CIs with their reps: se = log half width / t_{n-1}
    c = rp.runs_agree({"speedup": 1.01, "ci95": [1.0, 1.02], "n_units": 8},
                      {"speedup": 1.01, "ci95": [1.0, 1.02], "n_units": 8})
    assert c["z"] == 0 and c["p"] == pytest.approx(1.0)


def test_design_for_is_the_cheapest_feasible_design_and_prefers_processes_when_tau_is_large():
    def brute(sigma, tau, hw, c_rep, c_proc):
        best = None
        for K in range(3, 201):
            t = stats.t_quantile(0.975, K - 1)
            for R in range(2, 65, 2):
                if t * math.sqrt((tau ** 2 + sigma ** 2 / R) / K) <= hw:
                    cost = K * (c_proc + R * c_rep)
                    best = min(best or (math.inf,), (cost, K, R))
        return best
    for tau in (0.0, 0.2 * SIGMA, TAU_OVER_SIGMA * SIGMA):
        d = rp.design_for(SIGMA, tau, 0.005, 1.0, 3.0)
        K, R, minutes, hw, machines = d
        assert machines == 1
        assert (minutes, K, R) == brute(SIGMA, tau, 0.005, 1.0, 3.0)[:3] or minutes == brute(SIGMA, tau, 0.005, 1.0, 3.0)[0]
        assert hw <= 0.005 and R % 2 == 0
    big, small = rp.design_for(SIGMA, TAU_OVER_SIGMA * SIGMA, 0.005, 1.0, 3.0), rp.design_for(SIGMA, 0.0, 0.005, 1.0, 3.0)
    assert big.reps < small.reps and big.processes > small.processes


def test_heldout_check_passes_under_its_null_and_fails_when_heldout_processes_scatter_more():
    rng = np.random.default_rng(7)
    ok = caught = 0
    for _ in range(100):
        g = _processes(rng, 8, 8)
        est = rp.process_estimate(g[:4])
        ok += rp.heldout_check(est, [x.mean() for x in g[4:]], sims=2000)["ok"]
        wild = _processes(rng, 4, 8, tau=4 * TAU_OVER_SIGMA * SIGMA)  # processes move 4x more than estimated
        caught += not rp.heldout_check(est, [x.mean() for x in wild], sims=2000)["ok"]
    assert ok >= 80, ok  # two 5% tests: about 90% pass under the null
    assert caught >= 60, caught
    with pytest.raises(ValueError):
        rp.heldout_check(rp.process_estimate(g[:1]), [0.0, 0.1])


def test_null_tau_quantile_is_far_from_zero_with_few_reps():
    few = rp.null_tau_quantile([2, 3, 2, 3], SIGMA, sims=200)
    many = rp.null_tau_quantile([16] * 4, SIGMA, sims=200)
    assert few > many > 0
