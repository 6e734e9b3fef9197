"""Savings models confirmed, refuted or left inconclusive: predicted ± uncertainty from in-situ trace inputs, against
the engine's paired measured saving (the rep as the unit), with the step-time decomposition that says which term a
refuted model lacks.

    python -m workbench.verdicts RUN_DIR [RUN_DIR ...]     # fills each traced comparison of summary.json

Per comparison of a run folder whose baseline and optimized arms were traced (`--trace torch|nsys`):

- `decomposition`: `workbench.traces.decompose.compare` of the two arms' traces (components' ms per step, saving
  per component, the traced step difference and the residual against the measured one);
- `breakdown`: each traced arm's components and top kernels;
- `savings_model`: the model, its inputs with their source, predicted ± CI, measured ± CI, measured / predicted with
  its 90% CI, the verdict (confirmed / refuted / inconclusive) with its p-values, and for a refuted model the
  largest component it lacks and the exploratory corrected model (the model plus that component's traced saving).

Models: each optimization's savings module (its SPEC's `savings`, `workbench.savings.common` states the contract:
`workbench/opts/<name>_savings.py`) builds its model from in-situ inputs, per traced step, so their spread across
steps gives the uncertainty; its docstring states the formula and where each input comes from.

Uncertainty: the prediction is f(mean of the per-step inputs), its se by the delta method (`stats.delta_method`,
n-1 df over the traced steps). Measured: the mean paired saving baseline - arm over every (rep, step) pair, the rep
as the unit (per rep the mean difference, t over reps: `stats.paired_difference`, se and R-1 df). Traced-vs-timed
bias: the inputs come from a traced pass, the saving from timed steps; `bias_rel` = |traced / timed - 1| of the
baseline's step (traced: the mean `wb/step` window of its trace; timed: its mean timed step) is taken as a relative
SD of the prediction.

Verdict (BAND = [0.8, 1.25], CONFIDENCE_MODEL = 90%): with m the measured saving, p the prediction,
- m > 0 and p > 0: x = log(m / p), sd = sqrt((se_m / m)^2 + (se_p / p)^2 + bias_rel^2), t with the
  Welch-Satterthwaite df of the three (measured R-1, predicted n_steps-1, bias as known); the 90% CI of
  measured / predicted is exp(x ± t_{0.95} sd);
- otherwise (m <= 0 or p <= 0): the two differences m - 0.8p and m - 1.25p, each with its se
  sqrt(se_m^2 + k^2 (se_p^2 + (bias_rel p)^2)), k = 0.8, 1.25, and its Welch-Satterthwaite df;
- p_confirm = the larger of the two one-sided p-values against the band's edges (TOST); p_refute = the one-sided
  p-value that the ratio lies beyond the band's edge on the estimate's side;
- Holm (`stats.holm`) adjusts p_confirm and p_refute within each family of model verdicts: the verdicts of one run
  folder's comparisons, an L sweep's points (one family per sweep), and the published forms (a family of their own);
- `confirmed` when the adjusted p_confirm <= 0.05 (the 90% CI inside the band, for a family of one); `refuted`
  when the adjusted p_refute <= 0.05 (the CI entirely outside); else `inconclusive`, with `reps_to_decide`: about
  how many more reps would decide, from the observed variance (the measured se falls as 1/sqrt(reps), the
  prediction's and the bias's parts do not), or "more reps cannot decide" when even a measured se of 0 leaves the
  CI across an edge of the band. Raw and adjusted p-values are kept (`p_confirm`, `p_confirm_holm`, ...).

A refuted model's missing part: the largest of the decomposition's components outside the model, the model's own
components' traced saving beyond its prediction, and the residual (measured - traced). The corrected model (the
model plus that part) is chosen after seeing the data: it is `exploratory`, never confirmed ("exploratory:
consistent" / "exploratory: refuted" / "exploratory: inconclusive"), until a new run tests it.
"""
from __future__ import annotations

import argparse
import math
import os
import sys

import pandas as pd

from workbench.savings import common as savings
from workbench.measure import stats
from workbench.traces import decompose

