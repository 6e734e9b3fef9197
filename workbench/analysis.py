"""Tables and figures from run folders of the one results schema (`workbench/results.py`): what the notebooks and
`python -m workbench.readme_results` show.

    from workbench import analysis as an
    runs = an.discover("profiles")           # complete GPU runs; an.left_out("profiles") says what was not taken, why
    comps = an.comparisons("profiles")       # one row per comparison and arm: speedup, 95% CI, verdict, n pairs
    points, fit = an.sweep(comps)            # saving per layer count, linear fit (slope ms/layer with its CI)
    an.show(an.speedup_figure(comps))

A run folder holds `summary.json` (+ `meta.json`, `results.csv`; `traces/<comparison>/<arm>.events.parquet` with
`--trace`). A profiles root is a folder of such folders at any depth, or one run folder; a campaign folder's
`COMMAND.txt` (`job: command` lines) or `commands.json` names each sub-folder's command. Runs are kept when complete
(meta.json status "complete") and on a GPU; the others are listed by `left_out` with the reason.
Every statistic comes from `workbench.stats`; every frame has its units in its column names; figures take a frame
and return a plotly figure (`visualize=True` shows it). Notebooks only load, call and plot.
"""
from __future__ import annotations

import json
import math
import os
import re

import pandas as pd

from workbench import stats
from workbench.report import (breakdown_figure, claims_figure, cost_figure, show, speedup_figure,  # noqa: F401
                              speedup_figures,
                              steps_figure, sweep_figure, sweep_fit_figure,
                              timeline_figure)  # the figures live in report.py; re-exported here

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_PROFILES = os.path.join(REPO, "profiles")
KEEP_FROM_INCOMPLETE = ("nvtx_cost", "packing_sweep_llama")
"""Cut-off runs whose complete comparisons the README and the notebooks report (`include_incomplete_comparisons`):
profiles/2026-11-23_h100_engine/nvtx_cost was killed in its 4th comparison (nvtx:all, re-run as nvtx_cost_all); its
first three are complete in its summary.json (COMMAND.txt says so). profiles/2026-11-23_h100_verdicts/
packing_sweep_llama says "failed": its timings, counted pass and traces completed, then its verdicts step failed on
the device; its verdicts were computed afterwards from the committed events (that folder's COMMAND.txt says so)."""
RUN_COLUMNS = ["path", "folder", "job", "command", "device", "gpu_name", "status", "complete", "comparisons",
               "run_id", "git_sha", "torch", "transformers"]
LEFT_OUT_COLUMNS = ["path", "folder", "job", "status", "device", "command", "complete_comparisons",
                    "missing_comparisons", "reason"]
COMP_COLUMNS = ["folder", "job", "name", "opt", "model", "layers", "tokens", "attn", "precision", "gpu_name", "ranks",
                "role",
                "baseline", "arm", "baseline_ms", "arm_ms", "baseline_mean_ms", "arm_mean_ms", "speedup", "ci95_lo",
                "ci95_hi", "ci_contains_1", "verdict", "n_pairs", "n_units", "outlier_pairs", "summary_speedup",
                "summary_ci95_lo", "summary_ci95_hi", "summary_verdict", "summary_n_pairs", "equivalent",
                "syncs_baseline", "syncs_arm", "instrument_cost_pct", "run_status", "file", "command"]


def _json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _name(c: dict) -> str:
    return c.get("name") or c.get("opt") or "?"


def _empty(columns) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="object") for c in columns})


def profiles_root(profiles: str | None = None) -> str:
    """`profiles`, else $WB_PROFILES, else the checkout's profiles/ (absolute)."""
    return os.path.abspath(profiles or os.environ.get("WB_PROFILES") or DEFAULT_PROFILES)


def shown_path(path: str) -> str:
    """`path` relative to the checkout when inside it (what notebooks print: no machine-specific absolute paths in
    their committed outputs), else absolute."""
    p = os.path.abspath(path)
    return os.path.relpath(p, REPO) if p == REPO or p.startswith(REPO + os.sep) else p


def no_data(what: str, profiles: str | None = None) -> str:
    """The line a notebook prints where a folder has nothing of a kind."""
    return f"no data for {what} in {shown_path(profiles_root(profiles))}"


# --- discovery ---------------------------------------------------------------------------------------------------

NOT_A_MEASUREMENT = "not a measurement"
"""A campaign job status (commands.json) for a run that is left out of every table: a deliberately slowed run (the
gate's detection check, `workbench.inject`; newer runs say so in meta.json's `injected`)."""


def campaign_commands(folder: str) -> dict:
    """{job: {"command", "status", "note"}} of a campaign folder: `COMMAND.txt` `job: command` lines (preferred),
    `commands.json` jobs (status, note), `note:` lines of COMMAND.txt that start with a job's name."""
    out: dict = {}
    for j in (_json(os.path.join(folder, "commands.json")) or {}).get("jobs", []):
        out[j["name"]] = {"command": j.get("command"), "status": j.get("status"), "note": j.get("note")}
    path = os.path.join(folder, "COMMAND.txt")
    for line in open(path).read().splitlines() if os.path.isfile(path) else []:
        m = re.match(r"^([\w.-]+):\s+(.*)$", line.strip())
        if not m or m.group(1) in ("device", "command"):
            continue
        key, val = m.groups()
        if key == "note":  # "note: <job> was cut off ...": the job's note where commands.json has none
            job = val.split(" ")[0]
            if job in out and not out[job].get("note"):
                out[job]["note"] = val
        else:
            out.setdefault(key, {"status": None, "note": None})["command"] = val
    return out


def _run_dirs(root: str) -> list[str]:
    """Folders holding a summary.json or meta.json (the root itself when it is one), not descending into them."""
    found = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in ("traces", "logs") and not x.startswith("."))
        if "summary.json" in files or "meta.json" in files:
            found.append(d)
            dirs[:] = []
    return found


def _scan(profiles: str | None) -> list[dict]:
    """Every run folder below the root: its record and the reasons it could be left out."""
    root = profiles_root(profiles)
    base = os.path.dirname(root)
    recs = []
    for d in _run_dirs(root) if os.path.isdir(root) else []:
        s, m = _json(os.path.join(d, "summary.json")) or {}, _json(os.path.join(d, "meta.json")) or {}
        job = os.path.basename(d)
        camp = campaign_commands(os.path.dirname(d)).get(job, {})
        dev = m.get("device") if isinstance(m.get("device"), dict) else {}
        device = dev.get("type") or str(s.get("device") or "").split(":")[0] or None
        status = m.get("status") or s.get("status") or "unknown"
        comps = s.get("comparisons", [])
        v = m.get("versions") or {}
        rec = {"path": d, "folder": os.path.relpath(d, base), "job": job,
               "command": camp.get("command") or m.get("command"), "device": device,
               "gpu_name": dev.get("gpu_name") or (dev.get("name") if device == "cuda" else None), "status": status,
               "complete": bool(s.get("complete")) and status == "complete", "comparisons": len(comps),
               "run_id": s.get("run_id") or m.get("run_id"), "git_sha": m.get("git_sha"), "torch": v.get("torch"),
               "transformers": v.get("transformers"), "summary": s, "cpu": device != "cuda"}
        ok = [_name(c) for c in comps if c.get("status") == "ok"]
        rec["complete_comparisons"] = ", ".join(ok)
        rec["missing_comparisons"] = ", ".join(n for n in m.get("comparisons", []) if n not in ok)
        why = []
        if not s:
            why.append("no summary.json")
        elif not rec["complete"]:
            why.append(f"meta.json status {status!r}" + (f" ({m['reason']})" if m.get("reason") else "")
                       + (f"; campaign status {camp['status']!r}" if camp.get("status") else "")
                       + (f": {camp['note']}" if camp.get("note") else "")
                       + f"; complete in summary.json: {rec['complete_comparisons'] or 'none'}"
                       + (f"; not complete: {rec['missing_comparisons']}" if rec["missing_comparisons"] else ""))
        if m.get("injected") or camp.get("status") == NOT_A_MEASUREMENT:
            why.append(f"not a measurement: deliberately slowed ({m.get('injected') or camp.get('note')})")
        rec["incomplete_reason"] = "; ".join(why) or None
        rec["cpu_reason"] = f"CPU run (device {device}): a smoke test, not a GPU result" if rec["cpu"] else None
        recs.append(rec)
    return recs


def _kept(rec, include_cpu, include_incomplete) -> bool:
    return (include_cpu or not rec["cpu"]) and (include_incomplete or rec["incomplete_reason"] is None)


def discover(profiles: str | None = None, include_cpu: bool = False, include_incomplete: bool = False) -> pd.DataFrame:
    """Run folders below `profiles` (`RUN_COLUMNS`): complete GPU runs unless `include_cpu` / `include_incomplete`.
    `df.attrs["left_out"]` is `left_out(...)` with the same arguments."""
    recs = _scan(profiles)
    df = pd.DataFrame([r for r in recs if _kept(r, include_cpu, include_incomplete)], columns=RUN_COLUMNS)
    df.attrs["left_out"] = left_out(profiles, include_cpu, include_incomplete, _recs=recs)
    return df


def left_out(profiles: str | None = None, include_cpu: bool = False, include_incomplete: bool = False,
             _recs=None) -> pd.DataFrame:
    """The run folders `discover` leaves out with these arguments (`LEFT_OUT_COLUMNS`), `reason` saying why (CPU run;
    meta.json status, the campaign's status and note; which comparisons its summary.json holds complete)."""
    rows = []
    for r in _scan(profiles) if _recs is None else _recs:
        if not _kept(r, include_cpu, include_incomplete):
            why = [w for w, on in ((r["cpu_reason"], not include_cpu), (r["incomplete_reason"], not include_incomplete))
                   if w and on]
            rows.append({k: r[k] for k in LEFT_OUT_COLUMNS[:-1]} | {"reason": "; ".join(why)})
    return pd.DataFrame(rows, columns=LEFT_OUT_COLUMNS)


