"""workbench.measure.replication_spread: a new machine whose process SD is its own (the revised prediction).

The negative control is the old held-out F test (`replication.heldout_new_machine_check`: the new machine's process
variance against the pooled MSW): where the machines' process SDs differ (log-normal, eta = 1) it fails far more
than its 5%; the one-sided spread check holds its 5% there and on homogeneous machines, and catches a machine 3x
noisier than the noisiest seen, or a shifted one. Seeded; no timings."""
import importlib.util
import json
import math
import os
import shutil

import numpy as np
import pytest
from scipy import stats

from workbench.cli import run_main
from workbench.measure import replication as rp
from workbench.measure import replication_spread as rs

SIZES, M = (12, 8, 6), 6  # the packing design: machines A, B, C; M held-out processes of a fourth
LAM = math.log(0.015 ** 2)  # a process mean's SD about 1.5%


def _dataset(rng, eta, omega, *, new_tau_factor=None, shift=0.0, m=M):
    """Process means of the J machines (lists) and of a new machine, from the model of the module docstring."""
    tau = np.exp((LAM + eta * rng.standard_normal(len(SIZES))) / 2)
    machines = [list(omega * rng.standard_normal() + t * rng.standard_normal(n)) for t, n in zip(tau, SIZES)]
    t_new = (new_tau_factor * tau.max() if new_tau_factor else math.exp((LAM + eta * rng.standard_normal()) / 2))
    new = shift + omega * rng.standard_normal() + t_new * rng.standard_normal(m)
    return machines, new


def _w(m):  # one process mean as a process of one rep
    return [[x] for x in m]


def test_fit_and_interval_follow_their_formulas():
    ms = [[0.01, 0.03, 0.02], [0.06, 0.04, 0.05, 0.07]]
    n, d = np.array([3, 4]), np.array([np.mean(m) for m in ms])
    s2 = np.array([np.var(m, ddof=1) for m in ms])
    L = np.log(s2) - (rs._spf.digamma((n - 1) / 2) + np.log(2 / (n - 1)))
    c = rs._spf.polygamma(1, (n - 1) / 2)
    f = rs.spread_fit(d, s2, n)
    assert f["L"] == pytest.approx(L) and float(f["eta2"]) == pytest.approx(max(0.0, np.var(L, ddof=1) - c.mean()))
    assert float(f["omega2"]) == pytest.approx(max(0.0, np.var(d, ddof=1) - np.mean(s2 / n)))
    # E log(chi2_f / f) = b(f): the bias correction is right (a reference by simulation)
    x = np.random.default_rng(0).chisquare(5, 200000) / 5
    assert np.log(x).mean() == pytest.approx(float(rs.log_var_bias(5)), abs=0.01)
    assert np.log(x).var() == pytest.approx(float(rs.log_var_noise(5)), rel=0.03)
    # with eta 0 the mixture is one normal
    assert rs.predictive_cdf([[0.1]], 0.05, 0.0004, math.log(0.0005), 0.0)[0, 0] == pytest.approx(
        stats.norm.cdf(0.05 / math.sqrt(0.0009)))
    p = rs.spread_prediction([_w(m) for m in ms], sims=2000)
    fit = {k: (float(v) if np.ndim(v) == 0 else v) for k, v in f.items()}
    for q, v in zip(((1 - p["nominal"]) / 2, (1 + p["nominal"]) / 2), p["pi95"]):
        assert float(rs.predictive_cdf([[math.log(v)]], fit["mu"], fit["omega2"], fit["lam"], fit["eta2"])[0, 0]) \
            == pytest.approx(q, abs=1e-9)
    assert p["speedup"] == pytest.approx(math.exp(d.mean()))
    with pytest.raises(ValueError):
        rs.spread_prediction([_w(ms[0])])  # one machine: no machine spread to fit


def test_spread_threshold_reaches_its_t_limit_and_is_fixed_by_its_seed():
    thr = rs.spread_threshold(SIZES, M)
    J = len(SIZES)
    t_limit = math.sqrt(1 + 1 / J) * stats.t.ppf(0.95, J - 1)  # eta >> chi-square noise: L normal
    assert thr["by_eta"][8.0] == pytest.approx(t_limit, abs=0.15)
    assert thr["t_q95"] == max(thr["by_eta"].values())
    assert rs.spread_threshold(SIZES, M) == thr


