"""A sync-driven savings model fed by no trace: the saving per unit that a dose-response measured untimed on its own
shape, carried to the judged shape by an exact count (a revision written down, with its commit,
before the runs that judge it).

    workbench verdicts RUN_DIR [RUN_DIR ...] --dose DOSE_DIR [DOSE_DIR ...]

    predicted = n · u      n  the judged comparison's count per step, exact (the model module's `untraced_count`:
                              packing's builds removed L·p - b from the run's layers and checkpointing; MoE's syncs
                              removed, the counter's pass in summary.json)
                           u  ms saved per counted unit: the dose folder's untimed slope (ms per dose unit, a
                              t-interval over its K processes) over the count per dose unit (the module's
                              `count_per_dose_unit`: 1 build per build avoided; MoE's syncs removed per layer
                              switched, counted in the dose run)
    se = n · se(u), df = the slope's (K - 1)

Why: the traced models read GPU idle from a trace, and the tracer inflates it (θ = 0.63 packing, 0.55 MoE, below the
band); at some shapes it moves the whole step by more than the precondition allows (MoE: 16-37%, "no verdict:
instrument", profiles/2026-11-27_h100_verdicts_process_moe). This form reads no trace: the precondition does not
apply and θ is not applied (u is the untimed input already). What it assumes, and what its verdict tests: the saving
per counted unit carries from the dose shape to the judged one (for MoE a saving proportional to the syncs removed,
though the MoE dose-response bends: "linear False" in its analysis, said on the row).

Each row says input source "untraced", the dose folder and its commit, and the revision below with its commit.
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np

from workbench.errors import WorkbenchError
from workbench.measure import stats
from workbench.savings import common, contract

DOSE_FILE = "dose_analysis.json"
INPUT_SOURCE = "untraced"
"""The verdict row's input source for this form (`calibration.INPUT_SOURCES`)."""
MODEL_REVISION = ("2026-11-27 (7): n * u, u = the untimed dose slope per counted unit (no trace), n the judged "
                  "shape's exact count (packing: builds removed; moe: syncs removed); u's se with the machine as its "
                  "unit where the dose's processes ran on machines that differ (dose.machine_component), else over "
                  "processes as before; over processes too where a --processes verdict ran on exactly the dose's "
                  "machines (the same-host design: those GPUs are the claim's own, not a sample of others)")
"""The revision a row names, with the commit that set it (`common._revision_commit`), written before its runs.
This revision: the dose and the verdict
processes spread alike over the GPUs of one host. The machine-level se answers "on another machine"; where the
verdict ran on the very GPUs the dose did, each GPU's effect is in both the prediction and the saving, and the claim
is for those GPUs, so the process se is the one that fits. Every reading judged under (6) is unchanged: a verdict on
one GPU against a dose of several machines is not this design."""


def read_dose(dirs: list[str] | None) -> dict:
    """{opt: entry} from dose folders' dose_analysis.json (`python -m workbench.savings.dose_fit`): entry = {"dir",
    "slope_ms", "slope_se_ms", "df", "K", "unit", "syncs_removed_per_unit", "linear", "commit"}, the untimed mode's
    slope. A folder without the file, without an untimed slope with its se, of an optimization whose model has no
    untraced form, or a second folder of the same optimization is a one-line error."""
    out: dict = {}
    for d in dirs or []:
        p = os.path.join(d, DOSE_FILE)
        try:
            with open(p, encoding="utf-8") as f:
                a = json.load(f)
        except (OSError, ValueError) as e:
            raise WorkbenchError(f"--dose {d}: cannot read {DOSE_FILE} ({type(e).__name__}: {e}); run python -m "
                                 f"workbench.savings.dose_fit {d} first") from None
        none = (a.get("modes") or {}).get("none") or {}
        opt = a.get("opt")
        if not opt or none.get("slope_ms") is None or not none.get("slope_se") or not none.get("df"):
            raise WorkbenchError(f"--dose {d}: {DOSE_FILE} has no untimed slope with its se (need the 'none' mode "
                                 "over at least 2 processes)")
        if opt in out:
            raise WorkbenchError(f"--dose {d}: a second dose folder for {opt} (first: {out[opt]['dir']})")
        if contract.member(common.module(opt), "untraced_count") is None:
            raise WorkbenchError(f"--dose {d}: {opt}'s savings model has no untraced form (untraced_count)")
        mc = none.get("machines") or {}  # an analysis before machine_component has none: the process se, as then
        se, df = ((float(mc["slope_se"]), float(mc["df"])) if mc.get("slope_se") else
                  (float(none["slope_se"]), int(none["df"])))
        out[opt] = {"dir": d, "slope_ms": float(none["slope_ms"]), "slope_se_ms": se, "df": df,
                    "process_se_ms": float(none["slope_se"]), "process_df": int(none["df"]),
                    "machines": sorted(mc.get("per_machine") or {}) if mc.get("slope_se") else [],
                    "se_unit": (f"machine ({mc['J']} machines, F p {mc['p']:.2g})" if mc.get("slope_se") else
                                "process"),
                    "se_units": int(mc["J"]) if mc.get("slope_se") else int(none.get("K") or int(none["df"]) + 1),
                    "se_unit_kind": "machines" if mc.get("slope_se") else "processes",
                    "K": int(none.get("K") or 0), "unit": a.get("unit"),
                    "syncs_removed_per_unit": none.get("syncs_removed_per_unit"), "linear": none.get("linear"),
                    "commit": a.get("commit")}
    return out