def _included(profiles, include_cpu=False, include_incomplete=False, include_incomplete_comparisons=False):
    """[(run record, [comparison dicts])]: every comparison of a kept run; with `include_incomplete_comparisons`
    (True, or job names / folders) also the comparisons whose own status is "ok" out of incomplete runs."""
    out, want = [], include_incomplete_comparisons
    for r in _scan(profiles):
        comps = r["summary"].get("comparisons", [])
        if _kept(r, include_cpu, include_incomplete):
            out.append((r, comps))
        elif want and (include_cpu or not r["cpu"]) and (want is True or r["job"] in want or r["folder"] in want):
            out.append((r, [c for c in comps if c.get("status") == "ok"]))
    return out


def _role(name: str, arm: str, is_optimized: bool) -> str:
    if name.startswith("nvtx:"):
        return "nvtx"
    return "aa" if arm.endswith("#2") else ("optimized" if is_optimized else "other")


def _arms(c: dict):
    """(arm dict, role) of every arm of a comparison, the baseline first (role "baseline")."""
    arms = [c.get("baseline"), c.get("optimized"), *c.get("others", [])]
    return [(a, "baseline" if i == 0 else _role(_name(c), a["arm"], i == 1)) for i, a in enumerate(arms) if a]


def _frame(rows: list, columns: list, numeric=()) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=columns) if rows else _empty(columns)
    for col in numeric:
        df[col] = pd.to_numeric(df[col], errors="coerce")
    return df


# --- comparisons ---------------------------------------------------------------------------------------------------

_STEP_CACHE: dict = {}


def step_samples(run_path: str) -> dict:
    """{comparison: [sample dicts (arm, rep, step, batch, step_ms)]} of a run folder's results.csv timed steps
    (cached per file and modification time)."""
    p = os.path.join(run_path, "results.csv")
    if not os.path.exists(p):
        return {}
    key = (p, os.path.getmtime(p))
    if key not in _STEP_CACHE:
        from workbench.results import engine_step_rows
        df = pd.read_csv(p)
        df = engine_step_rows(df[df["rep"].notna() & df["step"].notna()])
        out: dict = {}
        for name, g in df.groupby("comparison", sort=False):
            out[name] = [dict(arm=a, rep=int(r), step=int(st), batch=int(b) if b == b else 0, step_ms=float(v))
                         for a, r, st, b, v in zip(g["arm"], g["rep"], g["step"], g["batch"], g["value"])]
        _STEP_CACHE[key] = out
    return _STEP_CACHE[key]


def recomputed(run_path: str, comparison: str, baseline: str, arm: str) -> dict | None:
    """The speedup of `arm` over `baseline` recomputed from the run's results.csv with today's engine statistics
    (`workbench.engine.paired_comparison`: every pair, the rep as the unit, t with R-1 df, no verdict below
    `stats.MIN_UNITS` reps), with both arms' mean step (`baseline_mean_ms`, `arm_mean_ms`); None without rows. The
    summary.json of a run made before the rep-level statistics holds the old pair-bootstrap figures: the tables
    never read those."""
    from workbench import engine

    smp = step_samples(run_path).get(comparison)
    if not smp:
        return None
    mine = [dict(x) for x in smp if x["arm"] in (baseline, arm)]
    if not any(x["arm"] == arm for x in mine) or not any(x["arm"] == baseline for x in mine):
        return None
    res = engine.paired_comparison(mine, baseline, arm)
    mean = lambda a: float(pd.Series([x["step_ms"] for x in mine if x["arm"] == a]).mean())  # noqa: E731
    return {**res, "baseline_mean_ms": mean(baseline), "arm_mean_ms": mean(arm)}


def _run_precision(path: str) -> str:
    """The precision a run timed (meta.json's resolved `--precision`); runs from before the flag timed
    fp32 adapters without autocast on a bf16 base, so they read "fp32-adapters"."""
    args = (_json(os.path.join(path, "meta.json")) or {}).get("args") or {}
    return args.get("precision") or "fp32-adapters"


def comparisons(profiles: str | None = None, include_incomplete_comparisons=False, **discover_kw) -> pd.DataFrame:
    """One row per (run, comparison, arm other than the baseline) (`COMP_COLUMNS`): `speedup` = exp(mean per-rep
    log(mean baseline / mean arm)) over the paired steps with its 95% CI (t over reps, `ci95_lo/hi`), verdict,
    pairs and reps (`n_units`), recomputed from each run's results.csv (`recomputed`: the rep is the unit, every
    pair counts); `baseline_mean_ms` / `arm_mean_ms` are the arms' mean timed steps (what the speedup is a ratio
    of), `baseline_ms` / `arm_ms` their medians; `summary_*` the figures the run's summary.json holds (for runs
    before the rep-level statistics: the pair bootstrap, outliers dropped); `role` optimized / other / aa (A/A: the
    baseline against itself) / nvtx (NVTX ranges off -> on); `file` the summary.json it comes from.
    `include_incomplete_comparisons`: True, or job names (e.g. `KEEP_FROM_INCOMPLETE`), to take the comparisons
    whose own status is ok out of incomplete runs; `discover_kw`: include_cpu, include_incomplete."""
    rows = []
    for r, comps in _included(profiles, include_incomplete_comparisons=include_incomplete_comparisons,
                              **discover_kw):
        for c in comps:
            b = c.get("baseline") or {}
            for a, role in _arms(c)[1:]:
                v = a.get("vs_baseline") or {}
                olo, ohi = v.get("ci95") or [None, None]
                new = recomputed(r["path"], _name(c), b.get("arm"), a["arm"]) or {}
                lo, hi = new.get("ci95") or [None, None]
                rows.append({"folder": r["folder"], "job": r["job"], "name": _name(c), "gpu_name": r["gpu_name"]
                             or r["device"], **{k: c.get(k) for k in ("opt", "model", "layers", "tokens", "attn")},
                             "precision": c.get("precision") or _run_precision(r["path"]),
                             "ranks": int((c.get("distributed") or {}).get("world_size") or 1), "role": role,
                             "baseline": b.get("arm"), "arm": a["arm"], "baseline_ms": b.get("step_ms"),
                             "arm_ms": a.get("step_ms"),
                             "baseline_mean_ms": new.get("baseline_mean_ms", b.get("step_ms_mean")),
                             "arm_mean_ms": new.get("arm_mean_ms", a.get("step_ms_mean")),
                             "speedup": new.get("speedup"), "ci95_lo": lo,
                             "ci95_hi": hi, "ci_contains_1": None if lo is None else lo <= 1 <= hi,
                             "verdict": new.get("verdict"), "n_pairs": new.get("n_pairs"),
                             "n_units": new.get("n_units"), "outlier_pairs": new.get("outlier_pairs"),
                             "summary_speedup": v.get("speedup"), "summary_ci95_lo": olo, "summary_ci95_hi": ohi,
                             "summary_verdict": v.get("verdict"), "summary_n_pairs": v.get("n_pairs"),
                             "equivalent": a.get("equivalent"),
                             "syncs_baseline": b.get("syncs_per_step"), "syncs_arm": a.get("syncs_per_step"),
                             "instrument_cost_pct": a.get("instrument_cost_pct"), "run_status": r["status"],
                             "file": os.path.join(r["folder"], "summary.json"), "command": r["command"]})
    return _frame(rows, COMP_COLUMNS, ("baseline_ms", "arm_ms", "baseline_mean_ms", "arm_mean_ms", "speedup",
                                       "ci95_lo", "ci95_hi", "syncs_baseline", "syncs_arm", "instrument_cost_pct",
                                       "summary_speedup", "summary_ci95_lo", "summary_ci95_hi"))


def _rows(profiles, metrics, **kw) -> pd.DataFrame:
    """results.csv rows of `metrics` of the comparisons `comparisons(profiles, **kw)` reads, with their folder."""
    frames = []
    for r, comps in _included(profiles, **kw):
        p = os.path.join(r["path"], "results.csv")
        if comps and os.path.exists(p):
            df = pd.read_csv(p)
            df = df[df["metric"].isin(metrics) & df["comparison"].isin([_name(c) for c in comps])]
            frames.append(df.assign(folder=r["folder"]).astype({"rep": "Int64", "batch": "Int64", "step": "Int64"}))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


STEP_COLUMNS = ["folder", "comparison", "arm", "rep", "batch", "step", "step_ms", "opt", "model", "layers", "tokens"]


def steps(profiles: str | None = None, **kw) -> pd.DataFrame:
    """The timed steps (results.csv `step_ms` rows) of the comparisons `comparisons(...)` reads (`STEP_COLUMNS`)."""
    df = _rows(profiles, ["step_ms"], **kw)
    return _empty(STEP_COLUMNS) if df.empty else df.rename(columns={"value": "step_ms"})[STEP_COLUMNS]


