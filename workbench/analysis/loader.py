"""Run folders: found once per profiles root (cached on the files' modification times), their records and
comparisons handed to every table; the shared helpers of the tables."""
from __future__ import annotations

import copy
import json
import os
import re

import pandas as pd

from workbench.errors import EditedRun
from workbench.measure import markers, results
from workbench.analysis.constants import DEFAULT_LENGTHS, NOT_A_MEASUREMENT, PREVIEW_ROWS, REPO
from workbench.paths import profiles_root  # noqa: F401 - re-exported: `workbench.analysis.profiles_root`


RUN_COLUMNS = ["path", "folder", "job", "command", "device", "gpu_name", "status", "complete", "comparisons",
               "run_id", "git_sha", "torch", "transformers", "process_of", "void_comparisons"]
LEFT_OUT_COLUMNS = ["path", "folder", "job", "status", "device", "command", "complete_comparisons",
                    "missing_comparisons", "reason"]
VOID_COLUMNS = ["folder", "comparison", "opt", "model", "layers", "tokens", "ranks", "baseline", "arm", "void_reason",
                "void_found_by", "void_commit", "file"]
NOT_VOID = {"void_reason": None, "void_found_by": None, "void_commit": None}
"""The void fields of a comparison that no VOID.json voids (`results.void_comparisons`)."""


def _json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


_META_CACHE: dict = {}


def _meta(run_path: str) -> dict:
    """A run's meta.json ({} without one), read once per file version (path, mtime, size): the tables ask for a run's
    precision and length distribution once per row, and for its device once per recomputed speedup. Read-only: the
    dict is shared."""
    p = os.path.join(run_path, "meta.json")
    try:
        st = os.stat(p)
    except OSError:
        return {}
    key = (p, st.st_mtime_ns, st.st_size)
    if key not in _META_CACHE:
        _META_CACHE[key] = _json(p) or {}
    return _META_CACHE[key]


def _name(c: dict) -> str:
    return c.get("name") or c.get("opt") or "?"


def _empty(columns) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="object") for c in columns})


def shown_path(path: str) -> str:
    """`path` relative to the checkout when inside it (what notebooks print: no machine-specific absolute paths in
    their committed outputs), else absolute."""
    p = os.path.abspath(path)
    return os.path.relpath(p, REPO) if p == REPO or p.startswith(REPO + os.sep) else p


def no_data(what: str, profiles: str | None = None) -> str:
    """The line a notebook prints where a folder has nothing of a kind."""
    return f"no data for {what} in {shown_path(profiles_root(profiles))}"


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


_RUNS: dict = {}
"""{profiles root: (the stamps of the files read, the run records)}: the runs a root holds, read once while its
files are unchanged (every table calls `_scan`)."""


def _stamps(paths) -> tuple:
    """(path, modification time in ns, size) of each path; (path, None, None) for one that is not there."""
    out = []
    for p in paths:
        try:
            st = os.stat(p)
            out.append((p, st.st_mtime_ns, st.st_size))
        except OSError:
            out.append((p, None, None))
    return tuple(out)


def _scan(profiles: str | None) -> list[dict]:
    """Every run folder below the root: its record and the reasons it could be left out. Read once per root and
    kept while the files it reads (summary.json, meta.json, VOID.json, the campaign's COMMAND.txt / commands.json)
    are unchanged; callers read the records, never change them. A malformed VOID.json raises WorkbenchError."""
    root = profiles_root(profiles)
    dirs = _run_dirs(root) if os.path.isdir(root) else []
    stamps = _stamps([os.path.join(d, f) for d in dirs
                      for f in ("summary.json", "meta.json", results.VOID_FILE, *markers.MARKERS)]
                     + [os.path.join(c, f) for c in sorted({os.path.dirname(d) for d in dirs})
                        for f in ("commands.json", "COMMAND.txt")])
    cached = _RUNS.get(root)
    # a folder whose writer was alive at the last read may have died since with no file changed: read again while
    # one is running (a RUNNING file whose writer is already dead, e.g. a machine given back, stays "died")
    if cached is None or cached[0] != stamps or any(r["status"] == "running" for r in cached[1]):
        _RUNS[root] = (stamps, _read_runs(root, dirs))
    return _RUNS[root][1]


