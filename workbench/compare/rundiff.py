"""What changed between two runs of one comparison and arm: each traced component's change in ms per step, with a
CI, flagged only when the change is real after multiplicity; and the timed step time's change beside it.

Why two kinds of unit. The traced steps of one run are the only samples of its components (the profiler traces a
few steps of one rep). When both runs traced the same batches in the same order (same model shape, data arguments
and traced-step count: `same_batches`), traced step i of A and of B ran the same batch, so a component's change is a
paired t on the per-batch differences: the batch-to-batch spread (documents per batch move attention by tens of
percent) cancels. Otherwise it is a Welch t on the two runs' traced steps (each step a unit; the runs are
independent, their variances differ). The timed step time has reps: its change is a Welch t on the two
runs' per-rep mean step times (the rep is the unit of independence, `workbench.measure.stats`), so the traced change is
checked against a number the profiler did not touch.

Alignment. Steps are the `wb/step` windows; a component is a kernel class or idle cause (`traces.decompose`), and
with `by_layer` also the layer and pass of our NVTX ranges (`wb/Lxx/fwd|recompute|bwd`, `wb/opt`). A component
present in one run only is 0 ms in the other; labels that exist in one run only are listed (`unmatched`).

Closure. The decomposition partitions every step window exactly, so the component changes add up to the traced
step-time change; the residual (traced change - sum of component changes) is stated, in ms and in percent.

Multiplicity. Each component gets a p-value (paired or Welch); Holm's step-down (`stats.holm`) over the components of the
table decides which are flagged (adjusted p <= 0.05, i.e. its CI excludes 0 after Holm). The printed CIs are the
unadjusted 95% intervals.
"""
from __future__ import annotations

import math
import os
import warnings

import numpy as np
import pandas as pd
from scipy import stats as sps

from workbench.measure import stats
from workbench.errors import WorkbenchError
from workbench.measure.results import engine_step_rows, has_results, load_run, safe_name
from workbench.traces import decompose
from workbench.traces.events import events_path, load_events

ALPHA = 1 - stats.CONFIDENCE


class DiffInputError(WorkbenchError, ValueError):
    """Bad input (a missing folder, comparison, arm or trace): the CLI prints it as one line and exits 2."""


# --- reading one side -----------------------------------------------------------------------------------------

trace_path = events_path
"""The saved events of one traced arm (`traces.events.events_path`)."""


def traced_pairs(run_dir: str) -> dict[str, list[str]]:
    """{comparison folder: [arm file stems]} of a run folder's traces."""
    root = os.path.join(run_dir, "traces")
    if not os.path.isdir(root):
        return {}
    out = {}
    for c in sorted(os.listdir(root)):
        d = os.path.join(root, c)
        if os.path.isdir(d):
            out[c] = sorted(f.split(".events.")[0] for f in os.listdir(d) if ".events." in f)
    return out


def real_name(run_dir: str, comparison: str) -> str:
    """The comparison's name in results.csv (`offload@layers=2`) for a name or its trace folder (`offload_layers_2`)."""
    res, _, _ = load_run(run_dir)
    names = [n for n in res["comparison"].dropna().unique() if safe_name(str(n)) == safe_name(comparison)]
    return comparison if comparison in names or not names else str(names[0])


def pick(run_a: str, run_b: str, comparison: str | None, arm: str | None) -> tuple[str, str]:
    """The (comparison, arm) both runs traced: as given, or the only one, or the summary's optimized arm."""
    for r in (run_a, run_b):
        if not has_results(r):
            raise DiffInputError(f"{r}: not a run folder (no results.csv)")
    ta, tb = traced_pairs(run_a), traced_pairs(run_b)
    common = sorted(set(ta) & set(tb))
    if not common:  # no --comparison can fix this: the traces are missing
        untraced = [r for r, t in ((run_a, ta), (run_b, tb)) if not t]
        why = (f"{' and '.join(untraced)} {'has' if len(untraced) == 1 else 'have'} no traces" if untraced else
               f"{run_a} traced {', '.join(ta)}; {run_b} traced {', '.join(tb)}")
        raise DiffInputError(f"no comparison is traced in both runs ({why}); re-run with --trace torch "
                             "(python -m workbench.ab ... --trace torch) to diff where the time went")
    if comparison is None:
        if len(common) != 1:
            raise DiffInputError(f"give --comparison: the runs both traced {', '.join(common)}")
        comparison = common[0]
    if safe_name(comparison) not in common:
        raise DiffInputError(f"comparison {comparison!r} is not traced in both runs (both traced: "
                             f"{', '.join(common) or 'none'})")
    comparison = real_name(run_a, comparison)
    arms = sorted(set(ta[safe_name(comparison)]) & set(tb[safe_name(comparison)]))
    if arm is None:
        _, summ, _ = load_run(run_a)
        opt = [(c.get("optimized") or {}).get("arm") for c in summ.get("comparisons", []) or []
               if c.get("name") == comparison]
        arm = opt[0] if opt and opt[0] and safe_name(opt[0]) in arms else (arms[0] if len(arms) == 1 else None)
        if arm is None:
            raise DiffInputError(f"give --arm: {comparison} has traced arms {', '.join(arms) or 'none'} in both runs")
    if safe_name(arm) not in arms:
        raise DiffInputError(f"arm {arm!r} of {comparison} is not traced in both runs (both: {', '.join(arms) or 'none'})")
    return comparison, arm


