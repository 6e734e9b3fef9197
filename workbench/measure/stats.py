"""Every statistic the workbench reports, defined once.

Rules (all other modules call these functions rather than re-deriving them):

- Missing values. NaN and None are dropped before any statistic is computed. For paired data a pair is dropped
  when either side is missing. A statistic of nothing is NaN (`quantile`, `mad`) or None (`summarize`).
- Quantiles. `quantile` is numpy's linear interpolation (the `np.quantile` default, "type 7"). The spread of a
  cell is reported as p20-p80 around the median (`summarize`); the mean is reported beside it.
- MAD. `mad` is the unscaled median absolute deviation, median(|t - median(t)|) (no 1.4826 factor).
- Outliers. Within one cell (one arm / configuration), a step time t is an outlier when
  |t - median(cell)| > OUTLIER_K * max(MAD(cell), OUTLIER_FLOOR * median(cell)). Outliers are a diagnostic, listed
  with their steps; they are never dropped from an estimate (dropping the slow ones biased every A/A upward).
- The unit of independence. The engine runs each arm as one block per rep, so every pair of one rep shares that
  rep's two block effects: the rep, not the pair, is the independent unit. Every interval here takes `units` (one
  label per pair) and works on one value per unit; None means every pair is its own unit, which is right only when
  pairs are independent (adjacent steps of interleaved arms).
- Speedup. Per rep u, r_u = log(mean baseline_u / mean optimized_u) (the ratio of means within the rep; > 0: the
  optimized arm is faster). The speedup is exp(mean r_u), its 95% CI exp(mean ± t_{U-1} · sd(r) / sqrt(U)): a
  Student-t interval on log ratios (no bootstrap: BCa under-covers at these counts, 0.88 at 8 pairs). Coverage and
  the A/A false-verdict rate are checked by simulation with rep effects and drift (`workbench.measure.power`, tests).
- Verdict. "faster" when the whole CI lies above 1, "slower" when it lies below 1, otherwise
  "no detectable difference (±x%)" with x = 100 * max(1 - lo, hi - 1). Fewer than MIN_UNITS (4) reps: a CI, no
  verdict. No CI -> "no verdict (fewer than 2 paired samples)".
- Saving. `paired_difference`: per rep the mean of baseline - arm, t-interval over reps (se and df returned).
- Half width. `half_width_pct` = 100 * (hi - lo) / 2 / estimate: the CI's half width in percent of the estimate.
- Linear fits. `linear_fit`: OLS, or weighted least squares with weights 1/se² when each point's se is known (the
  L sweeps, whose points' CIs differ 15x in width) on at least MIN_WEIGHT_DF (5) df each; below that OLS with a
  robust (HC3) se; t with n-2 df.
- Ratios of two independent estimates. `fieller_ratio`: Fieller's interval for a / b (exact for normal estimates;
  unbounded when b's own CI reaches 0), t with the smaller of the two df (conservative).
- Curvature. `quadratic_term`: the x² coefficient of a least-squares quadratic (a dose-response's departure from
  a line); its uncertainty comes from the unit above it (processes), never from the points of one fit.
- Multiplicity. `holm`: Holm's step-down adjustment within a family of tests (the model verdicts of one run, their
  published forms included).
- A ratio against a band. `band_ratio_test`: TOST of measured / predicted against [0.8, 1.25] (Welch-Satterthwaite
  df); a calibrated factor θ with its own CI enters as a shift by Berger-Boos (the worse end of θ's CI, plus its
  tail THETA_TAIL), never in quadrature.
- Variance components. `variance_components`: rep / batch / step SDs of log step time (percent), recorded per
  comparison; `workbench.measure.power --from RUN_DIR` simulates a protocol with them.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Iterable, Sequence

import numpy as np
from scipy import stats as _sps

__all__ = ["CONFIDENCE", "OUTLIER_K", "OUTLIER_FLOOR", "MIN_UNITS", "quantile", "summarize", "mad", "outlier_mask",
           "t_interval", "paired_speedup", "paired_difference", "verdict", "linear_fit", "half_width_pct", "holm",
           "variance_components", "delta_method", "NOT_A_RESULT", "timing_on", "fieller_ratio", "quadratic_term"]

CONFIDENCE = 0.95
OUTLIER_K = 5.0  # a step is an outlier when |t - median(cell)| > OUTLIER_K * max(MAD(cell), OUTLIER_FLOOR * median(cell))
OUTLIER_FLOOR = 0.01  # MAD floored at 1% of the median (a cell of 3 near-identical steps would otherwise flag a 1% step)

NO_VERDICT = "no verdict (fewer than 2 paired samples)"

# scipy >= 1.15 seeds `bootstrap` with `rng=`; older versions only know `random_state=`.
_BOOTSTRAP_SEED_KW = "rng" if "rng" in inspect.signature(_sps.bootstrap).parameters else "random_state"


def _is_missing(v) -> bool:
    if v is None:
        return True
    try:
        return math.isnan(float(v))
    except (TypeError, ValueError):
        raise TypeError(f"not a number: {v!r}") from None


def _clean(values: Iterable) -> np.ndarray:
    """Float array of `values` with NaN/None dropped."""
    if values is None:
        return np.empty(0)
    return np.asarray([float(v) for v in values if not _is_missing(v)], dtype=float)


def _to_float_array(values: Iterable) -> np.ndarray:
    """Float array of `values`, same length, None -> NaN."""
    return np.asarray([math.nan if v is None else float(v) for v in values], dtype=float)


def quantile(values: Iterable, q: float) -> float:
    """The q-quantile (0 <= q <= 1) of `values` by numpy's linear interpolation; NaN/None dropped; NaN when empty."""
    x = _clean(values)
    if x.size == 0:
        return math.nan
    return float(np.quantile(x, q))


