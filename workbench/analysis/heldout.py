"""Held-out checks already run: every `analysis_vN.json` below a profiles root, one row per comparison.

    from workbench import analysis as an
    an.heldout_checks("profiles")   # design, machine, M, held-out estimate, PI, fraction inside, spread, verdict

Each file holds one
design's rule (a `prospective_vN.json`, committed before the run) applied unchanged to M new processes on a machine
the design did not pool. The numbers are read, never recomputed here. `claim` says whether the design is still the
comparison's claim (`processes.claim_designs`: the newest revision naming it) or a superseded one judged for the
record.
"""
from __future__ import annotations

import json
import os
import re

import pandas as pd

from workbench.analysis.process_level import claim_designs
from workbench.measure.machine_label import machine_label

HELDOUT_COLUMNS = ["name", "design", "claim", "machine", "M", "planned_M", "speedup", "shift_pct", "pi95_lo",
                   "pi95_hi", "inside", "inside_null_q05", "spread", "verdict", "mixed_environment", "source"]
ANALYSIS_FILE = re.compile(r"analysis_v\d+\.json")


def _spread(h: dict) -> str:
    """The rule's second test as its design states it: the SD of the held-out means against the predictive bound
    (a design with a machine component), or the variance ratio against its F interval (one machine)."""
    if "max_sd_log" in h:
        sd, bound = 100 * h["heldout_sd_log"], 100 * h["max_sd_log"]
        if bound >= 100:  # a design from 2 machines: the predictive bound on a new machine's spread says nothing
            return f"SD of the means {sd:.2f}% (the bound, {bound:.0f}%, is vacuous)"
        return f"SD of the means {sd:.2f}% ({'passes' if h.get('spread_ok', True) else 'FAILS'} <= {bound:.2f}%)"
    if "variance_ratio" in h:
        lo, hi = h["f_interval"]
        return f"variance ratio {h['variance_ratio']:.2f} [F interval {lo:.2f}, {hi:.2f}]"
    return "-"


def heldout_checks(root: str) -> pd.DataFrame:
    """One row per comparison of every `analysis_vN.json` below `root` (`HELDOUT_COLUMNS`), in folder order."""
    from workbench.analysis.loader import profiles_root
    root = profiles_root(root)
    if not os.path.isdir(root):
        return pd.DataFrame(columns=HELDOUT_COLUMNS)
    base = os.path.dirname(root)
    claims = {name: os.path.relpath(path, base) for name, path in claim_designs(root).items()}
    rows = []
    for d, dirs, files in os.walk(root):
        dirs.sort()
        for f in sorted(x for x in files if ANALYSIS_FILE.fullmatch(x)):
            path = os.path.join(d, f)
            with open(path, encoding="utf-8") as fh:
                a = json.load(fh)
            for name, h in (a.get("heldout") or {}).items():
                if not h.get("ran"):
                    continue
                rows.append({"name": name, "design": a["design"], "claim": claims.get(name) == a["design"],
                             "machine": machine_label(a.get("machine")), "M": h["ran"],
                             "planned_M": h.get("planned_M"), "speedup": h["heldout_speedup"],
                             "shift_pct": h["shift_pct"], "pi95_lo": h["pi95"][0], "pi95_hi": h["pi95"][1],
                             "inside": h["inside"], "inside_null_q05": h["inside_null_q05"], "spread": _spread(h),
                             "verdict": "holds" if h["ok"] else "fails",
                             "mixed_environment": h.get("mixed_environment"),
                             "source": os.path.relpath(path, base)})
    return pd.DataFrame(rows, columns=HELDOUT_COLUMNS)


def heldout_family(root: str) -> pd.DataFrame:
    """Every formal held-out check below `root`, once: the revised designs' (`heldout_checks`) and the first design's
    (an `analysis.json` that names its `design`; the same design, comparison and machine read twice is one check).
    Columns name, design, machine, M, speedup, pi95_lo, pi95_hi, inside, verdict, source. The family a surviving
    design belongs to: each failure was followed by a revised design checked on new machines."""
    from workbench.analysis.loader import profiles_root
    root = profiles_root(root)
    cols = ["name", "design", "machine", "M", "speedup", "pi95_lo", "pi95_hi", "inside", "verdict", "source"]
    rows = heldout_checks(root)[cols].to_dict("records") if os.path.isdir(root) else []
    base = os.path.dirname(root)
    for d, dirs, files in os.walk(root):
        dirs.sort()
        if "analysis.json" not in files:
            continue
        path = os.path.join(d, "analysis.json")
        with open(path, encoding="utf-8") as fh:
            a = json.load(fh)
        if not a.get("design"):
            continue
        machine = machine_label(a.get("machine"))
        for name, h in (a.get("heldout") or {}).items():
            if h.get("ran"):
                rows.append({"name": name, "design": a["design"], "machine": machine, "M": h["ran"],
                             "speedup": h["heldout_speedup"], "pi95_lo": h["pi95"][0], "pi95_hi": h["pi95"][1],
                             "inside": h["inside"], "verdict": "holds" if h["ok"] else "fails",
                             "source": os.path.relpath(path, base)})
    df = pd.DataFrame(rows, columns=cols)
    return df.drop_duplicates(["name", "design", "machine"], keep="first").reset_index(drop=True)
