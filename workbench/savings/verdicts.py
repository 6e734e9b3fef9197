"""Savings models confirmed, refuted or left inconclusive: predicted ± uncertainty from in-situ trace inputs, against
the engine's paired measured saving (the rep as the unit), with the step-time decomposition that says which term a
refuted model lacks.

    workbench verdicts RUN_DIR [RUN_DIR ...]     # the command: `workbench.savings.verdicts_cli`

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
n-1 df over the traced steps). Measured, at the unit of the claim (`measured_population`):
- a `--processes K` run folder (processes.json; `workbench.savings.process_verdicts`): the mean over processes of
  each process's mean paired saving, a t-interval over processes (K-1 df: `replication.process_saving`);
- a single run: the mean paired saving baseline - arm over every (rep, step) pair with the rep as the unit
  (`stats.paired_difference`: "within this run"), widened by the comparison's process component tau from a
  replication campaign (`--tau-from`, default `calibration.TAU_SOURCE`; `replication.with_process_component`):
  "single run + tau from FILE". A comparison the campaign did not measure stays "within this run", said so.

The instrument (`workbench.savings.calibration`):
- precondition, fixed before the runs it judges: each judged arm's traced step (the mean `wb/step` window of its
  trace) lies within `calibration.INSTRUMENT_TOL` (15%) of its timed step, else the verdict is "no verdict:
  instrument" with both numbers (no p-values, outside every Holm family);
- θ, the instrument's factor on the model's traced input (`--calibration FILE`, from a dose-response analysis):
  the prediction is p·θ, and θ's 95% CI enters as a shift with its own interval, never in quadrature
  (`stats.band_ratio_test`: Berger-Boos p-values at θ's worse end + 0.025; the ratio's 95% CI divided end point by
  end point by θ's CI). No entry: the input is used as traced. Each row says which (`input_source`: traced,
  dose-response or calibrated) and names the model revision with its commit (`savings.model_revision`).

Verdict (BAND = [0.8, 1.25], CONFIDENCE_MODEL = 90%): with m the measured saving, p the prediction (p·θ),
- m > 0 and p > 0: x = log(m / p), sd = sqrt((se_m / m)^2 + (se_p / p)^2), t with the Welch-Satterthwaite df of
  the two (measured, predicted n_steps-1); the 90% CI of measured / predicted is exp(x ± t_{0.95} sd);
- otherwise (m <= 0 or p <= 0): the two differences m - 0.8p and m - 1.25p, each with its se
  sqrt(se_m^2 + k^2 se_p^2), k = 0.8, 1.25, and its Welch-Satterthwaite df;
- p_confirm = the larger of the two one-sided p-values against the band's edges (TOST); p_refute = the one-sided
  p-value that the ratio lies beyond the band's edge on the estimate's side;
- Holm (`stats.holm`) adjusts p_confirm and p_refute within each family of model verdicts: a run folder's
  comparisons, or an L sweep's points (one family per sweep), the published forms in the same family as the models
  (a model and its published form are two claims about one saving);
- `confirmed` when the adjusted p_confirm <= 0.05 (the 90% CI inside the band, for a family of one); `refuted`
  when the adjusted p_refute <= 0.05 (the CI entirely outside); else `inconclusive`, with the CI only (no "N more
  reps would decide": no sequential rule backs one). Raw and adjusted p-values are kept (`p_confirm`,
  `p_confirm_holm`, ...).

A refuted model's missing part: the largest of the decomposition's components outside the model, the model's own
components' traced saving beyond its prediction, and the residual (measured - traced). The corrected model (the
model plus that part) is chosen after seeing the data: it is `exploratory`, never confirmed ("exploratory:
consistent" / "exploratory: refuted" / "exploratory: inconclusive"), until a new run tests it.
"""
from __future__ import annotations

import math
import os

import pandas as pd

from workbench.savings import calibration, common as savings, untraced
from workbench.measure import replication, stats
from workbench.measure.results import comparison_arms
from workbench.traces import decompose