BAND = (0.8, 1.25)
"""measured / predicted inside this band (90% CI): the model holds; its CI entirely outside: it does not."""
CONFIDENCE_MODEL = 0.90
"""The model verdict's interval: 90% two-sided, i.e. two one-sided tests at ALPHA (TOST)."""
ALPHA = (1 - CONFIDENCE_MODEL) / 2
"""Each one-sided test's level (and the Holm-adjusted p a verdict needs): 0.05."""
CANNOT_DECIDE = "more reps cannot decide: the prediction's own uncertainty spans the band"
FORMULAS = {o: savings.formula(o) for o in savings.modelled()}
"""{opt: its model's formula}, from each optimization's savings module (the registry's order)."""
MODEL_TERMS = {o: savings.model_terms(o) for o in savings.modelled()}
"""{opt: the decomposition components its model accounts for}."""


# --- verdict --------------------------------------------------------------------------------------------------

def _ratio_test(m, se_m, df_m, p, se_p, df_p, bias_rel):
    """`stats.band_ratio_test` against BAND at ALPHA per side (the 90% CI)."""
    return stats.band_ratio_test(m, se_m, df_m, p, se_p, df_p, bias_rel, band=BAND, alpha=ALPHA)


def _outcome(p_confirm, p_refute) -> str:
    if p_confirm is not None and p_confirm <= ALPHA:
        return "confirmed"
    if p_refute is not None and p_refute <= ALPHA:
        return "refuted"
    return "inconclusive"


def reps_to_decide(m, se_m, n_units, p, se_p, df_p, bias_rel, max_reps: int = 10_000) -> dict:
    """About how many more reps would decide an inconclusive verdict, from the observed variance: the measured se
    scales as 1/sqrt(reps) (df reps - 1), the prediction's and the bias's parts do not, and the estimate is taken to
    stay where it is. {"reps_to_decide": N more reps or None, "would_read": confirmed / refuted, "note"}."""
    if not n_units or se_m is None:
        return {"reps_to_decide": None, "would_read": None, "note": "no measured se: run at least 2 reps"}
    R = int(n_units)

    def decides(r):
        se = float(se_m) * math.sqrt(R / r) if math.isfinite(r) else 0.0
        *_, pc, pr = _ratio_test(m, se, (r - 1) if math.isfinite(r) else None, p, se_p, df_p, bias_rel)
        return _outcome(pc, pr)

    if decides(math.inf) == "inconclusive":
        return {"reps_to_decide": None, "would_read": None, "note": CANNOT_DECIDE}
    lo, hi = R, R
    while decides(hi) == "inconclusive":
        lo, hi = hi, hi * 2
        if hi > max_reps:
            return {"reps_to_decide": None, "would_read": decides(math.inf),
                    "note": f"more than {max_reps - R} more reps (the estimate sits near the band's edge)"}
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if decides(mid) != "inconclusive" else (mid, hi)
    would = decides(hi)
    return {"reps_to_decide": hi - R, "would_read": would,
            "note": f"about {hi - R} more reps ({hi} in all) would decide ({would}, if the estimate stays)"}


def judge(predicted: float, predicted_se: float | None, measured: float, measured_se: float | None,
          measured_df: float | None, *, predicted_df: float | None = None, bias_rel: float = 0.0,
          n_units: int | None = None) -> dict:
    """The verdict of one model on one comparison, before the family's Holm adjustment (`holm_family`).

    Returns {"ratio", "ratio_ci90", "form" (log / linear), "df" (Welch-Satterthwaite), "p_confirm" (TOST: the larger
    of the two one-sided p-values against the band's edges), "p_refute" (one-sided, on the estimate's side of the
    band), "verdict" (confirmed / refuted / inconclusive from the raw p-values), and for an inconclusive one
    "reps_to_decide", "would_read", "decide_note"}."""
    ratio = measured / predicted if predicted else None
    if measured is None or predicted is None or measured != measured or predicted != predicted:
        return {"ratio": ratio, "ratio_ci90": None, "verdict": "inconclusive", "p_confirm": None, "p_refute": None}
    form, _, _, df, ci, pc, pr = _ratio_test(measured, measured_se, measured_df, predicted, predicted_se,
                                             predicted_df, bias_rel)
    out = {"ratio": ratio, "ratio_ci90": ci, "form": form, "df": df if math.isfinite(df) else None,
           "p_confirm": pc, "p_refute": pr, "verdict": _outcome(pc, pr)}
    if out["verdict"] == "inconclusive":
        d = reps_to_decide(measured, measured_se, n_units, predicted, predicted_se, predicted_df, bias_rel)
        out.update(reps_to_decide=d["reps_to_decide"], would_read=d["would_read"], decide_note=d["note"])
    return out


