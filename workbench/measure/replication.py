"""The process as the unit of a claim: what a rerun of a comparison would show.

    # K = processes (independent runs: own data seed, own model build), R = reps per process,
    # y_kr = per-rep log ratio log(mean baseline / mean optimized) of rep r of process k

Inside one process the rep-level t-interval (`workbench.measure.stats.paired_speedup`) is right, but it speaks for
"within this run" only: clocks, autotuned kernels and memory layout move a whole process, an effect its reps cannot
see. The model here is one-way random effects,

    y_kr = mu + u_k + e_kr,    u_k ~ N(0, tau^2) (the process),    e_kr ~ N(0, sigma^2) (the rep),

and a claim about "a rerun" takes the process as the unit:

- `reml_components`: sigma and tau by REML (unbalanced processes allowed), tau's 95% CI by profile likelihood, and
  the likelihood-ratio test of tau = 0 (a 50:50 mixture of chi2_0 and chi2_1 on the boundary).
- `process_estimate`: the speedup exp(mean over processes of each process's mean y), its 95% CI a t-interval over
  processes (K - 1 df), and a 95% prediction interval for ONE MORE process's mean,
  mean ± t_{K-1} · sd · sqrt(1 + 1/K). With K = 1 it falls back to the run's own rep-level CI, labelled
  `population` "within this run" (no prediction interval).
- `design_for`: K and R for a target half width from measured sigma and tau, and the GPU minutes they cost. The
  process mean's variance is (tau^2 + sigma^2 / R) / K; reps beyond R* = (sigma / tau) · sqrt(c_process / c_rep)
  buy less than another process, so when tau >= 0.4 sigma more processes beat more reps; with a machine component
  (`machine_sd`) it spreads K over J >= 2 machines.
- `runs_agree`: a test of two run estimates (z of the log difference over its se, two-sided p), not CI overlap
  (two 95% CIs overlap up to |z| = 2.77).
- `heldout_check`: held-out processes against a stated prediction interval: the fraction inside against its null
  5% quantile (simulated for the design), the held-out / estimate variance ratio against its F interval.
- `dose_slope`: a dose-response with the process as the unit: per process the OLS slope of step time on the dose
  (the saving per unit), the mean slope over processes with its t-interval (K - 1 df), and the same for the quadratic
  term (a curvature whose CI excludes 0: the response is not linear).
- `machine_prediction`, `new_machine_null`, `heldout_new_machine_check`: a rerun ON ANOTHER MACHINE. The machine a
  process runs on moves it too (the H100 replication: packing's two leases differ by 1.7%), so processes of several
  machines give a machine component omega (ANOVA of process means by machine) and a prediction interval for one
  process on a new machine (Satterthwaite df: wide with 2 machines); held-out processes of one new machine are
  judged against a null simulated for that design (they share one machine effect).
- `spread_prediction`, `spread_null`, `spread_check` (defined in `workbench.measure.replication_spread`, re-exported
  here): the same on a NEW machine whose process SD is its own (log-normal across machines): the interval integrates
  over the machine level and the new machine's tau, its level calibrated by simulation; the held-out spread check is
  one-sided against the spread of the machines seen, its level held for any heterogeneity (the F test above fails
  too often where machines differ: packing's process SD 0.84%, 1.63%, 2.49% on three H100s).
- `null_tau_quantile`: the REML tau's 95th percentile when tau = 0, simulated for the actual design (the process
  sizes), what a repeat diagnostic judges an estimated tau against.
- `process_saving`, `tau_ms`, `with_process_component`: a saving in ms at the unit of the claim, for the
  savings-model verdicts (`workbench.savings.verdicts`): the mean over processes with a t-interval over processes
  (K - 1 df), or one run's rep-level saving widened by a campaign's tau (converted to ms: tau · the arm's step).

Pure numpy / scipy (no torch). `workbench.measure.power` simulates the designs; tests/test_replication.py checks
coverage by simulation with negative controls.
"""
from __future__ import annotations

import functools
import math
from typing import NamedTuple, Sequence

import numpy as np
from scipy import optimize as _opt
from scipy import stats as _sps

from workbench.measure.stats import CONFIDENCE, t_quantile

WITHIN = "within this run"
RERUN = "a rerun"
CHI2_95 = float(_sps.chi2.ppf(CONFIDENCE, 1))
"""The profile-likelihood cutoff: 2 · (l_max - l) <= 3.84 (one parameter, 95%)."""
TAU_BEATS_REPS = 0.4
"""tau / sigma at or above which another process buys more precision than more reps at equal cost (R* <= 2.5 for
equal process and rep costs: `design_for`)."""


def _groups(groups) -> list[np.ndarray]:
    out = []
    for g in groups:
        a = np.asarray([float(v) for v in g if v is not None and v == v], dtype=float)
        if a.size:
            out.append(a)
    return out


