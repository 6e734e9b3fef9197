"""Planning the next run of a verdict that came out inconclusive: how many processes per shape a NEW run needs.

A verdict is judged once, on the processes its run had; more processes are never added to it (that would be a
sequential design, and none is fixed). What this module gives is the size of a fresh, independent run of the same
shape, planned from the inconclusive one as a pilot:

- the per-process SD of the measured saving is the pilot's (se x sqrt(K)) at its upper confidence bound
  (`PILOT_SD_CONFIDENCE`, chi-square with K - 1 df), and the prediction's se likewise with its own df: a pilot of 3
  processes estimates an SD loosely, and planning on its point value undersized the run it planned (below);
- the prediction's se stays as it is where it does not come from the judged processes (the untraced form: the dose
  slope's; a calibrated theta's interval), and shrinks as 1 / sqrt(K') where it is the judged processes' own mean
  (the traced process-level prediction, `predicted_df` = K - 1);
- the ratio is assumed to stay at the pilot's point estimate; beside each planned size, `assurance` gives how often a
  run of that size would read confirmed, refuted or neither when the ratio, the SD and the prediction are drawn from
  the pilot's own uncertainty (a pilot's ratio is an estimate too: a plan from a pilot's point ratio can
  predict "refuted" for a run that reads "confirmed").

Per row: the smallest K' (2..K_MAX) at which the verdict test (`verdicts.judge`'s `band_ratio_test`, the band and
alpha as committed, alpha divided by the family's size: Bonferroni, no weaker than Holm) would decide at that point,
and what it would read; or why no K' can (the prediction's own interval is too wide for the band at that point: then
the dose, not the verdict run, needs more processes). A planning figure under stated assumptions, not a prediction of
the verdict: the next run is judged on its own data.

Where no verdict run alone can decide (the untraced form's prediction comes from the dose, whose own interval spans a
band edge), `with_dose` plans both runs afresh: a new dose run of D processes (its slope's se shrinking as
1 / sqrt(D) from the pilot dose's, its df D - 1) and a new verdict run of K processes, the smallest D + K that decides
at the pilot's ratio (a process of either run counted alike; a dose process costs more GPU time, so the plan states
both). More reps within each dose process would shrink the within-process part of the slope's SD too; the plan does
not count on that.

    workbench verdicts RUN_DIR [...] --dose DOSE_DIR [...] --plan
"""
from __future__ import annotations

import math

K_MAX = 30
"""The largest run planned: 30 processes of one shape (about 5 H100 hours for an MoE shape)."""

PILOT_SD_CONFIDENCE = 0.8
"""The pilot's SDs enter the plan at this one-sided upper confidence bound (the upper-confidence-limit method of
sizing a study from a pilot): SD x sqrt(df / chi2.ppf(1 - 0.8, df)), 2.12x at 2 df, 1.26x at 7. Why: a few-process
pilot's SD taken at its point value understates the SD a run measures, and a run sized by it reads inconclusive
at the pilot's very ratio."""


_SDS = f" and its SDs at their {100 * PILOT_SD_CONFIDENCE:.0f}% upper bounds"


def _ucl(df) -> float:
    """The factor an SD estimated on `df` degrees of freedom is planned at (`PILOT_SD_CONFIDENCE`); 1 without df."""
    if not df or df < 1:
        return 1.0
    from scipy import stats as sps
    return math.sqrt(df / sps.chi2.ppf(1.0 - PILOT_SD_CONFIDENCE, df))


def _alpha(row: dict) -> float:
    """The verdict test's alpha over the row's family (Bonferroni: no weaker than Holm)."""
    from workbench.savings import verdicts
    return verdicts.ALPHA / verdicts.family_size(row)


def _theta(row: dict):
    """The calibrated factor's 95% CI the verdict test shifts by (a `calibrated` row's), else None (used as traced)."""
    return row.get("theta_ci95") if row.get("input_source") == "calibrated" else None


def _reads(test: tuple, alpha: float) -> str | None:
    """What the committed test (`stats.band_ratio_test`'s result: p_confirm, p_refute at [5], [6]) reads at a planned
    size: "confirmed", "refuted", or None (undecided)."""
    return "confirmed" if test[5] <= alpha else "refuted" if test[6] <= alpha else None


def _scales(row: dict, k: int) -> bool:
    """Whether the prediction is the judged processes' own mean (its df K - 1: the traced process-level form)."""
    return row.get("input_source") in ("traced", "calibrated") and row.get("predicted_df") == k - 1