def warmups(profiles: str | None = None, **kw) -> pd.DataFrame:
    """Warmup steps (`warmup_step_ms` rows: rep, batch, step) with each (arm, rep)'s `warmup_steps` and whether it
    settled (`warmup_settled`, 1/0) beside them."""
    cols = ["folder", "comparison", "arm", "rep", "batch", "step", "warmup_step_ms", "warmup_steps", "warmup_settled"]
    df = _rows(profiles, ["warmup_step_ms", "warmup_steps", "warmup_settled"], **kw)
    if df.empty:
        return _empty(cols)
    key = ["folder", "comparison", "arm", "rep"]
    per = df[df["metric"] != "warmup_step_ms"].pivot_table(index=key, columns="metric", values="value").reset_index()
    w = df[df["metric"] == "warmup_step_ms"].rename(columns={"value": "warmup_step_ms"})
    return w.merge(per, on=key, how="left").reindex(columns=cols)


# --- sweeps, instrument cost, syncs, savings ------------------------------------------------------------------------

def _log_se(speedup, lo, hi, n_units) -> float | None:
    """The se of log(speedup) behind a 95% CI: log half width / t_{0.975, n_units - 1} (None without a CI)."""
    from scipy import stats as sps
    try:
        if lo is None or hi is None or lo != lo or hi != hi or not lo > 0 or not n_units or n_units < 2:
            return None
        return (math.log(hi) - math.log(lo)) / 2 / float(sps.t.ppf(0.975, int(n_units) - 1))
    except (TypeError, ValueError):
        return None


def sweep(comps: pd.DataFrame, stat: str = "mean") -> tuple[pd.DataFrame, pd.DataFrame]:
    """Sweep comparisons (`name@key=value`) of `comparisons(...)`: (points, fit). points: per folder, group (name
    before '@'), arm and value x, `saving_ms` = baseline - arm step time (`stat` "mean": the arms' means, what the
    speedup is a ratio of; "median": their medians) with the speedup and its CI, and `saving_se_ms` = arm_mean x
    speedup x se(log speedup) (the rep-level CI's se, first order). fit: per folder, group, key and arm,
    `stats.linear_fit` of saving_ms on x, weighted (1/se²) where every point has an se: `slope_ms_per_x` (ms per
    layer in a layers sweep), `slope_ci95_lo/hi`, intercept_ms, r2, `weighted`."""
    pcols = ["folder", "group", "key", "x", "arm", "baseline", "baseline_ms", "arm_ms", "saving_ms", "saving_se_ms",
             "stat", "speedup", "ci95_lo", "ci95_hi", "n_pairs", "n_units", "file"]
    fcols = ["folder", "group", "key", "arm", "n_points", "xs", "slope_ms_per_x", "slope_ci95_lo", "slope_ci95_hi",
             "intercept_ms", "r2", "weighted", "stat", "file"]
    s = comps[comps["name"].astype(str).str.contains("@") & comps["role"].isin(["optimized", "other"])].copy()
    if s.empty:
        return _empty(pcols), _empty(fcols)
    s = pd.concat([s, s["name"].str.extract(r"^(?P<group>[^@]+)@(?P<key>[^=]+)=(?P<x>.+)$")], axis=1)
    s["x"] = pd.to_numeric(s["x"], errors="coerce")
    if stat == "mean":
        s["baseline_ms"], s["arm_ms"] = s["baseline_mean_ms"], s["arm_mean_ms"]
    s["saving_ms"], s["stat"] = s["baseline_ms"] - s["arm_ms"], stat
    s["saving_se_ms"] = [None if (se := _log_se(sp, lo, hi, n)) is None else a * sp * se for a, sp, lo, hi, n in
                         zip(s["arm_mean_ms"], s["speedup"], s["ci95_lo"], s["ci95_hi"], s["n_units"])]
    points = s.sort_values(["folder", "group", "arm", "x"]).reindex(columns=pcols).reset_index(drop=True)
    fits = []
    for (folder, group, key, arm), g in points.groupby(["folder", "group", "key", "arm"], sort=False):
        se = g["saving_se_ms"].tolist()
        weighted = all(v is not None and v == v and v > 0 for v in se)
        f = stats.linear_fit(g["x"].tolist(), g["saving_ms"].tolist(), se=se if weighted else None)
        lo, hi = f["slope_ci95"] or [None, None]
        fits.append({"folder": folder, "group": group, "key": key, "arm": arm, "n_points": f["n"],
                     "xs": ",".join(f"{x:g}" for x in g["x"]), "slope_ms_per_x": f["slope"], "slope_ci95_lo": lo,
                     "slope_ci95_hi": hi, "intercept_ms": f["intercept"], "r2": f["r2"], "weighted": weighted,
                     "stat": stat, "file": g["file"].iloc[0]})
    return points, _frame(fits, fcols)


COST_COLUMNS = ["instrument", "folder", "comparison", "arm", "role", "off_ms", "on_ms", "cost_pct", "speedup",
                "ci95_lo", "ci95_hi", "verdict", "n", "file"]


def instrument_cost(profiles: str | None = None, **kw) -> pd.DataFrame:
    """What the instruments cost (`COST_COLUMNS`). "sync counter": per arm of every comparison but the nvtx ones,
    off_ms = median timed step, on_ms = median step of the counted pass (counter on, one step per batch: n),
    cost_pct = 100 * (on/off - 1), no CI (the two are not paired). "nvtx ranges": per `nvtx:` comparison, off_ms /
    on_ms the means of the `-nvtx` / `+nvtx` arms, speedup over paired steps with its CI and verdict, recomputed
    from results.csv (`recomputed`: the rep as the unit); cost_pct = 100 * (1/speedup - 1)."""
    rows = []
    for r, comps in _included(profiles, **kw):
        base = {"folder": r["folder"], "file": os.path.join(r["folder"], "summary.json")}
        for c in comps:
            if _name(c).startswith("nvtx:"):
                off, on = c.get("baseline") or {}, c.get("optimized") or {}
                new = recomputed(r["path"], _name(c), off.get("arm"), on.get("arm")) or {}
                sp = new.get("speedup")
                lo, hi = new.get("ci95") or [None, None]
                rows.append({**base, "instrument": "nvtx ranges", "comparison": _name(c), "role": "nvtx",
                             "arm": (off.get("arm") or "").removesuffix("-nvtx"),
                             "off_ms": new.get("baseline_mean_ms", off.get("step_ms_mean")),
                             "on_ms": new.get("arm_mean_ms", on.get("step_ms_mean")),
                             "cost_pct": 100 * (1 / sp - 1) if sp else None,
                             "speedup": sp, "ci95_lo": lo, "ci95_hi": hi, "verdict": new.get("verdict"),
                             "n": new.get("n_pairs")})
                continue
            for a, role in _arms(c):
                off, on = a.get("step_ms"), a.get("instrumented_step_ms")
                rows.append({**base, "instrument": "sync counter", "comparison": _name(c), "arm": a["arm"],
                             "role": role, "off_ms": off, "on_ms": on,
                             "cost_pct": 100 * (on / off - 1) if on and off else None,
                             "n": (c.get("protocol") or {}).get("batches")})
    return _frame(rows, COST_COLUMNS, ("off_ms", "on_ms", "cost_pct", "speedup", "ci95_lo", "ci95_hi"))


SYNC_COLUMNS = ["folder", "comparison", "arm", "role", "syncs_per_step", "source", "source_syncs_per_step", "rank",
                "file"]


def syncs(profiles: str | None = None, top: int | None = 3, **kw) -> pd.DataFrame:
    """Syncs per step of every arm (counted pass) with its `top` source lines (`sync_sources_per_step`), one row per
    (arm, source), sources ranked by syncs per step; an arm without sources keeps one row with source None."""
    rows = []
    for r, comps in _included(profiles, **kw):
        for c in comps:
            for a, role in _arms(c):
                base = {"folder": r["folder"], "comparison": _name(c), "arm": a["arm"], "role": role,
                        "syncs_per_step": a.get("syncs_per_step"), "file": os.path.join(r["folder"], "summary.json")}
                src = sorted((a.get("sync_sources_per_step") or {}).items(), key=lambda kv: (-kv[1], kv[0]))
                rows += [{**base, "source": s, "source_syncs_per_step": n, "rank": k + 1}
                         for k, (s, n) in enumerate(src[:top] if top else src)] or [base]
    return _frame(rows, SYNC_COLUMNS)


SAVINGS_COLUMNS = ["folder", "comparison", "opt", "model", "layers", "tokens", "formula", "predicted_ms",
                   "measured_ms", "measured_over_predicted", "reason", "inputs", "file"]


def savings(profiles: str | None = None, **kw) -> pd.DataFrame:
    """Each A/B comparison's savings model (not the A/A or NVTX ones) as the engine wrote it (`SAVINGS_COLUMNS`):
    formula, predicted_ms (None where its inputs need a trace: `reason`), measured_ms, measured_over_predicted.
    Whether the models hold is a later issue."""
    rows = []
    for r, comps in _included(profiles, **kw):
        for c in comps:
            sm = c.get("savings_model") or {}
            if sm and _arms(c)[1:2] and _arms(c)[1][1] == "optimized":  # an A/A or NVTX comparison saves nothing
                p, m = sm.get("predicted_ms"), sm.get("measured_ms")
                rows.append({"folder": r["folder"], "comparison": _name(c),
                             **{k: c.get(k) for k in ("opt", "model", "layers", "tokens")},
                             "formula": sm.get("formula"), "predicted_ms": p, "measured_ms": m,
                             "measured_over_predicted": m / p if p and m is not None else None,
                             "reason": sm.get("reason"), "inputs": json.dumps(sm.get("inputs") or {}, default=str),
                             "file": os.path.join(r["folder"], "summary.json")})
    return _frame(rows, SAVINGS_COLUMNS, ("predicted_ms", "measured_ms", "measured_over_predicted"))