class _Design:
    """The sufficient statistics of one-way data: sizes n_k, means ybar_k, within sum of squares."""

    def __init__(self, groups: list[np.ndarray]):
        self.n = np.asarray([g.size for g in groups], dtype=float)
        self.ybar = np.asarray([g.mean() for g in groups])
        self.ssw = float(sum(((g - g.mean()) ** 2).sum() for g in groups))
        self.N, self.K = float(self.n.sum()), len(groups)

    def loglik(self, s2: float, t2: float) -> float:
        """The REML log likelihood (constants dropped) at sigma^2 = s2, tau^2 = t2."""
        v = s2 + self.n * t2
        w = self.n / v
        mu = float((w * self.ybar).sum() / w.sum())
        q = self.ssw / s2 + float((w * (self.ybar - mu) ** 2).sum())
        logdet = float(((self.n - 1) * math.log(s2)).sum() + np.log(v).sum())
        return -0.5 * (logdet + math.log(float(w.sum())) + q)

    def profile_lambda(self, lam: float) -> tuple[float, float]:
        """(l, s2) at tau^2 / sigma^2 = lam with sigma^2 at its REML maximum, s2 = Q0(lam) / (N - 1)."""
        a = 1 + self.n * lam
        w = self.n / a
        mu = float((w * self.ybar).sum() / w.sum())
        q0 = self.ssw + float((w * (self.ybar - mu) ** 2).sum())
        s2 = max(q0 / (self.N - 1), 1e-300)
        ll = -0.5 * ((self.N - 1) * math.log(s2) + float(np.log(a).sum()) + math.log(float(w.sum())) + (self.N - 1))
        return ll, s2

    def profile_tau(self, t2: float, s2_hint: float) -> float:
        """max over sigma^2 of the REML log likelihood at tau^2 = t2."""
        lo, hi = math.log(s2_hint) - 12, math.log(s2_hint) + 12
        r = _opt.minimize_scalar(lambda x: -self.loglik(math.exp(x), t2), bounds=(lo, hi), method="bounded",
                                 options={"xatol": 1e-8})
        return -float(r.fun)


def _argmax_lambda(d: _Design) -> tuple[float, float, float]:
    """(lam, l, s2) at the REML maximum over lam = tau^2 / sigma^2 >= 0."""
    best = (0.0, *d.profile_lambda(0.0))
    grid = np.exp(np.linspace(math.log(1e-6), math.log(1e6), 61))
    vals = [d.profile_lambda(float(x))[0] for x in grid]
    i = int(np.argmax(vals))
    if vals[i] > best[1]:
        lo, hi = math.log(grid[max(i - 1, 0)]), math.log(grid[min(i + 1, len(grid) - 1)])
        r = _opt.minimize_scalar(lambda x: -d.profile_lambda(math.exp(x))[0], bounds=(lo, hi), method="bounded",
                                 options={"xatol": 1e-9})
        lam = math.exp(float(r.x))
        ll, s2 = d.profile_lambda(lam)
        if ll > best[1]:
            best = (lam, ll, s2)
    return best


def _profile_bounds(f, x_hat: float, l_max: float, upper_cap: float) -> tuple[float, float]:
    """The set {x >= 0: 2 (l_max - f(x)) <= CHI2_95} around x_hat (f concave enough): its end points by bisection
    (the lower end 0 when f(0) is inside; the upper end `upper_cap` when never left)."""
    def inside(x):
        return 2 * (l_max - f(x)) <= CHI2_95
    lo = 0.0
    if not inside(0.0):
        a, b = 0.0, x_hat
        for _ in range(40):
            m = (a + b) / 2
            a, b = (a, m) if inside(m) else (m, b)
        lo = b
    a, b = x_hat, max(x_hat * 2, 1e-12)
    while inside(b):
        a, b = b, b * 2
        if b > upper_cap:
            return lo, math.inf
    for _ in range(40):
        m = (a + b) / 2
        a, b = (m, b) if inside(m) else (a, m)
    return lo, a


def reml_components(groups: Sequence[Sequence[float]], *, ci: bool = True) -> dict:
    """sigma (within a process, rep to rep) and tau (between processes) of one-way random-effects data by REML.

    `groups`: one sequence per process, of its per-rep log ratios (any sizes; NaN/None dropped, empty groups
    dropped). Returns {"sigma", "tau", "tau_over_sigma", "tau_ci95" (profile likelihood over sigma), "tau_over_sigma_ci95"
    (profile likelihood of lam = tau^2/sigma^2), "lr" and "lr_p" (the likelihood-ratio test of tau = 0, p from the
    boundary mixture 0.5·chi2_0 + 0.5·chi2_1), "sigma_df" (N - K), "K", "R" (sizes), "N", "mu" (the GLS mean)}.
    With K < 2 or N - K < 1 tau (or sigma) is not estimable: None. `ci` False skips the two profile CIs (a
    simulation's speed). With `ci` the result is cached on the exact data (`_reml_with_ci`): the results pages ask
    for the same repeat groups' components once per table and per page, and the profile CIs are most of the cost."""
    gs = _groups(groups)
    if ci:
        out = _reml_with_ci(tuple(tuple(g.tolist()) for g in gs))
        return {k: list(v) if isinstance(v, list) else v for k, v in out.items()}  # the caller's own lists
    return _reml(gs, ci=False)


@functools.lru_cache(maxsize=512)
def _reml_with_ci(groups: tuple) -> dict:
    """`_reml` with the CIs, once per data (a tuple of per-process tuples of floats, as `_groups` left them).
    Read-only: `reml_components` hands out copies."""
    return _reml([np.asarray(g, dtype=float) for g in groups], ci=True)


