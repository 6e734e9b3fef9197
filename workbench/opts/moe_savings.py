"""The MoE routing savings model: syncs removed x drain stall + launch gaps + GEMM time removed, its inputs from
both arms' traces, and the model of a run (`workbench.savings.contract` states the contract; torch-free).

In situ (`workbench.savings.verdicts`; inputs per traced step, their spread the uncertainty):

    moe       ΔS·d + ΔG_launch + ΔK_gemm    ΔS = syncs removed per step (the counter; checked against the traces'
                                            readbacks: 20%), d = in-situ drain stall per sync (the baseline's
                                            sync_stall / its syncs), ΔG_launch = launch-bound idle removed,
                                            ΔK_gemm = GEMM kernel time removed (per-expert matmuls -> grouped)
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from workbench.measure.results import comparison_arms
from workbench.savings import common as savings
from workbench.traces import decompose

FORMULA = "syncs_removed * drain_stall_per_sync + launch_gap_removed + gemm_kernel_removed"
"""The model as `workbench.savings.verdicts` judges it (in situ, per traced step)."""
MODEL_TERMS = ("sync_stall", "launch_gap", "gemm")
"""The decomposition components the model accounts for (the rest are candidates for the term it lacks)."""
TRACED_ARMS = ("baseline", "arm")
"""The arms whose traces the model's inputs come from."""
MODEL_REVISION = ("2026-11-26: syncs_removed * drain_stall_per_sync + launch_gap_removed + gemm_kernel_removed (both "
                  "arms' traces); the formula of 54f840f (2026-11-25), unchanged")
"""The model revision a verdict row names, with the commit that set this value (`savings.model_revision`):
bump it (date: what changed) in the commit that changes FORMULA or an input, before the runs that judge it."""


def moe_saving(*, syncs_removed: float, drain_stall_per_sync_ms: float, launch_gap_removed_ms: float,
               gemm_removed_ms: float) -> dict:
    """MoE routing arm vs HF's eager per-expert loop: the saving per step, from its parts (the articles give no
    formula):

        predicted_ms = syncs_removed · drain_stall_per_sync_ms + launch_gap_removed_ms + gemm_removed_ms

    Inputs, per training step: `syncs_removed` = the baseline's syncs minus the arm's (the sync counter);
    `drain_stall_per_sync_ms` = the GPU idle each sync causes in situ (the baseline trace's sync stalls / its
    syncs: the queue drains while the host waits, then the GPU waits for the next launch); `launch_gap_removed_ms`
    = launch-bound GPU idle of the baseline minus the arm's (the per-expert loop's small kernels issued at the
    host's pace); `gemm_removed_ms` = GEMM kernel time of the baseline minus the arm's (per-expert matmuls vs one
    grouped GEMM). What it leaves out (routing kernels, elementwise work, copies) shows in the decomposition.
    """
    terms = {"syncs removed x drain stall per sync": float(syncs_removed) * float(drain_stall_per_sync_ms),
             "launch gaps removed": float(launch_gap_removed_ms), "GEMM kernel time removed": float(gemm_removed_ms)}
    return {"formula": "syncs_removed*drain_stall_per_sync + launch_gap_removed + gemm_kernel_removed",
            "predicted_ms": sum(terms.values()), "terms": terms,
            "inputs": {"syncs_removed": syncs_removed, "drain_stall_per_sync_ms": drain_stall_per_sync_ms,
                       "launch_gap_removed_ms": launch_gap_removed_ms, "gemm_removed_ms": gemm_removed_ms}}


UNTRACED_FORMULA = "syncs_removed * u  (u: untimed dose slope per layer switched / syncs removed per layer)"
"""The untraced form (`workbench.savings.untraced`): the counted syncs removed times the untimed saving per sync."""


def untraced_count(c: dict, meta: dict, *, arm: str) -> tuple[float, str]:
    """(syncs removed per step, its source) of a comparison: the sync counter's pass of each arm (summary.json's
    syncs_per_step), baseline - arm."""
    arms = comparison_arms(c)
    base = c["baseline"]["arm"]
    sb, sa = arms[base].get("syncs_per_step"), arms[arm].get("syncs_per_step")
    if sb is None or sa is None:
        from workbench.errors import WorkbenchError
        raise WorkbenchError(f"moe: {c.get('name')}: no syncs_per_step for {base} or {arm} (the counted "
                             "pass)")
    return float(sb) - float(sa), f"sync counter (counted pass): {sb:g} - {sa:g} syncs per step"


def count_per_dose_unit(entry: dict) -> tuple[float | None, str]:
    """Syncs removed per dose unit (one MoE layer switched), as counted in the dose run."""
    n = entry.get("syncs_removed_per_unit")
    what = f"{n if n is None else f'{float(n):g}'} syncs removed per layer switched (counted)"
    return (float(n) if n else None), what