BAND = (0.8, 1.25)
"""measured / predicted inside this band (90% CI): the model holds; its CI entirely outside: it does not."""
CONFIDENCE_MODEL = 0.90
"""The model verdict's interval: 90% two-sided, i.e. two one-sided tests at ALPHA (TOST)."""
ALPHA = (1 - CONFIDENCE_MODEL) / 2
"""Each one-sided test's level (and the Holm-adjusted p a verdict needs): 0.05."""
FORMULAS = {o: savings.formula(o) for o in savings.modelled()}
"""{opt: its model's formula}, from each optimization's savings module (the registry's order)."""
MODEL_TERMS = {o: savings.model_terms(o) for o in savings.modelled()}
"""{opt: the decomposition components its model accounts for}."""


# --- verdict --------------------------------------------------------------------------------------------------

def _ratio_test(m, se_m, df_m, p, se_p, df_p, theta_ci=None):
    """`stats.band_ratio_test` against BAND at ALPHA per side (the 90% CI), θ's CI (None: as traced)."""
    return stats.band_ratio_test(m, se_m, df_m, p, se_p, df_p, theta_ci=theta_ci, band=BAND, alpha=ALPHA)


def family_size(row: dict) -> int:
    """The size of a verdict row's Holm family (at least 1): what a reading beside it (`across_runs`) or a plan for
    its next run (`plan`) divides ALPHA by (Bonferroni: no weaker than the family's Holm)."""
    return max(1, int(row.get("family_size") or 1))


def _outcome(p_confirm, p_refute) -> str:
    if p_confirm is not None and p_confirm <= ALPHA:
        return "confirmed"
    if p_refute is not None and p_refute <= ALPHA:
        return "refuted"
    return "inconclusive"


def judge(predicted: float, predicted_se: float | None, measured: float, measured_se: float | None,
          measured_df: float | None, *, predicted_df: float | None = None, theta: dict | None = None) -> dict:
    """The verdict of one model on one comparison, before the family's Holm adjustment (`holm_family`).

    `predicted` is the model on its traced inputs; `theta` a calibration entry ({"theta", "ci95", ...}:
    `calibration.read_calibration`) or None (the input as traced). Returns {"ratio" (measured / (predicted·θ)),
    "ratio_ci90", "form" (log / linear), "df" (Welch-Satterthwaite), "p_confirm" (TOST: the larger of the two
    one-sided p-values against the band's edges), "p_refute" (one-sided, on the estimate's side of the band),
    "verdict" (confirmed / refuted / inconclusive from the raw p-values), "theta", "theta_ci95"}."""
    th = float(theta["theta"]) if theta else 1.0
    th_ci = list(theta["ci95"]) if theta else None
    base = {"theta": th if theta else None, "theta_ci95": th_ci}
    ok = measured is not None and predicted is not None and measured == measured and predicted == predicted
    ratio = measured / (predicted * th) if ok and predicted else None
    if not ok:
        return {**base, "ratio": ratio, "ratio_ci90": None, "verdict": "inconclusive", "p_confirm": None,
                "p_refute": None}
    form, _, _, df, ci, pc, pr = _ratio_test(measured, measured_se, measured_df, predicted, predicted_se,
                                             predicted_df, th_ci)
    return {**base, "ratio": ratio, "ratio_ci90": ci, "form": form, "df": df if math.isfinite(df) else None,
            "p_confirm": pc, "p_refute": pr, "verdict": _outcome(pc, pr)}


CANNOT_CONFIRM_THETA = "cannot confirm: θ's interval is wider than the band"
CANNOT_CONFIRM_PREDICTION = "cannot confirm: the prediction's own interval is wider than the band"
MAX_UNITS = 1000
"""The largest size `confirmability` looks for (beyond it: "cannot confirm at any size we would run")."""