def _reml(gs: list[np.ndarray], *, ci: bool) -> dict:
    out = {"sigma": None, "tau": None, "tau_over_sigma": None, "tau_ci95": None, "tau_over_sigma_ci95": None,
           "lr": None, "lr_p": None, "sigma_df": None, "K": len(gs), "R": [int(g.size) for g in gs],
           "N": int(sum(g.size for g in gs)), "mu": None}
    if not gs:
        return out
    d = _Design(gs)
    out["sigma_df"] = int(d.N - d.K)
    if d.K < 2 or d.N - d.K < 1:
        if d.N - d.K >= 1:
            out["sigma"] = math.sqrt(d.ssw / (d.N - d.K))
        out["mu"] = float(np.concatenate(gs).mean())
        return out
    if d.ssw <= 0:  # every process constant inside: sigma 0, tau from the means alone
        return {**out, "sigma": 0.0, "tau": float(np.std(d.ybar, ddof=1)), "mu": float(d.ybar.mean())}
    lam, l_max, s2 = _argmax_lambda(d)
    t2 = lam * s2
    l0 = d.profile_lambda(0.0)[0]
    lr = max(0.0, 2 * (l_max - l0))
    w = d.n / (s2 + d.n * t2)
    out.update(sigma=math.sqrt(s2), tau=math.sqrt(t2), tau_over_sigma=math.sqrt(lam), lr=lr,
               lr_p=float(0.5 * _sps.chi2.sf(lr, 1)) if lr > 0 else 1.0,
               mu=float((w * d.ybar).sum() / w.sum()))
    if not ci:
        return out
    lam_lo, lam_hi = _profile_bounds(lambda x: d.profile_lambda(x)[0], lam, l_max, 1e8)
    out["tau_over_sigma_ci95"] = [math.sqrt(lam_lo), math.sqrt(lam_hi)]
    # tau itself: profile over sigma at each tau (on the tau scale, so the bounds are tau's)
    scale = max(float(np.var(d.ybar, ddof=1)), s2 / float(d.n.mean()), 1e-30)
    t_lo, t_hi = _profile_bounds(lambda x: d.profile_tau(x * x, s2), math.sqrt(t2), l_max, 1e4 * math.sqrt(scale))
    out["tau_ci95"] = [t_lo, t_hi]
    return out


def process_estimate(groups: Sequence[Sequence[float]], *, confidence: float = CONFIDENCE,
                     components: bool = True) -> dict:
    """The speedup a rerun would show, from K processes' per-rep log ratios (`groups`, one sequence per process).

    m_k = mean of process k's log ratios; estimate = exp(mean m_k); ci95 = exp(t-interval over the m_k, K - 1 df);
    pi95 = exp(mean ± t_{K-1} · sd(m) · sqrt(1 + 1/K)), the interval one more process's m lands in 95% of the time
    (for a process of the same R). `population` "a rerun" (K >= 2) or "within this run" (K = 1: the rep-level
    t-interval of that one process, no prediction interval). sigma and tau come from `reml_components`.
    Returns {"speedup", "ci95", "pi95", "K", "R" (sizes), "df", "log_mean", "process_sd_log", "se_log",
    "process_means_log", "population", "sigma", "tau", "tau_ci95", "lr_p", "method"}. `components` False leaves
    tau's CI out (a simulation's speed)."""
    gs = _groups(groups)
    comps = reml_components(gs, ci=components)
    K = len(gs)
    base = {"K": K, "R": [int(g.size) for g in gs], "sigma": comps["sigma"], "tau": comps["tau"],
            "tau_ci95": comps["tau_ci95"], "lr_p": comps["lr_p"], "pi95": None}
    if K == 0:
        return {**base, "speedup": math.nan, "ci95": None, "df": None, "log_mean": math.nan, "process_sd_log": None,
                "se_log": None, "process_means_log": [], "population": WITHIN, "method": "none (no data)"}
    q = (1 + confidence) / 2
    if K == 1:
        y = gs[0]
        m = float(y.mean())
        if y.size < 2:
            return {**base, "speedup": math.exp(m), "ci95": None, "df": None, "log_mean": m, "process_sd_log": None,
                    "se_log": None, "process_means_log": [m], "population": WITHIN, "method": "none (one rep)"}
        se = float(y.std(ddof=1) / math.sqrt(y.size))
        t = t_quantile(q, y.size - 1)
        return {**base, "speedup": math.exp(m), "ci95": [math.exp(m - t * se), math.exp(m + t * se)],
                "df": int(y.size - 1), "log_mean": m, "process_sd_log": None, "se_log": se, "process_means_log": [m],
                "population": WITHIN,
                "method": f"t-interval over {y.size} reps of one process ({y.size - 1} df): within this run only"}
    means = np.asarray([g.mean() for g in gs])
    m, sd = float(means.mean()), float(means.std(ddof=1))
    se = sd / math.sqrt(K)
    t = t_quantile(q, K - 1)
    half_pi = t * sd * math.sqrt(1 + 1 / K)
    return {**base, "speedup": math.exp(m), "ci95": [math.exp(m - t * se), math.exp(m + t * se)],
            "pi95": [math.exp(m - half_pi), math.exp(m + half_pi)], "df": K - 1, "log_mean": m,
            "process_sd_log": sd, "se_log": se, "process_means_log": means.tolist(), "population": RERUN,
            "method": f"t-interval over {K} processes' mean log ratios ({K - 1} df); prediction interval for one more"}


class ProcessDesign(NamedTuple):
    processes: int
    """K: independent processes."""
    reps: int
    """R: reps per process (even, so the two-arm order is balanced)."""
    gpu_minutes: float
    """K · (minutes_per_process + R · minutes_per_rep)."""
    half_width: float
    """The expected 95% half width of the log estimate: t_{K-1} · sqrt((tau^2 + sigma^2 / R) / K); with a machine
    component over J machines t_{J-1} · sqrt(omega^2 / J + (tau^2 + sigma^2 / R) / K)."""
    machines: int = 1
    """J: machines (separate leases) the K processes spread over, evenly; 1 when no machine component is given."""


