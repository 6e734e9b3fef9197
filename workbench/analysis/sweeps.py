"""Sweeps (`name@key=value` comparisons): the saving per point and its linear fit, and the (L-1) test at L = 1."""
from __future__ import annotations

import math
import os
import re

import pandas as pd

from workbench.measure import stats
from workbench.analysis.constants import SWEEP_CONFIDENCE
from workbench.analysis.loader import _empty, _frame, _included, _lohi, _name, step_samples


def _log_se(speedup, lo, hi, n_units) -> float | None:
    """The se of log(speedup) behind a 95% CI with n_units - 1 df (`stats.se_from_ci`; None without a CI)."""
    try:
        return stats.se_from_ci([lo, hi], n_units)
    except (TypeError, ValueError):
        return None


def sweep(comps: pd.DataFrame, stat: str = "mean") -> tuple[pd.DataFrame, pd.DataFrame]:
    """Sweep comparisons (`name@key=value`) of `comparisons(...)`: (points, fit). points: per folder, group (name
    before '@'), arm and value x, `saving_ms` = baseline - arm step time (`stat` "mean": the arms' means, what the
    speedup is a ratio of; "median": their medians) with the speedup and its CI, and `saving_se_ms` = arm_mean x
    speedup x se(log speedup) (the rep-level CI's se, first order). fit: per folder, group, key and arm,
    `stats.linear_fit` of saving_ms on x, weighted (1/se²) where every point has an se on at least
    `stats.MIN_WEIGHT_DF` df, else OLS with a robust se: `slope_ms_per_x` (ms per layer in a layers sweep),
    `slope_ci95_lo/hi`, intercept_ms, r2, `weighted`."""
    pcols = ["folder", "group", "key", "x", "arm", "baseline", "baseline_ms", "arm_ms", "saving_ms", "saving_se_ms",
             "stat", "speedup", "ci95_lo", "ci95_hi", "n_pairs", "n_units", "file"]
    fcols = ["folder", "group", "key", "arm", "n_points", "xs", "slope_ms_per_x", "slope_ci95_lo", "slope_ci95_hi",
             "intercept_ms", "r2", "weighted", "stat", "file"]
    s = comps[comps["name"].astype(str).str.contains("@") & comps["role"].isin(["optimized", "other"])].copy()
    if s.empty:
        return _empty(pcols), _empty(fcols)
    s = pd.concat([s, s["name"].str.extract(r"^(?P<group>[^@]+)@(?P<key>[^=]+)=(?P<x>.+)$")], axis=1)
    s["x"] = pd.to_numeric(s["x"], errors="coerce")
    if stat == "mean":
        s["baseline_ms"], s["arm_ms"] = s["baseline_mean_ms"], s["arm_mean_ms"]
    s["saving_ms"], s["stat"] = s["baseline_ms"] - s["arm_ms"], stat
    s["saving_se_ms"] = [None if (se := _log_se(sp, lo, hi, n)) is None else a * sp * se for a, sp, lo, hi, n in
                         zip(s["arm_mean_ms"], s["speedup"], s["ci95_lo"], s["ci95_hi"], s["n_units"])]
    points = s.sort_values(["folder", "group", "arm", "x"]).reindex(columns=pcols).reset_index(drop=True)
    fits = []
    for (folder, group, key, arm), g in points.groupby(["folder", "group", "key", "arm"], sort=False):
        se = g["saving_se_ms"].tolist()
        df = [n - 1 if n == n and n is not None else None for n in pd.to_numeric(g["n_units"], errors="coerce")]
        has_se = all(v is not None and v == v and v > 0 for v in se)
        f = stats.linear_fit(g["x"].tolist(), g["saving_ms"].tolist(), se=se if has_se else None,
                             df=df if has_se else None)
        weighted = f["weighted"]
        lo, hi = f["slope_ci95"] or [None, None]
        fits.append({"folder": folder, "group": group, "key": key, "arm": arm, "n_points": f["n"],
                     "xs": ",".join(f"{x:g}" for x in g["x"]), "slope_ms_per_x": f["slope"], "slope_ci95_lo": lo,
                     "slope_ci95_hi": hi, "intercept_ms": f["intercept"], "r2": f["r2"], "weighted": weighted,
                     "stat": stat, "file": g["file"].iloc[0]})
    return points, _frame(fits, fcols)


SWEEP_POINT_COLUMNS = ["folder", "group", "key", "x", "opt", "model", "tokens", "attn", "baseline", "arm",
                       "measured_ms", "measured_ci95_lo", "measured_ci95_hi", "measured_se_ms", "measured_df",
                       "n_pairs", "n_units", "measured_from", "predicted_ms", "verdict", "file"]