def holm_family(judged: list[dict]) -> list[dict]:
    """Holm within one family of model verdicts (dicts of `judge`, updated in place and returned): p_confirm and
    p_refute are each adjusted over the family (`stats.holm`; `*_holm` keys), and the verdict reads confirmed /
    refuted only where the adjusted p is <= ALPHA, else inconclusive (with its reps_to_decide where it was decided
    before the adjustment: `decide_note` says so)."""
    pcs = stats.holm([j.get("p_confirm") for j in judged])
    prs = stats.holm([j.get("p_refute") for j in judged])
    for j, pc, pr in zip(judged, pcs, prs):
        j["p_confirm_holm"], j["p_refute_holm"] = pc, pr
        raw = j.get("verdict")
        j["verdict"] = _outcome(pc, pr)
        j["family_size"] = len(judged)
        if raw in ("confirmed", "refuted") and j["verdict"] == "inconclusive":
            j["decide_note"] = (f"{raw} alone (p = {j['p_confirm' if raw == 'confirmed' else 'p_refute']:.3f}), "
                                f"not after Holm over the {len(judged)} model verdicts of its family")
    return judged


def exploratory(v: str) -> str:
    """A verdict of a model chosen after seeing the data: never "confirmed" (consistent / refuted / inconclusive)."""
    return "exploratory: " + {"confirmed": "consistent"}.get(v, v)


def bias_rel(traced_step_ms: float | None, timed_step_ms: float | None) -> float:
    """|traced / timed - 1| of the baseline's step: how far the traced pass the inputs come from is from the timed
    steps the measured saving comes from, taken as a relative SD on the prediction (0 when either is unknown)."""
    if not traced_step_ms or not timed_step_ms:
        return 0.0
    return abs(float(traced_step_ms) / float(timed_step_ms) - 1.0)


def check(opt: str, model: dict, measured: dict, decomposition: pd.DataFrame | None, *,
          bias: float = 0.0, alone: bool = True) -> dict:
    """The verdict of `model` (a *_model dict) against `measured` (`stats.paired_difference`: mean, se, df at the
    rep level); for a model read refuted, the largest traced component it lacks and the corrected model (model +
    that component's saving), labelled exploratory (chosen after the fact: it never reads confirmed). `alone`: the
    model is a family of its own (Holm changes nothing) and the verdict is final; False: `finalize` applies Holm
    over its family (what `annotate` does) and adds the corrected model."""
    df_p = (model.get("n_steps") - 1) if model.get("n_steps") and model["n_steps"] > 1 else None
    kw = dict(predicted_df=df_p, bias_rel=bias, n_units=measured.get("n_units"))
    j = judge(model["predicted_ms"], model.get("predicted_se_ms"), measured["mean"], measured.get("se"),
              measured.get("df"), **kw)
    out = {**model, "measured_ms": measured["mean"], "measured_ci95": measured.get("ci95"),
           "measured_se_ms": measured.get("se"), "measured_df": measured.get("df"),
           "measured_n_pairs": measured.get("n_pairs"), "measured_n_units": measured.get("n_units"),
           "bias_rel": bias, **j}
    if model.get("published"):  # the article's form of the model, judged on the same data (its own family)
        pub = model["published"]
        pj = judge(pub["predicted_ms"], pub.get("predicted_se_ms"), measured["mean"], measured.get("se"),
                   measured.get("df"), **kw)
        out["published"] = {**pub, "bias_rel": bias, **pj}
    if decomposition is not None and len(decomposition):
        d = decomposition.set_index("component")["saved_ms"]
        terms = savings.model_terms(opt)
        lacking = {c: float(d[c]) for c in decompose.COMPONENTS if c in d and c not in terms}
        own = [c for c in terms if c in d]
        if own:  # what the model's own components saved in the traces beyond what it predicts
            lacking[f"{'+'.join(own)} beyond the model"] = float(sum(d[c] for c in own)) - model["predicted_ms"]
        if "residual_ms" in d:
            lacking["residual (measured - traced)"] = float(d["residual_ms"])
        if lacking:
            name = max(lacking, key=lambda k: abs(lacking[k]))
            out["largest_missing"] = {"component": name, "saved_ms": lacking[name]}
            out["_corrected_candidate"] = None if name.startswith("residual") else (name, lacking[name])
    if alone:
        finalize([out], [measured])
    return out