def design_for(sigma: float, tau: float, target_half_width: float, minutes_per_rep: float,
               minutes_per_process: float, *, min_processes: int = 3, max_processes: int = 200,
               max_reps: int = 64, machine_sd: float = 0.0, minutes_per_machine: float = 0.0,
               max_machines: int = 16) -> ProcessDesign:
    """The cheapest (K, R) whose expected 95% half width of the log estimate, t_{K-1} · sqrt((tau^2 + sigma^2/R)/K),
    is at most `target_half_width` (same unit as sigma and tau: log ratio, e.g. 0.01 for ±1%). R even (2..max_reps),
    K >= `min_processes` (3: a prediction interval with 1 df is ±12.7 sd). Cost = K · (minutes_per_process + R ·
    minutes_per_rep) GPU minutes; `minutes_per_process` holds the model build, equivalence, the warm-up rep and the
    counted pass. Returns a `ProcessDesign` (K, R, gpu_minutes, half_width, machines); the largest K at max_reps when
    the target cannot be met within max_processes (half_width says what it gives).

    `machine_sd` (omega, e.g. `machine_prediction`'s) > 0: a rerun on another machine moves by omega, which no
    number of processes on one machine averages away, so the design spreads K evenly over J >= 2 machines (each
    a lease: `minutes_per_machine` more), half width t_{J-1} · sqrt(omega^2 / J + (tau^2 + sigma^2 / R) / K) (the
    balanced nested design: the grand mean's variance is MSB / K, J - 1 df)."""
    if sigma < 0 or tau < 0 or target_half_width <= 0 or machine_sd < 0:
        raise ValueError("sigma, tau, machine_sd >= 0 and target_half_width > 0 needed")
    best = None
    fallback = None
    machines = range(2, max_machines + 1) if machine_sd > 0 else (1,)
    for J in machines:
        for K in range(max(2, min_processes, J), max_processes + 1):
            if K % J:
                continue
            t = t_quantile((1 + CONFIDENCE) / 2, (J if J > 1 else K) - 1)
            for R in range(2, max_reps + 1, 2):
                hw = t * math.sqrt((machine_sd ** 2 / J if J > 1 else 0.0) + (tau ** 2 + sigma ** 2 / R) / K)
                cost = K * (minutes_per_process + R * minutes_per_rep) + (J * minutes_per_machine if J > 1 else 0.0)
                if hw <= target_half_width and (best is None or cost < best.gpu_minutes - 1e-12):
                    best = ProcessDesign(K, R, cost, hw, J)
                if fallback is None or hw < fallback.half_width:
                    fallback = ProcessDesign(K, R, cost, hw, J)
    return best or fallback


# --- machines: a rerun on another machine ------------------------------------------------------------------------
#     J = machines (leases: one GPU each), n_j = processes on machine j, K = sum n_j, m_jk = process k's mean log
#     ratio on machine j; the model adds a machine effect v_j ~ N(0, omega^2) above the process one:
#     m_jk = mu + v_j + u_jk,  u_jk ~ N(0, tau'^2),  tau'^2 = tau^2 + sigma^2 / R (a process mean's scatter).

def _machine_moments(ms: list) -> dict:
    """One-way ANOVA of process means by machine, vectorised over simulations: `ms` is one array per machine, shape
    (sims, n_j). Returns arrays (shape (sims,)) "center" (the mean of all K process means), "msw", "msb" (None with
    J = 1) and the scalars "K", "J", "n0", "s2w" (sum (n_j / K)^2)."""
    n = np.asarray([m.shape[1] for m in ms], dtype=float)
    K, J = float(n.sum()), len(ms)
    allm = np.concatenate(ms, axis=1)
    center = allm.mean(axis=1)
    mj = [m.mean(axis=1) for m in ms]
    ssw = sum(((m - mm[:, None]) ** 2).sum(axis=1) for m, mm in zip(ms, mj))
    out = {"center": center, "msw": ssw / (K - J) if K > J else None, "msb": None, "K": int(K), "J": J,
           "n0": None, "s2w": float(((n / K) ** 2).sum())}
    if J >= 2:
        out["msb"] = sum(nj * (mm - center) ** 2 for nj, mm in zip(n, mj)) / (J - 1)
        out["n0"] = float((K - (n ** 2).sum() / K) / (J - 1))
    return out


def _machine_pi_half(mo: dict, confidence: float, n_new: int = 1):
    """(half width, df, omega^2) arrays of the prediction interval for the mean of `n_new` processes (default one) on
    a new machine (see `machine_prediction`), from `_machine_moments`."""
    K, J, s2w = mo["K"], mo["J"], mo["s2w"]
    r = 1.0 / n_new  # the new machine's own processes' share of tau'^2 (1 for one process)
    msw = mo["msw"]
    q = (1 + confidence) / 2
    if J < 2:  # the machine component is not estimable: the interval assumes none
        var, df = msw * (r + 1 / K), np.full_like(msw, K - 1, dtype=float)
        return _sps.t.ppf(q, df) * np.sqrt(var), df, np.full_like(msw, np.nan, dtype=float)
    msb, n0 = mo["msb"], mo["n0"]
    om2 = np.maximum(0.0, (msb - msw) / n0)
    a = (1 + s2w) / n0
    pos = om2 > 0
    # omega^2 > 0: V = a MSB + (1/n + 1/K - a) MSW; omega^2 truncated at 0: V = (1/n + 1/K) MSW
    ta, tb = np.where(pos, a * msb, 0.0), np.where(pos, (r + 1 / K - a) * msw, (r + 1 / K) * msw)
    var = ta + tb
    den = ta ** 2 / (J - 1) + tb ** 2 / (K - J)
    df = np.where(den > 0, var ** 2 / np.where(den > 0, den, 1.0), np.inf)
    return _sps.t.ppf(q, df) * np.sqrt(var), df, om2


