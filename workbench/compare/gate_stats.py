"""The regression gate's statistic and its calibration by simulation (`workbench.measure.power`'s simulator).

Statistic. Two runs of one comparison's arm, the baseline run's and the new one's, are independent: nothing pairs a
rep of one with a rep of the other. Per run, the rep is the unit (`workbench.measure.stats`): y_r = log(mean step ms of rep
r). The speedup of new over baseline is exp(mean y_base - mean y_new), its CI the Welch t interval of that
difference (exp of it); < 1: the new run is slower. The gate fails only when the whole CI lies below 1 - tolerance.

Why a tolerance. Two runs are two processes: clocks, autotuned kernels, memory layout move a whole run, an effect
the reps of one run cannot see, so a CI built from reps alone fails A/A gates too often. The tolerance is the
slowdown an A/A gate reaches 5% of the time under the noise of an A/A run on the same machine: its rep / step SDs
from `power.components_from_run` (as `workbench power --from` estimates them), batch effects shared by
both runs (same seeded data: they cancel), and a run effect of SD `run_sd_pct` per run. The tolerance = the 95th
percentile of (1 - CI high) over simulated A/A gates (an upper confidence bound on it, so the simulation's own
error does not leak into the rate), floored at 0: the simulated false-fail rate is <= 5% by construction.

The run SD. A rerun of the same commit moves a whole run by more than its reps show: on sync-heavy
shapes 2-3% (H200 `repeat_a` / `repeat_b`), against a rep SD near 1%. So the run SD is measured, not assumed:
`run_sd` takes K >= 3 same-commit A/A processes of the comparison on the gate's machine; per process y_k = mean over
reps of log(rep mean step ms) and w_k = its within-run variance (var / R_k); the run variance is the upper 95%
chi-square bound of var(y_k) (K - 1 df, `stats.variance_upper_bound`) less mean w_k, floored at 0. An upper bound:
with K = 3 it is about 19x the sample variance, so a noisy machine gives a wide tolerance, and a tolerance at or
above the regression the gate must catch is refused (`workbench.compare.gate`) rather than run blind.
"""
from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from workbench.measure import power
from workbench.measure.engine import Protocol

FALSE_FAIL_RATE = 0.05
POWER_FLOOR = 0.8
"""The least simulated power for the stated regression a gate needs to run: below it the gate says it cannot gate."""
MIN_AA_PROCESSES = 3
"""Same-commit A/A processes the run SD is estimated from, at least."""


def speedup_ci(base_rep_ms, new_rep_ms) -> dict:
    """{"speedup", "ci95", "n_base", "n_new"}: baseline over new from per-rep mean step times (Welch on logs)."""
    from workbench.measure.stats import welch
    a, b = np.log(np.asarray(new_rep_ms, dtype=float)), np.log(np.asarray(base_rep_ms, dtype=float))
    w = welch(a, b)  # mean(log base) - mean(log new)
    ci = [math.exp(w["ci95"][0]), math.exp(w["ci95"][1])] if w["ci95"] else None
    return {"speedup": math.exp(w["delta_ms"]) if math.isfinite(w["delta_ms"]) else math.nan, "ci95": ci,
            "n_base": int(b.size), "n_new": int(a.size)}


def speedup_ci_high_many(base_rep_ms: np.ndarray, new_rep_ms: np.ndarray, confidence: float = 0.95) -> np.ndarray:
    """The upper end of `speedup_ci`'s interval for each row of (sims x reps) arrays at once (the same Welch interval
    on logs: mean difference, Welch-Satterthwaite df, a two-sided t quantile); inf where a row has fewer than 2 reps
    a side (no interval). What the gate's simulations read, without a scipy call per simulated gate."""
    from scipy import stats as sps
    a, b = np.log(np.asarray(new_rep_ms, dtype=float)), np.log(np.asarray(base_rep_ms, dtype=float))
    na, nb = a.shape[1], b.shape[1]
    d = b.mean(axis=1) - a.mean(axis=1)
    if na < 2 or nb < 2:
        return np.full(d.shape, math.inf)
    va, vb = a.var(axis=1, ddof=1) / na, b.var(axis=1, ddof=1) / nb
    se2 = va + vb
    with np.errstate(divide="ignore", invalid="ignore"):
        df = se2 ** 2 / (va ** 2 / (na - 1) + vb ** 2 / (nb - 1))
        hi = d + sps.t.ppf(0.5 + confidence / 2, df) * np.sqrt(se2)
    hi = np.where(se2 > 0, hi, d)  # both samples constant: the difference is exact (`stats.welch`)
    return np.exp(hi)