def _correct(out: dict, measured: dict) -> None:
    """The exploratory corrected model of a refuted one (in place): the model plus its largest missing component."""
    cand = out.pop("_corrected_candidate", None)
    if out.get("verdict") != "refuted" or not cand:
        return
    name, ms = cand
    p2 = out["predicted_ms"] + ms
    h = None if out.get("predicted_ci95") is None else (out["predicted_ci95"][1] - out["predicted_ci95"][0]) / 2
    df_p = (out.get("n_steps") - 1) if out.get("n_steps") and out["n_steps"] > 1 else None
    j = judge(p2, out.get("predicted_se_ms"), measured["mean"], measured.get("se"), measured.get("df"),
              predicted_df=df_p, bias_rel=out.get("bias_rel") or 0.0, n_units=measured.get("n_units"))
    out["corrected"] = {"formula": f"{out['formula']} + saved {name}", "predicted_ms": p2,
                        "predicted_ci95": None if h is None else [p2 - h, p2 + h],
                        "predicted_se_ms": out.get("predicted_se_ms"), **j, "raw_verdict": j["verdict"],
                        "verdict": exploratory(j["verdict"]), "exploratory": True,
                        "why": "the component was chosen after seeing the data (the largest of ~10): a new run "
                               "must confirm it"}


def finalize(models: list[dict], measured: list[dict]) -> None:
    """Holm over one family of model verdicts (the `check` dicts of one run folder, or of one L sweep), then over
    the published forms among them (their own family), then the exploratory corrected model of each one refuted."""
    holm_family(models)
    pubs = [m["published"] for m in models if m.get("published")]
    if pubs:
        holm_family(pubs)
    for m, meas in zip(models, measured):
        _correct(m, meas)


# --- a run folder ---------------------------------------------------------------------------------------------

def _events(run_dir: str, cmp_name: str, arm: str) -> pd.DataFrame | None:
    from workbench.traces.events import events_path, load_events
    path = events_path(run_dir, cmp_name, arm)
    return load_events(path) if path else None


def measured_saving(results: pd.DataFrame, cmp_name: str, baseline: str, arm: str) -> dict:
    """The engine's paired saving (baseline - arm step ms) of a comparison: every pair, the rep as the unit."""
    from workbench.measure import engine
    from workbench.measure.results import engine_step_rows
    r = engine_step_rows(results[results["comparison"] == cmp_name])
    samples = [dict(arm=x.arm, rep=int(x.rep), step=int(x.step), batch=int(x.batch) if x.batch == x.batch else 0,
                    step_ms=float(x.value)) for x in r.itertuples()]
    b, o, reps = engine.pairs(samples, baseline, arm)
    return stats.paired_difference(b, o, reps)


def _arms(c: dict) -> dict:
    return {a["arm"]: a for a in [c.get("baseline"), c.get("optimized"), *(c.get("others") or [])] if a}