def machine_prediction(machines: Sequence[Sequence[Sequence[float]]], *, confidence: float = CONFIDENCE,
                       n_new: int = 1) -> dict:
    """The speedup a rerun ON ANOTHER MACHINE would show, from processes run on J machines: `machines` holds one list
    per machine of its processes' per-rep log ratios (every process of the same R).

    Model: process mean m_jk = mu + v_j + u_jk, the machine effect v_j ~ N(0, omega^2), the process effect
    u_jk ~ N(0, tau'^2) (tau'^2 = tau^2 + sigma^2 / R). Estimates by the one-way ANOVA of process means by machine
    (method of moments, unbalanced n_j allowed): MSW (K - J df) estimates tau'^2, MSB (J - 1 df) estimates
    tau'^2 + n0 omega^2 with n0 = (K - sum n_j^2 / K) / (J - 1), so omega^2 = max(0, (MSB - MSW) / n0).

    - estimate = exp(mean of all K process means) (`process_estimate` over every process);
    - ci95 (these machines): t_{K-J} · sqrt(MSW / K): the mean over the machines that ran, not over machines;
    - pi95 (one process on a new machine; `n_new` > 1: the mean of that many there, tau'^2 / n_new in place of
      tau'^2): mean ± t_df · sqrt(V), V = omega^2 (1 + sum (n_j/K)^2) + tau'^2 (1 + 1/K)
      written as a MSB + b MSW, df by Welch-Satterthwaite (J - 1 and K - J df). With J = 2 the machine term has
      1 df: where omega dominates, df is near 1 and the interval is wide (t_1 = 12.7): the honest width of what two
      machines say about a third. omega^2 estimated 0: V = (1 + 1/K) MSW, K - J df. Satterthwaite's df are
      themselves estimated: with J = 2 and omega / tau' between 1 and 10 the interval covers 88-93% in simulation
      (95% at either end; `new_machine_null` states it for the design at hand, and the held-out check's null is
      simulated with this very rule, so its level holds).
    - J = 1: omega is not estimable; the interval assumes no machine component (it is `process_estimate`'s).
    Returns {"speedup", "log_mean", "ci95", "ci_df", "pi95", "pi_df", "omega", "tau_process" (sqrt MSW), "msw",
    "msb", "n0", "J", "K", "n_per_machine", "R", "machine_means_log", "process_means_log" (per machine), "method"}."""
    gs = [[np.asarray([float(v) for v in p if v is not None and v == v]) for p in m] for m in machines]
    gs = [[p for p in m if p.size] for m in gs]
    gs = [m for m in gs if m]
    sizes = [len(m) for m in gs]
    K, J = sum(sizes), len(gs)
    if K - J < 1:
        raise ValueError(f"a machine-level prediction needs more processes than machines (K={K}, J={J})")
    ms = [np.asarray([[p.mean() for p in m]]) for m in gs]
    mo = _machine_moments(ms)
    half, df, om2 = _machine_pi_half(mo, confidence, n_new)
    c, msw = float(mo["center"][0]), float(mo["msw"][0])
    t_ci = t_quantile((1 + confidence) / 2, K - J)
    ci_half = t_ci * math.sqrt(msw / K)
    h, d = float(half[0]), float(df[0])
    omega = None if J < 2 else math.sqrt(float(om2[0]))
    how = ("one machine: the machine component is not estimable, the interval assumes none" if J < 2 else
           f"machine component omega {100 * omega:.2f}% from {J} machines ({J - 1} df); prediction interval with "
           f"{d:.1f} Satterthwaite df")
    return {"speedup": math.exp(c), "log_mean": c, "ci95": [math.exp(c - ci_half), math.exp(c + ci_half)],
            "ci_df": K - J, "pi95": [math.exp(c - h), math.exp(c + h)], "pi_df": d if math.isfinite(d) else None,
            "omega": omega, "tau_process": math.sqrt(msw), "msw": msw,
            "msb": None if mo["msb"] is None else float(mo["msb"][0]), "n0": mo["n0"], "J": J, "K": K,
            "n_per_machine": sizes, "R": sorted({int(p.size) for m in gs for p in m}),
            "machine_means_log": [float(m.mean()) for m in ms],
            "process_means_log": [m[0].tolist() for m in ms], "method": how}


def _new_machine_inside_null(sizes: Sequence[int], M: int, omega_over_tau: float, *, sims: int, seed: int,
                             confidence: float) -> np.ndarray:
    """Simulated fraction of M processes of ONE new machine inside `machine_prediction`'s interval from machines of
    these `sizes`, when the model holds with omega / tau' = `omega_over_tau` (scale-free: tau' = 1). The M share
    their machine's effect, so the fractions cluster (a whole machine falls in or out together)."""
    rng = np.random.default_rng(seed)
    w = float(omega_over_tau)
    ms = [w * rng.standard_normal((sims, 1)) + rng.standard_normal((sims, n)) for n in sizes]
    mo = _machine_moments(ms)
    half, _, _ = _machine_pi_half(mo, confidence)
    new = w * rng.standard_normal((sims, 1)) + rng.standard_normal((sims, M))
    return (np.abs(new - mo["center"][:, None]) <= half[:, None]).mean(axis=1)