def _num(v) -> float | None:
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def confirmability(row: dict) -> tuple[str, int | None] | None:
    """Whether a verdict row's rule can confirm at the row's size: None when it can (or when the row is not in the log
    form the band test uses), else (why, units that would).

    Confirming needs the ratio's 90% CI inside BAND, so its log width (2 q sd, plus log(θ_hi / θ_lo) where θ is
    calibrated: `stats.band_ratio_test`) must be below log(1.25 / 0.8), wherever the estimate lies. Reasons:
    θ's interval alone is as wide as the band (`CANNOT_CONFIRM_THETA`); the prediction's own se alone makes it so
    (`CANNOT_CONFIRM_PREDICTION`: more measurement cannot help); or the measured saving's se does at this size, and
    K units would not (K: the smallest count with the measured variance scaled by K0 / K, K0 the row's units: its
    processes for a rerun, 1 process for "run + tau", its reps within a run; q at the Welch df with K - 1)."""
    m, p = _num(row.get("measured_ms")), _num(row.get("predicted_ms"))
    se_m, se_p = _num(row.get("measured_se_ms")) or 0.0, _num(row.get("predicted_se_ms")) or 0.0
    if not m or not p or m <= 0 or p <= 0:
        return None
    th = row.get("theta_ci95")
    th_lo, th_hi = (th if isinstance(th, (list, tuple)) and len(th) == 2
                    else (row.get("theta_ci95_lo"), row.get("theta_ci95_hi")))
    th_lo, th_hi = _num(th_lo), _num(th_hi)
    calibrated = th_lo is not None and th_hi is not None and th_lo > 0
    w_theta = math.log(th_hi / th_lo) if calibrated else 0.0
    tail = stats.THETA_TAIL if calibrated else 0.0
    band = math.log(BAND[1] / BAND[0])
    if w_theta >= band:
        return CANNOT_CONFIRM_THETA, None
    df_m = _num(row.get("measured_df"))
    df_p = predicted_df({"predicted_df": _num(row.get("predicted_df")), "n_steps": _num(row.get("n_steps"))})
    v_m, v_p = (se_m / m) ** 2, (se_p / p) ** 2

    def width(scale: float, dfm) -> float:
        parts = [(v_m * scale, dfm), (v_p, df_p)]
        sd = math.sqrt(sum(v for v, _ in parts))
        df = stats.welch_satterthwaite_df(parts)
        return 2 * stats.t_quantile(1 - (ALPHA - tail), df) * sd + w_theta

    if width(1.0, df_m) < band:
        return None
    pop = str(row.get("measured_population") or "")
    k0 = (1 if pop.startswith("single run + tau")
          else int(_num(row.get("measured_n_units")) or _num(row.get("n_units")) or ((df_m or 1) + 1)))
    for k in range(k0 + 1, MAX_UNITS + 1):
        if width(k0 / k, k - 1) < band:
            return "cannot confirm at this size", k
    if v_p and width(0.0, None) >= band:
        return CANNOT_CONFIRM_PREDICTION, None
    return "cannot confirm at this size", None


def shown_verdict(row: dict) -> str:
    """The verdict as printed: an "inconclusive" row whose rule cannot confirm at its size says so, and the size that
    would decide (`confirmability`), instead of "inconclusive"."""
    v = row.get("verdict")
    if v != "inconclusive":
        return v
    c = confirmability(row)
    if c is None:
        return v
    why, k = c
    if why != "cannot confirm at this size":
        return why
    pop = str(row.get("measured_population") or "")
    unit = "reps" if pop and not pop.startswith("single run + tau") and pop != replication.RERUN else "processes"
    return f"{why} (needs {k} {unit})" if k else f"{why} (more than {MAX_UNITS} {unit})"


def holm_family(judged: list[dict]) -> list[dict]:
    """Holm within one family of model verdicts (dicts of `judge`, updated in place and returned): p_confirm and
    p_refute are each adjusted over the family (`stats.holm`; `*_holm` keys), and the verdict reads confirmed /
    refuted only where the adjusted p is <= ALPHA, else inconclusive (`holm_note` says so where it was decided
    before the adjustment)."""
    pcs = stats.holm([j.get("p_confirm") for j in judged])
    prs = stats.holm([j.get("p_refute") for j in judged])
    for j, pc, pr in zip(judged, pcs, prs):
        j["p_confirm_holm"], j["p_refute_holm"] = pc, pr
        raw = j.get("verdict")
        j["verdict"] = _outcome(pc, pr)
        j["family_size"] = len(judged)
        if raw in ("confirmed", "refuted") and j["verdict"] == "inconclusive":
            j["holm_note"] = (f"{raw} alone (p = {j['p_confirm' if raw == 'confirmed' else 'p_refute']:.3f}), "
                              f"not after Holm over the {len(judged)} model verdicts of its family")
    return judged