def below_tolerance(ci_high, tolerance_pct: float):
    """The gate's rule: a CI whose upper end `ci_high` lies below 1 - tolerance fails (a bool, or an array of them
    for an array of upper ends)."""
    return ci_high < 1 - tolerance_pct / 100


def decide(ci95, tolerance_pct: float) -> str:
    """"fail" when the CI lies wholly below 1 - tolerance (`below_tolerance`), "pass" otherwise, "no verdict" without
    a CI."""
    if ci95 is None:
        return "no verdict"
    return "fail" if below_tolerance(ci95[1], tolerance_pct) else "pass"


@dataclasses.dataclass(frozen=True)
class GateDesign(Protocol):
    """The one `engine.Protocol` (reps, steps, batches, arms) plus the gate's run offset."""
    reps: int = 8
    """Reps of each run (the new run's reps under the budget)."""
    steps: int = 2
    run_sd_pct: float | None = None
    """SD of a whole run's offset, % of step time; None: the noise's rep SD."""


def simulate_rep_means(rng, noise: power.Noise, design: GateDesign, slowdown: float = 1.0,
                       step_ms: float = 100.0) -> tuple[np.ndarray, np.ndarray]:
    """Per-rep mean step times of the gated arm in a simulated baseline run and a new run `slowdown` x slower,
    each run simulated by `power.simulate_times` (blocks, drift, step noise), batch effects shared (set to 0: they
    cancel), one run offset each."""
    nz = dataclasses.replace(noise, batch_sd_pct=0.0, process_sd_pct=0.0)  # the run offset below is the process
    run_sd = (noise.rep_sd_pct if design.run_sd_pct is None else design.run_sd_pct) / 100
    out = []
    for s in (1.0, slowdown):
        t, _ = power.simulate_times(rng, nz, design, design.reps, 1.0, step_ms=step_ms * s)
        out.append(t.mean(axis=1) * math.exp(rng.standard_normal() * run_sd))
    return out[0], out[1]


def simulate_gates(noise: power.Noise, design: GateDesign, tolerance_pct: float | None, *, sims: int = 1000,
                   slowdown: float = 1.0, seed: int = 0) -> dict:
    """Simulated gates: {"ci_high": array, "fail_rate" (None without a tolerance), "sims", "slowdown"}."""
    rng = np.random.default_rng(seed)
    runs = [simulate_rep_means(rng, noise, design, slowdown) for _ in range(sims)]
    hi = speedup_ci_high_many(np.array([b for b, _ in runs]), np.array([n for _, n in runs]))
    fails = int(below_tolerance(hi, tolerance_pct).sum()) if tolerance_pct is not None else 0
    return {"ci_high": hi, "fail_rate": fails / sims if tolerance_pct is not None else None,
            "sims": sims, "slowdown": slowdown}


def tolerance_pct(noise: power.Noise, design: GateDesign, *, sims: int = 1000, seed: int = 0,
                  false_fail_rate: float = FALSE_FAIL_RATE) -> float:
    """The tolerance (%) whose A/A false-fail rate is <= `false_fail_rate`: an upper 95% confidence bound on the
    (1 - rate) quantile of the slowdown 1 - CI high over `sims` simulated A/A gates, floored at 0."""
    from scipy import stats as sps
    slow = np.sort(1 - simulate_gates(noise, design, None, sims=sims, seed=seed)["ci_high"])
    # the order statistic that bounds the (1 - rate) quantile from above with 95% confidence: the simulation's own
    # sampling error must not push the true false-fail rate above `false_fail_rate`
    k = min(int(sps.binom.ppf(0.95, sims, 1 - false_fail_rate)), sims - 1)
    return max(0.0, 100 * float(slow[k]))