def new_machine_null(prediction: dict, M: int, *, sims: int = 20000, seed: int = 0,
                     confidence: float = CONFIDENCE) -> dict:
    """What `heldout_new_machine_check` judges M held-out processes of one new machine against, fixed before they
    run: the fraction-inside null 5% quantile (simulated for this design at the estimated omega / tau', plug-in;
    omega 0 where not estimable) and the variance ratio's central 95% F(M - 1, K - J) interval.
    Returns {"M", "inside_null_q05", "p_all_outside" (the null chance that the whole machine falls outside),
    "coverage" (the interval's simulated coverage of one new process: nominal 95%, less where the Satterthwaite df
    of a 1-df machine term are too many), "f_interval", "omega_over_tau", "sims", "seed"}."""
    tp = float(prediction["tau_process"])
    w = 0.0 if not prediction.get("omega") or tp <= 0 else float(prediction["omega"]) / tp
    f = _new_machine_inside_null(prediction["n_per_machine"], int(M), w, sims=sims, seed=seed, confidence=confidence)
    a = (1 - confidence) / 2
    dfw = int(prediction["K"]) - int(prediction["J"])
    return {"M": int(M), "inside_null_q05": float(np.quantile(f, 0.05)), "p_all_outside": float((f == 0).mean()),
            "coverage": float(f.mean()),
            "f_interval": [float(_sps.f.ppf(a, M - 1, dfw)), float(_sps.f.ppf(1 - a, M - 1, dfw))],
            "omega_over_tau": w, "sims": sims, "seed": seed}


def heldout_new_machine_check(prediction: dict, heldout_means: Sequence[float], *, null: dict | None = None,
                              sims: int = 20000, seed: int = 0, confidence: float = CONFIDENCE) -> dict:
    """M >= 2 held-out processes run on ONE machine that none of the estimate's processes ran on, against
    `machine_prediction`'s interval for a process on a new machine (the rule, fixed before the run):

    - inside = the fraction of held-out process means inside `prediction["pi95"]`; passes when >= the null 5%
      quantile of `new_machine_null` (pass `null` as committed before the run; it is recomputed, same seed, for
      another M);
    - variance_ratio = var(held-out means) / MSW ~ F(M - 1, K - J): the new machine's process scatter against the
      estimate's within-machine scatter; passes inside its central 95% interval.
    Returns {"inside", "inside_null_q05", "inside_ok", "variance_ratio", "f_interval", "variance_ok", "ok", "M",
    "heldout_speedup" (exp of their mean), "shift_pct" (the new machine's mean against the estimate)}."""
    h = np.asarray([float(v) for v in heldout_means], dtype=float)
    M = int(h.size)
    if M < 2:
        raise ValueError(f"the held-out check needs M >= 2 processes (M={M})")
    if null is None or int(null.get("M", -1)) != M:
        null = new_machine_null(prediction, M, sims=sims, seed=seed, confidence=confidence)
    lo, hi = (math.log(v) for v in prediction["pi95"])
    inside = float(((h >= lo) & (h <= hi)).mean())
    ratio = float(h.var(ddof=1)) / float(prediction["msw"]) if prediction["msw"] > 0 else math.inf
    f_int = null["f_interval"]
    inside_ok, var_ok = inside >= null["inside_null_q05"], f_int[0] <= ratio <= f_int[1]
    return {"inside": inside, "inside_null_q05": null["inside_null_q05"], "inside_ok": bool(inside_ok),
            "variance_ratio": ratio, "f_interval": f_int, "variance_ok": bool(var_ok), "ok": bool(inside_ok and var_ok),
            "M": M, "heldout_speedup": math.exp(float(h.mean())),
            "shift_pct": 100 * (math.exp(float(h.mean()) - prediction["log_mean"]) - 1)}


def _log_and_se(r: dict) -> tuple[float, float, float | None]:
    """(log estimate, se of it, df) of a run estimate: `process_estimate` output, or {"speedup", "se_log" | "ci95"
    (with "df" or "n_units")}."""
    s = float(r["speedup"])
    se = r.get("se_log")
    df = r.get("df")
    if df is None and r.get("n_units"):
        df = int(r["n_units"]) - 1
    if se is None:
        from workbench.measure.stats import se_from_ci
        se = se_from_ci(r.get("ci95"), None if df is None else df + 1)
    if se is None:
        raise ValueError("a run estimate needs se_log, or ci95 with df / n_units")
    return math.log(s), float(se), df


def runs_agree(a: dict, b: dict, *, alpha: float = 1 - CONFIDENCE) -> dict:
    """Do two run estimates agree? A test, not CI overlap: z = (log a - log b) / sqrt(se_a^2 + se_b^2), two-sided p
    from Student's t with Welch-Satterthwaite df (normal when a df is unknown). `a`, `b`: `process_estimate` output
    or {"speedup", "se_log" | "ci95" with "df" / "n_units"}. Returns {"z", "p", "df", "agree" (p >= alpha),
    "diff_pct" (100 · (a / b - 1))}. Two 95% CIs that just overlap are |z| up to 2.77 apart (p = 0.006): overlap
    is not agreement at 5%."""
    from workbench.measure.stats import t_cdf, welch_satterthwaite_df
    la, sa, da = _log_and_se(a)
    lb, sb, db = _log_and_se(b)
    se = math.sqrt(sa ** 2 + sb ** 2)
    if se == 0:
        z = 0.0 if la == lb else math.copysign(math.inf, la - lb)
        df = None
    else:
        z = (la - lb) / se
        df = welch_satterthwaite_df([(sa ** 2, da), (sb ** 2, db)])
    p = 2 * (1 - t_cdf(abs(z), df)) if math.isfinite(z) else 0.0
    return {"z": z, "p": p, "df": df if df is None or math.isfinite(df) else None, "agree": p >= alpha,
            "diff_pct": 100 * (math.exp(la - lb) - 1)}