def witness_ops(profiles: str | None = None) -> pd.DataFrame:
    """The op-by-op sync witness of a campaign (`witness_ops/witness.json`: op, counter, cpu_only,
    cuda_debug_warnings), with `agree` = the counter and CUDA's debug mode count the same."""
    rows = []
    for d, _, files in os.walk(profiles_root(profiles)):
        if "witness.json" in files:
            rows += [{**w, "folder": d, "agree": w.get("counter") == w.get("cuda_debug_warnings")}
                     for w in _json(os.path.join(d, "witness.json")) or []]
    return pd.DataFrame(rows, columns=["folder", "op", "counter", "cpu_only", "cuda_debug_warnings", "agree"])


# --- the claims we check (README) ----------------------------------------------------------------------------------------

CLAIM_COLUMNS = ["opt", "upstream", "model", "gpu", "scope", "claimed_low_pct", "claimed_high_pct", "claimed_extra",
                 "claim"]


def claims_table() -> pd.DataFrame:
    """The Unsloth / NVIDIA articles' claims (README, "The claims we check") as numbers. `scope`: step (per batch / steps/s), fwd, bwd,
    hotspot_fwd / hotspot_bwd (the MoE routing block alone), model (a prediction of the (L-1)·m model), mask_ms
    (cost of one packed SDPA mask rebuild), syncs. Gains are throughput gains in percent (baseline/optimized - 1);
    `claimed_extra` carries non-percent figures (ms, GB of extra VRAM)."""
    nan = float("nan")
    rows = [
        ("packing", "unsloth #4243", "qwen3-14b", None, "fwd", 43.3, 43.3, None, "Qwen3-14B QLoRA SFT: forward +43.3%"),
        ("packing", "unsloth #4243", "qwen3-14b", None, "bwd", 5.8, 5.8, None, "backward +5.8%"),
        ("packing", "unsloth #4243", "qwen3-14b", None, "step", 14.3, 14.3, None, "per batch +14.3%"),
        ("packing", "unsloth #4243", None, "Blackwell", "mask_ms", nan, nan, "13.7 ms",
         "a packed SDPA mask rebuild costs ~13.7 ms"),
        ("packing", "unsloth #4243", "llama-3.2-1b", None, "model", 11.5, 11.5, "L=16",
         "(L-1)*m predicts +11.5% for Llama-3.2-1B (16 layers)"),
        ("packing", "unsloth #4243", "qwen3-0.6b", None, "model", 14.8, 14.8, "L=28",
         "(L-1)*m predicts +14.8% for Qwen3-0.6B (28 layers)"),
        ("offload", "unsloth-zoo #534", "8B", "B200", "step", 8.40, 8.40, "+0.37 GB VRAM",
         "8B +8.40% steps/s (+0.37 GB VRAM)"),
        ("offload", "unsloth-zoo #534", "14B", "B200", "step", 6.70, 6.70, "+0.47 GB VRAM",
         "14B +6.70% (+0.47 GB)"),
        ("offload", "unsloth-zoo #534", "32B", "B200", "step", 4.61, 4.61, "+0.23 GB VRAM",
         "32B +4.61% (+0.23 GB)"),
        ("moe", "unsloth-zoo #535", "gpt-oss-20b", None, "step", 10.0, 15.0, None, "end-to-end +10-15%"),
        ("moe", "unsloth-zoo #535", "gpt-oss-20b", None, "hotspot_fwd", 23.0, 23.0, None, "hotspot forward +23%"),
        ("moe", "unsloth-zoo #535", "gpt-oss-20b", None, "hotspot_bwd", 13.0, 13.0, None, "hotspot backward +13%"),
        ("moe", "unsloth-zoo #535", "gpt-oss-20b", None, "syncs", nan, nan, "num_experts -> 1 dynamic queries",
         "dynamic queries num_experts -> 1 (each CUDA bincount reads back twice more: ~3 per layer)"),
        ("all", "all three", None, None, "step", 25.0, 25.0, None,
         "\"~25%\", not additive; varies with model, backend, GPU memory"),
    ]
    return pd.DataFrame(rows, columns=CLAIM_COLUMNS)


def same_model(claim_model, our_model) -> bool:
    """Whether our model is the claim's: the same preset, or the same size where the claim names only a size
    ("8B" matches llama-3.1-8b)."""
    if not claim_model or not isinstance(our_model, str):
        return False
    c, o = str(claim_model).lower(), our_model.lower()
    size = lambda s: (re.findall(r"(\d+(?:\.\d+)?b)\b", s) or [None])[-1]  # noqa: E731
    return c == o or ("-" not in c and size(c) is not None and size(c) == size(o))


def claims_vs_ours(comps: pd.DataFrame) -> pd.DataFrame:
    """Each claim beside our comparisons of the same optimization (`comps` = `comparisons(...)`; the optimized arm,
    sweeps left out): scope "step" gets our speedup as a gain, `ours_pct` = 100 * (speedup - 1) with its 95% CI
    (`ours_ci95_lo_pct`/`hi`), verdict and pairs; scope "syncs" our syncs per step; the other scopes (fwd, bwd, model,
    mask, hotspot) are not paired measurements here: one row with note "not measured"."""
    extra = ["ours_model", "layers", "tokens", "ours_gpu", "arm", "ours_pct", "ours_ci95_lo_pct", "ours_ci95_hi_pct",
             "verdict", "n_pairs", "ours_extra", "same_model", "note", "file"]
    ours = comps[(comps["role"] == "optimized") & ~comps["name"].astype(str).str.contains("@")]
    rows = []
    for c in claims_table().to_dict("records"):
        m = ours[ours["opt"] == c["opt"]]
        if c["scope"] not in ("step", "syncs") or m.empty:
            rows.append({**c, "note": "no data" if m.empty else f"not measured (scope {c['scope']})"})
            continue
        for o in m.to_dict("records"):
            step = c["scope"] == "step"
            rows.append({**c, "ours_model": o["model"], "layers": o["layers"], "tokens": o["tokens"],
                         "ours_gpu": o["gpu_name"], "arm": f"{o['baseline']} -> {o['arm']}",
                         "ours_pct": 100 * (o["speedup"] - 1) if step else None,
                         "ours_ci95_lo_pct": 100 * (o["ci95_lo"] - 1) if step else None,
                         "ours_ci95_hi_pct": 100 * (o["ci95_hi"] - 1) if step else None,
                         "verdict": o["verdict"] if step else None, "n_pairs": o["n_pairs"] if step else None,
                         "ours_extra": None if step else f"syncs/step {o['syncs_baseline']:g} -> {o['syncs_arm']:g}",
                         "same_model": same_model(c["model"], o["model"]), "note": None, "file": o["file"]})
    df = pd.DataFrame(rows, columns=CLAIM_COLUMNS + extra)
    for col in ("ours_pct", "ours_ci95_lo_pct", "ours_ci95_hi_pct"):
        df[col] = pd.to_numeric(df[col], errors="coerce")
    return df


# --- traces (events frames of workbench.traces) --------------------------------------------------------------------

def load_trace(path: str) -> pd.DataFrame:
    """The events frame of a trace file; a saved `.events.parquet` / `.events.csv.gz` beside a raw trace wins."""
    from workbench.traces import load_events

    for suf in (".pt.trace.json.gz", ".pt.trace.json", ".sqlite"):
        if path.endswith(suf):
            for ev in (".events.parquet", ".events.csv.gz"):
                if os.path.exists(path[: -len(suf)] + ev):
                    return load_events(path[: -len(suf)] + ev)
    return load_events(path)


def arm_events(profiles: str | None = None, **discover_kw) -> dict:
    """{(folder, comparison, arm): events frame} of the runs `discover` keeps:
    `traces/<comparison>/<arm>.events.parquet` (or .events.csv.gz, else the raw .pt.trace.json.gz / .sqlite, parsed)."""
    out: dict = {}
    for r in discover(profiles, **discover_kw).to_dict("records"):
        tdir = os.path.join(r["path"], "traces")
        for comp in sorted(os.listdir(tdir)) if os.path.isdir(tdir) else []:
            for fn in sorted(os.listdir(os.path.join(tdir, comp))):
                m = re.match(r"^(.+?)\.(events\.parquet|events\.csv\.gz|pt\.trace\.json(\.gz)?|sqlite)$", fn)
                if m and (r["folder"], comp, m.group(1)) not in out:
                    try:
                        out[(r["folder"], comp, m.group(1))] = load_trace(os.path.join(tdir, comp, fn))
                    except Exception:  # noqa: BLE001 - an unreadable trace is skipped
                        continue
    return out


def trace_diffs(events: dict, comps: pd.DataFrame, top: int = 15) -> pd.DataFrame:
    """`workbench.traces.diff_arms` of baseline -> arm for every comparison row of `comps` whose two arms were traced
    (the `top` largest |delta_ms| per pair), with folder, comparison, baseline, arm."""
    from workbench.traces import diff_arms

    frames = []
    for c in comps.to_dict("records"):
        a, b = (c["folder"], c["name"], c["baseline"]), (c["folder"], c["name"], c["arm"])
        if a in events and b in events:
            d = diff_arms(events[a], events[b])
            d = d.reindex(d["delta_ms"].abs().sort_values(ascending=False).index).head(top)
            frames.append(d.assign(folder=c["folder"], comparison=c["name"], baseline=c["baseline"], arm=c["arm"]))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def step_windows(events: pd.DataFrame) -> pd.DataFrame:
    """The training steps of a trace: `wb/step` host ranges (else ProfilerStep#N), in order: step, start_ns, end_ns."""
    r = events[(events["kind"] == "range") & events["stream"].isna()]
    s = r[r["name"] == "wb/step"]
    if s.empty:
        s = r[r["name"].astype(str).str.startswith("ProfilerStep#")]
    s = s.sort_values("start_ns")
    return pd.DataFrame({"step": range(len(s)), "start_ns": s["start_ns"].to_numpy(), "end_ns": s["end_ns"].to_numpy()})


