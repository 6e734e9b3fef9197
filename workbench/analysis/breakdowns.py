"""Each traced arm's step breakdown, top kernels and levers (summary.json of `workbench.savings.verdicts`)."""
from __future__ import annotations

import os

import pandas as pd

from workbench.analysis.loader import _arms, _ctx, _frame, _included, _name


BREAKDOWN_COLUMNS = ["folder", "comparison", "opt", "model", "layers", "tokens", "attn", "arm", "role", "component",
                     "group", "ms", "share", "file"]
TOP_KERNEL_COLUMNS = ["folder", "comparison", "arm", "role", "rank", "name", "cls", "count", "ms", "share", "file"]


def _traced_arms(profiles, include_incomplete_comparisons, discover_kw):
    for r, comps in _included(profiles, include_incomplete_comparisons=include_incomplete_comparisons,
                              **discover_kw):
        for c in comps:
            roles = {a["arm"]: role for a, role in _arms(c)}
            for arm_name, b in (c.get("breakdown") or {}).items():
                yield r, c, arm_name, roles.get(arm_name), b or {}


def breakdown(profiles: str | None = None, include_incomplete_comparisons=False, **discover_kw) -> pd.DataFrame:
    """Each traced arm's step breakdown (`BREAKDOWN_COLUMNS`): per component (busy: gemm, attention, glue, copy,
    norm_elementwise, optimizer, other; idle: exposed_copy, sync_stall, launch_gap) its ms per traced step and share
    of the step; `role` baseline / optimized / other."""
    rows = []
    for r, c, a, role, b in _traced_arms(profiles, include_incomplete_comparisons, discover_kw):
        ctx = {k: v for k, v in _ctx(r, c).items() if k not in ("baseline", "arm")}
        rows += [{**ctx, "arm": a, "role": role, **{k: x.get(k) for k in ("component", "group", "ms", "share")},
                  "file": os.path.join(r["folder"], "summary.json")} for x in b.get("components") or []]
    return _frame(rows, BREAKDOWN_COLUMNS, ("ms", "share"))


def top_kernels(profiles: str | None = None, include_incomplete_comparisons=False, **discover_kw) -> pd.DataFrame:
    """Each traced arm's kernels with the most GPU time per step (`TOP_KERNEL_COLUMNS`: name, kernel class, count and
    ms per step, share of the busy time), ranked."""
    rows = []
    for r, c, a, role, b in _traced_arms(profiles, include_incomplete_comparisons, discover_kw):
        rows += [{"folder": r["folder"], "comparison": _name(c), "arm": a, "role": role, "rank": i + 1,
                  **{k: x.get(k) for k in ("name", "cls", "count", "ms", "share")},
                  "file": os.path.join(r["folder"], "summary.json")}
                 for i, x in enumerate(b.get("top_kernels") or [])]
    return _frame(rows, TOP_KERNEL_COLUMNS, ("count", "ms", "share"))


LEVER_COLUMNS = ["folder", "comparison", "arm", "role", "rank", "component", "ms", "share", "lever", "file"]


def levers(profiles: str | None = None, include_incomplete_comparisons=False, **discover_kw) -> pd.DataFrame:
    """What would move each traced arm closer to the GPU's limit (`LEVER_COLUMNS`; `workbench.traces.lever_advice`, written by
    `workbench verdicts` into each arm's breakdown): the component or kernel pattern, its ms per traced step
    and share of the step, and the lever, ranked."""
    rows = []
    for r, c, a, role, b in _traced_arms(profiles, include_incomplete_comparisons, discover_kw):
        rows += [{"folder": r["folder"], "comparison": _name(c), "arm": a, "role": role, "rank": i + 1,
                  **{k: x.get(k) for k in ("component", "ms", "share", "lever")},
                  "file": os.path.join(r["folder"], "summary.json")}
                 for i, x in enumerate(b.get("levers") or [])]
    return _frame(rows, LEVER_COLUMNS, ("ms", "share"))
