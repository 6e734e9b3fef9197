"""The savings models as the runs wrote them: the engine's model per comparison, `workbench.savings.verdicts`' verdicts
and step decompositions."""
from __future__ import annotations

import json
import os

import pandas as pd

from workbench.analysis.loader import _arms, _ctx, _frame, _included, _lohi, _name
from workbench.savings import verdicts as judging


SAVINGS_COLUMNS = ["folder", "comparison", "opt", "model", "layers", "tokens", "formula", "predicted_ms",
                   "measured_ms", "measured_over_predicted", "reason", "inputs", "file"]


def savings(profiles: str | None = None, **kw) -> pd.DataFrame:
    """Each A/B comparison's savings model (not the A/A or NVTX ones) as the engine wrote it (`SAVINGS_COLUMNS`):
    formula, predicted_ms (None where its inputs need a trace: `reason`), measured_ms, measured_over_predicted.
    Whether the models hold is a later issue."""
    rows = []
    for r, comps in _included(profiles, **kw):
        for c in comps:
            sm = c.get("savings_model") or {}
            if sm and _arms(c)[1:2] and _arms(c)[1][1] == "optimized":  # an A/A or NVTX comparison saves nothing
                p, m = sm.get("predicted_ms"), sm.get("measured_ms")
                rows.append({"folder": r["folder"], "comparison": _name(c),
                             **{k: c.get(k) for k in ("opt", "model", "layers", "tokens")},
                             "formula": sm.get("formula"), "predicted_ms": p, "measured_ms": m,
                             "measured_over_predicted": m / p if p and m is not None else None,
                             "reason": sm.get("reason"), "inputs": json.dumps(sm.get("inputs") or {}, default=str),
                             "file": os.path.join(r["folder"], "summary.json")})
    return _frame(rows, SAVINGS_COLUMNS, ("predicted_ms", "measured_ms", "measured_over_predicted"))


VERDICT_COLUMNS = ["folder", "comparison", "opt", "model", "layers", "tokens", "attn", "precision", "lengths", "baseline",
                   "arm",
                   "formula", "model_revision", "model_revision_commit", "input_source", "theta", "theta_ci95_lo",
                   "theta_ci95_hi",
                   "predicted_ms", "predicted_ci95_lo", "predicted_ci95_hi", "measured_ms", "measured_ci95_lo",
                   "measured_ci95_hi", "measured_population", "tau_ms", "n_pairs", "n_units", "n_steps", "ratio",
                   "ratio_ci90_lo", "ratio_ci90_hi", "p_confirm", "p_confirm_holm", "p_refute", "p_refute_holm",
                   "family_size", "verdict", "measured_se_ms", "measured_df", "predicted_se_ms", "predicted_df",
                   "holm_note", "reason", "largest_missing",
                   "largest_missing_ms", "corrected_formula", "corrected_ms", "corrected_ci95_lo",
                   "corrected_ci95_hi", "corrected_ratio", "corrected_verdict", "published_formula", "published_ms",
                   "published_ci95_lo", "published_ci95_hi", "published_ratio", "published_ratio_ci90_lo",
                   "published_ratio_ci90_hi", "published_verdict", "published_se_ms", "published_df", "terms", "inputs",
                   "gpu_name", "file"]