def exploratory(v: str) -> str:
    """A verdict of a model chosen after seeing the data: never "confirmed" (consistent / refuted / inconclusive)."""
    return "exploratory: " + {"confirmed": "consistent"}.get(v, v)


def predicted_df(model: dict) -> float | None:
    """The prediction's df: `predicted_df` when the model states it (a process-level prediction: K-1), else its
    traced steps - 1 (None with one step)."""
    if model.get("predicted_df") is not None:
        return model["predicted_df"]
    n = model.get("n_steps")
    return (n - 1) if n and n > 1 else None


def _measured_keys(measured: dict) -> dict:
    return {"measured_ms": measured["mean"], "measured_ci95": measured.get("ci95"),
            "measured_se_ms": measured.get("se"), "measured_df": measured.get("df"),
            "measured_n_pairs": measured.get("n_pairs"), "measured_n_units": measured.get("n_units"),
            "measured_population": measured.get("population") or replication.WITHIN,
            "measured_pi95": measured.get("pi95"), "measured_ci95_within": measured.get("ci95_within"),
            "tau_ms": measured.get("tau_ms")}


def _calibrated(model: dict, theta: dict) -> dict:
    """p·θ and its interval by the bounds of both: [min, max] of the prediction's 95% CI ends times θ's CI ends."""
    ci = model.get("predicted_ci95")
    ends = [a * b for a in ci for b in theta["ci95"]] if ci else None
    return {"predicted_calibrated_ms": model["predicted_ms"] * float(theta["theta"]),
            "predicted_calibrated_ci95": [min(ends), max(ends)] if ends else None}


def check(opt: str, model: dict, measured: dict, decomposition: pd.DataFrame | None, *,
          theta: dict | None = None, input_source: str | None = None, alone: bool = True) -> dict:
    """The verdict of `model` (a *_model dict) against `measured` (`stats.paired_difference`, or its widened /
    process-level forms: mean, se, df, population), θ from `theta` (a calibration entry, None: as traced); for a
    model read refuted, the largest traced component it lacks and the corrected model (model + that component's
    saving), labelled exploratory (chosen after the fact: it never reads confirmed). `alone`: the model (and its
    published form) are a family of their own and the verdict is final; False: `finalize` applies Holm over its
    family (what `annotate` does) and adds the corrected model."""
    kw = dict(predicted_df=predicted_df(model), theta=theta)
    j = judge(model["predicted_ms"], model.get("predicted_se_ms"), measured["mean"], measured.get("se"),
              measured.get("df"), **kw)
    src = input_source or ("calibrated" if theta else "traced")
    out = {**model, **_measured_keys(measured), "input_source": src, **j,
           **({"theta_source": theta.get("source"), "theta_commit": theta.get("commit"),
               "theta_decision": theta.get("decision")} if theta else {})}
    if theta:
        out.update(_calibrated(model, theta))
    if model.get("published"):  # the article's form of the model, judged on the same data (in the same family)
        pub = model["published"]
        pj = judge(pub["predicted_ms"], pub.get("predicted_se_ms"), measured["mean"], measured.get("se"),
                   measured.get("df"), predicted_df=pub.get("predicted_df", kw["predicted_df"]), theta=theta)
        out["published"] = {**pub, "input_source": src, **pj, **(_calibrated(pub, theta) if theta else {})}
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
    th = {"theta": out["theta"], "ci95": out["theta_ci95"]} if out.get("theta") else None
    j = judge(p2, out.get("predicted_se_ms"), measured["mean"], measured.get("se"), measured.get("df"),
              predicted_df=predicted_df(out), theta=th)
    out["corrected"] = {"formula": f"{out['formula']} + saved {name}", "predicted_ms": p2,
                        "predicted_ci95": None if h is None else [p2 - h, p2 + h],
                        "predicted_se_ms": out.get("predicted_se_ms"), **j, "raw_verdict": j["verdict"],
                        "verdict": exploratory(j["verdict"]), "exploratory": True,
                        "why": "the component was chosen after seeing the data (the largest of ~10): a new run "
                               "must confirm it"}


def finalize(models: list[dict], measured: list[dict]) -> None:
    """Holm over one family of model verdicts (the `check` dicts of one run folder, or of one L sweep) with the
    published forms among them in the same family, then the exploratory corrected model of each one refuted."""
    holm_family(models + [m["published"] for m in models if m.get("published")])
    for m, meas in zip(models, measured):
        _correct(m, meas)