def comparison_verdict(run_dir: str, c: dict, results: pd.DataFrame, meta: dict) -> dict:
    """decomposition, breakdown and savings_model of one comparison dict of summary.json (updated in place)."""
    base = (c.get("baseline") or {}).get("arm")
    opt_arm = (c.get("optimized") or {}).get("arm")
    name, opt = c.get("name"), c.get("opt")
    mod = savings.module(opt)
    sm = {"formula": mod.FORMULA if mod else "the sum of the optimizations' models"}
    if not base or not opt_arm or str(name).startswith(("nvtx:", "aa:")) or opt_arm == base:
        return c
    measured = measured_saving(results, name, base, opt_arm)
    sm.update(measured_ms=measured["mean"], measured_ci95=measured["ci95"], measured_n_pairs=measured["n_pairs"])
    ev = {a: _events(run_dir, name, a) for a in _arms(c)}
    traced = {a: e for a, e in ev.items() if e is not None and (e["kind"] == "kernel").any()}
    if base in traced:
        from workbench.traces.levers import levers
        c["breakdown"] = {}
        for a, e in traced.items():
            comps = decompose.summary(e).to_dict("records")
            top = decompose.top_kernels(e, 8).to_dict("records")
            c["breakdown"][a] = {"components": comps, "top_kernels": top,
                                 "levers": levers(comps, attention_flops=_arms(c).get(a, {}).get("attention_flops"),
                                                  top_kernels=top)}
    decomp = None
    if base in traced and opt_arm in traced:
        decomp = decompose.compare(traced[base], traced[opt_arm], measured_ms=measured["mean"])
        c["decomposition"] = decomp.to_dict("records")
    if mod is None:
        sm.update(verdict="not modelled", reason="optimizations together are judged through each one's model on its "
                                                 "own comparison")
        c["savings_model"] = sm
        return c
    if any({"baseline": base, "arm": opt_arm}[a] not in traced for a in mod.TRACED_ARMS):
        why = ("the traces hold no GPU events (a CPU run): the model's inputs are GPU idle and kernel times"
               if any(e is not None for e in ev.values()) else
               "the model's inputs come from traces: run with --trace torch or nsys")
        sm.update(verdict="no trace", reason=why)
        c["savings_model"] = sm
        return c
    try:
        model = mod.from_run(traced, c, meta, baseline=base, arm=opt_arm)
    except savings.InputCheckFailed as e:
        sm.update(verdict="input check failed", reason=str(e))
        c["savings_model"] = sm
        return c
    traced_ms = next((x["ms"] for x in c["breakdown"][base]["components"] if x["component"] == "step_ms"), None)
    timed_ms = _arms(c)[base].get("step_ms_mean") or _mean_step(results, name, base)
    sm.update(check(opt, model, measured, decomp, bias=bias_rel(traced_ms, timed_ms), alone=False),
              traced_step_ms=traced_ms, timed_step_ms=timed_ms)
    sm["_measured"] = measured  # for `finalize` (dropped before writing)
    c["savings_model"] = sm
    return c


def _mean_step(results: pd.DataFrame, cmp_name: str, arm: str) -> float | None:
    r = results[(results["comparison"] == cmp_name) & (results["arm"] == arm) & (results["metric"] == "step_ms")]
    return float(r["value"].mean()) if len(r) else None


def family_of(cmp_name: str) -> str:
    """The family a comparison's model verdict belongs to within its run folder: an L sweep's points are one family
    (the name before '@'), the folder's other comparisons another."""
    return str(cmp_name).split("@")[0] if "@" in str(cmp_name) else ""


def annotate(run_dir: str) -> list[dict]:
    """Fill every comparison of `run_dir`/summary.json (decomposition, breakdown, savings_model with a verdict);
    rewrite summary.json; return the verdict rows (`rows`)."""
    from workbench.measure.results import atomic_write_json, git_sha, load_run
    results, summary, meta = load_run(run_dir)
    if not summary:
        raise FileNotFoundError(f"{run_dir}: no summary.json")
    for c in summary.get("comparisons", []):
        if c.get("baseline") is not None:
            comparison_verdict(run_dir, c, results, meta)
    fams: dict = {}
    for c in summary.get("comparisons", []):
        sm = c.get("savings_model") or {}
        if "_measured" in sm:
            fams.setdefault(family_of(c.get("name")), []).append(sm)
    for sms in fams.values():
        finalize(sms, [sm.pop("_measured") for sm in sms])
    summary["verdicts"] = {"by": "python -m workbench.verdicts", "git_sha": git_sha()}
    atomic_write_json(os.path.join(run_dir, "summary.json"), summary)
    return rows(summary, run_dir)


