"""A rerun on a NEW machine whose process spread is its own: the revised prediction.

    # J = machines (leases: one GPU each), n_j = processes on machine j, K = sum n_j, M = held-out processes of one
    # new machine, m_jk = process k's mean log ratio on machine j (every process of the same R reps),
    # d_j = mean of machine j's m_jk, s_j^2 = their variance (n_j - 1 df), S = simulations

`replication.machine_prediction` pools the process scatter of every machine (MSW) and its held-out check judged a
new machine's scatter against it with an F test. On the H100s the machine moves the scatter too (packing: the SD
of the process means 0.84%, 1.63%, 2.49% on machines A, B, C), and where machines differ that F test fails too
often. The model here gives each machine its own process variance (log-normal across machines):

    m_jk = mu + v_j + u_jk,   v_j ~ N(0, omega^2),   u_jk ~ N(0, tau_j^2),   log tau_j^2 ~ N(lambda, eta^2).

`spread_fit`: moments from the machines' sufficient statistics, each machine one unit:
- L_j = log s_j^2 - b(n_j - 1), b(f) = psi(f/2) + log(2/f) = E log(chi2_f / f), so E L_j = lambda and
  var L_j = eta^2 + c_j with c_j = psi'((n_j - 1)/2); lambda-hat = mean L_j, eta^2-hat = max(0, var(L) - mean c);
- var(d) estimates omega^2 + mean_j(tau_j^2 / n_j): omega^2-hat = max(0, var(d) - mean(s_j^2 / n_j)),
  mu-hat = mean d_j, its 95% CI mu-hat ± t_{J-1} sqrt(var(d) / J) (the mean over machines).

`spread_prediction`: the 95% prediction interval for ONE process on a NEW machine integrates over the machine level
and over tau_new: the fitted predictive (plug-in) is the scale mixture

    F(x) = E_s Phi((x - mu-hat) / sqrt(omega^2-hat + exp(lambda-hat + eta-hat s))),  s ~ N(0, 1)  (Gauss-Hermite),

and its nominal level is calibrated (Beran 1990) so that the interval covers 95%: the design (n_j) simulated at the
fitted omega, lambda, eta, refitted each time, gamma* = the 95% quantile of |2 F_sim(new) - 1| over the simulations;
pi95 = exp(F^-1((1 - gamma*)/2), F^-1((1 + gamma*)/2)). A single calibration at the plug-in: in simulation with J = 3
(12, 8, 6 processes) it covers 0.90-0.97 over eta 0-1 and omega 0-2 tau (the uncalibrated plug-in 0.83-0.97; a
Jeffreys-pivot Monte Carlo 0.99, as wide as [0.91, 1.28] for packing). With J = 3 its width is what three machines
say about a fourth.

`spread_check`: M held-out processes of one new machine, against a rule fixed before they run (`spread_null`):
- inside: the fraction of the M inside pi95 >= its null 5% quantile, the whole design simulated at the fitted
  omega, lambda, eta (plug-in), each simulated interval re-fitted at the committed gamma*, the M sharing one
  machine effect and one tau_new;
- spread (one-sided): T = (L_new - mean L) / sd(L), L_new = log s_new^2 - b(M - 1); fails when T > t_q95, T's 95%
  quantile simulated for the design (n_j, M) at each eta of `ETA_GRID` and the largest taken (T is nearly pivotal:
  sqrt(1 + 1/J) t_{J-1} when eta dominates the chi-square noise), so the level is at most 5% whatever the
  heterogeneity. Said as an SD: it fails when the M means' SD exceeds `max_sd_log`.

Pure numpy / scipy. Re-exported by `workbench.measure.replication`; tests/test_replication_spread.py checks the
level by simulation, with the F test of `replication.heldout_new_machine_check` as the negative control.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from numpy.polynomial.hermite_e import hermegauss
from scipy import optimize as _opt
from scipy import special as _spf
from scipy import stats as _sps

from workbench.measure.stats import CONFIDENCE

ETA_GRID = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
"""The SDs of log tau_j^2 across machines over which the spread check's threshold is maximised."""
GAMMA_MAX = 0.9999
"""The calibrated nominal level's cap (a design too thin to reach 95% shows it in `nominal`)."""
_GH_X, _GH_W = hermegauss(40)
_GH_W = _GH_W / _GH_W.sum()


def log_var_bias(df) -> np.ndarray:
    """b(f) = E log(chi2_f / f) = psi(f/2) + log(2/f): the bias of a log sample variance with f df."""
    f = np.asarray(df, dtype=float)
    return _spf.digamma(f / 2) + np.log(2 / f)