# --- a run folder ---------------------------------------------------------------------------------------------

def _events(run_dir: str, cmp_name: str, arm: str) -> pd.DataFrame | None:
    from workbench.traces.events import events_path, load_events
    path = events_path(run_dir, cmp_name, arm)
    return load_events(path) if path else None


def _pairs(results: pd.DataFrame, cmp_name: str, baseline: str, arm: str):
    from workbench.measure import engine
    from workbench.measure.results import engine_step_rows
    r = engine_step_rows(results[results["comparison"] == cmp_name])
    samples = [dict(arm=x.arm, rep=int(x.rep), step=int(x.step), batch=int(x.batch) if x.batch == x.batch else 0,
                    step_ms=float(x.value)) for x in r.itertuples()]
    return engine.pairs(samples, baseline, arm)


def measured_saving(results: pd.DataFrame, cmp_name: str, baseline: str, arm: str) -> dict:
    """The engine's paired saving (baseline - arm step ms) of a comparison: every pair, the rep as the unit
    ("within this run")."""
    b, o, reps = _pairs(results, cmp_name, baseline, arm)
    return {**stats.paired_difference(b, o, reps), "population": replication.WITHIN}


def rep_savings(results: pd.DataFrame, cmp_name: str, baseline: str, arm: str) -> list[float]:
    """Each rep's mean paired saving (baseline - arm, ms), in rep order: one process's values for
    `replication.process_saving`."""
    b, o, reps = _pairs(results, cmp_name, baseline, arm)
    by: dict = {}
    for x, y, r in zip(b, o, reps):
        by.setdefault(r, []).append(float(x) - float(y))
    return [sum(v) / len(v) for _, v in sorted(by.items())]


class Inputs:
    """What a verdict knows beyond the run, parsed once and passed down: the calibration entries (θ per model:
    `calibration.read_calibration`), the process components (tau per comparison: `calibration.read_tau`) and the
    dose folders whose models are judged untraced (`untraced.read_dose`)."""

    def __init__(self, calibration_file: str | None = None, tau_from: str | None = calibration.TAU_SOURCE,
                 dose_dirs: list[str] | None = None):
        self.calibration_file, self.tau_from, self.dose_dirs = calibration_file, tau_from, list(dose_dirs or [])
        self.calibration = calibration.read_calibration(calibration_file)
        self.tau = calibration.read_tau(tau_from)
        self.dose = untraced.read_dose(self.dose_dirs)  # {opt: untimed slope entry}: that model is judged untraced

    def rerun(self, opt: str, within: dict, arm_step_ms: float | None) -> dict:
        """A single run's measured saving at the unit of the claim: widened by its comparison's tau (ms: tau of
        the log ratio x the arm's mean step), "single run + tau from FILE"; without a tau for `opt` (or without
        the arm's step) it stays "within this run", said so in `population`."""
        t = self.tau.get(opt)
        if t is None or not arm_step_ms:
            why = f"no tau for {opt} in {self.tau_from}" if self.tau_from and self.tau_from != "none" else "no tau"
            return {**within, "population": f"{replication.WITHIN} ({why})"}
        src = f"{t['source']} ({opt}: {t['processes']} processes, tau {100 * t['tau_log']:.2f}% of the log ratio)"
        return replication.with_process_component(within, replication.tau_ms(t["tau_log"], arm_step_ms), t["df"],
                                                  src)


def traced_step(c: dict, arm: str) -> float | None:
    """The arm's traced step (ms: the mean `wb/step` window of its trace, from `breakdown`), None when untraced."""
    comps = ((c.get("breakdown") or {}).get(arm) or {}).get("components") or []
    return next((x["ms"] for x in comps if x["component"] == "step_ms"), None)