STREAM_COLUMNS = ["stream", "role", "lane", "kernels", "kernel_ms", "memcpy", "memcpy_ms", "memcpy_bytes"]


def stream_roles(events: pd.DataFrame) -> pd.DataFrame:
    """Per GPU stream: kernels and copies (count, ms, bytes) and its role: "copy" when copies take more of its time
    than kernels (the offload reload stream), else "compute"."""
    g = events[events["stream"].notna() & events["kind"].isin(["kernel", "memcpy"])].copy()
    if g.empty:
        return _empty(STREAM_COLUMNS)
    g["dur_ms"] = (g["end_ns"] - g["start_ns"]) / 1e6
    rows = []
    for s, x in g.groupby("stream"):
        k, m = x[x["kind"] == "kernel"], x[x["kind"] == "memcpy"]
        role = "copy" if m["dur_ms"].sum() > k["dur_ms"].sum() else "compute"
        rows.append({"stream": int(s), "role": role, "lane": f"stream {int(s)} ({role})", "kernels": len(k),
                     "kernel_ms": float(k["dur_ms"].sum()), "memcpy": len(m), "memcpy_ms": float(m["dur_ms"].sum()),
                     "memcpy_bytes": float(pd.to_numeric(m["bytes"], errors="coerce").sum())})
    return pd.DataFrame(rows, columns=STREAM_COLUMNS)


TIMELINE_COLUMNS = ["lane", "category", "name", "layer", "pass", "part", "start_ms", "end_ms", "dur_ms"]


def _category(kind, name, pass_, part) -> str:
    if kind == "range":
        return {"attn/meta": "metadata build", "meta": "metadata build", "reload": "reload"}.get(
            part, str(part) if part else (pass_ or "range"))
    if kind == "memcpy":
        return f"copy {name}"
    if kind == "kernel":
        return f"kernel ({pass_})" if pass_ else "kernel"
    return kind


def _merge_kernels(tl: pd.DataFrame, gap_ms: float | None) -> pd.DataFrame:
    """Back-to-back kernels of one lane, category and layer (gaps <= `gap_ms`) merged into one bar "N kernels"."""
    k = tl["category"].astype(str).str.startswith("kernel")
    if gap_ms is None or not k.any():
        return tl
    out, cur = [], None
    for r in tl[k].sort_values(["lane", "start_ms"], kind="stable").to_dict("records"):
        if cur is not None and (r["lane"], r["category"], r["layer"]) == (cur["lane"], cur["category"], cur["layer"]) \
                and r["start_ms"] - cur["end_ms"] <= gap_ms:
            cur["end_ms"], cur["_n"] = max(cur["end_ms"], r["end_ms"]), cur["_n"] + 1
            continue
        out += [cur] if cur is not None else []
        cur = {**r, "_n": 1}
    for r in out + [cur]:
        r["name"] = f"{r['_n']} kernels" if r["_n"] > 1 else r["name"]
        r["dur_ms"] = r["end_ms"] - r["start_ms"]
    merged = pd.DataFrame(out + [cur]).drop(columns="_n")
    return pd.concat([tl[~k], merged], ignore_index=True).sort_values("start_ms", kind="stable").reset_index(drop=True)


def layer_timeline(events: pd.DataFrame, step: int = 0, layers=None, max_rows: int = 20000,
                   merge_gap_ms: float | None = 0.05) -> pd.DataFrame:
    """Rows to draw one traced step per layer (`TIMELINE_COLUMNS`, ms from the step's start): lanes "host"
    (wb/Lxx/fwd|recompute|bwd), "host parts", "host meta / reload", "host syncs", one per GPU stream by role.
    `layers` (e.g. ["L00"]) keeps those layers; kernels merged per `merge_gap_ms` (None keeps each)."""
    if events is None or events.empty:
        return _empty(TIMELINE_COLUMNS)
    win, ev = step_windows(events), events
    if len(win):
        w = win.iloc[min(step, len(win) - 1)]
        t0 = int(w["start_ns"])
        ev = ev[(ev["end_ns"] >= t0) & (ev["start_ns"] <= int(w["end_ns"]))]
    else:
        t0 = int(ev["start_ns"].min())
    ev = ev[ev["kind"].isin(["range", "kernel", "memcpy", "sync"])]
    ev = ev[~((ev["kind"] == "range") & ev["stream"].isna()) | ev["name"].astype(str).str.match(r"^wb/L\d+/")]
    if layers is not None:
        ev = ev[ev["layer"].isin(list(layers)) | (ev["layer"].isna() & ev["stream"].notna())]
    roles = stream_roles(events).set_index("stream")["lane"].to_dict() if events["stream"].notna().any() else {}
    rows = []
    for r in ev.head(max_rows).to_dict("records"):
        st = r["stream"]
        layer, pass_, part = (None if (v is None or v != v) else v for v in (r["layer"], r["pass"], r["part"]))
        cat = _category(r["kind"], r["name"], pass_, part)
        if st is not None and st == st:
            lane = roles.get(int(st), f"stream {int(st)}")
        elif r["kind"] == "sync":
            lane = "host syncs"
        else:
            lane = ("host meta / reload" if cat in ("metadata build", "reload") else "host parts") if part else "host"
        rows.append({"lane": lane, "category": cat, "name": r["name"], "layer": layer, "pass": pass_, "part": part,
                     "start_ms": (r["start_ns"] - t0) / 1e6, "end_ms": (r["end_ns"] - t0) / 1e6,
                     "dur_ms": (r["end_ns"] - r["start_ns"]) / 1e6})
    if not rows:
        return _empty(TIMELINE_COLUMNS)
    return _merge_kernels(pd.DataFrame(rows, columns=TIMELINE_COLUMNS), merge_gap_ms)


def meta_builds(events: pd.DataFrame) -> pd.DataFrame:
    """Packed-metadata builds (`wb/Lxx/attn/meta` ranges, GPU projections where traced) per layer and pass:
    builds_per_step, total_ms_per_step, median_ms (`stats.quantile`)."""
    from workbench.traces.analysis import ranges, steps_in

    cols = ["layer", "pass", "builds_per_step", "total_ms_per_step", "median_ms"]
    r = ranges(events, "auto")
    r = r[r["part"].isin(["attn/meta", "meta"])].copy() if len(r) else r
    if r.empty:
        return _empty(cols)
    n = steps_in(events)
    r["dur_ms"] = (r["end_ns"] - r["start_ns"]) / 1e6
    r["pass"] = r["pass"].fillna("")
    rows = [{"layer": la, "pass": p, "builds_per_step": len(g) / n, "total_ms_per_step": g["dur_ms"].sum() / n,
             "median_ms": stats.quantile(g["dur_ms"], 0.5)} for (la, p), g in r.groupby(["layer", "pass"])]
    return pd.DataFrame(rows, columns=cols)


# --- model FLOPs and MFU --------------------------------------------------------------------------------------------

MFU_COLUMNS = ["folder", "name", "model", "layers", "tokens", "attn", "attention_flops", "model_tflop_per_step",
               "arm", "step_mean_ms", "achieved_tflops", "mfu", "peak_tflops", "file"]


def mfu(profiles: str | None = None, **kw) -> pd.DataFrame:
    """Per arm of every comparison (`MFU_COLUMNS`): the model FLOPs of a step (`workbench.flops`, counted from the
    config and the run's own batches, rebuilt from meta.json's arguments; recompute left out), the achieved TFLOP/s
    over the arm's mean step time, and MFU against the device's dense bf16 peak (`flops.PEAK_BF16_DENSE_TFLOPS`).
    A run whose summary.json already holds `achieved_tflops` (runs since the FLOP count) is read as written."""
    from workbench import flops

    rows = []
    for r, comps in _included(profiles, **kw):
        args = (_json(os.path.join(r["path"], "meta.json")) or {}).get("args") or {}
        for c in comps:
            if _name(c).startswith("nvtx:"):
                continue
            try:
                per_batch = flops.for_comparison(
                    c["model"], c.get("layers"), c["tokens"], c.get("attn"), lengths=args["lengths"],
                    batches=args.get("batches") or len(c.get("batches") or []) or 1, seed=args.get("seed", 0),
                    lora_rank=args.get("lora_rank", 16), checkpointing=not args.get("no_checkpointing", False),
                    experts=args.get("experts"))
            except Exception:  # noqa: BLE001 - a run whose shape the count cannot rebuild is left out of this table
                continue
            model_flops = sum(f["model"] for f in per_batch) / len(per_batch)
            peak = flops.peak_tflops(r["gpu_name"] or "")
            for a, _ in _arms(c):
                ms = a.get("step_ms_mean") or a.get("step_ms")
                if not ms:
                    continue
                tf = a.get("achieved_tflops") or model_flops / (ms / 1e3) / 1e12
                rows.append({"folder": r["folder"], "name": _name(c), **{k: c.get(k) for k in
                             ("model", "layers", "tokens", "attn")}, "attention_flops": per_batch[0]["attention"],
                             "model_tflop_per_step": model_flops / 1e12, "arm": a["arm"], "step_mean_ms": ms,
                             "achieved_tflops": tf, "mfu": tf / peak if peak else None, "peak_tflops": peak,
                             "file": os.path.join(r["folder"], "summary.json")})
    return _frame(rows, MFU_COLUMNS, ("model_tflop_per_step", "step_mean_ms", "achieved_tflops", "mfu"))