def _read_runs(root: str, dirs: list[str]) -> list[dict]:
    """The records of the run folders `dirs` below `root` (see `_scan`)."""
    base = os.path.dirname(root)
    recs = []
    for d in dirs:
        s, m = _json(os.path.join(d, "summary.json")) or {}, _json(os.path.join(d, "meta.json")) or {}
        job = os.path.basename(d)
        camp = campaign_commands(os.path.dirname(d)).get(job, {})
        dev = m.get("device") if isinstance(m.get("device"), dict) else {}
        device = _device_type(s, m)
        status, why_state = markers.state(d, m)  # RUNNING / INCOMPLETE / FAILED files; a dead writer is "died"
        if status == "unknown":
            status = s.get("status") or "unknown"
        said = m.get("status")
        if status == "died":  # the writer is gone: what meta.json still says, and why it is not so
            said = f"{said!r}, read as 'died'"
            m = {**m, "reason": why_state}
        else:
            said = repr(status)
        void = results.void_comparisons(d, [_name(c) for c in s.get("comparisons", [])]
                                        + [n for n in m.get("comparisons", []) if isinstance(n, str)])
        comps = [{**c, **void.get(_name(c), NOT_VOID)} for c in s.get("comparisons", [])]
        s = {**s, "comparisons": comps} if s else s
        v = m.get("versions") or {}
        parent = os.path.dirname(d)
        rec = {"path": d, "folder": os.path.relpath(d, base), "job": job,
               "process_of": _process_of(parent, base),
               "command": camp.get("command") or m.get("command"), "device": device,
               "gpu_name": dev.get("gpu_name") or (dev.get("name") if device == "cuda" else None), "status": status,
               "complete": bool(s.get("complete")) and status == "complete", "comparisons": len(comps),
               "run_id": s.get("run_id") or m.get("run_id"), "git_sha": m.get("git_sha"), "torch": v.get("torch"),
               "transformers": v.get("transformers"), "summary": s, "cpu": device != "cuda",
               "void_comparisons": list(void)}
        ok = [_name(c) for c in comps if c.get("status") == "ok"]
        rec["complete_comparisons"] = ", ".join(ok)
        rec["missing_comparisons"] = ", ".join(n for n in m.get("comparisons", []) if n not in ok)
        why = []
        if not s:
            why.append("no summary.json")
        elif not rec["complete"]:
            why.append(f"meta.json status {said}" + (f" ({m['reason']})" if m.get("reason") else "")
                       + (f"; campaign status {camp['status']!r}" if camp.get("status") else "")
                       + (f": {camp['note']}" if camp.get("note") else "")
                       + f"; complete in summary.json: {rec['complete_comparisons'] or 'none'}"
                       + (f"; not complete: {rec['missing_comparisons']}" if rec["missing_comparisons"] else ""))
        try:  # results.csv against summary.json's record of it: an edited folder is left out, said so
            rec["integrity"], rec["edited"] = results.verify(d, s, status), None
        except EditedRun as e:
            rec["integrity"], rec["edited"] = "edited", str(e)
        if m.get("injected") or camp.get("status") == NOT_A_MEASUREMENT:
            why.append(f"not a measurement: deliberately slowed ({m.get('injected') or camp.get('note')})")
        rec["incomplete_reason"] = "; ".join(why) or None
        rec["cpu_reason"] = f"CPU run (device {device}): a smoke test, not a GPU result" if rec["cpu"] else None
        recs.append(rec)
    _copies(recs)
    return recs