def log_var_noise(df) -> np.ndarray:
    """c(f) = var log(chi2_f / f) = psi'(f/2): the noise of a log sample variance with f df."""
    return _spf.polygamma(1, np.asarray(df, dtype=float) / 2)


def _process_means(machines) -> list[np.ndarray]:
    gs = [[np.asarray([float(v) for v in p if v is not None and v == v]) for p in m] for m in machines]
    out = [np.asarray([p.mean() for p in m if p.size]) for m in gs]
    out = [m for m in out if m.size]
    if len(out) < 2 or min(m.size for m in out) < 2:
        raise ValueError(f"the spread model needs J >= 2 machines of >= 2 processes each "
                         f"(sizes {[int(m.size) for m in out]})")
    return out


def spread_fit(d, s2, n) -> dict:
    """The moment fit from machine means `d` and process variances `s2` (shape (J,) or (S, J); `n` processes per
    machine, shape (J,)). Returns arrays (shape () or (S,)) {"mu", "var_d", "tau2_over_n", "omega2", "L" (per
    machine), "c", "lam", "var_L", "eta2"}: the formulas of the module docstring."""
    d, n = np.asarray(d, dtype=float), np.asarray(n, dtype=float)
    s2 = np.maximum(np.asarray(s2, dtype=float), 1e-300)
    L = np.log(s2) - log_var_bias(n - 1)
    c = log_var_noise(n - 1)
    var_d, var_L = d.var(axis=-1, ddof=1), L.var(axis=-1, ddof=1)
    t2n = (s2 / n).mean(axis=-1)
    return {"mu": d.mean(axis=-1), "var_d": var_d, "tau2_over_n": t2n, "omega2": np.maximum(0.0, var_d - t2n),
            "L": L, "c": c, "lam": L.mean(axis=-1), "var_L": var_L, "eta2": np.maximum(0.0, var_L - c.mean())}


def predictive_cdf(x, mu, omega2, lam, eta2) -> np.ndarray:
    """F(x) of one process on a new machine for fits of shape (S,) (floats allowed), x of shape (S, P): the normal
    scale mixture of the module docstring by 40-node Gauss-Hermite quadrature over log tau_new^2."""
    par = [np.atleast_1d(np.asarray(v, dtype=float))[:, None, None] for v in (mu, omega2, lam, eta2)]
    x = np.atleast_2d(np.asarray(x, dtype=float))
    var = par[1] + np.exp(par[2] + np.sqrt(par[3]) * _GH_X)
    return (_sps.norm.cdf((x[:, :, None] - par[0]) / np.sqrt(var)) * _GH_W).sum(axis=-1)


def _pit(fit: dict, new) -> np.ndarray:
    """|2 F(new) - 1| of new process means (S, P) under fits of shape (S,): inside the interval of nominal level
    gamma exactly when <= gamma."""
    return np.abs(2 * predictive_cdf(new, fit["mu"], fit["omega2"], fit["lam"], fit["eta2"]) - 1)


def _simulate_design(n, M, omega, lam, eta, S, rng):
    """(d, s2) of the J estimate machines, shape (S, J), and M new-machine process means, shape (S, M), mu = 0; the
    sufficient statistics drawn exactly: d_j ~ N(v_j, tau_j^2 / n_j), s_j^2 ~ tau_j^2 chi2_{n_j-1} / (n_j - 1)."""
    n = np.asarray(n, dtype=float)
    tau = np.exp((lam + eta * rng.standard_normal((S, n.size))) / 2)
    d = omega * rng.standard_normal((S, n.size)) + tau / np.sqrt(n) * rng.standard_normal((S, n.size))
    s2 = tau ** 2 * rng.chisquare(n - 1, (S, n.size)) / (n - 1)
    t_new = np.exp((lam + eta * rng.standard_normal((S, 1))) / 2)
    return d, s2, omega * rng.standard_normal((S, 1)) + t_new * rng.standard_normal((S, int(M)))


def _simulated_pit(n, M, omega, lam, eta, sims, seed) -> np.ndarray:
    """|2 F - 1| of M new processes, shape (sims, M), each simulation's fit re-done (the design at the plug-in)."""
    rng = np.random.default_rng(seed)
    d, s2, new = _simulate_design(n, M, omega, lam, eta, sims, rng)
    return _pit(spread_fit(d, s2, n), new)