# --- savings-model verdicts, step decompositions, breakdowns (summary.json of `workbench.verdicts`) ----------------

VERDICT_COLUMNS = ["folder", "comparison", "opt", "model", "layers", "tokens", "attn", "precision", "baseline", "arm",
                   "formula",
                   "predicted_ms", "predicted_ci95_lo", "predicted_ci95_hi", "measured_ms", "measured_ci95_lo",
                   "measured_ci95_hi", "n_pairs", "n_units", "n_steps", "bias_rel", "ratio", "ratio_ci90_lo",
                   "ratio_ci90_hi", "p_confirm", "p_confirm_holm", "p_refute", "p_refute_holm", "family_size",
                   "verdict", "reps_to_decide", "decide_note", "reason", "largest_missing",
                   "largest_missing_ms", "corrected_formula", "corrected_ms", "corrected_ci95_lo",
                   "corrected_ci95_hi", "corrected_ratio", "corrected_verdict", "published_formula", "published_ms",
                   "published_ci95_lo", "published_ci95_hi", "published_ratio", "published_ratio_ci90_lo",
                   "published_ratio_ci90_hi", "published_verdict", "published_decide_note", "terms", "inputs",
                   "gpu_name", "file"]


def _lohi(ci) -> tuple:
    return (ci[0], ci[1]) if isinstance(ci, (list, tuple)) and len(ci) == 2 else (None, None)


def _ctx(r: dict, c: dict) -> dict:
    """The columns naming a comparison: folder, comparison, opt, model, layers, tokens, attn, precision, baseline,
    arm."""
    return {"folder": r["folder"], "comparison": _name(c), **{k: c.get(k) for k in ("opt", "model", "layers",
                                                                                      "tokens", "attn")},
            "precision": c.get("precision") or _run_precision(r["path"]),
            "baseline": (c.get("baseline") or {}).get("arm"), "arm": (c.get("optimized") or {}).get("arm")}


def verdicts(profiles: str | None = None, include_incomplete_comparisons=False, **discover_kw) -> pd.DataFrame:
    """One row per comparison whose `savings_model` has a verdict (`VERDICT_COLUMNS`; `python -m workbench.verdicts`
    writes them after a traced run): the model's formula, predicted ms with its 95% CI (delta method over the traced
    steps), the measured paired saving (baseline - arm, mean over the engine's pairs) with its 95% CI and n pairs,
    measured / predicted with its 90% CI (the traced-vs-timed bias `bias_rel` included), the p-values raw and
    Holm-adjusted within the verdict's family, the verdict ("confirmed" | "refuted" | "inconclusive" | "no trace" |
    "not modelled" | "input check failed"; `workbench.verdicts` states the rule), reps_to_decide and its reason; for a refuted model the largest component it lacks and the corrected model's prediction and
    verdict; where the model extends a published form (offload: the first reload's term), that form's prediction and
    verdict on the same data (`published_*`). `inputs` and `terms` are JSON strings ({name: {value, source}}, {term: ms})."""
    rows = []
    for r, comps in _included(profiles, include_incomplete_comparisons=include_incomplete_comparisons,
                              **discover_kw):
        for c in comps:
            sm = c.get("savings_model") or {}
            if not sm.get("verdict"):
                continue
            plo, phi = _lohi(sm.get("predicted_ci95"))
            mlo, mhi = _lohi(sm.get("measured_ci95"))
            corr, miss = sm.get("corrected") or {}, sm.get("largest_missing") or {}
            clo, chi = _lohi(corr.get("predicted_ci95"))
            pub = sm.get("published") or {}
            pblo, pbhi = _lohi(pub.get("predicted_ci95"))
            rows.append({**_ctx(r, c), "formula": sm.get("formula"), "predicted_ms": sm.get("predicted_ms"),
                         "predicted_ci95_lo": plo, "predicted_ci95_hi": phi, "measured_ms": sm.get("measured_ms"),
                         "measured_ci95_lo": mlo, "measured_ci95_hi": mhi, "n_pairs": sm.get("measured_n_pairs"),
                         "n_units": sm.get("measured_n_units"), "n_steps": sm.get("n_steps"),
                         "bias_rel": sm.get("bias_rel"), "ratio": sm.get("ratio"),
                         "ratio_ci90_lo": _lohi(sm.get("ratio_ci90"))[0], "ratio_ci90_hi": _lohi(sm.get("ratio_ci90"))[1],
                         "p_confirm": sm.get("p_confirm"), "p_confirm_holm": sm.get("p_confirm_holm"),
                         "p_refute": sm.get("p_refute"), "p_refute_holm": sm.get("p_refute_holm"),
                         "family_size": sm.get("family_size"), "verdict": sm.get("verdict"),
                         "reps_to_decide": sm.get("reps_to_decide"), "decide_note": sm.get("decide_note"),
                         "reason": sm.get("reason"), "largest_missing": miss.get("component"),
                         "largest_missing_ms": miss.get("saved_ms"), "corrected_formula": corr.get("formula"),
                         "corrected_ms": corr.get("predicted_ms"), "corrected_ci95_lo": clo, "corrected_ci95_hi": chi,
                         "corrected_ratio": corr.get("ratio"), "corrected_verdict": corr.get("verdict"),
                         "published_formula": pub.get("formula"), "published_ms": pub.get("predicted_ms"),
                         "published_ci95_lo": pblo, "published_ci95_hi": pbhi, "published_ratio": pub.get("ratio"),
                         "published_ratio_ci90_lo": _lohi(pub.get("ratio_ci90"))[0],
                         "published_ratio_ci90_hi": _lohi(pub.get("ratio_ci90"))[1],
                         "published_verdict": pub.get("verdict"), "published_decide_note": pub.get("decide_note"),
                         "terms": json.dumps(sm.get("terms") or {}, default=str, sort_keys=True),
                         "inputs": json.dumps(sm.get("inputs") or {}, default=str, sort_keys=True),
                         "gpu_name": r["gpu_name"] or r["device"], "file": os.path.join(r["folder"], "summary.json")})
    return _frame(rows, VERDICT_COLUMNS, ("layers", "tokens", "predicted_ms", "predicted_ci95_lo", "predicted_ci95_hi",
                                          "measured_ms", "measured_ci95_lo", "measured_ci95_hi", "ratio",
                                          "largest_missing_ms", "corrected_ms", "corrected_ci95_lo",
                                          "corrected_ci95_hi", "corrected_ratio", "published_ms",
                                          "published_ci95_lo", "published_ci95_hi", "published_ratio", "n_units",
                                          "bias_rel", "ratio_ci90_lo", "ratio_ci90_hi", "p_confirm", "p_confirm_holm",
                                          "p_refute", "p_refute_holm", "reps_to_decide", "published_ratio_ci90_lo",
                                          "published_ratio_ci90_hi"))


DECOMPOSITION_COLUMNS = ["folder", "comparison", "opt", "model", "layers", "tokens", "attn", "baseline", "arm",
                         "component", "group", "baseline_ms", "arm_ms", "saved_ms", "file"]


def decomposition(profiles: str | None = None, include_incomplete_comparisons=False, **discover_kw) -> pd.DataFrame:
    """The rows of each comparison's `decomposition` (`DECOMPOSITION_COLUMNS`): per component (busy kernel classes,
    idle causes, `step_ms`, `residual_ms` = measured - traced), the baseline's and the arm's ms per traced step and
    the saving (baseline - arm)."""
    rows = []
    for r, comps in _included(profiles, include_incomplete_comparisons=include_incomplete_comparisons,
                              **discover_kw):
        for c in comps:
            for d in c.get("decomposition") or []:
                rows.append({**_ctx(r, c), **{k: d.get(k) for k in ("component", "group", "baseline_ms", "arm_ms",
                                                                      "saved_ms")},
                             "file": os.path.join(r["folder"], "summary.json")})
    return _frame(rows, DECOMPOSITION_COLUMNS, ("baseline_ms", "arm_ms", "saved_ms"))


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
    """What would move each traced arm closer to the GPU's limit (`LEVER_COLUMNS`; `workbench.levers`, written by
    `python -m workbench.verdicts` into each arm's breakdown): the component or kernel pattern, its ms per traced step
    and share of the step, and the lever, ranked."""
    rows = []
    for r, c, a, role, b in _traced_arms(profiles, include_incomplete_comparisons, discover_kw):
        rows += [{"folder": r["folder"], "comparison": _name(c), "arm": a, "role": role, "rank": i + 1,
                  **{k: x.get(k) for k in ("component", "ms", "share", "lever")},
                  "file": os.path.join(r["folder"], "summary.json")}
                 for i, x in enumerate(b.get("levers") or [])]
    return _frame(rows, LEVER_COLUMNS, ("ms", "share"))


# --- L sweeps of the measured saving, and the (L-1) test ----------------------------------------------------------

SWEEP_POINT_COLUMNS = ["folder", "group", "key", "x", "opt", "model", "tokens", "attn", "baseline", "arm",
                       "measured_ms", "measured_ci95_lo", "measured_ci95_hi", "measured_se_ms", "measured_df",
                       "n_pairs", "n_units", "measured_from", "predicted_ms", "verdict", "file"]