def comparison_verdict(run_dir: str, c: dict, results: pd.DataFrame, meta: dict, *,
                       inputs: Inputs | None = None) -> dict:
    """decomposition, breakdown and savings_model of one comparison dict of summary.json (updated in place)."""
    inputs = inputs or Inputs()
    base = (c.get("baseline") or {}).get("arm")
    opt_arm = (c.get("optimized") or {}).get("arm")
    name, opt = c.get("name"), c.get("opt")
    mod = savings.module(opt)
    sm = {"formula": mod.FORMULA if mod else "the sum of the optimizations' models"}
    if not base or not opt_arm or str(name).startswith(("nvtx:", "aa:")) or opt_arm == base:
        return c
    within = measured_saving(results, name, base, opt_arm)
    sm.update(measured_ms=within["mean"], measured_ci95=within["ci95"], measured_n_pairs=within["n_pairs"],
              measured_population=replication.WITHIN)
    arms = comparison_arms(c)
    ev = {a: _events(run_dir, name, a) for a in arms}
    traced = {a: e for a, e in ev.items() if e is not None and (e["kind"] == "kernel").any()}
    if base in traced:
        from workbench.traces.lever_advice import experts_of, levers
        experts = experts_of(c.get("model"), c.get("layers"))
        c["breakdown"] = {}
        for a, e in traced.items():
            comps = decompose.summary(e).to_dict("records")
            top = decompose.top_kernels(e, 8).to_dict("records")
            c["breakdown"][a] = {"components": comps, "top_kernels": top,
                                 "levers": levers(comps, attention_flops=arms.get(a, {}).get("attention_flops"),
                                                  top_kernels=top, experts=experts)}
    decomp = None
    if base in traced and opt_arm in traced:
        decomp = decompose.compare(traced[base], traced[opt_arm], measured_ms=within["mean"])
        c["decomposition"] = decomp.to_dict("records")
    if mod is None:
        sm.update(verdict="not modelled", reason="optimizations together are judged through each one's model on its "
                                                 "own comparison")
        c["savings_model"] = sm
        return c
    if opt in inputs.dose:  # the untraced form: no trace read, so no precondition and no θ
        return _untraced_verdict(c, sm, mod, inputs, within, meta, results, arm=opt_arm)
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
    steps = {a: (traced_step(c, a), arms[a].get("step_ms_mean") or _mean_step(results, name, a))
             for a in (base, opt_arm) if a in traced}
    measured = inputs.rerun(opt, within, arms[opt_arm].get("step_ms_mean") or _mean_step(results, name, opt_arm))
    theta, src = calibration.theta_for(inputs.calibration, opt, c)
    if opt in (inputs.calibration.get(None) or {}):
        sm["theta_note"] = inputs.calibration[None][opt]  # the file's entry had no usable θ: used as traced
    rev = savings.model_revision(opt)
    sm.update(traced_step_ms={a: v[0] for a, v in steps.items()}, timed_step_ms={a: v[1] for a, v in steps.items()},
              model_revision=rev["revision"], model_revision_commit=rev["commit"])
    why = calibration.instrument_reason(steps)
    if why:
        sm.update({k: v for k, v in model.items() if k != "published"}, **_measured_keys(measured),
                  input_source=src, verdict=calibration.NO_VERDICT_INSTRUMENT, reason=why)
        c["savings_model"] = sm
        return c
    sm.update(check(opt, model, measured, decomp, theta=theta, input_source=src, alone=False))
    sm["_measured"] = measured  # for `finalize` (dropped before writing)
    c["savings_model"] = sm
    return c


def _untraced_verdict(c: dict, sm: dict, mod, inputs: Inputs, within: dict, meta: dict, results: pd.DataFrame, *,
                      arm: str) -> dict:
    """The untraced form's verdict of one comparison (`workbench.savings.untraced`; `--dose`)."""
    model = untraced.model(mod, inputs.dose[c.get("opt")], c, meta, arm=arm)
    arm_ms = comparison_arms(c)[arm].get("step_ms_mean") or _mean_step(results, c["name"], arm)
    c["savings_model"] = judge_untraced(sm, c.get("opt"), model, inputs.rerun(c.get("opt"), within, arm_ms))
    return c


def judge_untraced(sm: dict, opt: str, model: dict, measured: dict) -> dict:
    """`sm` with the untraced form's verdict keys (a run's comparison, or a `--processes` folder's): the form's
    revision with its commit, `check` with no θ and no instrument precondition, and `_measured` for `finalize`
    (dropped before writing)."""
    rev = untraced.revision()
    sm.update(model_revision=rev["revision"], model_revision_commit=rev["commit"])
    sm.update(check(opt, model, measured, None, theta=None, input_source=untraced.INPUT_SOURCE, alone=False))
    sm["_measured"] = measured
    return sm