def detection_rate(noise: power.Noise, design: GateDesign, tolerance: float, *, slowdown_pct: float = 2.0,
                   sims: int = 1000, seed: int = 1) -> float:
    """The share of simulated gates that fail when the new run is `slowdown_pct` % slower."""
    return simulate_gates(noise, design, tolerance, sims=sims, slowdown=1 + slowdown_pct / 100, seed=seed)["fail_rate"]


def run_sd(aa_rep_ms: list, *, confidence: float = 0.95) -> dict:
    """The SD of a whole run's offset, % of step time, from the per-rep mean step ms of K A/A processes (one array
    per process): {"run_sd_pct" (the upper bound), "point_sd_pct", "processes", "df", "within_var"}."""
    from workbench.measure import stats
    logs = [np.log(np.asarray(r, dtype=float)) for r in aa_rep_ms]
    y = [float(v.mean()) for v in logs]
    w = float(np.mean([v.var(ddof=1) / v.size for v in logs if v.size >= 2] or [0.0]))
    b = stats.variance_upper_bound(y, confidence=confidence)
    if b["var_upper"] is None:
        raise ValueError("the run SD needs 2 or more processes")
    return {"run_sd_pct": 100 * math.sqrt(max(0.0, b["var_upper"] - w)),
            "point_sd_pct": 100 * math.sqrt(max(0.0, b["var"] - w)), "processes": len(y), "df": b["df"],
            "within_var": w, "level_var": b["var"], "confidence": confidence}


def run_sd_at(run: dict, processes: int) -> float:
    """The run SD's upper bound (%) that `run` (a `run_sd` result) would give from `processes` A/A processes with
    the same sample variance of their levels and the same within-run variance: the chi-square factor at
    `processes` - 1 df, the rest as measured."""
    from workbench.measure import stats
    up = run["level_var"] * stats.variance_upper_factor(processes - 1, confidence=run["confidence"])
    return 100 * math.sqrt(max(0.0, up - run["within_var"]))


def gate_power(noise: power.Noise, design: GateDesign, regression_pct: float, *, tolerance: float | None = None,
               sims: int = 1000, seed: int = 0) -> dict:
    """{"need": the tolerance (%) this noise and design need (`tolerance_pct`), "tolerance": the one the gate uses
    (`tolerance` when given and larger), "power": its simulated power for a `regression_pct` slowdown
    (`detection_rate`)}: the gate's own arithmetic, at its seeds."""
    need = tolerance_pct(noise, design, sims=sims, seed=seed)
    tol = need if tolerance is None else max(tolerance, need)
    return {"need": need, "tolerance": tol,
            "power": detection_rate(noise, design, tol, slowdown_pct=regression_pct, sims=sims, seed=seed + 1)}


MAX_AA_PROCESSES = 200
"""The most A/A processes `gateable_sizes` considers (the run SD's bound is then within 13% of its point value)."""
MAX_REPS = 64
"""The most reps a side `gateable_sizes` considers (8 times the engine's default)."""
REGRESSION_STEP_PCT = 0.1
"""The grid the smallest gateable regression is named on."""