def _copies(recs: list[dict]) -> None:
    """Mark each process folder of a merged campaign that copies another (the same run_id twice below the root) as
    left out, `copy_of` naming the kept one: a merge (`processes_merge`, `dose_merge`) copies processes in, and
    studies/moe_two_term/moe_same_host.sh commits the campaigns beside their merge. The tables count a process once, where it
    ran (a folder outside a merged campaign first); the verdicts read a merged folder by its path."""
    by: dict = {}
    for r in recs:
        if r["run_id"]:
            by.setdefault(r["run_id"], []).append(r)
    for same in by.values():
        if len(same) < 2:
            continue
        merged = [_merged(os.path.dirname(r["path"])) for r in same]  # each folder's record read once
        keep = min(zip(merged, (r["folder"] for r in same), same), key=lambda t: t[:2])[2]
        for r, m in zip(same, merged):
            if r is not keep and m:  # a hand-made copy is the user's own
                r["copy_of"] = keep["folder"]
                why = f"a copy of {keep['folder']} (the same run_id; a merge copied it in)"
                r["incomplete_reason"] = "; ".join(x for x in (r["incomplete_reason"], why) if x)


def _kept(rec, include_cpu, include_incomplete) -> bool:
    return (include_cpu or not rec["cpu"]) and (include_incomplete or rec["incomplete_reason"] is None) \
        and not rec.get("edited")


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
            why = [w for w, on in ((r["cpu_reason"], not include_cpu), (r["incomplete_reason"], not include_incomplete),
                                   (r.get("edited"), True)) if w and on]
            rows.append({k: r[k] for k in LEFT_OUT_COLUMNS[:-1]} | {"reason": "; ".join(why)})
    return pd.DataFrame(rows, columns=LEFT_OUT_COLUMNS)


def _included(profiles, include_cpu=False, include_incomplete=False, include_incomplete_comparisons=False,
              include_void=False):
    """[(run record, [comparison dicts])]: every comparison of a kept run; with `include_incomplete_comparisons`
    (True, or job names / folders) also the comparisons whose own status is "ok" out of incomplete runs. A comparison
    its folder's VOID.json declares void (`void_reason` set) is left out unless `include_void`: every table, frame
    and figure built on this honours it; `voided` lists them."""
    out, want = [], include_incomplete_comparisons
    for r in _scan(profiles):
        comps = [c for c in r["summary"].get("comparisons", []) if include_void or c.get("void_reason") is None]
        if _kept(r, include_cpu, include_incomplete):
            out.append((r, comps))
        elif want and (include_cpu or not r["cpu"]) and (want is True or r["job"] in want or r["folder"] in want):
            out.append((r, [c for c in comps if c.get("status") == "ok"]))
    return out


def voided(profiles: str | None = None, **kw) -> pd.DataFrame:
    """The comparisons the other frames leave out because their run folder's VOID.json declares them void
    (`VOID_COLUMNS`: the comparison, its arms, `void_reason`, who found it, the fixing commit), among the runs
    `_included(profiles, **kw)` selects."""
    rows = []
    for r, comps in _included(profiles, include_void=True, **kw):
        for c in comps:
            if c.get("void_reason") is not None:
                rows.append({**{k: v for k, v in _ctx(r, c).items() if k in VOID_COLUMNS},
                             "ranks": int((c.get("distributed") or {}).get("world_size") or 1),
                             **{k: c[k] for k in NOT_VOID}, "file": os.path.join(r["folder"], results.VOID_FILE)})
    return _frame(rows, VOID_COLUMNS)


def is_nvtx_cost(name: str) -> bool:
    """Whether a comparison times NVTX ranges off against on (role "nvtx"): the A/B's `nvtx:...` comparisons and the
    callback's (`results.CALLBACK_COMPARISON`, a user's adjacent steps: its pairs differ in batch)."""
    return name.startswith("nvtx:") or name == results.CALLBACK_COMPARISON


def optimizations_text(c: dict) -> str | None:
    """The optimizations a `WorkbenchCallback` comparison's model ran with, `opt=arm,...` ("none" without any); None
    for a comparison that does not record them (an A/B's arms say it)."""
    if "optimizations" not in c:
        return None
    return ",".join(f"{k}={v}" for k, v in sorted((c["optimizations"] or {}).items())) or "none"