def verdicts(profiles: str | None = None, include_incomplete_comparisons=False, **discover_kw) -> pd.DataFrame:
    """One row per comparison whose `savings_model` has a verdict (`VERDICT_COLUMNS`; `workbench verdicts`
    writes them after a traced run): the model's formula, predicted ms with its 95% CI (delta method over the traced
    steps), the measured paired saving (baseline - arm, mean over the engine's pairs) with its 95% CI and n pairs,
    measured / predicted with its 90% CI, the p-values raw and Holm-adjusted within the verdict's family, the verdict
    ("confirmed" | "refuted" | "inconclusive" | "no verdict: instrument" | "no trace" | "not modelled" | "input check
    failed"; `workbench.savings.verdicts` states the rule) and its reason; the model revision with its commit, the
    input source (traced / dose-response / calibrated, with θ and its CI) and the measured saving's unit
    (`measured_population`: within this run, single run + tau, or a rerun over processes; `tau_ms` the process
    component added); for a refuted model the largest component it lacks and the corrected model's prediction and
    verdict; where the model extends a published form (offload: the first reload's term), that form's prediction and
    verdict on the same data (`published_*`). `inputs` and `terms` are JSON strings ({name: {value, source}}, {term: ms})."""
    rows = []
    for r, comps in _included(profiles, include_incomplete_comparisons=include_incomplete_comparisons,
                              **discover_kw):
        for c in comps:
            sm = c.get("savings_model") or {}
            if not sm.get("verdict"):
                continue
            rows.append({**_ctx(r, c), **verdict_columns(sm),
                         "gpu_name": r["gpu_name"] or r["device"], "file": os.path.join(r["folder"], "summary.json")})
    return _frame(rows, VERDICT_COLUMNS, ("layers", "tokens", "predicted_ms", "predicted_ci95_lo", "predicted_ci95_hi",
                                          "measured_ms", "measured_ci95_lo", "measured_ci95_hi", "ratio",
                                          "largest_missing_ms", "corrected_ms", "corrected_ci95_lo",
                                          "corrected_ci95_hi", "corrected_ratio", "published_ms",
                                          "published_ci95_lo", "published_ci95_hi", "published_ratio", "n_units",
                                          "ratio_ci90_lo", "ratio_ci90_hi", "p_confirm", "p_confirm_holm",
                                          "p_refute", "p_refute_holm", "theta", "theta_ci95_lo", "theta_ci95_hi",
                                          "tau_ms", "published_ratio_ci90_lo",
                                          "published_ratio_ci90_hi", "published_se_ms", "published_df"))


def verdict_columns(sm: dict) -> dict:
    """The verdict columns of one comparison's `savings_model` dict (`verdicts`' rows, less the run's context)."""
    plo, phi = _lohi(sm.get("predicted_ci95"))
    mlo, mhi = _lohi(sm.get("measured_ci95"))
    corr, miss = sm.get("corrected") or {}, sm.get("largest_missing") or {}
    clo, chi = _lohi(corr.get("predicted_ci95"))
    pub = sm.get("published") or {}
    pblo, pbhi = _lohi(pub.get("predicted_ci95"))
    return {"formula": sm.get("formula"), "predicted_ms": sm.get("predicted_ms"),
            "predicted_ci95_lo": plo, "predicted_ci95_hi": phi, "measured_ms": sm.get("measured_ms"),
            "measured_ci95_lo": mlo, "measured_ci95_hi": mhi, "n_pairs": sm.get("measured_n_pairs"),
            "n_units": sm.get("measured_n_units"), "n_steps": sm.get("n_steps"),
            "measured_population": sm.get("measured_population"), "tau_ms": sm.get("tau_ms"),
            "model_revision": sm.get("model_revision"),
            "model_revision_commit": sm.get("model_revision_commit"),
            "input_source": sm.get("input_source"), "theta": sm.get("theta"),
            "theta_ci95_lo": _lohi(sm.get("theta_ci95"))[0], "theta_ci95_hi": _lohi(sm.get("theta_ci95"))[1],
            "ratio": sm.get("ratio"),
            "ratio_ci90_lo": _lohi(sm.get("ratio_ci90"))[0], "ratio_ci90_hi": _lohi(sm.get("ratio_ci90"))[1],
            "p_confirm": sm.get("p_confirm"), "p_confirm_holm": sm.get("p_confirm_holm"),
            "p_refute": sm.get("p_refute"), "p_refute_holm": sm.get("p_refute_holm"),
            "family_size": sm.get("family_size"), "verdict": sm.get("verdict"), "measured_se_ms": sm.get("measured_se_ms"),
            "measured_df": sm.get("measured_df"), "predicted_se_ms": sm.get("predicted_se_ms"),
            "predicted_df": sm.get("predicted_df"),
            "holm_note": sm.get("holm_note"),
            "reason": sm.get("reason"), "largest_missing": miss.get("component"),
            "largest_missing_ms": miss.get("saved_ms"), "corrected_formula": corr.get("formula"),
            "corrected_ms": corr.get("predicted_ms"), "corrected_ci95_lo": clo, "corrected_ci95_hi": chi,
            "corrected_ratio": corr.get("ratio"), "corrected_verdict": corr.get("verdict"),
            "published_formula": pub.get("formula"), "published_ms": pub.get("predicted_ms"),
            "published_ci95_lo": pblo, "published_ci95_hi": pbhi, "published_ratio": pub.get("ratio"),
            "published_ratio_ci90_lo": _lohi(pub.get("ratio_ci90"))[0],
            "published_ratio_ci90_hi": _lohi(pub.get("ratio_ci90"))[1],
            "published_verdict": pub.get("verdict"), "published_se_ms": pub.get("predicted_se_ms"),
            "published_df": pub.get("predicted_df"),
            "terms": json.dumps(sm.get("terms") or {}, default=str, sort_keys=True),
            "inputs": json.dumps(sm.get("inputs") or {}, default=str, sort_keys=True)}