SWEEP_FIT_COLUMNS = ["folder", "group", "key", "opt", "model", "tokens", "attn", "baseline", "arm", "n_points", "xs",
                     "weighted", "slope_ms", "slope_ci95_lo", "slope_ci95_hi", "intercept_ms", "intercept_ci95_lo",
                     "intercept_ci95_hi", "r2", "at1_ms", "at1_ci95_lo", "at1_ci95_hi", "at1_ci90_lo", "at1_ci90_hi",
                     "margin_ms", "at1_zero", "l1_measured_ms", "l1_ci95_lo", "l1_ci95_hi", "l1_zero", "l_minus_1",
                     "l_minus_1_by", "model_at1_ms", "model_at1", "model_at1_by", "file"]
SWEEP_CONFIDENCE = 0.90
"""The equivalence tests at L = 1 use the fit's 90% CI (two one-sided tests at 5%)."""


def sweep_points(profiles: str | None = None, key: str = "layers", include_incomplete_comparisons=False,
                 **discover_kw) -> pd.DataFrame:
    """The points of every `name@<key>=N` sweep (`SWEEP_POINT_COLUMNS`): the measured saving of the optimized arm,
    the mean paired difference baseline - arm with its 95% CI, se and df at the rep level (`stats.paired_difference`
    over every pair, the rep as the unit), recomputed from each run's results.csv (`measured_from`); the model's
    prediction and verdict as `workbench.verdicts` wrote them into summary.json."""
    from workbench import engine

    rows = []
    for r, comps in _included(profiles, include_incomplete_comparisons=include_incomplete_comparisons,
                              **discover_kw):
        for c in comps:
            m = re.match(r"^(?P<group>[^@]+)@(?P<key>[^=]+)=(?P<x>.+)$", _name(c))
            if not m or m.group("key") != key or not c.get("optimized") or not c.get("baseline"):
                continue
            sm = c.get("savings_model") or {}
            base, arm = c["baseline"]["arm"], c["optimized"]["arm"]
            smp = step_samples(r["path"]).get(_name(c))
            if not smp:
                continue
            d = stats.paired_difference(*engine.pairs(smp, base, arm))
            lo, hi = _lohi(d["ci95"])
            rows.append({"folder": r["folder"], "group": m.group("group"), "key": key,
                         "x": pd.to_numeric(m.group("x"), errors="coerce"),
                         **{k: c.get(k) for k in ("opt", "model", "tokens", "attn")}, "baseline": base, "arm": arm,
                         "measured_ms": d["mean"], "measured_ci95_lo": lo, "measured_ci95_hi": hi,
                         "measured_se_ms": d["se"], "measured_df": d["df"], "n_pairs": d["n_pairs"],
                         "n_units": d["n_units"], "measured_from": "results.csv (paired difference, rep unit)",
                         "predicted_ms": sm.get("predicted_ms"), "verdict": sm.get("verdict"),
                         "file": os.path.join(r["folder"], "summary.json")})
    df = _frame(rows, SWEEP_POINT_COLUMNS, ("x", "measured_ms", "measured_ci95_lo", "measured_ci95_hi",
                                            "measured_se_ms", "measured_df", "predicted_ms"))
    return df.sort_values(["folder", "group", "arm", "x"], kind="stable").reset_index(drop=True)


def equivalence(ci, target: float, margin: float | None) -> str:
    """"confirmed" when `ci` (a 90% CI) lies inside target ± margin, "refuted" when it lies entirely outside,
    "inconclusive" otherwise ("untested" without a CI or a margin): two one-sided tests at 5% for the first, the
    one-sided test on the estimate's side for the second."""
    lo, hi = _lohi(ci)
    if lo is None or margin is None or not margin > 0:
        return "untested"
    if target - margin < lo and hi < target + margin:
        return "confirmed"
    if lo > target + margin or hi < target - margin:
        return "refuted"
    return "inconclusive"


def sweep_fits(profiles: str | None = None, points: pd.DataFrame | None = None, **kw) -> pd.DataFrame:
    """Per `name@layers=N` sweep (`SWEEP_FIT_COLUMNS`): weighted least squares of the measured saving on L
    (`stats.linear_fit`, weights 1/se² with each point's rep-level se; the points' CIs differ many-fold in width),
    slope (ms per layer) and intercept with their 95% CIs, and the fitted saving at L = 1 with its 95% and 90% CIs.

    The (L-1) form (no saving with one layer) is judged by equivalence within a stated margin, never by a CI that
    merely contains 0: margin = half of one layer's saving, |slope| / 2 (the midpoint between "(L-1): nothing at
    L = 1" and "one layer's saving at L = 1"). `l_minus_1` is "confirmed" (it holds) when the fit's 90% CI at L = 1
    lies inside ±margin, "refuted" when it lies entirely outside, "inconclusive" otherwise, "untested" without a CI
    (fewer than 3 points with an se). The measured L = 1 point, where the sweep ran one, is shown beside it
    (`l1_*`; `l1_zero`: its 95% CI contains 0, information only: the fit already uses it).

    The workbench's own model at L = 1 (`model_at1_ms`, the sweep's L = 1 prediction: one build for packing, one
    reload for offload) is judged by the same rule around its prediction: `model_at1` "confirmed" when the fit's
    90% CI at L = 1 lies inside model_at1_ms ± margin, "refuted" entirely outside, else "inconclusive"."""
    pts = sweep_points(profiles, **kw) if points is None else points
    rows = []
    for (folder, group, key, arm), g in pts.groupby(["folder", "group", "key", "arm"], sort=False):
        g = g.dropna(subset=["x", "measured_ms"]).sort_values("x")
        se = pd.to_numeric(g["measured_se_ms"], errors="coerce").tolist() if "measured_se_ms" in g else None
        f = stats.linear_fit(g["x"].tolist(), g["measured_ms"].tolist(), se=se, at=1)
        f90 = stats.linear_fit(g["x"].tolist(), g["measured_ms"].tolist(), se=se, at=1, confidence=SWEEP_CONFIDENCE)
        slo, shi = _lohi(f["slope_ci95"])
        ilo, ihi = _lohi(f["intercept_ci95"])
        at = f.get("at") or {}
        alo, ahi = _lohi(at.get("ci95"))
        blo, bhi = _lohi((f90.get("at") or {}).get("ci95"))
        margin = abs(f["slope"]) / 2 if f["slope"] is not None else None
        at1_zero = None if alo is None else bool(alo <= 0 <= ahi)
        one = g[g["x"] == 1]
        l1 = one.iloc[0] if len(one) else None
        l1_zero = None
        if l1 is not None and pd.notna(l1["measured_ci95_lo"]):
            l1_zero = bool(l1["measured_ci95_lo"] <= 0 <= l1["measured_ci95_hi"])
        verdict = equivalence((blo, bhi), 0.0, margin)
        by = "fewer than 3 points with an se" if blo is None else (
            f"fit at L=1: {at['y']:.1f} ms, 90% CI [{blo:.1f}, {bhi:.1f}] against 0 ± {margin:.1f} ms "
            f"(half of one layer's {abs(f['slope']):.1f} ms): " + {
                "confirmed": "inside", "refuted": "entirely outside",
                "inconclusive": "neither inside nor entirely outside"}.get(verdict, verdict))
        if l1 is not None and pd.notna(l1["measured_ci95_lo"]):
            by += (f"; measured at L=1: {l1['measured_ms']:.1f} ms [{l1['measured_ci95_lo']:.1f}, "
                   f"{l1['measured_ci95_hi']:.1f}] (95%, {int(l1['n_units'])} reps)")
        own = None if l1 is None or pd.isna(l1.get("predicted_ms")) else float(l1["predicted_ms"])
        own_verdict = None if own is None else equivalence((blo, bhi), own, margin)
        own_by = None if own is None or blo is None else (
            f"fit at L=1, 90% CI [{blo:.1f}, {bhi:.1f}] against {own:.1f} ± {margin:.1f} ms: " + {
                "confirmed": "inside", "refuted": "entirely outside",
                "inconclusive": "neither inside nor entirely outside"}.get(own_verdict, own_verdict))
        g0 = g.iloc[0] if len(g) else {}
        rows.append({"folder": folder, "group": group, "key": key,
                     **{k: g0.get(k) for k in ("opt", "model", "tokens", "attn", "baseline")}, "arm": arm,
                     "n_points": f["n"], "xs": ",".join(f"{x:g}" for x in g["x"]), "weighted": f["weighted"],
                     "slope_ms": f["slope"], "slope_ci95_lo": slo, "slope_ci95_hi": shi,
                     "intercept_ms": f["intercept"], "intercept_ci95_lo": ilo, "intercept_ci95_hi": ihi,
                     "r2": f["r2"], "at1_ms": at.get("y"), "at1_ci95_lo": alo, "at1_ci95_hi": ahi,
                     "at1_ci90_lo": blo, "at1_ci90_hi": bhi, "margin_ms": margin, "at1_zero": at1_zero,
                     "l1_measured_ms": None if l1 is None else l1["measured_ms"],
                     "l1_ci95_lo": None if l1 is None else l1["measured_ci95_lo"],
                     "l1_ci95_hi": None if l1 is None else l1["measured_ci95_hi"], "l1_zero": l1_zero,
                     "l_minus_1": verdict, "l_minus_1_by": by, "model_at1_ms": own, "model_at1": own_verdict,
                     "model_at1_by": own_by, "file": g0.get("file")})
    return _frame(rows, SWEEP_FIT_COLUMNS, ("tokens", "slope_ms", "slope_ci95_lo", "slope_ci95_hi", "intercept_ms",
                                            "intercept_ci95_lo", "intercept_ci95_hi", "r2", "at1_ms", "at1_ci95_lo",
                                            "at1_ci95_hi", "at1_ci90_lo", "at1_ci90_hi", "margin_ms",
                                            "l1_measured_ms", "l1_ci95_lo", "l1_ci95_hi", "model_at1_ms"))


