"""Checks that can fail: the held-out rule's power against a no-effect machine (`workbench.measure.heldout_power`),
and the exact statistics the published claims rest on (the rerun CI's df, the rule's >=, the gate's run SD)."""
import math

import numpy as np
import pytest
from scipy import stats as sps

from workbench.compare import gate_stats
from workbench.measure import heldout_power, replication, replication_spread as rs


def _design(mu_log: float, tau: float, sizes=(8, 6, 6), reps: int = 3, seed: int = 1):
    """Machines of `sizes` processes (`reps` per-rep log ratios each) around mu_log, process SD tau, small machine
    shifts; its prediction and the held-out null for M = 4 (few simulations: fast)."""
    rng = np.random.default_rng(seed)
    machines = []
    for n in sizes:
        shift = 0.002 * rng.standard_normal()
        machines.append([list(mu_log + shift + tau * rng.standard_normal() + 0.002 * rng.standard_normal(reps))
                         for _ in range(n)])
    p = rs.spread_prediction(machines, sims=2000, seed=0)
    return p, rs.spread_null(p, 4, sims=2000, seed=0)


def test_a_constant_wide_interval_cannot_be_published():
    p, null = _design(math.log(1.10), 0.01)
    wide = {**p, "pi95": [0.9, 1.25]}
    r = heldout_power.publishable(wide, null, sims=400)
    assert r["power"] < heldout_power.POWER_FLOOR and not r["publish"]
    assert "no-effect machine" in r["why"]
    # the same design's own interval, tight and above 1, can fail a no-effect machine
    own = heldout_power.publishable(p, null, sims=400)
    assert own["publish"] and own["power"] >= heldout_power.POWER_FLOOR


def test_an_interval_that_includes_1_is_not_published_for_a_faster_claim():
    p, null = _design(math.log(1.10), 0.01)
    r = heldout_power.publishable({**p, "pi95": [0.999, 1.3]}, null, sims=200)
    assert not r["publish"] and "does not exclude 1" in r["why"]


def test_a_no_effect_machine_fails_at_the_stated_rate():
    # a design whose rule is weak against a no-effect machine: a wide process spread, an effect of 3%
    p, null = _design(math.log(1.03), 0.02)
    stated = heldout_power.no_effect_power(p, null, sims=1000, seed=0)["power"]
    assert 0.05 < stated < 0.95  # neither certain nor impossible: the rate below is a real test
    # an independent draw of no-effect machines (own generator, tau_new from the fitted log-normal), the rule as is
    rng = np.random.default_rng(12345)
    n = 600
    fails = 0
    for _ in range(n):
        tau = math.exp((p["lam"] + p["eta"] * rng.standard_normal()) / 2)
        fails += not rs.spread_check(p, tau * rng.standard_normal(4), null)["ok"]
    se = math.sqrt(stated * (1 - stated) * (1 / n + 1 / 1000))
    assert abs(fails / n - stated) < 4 * se


def test_the_power_is_kept_by_its_inputs_and_a_changed_input_is_computed_again():
    """`no_effect_power` keeps its results by their inputs: the same inputs give the computed number (and a copy), and
    a changed interval, seed or null is computed again (the negative control: a cache keyed too loosely would return
    the first design's power for the wide interval)."""
    p, null = _design(math.log(1.10), 0.01)
    first = heldout_power.no_effect_power(p, null, sims=300)
    again = heldout_power.no_effect_power(p, null, sims=300)
    assert again == first and again is not first
    assert again == heldout_power._no_effect_power(p, null, 1.0, 300, 0)
    wide = heldout_power.no_effect_power({**p, "pi95": [0.9, 1.25]}, null, sims=300)
    assert wide["power"] < first["power"]
    assert heldout_power.no_effect_power(p, null, sims=300, seed=1)["seed"] == 1
    long = {**p, "L": np.arange(2000.0)}  # numpy's repr elides a long array's middle: the key must not
    changed = {**p, "L": np.concatenate([np.arange(1000.0), [-1.0], np.arange(1001.0, 2000.0)])}
    assert repr(long["L"]) == repr(changed["L"])
    assert heldout_power._plain(long["L"]) != heldout_power._plain(changed["L"])