DECOMPOSITION_COLUMNS = ["folder", "comparison", "opt", "model", "layers", "tokens", "attn", "baseline", "arm",
                         "component", "group", "baseline_ms", "arm_ms", "saved_ms", "file"]


def decomposition(profiles: str | None = None, include_incomplete_comparisons=False, **discover_kw) -> pd.DataFrame:
    """The rows of each comparison's `decomposition` (`DECOMPOSITION_COLUMNS`): per component (busy kernel classes,
    idle causes, `step_ms`, `residual_ms` = measured - traced), the baseline's and the arm's ms per traced step and
    the saving (baseline - arm)."""
    rows = []
    for r, comps in _included(profiles, include_incomplete_comparisons=include_incomplete_comparisons,
                              **discover_kw):
        for c in comps:
            for d in c.get("decomposition") or []:
                rows.append({**_ctx(r, c), **{k: d.get(k) for k in ("component", "group", "baseline_ms", "arm_ms",
                                                                      "saved_ms")},
                             "file": os.path.join(r["folder"], "summary.json")})
    return _frame(rows, DECOMPOSITION_COLUMNS, ("baseline_ms", "arm_ms", "saved_ms"))


VERDICT_TABLE_COLUMNS = ["comparison", "run", "model", "layers", "tokens", "attn", "predicted ms [95% CI]",
                         "measured ms [95% CI]", "pairs (reps)", "measured / predicted [90% CI]", "verdict", "why"]


def verdict_table(v: pd.DataFrame) -> pd.DataFrame:
    """`verdicts(...)` as a reader reads it, one row per model and configuration (`VERDICT_TABLE_COLUMNS`): the
    predicted and measured saving with their CIs, the pairs (reps), the ratio with its 90% CI, the verdict, and why
    (the reason a verdict could not be given, or the Holm note of one decided alone), each as text."""
    def ci(x, lo, hi, unit=""):
        return "-" if x is None or x != x else (f"{x:.2f}" + (f" [{lo:.2f}, {hi:.2f}]" if lo == lo and lo is not None
                                                              else "") + unit)

    rows = []
    for r in v.to_dict("records"):
        why = "; ".join(str(r[k]) for k in ("reason", "holm_note") if isinstance(r.get(k), str))
        rows.append({"comparison": r["comparison"], "run": str(r["folder"]).split("profiles/", 1)[-1], "model": r["model"],
                     "layers": _int(r["layers"]), "tokens": _int(r["tokens"]), "attn": r["attn"],
                     "predicted ms [95% CI]": ci(r["predicted_ms"], r["predicted_ci95_lo"], r["predicted_ci95_hi"]),
                     "measured ms [95% CI]": ci(r["measured_ms"], r["measured_ci95_lo"], r["measured_ci95_hi"]),
                     "pairs (reps)": f"{_int(r['n_pairs'])}" + (f" ({_int(r['n_units'])})" if r["n_units"] == r["n_units"]
                                                               and r["n_units"] is not None else ""),
                     "measured / predicted [90% CI]": ci(r["ratio"], r["ratio_ci90_lo"], r["ratio_ci90_hi"]),
                     "verdict": judging.shown_verdict(r), "why": why})
    return pd.DataFrame(rows, columns=VERDICT_TABLE_COLUMNS)


def _int(x) -> str:
    return "-" if x is None or x != x else f"{float(x):.0f}"
