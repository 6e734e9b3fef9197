"""Process-level claims: what a rerun of a headline comparison would show, one row per comparison that a
`python -m workbench.ab ... --processes K` campaign measured.

    from workbench import analysis as an
    an.process_claims("profiles")     # estimate, CI, prediction interval, K, R, machines, GPU minutes per comparison

One owner per number, read, never recomputed here:
- a held-out design fixed before its GPU run, `prospective.json` or a revision `prospective_vN.json` (the highest N
  naming a comparison is its claim; e.g.
  `profiles/2026-11-26_h100_replication/prospective.py`): its `prediction` per comparison
  (`workbench.measure.replication.machine_prediction`: every process of every machine, CI over the processes of
  those machines, a prediction interval for one process on another machine), its sigma / tau and GPU minutes;
- otherwise (per comparison: a folder a design pools for packing still gives its `all` row here) each
  `processes.json` with `estimates` (`workbench.ab.processes`): the optimized arm's
  `process_estimate` (one machine: the interval is for one more process there), GPU minutes from its wall times.
The shape (model, layers, tokens, attention, precision, lengths) comes from the campaign's run folders
(`analysis.comparisons`), so a claim lines up with the headline's single-run row of the same comparison.

A designed per-GPU job (`studies/gpu_lease/per_gpu.sh`: its folder's `design.json`; each run below it one process) has no
processes.json: `design_estimates` gives its per-shape estimate over processes (exp of the mean log speedup, a 95%
t-interval over them), the figure its COMMAND.txt and the prose quote.
"""
from __future__ import annotations

import json
import os
import re

import pandas as pd

PROCESS_COLUMNS = ["name", "baseline", "arm", "model", "layers", "tokens", "attn", "precision", "lengths",
                   "gpu_name", "speedup", "ci95_lo", "ci95_hi", "ci_scope", "pi95_lo", "pi95_hi", "pi_scope",
                   "pi_df", "K", "R", "machines", "sigma_pct", "tau_pct", "omega_pct", "gpu_minutes", "method",
                   "source", "verdict", "pi_power", "pi_published", "pi_why", "machine_spread"]
THESE = "the processes of the machines that ran"
ANOTHER = "one process on another machine"
SAME = "one more process on this machine"
DESIGN_FILE = re.compile(r"prospective(?:_v(\d+))?\.json")
"""A held-out design fixed before its run: `prospective.json`, revised as `prospective_v2.json`, ... (a revision names
the machines and processes it pools; per comparison the highest version is the claim)."""


