"""Every statistic the workbench reports, defined once.

Rules (all other modules call these functions rather than re-deriving them):

- Missing values. NaN and None are dropped before any statistic is computed. For paired data a pair is dropped
  when either side is missing. A statistic of nothing is NaN (`quantile`, `mad`) or None (`summarize`).
- Quantiles. `quantile` is numpy's linear interpolation (the `np.quantile` default, "type 7"). The spread of a
  cell is reported as p20-p80 around the median (`summarize`); the mean is reported beside it.
- MAD. `mad` is the unscaled median absolute deviation, median(|t - median(t)|) (no 1.4826 factor).
- Outliers. Within one cell (one arm / configuration), a step time t is an outlier when
  |t - median(cell)| > OUTLIER_K * max(MAD(cell), OUTLIER_FLOOR * median(cell)), i.e. more than 5 MADs from the
  median, with the MAD floored at 1% of the median so that a cell of a few near-identical steps does not flag a
  step that is only ~1-2% off. Missing steps are never flagged.
- Speedup. The speedup of an optimized arm over its baseline is the ratio of means over paired samples,
  mean(baseline_ms) / mean(optimized_ms) (> 1: the optimized arm is faster; equal to the throughput ratio).
  Pair i is the same repetition and batch in both arms, so per-batch variation cancels.
- Confidence interval of a speedup. A paired bootstrap (pairs resampled jointly) of that ratio with
  `scipy.stats.bootstrap`, method BCa, 4999 resamples, 95% confidence, seeded. When BCa is degenerate (NaN
  bounds or an error, e.g. identical values) or there are only 2 pairs, the percentile bootstrap is used
  instead; with fewer than 2 pairs there is no interval (None). The method string says which was used.
- Verdict. "faster" when the whole CI lies above 1, "slower" when it lies below 1, otherwise
  "no detectable difference (±x%)" with x = 100 * max(1 - lo, hi - 1), the largest effect the CI still allows.
  No CI -> "no verdict (fewer than 2 paired samples)".
- Half width. `half_width_pct` = 100 * (hi - lo) / 2 / estimate: the CI's half width in percent of the estimate.
- Linear fits. Least squares via `scipy.stats.linregress`; the slope's CI is slope ± t_{(1+c)/2, n-2} * stderr
  (needs n >= 3, else None); r2 is the squared Pearson r.
"""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Iterable, Sequence

import numpy as np
from scipy import stats as _sps

__all__ = ["CONFIDENCE", "OUTLIER_K", "OUTLIER_FLOOR", "quantile", "summarize", "mad", "outlier_mask",
           "paired_speedup", "verdict", "linear_fit", "half_width_pct"]

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


def _ratio_of_means(baseline_ms, optimized_ms, axis=-1):
    return np.mean(baseline_ms, axis=axis) / np.mean(optimized_ms, axis=axis)


def _bootstrap_ci(b: np.ndarray, o: np.ndarray, method: str, confidence: float, n_resamples: int, seed: int):
    """(lo, hi) of a paired bootstrap of the ratio of means, or None when the method fails or gives NaN/inf."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # DegenerateDataWarning, 0/0 in the jackknife: handled by the NaN check
            res = _sps.bootstrap((b, o), _ratio_of_means, paired=True, vectorized=True, axis=-1, method=method,
                                 n_resamples=n_resamples, confidence_level=confidence,
                                 **{_BOOTSTRAP_SEED_KW: np.random.default_rng(seed)})
    except (ValueError, FloatingPointError, ZeroDivisionError):
        return None
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return None
    return lo, hi


def _paired_arrays(a, b, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Two equal-length 1-D float arrays with every pair holding a NaN/None dropped (ValueError otherwise)."""
    aa, ba = _to_float_array(a), _to_float_array(b)
    if aa.shape != ba.shape or aa.ndim != 1:
        raise ValueError(f"{what} need two 1-D sequences of equal length, got {aa.shape} and {ba.shape}")
    keep = ~(np.isnan(aa) | np.isnan(ba))
    return aa[keep], ba[keep]


def paired_speedup(baseline_ms: Sequence, optimized_ms: Sequence, *, confidence: float = CONFIDENCE,
                   n_resamples: int = 4999, seed: int = 0) -> dict:
    """Speedup mean(baseline_ms) / mean(optimized_ms) of paired samples, with a paired-bootstrap CI.

    `baseline_ms[i]` and `optimized_ms[i]` are the same repetition and batch in both arms (equal lengths, else
    ValueError). Pairs with a NaN/None on either side are dropped. The CI is a BCa paired bootstrap
    (`scipy.stats.bootstrap`, seeded with `seed`); percentile bootstrap when BCa is degenerate or n == 2;
    None with fewer than 2 pairs.

    Returns {"speedup": float, "ci95": [lo, hi] or None, "n_pairs": int, "method": str,
    "half_width_pct": float or None, "verdict": str}.
    """
    b, o = _paired_arrays(baseline_ms, optimized_ms, "paired samples")
    n = int(b.size)
    with np.errstate(divide="ignore", invalid="ignore"):
        speedup = float(_ratio_of_means(b, o)) if n else math.nan

    ci = None
    what = f"of mean(baseline)/mean(optimized), {n_resamples} resamples"
    if n < 2:
        method = "none (fewer than 2 paired samples)"
    else:
        # BCa's acceleration comes from a leave-one-out jackknife: meaningless with 2 pairs, so percentile there.
        ci = _bootstrap_ci(b, o, "BCa", confidence, n_resamples, seed) if n >= 3 else None
        if ci is not None:
            method = f"paired bootstrap (BCa) {what}"
        else:
            ci = _bootstrap_ci(b, o, "percentile", confidence, n_resamples, seed)
            why = "BCa degenerate" if n >= 3 else "BCa needs >= 3 pairs"
            method = (f"paired bootstrap (percentile; {why}) {what}" if ci is not None
                      else "none (bootstrap failed on degenerate data)")

    hw = half_width_pct(ci, speedup) if ci is not None and math.isfinite(speedup) and speedup != 0 else None
    return {"speedup": speedup, "ci95": list(ci) if ci is not None else None, "n_pairs": n, "method": method,
            "half_width_pct": hw, "verdict": verdict(ci, n)}