# --- the same comparison across runs -------------------------------------------------------------------------------

CONFIG_KEY = ["name", "model", "layers", "tokens", "baseline", "arm", "precision", "ranks"]
"""The same comparison: ..., the same precision (another recipe is another step) and the same number of data-parallel
ranks (a 2-GPU step is not a 1-GPU step)."""


def _overlap(a_lo, a_hi, b_lo, b_hi) -> bool:
    return a_lo <= b_hi and b_lo <= a_hi


def runs_of(comps: pd.DataFrame, prefer=None) -> pd.DataFrame:
    """`comps` (`comparisons(...)`) with, per row, how many runs hold the same comparison (`CONFIG_KEY`: comparison,
    model, layers, tokens, baseline -> arm): `runs`, `chosen` (the run a headline reports: one of `prefer`, a set of
    (folder, comparison) such as the runs a savings-model verdict comes from, else the most pairs, then the later
    folder) and `agrees` (its 95% CI overlaps the chosen run's and the verdict is the same; True for the chosen)."""
    d = comps.copy()
    d["runs"], d["chosen"], d["agrees"] = 0, False, True
    if d.empty:
        return d
    want = set(prefer or ())
    key = d[CONFIG_KEY].astype(str).agg("|".join, axis=1)
    for _, idx in d.groupby(key, sort=False).groups.items():
        g = d.loc[idx].assign(_n=pd.to_numeric(d.loc[idx, "n_pairs"], errors="coerce").fillna(0),
                              _p=[(f, n) in want for f, n in zip(d.loc[idx, "folder"], d.loc[idx, "name"])])
        best = g.sort_values(["_p", "_n", "folder"], kind="stable").index[-1]
        b = d.loc[best]
        d.loc[idx, "runs"] = len(idx)
        d.loc[best, "chosen"] = True
        for i in idx:
            r = d.loc[i]
            ok = r["verdict"] == b["verdict"] and (pd.isna(r["ci95_lo"]) or pd.isna(b["ci95_lo"]) or _overlap(
                r["ci95_lo"], r["ci95_hi"], b["ci95_lo"], b["ci95_hi"]))
            d.loc[i, "agrees"] = bool(ok)
    return d


REPEAT_KEY = ["name", "baseline", "arm", "model", "layers", "tokens", "precision", "gpu_name", "ranks"]
REPEAT_COLUMNS = ["name", "baseline", "arm", "model", "layers", "tokens", "precision", "gpu_name", "ranks", "statistic", "folder_1",
                  "speedup_1", "ci95_lo_1", "ci95_hi_1", "se_log_1", "folder_2", "speedup_2", "ci95_lo_2",
                  "ci95_hi_2", "se_log_2", "z", "z2"]


def repeats(comps: pd.DataFrame, statistic: str = "rep") -> pd.DataFrame:
    """Do repeat runs agree? For each comparison (`REPEAT_KEY`: name (a sweep point's without its `@key=value`: the
    same shape is the same comparison), baseline -> arm, model, layers, tokens, precision where recorded) measured in two or more run folders, one row per pair of runs (`REPEAT_COLUMNS`):
    z = (log s1 - log s2) / sqrt(se1² + se2²), se = the log CI's half width / t. `statistic` "rep": the speedups
    `comparisons` recomputes (the rep as the unit, t with n_units - 1 df); "summary": the figures each summary.json
    holds (t with n_units - 1 df where its vs_baseline has n_units, else the pair bootstrap's CI with the normal
    quantile 1.96). Honest CIs give a mean z² near 1 (`df.attrs["mean_z2"]`, `df.attrs["n"]`)."""
    from scipy import stats as sps

    cols = {"rep": ("speedup", "ci95_lo", "ci95_hi", "n_units"),
            "summary": ("summary_speedup", "summary_ci95_lo", "summary_ci95_hi", None)}[statistic]
    d = comps.copy()
    for k in REPEAT_KEY:
        if k not in d:
            d[k] = None
    d["name"] = d["name"].astype(str).str.split("@").str[0]  # a sweep point at the main shape is the same comparison
    d = d[d[cols[0]].notna() & d[cols[1]].notna()]
    rows = []
    for _, g in ([] if d.empty else d.groupby(d[REPEAT_KEY].map(str).agg("|".join, axis=1), sort=False)):
        if g["folder"].nunique() < 2:
            continue
        recs = g.sort_values("folder", kind="stable").to_dict("records")

        def se(r):
            s_, lo, hi = (float(r[c]) for c in cols[:3])
            n = r.get(cols[3]) if cols[3] else None
            q = float(sps.t.ppf(0.975, int(n) - 1)) if n is not None and n == n and n >= 2 else 1.96
            return (math.log(hi) - math.log(lo)) / 2 / q

        for i in range(len(recs)):
            for j in range(i + 1, len(recs)):
                a, b = recs[i], recs[j]
                if a["folder"] == b["folder"]:
                    continue
                sa, sb = se(a), se(b)
                z = (math.log(a[cols[0]]) - math.log(b[cols[0]])) / math.sqrt(sa ** 2 + sb ** 2) \
                    if sa > 0 or sb > 0 else math.nan
                rows.append({**{k: a.get(k) for k in REPEAT_KEY}, "statistic": statistic,
                             "folder_1": a["folder"], "speedup_1": a[cols[0]], "ci95_lo_1": a[cols[1]],
                             "ci95_hi_1": a[cols[2]], "se_log_1": sa, "folder_2": b["folder"],
                             "speedup_2": b[cols[0]], "ci95_lo_2": b[cols[1]], "ci95_hi_2": b[cols[2]],
                             "se_log_2": sb, "z": z, "z2": z * z})
    out = _frame(rows, REPEAT_COLUMNS, ("speedup_1", "ci95_lo_1", "ci95_hi_1", "se_log_1", "speedup_2", "ci95_lo_2",
                                        "ci95_hi_2", "se_log_2", "z", "z2"))
    out.attrs["mean_z2"] = float(out["z2"].mean()) if len(out) else None
    out.attrs["n"] = len(out)
    return out


# --- what a notebook shows ----------------------------------------------------------------------------------------

PREVIEW_ROWS = 15
"""A notebook table shows at most this many rows; the whole table is on the results page (profiles/RESULTS.md) and
in the DataFrame the cell keeps."""


def preview(df: pd.DataFrame, what: str = "rows", n: int = PREVIEW_ROWS) -> pd.DataFrame:
    """The first `n` rows of `df`, after printing how many more there are and where they are."""
    if df is not None and len(df) > n:
        print(f"{len(df)} {what}; the first {n} below, every one on the results page (profiles/RESULTS.md) and in "
              "the DataFrame this cell keeps")
        return df.head(n)
    return df


def one_gpu(comps: pd.DataFrame) -> pd.DataFrame:
    """The rows of single-process runs (`ranks` 1 or unrecorded): what a one-GPU headline reports."""
    if "ranks" not in comps:
        return comps
    return comps[pd.to_numeric(comps["ranks"], errors="coerce").fillna(1) == 1]


RECIPE = "autocast"
"""The precision a headline reports where a comparison has runs of it (the CUDA default: Trainer's bf16=True); runs
from before `--precision` timed fp32 adapters and are reported only where nothing newer exists."""


def headline_runs(comps: pd.DataFrame) -> set:
    """(folder, comparison) of the one-GPU runs a headline reports, one per comparison (`runs_of`'s choice among the
    optimized arms, sweeps left out; the user's recipe `RECIPE` first, then the most pairs, then the later folder):
    the runs a notebook draws step by step."""
    d = one_gpu(comps[(comps["role"] == "optimized") & ~comps["name"].astype(str).str.contains("@")])
    if d.empty:
        return set()
    d = runs_of(d)
    c = d[d["chosen"]].assign(_recipe=lambda x: x["precision"].astype(str) == RECIPE,
                              _n=lambda x: pd.to_numeric(x["n_pairs"], errors="coerce").fillna(0))
    best = c.sort_values(["_recipe", "_n", "folder"], kind="stable").groupby("name", sort=False).tail(1)
    return set(zip(best["folder"], best["name"]))


def timeline_pairs(events: dict, comps: pd.DataFrame) -> list[tuple]:
    """One (folder, comparison, baseline, optimized arm) per optimization whose two arms' trace events were kept:
    the headline's run where it kept them, else the latest folder that did (sweep points left out)."""
    d = comps[(comps["role"] == "optimized") & ~comps["name"].astype(str).str.contains("@")]
    chosen = headline_runs(comps)
    out = []
    for name, g in d.groupby("name", sort=False):
        have = [r for r in g.to_dict("records")
                if (r["folder"], name, r["baseline"]) in events and (r["folder"], name, r["arm"]) in events]
        if have:
            best = sorted(have, key=lambda r: ((r["folder"], name) in chosen, r["folder"]))[-1]
            out.append((best["folder"], name, best["baseline"], best["arm"]))
    return out


def pair_timeline(events: dict, pair: tuple, layers=("L00", "L01")) -> pd.DataFrame:
    """`layer_timeline` of a pair's baseline and optimized arm in one frame, each lane prefixed by its arm (drawn as
    one figure: the two arms one above the other, on one time axis from each step's start)."""
    folder, name, base, arm = pair
    frames = []
    for a in (base, arm):
        tl = layer_timeline(events[(folder, name, a)], step=0, layers=list(layers) if layers else None)
        if len(tl):
            frames.append(tl.assign(lane=f"{a} · " + tl["lane"].astype(str)))
    return pd.concat(frames, ignore_index=True) if frames else _empty(TIMELINE_COLUMNS)