def _mean_step(results: pd.DataFrame, cmp_name: str, arm: str) -> float | None:
    r = results[(results["comparison"] == cmp_name) & (results["arm"] == arm) & (results["metric"] == "step_ms")]
    return float(r["value"].mean()) if len(r) else None


def family_of(cmp_name: str) -> str:
    """The family a comparison's model verdict belongs to within its run folder: an L sweep's points are one family
    (the name before '@'), the folder's other comparisons another."""
    return str(cmp_name).split("@")[0] if "@" in str(cmp_name) else ""


def annotate(run_dir: str, inputs: Inputs | None = None, out: str | None = "summary.json") -> list[dict]:
    """`judged_summary` of `run_dir`, written as `run_dir`/`out` (None: nothing written; the run itself writes
    its own summary.json, `python -m workbench verdicts --write` summary.verdicts.json beside it) and return the
    verdict rows (`rows`)."""
    from workbench.measure.results import atomic_write_json
    summary = judged_summary(run_dir, inputs)
    if out:
        atomic_write_json(os.path.join(run_dir, out), summary)
    return rows(summary, run_dir)


def judged_summary(run_dir: str, inputs: Inputs | None = None) -> dict:
    """`run_dir`'s summary.json with every comparison filled (decomposition, breakdown, savings_model with a verdict;
    a comparison the folder's VOID.json declares void gets the verdict "void" and its reason, nothing judged); nothing
    written. `inputs`: calibration and tau (default: no calibration, tau from `calibration.TAU_SOURCE`)."""
    from workbench.measure.results import git_sha, load_run, void_comparisons
    inputs = inputs or Inputs()
    results, summary, meta = load_run(run_dir)
    if not summary:
        raise FileNotFoundError(f"{run_dir}: no summary.json")
    void = void_comparisons(run_dir, [c.get("name") for c in summary.get("comparisons", [])])
    for c in summary.get("comparisons", []):
        if c.get("name") in void:  # the folder's VOID.json: not judged, said so on its row
            c["savings_model"] = {**{k: v for k, v in (c.get("savings_model") or {}).items() if k == "formula"},
                                  "verdict": "void", "reason": void[c["name"]]["void_reason"]}
        elif c.get("baseline") is not None:
            comparison_verdict(run_dir, c, results, meta, inputs=inputs)
    fams: dict = {}
    for c in summary.get("comparisons", []):
        sm = c.get("savings_model") or {}
        if "_measured" in sm:
            fams.setdefault(family_of(c.get("name")), []).append(sm)
    for sms in fams.values():
        finalize(sms, [sm.pop("_measured") for sm in sms])
    summary["verdicts"] = {"by": "workbench verdicts", "git_sha": git_sha(),
                           "calibration": inputs.calibration_file, "dose": inputs.dose_dirs or None,
                           "tau_from": inputs.tau_from}
    return summary


def rows(summary: dict, folder: str = "") -> list[dict]:
    """One verdict row per comparison with a savings model: comparison, model, layers, tokens, formula, the model
    revision and its commit, the input source (traced / dose-response / calibrated / untraced) with θ, predicted
    [CI], measured [CI] with its unit (`measured_population`), ratio with its 90% CI, p-values (raw and Holm),
    verdict, reason, largest missing component, the exploratory corrected verdict and the published form's
    verdict."""
    out = []
    for c in summary.get("comparisons", []):
        sm = c.get("savings_model") or {}
        if "verdict" not in sm:
            continue
        out.append({"folder": folder, "comparison": c.get("name"), "opt": c.get("opt"), "model": c.get("model"),
                    "layers": c.get("layers"), "tokens": c.get("tokens"), **row_of(sm)})
    return out