def _role(name: str, arm: str, is_optimized: bool) -> str:
    if is_nvtx_cost(name):
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


_STEP_CACHE: dict = {}


def step_samples(run_path: str) -> dict:
    """{comparison: [sample dicts (arm, rep, step, batch, step_ms)]} of a run folder's results.csv timed steps
    (cached per file and modification time)."""
    p = results.results_file(run_path)
    if not os.path.exists(p):
        return {}
    key = (p, os.path.getmtime(p))
    if key not in _STEP_CACHE:
        from workbench.measure.results import engine_step_rows
        df = pd.read_csv(p)
        df = engine_step_rows(df[df["rep"].notna() & df["step"].notna()])
        out: dict = {}
        for name, g in df.groupby("comparison", sort=False):
            out[name] = [dict(arm=a, rep=int(r), step=int(st), batch=int(b) if b == b else 0, step_ms=float(v))
                         for a, r, st, b, v in zip(g["arm"], g["rep"], g["step"], g["batch"], g["value"])]
        _STEP_CACHE[key] = out
    return _STEP_CACHE[key]


_RECOMPUTED_CACHE: dict = {}


def recomputed(run_path: str, comparison: str, baseline: str, arm: str) -> dict | None:
    """The speedup of `arm` over `baseline` recomputed from the run's results.csv with today's engine statistics
    (`workbench.measure.engine.paired_comparison`: every pair, on the comparison's `engine.pair_keys` (the same step
    of a rep; the rep alone for the callback's adjacent steps), the rep as the unit, t with R-1 df, no verdict below
    `stats.MIN_UNITS` reps; a timing on a CPU gives no CI and no verdict: `stats.timing_on`), with both arms' mean step (`baseline_mean_ms`, `arm_mean_ms`); None without rows. The
    summary.json of a run made before the rep-level statistics holds the old pair-bootstrap figures: the tables
    never read those. Cached per file and modification time, as `step_samples` (every table asks again)."""
    p = results.results_file(run_path)
    if not os.path.exists(p):
        return None
    key = (p, os.path.getmtime(p), comparison, baseline, arm)
    if key not in _RECOMPUTED_CACHE:
        _RECOMPUTED_CACHE[key] = _recomputed(run_path, comparison, baseline, arm)
    return copy.deepcopy(_RECOMPUTED_CACHE[key])


def _merged(parent: str) -> bool:
    """Whether a process folder with this parent lies in a merged campaign: its processes.json, or its dose's
    dose_run.json, has a "merged_note" (`workbench.ab.processes_merge`, `dose_merge`)."""
    from workbench.savings.dose_fit import RUN_FILE
    for f in (os.path.join(parent, results.PROCESSES_FILE), os.path.join(os.path.dirname(parent), RUN_FILE)):
        if os.path.isfile(f) and (_json(f) or {}).get("merged_note"):
            return True
    return False


def _process_of(parent: str, base: str) -> str | None:
    """The campaign a run folder is one process of: its parent's `processes.json` (`--processes K`), a dose-response
    (`python -m workbench.ab.dose`: DIR/<mode>/pNN/, DIR/dose_run.json), whose levels are not the optimization's arms,
    or a designed per-GPU job's folder above it (`results.DESIGN_FILE`)."""
    from workbench.savings.dose_fit import RUN_FILE
    if os.path.isfile(os.path.join(parent, results.PROCESSES_FILE)):
        return os.path.relpath(parent, base)
    dose = os.path.dirname(parent)
    if os.path.isfile(os.path.join(dose, RUN_FILE)):
        return os.path.relpath(dose, base)
    d, stop = os.path.abspath(parent), os.path.abspath(base)
    while d.startswith(stop) and len(d) >= len(stop):
        if os.path.isfile(os.path.join(d, results.DESIGN_FILE)):
            return os.path.relpath(d, base)
        d = os.path.dirname(d)
    return None


def _device_type(summary: dict, meta: dict) -> str | None:
    """The device type a run timed on ("cuda", "cpu"): meta.json's, else summary.json's ("cuda:0" -> "cuda")."""
    dev = meta.get("device") if isinstance(meta.get("device"), dict) else {}
    return dev.get("type") or str(summary.get("device") or "").split(":")[0] or None