def _inside_fraction_null(K: int, M: int, *, sims: int, seed: int, confidence: float) -> np.ndarray:
    """Simulated fraction of M held-out process means inside the prediction interval from K (all from one normal:
    the null that the interval is right)."""
    rng = np.random.default_rng(seed)
    est = rng.standard_normal((sims, K))
    held = rng.standard_normal((sims, M))
    m, sd = est.mean(axis=1), est.std(axis=1, ddof=1)
    half = t_quantile((1 + confidence) / 2, K - 1) * sd * math.sqrt(1 + 1 / K)
    return (np.abs(held - m[:, None]) <= half[:, None]).mean(axis=1)


def heldout_check(estimate: dict, heldout_means: Sequence[float], *, sims: int = 20000, seed: int = 0,
                  confidence: float = CONFIDENCE) -> dict:
    """Held-out processes against a stated prediction interval. `estimate`: `process_estimate` output (K >= 2);
    `heldout_means`: M >= 2 held-out processes' mean log ratios (each of the same R as the estimate's).

    - inside = the fraction of held-out means inside `estimate["pi95"]`; passes when >= its null 5% quantile,
      simulated for this K and M (the interval right, every process from one normal).
    - variance_ratio = var(held-out means) / var(estimate's process means) ~ F(M - 1, K - 1) under the null; passes
      when inside its central 95% interval.
    Returns {"inside", "inside_null_q05", "inside_ok", "variance_ratio", "f_interval", "variance_ok", "ok", "K", "M"}."""
    K = int(estimate["K"])
    h = np.asarray([float(v) for v in heldout_means], dtype=float)
    M = int(h.size)
    if K < 2 or M < 2 or estimate.get("pi95") is None:
        raise ValueError(f"held-out check needs K >= 2 estimate processes and M >= 2 held-out ones (K={K}, M={M})")
    lo, hi = (math.log(v) for v in estimate["pi95"])
    inside = float(((h >= lo) & (h <= hi)).mean())
    q05 = float(np.quantile(_inside_fraction_null(K, M, sims=sims, seed=seed, confidence=confidence), 0.05))
    var_est = float(estimate["process_sd_log"]) ** 2
    ratio = float(h.var(ddof=1)) / var_est if var_est > 0 else math.inf
    a = (1 - confidence) / 2
    f_int = [float(_sps.f.ppf(a, M - 1, K - 1)), float(_sps.f.ppf(1 - a, M - 1, K - 1))]
    inside_ok, var_ok = inside >= q05, f_int[0] <= ratio <= f_int[1]
    return {"inside": inside, "inside_null_q05": q05, "inside_ok": bool(inside_ok), "variance_ratio": ratio,
            "f_interval": f_int, "variance_ok": bool(var_ok), "ok": bool(inside_ok and var_ok), "K": K, "M": M}


def null_tau_quantile(sizes: Sequence[int], sigma: float, *, q: float = 0.95, sims: int = 400,
                      seed: int = 0) -> float:
    """The q-quantile of the REML tau when the true tau is 0, for processes of these `sizes` (reps each) and rep SD
    `sigma`: what an estimated tau is judged against for the design that produced it (with few reps per process,
    tau-hat is far from 0 by chance alone). REML is scale-equivariant (tau-hat of sigma·z is sigma · tau-hat of z),
    so the simulation runs once per design at sigma = 1 (`_null_tau_quantile_unit`, cached) and scales."""
    return float(sigma) * _null_tau_quantile_unit(tuple(int(n) for n in sizes), q, sims, seed)