def rows(summary: dict, folder: str = "") -> list[dict]:
    """One verdict row per comparison with a savings model: comparison, model, layers, tokens, formula, predicted
    [CI], measured [CI], ratio with its 90% CI, p-values (raw and Holm), verdict, reps to decide, largest missing
    component, the exploratory corrected verdict and the published form's verdict."""
    out = []
    for c in summary.get("comparisons", []):
        sm = c.get("savings_model") or {}
        if "verdict" not in sm:
            continue
        corr = sm.get("corrected") or {}
        miss = sm.get("largest_missing") or {}
        out.append({"folder": folder, "comparison": c.get("name"), "opt": c.get("opt"), "model": c.get("model"),
                    "layers": c.get("layers"), "tokens": c.get("tokens"), "formula": sm.get("formula"),
                    "predicted_ms": sm.get("predicted_ms"), "predicted_ci95": sm.get("predicted_ci95"),
                    "measured_ms": sm.get("measured_ms"), "measured_ci95": sm.get("measured_ci95"),
                    "ratio": sm.get("ratio"), "ratio_ci90": sm.get("ratio_ci90"), "bias_rel": sm.get("bias_rel"),
                    "p_confirm": sm.get("p_confirm"), "p_confirm_holm": sm.get("p_confirm_holm"),
                    "p_refute": sm.get("p_refute"), "p_refute_holm": sm.get("p_refute_holm"),
                    "verdict": sm.get("verdict"), "reps_to_decide": sm.get("reps_to_decide"),
                    "decide_note": sm.get("decide_note"), "reason": sm.get("reason"),
                    "largest_missing": miss.get("component"), "largest_missing_ms": miss.get("saved_ms"),
                    "corrected_ms": corr.get("predicted_ms"), "corrected_verdict": corr.get("verdict"),
                    "published_ms": (sm.get("published") or {}).get("predicted_ms"),
                    "published_verdict": (sm.get("published") or {}).get("verdict")})
    return out


def _fmt_ci(ci) -> str:
    return f"[{ci[0]:.2f}, {ci[1]:.2f}]" if ci else ""


def fmt_ms(v, ci=None) -> str:
    """`12.34 [10.00, 14.00] ms`, or `-`."""
    if v is None or v != v:
        return "-"
    return f"{v:.2f} {_fmt_ci(ci)} ms".replace("  ", " ")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m workbench.verdicts", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run folders written by python -m workbench.ab")
    a = p.parse_args(argv)
    all_rows, failed = [], []
    for d in a.runs:
        if not os.path.isfile(os.path.join(d, "summary.json")):
            print(f"error: {d}: no summary.json (not a run folder of python -m workbench.ab)", file=sys.stderr)
            return 2
        rs = annotate(d)
        all_rows += rs
        failed += [f"{d}: {r['comparison']}: {r['reason']}" for r in rs if r["verdict"] == "input check failed"]
    if all_rows:
        t = pd.DataFrame(all_rows)
        t["predicted"] = [f"{p:.2f} {_fmt_ci(ci)}" if p is not None and p == p else "-"
                          for p, ci in zip(t["predicted_ms"], t["predicted_ci95"])]
        t["measured"] = [f"{m:.2f} {_fmt_ci(ci)}" if m is not None else "-"
                         for m, ci in zip(t["measured_ms"], t["measured_ci95"])]
        t["published"] = [f"{p:.2f}: {v}" if isinstance(v, str) else "-"
                          for p, v in zip(t["published_ms"], t["published_verdict"])]
        t["ratio 90% CI"] = [_fmt_ci(ci) or "-" for ci in t["ratio_ci90"]]
        cols = ["comparison", "model", "predicted", "measured", "ratio", "ratio 90% CI", "verdict", "published",
                "largest_missing"]
        print(t[cols].to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    for f in failed:
        print(f"INPUT CHECK FAILED: {f}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