SWEEP_FIT_COLUMNS = ["folder", "group", "key", "opt", "model", "tokens", "attn", "baseline", "arm", "n_points", "xs",
                     "weighted", "slope_ms", "slope_ci95_lo", "slope_ci95_hi", "intercept_ms", "intercept_ci95_lo",
                     "intercept_ci95_hi", "r2", "at1_ms", "at1_ci95_lo", "at1_ci95_hi", "at1_ci90_lo", "at1_ci90_hi",
                     "margin_ms", "at1_zero", "l1_measured_ms", "l1_ci95_lo", "l1_ci95_hi", "l1_zero", "l_minus_1",
                     "l_minus_1_by", "model_at1_ms", "model_at1", "model_at1_by", "file"]


def sweep_points(profiles: str | None = None, key: str = "layers", include_incomplete_comparisons=False,
                 **discover_kw) -> pd.DataFrame:
    """The points of every `name@<key>=N` sweep (`SWEEP_POINT_COLUMNS`): the measured saving of the optimized arm,
    the mean paired difference baseline - arm with its 95% CI, se and df at the rep level (`stats.paired_difference`
    over every pair, the rep as the unit), recomputed from each run's results.csv (`measured_from`); the model's
    prediction and verdict as `workbench.savings.verdicts` wrote them into summary.json."""
    from workbench.measure import engine

    rows = []
    for r, comps in _included(profiles, include_incomplete_comparisons=include_incomplete_comparisons,
                              **discover_kw):
        for c in comps:
            m = re.match(r"^(?P<group>[^@]+)@(?P<key>[^=]+)=(?P<x>.+)$", _name(c))
            if not m or m.group("key") != key or not c.get("optimized") or not c.get("baseline"):
                continue
            sm = c.get("savings_model") or {}
            base, arm = c["baseline"]["arm"], c["optimized"]["arm"]
            smp = step_samples(r["path"]).get(_name(c))
            if not smp:
                continue
            d = stats.paired_difference(*engine.pairs(smp, base, arm))
            lo, hi = _lohi(d["ci95"])
            rows.append({"folder": r["folder"], "group": m.group("group"), "key": key,
                         "x": pd.to_numeric(m.group("x"), errors="coerce"),
                         **{k: c.get(k) for k in ("opt", "model", "tokens", "attn")}, "baseline": base, "arm": arm,
                         "measured_ms": d["mean"], "measured_ci95_lo": lo, "measured_ci95_hi": hi,
                         "measured_se_ms": d["se"], "measured_df": d["df"], "n_pairs": d["n_pairs"],
                         "n_units": d["n_units"], "measured_from": "results.csv (paired difference, rep unit)",
                         "predicted_ms": sm.get("predicted_ms"), "verdict": sm.get("verdict"),
                         "file": os.path.join(r["folder"], "summary.json")})
    df = _frame(rows, SWEEP_POINT_COLUMNS, ("x", "measured_ms", "measured_ci95_lo", "measured_ci95_hi",
                                            "measured_se_ms", "measured_df", "predicted_ms"))
    return df.sort_values(["folder", "group", "arm", "x"], kind="stable").reset_index(drop=True)


def equivalence(ci, target: float, margin: float | None) -> str:
    """"confirmed" when `ci` (a 90% CI) lies inside target ± margin, "refuted" when it lies entirely outside,
    "inconclusive" otherwise ("untested" without a CI or a margin): two one-sided tests at 5% for the first, the
    one-sided test on the estimate's side for the second."""
    lo, hi = _lohi(ci)
    if lo is None or margin is None or not margin > 0:
        return "untested"
    if target - margin < lo and hi < target + margin:
        return "confirmed"
    if lo > target + margin or hi < target - margin:
        return "refuted"
    return "inconclusive"