def test_the_rerun_ci_over_machines_has_j_minus_1_df():
    p, _ = _design(math.log(1.10), 0.01, sizes=(4, 5))
    d = np.asarray(p["machine_means_log"])
    half = sps.t.ppf(0.975, len(d) - 1) * math.sqrt(d.var(ddof=1) / len(d))  # J = 2: t with 1 df, 12.71
    assert p["ci_df"] == 1
    assert p["ci95"] == pytest.approx([math.exp(d.mean() - half), math.exp(d.mean() + half)], rel=1e-12)


def test_the_one_sd_design_ci_has_k_minus_j_df():
    rng = np.random.default_rng(3)
    machines = [[list(0.1 + 0.01 * rng.standard_normal(3)) for _ in range(n)] for n in (3, 4)]
    p = replication.machine_prediction(machines)
    means = np.concatenate([np.asarray(m) for m in p["process_means_log"]])
    half = sps.t.ppf(0.975, 7 - 2) * math.sqrt(p["msw"] / 7)
    assert p["ci_df"] == 5
    assert p["ci95"] == pytest.approx([math.exp(means.mean() - half), math.exp(means.mean() + half)], rel=1e-12)


def test_the_rule_passes_at_exactly_its_null_quantile():
    p, null = _design(math.log(1.10), 0.01)
    lo, hi = (math.log(v) for v in p["pi95"])
    at = {**null, "inside_null_q05": 0.5, "spread_t_q95": 1e9}
    inside, outside = (lo + hi) / 2, hi + 1.0
    assert rs.spread_check(p, [inside, outside], at)["inside"] == 0.5
    assert rs.spread_check(p, [inside, outside], at)["inside_ok"]  # >= : a fraction equal to the quantile passes
    assert not rs.spread_check(p, [outside, outside + 0.1], at)["inside_ok"]
    # the one-SD design's rule, the same way
    rng = np.random.default_rng(3)
    q = replication.machine_prediction([[list(0.1 + 0.01 * rng.standard_normal(3)) for _ in range(n)]
                                        for n in (3, 4)])
    qlo, qhi = (math.log(v) for v in q["pi95"])
    qnull = {"M": 2, "inside_null_q05": 0.5, "f_interval": [0.0, 1e9]}
    r = replication.heldout_new_machine_check(q, [(qlo + qhi) / 2, qhi + 1.0], null=qnull)
    assert r["inside"] == 0.5 and r["inside_ok"]


def test_the_gate_run_sd_subtracts_the_within_run_variance():
    rep_ms = [[100.0, 102.0, 98.0, 101.0], [103.0, 101.0, 104.0, 102.0], [99.0, 97.0, 100.0, 98.5]]
    logs = [np.log(r) for r in rep_ms]
    y = [v.mean() for v in logs]
    w = float(np.mean([v.var(ddof=1) / v.size for v in logs]))
    var = float(np.var(y, ddof=1))
    upper = var * 2 / sps.chi2.ppf(0.05, 2)
    r = gate_stats.run_sd(rep_ms)
    assert r["within_var"] == pytest.approx(w, rel=1e-12)
    assert r["run_sd_pct"] == pytest.approx(100 * math.sqrt(upper - w), rel=1e-9)
    assert r["point_sd_pct"] == pytest.approx(100 * math.sqrt(max(0.0, var - w)), rel=1e-9)
    # processes that differ by their rep noise alone: the point SD is 0, not the noise of their means
    same = [[100.0, 104.0], [104.0, 100.0], [101.0, 103.0]]
    assert gate_stats.run_sd(same)["point_sd_pct"] == 0.0


def test_the_committed_held_out_family_is_five_designs_sixteen_checks_five_failures():
    from workbench import analysis as an
    f = an.heldout_family("profiles")
    assert (f["design"].nunique(), len(f), int((f["verdict"] == "fails").sum())) == (5, 16, 5)