def component_steps(events: pd.DataFrame, by_layer: bool = False) -> pd.DataFrame:
    """Traced steps x components (ms), zeros filled, plus `step_ms`. Columns are component names, or
    "component|layer|pass" with `by_layer` ("" where no layer / pass applies)."""
    b = decompose.breakdown(events, by_layer=by_layer)
    if b.empty:
        return pd.DataFrame()
    if by_layer:
        b = b.assign(key=np.where(b["component"] == "step_ms", "step_ms",
                                  b["component"] + "|" + b["layer"].astype(str) + "|" + b["pass"].astype(str)))
    else:
        b = b.assign(key=b["component"])
    return b.pivot_table(index="step", columns="key", values="ms", aggfunc="sum").fillna(0.0)


def timed_rep_means(run_dir: str, comparison: str, arm: str) -> np.ndarray:
    """The per-rep mean of the timed step times (results.csv, the engine's rows) of one arm."""
    res, _, _ = load_run(run_dir)
    r = engine_step_rows(res[(res["comparison"] == comparison) & (res["arm"] == arm)])
    return r.groupby("rep")["value"].mean().to_numpy(dtype=float)


# --- statistics -----------------------------------------------------------------------------------------------

welch = stats.welch  # the one definition lives in workbench.measure.stats


def paired(a, b, confidence: float = stats.CONFIDENCE) -> dict:
    """mean(b - a) over matched steps with its paired t interval and two-sided p (scipy's `ttest_rel`).

    Constant differences: exact (p 0 when not 0, 1 when 0). Fewer than 2 pairs: no CI, p None."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    d = b - a
    out = {"delta_ms": float(d.mean()) if d.size else math.nan, "ci95": None, "p": None,
           "n_a": int(a.size), "n_b": int(b.size)}
    if d.size < 2:
        return out
    if np.ptp(d) == 0:
        return {**out, "ci95": [out["delta_ms"]] * 2, "p": 0.0 if out["delta_ms"] != 0 else 1.0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        t = sps.ttest_rel(b, a)
    ci = t.confidence_interval(confidence)
    return {**out, "ci95": [float(ci.low), float(ci.high)], "p": float(t.pvalue)}


DATA_ARGS = ("model", "layers", "tokens", "lengths", "batches", "seed", "steps", "attn", "experts")
"""meta.json args that decide which batch each traced step runs (`same_batches`)."""


def _meta_args(run_dir: str) -> dict:
    """meta.json's `args` of a run folder ({} when it has none): read alone, not the whole run."""
    import json
    try:
        with open(os.path.join(run_dir, "meta.json")) as f:
            return json.load(f).get("args") or {}
    except (OSError, ValueError):
        return {}


def same_batches(run_a: str, run_b: str, n_a: int, n_b: int) -> bool:
    """Did traced step i of both runs run the same batch? The same data arguments (DATA_ARGS, as recorded in each
    meta.json: the batches are a seeded function of them) and the same number of traced steps."""
    if n_a != n_b or n_a < 2:
        return False
    args = [_meta_args(r) for r in (run_a, run_b)]
    return all(args[0].get(k) == args[1].get(k) for k in DATA_ARGS) and bool(args[0])


def _split(key: str) -> dict:
    comp, _, rest = key.partition("|")
    layer, _, pass_ = rest.partition("|")
    return {"component": comp, "layer": layer, "pass": pass_}