def sweep_fits(profiles: str | None = None, points: pd.DataFrame | None = None, **kw) -> pd.DataFrame:
    """Per `name@layers=N` sweep (`SWEEP_FIT_COLUMNS`): weighted least squares of the measured saving on L
    (`stats.linear_fit`, weights 1/se² with each point's rep-level se; the points' CIs differ many-fold in width),
    or, where a point's se rests on fewer than `stats.MIN_WEIGHT_DF` df (2 or 3 reps), OLS with a robust (HC3) se:
    no weight from a variance that 2 reps agreeing by chance made tiny,
    slope (ms per layer) and intercept with their 95% CIs, and the fitted saving at L = 1 with its 95% and 90% CIs.

    The (L-1) form (no saving with one layer) is judged by equivalence within a stated margin, never by a CI that
    merely contains 0: margin = half of one layer's saving, |slope| / 2 (the midpoint between "(L-1): nothing at
    L = 1" and "one layer's saving at L = 1"). `l_minus_1` is "confirmed" (it holds) when the fit's 90% CI at L = 1
    lies inside ±margin, "refuted" when it lies entirely outside, "inconclusive" otherwise, "untested" without a CI
    (fewer than 3 points with an se). The measured L = 1 point, where the sweep ran one, is shown beside it
    (`l1_*`; `l1_zero`: its 95% CI contains 0, information only: the fit already uses it).

    The workbench's own model at L = 1 (`model_at1_ms`, the sweep's L = 1 prediction: one build for packing, one
    reload for offload) is judged by the same rule around its prediction: `model_at1` "confirmed" when the fit's
    90% CI at L = 1 lies inside model_at1_ms ± margin, "refuted" entirely outside, else "inconclusive"."""
    pts = sweep_points(profiles, **kw) if points is None else points
    rows = []
    for (folder, group, key, arm), g in pts.groupby(["folder", "group", "key", "arm"], sort=False):
        g = g.dropna(subset=["x", "measured_ms"]).sort_values("x")
        se = pd.to_numeric(g["measured_se_ms"], errors="coerce").tolist() if "measured_se_ms" in g else None
        df = pd.to_numeric(g["measured_df"], errors="coerce").tolist() if "measured_df" in g else None
        f = stats.linear_fit(g["x"].tolist(), g["measured_ms"].tolist(), se=se, df=df, at=1)
        f90 = stats.linear_fit(g["x"].tolist(), g["measured_ms"].tolist(), se=se, df=df, at=1,
                               confidence=SWEEP_CONFIDENCE)
        slo, shi = _lohi(f["slope_ci95"])
        ilo, ihi = _lohi(f["intercept_ci95"])
        at = f.get("at") or {}
        alo, ahi = _lohi(at.get("ci95"))
        blo, bhi = _lohi((f90.get("at") or {}).get("ci95"))
        margin = abs(f["slope"]) / 2 if f["slope"] is not None else None
        at1_zero = None if alo is None else bool(alo <= 0 <= ahi)
        one = g[g["x"] == 1]
        l1 = one.iloc[0] if len(one) else None
        l1_zero = None
        if l1 is not None and pd.notna(l1["measured_ci95_lo"]):
            l1_zero = bool(l1["measured_ci95_lo"] <= 0 <= l1["measured_ci95_hi"])
        verdict = equivalence((blo, bhi), 0.0, margin)
        by = "fewer than 3 points with an se" if blo is None else (
            f"fit at L=1: {at['y']:.1f} ms, 90% CI [{blo:.1f}, {bhi:.1f}] against 0 ± {margin:.1f} ms "
            f"(half of one layer's {abs(f['slope']):.1f} ms): " + {
                "confirmed": "inside", "refuted": "entirely outside",
                "inconclusive": "neither inside nor entirely outside"}.get(verdict, verdict))
        if l1 is not None and pd.notna(l1["measured_ci95_lo"]):
            by += (f"; measured at L=1: {l1['measured_ms']:.1f} ms [{l1['measured_ci95_lo']:.1f}, "
                   f"{l1['measured_ci95_hi']:.1f}] (95%, {int(l1['n_units'])} reps)")
        own = None if l1 is None or pd.isna(l1.get("predicted_ms")) else float(l1["predicted_ms"])
        own_verdict = None if own is None else equivalence((blo, bhi), own, margin)
        own_by = None if own is None or blo is None else (
            f"fit at L=1, 90% CI [{blo:.1f}, {bhi:.1f}] against {own:.1f} ± {margin:.1f} ms: " + {
                "confirmed": "inside", "refuted": "entirely outside",
                "inconclusive": "neither inside nor entirely outside"}.get(own_verdict, own_verdict))
        g0 = g.iloc[0] if len(g) else {}
        rows.append({"folder": folder, "group": group, "key": key,
                     **{k: g0.get(k) for k in ("opt", "model", "tokens", "attn", "baseline")}, "arm": arm,
                     "n_points": f["n"], "xs": ",".join(f"{x:g}" for x in g["x"]), "weighted": f["weighted"],
                     "slope_ms": f["slope"], "slope_ci95_lo": slo, "slope_ci95_hi": shi,
                     "intercept_ms": f["intercept"], "intercept_ci95_lo": ilo, "intercept_ci95_hi": ihi,
                     "r2": f["r2"], "at1_ms": at.get("y"), "at1_ci95_lo": alo, "at1_ci95_hi": ahi,
                     "at1_ci90_lo": blo, "at1_ci90_hi": bhi, "margin_ms": margin, "at1_zero": at1_zero,
                     "l1_measured_ms": None if l1 is None else l1["measured_ms"],
                     "l1_ci95_lo": None if l1 is None else l1["measured_ci95_lo"],
                     "l1_ci95_hi": None if l1 is None else l1["measured_ci95_hi"], "l1_zero": l1_zero,
                     "l_minus_1": verdict, "l_minus_1_by": by, "model_at1_ms": own, "model_at1": own_verdict,
                     "model_at1_by": own_by, "file": g0.get("file")})
    return _frame(rows, SWEEP_FIT_COLUMNS, ("tokens", "slope_ms", "slope_ci95_lo", "slope_ci95_hi", "intercept_ms",
                                            "intercept_ci95_lo", "intercept_ci95_hi", "r2", "at1_ms", "at1_ci95_lo",
                                            "at1_ci95_hi", "at1_ci90_lo", "at1_ci90_hi", "margin_ms",
                                            "l1_measured_ms", "l1_ci95_lo", "l1_ci95_hi", "model_at1_ms"))