def processes_to_decide(row: dict, k_max: int = K_MAX) -> dict:
    """{"k": K' or None, "reads": "confirmed" / "refuted" / None, "why": text} for one verdict row (`verdicts.rows`);
    "input_too_wide": True where no K' can decide because the prediction's own interval spans a band edge (then
    `with_dose` plans the dose too)."""
    from workbench.measure import stats
    from workbench.savings import verdicts

    m, p = row.get("measured_ms"), row.get("predicted_ms")
    se_m, se_p = row.get("measured_se_ms"), row.get("predicted_se_ms")
    k = row.get("measured_n_units")
    if None in (m, p, se_m, k) or k < 2:
        return {"k": None, "reads": None, "why": "no process-level measured saving to plan from"}
    if m <= 0 or p <= 0:
        return {"k": None, "reads": None, "why": "a saving at or below 0: the ratio's log form does not apply"}
    sd_proc, scales = se_m * math.sqrt(k) * _ucl(k - 1), _scales(row, k)
    df_p = row.get("predicted_df")
    se_p = float(se_p or 0.0) * _ucl(df_p)
    theta = _theta(row)
    alpha = _alpha(row)

    for kk in range(2, k_max + 1):
        sp = se_p * math.sqrt(k / kk) if scales else se_p
        reads = _reads(stats.band_ratio_test(m, sd_proc / math.sqrt(kk), kk - 1, p, sp, (kk - 1) if scales else df_p,
                                             theta_ci=theta, band=verdicts.BAND, alpha=alpha), alpha)
        if reads:
            return {"k": kk, "reads": reads, "why": f"at the pilot's ratio {m / p:.2f}{_SDS}"}
    if not scales and _reads(stats.band_ratio_test(m, 0.0, 1e9, p, se_p, df_p, theta_ci=theta, band=verdicts.BAND,
                                                   alpha=alpha), alpha) is None:  # even a saving known exactly
        return {"k": None, "reads": None, "input_too_wide": True,
                "why": (f"not by processes: at the pilot's ratio {m / p:.2f} the prediction's own interval "
                        f"(se {100 * se_p / p:.1f}% at its upper bound, from its {row.get('input_source')} input) already spans a "
                        "band edge; its input needs more precision (e.g. more dose processes)")}
    return {"k": None, "reads": None, "why": f"more than {k_max} processes at the pilot's ratio {m / p:.2f}"}


ASSURANCE_DRAWS = 2000
"""Simulated runs per assurance figure (its Monte Carlo se is at most 1.1 percentage points)."""


def assurance(row: dict, kk: int, dose: int | None = None, draws: int = ASSURANCE_DRAWS, seed: int = 0,
              omega: float = 0.0, omega_pred: float = 0.0) -> dict:
    """The chance that a new run of `kk` verdict processes (and, with `dose`, a new dose run of that many processes)
    reads confirmed, refuted, or neither, over what the pilot leaves uncertain: {"confirmed": P, "refuted": P,
    "undecided": P}. `processes_to_decide` plans at the pilot's point ratio; this asks how often the plan's size
    decides when the true saving, the true prediction and the true process SD are each drawn from what the pilot
    measured (the saving ~ N(m, se_m); the SD from its chi-square with K - 1 df; a prediction the run re-estimates,
    the traced form's or a new dose's, ~ N(p, se_p)), and the new run is then simulated and judged by the committed
    test (`stats.band_ratio_test`, the row's alpha). Why: a pilot's ratio is itself an estimate; a
    plan that takes it as exact can predict "refuted" for a run that then reads confirmed.

    `omega` (default 0: what a single run can see) adds a between-run component of the measured saving: the new run
    is another lease, on another machine, so its level differs from the pilot's by exp(N(0, 2 omega^2)) (each run's
    level ~ N(0, omega^2) on the log scale; `workbench.analysis.between_runs` estimates omega from the shapes the
    profiles hold more than one run of, and `read_between_runs` reads it back). Why: over the offload pilot's own
    uncertainty a 6-process run reads confirmed under 5% of the time (tests/test_savings_plan.py), yet the run read
    confirmed: the saving moved 21.0 -> 23.4 ms and the traced prediction 28.6 -> 26.6 ms between the two runs (two
    H100s), each further than its within-run se allows.

    `omega_pred` (default 0) does the same for a traced row's prediction, which the new run re-reads from its own
    traces on its machine (`between_runs`' "prediction": offload 4.1%): its level moves by exp(N(0, 2 omega_pred^2)),
    independently of the saving's. An untraced row's prediction comes from a dose (its machines are the dose's
    affair, `dose.machine_component`) and a fixed input's does not move: neither draws it."""
    import numpy as np

    from workbench.measure import stats
    from workbench.savings import verdicts

    m, p = row["measured_ms"], row["predicted_ms"]
    k, se_m = row["measured_n_units"], row["measured_se_ms"]
    se_p, df_p = float(row.get("predicted_se_ms") or 0.0), row.get("predicted_df")
    scales = _scales(row, k)
    theta = _theta(row)
    alpha = _alpha(row)
    rng = np.random.default_rng(seed)
    sd_pilot = se_m * math.sqrt(k)
    counts = {"confirmed": 0, "refuted": 0, "undecided": 0}
    for _ in range(draws):
        m_true = rng.normal(m, se_m)
        if omega > 0:  # drawn only then: without it the stream, and so every committed figure, is as before
            m_true *= math.exp(rng.normal(0.0, math.sqrt(2.0) * omega))
        sd_true = sd_pilot * math.sqrt((k - 1) / rng.chisquare(k - 1))
        m_new = rng.normal(m_true, sd_true / math.sqrt(kk))
        se_new = sd_true * math.sqrt(rng.chisquare(kk - 1) / (kk - 1)) / math.sqrt(kk)
        if scales:  # the run's own traced prediction: re-estimated from its kk processes
            sp_new = se_p * math.sqrt(k / kk)
            p_true = rng.normal(p, se_p)
            if omega_pred > 0:  # drawn only then, as omega above
                p_true *= math.exp(rng.normal(0.0, math.sqrt(2.0) * omega_pred))
            p_new, df_new = rng.normal(p_true, sp_new), kk - 1
            sp_new *= math.sqrt(rng.chisquare(kk - 1) / (kk - 1))
        elif dose:  # a new dose run: its slope re-estimated from `dose` processes (or machines: `_dose_units`)
            sp_new = se_p * math.sqrt(_dose_units(row)[0] / dose)
            p_new, df_new = rng.normal(rng.normal(p, se_p), sp_new), dose - 1
            sp_new *= math.sqrt(rng.chisquare(dose - 1) / (dose - 1))
        else:  # the same fixed input (the committed dose, a calibrated theta): the pilot's prediction as it is
            p_new, sp_new, df_new = p, se_p, df_p
        if m_new <= 0 or p_new <= 0:
            counts["undecided"] += 1
            continue
        reads = _reads(stats.band_ratio_test(m_new, se_new, kk - 1, p_new, sp_new, df_new, theta_ci=theta,
                                             band=verdicts.BAND, alpha=alpha), alpha)
        counts[reads or "undecided"] += 1
    return {key: v / draws for key, v in counts.items()}