def summarize(values: Iterable) -> dict:
    """{"median", "p20", "p80", "mean", "n"} of `values` (NaN/None dropped).

    median/p20/p80/mean are floats, or None when n == 0; n is the number of values kept (int).
    """
    x = _clean(values)
    if x.size == 0:
        return {"median": None, "p20": None, "p80": None, "mean": None, "n": 0}
    p20, median, p80 = (float(v) for v in np.quantile(x, [0.2, 0.5, 0.8]))
    return {"median": median, "p20": p20, "p80": p80, "mean": float(np.mean(x)), "n": int(x.size)}


def mad(values: Iterable) -> float:
    """Median absolute deviation, median(|x - median(x)|), unscaled; NaN/None dropped; NaN when empty."""
    x = _clean(values)
    if x.size == 0:
        return math.nan
    return float(np.median(np.abs(x - np.median(x))))


def outlier_mask(values: Sequence, k: float = OUTLIER_K, floor: float = OUTLIER_FLOOR) -> np.ndarray:
    """Boolean array, one entry per value of one cell: True where the value is an outlier.

    Outlier: |t - median| > k * max(MAD, floor * |median|), median and MAD over the cell's non-missing values.
    Missing values (NaN/None) are never flagged.
    """
    x = _to_float_array(values)
    ok = ~np.isnan(x)
    mask = np.zeros(x.shape, dtype=bool)
    if not ok.any():
        return mask
    med = float(np.median(x[ok]))
    scale = max(mad(x[ok]), floor * abs(med))
    mask[ok] = np.abs(x[ok] - med) > k * scale
    return mask