def row_of(sm: dict) -> dict:
    """The verdict columns of one savings_model dict (`rows`)."""
    corr, miss, pub = sm.get("corrected") or {}, sm.get("largest_missing") or {}, sm.get("published") or {}
    keys = ("formula", "model_revision", "model_revision_commit", "input_source", "theta", "theta_ci95",
            "theta_source", "theta_decision", "theta_note", "predicted_ms", "predicted_ci95", "predicted_se_ms",
            "predicted_df", "predicted_calibrated_ms", "predicted_calibrated_ci95",
            "measured_ms", "measured_ci95", "measured_se_ms", "measured_df", "measured_population", "measured_n_units",
            "tau_ms", "ratio", "ratio_ci90", "p_confirm", "p_confirm_holm", "p_refute", "p_refute_holm", "family_size",
            "verdict", "holm_note", "reason", "traced_step_ms", "timed_step_ms", "mixed_environment", "dose_dir", "dose_se_units",
            "dose_se_unit_kind")
    return {**{k: sm.get(k) for k in keys}, "largest_missing": miss.get("component"),
            "largest_missing_ms": miss.get("saved_ms"), "corrected_ms": corr.get("predicted_ms"),
            "corrected_verdict": corr.get("verdict"), "published_ms": pub.get("predicted_ms"),
            "published_ratio": pub.get("ratio"), "published_verdict": pub.get("verdict"),
            "published_se_ms": pub.get("predicted_se_ms"), "published_df": pub.get("predicted_df")}


def shown_published(row: dict) -> str | None:
    """The published form's verdict as printed (`shown_verdict` of the row with the published form's prediction,
    its se and df, judged against the same measurement and θ), None without one."""
    v = row.get("published_verdict")
    if not isinstance(v, str):
        return None
    p = _num(row.get("published_ms"))
    if p is not None and p <= 0:  # no ratio to a zero prediction: the (L-1) form's L = 1 point is an equivalence test
        return "predicts no saving (the L sweep's (L-1) test judges it)"
    return shown_verdict({**row, "verdict": v, "predicted_ms": row.get("published_ms"),
                          "predicted_se_ms": row.get("published_se_ms"), "predicted_df": row.get("published_df")})


def _fmt_ci(ci) -> str:
    return f"[{ci[0]:.2f}, {ci[1]:.2f}]" if ci else ""


def fmt_ms(v, ci=None) -> str:
    """`12.34 [10.00, 14.00] ms`, or `-`."""
    if v is None or v != v:
        return "-"
    return f"{v:.2f} {_fmt_ci(ci)} ms".replace("  ", " ")


def unit_label(population: str | None, n_units=None) -> str:
    """The measured saving's unit in a few words: "K processes", "run + tau", "within run"."""
    pop = str(population or "")
    if pop == replication.RERUN:
        return f"{int(n_units)} processes" if n_units and n_units == n_units else "processes"
    if pop.startswith("single run + tau"):
        return "run + tau"
    return "within run" if pop else "-"


def table(all_rows: list[dict]) -> str:
    """The verdict rows as `workbench verdicts` prints them."""
    t = pd.DataFrame(all_rows)
    t["input"] = ["-" if not isinstance(s, str) else s if not isinstance(th, float) or th != th else f"{s} x{th:.2f}"
                  for s, th in zip(t["input_source"], t["theta"])]
    t["predicted"] = [f"{p:.2f} {_fmt_ci(ci)}" if p is not None and p == p else "-"
                      for p, ci in zip(t["predicted_ms"], t["predicted_ci95"])]
    t["measured"] = [f"{m:.2f} {_fmt_ci(ci)}" if m is not None and m == m else "-"
                     for m, ci in zip(t["measured_ms"], t["measured_ci95"])]
    t["unit"] = [unit_label(p, n) for p, n in zip(t["measured_population"], t["measured_n_units"])]
    shown = [shown_published(r) for r in all_rows]
    t["published"] = [f"{r['published_ms']:.2f}: {v}" if v else "-" for r, v in zip(all_rows, shown)]
    t["ratio"] = [f"{r:.2f}" if r is not None and r == r else "-" for r in t["ratio"]]
    t["ratio 90% CI"] = [_fmt_ci(ci) or "-" for ci in t["ratio_ci90"]]
    t["revision"] = [str(c or "-") for c in t["model_revision_commit"]]
    t["verdict"] = [shown_verdict(r) for r in all_rows]
    cols = ["comparison", "model", "input", "predicted", "measured", "unit", "ratio", "ratio 90% CI", "verdict",
            "published", "revision"]
    return t[cols].to_string(index=False, float_format=lambda x: f"{x:.2f}")