def _chance(a: dict) -> str:
    return (f"over the pilot's own uncertainty it reads confirmed {100 * a['confirmed']:.0f}%, refuted "
            f"{100 * a['refuted']:.0f}%, neither {100 * a['undecided']:.0f}% of the time")


def _chances(row: dict, kk: int, omega: dict | None, dose: int | None = None, omega_pred: dict | None = None) -> str:
    """`_chance` of a planned size, and again with the row's optimization's between-run component where `omega`
    ({optimization: omega}, `read_between_runs`) has one; for a traced row, with its prediction's own too where
    `omega_pred` ({optimization: omega}) has one."""
    text = _chance(assurance(row, kk, dose=dose))
    om = (omega or {}).get(row.get("comparison"))
    if om is not None:
        op = (omega_pred or {}).get(row.get("comparison")) if _scales(row, row.get("measured_n_units") or 0) else None
        a = assurance(row, kk, dose=dose, omega=om, omega_pred=op or 0.0)
        text += (f"; with a rerun's between-run component (omega {100 * om:.1f}% for {row.get('comparison')}"
                 + (f", its traced prediction's {100 * op:.1f}%" if op else "") + "): "
                 f"confirmed {100 * a['confirmed']:.0f}%, refuted {100 * a['refuted']:.0f}%, neither "
                 f"{100 * a['undecided']:.0f}%")
    return text


BETWEEN_RUNS_FILE = "between_runs.json"
"""The file in the profiles root that `workbench.analysis.between_runs` writes and `read_between_runs` reads."""


def read_between_runs(path: str) -> dict:
    """A `workbench.analysis.between_runs` file, read once: {"omega": {optimization: omega}, "df": {optimization: its
    between-run df}, "shapes": {"comparison model layers L tokens": (omega, df, the traced prediction's omega and df
    or None)} of the shapes it estimated (the first of two that print alike), "omega_pred" / "df_pred": the traced prediction's, where the file has one};
    empty dicts where the file is absent. A file that cannot be read is refused in
    one line."""
    import json
    import os

    from workbench.errors import WorkbenchError
    out: dict = {"omega": {}, "df": {}, "shapes": {}, "omega_pred": {}, "df_pred": {}}
    if not os.path.isfile(path):
        return out
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        for k, v in (doc.get("by_opt") or {}).items():
            out["omega"][k], out["df"][k] = float(v["omega"]), float(v["df"])
            if v.get("prediction"):
                out["omega_pred"][k], out["df_pred"][k] = float(v["prediction"]["omega"]), float(v["prediction"]["df"])
        for c in doc.get("shapes") or []:
            if "omega" in c:
                pr = c.get("prediction") or {}
                out["shapes"].setdefault(c["label"].split(" (")[0], (
                    float(c["omega"]), int(c["df"][0]), float(pr["omega"]) if pr else None,
                    int(pr["df"][0]) if pr else None))
    except (OSError, ValueError, TypeError, KeyError, AttributeError, IndexError) as e:
        raise WorkbenchError(f"{path}: not a between-runs file of python -m workbench.analysis.between_runs "
                             f"({type(e).__name__}: {e})") from None
    return out