def diff_tables(steps_a: pd.DataFrame, steps_b: pd.DataFrame, *, alpha: float = ALPHA, pair: bool = False) -> dict:
    """The change B - A of every component (ms per step) from two runs' `component_steps` tables; `pair`: row i of
    both ran the same batch (paired t), else Welch.

    Returns {"rows": [{component, layer, pass, a_ms, b_ms, delta_ms, ci95, p, p_holm, flagged}], "traced": the
    step-time change (Welch), "closure": {sum_components_ms, residual_ms, residual_pct}, "steps": {a, b}}."""
    keys = sorted((set(steps_a.columns) | set(steps_b.columns)) - {"step_ms"})
    a = steps_a.reindex(columns=keys + ["step_ms"]).fillna(0.0)
    b = steps_b.reindex(columns=keys + ["step_ms"]).fillna(0.0)
    test = paired if pair and len(a) == len(b) else welch
    rows = []
    for k in keys:
        w = test(a[k], b[k])
        rows.append({**_split(k), "a_ms": float(a[k].mean()), "b_ms": float(b[k].mean()), **w})
    adj = stats.holm([r["p"] for r in rows])
    for r, p in zip(rows, adj):
        r["p_holm"] = p
        r["flagged"] = bool(p is not None and p <= alpha)
    traced = test(a["step_ms"], b["step_ms"])
    total = float(sum(r["delta_ms"] for r in rows))
    resid = traced["delta_ms"] - total
    step_change = traced["delta_ms"]
    return {"rows": rows, "traced": traced,
            "closure": {"sum_components_ms": total, "residual_ms": resid,
                        "residual_pct": 100 * abs(resid) / abs(step_change) if step_change else None},
            "steps": {"a": int(len(a)), "b": int(len(b)), "components": len(keys)},
            "test": "paired by batch" if test is paired else "Welch"}


def timed_change(reps_a, reps_b) -> dict:
    """The timed step time's change B - A (ms): Welch t over the two runs' per-rep mean step times, and in percent
    of A's mean."""
    w = welch(reps_a, reps_b)
    base = float(np.mean(reps_a)) if len(reps_a) else math.nan
    return {**w, "a_ms": base, "b_ms": float(np.mean(reps_b)) if len(reps_b) else math.nan,
            "pct": 100 * w["delta_ms"] / base if base else None}


def unmatched(events_a: pd.DataFrame, events_b: pd.DataFrame) -> dict:
    """NVTX (layer, pass) labels traced in one run only: a sign that the runs are not the same model shape."""
    def labels(e):
        r = e[e["kind"] == "range"]
        return {f"{l}/{p}" for l, p in zip(r["layer"].fillna(""), r["pass"].fillna("")) if l or p}
    la, lb = labels(events_a), labels(events_b)
    return {"only_a": sorted(la - lb), "only_b": sorted(lb - la)}


def diff_runs(run_a: str, run_b: str, comparison: str | None = None, arm: str | None = None,
              by: str = "component") -> dict:
    """The whole diff of two run folders (see the module docstring); raises DiffInputError on bad input."""
    if by not in ("component", "layer"):
        raise DiffInputError(f"--by must be component or layer, not {by!r}")
    comparison, arm = pick(run_a, run_b, comparison, arm)
    ev = []
    for r in (run_a, run_b):
        path = trace_path(r, comparison, arm)
        try:
            ev.append(load_events(path))
        except Exception as e:  # an unreadable trace is bad input, not a crash
            raise DiffInputError(f"{path}: cannot read the trace ({type(e).__name__}: {e})") from None
    sa, sb = (component_steps(e, by_layer=by == "layer") for e in ev)
    if sa.empty or sb.empty:
        raise DiffInputError(f"{comparison}/{arm}: no wb/step windows in {'A' if sa.empty else 'B'}'s trace")
    out = diff_tables(sa, sb, pair=same_batches(run_a, run_b, len(sa), len(sb)))
    out.update(run_a=run_a, run_b=run_b, comparison=comparison, arm=arm, by=by,
               timed=timed_change(timed_rep_means(run_a, comparison, arm), timed_rep_means(run_b, comparison, arm)),
               unmatched=unmatched(*ev))
    return out


def moved(diff: dict) -> list[dict]:
    """The flagged rows, largest |change| first: what moved between the runs."""
    return sorted((r for r in diff["rows"] if r["flagged"]), key=lambda r: -abs(r["delta_ms"]))