def model(mod, entry: dict, c: dict, meta: dict, *, arm: str) -> dict:
    """The untraced prediction of one comparison (its summary.json dict `c`, the run's meta.json) from a dose entry
    (`read_dose`) and the optimization's savings module `mod` (its `untraced_count`, `count_per_dose_unit` and
    UNTRACED_FORMULA): the keys `verdicts.check` reads (predicted_ms, predicted_se_ms, predicted_df, predicted_ci95,
    formula) plus inputs with their sources."""
    n, n_what = mod.untraced_count(c, meta, arm=arm)
    per_unit, per_what = mod.count_per_dose_unit(entry)
    if not per_unit:
        raise WorkbenchError(f"--dose {entry['dir']}: no count per dose unit ({per_what})")
    u, se_u = entry["slope_ms"] / per_unit, entry["slope_se_ms"] / per_unit
    return {"formula": mod.UNTRACED_FORMULA, **_predicted(n * u, abs(n) * se_u, entry["df"]),
            "inputs": {"n": {"value": n, "source": n_what},
                       "u_ms": {"value": u, "se": se_u, "source": (
                           f"dose-response {entry['dir']}: untimed slope {entry['slope_ms']:.4g} ms per "
                           f"{entry.get('unit') or 'unit'} over {entry['K']} processes, its se with the "
                           f"{entry.get('se_unit') or 'process'} as unit / {per_what}")}},
            "dose_dir": entry["dir"], "dose_commit": entry.get("commit"), "dose_linear": entry.get("linear"),
            "dose_se_units": entry.get("se_units"), "dose_se_unit_kind": entry.get("se_unit_kind")}


def process_model(models: list[dict], entry: dict | None = None, gpus: list[str] | None = None) -> dict:
    """The untraced prediction over a `--processes` folder from each process's (`model`): the mean of their
    predictions (the counts may differ with the batches), its relative se and df the dose slope's (the count is
    exact, so the processes' spread is not the prediction's uncertainty). Where the processes ran on exactly the
    machines of the dose `entry` (`gpus`, one per process; revision (7), the same-host design), the slope's relative
    se and df over the dose's processes instead of its machines."""
    p = float(np.mean([m["predicted_ms"] for m in models]))
    rel = max((m["predicted_se_ms"] / abs(m["predicted_ms"]) for m in models if m.get("predicted_ms")), default=0.0)
    keep = ("formula", "inputs", "dose_dir", "dose_commit", "dose_linear", "dose_se_units", "dose_se_unit_kind")
    out, df = {k: models[0].get(k) for k in keep}, models[0].get("predicted_df")
    if same_machines(entry, gpus):
        rel, df = entry["process_se_ms"] / abs(entry["slope_ms"]), entry["process_df"]
        u = out["inputs"]["u_ms"]
        out.update(dose_se_units=entry["K"], dose_se_unit_kind="processes (the dose's own machines)",
                   inputs={**out["inputs"], "u_ms": {**u, "se": abs(u["value"]) * rel, "source": u["source"] + (
                       " (revision (7): the verdict ran on exactly the dose's machines, so over its processes)")}})
    return {**out, **_predicted(p, abs(p) * rel, df)}


def same_machines(entry: dict | None, gpus: list[str] | None) -> bool:
    """Did a --processes verdict's processes run on exactly the machines (`gpus`) its dose's slope se was taken over
    (revision (7), the same-host design)? False where that se is over processes already."""
    machines = (entry or {}).get("machines") or []
    return bool(machines) and set(gpus or []) == set(machines)


def _predicted(p: float, se: float, df) -> dict:
    """predicted_ms, its se, df and 95% t-interval (NaN ends without a df)."""
    t = stats.t_quantile((1 + stats.CONFIDENCE) / 2, df) if df else float("nan")
    return {"predicted_ms": p, "predicted_se_ms": se, "predicted_df": df, "predicted_ci95": [p - t * se, p + t * se],
            "n_steps": None}


def revision() -> dict:
    """{"revision", "commit"} of this form (`common.module_revision`)."""
    return common.module_revision(sys.modules[__name__])