DOSE_MAX = 40
"""The largest new dose run planned (processes, or machines where the dose's se is over machines)."""


def _dose_units(row: dict) -> tuple[float, str]:
    """(the units the dose slope's se is over, their name): the machines where the dose's processes ran on machines
    that differ (`dose.machine_component`: more processes on the same machines do not shrink that se), else its
    processes (predicted_df + 1 for a row written before the dose recorded which)."""
    if row.get("dose_se_units"):
        return float(row["dose_se_units"]), row.get("dose_se_unit_kind") or "processes"
    return float(row.get("predicted_df") or 0) + 1, "processes"


def with_dose(row: dict, k_max: int = K_MAX, dose_max: int = DOSE_MAX) -> dict:
    """{"k": verdict processes, "dose": dose processes, "reads", "why"} for an untraced row (its prediction from a dose
    of `predicted_df` + 1 processes): the smallest new dose run plus new verdict run that would decide at the pilot's
    ratio, or {"k": None, ...} with why not."""
    from workbench.measure import stats
    from workbench.savings import verdicts

    m, p = row.get("measured_ms"), row.get("predicted_ms")
    se_m, se_p, k, df_p = (row.get("measured_se_ms"), row.get("predicted_se_ms"), row.get("measured_n_units"),
                           row.get("predicted_df"))
    if row.get("input_source") != "untraced" or None in (m, p, se_m, se_p, k, df_p) or k < 2 or m <= 0 or p <= 0:
        return {"k": None, "dose": None, "reads": None,
                "why": "only the untraced form's dose-fed prediction is planned with its dose"}
    (n_dose, kind), alpha = _dose_units(row), _alpha(row)
    sd_proc = se_m * math.sqrt(k) * _ucl(k - 1)
    se_p = se_p * _ucl(df_p)
    for total in range(4, k_max + dose_max + 1):
        for kk in range(max(2, total - dose_max), min(k_max, total - 2) + 1):
            d = total - kk
            reads = _reads(stats.band_ratio_test(m, sd_proc / math.sqrt(kk), kk - 1, p, se_p * math.sqrt(n_dose / d),
                                                 d - 1, band=verdicts.BAND, alpha=alpha), alpha)
            if reads:
                return {"k": kk, "dose": d, "reads": reads, "dose_kind": kind,
                        "why": f"at the pilot's ratio {m / p:.2f}{_SDS}; the dose pilot had {n_dose:.0f} {kind}"}
    return {"k": None, "dose": None, "reads": None,
            "why": f"more than {k_max} verdict and {dose_max} dose processes at the pilot's ratio {m / p:.2f}"}


def table(rows: list[dict], omega: dict | None = None, omega_pred: dict | None = None) -> str:
    """One line per row: shape, the pilot's verdict and ratio, the processes a new run needs and what it would read,
    with its chance (`assurance`), and again with the between-run component `omega` ({optimization: omega}; a traced
    row's prediction's own from `omega_pred`)."""
    lines = ["plan for a new run of each shape (the pilot's ratio assumed, its SDs at their upper bounds; a planning figure, "
             "not a verdict):"]
    for r in rows:
        if r.get("verdict") in (None, "confirmed", "refuted"):
            continue
        got = processes_to_decide(r)
        what = (f"{got['k']} processes would read {got['reads']} ({got['why']}; "
                f"{_chances(r, got['k'], omega, omega_pred=omega_pred)})"
                if got["k"] else got["why"])
        if got["k"] is None and r.get("input_source") == "untraced" and "no process-level" not in got["why"]:
            both = with_dose(r)
            what += (f"; with a new dose run: {both['dose']} dose {both['dose_kind']} and {both['k']} verdict "
                     f"processes would read {both['reads']} ({both['why']}; "
                     f"{_chances(r, both['k'], omega, dose=both['dose'], omega_pred=omega_pred)})"
                     if both["k"] else f"; with a new dose run: {both['why']}")
        lines.append(f"  {r.get('comparison')} {r.get('model')} {r.get('layers')} L {r.get('tokens')} "
                     f"[{r.get('input_source')}], pilot {r.get('measured_n_units')} processes, "
                     f"{r.get('verdict')}: {what}")
    return "\n".join(lines)
