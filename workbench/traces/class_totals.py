"""A traced step's time class by class, small enough to bring back without the trace, and two such steps read
against each other (`explain`): why is one step shorter than another that should do the same work?

    # one = the step expected to be the longer (e.g. one GPU), two = the other (e.g. rank 0 of two under FSDP2)

`class_totals(events)` per traced step (means over the traced steps):
- `components_ms`: `decompose.summary`, the step window partitioned (busy time charged to one kernel class, idle time
  by cause): these sum to `step_ms`, so two steps' differences sum to their step difference exactly;
- `by_pass_ms`: the same charged time split by pass (fwd / bwd / recompute / opt / "" outside the layers);
- `kernel_ms` / `kernel_count`: every kernel's duration summed by class (not a union: overlapping kernels count
  twice), with NCCL collectives as their own class `collective` (they run beside compute on their own streams);
- `top_kernels`: the TOP_KERNELS kernel names with the most time, with class, count and ms per step.

`explain(one, two, same_work_tol)` is the decision rule, fixed before the run that it reads:
- `reproduced`: the traced `two` step is shorter than the traced `one` step by more than `same_work_tol` (the
  difference seen in the timings shows in the traces too); else there is nothing to explain in these traces;
- `explained_by`: the fewest components, largest decrease first, whose decreases (one - two) add up to at least
  EXPLAIN_SHARE of the step difference; with, for each, its kernels whose time changed most (count and ms in each).
"""
from __future__ import annotations

import pandas as pd

from workbench.traces import decompose
from workbench.traces.dist_waits import COLLECTIVE_RE

TOP_KERNELS = 40
EXPLAIN_SHARE = 0.8
"""The components named must account for at least this share of the traced step difference."""


def class_totals(events: pd.DataFrame, top: int = TOP_KERNELS) -> dict:
    """The per-step means above, as plain numbers (JSON)."""
    s = decompose.summary(events)
    steps = len(decompose.step_windows(events))
    if s.empty or not steps:
        return {"steps": 0, "step_ms": None, "components_ms": {}, "by_pass_ms": {}, "kernel_ms": {},
                "kernel_count": {}, "top_kernels": []}
    comps = {r.component: float(r.ms) for r in s.itertuples() if r.component not in ("step_ms", "residual_ms")}
    b = decompose.breakdown(events, by_layer=True)
    b = b[b["component"] != "step_ms"]
    by_pass = {}
    for (pass_, comp), ms in b.groupby(["pass", "component"])["ms"].sum().items():
        by_pass.setdefault(str(pass_), {})[comp] = float(ms) / steps
    k = decompose.top_kernels(events, n=1 << 30)
    k["cls"] = [("collective" if COLLECTIVE_RE.search(str(n)) else c) for n, c in zip(k["name"], k["cls"])]
    return {"steps": steps, "step_ms": float(s.loc[s["component"] == "step_ms", "ms"].iloc[0]),
            "components_ms": comps, "by_pass_ms": by_pass,
            "kernel_ms": {c: float(v) for c, v in k.groupby("cls")["ms"].sum().items()},
            "kernel_count": {c: float(v) for c, v in k.groupby("cls")["count"].sum().items()},
            "top_kernels": [{"name": str(r.name), "cls": r.cls, "count": float(r.count), "ms": float(r.ms)}
                            for r in k.sort_values("ms", ascending=False).head(top).itertuples()]}


def diff(one: dict, two: dict) -> pd.DataFrame:
    """Component by component: one_ms, two_ms, decrease_ms (one - two), share of the step decrease; the `step_ms`
    row last (its decrease is the sum of the others)."""
    comps = list(dict.fromkeys([*decompose.COMPONENTS, *one["components_ms"], *two["components_ms"]]))
    d = one["step_ms"] - two["step_ms"]
    rows = [dict(component=c, one_ms=one["components_ms"].get(c, 0.0), two_ms=two["components_ms"].get(c, 0.0))
            for c in comps]
    rows.append(dict(component="step_ms", one_ms=one["step_ms"], two_ms=two["step_ms"]))
    out = pd.DataFrame(rows)
    out["decrease_ms"] = out["one_ms"] - out["two_ms"]
    out["share_of_decrease"] = out["decrease_ms"] / d if d else float("nan")
    return out


def kernel_diff(one: dict, two: dict, cls: str | None = None, n: int = 5) -> list[dict]:
    """The kernels (of class `cls`, or any) whose per-step time fell most from one to two: name, cls, count and ms
    in each (0 where a kernel is absent from one side's top list)."""
    a = {k["name"]: k for k in one["top_kernels"]}
    b = {k["name"]: k for k in two["top_kernels"]}
    rows = []
    for name in dict.fromkeys([*a, *b]):
        x, y = a.get(name, {}), b.get(name, {})
        c = x.get("cls") or y.get("cls")
        if cls is not None and c != cls:
            continue
        rows.append({"name": name, "cls": c, "one_count": x.get("count", 0.0), "two_count": y.get("count", 0.0),
                     "one_ms": x.get("ms", 0.0), "two_ms": y.get("ms", 0.0),
                     "decrease_ms": x.get("ms", 0.0) - y.get("ms", 0.0)})
    return sorted(rows, key=lambda r: -r["decrease_ms"])[:n]


def explain(one: dict, two: dict, same_work_tol: float) -> dict:
    """The decision rule of the module docstring."""
    if not one.get("steps") or not two.get("steps"):
        return {"reproduced": None, "explained_by": [], "reason": "a side has no traced step"}
    d = one["step_ms"] - two["step_ms"]
    table = diff(one, two)
    out = {"one_step_ms": one["step_ms"], "two_step_ms": two["step_ms"], "decrease_ms": d,
           "reproduced": bool(two["step_ms"] < (1 - same_work_tol) * one["step_ms"]),
           "rule": f"reproduced when the traced shorter step is below (1 - {same_work_tol}) x the other; explained "
                   f"by the fewest components, largest decrease first, that carry >= {EXPLAIN_SHARE:.0%} of the "
                   "decrease", "components": table.to_dict("records"), "explained_by": []}
    if not out["reproduced"]:
        out["reason"] = "the traced steps do not differ beyond the tolerance: nothing to explain in these traces"
        return out
    comp = table[table["component"] != "step_ms"].sort_values("decrease_ms", ascending=False)
    acc = 0.0
    for r in comp.itertuples():
        if r.decrease_ms <= 0 or acc >= EXPLAIN_SHARE * d:
            break
        acc += r.decrease_ms
        out["explained_by"].append({"component": r.component, "decrease_ms": r.decrease_ms,
                                    "share_of_decrease": r.decrease_ms / d,
                                    "kernels": kernel_diff(one, two, None if r.component in decompose.IDLE
                                                           else r.component)})
    out["explained_share"] = acc / d
    out["complete"] = bool(acc >= EXPLAIN_SHARE * d)
    return out