def _read(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _pct(v):
    return None if v is None else 100 * float(v)


def _walk(root: str) -> tuple[list[str], list[str]]:
    """(the design files, the `--processes` folders holding processes.json) below `root`, in folder order: one walk."""
    designs, plain = [], []
    for d, dirs, files in os.walk(root):
        dirs.sort()
        designs += [os.path.join(d, f) for f in sorted(files) if DESIGN_FILE.fullmatch(f)]
        if "processes.json" in files:
            plain.append(d)
    return designs, plain


def _newest(designs: list[str]) -> dict[str, str]:
    newest: dict[str, tuple[int, str]] = {}
    for path in designs:
        v = int(DESIGN_FILE.fullmatch(os.path.basename(path)).group(1) or 1)
        for name in _read(path)["comparisons"]:
            if name not in newest or v > newest[name][0]:
                newest[name] = (v, path)
    return {name: path for name, (_, path) in newest.items()}


def claim_designs(root: str) -> dict[str, str]:
    """Per comparison the design file that is its claim below `root`: the highest version naming it (a revision
    supersedes its parent). The one owner of that choice (`process_claims`, `heldout_checks`)."""
    return _newest(_walk(root)[0])


def _verdict(ci95, K) -> str:
    from workbench.measure.stats import verdict
    return verdict(ci95, int(K)).replace("reps", "processes")


def _judge_interval(p: dict, plan: dict | None) -> dict:
    """A design's rerun verdict (its CI over the processes) and whether its prediction interval for another machine
    may be published (`measure.heldout_power.publishable`: its held-out rule's power against a no-effect machine),
    with the machines' spread said descriptively."""
    from workbench.measure import heldout_power
    v = _verdict(p["ci95"], p["K"])
    claim = "faster" if v == "faster" else ("slower" if v == "slower" else "none")
    if not plan or not plan.get("null"):
        pub = {"power": None, "publish": False, "why": "no held-out rule committed with it"}
    else:
        pub = heldout_power.publishable(p, plan["null"], claim=claim)
    return {"verdict": v, "pi_power": pub["power"], "pi_published": bool(pub["publish"]), "pi_why": pub["why"],
            "machine_spread": heldout_power.machine_spread_text(p)}


def process_claims(root: str, comps: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per comparison with a process-level claim below `root` (`PROCESS_COLUMNS`); `comps`
    (`analysis.comparisons(root)`, passed to save a reload) gives each claim its shape. A claim one of whose process
    folders declares the comparison void (VOID.json) is left out, as every frame leaves a void comparison out."""
    from workbench.analysis.loader import _scan, profiles_root
    from workbench.analysis.speedups import comparisons
    root = profiles_root(root)
    if not os.path.isdir(root):
        return pd.DataFrame(columns=PROCESS_COLUMNS)
    comps = comparisons(root) if comps is None else comps
    base = os.path.dirname(root)
    void = {(r["process_of"], n) for r in _scan(root) if r["process_of"] for n in r["void_comparisons"]}
    origin = {}  # a merged campaign's copied processes -> the campaigns they ran in (the loader counts those)
    for r in _scan(root):
        if r.get("copy_of") and r["process_of"]:
            origin.setdefault(r["process_of"], set()).add(os.path.dirname(r["copy_of"]))
    rows, covered = [], set()
    designs, plain = _walk(root)
    newest = _newest(designs)

    def shape(folders: list[str], name: str, arm: str) -> dict:
        rel = [os.path.relpath(f, base) for f in folders]
        rel += [o for f in rel for o in origin.get(f, ())]
        c = comps[comps["process_of"].isin(rel) & (comps["name"] == name) & (comps["arm"] == arm)]
        if c.empty:
            return {}
        r = c.iloc[0]
        return {k: r[k] for k in ("model", "layers", "tokens", "attn", "precision", "lengths", "gpu_name")}

    for path in designs:
        d, rec = os.path.dirname(path), _read(path)
        for name, c in rec["comparisons"].items():
            p = c["prediction"]
            # v1 names process folders relative to its own folder, later versions relative to the repo root
            jobs = sorted({os.path.dirname(os.path.join(base, f)) if f.startswith("profiles/") else
                           os.path.join(d, f.split("/")[0]) for fs in c["folders"].values() for f in fs})
            covered.update((os.path.abspath(j), name) for j in jobs)
            if newest[name] != path or any((os.path.relpath(j, base), name) in void for j in jobs):
                continue
            rows.append({"name": name, "baseline": c["baseline"], "arm": c["arm"], **shape(jobs, name, c["arm"]),
                         "speedup": p["speedup"], "ci95_lo": p["ci95"][0], "ci95_hi": p["ci95"][1],
                         "ci_scope": THESE, "pi95_lo": p["pi95"][0], "pi95_hi": p["pi95"][1],
                         "pi_scope": (f"{ANOTHER}; {p['J']} machines" if p["J"] > 1 else
                                      f"{ANOTHER}; 1 machine: no machine component measured"),
                         "pi_df": p.get("pi_df"), "K": p["K"], "R": max(p["R"]), "machines": p["J"],
                         "sigma_pct": _pct(c.get("sigma")), "tau_pct": _pct(c.get("tau")),
                         "omega_pct": _pct(p["omega"]), "gpu_minutes": c.get("gpu_minutes", c.get("estimate_gpu_minutes")), "method": p["method"],
                         "source": os.path.relpath(path, base), **_judge_interval(p, c.get("heldout_plan"))})
    for d in plain:
        rec = _read(os.path.join(d, "processes.json"))
        minutes = sum(float(p.get("wall_s") or 0) for p in rec.get("processes", [])) / 60  # the whole processes
        for e in rec.get("estimates") or []:
            if ("speedup" not in e or not e.get("pi95") or (os.path.relpath(d, base), e["comparison"]) in void
                    or (os.path.abspath(d), e["comparison"]) in covered):  # a design's comparison: its claim there
                continue
            rows.append({"name": e["comparison"], "baseline": e["baseline"], "arm": e["arm"],
                         **shape([d], e["comparison"], e["arm"]), "speedup": e["speedup"],
                         "ci95_lo": e["ci95"][0], "ci95_hi": e["ci95"][1], "ci_scope": THESE,
                         "pi95_lo": e["pi95"][0], "pi95_hi": e["pi95"][1], "pi_scope": f"{SAME}; 1 machine", "pi_df": e.get("df"),
                         "K": e["K"], "R": max(e["R"]), "machines": 1, "sigma_pct": _pct(e.get("sigma")),
                         "tau_pct": _pct(e.get("tau")), "omega_pct": None,
                         # the comparison's own wall time where the runs recorded it (a process that ran several
                         # comparisons: `--opt all`), else the processes' whole wall time
                         "gpu_minutes": round(e["wall_s"] / 60 if e.get("wall_s") else minutes, 1),
                         "method": e.get("method"), "source": os.path.relpath(os.path.join(d, "processes.json"),
                                                                             base),
                         "verdict": _verdict(e["ci95"], e["K"]), "pi_power": None, "pi_published": False,
                         "pi_why": "one machine: an interval for one more process there, not for another machine",
                         "machine_spread": "one machine: no machine-to-machine spread measured"})
    return pd.DataFrame(rows, columns=PROCESS_COLUMNS)


DESIGN_ESTIMATE_COLUMNS = ["process_of", "name", "baseline", "arm", "model", "layers", "tokens", "speedup", "ci95_lo",
                           "ci95_hi", "K"]


def design_estimates(root: str, comps: pd.DataFrame) -> pd.DataFrame:
    """Per designed per-GPU job (a `design.json` folder; `comps`: `analysis.comparisons(root)`, its `process_of`) and
    shape, each arm against its baseline over the job's processes (2 or more): exp(mean log speedup) with a 95%
    t-interval over the processes (`DESIGN_ESTIMATE_COLUMNS`)."""
    import numpy as np

    from workbench.analysis.loader import profiles_root
    from workbench.measure import results, stats
    keys = ["process_of", "name", "baseline", "arm", "model", "layers", "tokens"]
    if comps.empty or not set(keys + ["speedup"]) <= set(comps.columns):  # no runs (an empty frame has no columns)
        return pd.DataFrame(columns=DESIGN_ESTIMATE_COLUMNS)
    base = os.path.dirname(profiles_root(root))
    c = comps[comps["process_of"].notna() & comps["speedup"].notna()]
    c = c[c["process_of"].map(lambda p: os.path.isfile(os.path.join(base, str(p), results.DESIGN_FILE))).astype(bool)]
    rows = []
    for key, g in c.groupby(keys, sort=True):
        if len(g) < 2:
            continue
        ti = stats.t_interval([float(np.log(v)) for v in g["speedup"]], confidence=0.95)
        rows.append({**dict(zip(keys, key)), "speedup": float(np.exp(ti["mean"])),
                     "ci95_lo": float(np.exp(ti["ci"][0])), "ci95_hi": float(np.exp(ti["ci"][1])), "K": len(g)})
    return pd.DataFrame(rows, columns=DESIGN_ESTIMATE_COLUMNS)