def _paired_arrays(a, b, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Two equal-length 1-D float arrays with every pair holding a NaN/None dropped (ValueError otherwise)."""
    aa, ba = _to_float_array(a), _to_float_array(b)
    if aa.shape != ba.shape or aa.ndim != 1:
        raise ValueError(f"{what} need two 1-D sequences of equal length, got {aa.shape} and {ba.shape}")
    keep = ~(np.isnan(aa) | np.isnan(ba))
    return aa[keep], ba[keep]


def _unit_groups(units, n: int) -> list[np.ndarray]:
    """Indices of each unit's pairs, units in first-seen order (None: every pair its own unit)."""
    if units is None:
        return [np.array([i]) for i in range(n)]
    keys = list(units)
    if len(keys) != n:
        raise ValueError(f"units need one entry per pair: {len(keys)} for {n} pairs")
    order: dict = {}
    for i, k in enumerate(keys):
        order.setdefault(k, []).append(i)
    return [np.asarray(v) for v in order.values()]


def t_interval(values: Iterable, *, confidence: float = CONFIDENCE) -> dict:
    """Mean of independent `values` with its Student-t interval: mean ± t_{(1+c)/2, n-1} · sd / sqrt(n).

    Returns {"mean", "se", "df", "ci": [lo, hi] or None, "n"}; se/ci None with fewer than 2 values; ci collapses to
    [mean, mean] when every value is equal."""
    x = _clean(values)
    n = int(x.size)
    if n == 0:
        return {"mean": math.nan, "se": None, "df": None, "ci": None, "n": 0}
    m = float(x.mean())
    if n < 2:
        return {"mean": m, "se": None, "df": None, "ci": None, "n": n}
    se = float(x.std(ddof=1) / math.sqrt(n))
    t = float(_sps.t.ppf((1 + confidence) / 2, n - 1))
    return {"mean": m, "se": se, "df": n - 1, "ci": [m - t * se, m + t * se], "n": n}


def _paired_with_units(a, b, units):
    """`_paired_arrays` that keeps each kept pair's unit (None stays None)."""
    aa, ba = _to_float_array(a), _to_float_array(b)
    if aa.shape != ba.shape or aa.ndim != 1:
        raise ValueError(f"paired samples need two 1-D sequences of equal length, got {aa.shape} and {ba.shape}")
    keep = ~(np.isnan(aa) | np.isnan(ba))
    if units is None:
        return aa[keep], ba[keep], None
    u = list(units)
    if len(u) != aa.size:
        raise ValueError(f"units need one entry per pair: {len(u)} for {aa.size} pairs")
    return aa[keep], ba[keep], [x for x, k in zip(u, keep) if k]


def log_ratio_of_unit_means(a_by_unit: Sequence, b_by_unit: Sequence, *, confidence: float = CONFIDENCE) -> dict:
    """The ratio a / b with its CI, one value per independent unit: r_u = log(mean a_u / mean b_u) (a_u, b_u: the
    unit's values, any count each), ratio = exp(mean r), ci = exp(`t_interval` of r), None with fewer than 2 units.
    Returns {"ratio" (NaN with no unit), "ci", "log_ratios" (array)}. `paired_speedup` and `workbench.fidelity` use
    it."""
    if len(a_by_unit) != len(b_by_unit):
        raise ValueError(f"{len(a_by_unit)} units of a, {len(b_by_unit)} of b")
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.asarray([math.log(float(np.mean(np.asarray(a, dtype=float))) / float(np.mean(np.asarray(bb, dtype=float))))
                        for a, bb in zip(a_by_unit, b_by_unit)])
    ti = t_interval(r, confidence=confidence)
    return {"ratio": float(math.exp(ti["mean"])) if r.size else math.nan,
            "ci": [float(math.exp(ti["ci"][0])), float(math.exp(ti["ci"][1]))] if ti["ci"] is not None else None,
            "log_ratios": r}


def geo_mean_of_unit_means(values: Sequence, units: Sequence) -> float:
    """exp(mean over units of log(the unit's mean value)): one arm's step time as `paired_speedup` sees it. With
    the same units on both arms, the baseline's over the arm's IS the speedup (a ratio of geometric means is the
    geometric mean of the ratios), where the arithmetic means of all steps can even disagree with it in direction
    (a CPU run: reps of 1 and 2.7 s). NaN with no value."""
    x, _, u = _paired_with_units(values, values, units)
    groups = _unit_groups(u, int(x.size))
    if not groups:
        return math.nan
    return float(math.exp(np.mean([math.log(float(np.mean(x[g]))) for g in groups])))


def paired_speedup(baseline_ms: Sequence, optimized_ms: Sequence, units: Sequence | None = None, *,
                   confidence: float = CONFIDENCE) -> dict:
    """Speedup of the optimized arm over the baseline with a CI at the level of the independent unit.

    `baseline_ms[i]` and `optimized_ms[i]` are pair i (same rep and batch); `units[i]` names its independent unit
    (the rep: arms run as blocks per rep, so all pairs of one rep share that rep's two block effects). None: every
    pair is its own unit (only right when pairs are independent, e.g. adjacent steps of interleaved arms). Pairs
    with a NaN/None are dropped. Per unit u: r_u = log(mean baseline_u / mean optimized_u). The speedup is
    exp(mean r_u), the CI exp(mean ± t_{U-1} · sd(r) / sqrt(U)) (`t_interval`), None with fewer than 2 units.
    No pair is ever dropped as an outlier.

    Returns {"speedup", "ci95", "n_pairs", "n_units", "method", "half_width_pct", "verdict", "log_ratio_sd"}.
    """
    b, o, u = _paired_with_units(baseline_ms, optimized_ms, units)
    n = int(b.size)
    groups = _unit_groups(u, n)
    lr = log_ratio_of_unit_means([b[g] for g in groups], [o[g] for g in groups], confidence=confidence)
    r, speedup, ci = lr["log_ratios"], lr["ratio"], lr["ci"]
    what = "rep" if units is not None else "pair"
    method = (f"t-interval on per-{what} log ratios of means ({len(groups)} {what}s, {max(len(groups) - 1, 0)} df)"
              if ci is not None else f"none (fewer than 2 {what}s)")
    hw = half_width_pct(ci, speedup) if ci is not None and math.isfinite(speedup) and speedup != 0 else None
    return {"speedup": speedup, "ci95": ci, "n_pairs": n, "n_units": len(groups), "method": method,
            "half_width_pct": hw, "verdict": verdict(ci, len(groups)),
            "log_ratio_sd": float(r.std(ddof=1)) if r.size > 1 else None}


MIN_UNITS = 4
"""Fewer independent units (reps) give a CI but no verdict. The rep-level t-interval is exact for normal rep log
ratios at any count, but with 2 or 3 reps it has 1 or 2 degrees of freedom (t.975 = 12.7, 4.3): one disturbed rep
(a clock drop, a neighbour's job) then decides the verdict, and nothing can show the rep ratios are near normal.
At 4 reps (3 df, t.975 = 3.18) `workbench.measure.power` finds the A/A false-verdict rate at its nominal 5% under the
drift and rep effects measured on the H100."""

MIN_PAIRS = MIN_UNITS  # the same floor under the name the pair-level callers use


def verdict(ci95: tuple[float, float] | None, n_units: int | None = None) -> str:
    """Verdict on a speedup CI: "faster" (lo > 1), "slower" (hi < 1), else "no detectable difference (±x%)".

    x = 100 * max(1 - lo, hi - 1) is the largest effect, in percent, the CI still allows. None -> NO_VERDICT; fewer
    than MIN_UNITS independent units (when `n_units` is given) -> "no verdict (n=N reps < 4)".
    """
    if ci95 is None:
        return NO_VERDICT
    if n_units is not None and n_units < MIN_UNITS:
        return f"no verdict (n={n_units} reps < {MIN_UNITS})"
    lo, hi = float(ci95[0]), float(ci95[1])
    if lo > 1:
        return "faster"
    if hi < 1:
        return "slower"
    return f"no detectable difference (±{100 * max(1 - lo, hi - 1):.1f}%)"


NOT_A_RESULT = "not a result (CPU timing)"
"""The verdict of a timing taken on any device but a GPU: CPU step times measure the machine's load, not the GPU glue
code (a CPU run is a functional check: syncs, equivalence, FLOPs)."""


def timing_on(comparison: dict, device_type: str | None) -> dict:
    """A paired comparison's dict (`paired_speedup`'s keys) as what a timing on `device_type` can say: unchanged on
    "cuda"; on any other device (or an unknown one) no CI and no verdict (`NOT_A_RESULT`). The rule's one owner: the
    A/B runner calls it on what it reports, the analysis (so the README's pages and the notebooks) on what it
    recomputes from a run's results.csv."""
    if device_type == "cuda":
        return comparison
    return {**comparison, "verdict": NOT_A_RESULT, "ci95": None, "half_width_pct": None}


def half_width_pct(ci95: tuple[float, float], estimate: float) -> float:
    """Half width of `ci95` in percent of `estimate`: 100 * (hi - lo) / 2 / estimate."""
    return float(100 * (ci95[1] - ci95[0]) / 2 / estimate)


MIN_WEIGHT_DF = 5
"""A point's se weighs a fit (1/se²) only when it rests on at least this many degrees of freedom: a variance from 2
reps (1 df) is off by 10x one time in 6 (an L = 1 point whose 2 reps agreed by chance weighed 10^5-10^7 times the
others and "refuted" the (L-1) model). Below it, `linear_fit` falls back to OLS with a robust (HC3) se."""


def linear_fit(x: Sequence, y: Sequence, *, se: Sequence | None = None, df: Sequence | None = None,
               confidence: float = CONFIDENCE, at: float | None = None) -> dict:
    """Line y = slope * x + intercept with CIs on slope and intercept (and on the fitted y at x = `at`).

    Without `se`: ordinary least squares, ci = estimate ± t_{n-2} · stderr. With `se` (each point's standard
    error) and `df` (the degrees of freedom each se rests on; None: known): weighted least squares, weights 1/se²,
    whose covariance (XᵀWX)⁻¹ is scaled by the reduced χ² of the fit when that exceeds 1 (the points scatter more
    than their se say), t with n-2 df, but only when every point's df >= MIN_WEIGHT_DF; otherwise OLS (no weight
    from a 1-df variance), `robust` True, its covariance the larger (by trace) of the HC3 sandwich (the scatter
    about the line, robust to unequal variances) and the points' own se² propagated through the OLS weights. Points with a NaN/None in x, y (or se) are dropped; ci needs n >= 3.
    Returns {"slope", "intercept", "slope_ci95", "intercept_ci95", "r2", "n", "weighted", "robust"} (+ "at": {"x",
    "y", "ci95", "se"}); slope, intercept and r2 are None when no line can be fitted (n < 2, or all x identical).
    """
    robust = False
    if se is not None:
        dfa = _to_float_array(df) if df is not None else np.full(len(list(se)), np.inf)
        xa, ya, sa = (_to_float_array(v) for v in (x, y, se))
        keep = ~(np.isnan(xa) | np.isnan(ya) | np.isnan(sa)) & (sa > 0)
        xa, ya, sa, dfa = xa[keep], ya[keep], sa[keep], dfa[keep]
        if (np.nan_to_num(dfa, nan=0.0) < MIN_WEIGHT_DF).any():
            sa_own, sa, robust = sa, None, True
    else:
        xa, ya = _paired_arrays(x, y, "x and y")
        sa = None
    n = int(xa.size)
    out = {"slope": None, "intercept": None, "slope_ci95": None, "intercept_ci95": None, "r2": None, "n": n,
           "weighted": sa is not None, "robust": robust}
    if at is not None:
        out["at"] = {"x": at, "y": None, "ci95": None, "se": None}
    if n < 2 or np.all(xa == xa[0]):
        return out
    w = np.ones(n) if sa is None else 1.0 / sa ** 2
    X = np.column_stack([xa, np.ones(n)])
    XtW = X.T * w
    cov_unscaled = np.linalg.inv(XtW @ X)
    slope, intercept = (float(v) for v in cov_unscaled @ (XtW @ ya))
    resid = ya - (slope * xa + intercept)
    ybar = float(np.sum(w * ya) / np.sum(w))
    ss_tot = float(np.sum(w * (ya - ybar) ** 2))
    out.update(slope=slope, intercept=intercept, r2=(1 - float(np.sum(w * resid ** 2)) / ss_tot) if ss_tot > 0 else 1.0)
    if at is not None:
        out["at"]["y"] = slope * at + intercept
    if n < 3:
        return out
    chi2_red = float(np.sum(w * resid ** 2)) / (n - 2)
    scale = chi2_red if sa is None else max(1.0, chi2_red)  # OLS: the residual variance; WLS: the known se, inflated
    cov = cov_unscaled * scale
    if robust:  # HC3: (XᵀX)⁻¹ Xᵀ diag(e² / (1 - h)²) X (XᵀX)⁻¹, or the points' own se through the same OLS weights
        h = np.einsum("ij,jk,ik->i", X, cov_unscaled, X)
        e2 = resid ** 2 / np.clip(1 - h, 1e-12, None) ** 2
        cov = cov_unscaled @ (X.T * e2) @ X @ cov_unscaled
        cov_own = cov_unscaled @ (X.T * sa_own ** 2) @ X @ cov_unscaled
        if np.trace(cov_own) > np.trace(cov):  # points on a line by luck of their means: their own se still counts
            cov = cov_own
    t = float(_sps.t.ppf((1 + confidence) / 2, n - 2))
    s_se, i_se = math.sqrt(cov[0, 0]), math.sqrt(cov[1, 1])
    out.update(slope_ci95=[slope - t * s_se, slope + t * s_se], intercept_ci95=[intercept - t * i_se, intercept + t * i_se])
    if at is not None:
        g = np.array([at, 1.0])
        se_at = float(math.sqrt(max(float(g @ cov @ g), 0.0)))
        y0 = slope * at + intercept
        out["at"].update(ci95=[y0 - t * se_at, y0 + t * se_at], se=se_at, df=n - 2)
    return out


def paired_difference(baseline_ms: Sequence, arm_ms: Sequence, units: Sequence | None = None, *,
                      confidence: float = CONFIDENCE) -> dict:
    """The mean of baseline - arm over paired samples (a saving, in the samples' unit), with a CI at the level of
    the independent unit (the rep; None: every pair its own unit): per unit the mean difference, then `t_interval`
    over units. Returns {"mean", "ci95", "se", "df", "n_pairs", "n_units", "method"}; ci95/se None with fewer than
    2 units. No pair is dropped."""
    b, o, u = _paired_with_units(baseline_ms, arm_ms, units)
    d = b - o
    n = int(d.size)
    groups = _unit_groups(u, n)
    per_unit = [float(d[g].mean()) for g in groups]
    ti = t_interval(per_unit, confidence=confidence)
    what = "rep" if units is not None else "pair"
    return {"mean": float(np.mean(per_unit)) if per_unit else math.nan, "ci95": ti["ci"], "se": ti["se"],
            "df": ti["df"], "n_pairs": n, "n_units": len(groups),
            "method": (f"t-interval on per-{what} mean differences ({len(groups)} {what}s)" if ti["ci"] is not None
                       else f"none (fewer than 2 {what}s)")}


def holm(pvalues: Sequence) -> list[float]:
    """Holm's step-down adjusted p-values (same order as given; None/NaN stay None): sort ascending, multiply the
    k-th smallest by (m - k + 1), keep the running maximum, cap at 1. Reject H_i at level a when adjusted_i <= a."""
    idx = [i for i, p in enumerate(pvalues) if p is not None and not math.isnan(float(p))]
    out: list = [None] * len(pvalues)
    m = len(idx)
    running = 0.0
    for k, i in enumerate(sorted(idx, key=lambda i: float(pvalues[i]))):
        running = max(running, min(1.0, (m - k) * float(pvalues[i])))
        out[i] = running
    return out


def variance_components(samples: list[dict]) -> dict:
    """Rep, batch and step standard deviations of log step time, in percent, pooled over arms (balanced two-way
    layout per arm: log t = arm + block(rep) + batch + step noise; method of moments).

    `samples`: dicts with arm, rep, batch, step_ms. step_sd = the residual after rep and batch means; rep_sd = the
    spread of one arm's block means beyond what step noise explains (the block effect every pair of one rep shares);
    batch_sd = the spread of batch means likewise (it cancels within a pair). Percent = 100 x SD of ln(step_ms).
    Returns {"rep_sd_pct", "batch_sd_pct", "step_sd_pct", "n_arms", "n_reps", "n_batches"} (None where not
    estimable)."""
    rows = [(s.get("arm"), s.get("rep"), s.get("batch"), s.get("step_ms")) for s in samples]
    out = {"rep_sd_pct": None, "batch_sd_pct": None, "step_sd_pct": None, "n_arms": 0, "n_reps": 0, "n_batches": 0}
    if not rows:
        return out
    rows = [r for r in rows if not any(_na(v) for v in r) and r[3] > 0]
    by_arm: dict = {}
    for arm, rep, batch, ms in rows:  # (plain Python: the groupby of pandas cost 30 ms a call, for a few dozen steps)
        by_arm.setdefault(arm, []).append((rep, batch, math.log(float(ms))))
    v_rep, v_batch, v_step, n_arms = [], [], [], 0
    for arm in sorted(by_arm):
        g = by_arm[arm]
        n = len(g)
        by_rep, by_batch = _means_by(g, 0), _means_by(g, 1)
        R, B = len(by_rep), len(by_batch)
        if n < 3:
            continue
        n_arms += 1
        mean = float(np.mean([y for _, _, y in g]))
        fit = np.array([y - by_rep[r] - by_batch[b] + mean for r, b, y in g])
        dof = n - R - B + 1
        s2 = float((fit ** 2).sum() / dof) if dof > 0 else None
        if s2 is not None:
            v_step.append(s2)
        if R > 1:
            v_rep.append(max(0.0, float(np.var(list(by_rep.values()), ddof=1)) - (s2 or 0.0) / (n / R)))
        if B > 1:
            v_batch.append(max(0.0, float(np.var(list(by_batch.values()), ddof=1)) - (s2 or 0.0) / (n / B)))

    def pct(v):
        return 100 * math.sqrt(float(np.mean(v))) if v else None

    out.update(rep_sd_pct=pct(v_rep), batch_sd_pct=pct(v_batch), step_sd_pct=pct(v_step), n_arms=n_arms,
               n_reps=len({r for _, r, _, _ in rows}), n_batches=len({b for _, _, b, _ in rows}))
    return out


def _na(v) -> bool:
    """Missing as pandas' dropna reads it: None, NaN, pandas.NA (whose `!=` is no bool)."""
    try:
        return v is None or bool(v != v)
    except TypeError:
        return True


def _means_by(g: list[tuple], i: int) -> dict:
    """{key: mean of y} of (rep, batch, y) tuples grouped by field `i` (0: rep, 1: batch)."""
    groups: dict = {}
    for t in g:
        groups.setdefault(t[i], []).append(t[2])
    return {k: float(np.mean(v)) for k, v in groups.items()}


def delta_method(f, samples, *, confidence: float = CONFIDENCE, rel_step: float = 1e-6) -> dict:
    """f(mean of the samples) and its uncertainty, propagated from the samples' spread by the delta method.

    `samples` is an (n, d) array: n observations (steps) of d inputs. The estimate is f(x̄); its standard error
    is sqrt(∇f(x̄)ᵀ Σ ∇f(x̄) / n), with Σ the inputs' sample covariance and ∇f by central differences, and the CI
    is estimate ± t.ppf((1 + confidence) / 2, n - 1) · se (checked against a brute-force bootstrap in the tests).
    Returns {"estimate", "se", "ci95", "n"}; se and ci95 are None with n < 2."""
    X = np.asarray(samples, dtype=float)
    if X.ndim == 1:
        X = X[:, None]
    n, d = X.shape
    xbar = X.mean(axis=0)
    est = float(f(xbar))
    if n < 2:
        return {"estimate": est, "se": None, "ci95": None, "n": n}
    grad = np.zeros(d)
    for j in range(d):
        h = rel_step * max(abs(xbar[j]), 1.0)
        up, dn = xbar.copy(), xbar.copy()
        up[j] += h
        dn[j] -= h
        grad[j] = (f(up) - f(dn)) / (2 * h)
    cov = np.atleast_2d(np.cov(X, rowvar=False))
    se = float(math.sqrt(max(float(grad @ cov @ grad), 0.0) / n))
    t = float(_sps.t.ppf((1 + confidence) / 2, n - 1))
    return {"estimate": est, "se": se, "ci95": [est - t * se, est + t * se], "n": n}


# --- tests of differences and ratios (moved here from savings/verdicts, compare/rundiff, analysis) -------------

def t_quantile(p: float, df) -> float:
    """The p-quantile of Student's t with `df` degrees of freedom; the normal's when df is None or infinite.
    Cached for plain numbers (`_t_ppf`): the tables ask for the same few quantiles once per row."""
    if isinstance(p, float) and (df is None or isinstance(df, (int, float))):
        return _t_ppf(p, df)
    return float(_sps.t.ppf(p, df)) if df is not None and math.isfinite(df) else float(_sps.norm.ppf(p))


@functools.lru_cache(maxsize=4096)
def _t_ppf(p: float, df) -> float:
    return float(_sps.t.ppf(p, df)) if df is not None and math.isfinite(df) else float(_sps.norm.ppf(p))


def t_cdf(x: float, df) -> float:
    """Student's t cdf at x with `df` degrees of freedom; the normal's when df is None or infinite."""
    return float(_sps.t.cdf(x, df)) if df is not None and math.isfinite(df) else float(_sps.norm.cdf(x))


def se_from_ci(ci95, n_units, *, log: bool = True, confidence: float = CONFIDENCE) -> float | None:
    """The se behind a t-interval: the half width (of the logs when `log`) / t_{(1+c)/2, n_units - 1}. None without
    a CI or with fewer than 2 units. What a CI with n_units - 1 df says about its estimate's se."""
    try:
        lo, hi = float(ci95[0]), float(ci95[1])
    except (TypeError, ValueError, IndexError):
        return None
    if lo != lo or hi != hi or n_units is None or n_units != n_units or int(n_units) < 2 or (log and not lo > 0):
        return None
    half = (math.log(hi) - math.log(lo)) / 2 if log else (hi - lo) / 2
    return half / t_quantile((1 + confidence) / 2, int(n_units) - 1)


def welch_satterthwaite_df(parts) -> float:
    """Welch-Satterthwaite df of a sum of variances [(variance, df)]; df None/inf: known (no df of its own)."""
    tot = sum(v for v, _ in parts)
    den = sum(v * v / d for v, d in parts if d is not None and math.isfinite(d) and d > 0)
    return tot * tot / den if den > 0 else math.inf


_TTEST_IND_1D = getattr(_sps.ttest_ind, "__wrapped__", _sps.ttest_ind)
"""scipy's `ttest_ind` itself, under the decorator that handles `axis`, `nan_policy` and masked arrays (the public
function where a scipy has no such decorator): what `welch` calls on finite 1-D samples."""


def welch(a, b, confidence: float = CONFIDENCE) -> dict:
    """mean(b) - mean(a) with its Welch t interval and two-sided p (scipy's `ttest_ind`, equal_var=False).

    Both samples constant: the difference is exact (p 0 when it is not 0, 1 when it is). Fewer than 2 per side:
    no CI, p None. Returns {"delta_ms", "ci95", "p", "n_a", "n_b"} (delta in the samples' unit)."""
    import warnings
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    d = float(b.mean() - a.mean()) if a.size and b.size else math.nan
    out = {"delta_ms": d, "ci95": None, "p": None, "n_a": int(a.size), "n_b": int(b.size)}
    if a.size < 2 or b.size < 2:
        return out
    if np.ptp(a) == 0 and np.ptp(b) == 0:
        return {**out, "ci95": [d, d], "p": 0.0 if d != 0 else 1.0}
    # finite 1-D samples skip scipy's axis / NaN-policy wrapper (`_TTEST_IND_1D`): half of the call's time in the
    # gate's and power's simulations, the same numbers (bit for bit on 20,000 random pairs, scipy 1.17)
    ttest = _TTEST_IND_1D if np.isfinite(a).all() and np.isfinite(b).all() else _sps.ttest_ind
    with warnings.catch_warnings():  # near-identical samples: scipy warns of precision loss, the answer stands
        warnings.simplefilter("ignore", RuntimeWarning)
        t = ttest(b, a, equal_var=False)
    ci = t.confidence_interval(confidence)
    return {**out, "ci95": [float(ci.low), float(ci.high)], "p": float(t.pvalue)}


THETA_TAIL = 0.025
"""A calibrated factor's 95% CI leaves this much on each side: what the Berger-Boos p-value adds (`band_ratio_test`)."""


def band_ratio_test(m, se_m, df_m, p, se_p, df_p, *, theta_ci=None, band=(0.8, 1.25), alpha: float = 0.05):
    """measured / (predicted · θ) against a band: (estimate form, estimate, se, df, the (1 - 2 alpha) CI of the
    ratio, p_confirm, p_refute). The savings-model verdicts' test (`workbench.savings.verdicts.judge`).

    `theta_ci` None: the prediction is used as traced (θ = 1, known). Else [θ_lo, θ_hi], a calibrated factor's 95%
    CI (the instrument's factor on the model's traced input: the prediction is p·θ). θ enters as a shift of the
    log ratio with its own interval, never in quadrature:

    - each one-sided p-value is Berger-Boos: its largest value over θ in [θ_lo, θ_hi] (an end point: the
      p-value is monotone in θ) plus THETA_TAIL (0.025, the chance that θ lies beyond that end);
    - the CI is what that test inverts: the ratio's (1 - 2 (alpha - THETA_TAIL)) CI without θ (95% at alpha 0.05)
      divided end point by end point by θ's CI, [r_lo / θ_hi, r_hi / θ_lo] (coverage >= 1 - 2 alpha by the union
      bound).

    Log form (m > 0, p > 0): x = log(m / p) - log θ, sd = sqrt((se_m/m)^2 + (se_p/p)^2), df by Welch-Satterthwaite;
    the band is [log lo, log hi]; p_confirm = TOST (the larger of the two one-sided p-values against the band's
    edges), p_refute = one-sided, on the estimate's side (the estimate at θ's midpoint sqrt(θ_lo θ_hi)). Linear form
    otherwise: the two differences m - k·p·θ (k = lo, hi) with their se sqrt(se_m^2 + (k θ se_p)^2)."""
    lo, hi = band
    se_m, se_p = float(se_m or 0.0), float(se_p or 0.0)
    thetas = [1.0] if theta_ci is None else [float(theta_ci[0]), float(theta_ci[1])]
    if min(thetas) <= 0:
        raise ValueError(f"a calibrated factor must be positive, got {theta_ci}")
    tail = 0.0 if theta_ci is None else THETA_TAIL
    th_mid = math.sqrt(thetas[0] * thetas[-1])

    def bb(ps):  # Berger-Boos: the worst p over θ's end points, plus the tail θ may lie in
        return min(1.0, max(ps) + tail)

    if m > 0 and p > 0:
        parts = [((se_m / m) ** 2, df_m), ((se_p / p) ** 2, df_p)]
        sd = math.sqrt(sum(v for v, _ in parts))
        df = welch_satterthwaite_df(parts)
        x0 = math.log(m / p)
        x = x0 - math.log(th_mid)
        if sd == 0:
            r = [m / p / t for t in thetas]
            inside = all(lo < v < hi for v in r)
            outside = all(v >= hi for v in r) or all(v <= lo for v in r)
            return ("log", x, 0.0, df, [min(r), max(r)], (tail if inside else 1.0),
                    (tail if outside else 1.0))
        p_lo = bb([1 - t_cdf((x0 - math.log(t) - math.log(lo)) / sd, df) for t in thetas])  # H0: ratio <= lo
        p_hi = bb([t_cdf((x0 - math.log(t) - math.log(hi)) / sd, df) for t in thetas])  # H0: ratio >= hi
        p_confirm = max(p_lo, p_hi)
        mid = (math.log(lo) + math.log(hi)) / 2
        if x >= mid:  # H0: ratio <= hi
            p_refute = bb([1 - t_cdf((x0 - math.log(t) - math.log(hi)) / sd, df) for t in thetas])
        else:  # H0: ratio >= lo
            p_refute = bb([t_cdf((x0 - math.log(t) - math.log(lo)) / sd, df) for t in thetas])
        q = t_quantile(1 - (alpha - tail), df)
        ci = [math.exp(x0 - q * sd) / thetas[-1], math.exp(x0 + q * sd) / thetas[0]]
        return "log", x, sd, df, ci, p_confirm, p_refute
    # linear: m against the band's edges k·p·θ (k = lo, hi), the prediction's variance scaled by (k θ)^2
    def diffs(t):
        edges = sorted([(k * p * t, k) for k in band])
        out = []
        for e, k in edges:
            parts = [(se_m ** 2, df_m), ((k * t * se_p) ** 2, df_p)]
            out.append((m - e, math.sqrt(sum(v for v, _ in parts)), welch_satterthwaite_df(parts)))
        return edges, out
    per = [diffs(t) for t in thetas]
    if any(s == 0 for _, o in per for _, s, _ in o):
        inside = all(o[0][0] > 0 > o[1][0] for _, o in per)
        return "linear", m, 0.0, math.inf, None, (tail if inside else 1.0), (1.0 if inside else tail)
    p_confirm = bb([max(1 - t_cdf(o[0][0] / o[0][1], o[0][2]), t_cdf(o[1][0] / o[1][1], o[1][2])) for _, o in per])
    edges_mid, _ = diffs(th_mid)
    if m >= (edges_mid[0][0] + edges_mid[1][0]) / 2:
        p_refute = bb([1 - t_cdf(o[1][0] / o[1][1], o[1][2]) for _, o in per])
    else:
        p_refute = bb([t_cdf(o[0][0] / o[0][1], o[0][2]) for _, o in per])
    df = min(f for _, o in per for _, _, f in o)
    ci = None
    if p > 0:  # the ratio's CI by Fieller is not needed to decide; a first-order one to show
        sd_r = math.sqrt(se_m ** 2 + (m / p) ** 2 * se_p ** 2) / p
        q = t_quantile(1 - (alpha - tail), df)
        ends = [(m / p + s * q * sd_r) / t for s in (-1, 1) for t in thetas]
        ci = [min(ends), max(ends)]
    return "linear", m, math.sqrt(se_m ** 2 + se_p ** 2), df, ci, p_confirm, p_refute


def variance_upper_bound(values: Iterable, *, confidence: float = CONFIDENCE) -> dict:
    """The sample variance s² of independent normal `values` (n - 1 df) and its one-sided upper confidence bound
    s² · (n - 1) / chi²_{1 - confidence, n - 1} (chi-square). Returns {"var", "var_upper", "df", "n"}; var_upper is
    None with fewer than 2 values."""
    x = _clean(values)
    n = int(x.size)
    if n < 2:
        return {"var": math.nan, "var_upper": None, "df": None, "n": n}
    s2 = float(x.var(ddof=1))
    return {"var": s2, "var_upper": s2 * variance_upper_factor(n - 1, confidence=confidence), "df": n - 1, "n": n}


def variance_upper_factor(df: int, *, confidence: float = CONFIDENCE) -> float:
    """df / chi²_{1 - confidence, df}: the one-sided upper confidence bound on a variance over its sample variance
    at `df` degrees of freedom (about 4.4 at 5 df, 3.2 at 7, tending to 1)."""
    return df / float(_sps.chi2.ppf(1 - confidence, df))


def fieller_ratio(a: float, se_a: float, df_a, b: float, se_b: float, df_b, *,
                  confidence: float = CONFIDENCE) -> dict:
    """a / b for two independent estimates with Fieller's interval: the set of r with |a - r b| / sqrt(se_a² +
    r² se_b²) <= t, t = t_{(1+c)/2} at the smaller df (conservative where they differ). With g = t² se_b² / b²:
    r ∈ [r̂ ± (t / |b|) sqrt(se_a² (1 - g) + r̂² se_b²)] / (1 - g) when g < 1; g >= 1 (b's own CI reaches 0): no
    bounded interval (`bounded` False, ci95 None). Returns {"ratio", "ci95", "df", "g", "bounded", "method"}."""
    dfs = [d for d in (df_a, df_b) if d is not None and math.isfinite(d)]
    df = min(dfs) if dfs else None
    r = a / b if b else math.nan
    out = {"ratio": r, "ci95": None, "df": df, "g": None, "bounded": False,
           "method": f"Fieller, t at {df if df is not None else 'inf'} df (the smaller of the two)"}
    if not b or se_a is None or se_b is None:
        return out
    t = t_quantile((1 + confidence) / 2, df)
    g = (t * se_b / b) ** 2
    out["g"] = g
    if g >= 1:
        return out
    half = (t / abs(b)) * math.sqrt(max(se_a ** 2 * (1 - g) + r ** 2 * se_b ** 2, 0.0))
    return {**out, "ci95": [(r - half) / (1 - g), (r + half) / (1 - g)], "bounded": True}


def quadratic_term(x: Sequence, y: Sequence) -> dict:
    """y = a + b x + q x² by least squares: {"q", "b", "a", "n"} (None when fewer than 3 distinct x)."""
    xa, ya = _paired_arrays(x, y, "x and y")
    if np.unique(xa).size < 3:
        return {"q": None, "b": None, "a": None, "n": int(xa.size)}
    q, b, a = (float(v) for v in np.polyfit(xa, ya, 2))
    return {"q": q, "b": b, "a": a, "n": int(xa.size)}