def _recomputed(run_path: str, comparison: str, baseline: str, arm: str) -> dict | None:
    from workbench.measure import engine, stats

    smp = step_samples(run_path).get(comparison)
    if not smp:
        return None
    mine = [dict(x) for x in smp if x["arm"] in (baseline, arm)]
    if not any(x["arm"] == arm for x in mine) or not any(x["arm"] == baseline for x in mine):
        return None
    meta = _meta(run_path)
    device = _device_type({} if isinstance(meta.get("device"), dict) else
                          _json(os.path.join(run_path, "summary.json")) or {}, meta)
    res = stats.timing_on(engine.paired_comparison(mine, baseline, arm, engine.pair_keys(comparison)), device)
    # (a CPU timing: no CI, no verdict)
    mean = lambda a: float(pd.Series([x["step_ms"] for x in mine if x["arm"] == a]).mean())  # noqa: E731
    return {**res, "baseline_mean_ms": mean(baseline), "arm_mean_ms": mean(arm)}


def _run_lengths(path: str) -> str:
    """The document-length distribution a run packed (meta.json's `--lengths`); runs from before the flag was recorded
    packed the default (`constants.DEFAULT_LENGTHS`)."""
    args = _meta(path).get("args") or {}
    return args.get("lengths") or DEFAULT_LENGTHS


def default_lengths(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of runs that packed the default length distribution: what a headline reports (another distribution
    is another comparison: `workbench.analysis.lengths`)."""
    if df is None or df.empty or "lengths" not in df:
        return df
    return df[df["lengths"].fillna(DEFAULT_LENGTHS).astype(str) == DEFAULT_LENGTHS]


def _run_precision(path: str) -> str:
    """The precision a run timed (meta.json's resolved `--precision`); runs from before the flag timed
    fp32 adapters without autocast on a bf16 base, so they read "fp32-adapters"."""
    args = _meta(path).get("args") or {}
    return args.get("precision") or "fp32-adapters"


def _rows(profiles, metrics, **kw) -> pd.DataFrame:
    """results.csv rows of `metrics` of the comparisons `comparisons(profiles, **kw)` reads, with their folder."""
    frames = []
    for r, comps in _included(profiles, **kw):
        p = results.results_file(r["path"])
        if comps and os.path.exists(p):
            df = pd.read_csv(p)
            df = df[df["metric"].isin(metrics) & df["comparison"].isin([_name(c) for c in comps])]
            frames.append(df.assign(folder=r["folder"]))
    return pd.concat(frames, ignore_index=True).astype({"rep": "Int64", "batch": "Int64", "step": "Int64"}) \
        if frames else pd.DataFrame()  # one astype over the whole (one per run folder cost ~5 ms each)


def _lohi(ci) -> tuple:
    return (ci[0], ci[1]) if isinstance(ci, (list, tuple)) and len(ci) == 2 else (None, None)


def _ctx(r: dict, c: dict) -> dict:
    """The columns naming a comparison: folder, comparison, opt, model, layers, tokens, attn, precision, baseline,
    arm."""
    return {"folder": r["folder"], "comparison": _name(c), **{k: c.get(k) for k in ("opt", "model", "layers",
                                                                                      "tokens", "attn")},
            "precision": c.get("precision") or _run_precision(r["path"]), "lengths": _run_lengths(r["path"]),
            "baseline": (c.get("baseline") or {}).get("arm"), "arm": (c.get("optimized") or {}).get("arm")}


def preview(df: pd.DataFrame, what: str = "rows", n: int = PREVIEW_ROWS) -> pd.DataFrame:
    """The first `n` rows of `df`, after printing how many more there are and where they are."""
    if df is not None and len(df) > n:
        print(f"{len(df)} {what}; the first {n} below, every one on the results page (profiles/RESULTS.md) and in "
              "the DataFrame this cell keeps")
        return df.head(n)
    return df
