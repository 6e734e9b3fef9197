"""What a process-level verdict would read for a rerun on another machine: beside the verdict, never replacing it.

A process-level verdict measures the saving over the K processes of one run: one lease, one machine. Its interval
is that run's; runs of one shape in different leases differ by more than their processes do
(`workbench.analysis.between_runs`: omega, the SD of a run's level on the log scale). This reading adds omega to the
measured saving's variance, (se_m / m)^2 + omega^2, its df by Welch-Satterthwaite from the run's K - 1 and omega's
own between-run df, and applies the committed test (`verdicts.judge`: the band, alpha, the prediction and θ as the
verdict had them) once more. The verdict's rule is unchanged and it stands; this line says whether it would still
read the same where another machine measured the saving.

A traced prediction is re-read on each machine: its own between-run component (`between_runs`' "prediction", where
every process of a shape's runs traced one) is added to the prediction's variance likewise. A dose-fed prediction
carries the dose's machines in its se already (`savings.dose.machine_component`).

    workbench verdicts RUN_DIR ...    # prints it under the table for each process-level row, where
                                                # PROFILES/between_runs.json gives the row's optimization an omega
"""
from __future__ import annotations

import math


def reading(row: dict, omega: float, omega_df: float | None, omega_pred: float = 0.0,
            omega_pred_df: float | None = None) -> dict | None:
    """{"ratio_ci90", "verdict", "omega", "df"} for a row of `verdicts.rows` measured over processes (its measured
    se and df, `measured_population` "a rerun"); None for any other row (one run's reps: no between-run reading).
    `omega_pred` (a traced row's only: its prediction re-read on another machine) adds to the prediction's variance
    likewise."""
    from workbench.measure import stats
    from workbench.savings import verdicts

    m, se_m, df_m = row.get("measured_ms"), row.get("measured_se_ms"), row.get("measured_df")
    p = row.get("predicted_ms")
    if (row.get("measured_population") != "a rerun" or None in (m, se_m, p) or not m or m <= 0
            or row.get("verdict") not in ("confirmed", "refuted", "inconclusive")):
        return None
    rel = [((se_m / m) ** 2, df_m), (omega ** 2, omega_df)]
    se_new = m * math.sqrt(sum(v for v, _ in rel))
    df_new = stats.welch_satterthwaite_df(rel) if omega > 0 else df_m
    theta = ({"theta": row["theta"], "ci95": row["theta_ci95"]}
             if row.get("theta") is not None and row.get("theta_ci95") else None)
    se_p, df_p = row.get("predicted_se_ms"), row.get("predicted_df")
    if omega_pred > 0 and row.get("input_source") in ("traced", "calibrated") and p > 0:
        prel = [((float(se_p or 0.0) / p) ** 2, df_p), (omega_pred ** 2, omega_pred_df)]
        se_p, df_p = p * math.sqrt(sum(v for v, _ in prel)), stats.welch_satterthwaite_df(prel)
    j = verdicts.judge(p, se_p, m, se_new, df_new, predicted_df=df_p, theta=theta)
    k = verdicts.family_size(row)  # the verdict's family, Bonferroni (no weaker than its Holm)
    pc, pr = (None if v is None else min(1.0, v * k) for v in (j["p_confirm"], j["p_refute"]))
    return {"ratio_ci90": j["ratio_ci90"], "verdict": verdicts._outcome(pc, pr), "omega": omega,
            "df": df_new if math.isfinite(df_new) else None}


def _ci(got: dict) -> str:
    lo, hi = got["ratio_ci90"] or (math.nan, math.nan)
    return f"[{lo:.2f}, {hi:.2f}]: {got['verdict']}"


def lines(rows: list[dict], between: dict) -> list[str]:
    """One line per process-level row whose optimization has an omega (`between`: `plan.read_between_runs`), and the
    reading with the row's own shape's omega where the file has it: the optimization's pooled omega mixes shapes whose
    runs differ unlike (packing's host-bound qwen3-0.6b headline 30%, qwen3-14b 4 L 9.5%), the shape's own rests on
    few runs; both are printed."""
    from workbench.savings.verdicts import family_size

    omega, omega_df, shapes = between.get("omega") or {}, between.get("df") or {}, between.get("shapes") or {}
    opred, opred_df = between.get("omega_pred") or {}, between.get("df_pred") or {}
    out = []
    for r in rows:
        name = r.get("comparison")
        om = omega.get(name)
        traced = r.get("input_source") in ("traced", "calibrated") and name in opred
        got = None if om is None else reading(r, om, omega_df.get(name), opred.get(name, 0.0) if traced else 0.0,
                                              opred_df.get(name))
        if got is None:
            continue
        shape = f"{name} {r.get('model')} {r.get('layers')} L {r.get('tokens')}"
        pred_note = f", its traced prediction's {100 * opred[name]:.1f}%" if traced else ""
        text = (f"  {shape}: {r['verdict']} on its run; for a rerun on another machine (omega {100 * om:.1f}% for "
                f"{name}{pred_note}) the ratio's 90% CI is {_ci(got)}")
        own = shapes.get(shape)
        if own is not None:
            o_pred = own[2] if traced and own[2] is not None else 0.0
            text += (f"; with this shape's own omega ({100 * own[0]:.1f}%, {own[1]} df between runs"
                     + (f"; its prediction's {100 * o_pred:.1f}%" if traced and o_pred else "") + ") "
                     + _ci(reading(r, own[0], own[1], o_pred, own[3] if o_pred else None)))
        k = family_size(r)
        if k > 1:
            text += f" (each reading Bonferroni over the verdict's family of {k})"
        out.append(text)
    if out:
        out.insert(0, "beside the verdicts (not the rule's reading; workbench/savings/across_runs.py): each "
                      "process-level row with a between-run component")
    return out