@functools.lru_cache(maxsize=256)
def _null_tau_quantile_unit(sizes: tuple, q: float, sims: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    taus = []
    for _ in range(sims):
        g = [rng.standard_normal(n) for n in sizes]
        taus.append(reml_components(g, ci=False)["tau"] or 0.0)
    return float(np.quantile(taus, q))


def dose_slope(processes: Sequence[Sequence[tuple[float, float]]], *, confidence: float = CONFIDENCE) -> dict:
    """The saving per unit of a dose-response, the process as the unit.

    `processes`: per process, its (units, step_ms) points (one per level and rep; the engine runs every level in
    every rep, so rep effects are orthogonal to the dose and plain OLS is the within-rep slope). Per process k:
    saving_k = -(OLS slope of step_ms on units) (ms per unit saved, `stats.linear_fit`) and q_k = the quadratic term
    of its points (`stats.quadratic_term`). Returns {"slope_ms", "slope_ci95", "slope_se", "df", "per_process",
    "quad", "quad_ci95", "bend", "linear", "K"}: the mean saving over processes with its t-interval (K - 1 df); the
    mean q (ms per unit², of the step time: q < 0 saves more at high doses) with its t-interval; `bend` = the
    quadratic's share at the top dose, -q u_max / slope; `linear` False when q's CI excludes 0 (None below 2
    processes)."""
    from workbench.measure import stats

    slopes, quads, umax = [], [], 0.0
    for pts in processes:
        if len(pts) < 2:
            continue
        x, y = [float(p[0]) for p in pts], [float(p[1]) for p in pts]
        umax = max(umax, max(x))
        fit = stats.linear_fit(x, y)
        if fit["slope"] is None:
            continue
        slopes.append(-fit["slope"])
        q = stats.quadratic_term(x, y)["q"]
        if q is not None:
            quads.append(q)
    ts, tq = stats.t_interval(slopes, confidence=confidence), stats.t_interval(quads, confidence=confidence)
    bend = (-tq["mean"] * umax / ts["mean"]) if quads and ts["mean"] else None
    linear = None if tq["ci"] is None else not (tq["ci"][0] > 0 or tq["ci"][1] < 0)
    return {"slope_ms": ts["mean"], "slope_ci95": ts["ci"], "slope_se": ts["se"], "df": ts["df"], "K": len(slopes),
            "per_process": slopes, "quad": tq["mean"] if quads else None, "quad_ci95": tq["ci"], "bend": bend,
            "linear": linear}
# --- a saving (ms) with the process as the unit: the savings-model verdicts' measured side ---------------------

def process_saving(groups: Sequence[Sequence[float]], *, confidence: float = CONFIDENCE) -> dict:
    """A saving (baseline - arm, ms per step) that a rerun would show, from K processes' per-rep savings (`groups`,
    one sequence per process: each rep's mean paired difference).

    mean = the mean over processes of each process's mean saving; ci95 = a t-interval over the K process means
    (K - 1 df; se = their sd / sqrt(K)); pi95 = the interval one more process's mean lands in, mean ± t_{K-1} · sd ·
    sqrt(1 + 1/K); sigma (rep within process) and tau (between processes) by REML, in ms. With K = 1 it is the
    rep-level t-interval of that one process, `population` "within this run". Returns the keys of
    `stats.paired_difference` ({"mean", "ci95", "se", "df", "n_units" (K), "n_pairs" (reps in all), "method"}) plus
    {"pi95", "population", "sigma", "tau", "K", "R"}."""
    gs = _groups(groups)
    K = len(gs)
    comps = reml_components(gs, ci=False) if K else {"sigma": None, "tau": None}
    base = {"K": K, "R": [int(g.size) for g in gs], "n_pairs": int(sum(g.size for g in gs)), "pi95": None,
            "sigma": comps["sigma"], "tau": comps["tau"]}
    q = (1 + confidence) / 2
    if K == 0:
        return {**base, "mean": math.nan, "ci95": None, "se": None, "df": None, "n_units": 0, "population": WITHIN,
                "method": "none (no data)"}
    if K == 1:
        y = gs[0]
        if y.size < 2:
            return {**base, "mean": float(y.mean()), "ci95": None, "se": None, "df": None, "n_units": 1,
                    "population": WITHIN, "method": "none (one rep)"}
        se = float(y.std(ddof=1) / math.sqrt(y.size))
        t = t_quantile(q, y.size - 1)
        m = float(y.mean())
        return {**base, "mean": m, "ci95": [m - t * se, m + t * se], "se": se, "df": int(y.size - 1),
                "n_units": int(y.size), "population": WITHIN,
                "method": f"t-interval over {y.size} reps of one process: within this run only"}
    means = np.asarray([g.mean() for g in gs])
    m, sd = float(means.mean()), float(means.std(ddof=1))
    se = sd / math.sqrt(K)
    t = t_quantile(q, K - 1)
    return {**base, "mean": m, "ci95": [m - t * se, m + t * se], "se": se, "df": K - 1, "n_units": K,
            "pi95": [m - t * sd * math.sqrt(1 + 1 / K), m + t * sd * math.sqrt(1 + 1 / K)], "population": RERUN,
            "method": f"t-interval over {K} processes' mean savings ({K - 1} df)"}


def tau_ms(tau_log: float, arm_step_ms: float) -> float:
    """The process component of a saving in ms from its log-ratio tau: the saving is S = B - O = B (1 - e^{-y}) with
    y = log(B / O) the per-rep log ratio, so a process shift u of y moves S by dS/dy · u = O · u, and
    tau_S = tau_y · O (O: the optimized arm's mean step, ms)."""
    return float(tau_log) * float(arm_step_ms)


def with_process_component(within: dict, tau_ms_value: float, tau_df: float | None, source: str, *,
                           confidence: float = CONFIDENCE) -> dict:
    """A single run's saving (`stats.paired_difference` output, the rep as the unit: "within this run") widened to
    speak for a rerun: se^2 = se_within^2 + tau_ms^2 (the rep-level se estimates sigma^2 / R; one process adds its
    own shift, variance tau^2), df by Welch-Satterthwaite (the within part R - 1, tau's part `tau_df`: the
    campaign's K - 1). `population` "single run + tau from SOURCE". Returns a copy with mean, se, df, ci95 replaced
    and {"se_within", "ci95_within", "tau_ms", "tau_df", "population"} added; with no se (fewer than 2 reps) it is
    returned unchanged, labelled "within this run"."""
    from workbench.measure.stats import welch_satterthwaite_df
    if within.get("se") is None or within.get("mean") is None:
        return {**within, "population": WITHIN}
    parts = [(float(within["se"]) ** 2, within.get("df")), (float(tau_ms_value) ** 2, tau_df)]
    se = math.sqrt(parts[0][0] + parts[1][0])
    df = welch_satterthwaite_df(parts)
    t = t_quantile((1 + confidence) / 2, df)
    m = float(within["mean"])
    return {**within, "se": se, "df": df if math.isfinite(df) else None, "ci95": [m - t * se, m + t * se],
            "se_within": within["se"], "ci95_within": within.get("ci95"), "tau_ms": float(tau_ms_value),
            "tau_df": tau_df, "population": f"single run + tau from {source}"}


from workbench.measure.replication_spread import (  # noqa: E402,F401  (one facade: the machine-spread model)
    spread_check, spread_null, spread_prediction)