def _least(ok, lo: int, hi_max: int) -> int | None:
    """The least integer n in (lo, hi_max] with ok(n), given not ok(lo) and ok monotone: None when not ok(hi_max),
    else doubling from lo, then bisection (ok(n) holds and ok(n - 1) does not)."""
    if hi_max <= lo or not ok(hi_max):
        return None
    hi = None
    while hi is None:
        n = min(max(2 * lo, lo + 1), hi_max)
        if n == hi_max or ok(n):
            hi = n
        else:
            lo = n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def gateable_sizes(noise: power.Noise, design: GateDesign, regression_pct: float, run: dict | None, *,
                   tolerance: float | None = None, floor: float = POWER_FLOOR, sims: int = 1000,
                   seed: int = 0) -> dict:
    """The sizes at which this gate reaches `floor` power, from its own arithmetic (`gate_power`, the same sims and
    seeds), for a gate below it:
    "regression_pct": the smallest regression (on a `REGRESSION_STEP_PCT` grid) it can gate with these A/A processes
    and reps (None: none up to 1000%); "processes": the fewest A/A processes (`run_sd_at`, the levels' variance as
    measured; not sought without `run`, the `run_sd` result) that gate `regression_pct` at these reps (None: not
    up to `MAX_AA_PROCESSES`, whose power is
    "processes_power"); "reps": the fewest reps a side that do at these processes (None: not up to `MAX_REPS`,
    "reps_power": the power there: the run SD, which no rep averages away, limits it)."""
    at = functools.lru_cache(maxsize=None)(  # each design's power once: the searches ask for their ends again
        lambda d: gate_power(noise, d, regression_pct, tolerance=tolerance, sims=sims, seed=seed))
    tol = at(design)["tolerance"]
    grid = lambda k: detection_rate(noise, design, tol, slowdown_pct=k * REGRESSION_STEP_PCT, sims=sims,  # noqa: E731
                                    seed=seed + 1) >= floor
    # below: the stated regression (its power is under the floor) and the tolerance (a slowdown of the tolerance
    # itself fails only when its run reads slower than it is: under half the time)
    k = _least(grid, int(max(regression_pct, tol) / REGRESSION_STEP_PCT), int(1000 / REGRESSION_STEP_PCT))
    out = {"regression_pct": None if k is None else round(k * REGRESSION_STEP_PCT, 6), "floor": floor,
           "processes": None, "processes_power": None, "reps": None, "reps_power": None,
           "tolerance_given": tolerance is not None and tolerance >= regression_pct}
    if out["tolerance_given"]:  # a given tolerance at or above the regression: no noise estimate or reps help
        return out
    if run is not None:
        by_k = lambda n: dataclasses.replace(design, run_sd_pct=run_sd_at(run, n))  # noqa: E731
        out["processes"] = _least(lambda n: at(by_k(n))["power"] >= floor, run["processes"], MAX_AA_PROCESSES)
        if out["processes"] is None:
            out["processes_power"] = at(by_k(MAX_AA_PROCESSES))["power"]
        else:
            out["processes_run_sd_pct"] = by_k(out["processes"]).run_sd_pct
    by_r = lambda n: dataclasses.replace(design, reps=n)  # noqa: E731
    out["reps"] = _least(lambda n: at(by_r(n))["power"] >= floor, design.reps, MAX_REPS)
    if out["reps"] is None:
        out["reps_power"] = at(by_r(max(design.reps, MAX_REPS)))["power"]
    return out


def sizes_text(sizes: dict, regression_pct: float, processes: int | None, reps: int) -> str:
    """The sizes of `gateable_sizes` as one clause: what this gate can gate, and what would gate the stated
    regression."""
    r, has = sizes["regression_pct"], (f"these {processes} A/A processes and " if processes else "")
    can = (f"with {has}{reps} reps it can gate {r:g}% or more" if r is not None
           else f"with {has}{reps} reps it can gate no regression up to 1000%")
    if sizes.get("tolerance_given"):
        return f"{can} (power >= {sizes['floor']:.2f}); for {regression_pct:g}%: a lower --tolerance-pct (or none)"
    k = (f"{sizes['processes']} A/A processes would (run SD bound {sizes['processes_run_sd_pct']:.2f}%); "
         if sizes["processes"] is not None else
         f"no number of A/A processes would (power {sizes['processes_power']:.2f} at {MAX_AA_PROCESSES}); "
         if sizes["processes_power"] is not None else "")
    n = (f"a baseline and re-run of {sizes['reps']} reps would" if sizes["reps"] is not None else
         f"more reps cannot (power {sizes['reps_power']:.2f} at {max(reps, MAX_REPS)} reps: the run SD limits it)")
    return f"{can} (power >= {sizes['floor']:.2f}); for {regression_pct:g}%: {k}{n}"