def _invert(q: float, fit: dict) -> float:
    """x with F(x) = q for one fit (floats)."""
    sd = math.sqrt(float(fit["omega2"]) + math.exp(float(fit["lam"]) + 8 * math.sqrt(float(fit["eta2"]))))
    mu = float(fit["mu"])

    def f(x):
        return float(predictive_cdf([[x]], mu, fit["omega2"], fit["lam"], fit["eta2"])[0, 0]) - q
    return float(_opt.brentq(f, mu - 60 * sd, mu + 60 * sd, xtol=1e-12))


def spread_prediction(machines: Sequence[Sequence[Sequence[float]]], *, sims: int = 20000, seed: int = 0,
                      confidence: float = CONFIDENCE) -> dict:
    """The speedup one process on a NEW machine would show, each machine with its own process variance.
    `machines`: one list per machine (J >= 2, each >= 2 processes) of its processes' per-rep log ratios.
    Returns {"speedup" (exp mu-hat: the mean over machines), "log_mean", "ci95" (over machines, J - 1 df), "pi95"
    (one process on a new machine), "nominal" (gamma*), "pi95_uncalibrated", "coverage_uncalibrated" (the plug-in
    interval's simulated coverage), "tau_new_sd95" (plug-in 95% interval of a new machine's process SD, log units),
    "omega", "eta", "lam", "sd_L", "L", "c", "process_sd_log" (per machine), "machine_means_log",
    "process_means_log", "n_per_machine", "J", "K", "R", "sims", "seed", "method"}."""
    ms = _process_means(machines)
    n = np.asarray([m.size for m in ms])
    d, s2 = np.asarray([m.mean() for m in ms]), np.asarray([m.var(ddof=1) for m in ms])
    J = len(ms)
    fit = {k: (float(v) if np.ndim(v) == 0 else v) for k, v in spread_fit(d, s2, n).items()}
    omega, eta = math.sqrt(fit["omega2"]), math.sqrt(fit["eta2"])
    pit = _simulated_pit(n, 1, omega, fit["lam"], eta, sims, seed)
    gamma = min(float(np.quantile(pit, confidence)), GAMMA_MAX)
    lo, hi = _invert((1 - gamma) / 2, fit), _invert((1 + gamma) / 2, fit)
    a = (1 - confidence) / 2
    u_lo, u_hi = _invert(a, fit), _invert(1 - a, fit)
    mu, z = fit["mu"], float(_sps.norm.ppf(1 - a))
    half = float(_sps.t.ppf(1 - a, J - 1)) * math.sqrt(fit["var_d"] / J)
    R = sorted({len([v for v in p if v is not None and v == v]) for mach in machines for p in mach} - {0})
    return {"speedup": math.exp(mu), "log_mean": mu, "ci95": [math.exp(mu - half), math.exp(mu + half)],
            "ci_df": J - 1, "pi95": [math.exp(lo), math.exp(hi)], "nominal": gamma,
            "pi95_uncalibrated": [math.exp(u_lo), math.exp(u_hi)],
            "coverage_uncalibrated": float((pit <= confidence).mean()),
            "tau_new_sd95": [math.exp((fit["lam"] - z * eta) / 2), math.exp((fit["lam"] + z * eta) / 2)],
            "omega": omega, "eta": eta, "lam": fit["lam"], "sd_L": math.sqrt(fit["var_L"]),
            "L": fit["L"].tolist(), "c": fit["c"].tolist(), "process_sd_log": np.sqrt(s2).tolist(),
            "machine_means_log": d.tolist(), "process_means_log": [m.tolist() for m in ms],
            "n_per_machine": n.tolist(), "J": J, "K": int(n.sum()), "R": R, "sims": sims, "seed": seed,
            "method": f"{J} machines, each its own process SD (log-normal across machines, eta {eta:.2f}); machine "
                      f"component omega {100 * omega:.2f}%; the plug-in mixture over both, its level calibrated to "
                      f"cover 95% (nominal {gamma:.4f})"}


def spread_threshold(n_per_machine: Sequence[int], M: int, *, sims: int = 20000, seed: int = 0,
                     confidence: float = CONFIDENCE) -> dict:
    """The spread check's threshold: the `confidence` quantile of T = (L_new - mean L) / sd(L) for machines of
    `n_per_machine` processes and a new one of M, simulated at each eta of `ETA_GRID` (lambda 0: T is free of it),
    the largest kept. Returns {"t_q95", "by_eta" ({eta: quantile}), "sims", "seed"}."""
    f = np.asarray(list(n_per_machine) + [int(M)], dtype=float) - 1
    rng = np.random.default_rng(seed)
    chi = np.log(rng.chisquare(f, (sims, f.size)) / f) - log_var_bias(f)
    z = rng.standard_normal((sims, f.size))
    by = {}
    for eta in ETA_GRID:
        L = eta * z + chi
        est = L[:, :-1]
        by[eta] = float(np.quantile((L[:, -1] - est.mean(axis=1)) / est.std(axis=1, ddof=1), confidence))
    return {"t_q95": max(by.values()), "by_eta": by, "sims": sims, "seed": seed}