def dose_traced_input(events: dict, units: dict, syncs: dict, tracer: str | None) -> dict:
    """The traced saving per layer switched from one dose process's traces of every level (`contract.HOOKS`): this
    model between the lowest and the highest level, divided by their units."""
    from workbench.measure import stats
    from workbench.traces.analysis import readbacks_per_step

    by_u = {units[a]: a for a in events}
    u0, umax = min(by_u), max(by_u)
    per_level, models = {}, {}
    for u, a in sorted(by_u.items()):
        if u == u0:
            continue
        models[u] = moe_model(events[by_u[u0]], events[a], syncs_base=syncs.get(u0) or 0.0,
                              syncs_arm=syncs.get(u) or 0.0,
                              readbacks_removed=readbacks_per_step(events[by_u[u0]]) - readbacks_per_step(events[a]))
        per_level[u] = {"predicted_ms": models[u]["predicted_ms"], "predicted_se_ms": models[u]["predicted_se_ms"]}
    top, n_units = models[umax], umax - u0
    c = top["predicted_ms"] / n_units
    se = top["predicted_se_ms"] / n_units if top["predicted_se_ms"] is not None else None
    df = top["n_steps"] - 1 if top["n_steps"] and top["n_steps"] > 1 else None
    tq = stats.t_quantile(0.975, df)
    return {"value_ms": c, "se_ms": se, "df": df, "ci95": None if se is None else [c - tq * se, c + tq * se],
            "n_steps": top["n_steps"], "per_level": per_level, "tracer": tracer,
            "source": f"moe model ({top['formula']}) between u = {u0} and u = {umax}, {tracer} traces, / {n_units}"}


def moe_model(base_events: pd.DataFrame, arm_events: pd.DataFrame, *, syncs_base: float, syncs_arm: float,
              readbacks_removed: float | None = None) -> dict:
    """The MoE routing model from both arms' traces (paired by traced step) and the counter's syncs; raises
    savings.InputCheckFailed when the counter's syncs removed and the traces' readbacks removed differ by > savings.AGREE_TOL."""
    removed = float(syncs_base) - float(syncs_arm)
    if readbacks_removed is not None and removed > 0 and abs(readbacks_removed - removed) > savings.AGREE_TOL * removed:
        raise savings.InputCheckFailed(f"moe: syncs removed {removed:.0f}/step (counter) vs {readbacks_removed:.0f}/step "
                               f"(trace readbacks) differ by more than {savings.AGREE_TOL:.0%}")
    a, b = decompose.per_step(base_events), decompose.per_step(arm_events)
    n = min(len(a), len(b))
    if n == 0:
        raise savings.InputCheckFailed("moe: no wb/step windows in the traces")
    a, b = a.iloc[:n], b.iloc[:n]
    X = np.stack([a["sync_stall"].to_numpy(), a["launch_gap"].to_numpy(), b["launch_gap"].to_numpy(),
                  a["gemm"].to_numpy(), b["gemm"].to_numpy()], axis=1)
    share = removed / syncs_base if syncs_base else 0.0

    def f(v):
        return moe_saving(syncs_removed=removed, drain_stall_per_sync_ms=v[0] / syncs_base if syncs_base else 0.0,
                                  launch_gap_removed_ms=v[1] - v[2], gemm_removed_ms=v[3] - v[4])["predicted_ms"]
    out = savings.predicted(f, X)
    m = X.mean(axis=0)
    terms = {"syncs removed x drain stall per sync": share * m[0], "launch gaps removed": m[1] - m[2],
             "GEMM kernel time removed": m[3] - m[4]}
    tot = sum(abs(v) for v in terms.values()) or 1.0
    out.update(formula=FORMULA,
               inputs={"syncs_removed": {"value": removed, "source": "sync counter (counted pass), baseline - arm"},
                       "drain_stall_per_sync_ms": {"value": m[0] / syncs_base if syncs_base else float("nan"),
                                                   "source": "baseline trace: sync_stall / syncs per step"},
                       "launch_gap_baseline_ms": {"value": m[1], "source": "baseline trace"},
                       "launch_gap_arm_ms": {"value": m[2], "source": "arm trace"},
                       "gemm_baseline_ms": {"value": m[3], "source": "baseline trace"},
                       "gemm_arm_ms": {"value": m[4], "source": "arm trace"},
                       **({"readbacks_removed": {"value": readbacks_removed,
                                                 "source": "traces: small DtoH copies per step, baseline - arm"}}
                          if readbacks_removed is not None else {})},
               terms=terms, term_shares={k: abs(v) / tot for k, v in terms.items()})
    return out


def from_run(traced: dict, c: dict, meta: dict, *, baseline: str, arm: str) -> dict:
    """The model of a comparison of a run: both arms' traces, the counter's syncs per step of each (summary.json),
    checked against the traces' readbacks."""
    from workbench.traces.analysis import readbacks_per_step

    arms = comparison_arms(c)
    return moe_model(traced[baseline], traced[arm], syncs_base=arms[baseline].get("syncs_per_step") or 0.0,
                     syncs_arm=arms[arm].get("syncs_per_step") or 0.0,
                     readbacks_removed=readbacks_per_step(traced[baseline]) - readbacks_per_step(traced[arm]))