MIN_PAIRS = 6
"""Fewer pairs give a CI (reported) but no verdict: a bootstrap over 2-5 pairs understates its own uncertainty."""


def verdict(ci95: tuple[float, float] | None, n_pairs: int | None = None) -> str:
    """Verdict on a speedup CI: "faster" (lo > 1), "slower" (hi < 1), else "no detectable difference (±x%)".

    x = 100 * max(1 - lo, hi - 1) is the largest effect, in percent, the CI still allows. None -> NO_VERDICT; fewer
    than MIN_PAIRS pairs (when `n_pairs` is given) -> "no verdict (n < 6 pairs)".
    """
    if ci95 is None:
        return NO_VERDICT
    if n_pairs is not None and n_pairs < MIN_PAIRS:
        return f"no verdict (n={n_pairs} < {MIN_PAIRS} pairs)"
    lo, hi = float(ci95[0]), float(ci95[1])
    if lo > 1:
        return "faster"
    if hi < 1:
        return "slower"
    return f"no detectable difference (±{100 * max(1 - lo, hi - 1):.1f}%)"


def half_width_pct(ci95: tuple[float, float], estimate: float) -> float:
    """Half width of `ci95` in percent of `estimate`: 100 * (hi - lo) / 2 / estimate."""
    return float(100 * (ci95[1] - ci95[0]) / 2 / estimate)


def linear_fit(x: Sequence, y: Sequence, *, confidence: float = CONFIDENCE, at: float | None = None) -> dict:
    """Least-squares line y = slope * x + intercept (`scipy.stats.linregress`), with CIs on slope and intercept.

    Points with a NaN/None in x or y are dropped. ci = estimate ± t.ppf((1 + confidence) / 2, n - 2) * stderr, None
    when n < 3. With `at`, also the fitted mean at x = at and its CI (se = s * sqrt(1/n + (at - mean x)^2 / Sxx)).
    Returns {"slope", "intercept", "slope_ci95", "intercept_ci95", "r2", "n"} (+ "at": {"x", "y", "ci95"});
    slope, intercept and r2 are None when no line can be fitted (n < 2, or all x identical).
    """
    xa, ya = _paired_arrays(x, y, "x and y")
    n = int(xa.size)
    if n < 2 or np.all(xa == xa[0]):
        out = {"slope": None, "intercept": None, "slope_ci95": None, "intercept_ci95": None, "r2": None, "n": n}
        if at is not None:
            out["at"] = {"x": at, "y": None, "ci95": None}
        return out
    res = _sps.linregress(xa, ya)
    slope, intercept = float(res.slope), float(res.intercept)
    ci = ici = at_ci = None
    if n >= 3:
        t = float(_sps.t.ppf((1 + confidence) / 2, n - 2))
        ci = [slope - t * float(res.stderr), slope + t * float(res.stderr)]
        ici = [intercept - t * float(res.intercept_stderr), intercept + t * float(res.intercept_stderr)]
        if at is not None:
            resid = ya - (slope * xa + intercept)
            s_res = math.sqrt(float((resid ** 2).sum()) / (n - 2))
            sxx = float(((xa - xa.mean()) ** 2).sum())
            se = s_res * math.sqrt(1 / n + (at - float(xa.mean())) ** 2 / sxx)
            y0 = slope * at + intercept
            at_ci = [y0 - t * se, y0 + t * se]
    out = {"slope": slope, "intercept": intercept, "slope_ci95": ci, "intercept_ci95": ici,
           "r2": float(res.rvalue) ** 2, "n": n}
    if at is not None:
        out["at"] = {"x": at, "y": slope * at + intercept, "ci95": at_ci}
    return out


def paired_difference(baseline_ms: Sequence, arm_ms: Sequence, *, confidence: float = CONFIDENCE,
                      n_resamples: int = 4999, seed: int = 0) -> dict:
    """The mean of baseline - arm over paired samples (a saving, in the samples' unit), with a bootstrap CI.

    BCa bootstrap of the mean difference (`scipy.stats.bootstrap`; percentile where BCa degenerates), None with
    fewer than 2 pairs. Returns {"mean", "ci95", "n_pairs", "method"}."""
    b, o = _paired_arrays(baseline_ms, arm_ms, "paired samples")
    d = b - o
    n = int(d.size)
    out = {"mean": float(d.mean()) if n else math.nan, "ci95": None, "n_pairs": n, "method": "none (fewer than 2 pairs)"}
    if n < 2:
        return out
    if np.all(d == d[0]):
        out.update(ci95=[float(d[0]), float(d[0])], method="all pairs equal")
        return out
    for method in (("BCa", "percentile") if n >= 3 else ("percentile",)):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                r = _sps.bootstrap((d,), np.mean, confidence_level=confidence, n_resamples=n_resamples,
                                   method=method, **{_BOOTSTRAP_SEED_KW: np.random.default_rng(seed)})
            lo, hi = float(r.confidence_interval.low), float(r.confidence_interval.high)
            if math.isfinite(lo) and math.isfinite(hi):
                out.update(ci95=[lo, hi], method=f"paired bootstrap ({method}) of the mean difference, "
                                                 f"{n_resamples} resamples")
                return out
        except Exception:  # noqa: BLE001 - a degenerate sample: try the next method
            continue
    return out


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