def spread_null(prediction: dict, M: int, *, sims: int = 20000, seed: int = 0,
                confidence: float = CONFIDENCE) -> dict:
    """What `spread_check` judges M held-out processes of one new machine against, fixed before they run: the
    inside fraction's null 5% quantile (the design simulated at the fitted omega, lambda, eta, each fit re-done, its
    interval at the committed nominal level), the spread threshold (`spread_threshold`) and the largest passing SD
    of the M means, max_sd_log = sqrt(exp(mean L + t_q95 sd L + b(M - 1))). Returns {"M", "inside_null_q05",
    "coverage" (of one new process, simulated), "p_all_outside", "spread_t_q95", "spread_by_eta", "max_sd_log",
    "sims", "seed"}."""
    p = prediction
    pit = _simulated_pit(p["n_per_machine"], M, p["omega"], p["lam"], p["eta"], sims, seed + 1)
    frac = (pit <= p["nominal"]).mean(axis=1)
    thr = spread_threshold(p["n_per_machine"], M, seed=seed, confidence=confidence)
    L = np.asarray(p["L"])
    max_sd = math.sqrt(math.exp(float(L.mean() + thr["t_q95"] * L.std(ddof=1) + log_var_bias(M - 1))))
    return {"M": int(M), "inside_null_q05": float(np.quantile(frac, 0.05)), "coverage": float(frac.mean()),
            "p_all_outside": float((frac == 0).mean()), "spread_t_q95": thr["t_q95"],
            "spread_by_eta": {str(k): v for k, v in thr["by_eta"].items()}, "max_sd_log": max_sd,
            "sims": sims, "seed": seed}


def spread_t(prediction: dict, heldout_means: Sequence[float]) -> float:
    """T = (L_new - mean L) / sd(L) of M held-out process means against the estimate's machines."""
    h = np.asarray([float(v) for v in heldout_means], dtype=float)
    L = np.asarray(prediction["L"], dtype=float)
    l_new = math.log(max(float(h.var(ddof=1)), 1e-300)) - float(log_var_bias(h.size - 1))
    return (l_new - float(L.mean())) / float(L.std(ddof=1))


def spread_check(prediction: dict, heldout_means: Sequence[float], null: dict) -> dict:
    """M >= 2 held-out processes of ONE new machine against `spread_prediction` and its committed `spread_null`
    (recomputed, same seed, when another M ran): inside_ok = the fraction inside pi95 >= inside_null_q05;
    spread_ok = T <= spread_t_q95 (one-sided: a new machine may be calmer than any seen). Returns {"inside",
    "inside_null_q05", "inside_ok", "spread_t", "spread_t_q95", "spread_ok", "heldout_sd_log", "max_sd_log", "ok",
    "M", "heldout_speedup", "shift_pct" (against the estimate)}."""
    h = np.asarray([float(v) for v in heldout_means], dtype=float)
    M = int(h.size)
    if M < 2:
        raise ValueError(f"the held-out check needs M >= 2 processes (M={M})")
    if int(null.get("M", -1)) != M:
        null = spread_null(prediction, M, sims=int(null.get("sims", 20000)), seed=int(null.get("seed", 0)))
    lo, hi = (math.log(v) for v in prediction["pi95"])
    inside = float(((h >= lo) & (h <= hi)).mean())
    t = spread_t(prediction, h)
    inside_ok, spread_ok = inside >= null["inside_null_q05"], t <= null["spread_t_q95"]
    return {"inside": inside, "inside_null_q05": null["inside_null_q05"], "inside_ok": bool(inside_ok),
            "spread_t": t, "spread_t_q95": null["spread_t_q95"], "spread_ok": bool(spread_ok),
            "heldout_sd_log": float(h.std(ddof=1)), "max_sd_log": null["max_sd_log"],
            "ok": bool(inside_ok and spread_ok), "M": M, "heldout_speedup": math.exp(float(h.mean())),
            "shift_pct": 100 * (math.exp(float(h.mean()) - prediction["log_mean"]) - 1)}