@pytest.mark.parametrize("eta,f_fails_too_often", [(1.0, True), (0.0, False)])
def test_spread_check_holds_its_level_where_the_f_test_does_not(eta, f_fails_too_often):
    rng = np.random.default_rng(int(10 * eta) + 3)
    sims = 500
    t_q95 = rs.spread_threshold(SIZES, M)["t_q95"]
    a = 0.025
    K, J = sum(SIZES), len(SIZES)
    f_null = {"M": M, "inside_null_q05": 0.0, "f_interval": [stats.f.ppf(a, M - 1, K - J),
                                                             stats.f.ppf(1 - a, M - 1, K - J)]}
    old = new = 0
    for _ in range(sims):
        machines, held = _dataset(rng, eta, 0.01)
        old += not rp.heldout_new_machine_check(rp.machine_prediction([_w(m) for m in machines]), held,
                                                null=f_null)["variance_ok"]
        L = rs.spread_fit([np.mean(m) for m in machines], [np.var(m, ddof=1) for m in machines], SIZES)["L"]
        new += rs.spread_t({"L": L}, held) > t_q95
    tol = 3 * math.sqrt(0.05 * 0.95 / sims)
    assert new / sims <= 0.05 + tol
    if f_fails_too_often:
        assert old / sims > 0.15  # the negative control: the pooled F test, 5% nominal
    else:
        assert abs(old / sims - 0.05) <= tol


def test_the_revised_check_holds_and_catches_a_noisier_or_shifted_machine():
    rng = np.random.default_rng(7)
    sims = 80
    fails = covered = noisier = shifted = 0
    for _ in range(sims):
        machines, held = _dataset(rng, 0.25, 0.01)
        p = rs.spread_prediction([_w(m) for m in machines], sims=2000, seed=1)
        null = rs.spread_null(p, M, sims=2000)
        fails += not rs.spread_check(p, held, null)["ok"]
        lo, hi = (math.log(v) for v in p["pi95"])
        covered += lo <= held[0] <= hi
        _, loud = _dataset(rng, 0.25, 0.01, new_tau_factor=3.0)
        noisier += not rs.spread_check(p, loud, null)["spread_ok"]
        _, far = _dataset(rng, 0.25, 0.01, shift=0.15)
        shifted += not rs.spread_check(p, far, null)["inside_ok"]
    assert fails / sims <= 0.10 + 3 * math.sqrt(0.1 * 0.9 / sims)  # two 5% checks
    assert covered / sims >= 0.85
    assert noisier / sims >= 0.4  # 3x the noisiest machine seen: a check that can fail
    assert shifted / sims >= 0.9


def test_the_heldout_mean_must_have_two_processes_and_a_new_m_recomputes_the_null():
    rng = np.random.default_rng(0)
    machines, held = _dataset(rng, 0.5, 0.01)
    p = rs.spread_prediction([_w(m) for m in machines], sims=2000)
    null = rs.spread_null(p, M, sims=2000)
    assert rs.spread_null(p, M, sims=2000) == null
    with pytest.raises(ValueError):
        rs.spread_check(p, held[:1], null)
    four = rs.spread_check(p, held[:4], null)
    assert four["M"] == 4 and four["spread_t_q95"] == rs.spread_null(p, 4, sims=2000)["spread_t_q95"]


def test_the_interval_keeps_its_level_when_machine_effects_are_heavy_tailed():
    """Machine G's packing mean lay above what five machines predicted: are machine effects heavier-tailed than the
    normal the model assumes? At v4's design (processes per machine 12, 8, 6, 6, 4, 2; omega 3.8%, eta 1.0) the
    interval for one process on a new machine covers nearly as often with t3 machine effects (same SD) as with normal
    ones: 0.93 against 0.95 over 300 seeded designs each. Rep noise 1%, 4 reps a process."""
    n, omega, lam, eta, R = [12, 8, 6, 6, 4, 2], 0.0383, 2 * math.log(0.012), 1.0, 4
    rng = np.random.default_rng(7)

    def machine(kind):
        return rng.normal(0, omega) if kind == "normal" else rng.standard_t(3) * omega / math.sqrt(3.0)

    cover = {}
    for kind in ("normal", "t3"):
        hits = 0
        for _ in range(300):
            groups = []
            for nj in n:
                v, tau = machine(kind), math.exp((lam + eta * rng.normal()) / 2)
                groups.append([list(v + rng.normal(0, tau) + rng.normal(0, 0.01, R)) for _ in range(nj)])
            pi = rs.spread_prediction(groups, sims=2000, seed=int(rng.integers(1 << 30)))["pi95"]
            x = machine(kind) + rng.normal(0, math.exp((lam + eta * rng.normal()) / 2)) + rng.normal(0, 0.01, R).mean()
            hits += math.log(pi[0]) <= x <= math.log(pi[1])
        cover[kind] = hits / 300
    assert cover["normal"] >= 0.90 and cover["t3"] >= 0.90, cover
