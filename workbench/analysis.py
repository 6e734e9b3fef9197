"""Analyses behind the notebooks: loaders of a profiles folder and functions that return DataFrames / plotly figures.

    from workbench import analysis as an
    runs = an.discover("profiles")                 # every run folder below, with its kind and command
    an.claims_vs_ours("profiles")                  # REFERENCE §1 claims beside our measured speedups
    an.savings_table("profiles")                   # savings models: predicted vs measured
    an.l_sweep_fit(an.l_sweep(an.bench_frames("profiles", "packing")["summary"]))
    an.three_witnesses("profiles")                 # counter / CUDA debug mode / trace, per arm
    an.layer_timeline(events)                      # per-layer timeline rows of one traced step

Notebooks only load, call and plot: every computation lives here (STYLE 9). Every function returns a DataFrame
(units in column names); `*_figure` helpers return plotly figures; nothing raises on a folder that lacks a suite:
the loaders return empty frames with their documented columns, and the notebooks print "no data for X".

# L = decoder layers

What the loaders read (tolerant: keyed on file and column names; unknown columns pass through, missing ones are NaN)

- A/B run (`python -m workbench.ab --out DIR`): `DIR/summary.json` with "comparisons" (DESIGN "CLI contract"),
  `DIR/results.csv` (long: run_id, opt, arm, rep, step, metric, value, unit + environment columns),
  `DIR/meta.json` (command, versions, device), `DIR/traces/<opt>/<arm>.{pt.trace.json.gz, nsys-rep, sqlite,
  events.parquet, events.csv.gz}`. Per-layer / per-source sync attribution is read from results.csv rows whose
  metric is `syncs_by_layer_pass/<layer>/<pass>`, `syncs_by_layer/<layer>` or `syncs_by_source/<file:line (fn)>`
  (unit count, one row per step or per arm; averaged per step here) when the runner writes them.
- Benchmark suite (`python -m workbench.bench.<suite> --out DIR`), recognized by a `summary.json` /
  `<suite>_summary.json` whose "bench" key or command names the suite (or by a folder named after it). Per-arm rows
  (one per config and arm: config, model, layers, tokens, [backend], arm, step_ms, step_ms_p20, step_ms_p80, fwd_ms,
  bwd_ms, peak_mem_mib, syncs_per_step or check_syncs, [cuda_sync_warnings], predicted_saving_ms,
  measured_saving_ms, ...) come from `summary.csv` (offload), `<suite>_arms.csv` (moe) or the JSON's "arms" records
  (packing); other CSVs are keyed by file stem without the `<suite>_` prefix (`steps`, `layers`, `kernels`), other
  JSON record lists by key (packing: "savings" with predicted_ms / measured_ms per arm and backend, "sweep" with
  layers and saving_ms, "sweep_fits" with predicted_slope_ms_per_layer). Aliases: `L` / `num_layers` -> `layers`,
  `predicted_ms` -> `predicted_saving_ms`, `measured_ms` -> `measured_saving_ms`, `savings_formula` -> `formula`.
- Instrumentation overhead (`python -m workbench.bench.overhead --out DIR`): `DIR/overhead.json` ("rows" with
  variant, step_ms, step_ms_p20, step_ms_p80, n, overhead_pct).
- Sync witness per op (`python -m workbench.bench.witness > DIR/witness.json`, last line): a JSON list of
  {op, counter, cpu_only, cuda_debug_warnings}.
- Campaign (`python -m workbench.campaign --out DIR`): `DIR/commands.json`, the command of each suite folder.
"""
from __future__ import annotations

import glob
import json
import math
import os
import re

import numpy as np
import pandas as pd

BASELINES = {"packing": "rebuild", "offload": "sync_reload", "moe": "eager"}
"""The baseline arm of each optimization (DESIGN table)."""
OPTIMIZED = {"packing": "cached", "offload": "double_buffer", "moe": "sort_bincount"}
"""The optimized arm of each optimization, the one the upstream PR ships."""
SUITES = ("packing", "offload", "moe")
BENCH_FORMULAS = {"packing": "(L*p - b)*s", "offload": "sum_{i=1}^{L-1} min(c_{i-1}, g_i) ~ (L-1)*min(c,g)",
                  "moe": "syncs_removed*stall_ms + launches_removed*launch_ms"}
"""The savings model of each suite (workbench.savings), for benchmark rows that do not name it."""

DEFAULT_PROFILES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "profiles")
"""The committed profiles folder of this checkout."""

_TRACE_SUFFIXES = (".pt.trace.json.gz", ".pt.trace.json", ".nsys-rep", ".sqlite", ".events.parquet", ".events.csv.gz")


# --- small helpers -----------------------------------------------------------------------------------------------

def _read_json(path: str):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _read_csv(path: str) -> pd.DataFrame:
    try:
        if os.path.getsize(path) == 0:
            return pd.DataFrame()
        return pd.read_csv(path)
    except (OSError, ValueError, pd.errors.EmptyDataError, pd.errors.ParserError):
        return pd.DataFrame()


def _num(v):
    """float(v), or NaN for None / non-numbers."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return float("nan")
    return f


def _first(*vals):
    """The first value that is not None / NaN (else None)."""
    for v in vals:
        if v is not None and not (isinstance(v, float) and v != v):
            return v
    return None


def _rel(path: str, root: str) -> str:
    try:
        return os.path.relpath(path, root)
    except ValueError:
        return path


def _root_of(profiles: str | None) -> str:
    return os.path.abspath(profiles or DEFAULT_PROFILES)


def _empty(columns) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="object") for c in columns})


def pct_gain(baseline_ms, optimized_ms) -> float:
    """Throughput gain in percent of the optimized arm over the baseline: (baseline_ms / optimized_ms - 1) * 100,
    how the seed articles state "+14.3% per batch" (steps/s, tokens/s)."""
    b, o = _num(baseline_ms), _num(optimized_ms)
    if not (b == b and o == o) or o <= 0:
        return float("nan")
    return (b / o - 1.0) * 100.0


# --- discovery ---------------------------------------------------------------------------------------------------

RUN_COLUMNS = ["path", "rel_path", "kind", "suite", "run_id", "command", "device_name", "torch", "transformers"]


def _campaign_commands(root: str) -> dict:
    """{abs out dir: command} from every commands.json below root."""
    out = {}
    for p in glob.glob(os.path.join(root, "**", "commands.json"), recursive=True):
        c = _read_json(p)
        for job in (c or {}).get("jobs", []):
            if job.get("out") and job.get("command"):
                d = job["out"] if os.path.isabs(job["out"]) else os.path.join(os.path.dirname(p), job["out"])
                out[os.path.abspath(d)] = job["command"]
    return out


def discover(profiles: str | None = None) -> pd.DataFrame:
    """Every result folder below `profiles` (or `profiles` itself): one row per folder with its kind
    ("ab", "bench", "overhead", "witness", "campaign"), suite (the opt / bench name), run id, the command that
    produced it, device and versions where recorded. Sorted by path."""
    root = _root_of(profiles)
    if not os.path.isdir(root):
        return _empty(RUN_COLUMNS)
    cmds = _campaign_commands(root)
    rows = []
    bench_dirs: list[str] = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x != "traces" and not x.startswith("."))
        if any(d.startswith(b + os.sep) for b in bench_dirs):
            continue  # a suite's child process output (packing's flex child), already merged into its parent
        fs = set(files)
        base = dict(path=d, rel_path=_rel(d, root), run_id=os.path.basename(d), command=cmds.get(os.path.abspath(d)),
                    device_name=None, torch=None, transformers=None)
        if "summary.json" in fs:
            s = _read_json(os.path.join(d, "summary.json")) or {}
            if isinstance(s, dict) and "comparisons" in s:
                meta = _read_json(os.path.join(d, "meta.json")) or {}
                dev = meta.get("device") or {}
                opts = sorted({str(c.get("opt")) for c in s.get("comparisons", []) if c.get("opt")})
                rows.append({**base, "kind": "ab", "suite": ",".join(opts), "run_id": s.get("run_id") or base["run_id"],
                             "command": meta.get("command") or base["command"],
                             "device_name": dev.get("name") if isinstance(dev, dict) else None,
                             "torch": (meta.get("versions") or {}).get("torch"),
                             "transformers": (meta.get("versions") or {}).get("transformers")})
                continue
            suite = _bench_suite(s, d) if isinstance(s, dict) else None
            if suite:
                bench_dirs.append(d)
                env = s.get("env") or {}
                rows.append({**base, "kind": "bench", "suite": suite,
                             "command": base["command"] or s.get("command"), "device_name": env.get("device_name"),
                             "torch": env.get("torch"), "transformers": env.get("transformers")})
                continue
        own = [f for f in fs if f.endswith("_summary.json") and f.split("_")[0] in SUITES]
        if own or (os.path.basename(d) in SUITES and any(f.endswith(".csv") for f in fs)):
            bench_dirs.append(d)
            s = (_read_json(os.path.join(d, own[0])) if own else None) or {}
            env = s.get("env") or {}
            dev = env.get("device") if isinstance(env.get("device"), dict) else {}
            vers = env.get("versions") or env
            rows.append({**base, "kind": "bench", "suite": own[0].split("_")[0] if own else os.path.basename(d),
                         "command": base["command"] or s.get("command"),
                         "device_name": dev.get("name") or env.get("device_name"), "torch": vers.get("torch"),
                         "transformers": vers.get("transformers")})
            continue
        if "overhead.json" in fs:
            o = _read_json(os.path.join(d, "overhead.json")) or {}
            rows.append({**base, "kind": "overhead", "suite": "overhead",
                         "command": o.get("command") or base["command"], "device_name": o.get("device_name")})
        if "witness.json" in fs or ("witness.log" in fs and _witness_rows(os.path.join(d, "witness.log"))):
            rows.append({**base, "kind": "witness", "suite": "witness"})
        if "results.csv" in fs and "summary.json" not in fs and "meta.json" not in fs:
            head = _read_csv_head(os.path.join(d, "results.csv"))
            suite = _long_suite(head, d)
            if suite:
                bench_dirs.append(d)
                first = head.iloc[0] if len(head) else {}
                rows.append({**base, "kind": "bench", "suite": suite,
                             "device_name": first.get("device_name") if len(head) else None,
                             "torch": first.get("torch") if len(head) else None,
                             "transformers": first.get("transformers") if len(head) else None})
                continue
        if "commands.json" in fs:
            rows.append({**base, "kind": "campaign", "suite": "campaign"})
    if not rows:
        return _empty(RUN_COLUMNS)
    probe_versions(rows)
    for r in rows:  # COMMAND.txt: the command as the person who ran it wrote it, device and versions
        c = command_notes(r["path"])
        main = [c["files"][f] for f in _MAIN_FILES.get(r["kind"], ()) if f in c["files"]]
        if main and not cmds.get(os.path.abspath(r["path"])):
            r["command"] = main[0]
        elif c.get("command") and not cmds.get(os.path.abspath(r["path"])):
            r["command"] = c["command"]
        for k in ("device_name", "torch", "transformers"):
            if c.get(k) and (not r.get(k) or (k == "torch" and "+" not in str(r.get(k)))):
                r[k] = c[k]
    return pd.DataFrame(rows, columns=RUN_COLUMNS).sort_values("path", kind="stable").reset_index(drop=True)


def _read_csv_head(path: str, n: int = 5) -> pd.DataFrame:
    try:
        return pd.read_csv(path, nrows=n)
    except (OSError, ValueError, pd.errors.EmptyDataError, pd.errors.ParserError):
        return pd.DataFrame()


def _long_suite(head: pd.DataFrame, d: str) -> str | None:
    """The suite of a bench's long results.csv (columns section, metric, value) without its summary.json: from the
    folder's COMMAND.txt, the run_id prefix ("packing-2026..."), or the folder name."""
    if head.empty or not {"section", "metric", "value"} <= set(head.columns):
        return None
    m = re.search(r"workbench[./]bench[./](\w+)", str(command_notes(d).get("command") or ""))
    if m:
        return m.group(1)
    rid = str(head["run_id"].iloc[0]) if "run_id" in head else ""
    for suite in SUITES:
        if rid.startswith(suite + "-") or os.path.basename(d) == suite:
            return suite
    return None


def _bench_suite(s: dict, d: str) -> str | None:
    """The suite of a benchmark summary.json: its "bench" key, else the module in its command
    (`python -m workbench.bench.<suite>`), else the folder's name when it is a suite's."""
    if s.get("bench"):
        return str(s["bench"])
    m = re.search(r"workbench[./]bench[./](\w+)", str(s.get("command") or ""))
    if m:
        return m.group(1)
    if "configs" in s or os.path.basename(d) in SUITES:
        return os.path.basename(d)
    return None


def parse_command_txt(path: str) -> dict:
    """A folder's COMMAND.txt (how the lead records a GPU run): "command: ...", "device: NAME, driver X; torch Y,
    transformers Z, ...", "note: ...", and "FILE [/ FILE ...]: command" lines mapping files to the command that wrote
    them; other lines continue the note. Returns {command, device_name, driver, torch, transformers, files, note}."""
    out: dict = {"files": {}, "note": ""}
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return out
    for line in lines:
        key, sep, val = line.partition(":")
        key, val = key.strip(), val.strip()
        if sep and key == "command":
            out["command"] = val
        elif sep and key == "device":
            out["device_name"] = val.split(",")[0].strip()
            for k, pat in (("driver", r"driver (\S+?)[;,]?(?:\s|$)"), ("torch", r"torch (\S+?)[;,]?(?:\s|$)"),
                           ("transformers", r"transformers (\S+?)[;,]?(?:\s|$)")):
                m = re.search(pat, val)
                if m:
                    out[k] = m.group(1)
        elif sep and key == "note":
            out["note"] += val + " "
        elif sep and val and " " not in key.replace(" / ", "/") and "." in key:
            for f in key.split("/"):
                out["files"][f.strip()] = val
        elif line.strip():
            out["note"] += line.strip() + " "
    out["note"] = out["note"].strip()
    return out


def command_notes(folder: str) -> dict:
    """Every COMMAND*.txt of a folder merged (parse_command_txt), file maps combined."""
    merged: dict = {"files": {}, "note": ""}
    for p in sorted(glob.glob(os.path.join(folder, "COMMAND*.txt"))):
        c = parse_command_txt(p)
        merged["files"].update(c.pop("files"))
        note = c.pop("note")
        merged["note"] = (merged["note"] + " " + note).strip()
        for k, v in c.items():
            merged.setdefault(k, v)
    return merged


_MAIN_FILES = {"overhead": ("overhead.json", "overhead.log"), "witness": ("witness.json", "witness.log")}


def probe_versions(rows: list[dict]) -> None:
    """Fill device / torch / transformers from a `probe.txt` next to a run (what the committed harness run has:
    `nvidia-smi` CSV + one `torch X triton Y tf Z peft W` line)."""
    for r in rows:
        p = os.path.join(r["path"], "probe.txt")
        if not os.path.exists(p):
            continue
        info = parse_probe(p)
        for k in ("device_name", "torch", "transformers"):
            if not r.get(k) and info.get(k):
                r[k] = info[k]


def parse_probe(path: str) -> dict:
    """{device_name, driver, memory_mib, torch, triton, transformers, peft} from a probe.txt (missing keys absent)."""
    out = {}
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return out
    for i, line in enumerate(lines):
        if line.startswith("name,") and i + 1 < len(lines):
            parts = [x.strip() for x in lines[i + 1].split(",")]
            if parts:
                out["device_name"] = parts[0]
            if len(parts) > 1:
                out["driver"] = parts[1]
            if len(parts) > 2:
                out["memory"] = parts[2]
        m = re.match(r"^torch (\S+)(?: triton (\S+))?(?: tf (\S+))?(?: peft (\S+))?", line)
        if m:
            out["torch"], out["triton"], out["transformers"], out["peft"] = m.groups()
    return {k: v for k, v in out.items() if v}


def runs_of(profiles: str | None, kind: str) -> pd.DataFrame:
    d = discover(profiles)
    return d[d["kind"] == kind].reset_index(drop=True)


# --- A/B runs ---------------------------------------------------------------------------------------------------

ARM_FIELDS = ["step_ms", "step_ms_p20", "step_ms_p80", "n", "fwd_ms", "bwd_ms", "syncs_per_step",
              "cuda_sync_warnings_per_step", "trace_syncs_per_step", "peak_mem_mib", "tokens_per_s", "loss",
              "status", "equivalent", "bitwise"]
AB_ARM_COLUMNS = ["run", "run_id", "device", "gpu_name", "opt", "model", "layers", "tokens", "attn", "role", "arm"] \
    + ARM_FIELDS + ["source"]
AB_COMPARISON_COLUMNS = ["run", "run_id", "device", "gpu_name", "opt", "model", "layers", "tokens", "attn", "baseline",
                         "optimized", "baseline_step_ms", "optimized_step_ms", "baseline_step_ms_p20",
                         "baseline_step_ms_p80", "optimized_step_ms_p20", "optimized_step_ms_p80", "baseline_n",
                         "optimized_n", "speedup", "step_gain_pct",
                         "fwd_gain_pct", "bwd_gain_pct", "baseline_syncs_per_step", "optimized_syncs_per_step",
                         "extra_mem_mib", "predicted_ms", "measured_ms", "formula", "equivalent", "status", "source"]


def _ab_runs(profiles):
    root = _root_of(profiles)
    for r in runs_of(profiles, "ab").to_dict("records"):
        s = _read_json(os.path.join(r["path"], "summary.json")) or {}
        meta = _read_json(os.path.join(r["path"], "meta.json")) or {}
        dev = meta.get("device") if isinstance(meta.get("device"), dict) else {}
        gpu = dev.get("name") if (dev or {}).get("type") == "cuda" else None
        yield r, s, meta, gpu, _rel(os.path.join(r["path"], "summary.json"), os.path.dirname(root))


def ab_arms(profiles: str | None = None) -> pd.DataFrame:
    """One row per (A/B run, comparison, arm) from summary.json: role (baseline / optimized / other), the arm's
    step_ms with its p20-p80 and n, fwd_ms, bwd_ms, syncs_per_step (counter), cuda_sync_warnings_per_step (debug
    mode), trace_syncs_per_step, peak_mem_mib, tokens_per_s, loss, status, equivalence; `source` = the file."""
    rows = []
    for r, s, meta, gpu, src in _ab_runs(profiles):
        for c in s.get("comparisons", []):
            for role, arms in (("baseline", [c.get("baseline")]), ("optimized", [c.get("optimized")]),
                               ("other", c.get("others") or [])):
                for a in arms:
                    if not a:
                        continue
                    rows.append({"run": r["rel_path"], "run_id": s.get("run_id"), "device": s.get("device"),
                                 "gpu_name": gpu, "opt": c.get("opt"), "model": c.get("model"),
                                 "layers": c.get("layers"), "tokens": c.get("tokens"), "attn": c.get("attn"),
                                 "role": role, "arm": a.get("arm"), **{k: a.get(k) for k in ARM_FIELDS},
                                 "source": src})
    if not rows:
        return _empty(AB_ARM_COLUMNS)
    return pd.DataFrame(rows, columns=AB_ARM_COLUMNS)


def ab_comparisons(profiles: str | None = None) -> pd.DataFrame:
    """One row per comparison of every A/B run: baseline vs optimized step_ms, speedup, throughput gains in percent
    (step, forward, backward: baseline/optimized - 1, as the seed articles state them), syncs per step of both,
    extra peak memory, the savings model's predicted and measured ms, equivalence and status."""
    rows = []
    for r, s, meta, gpu, src in _ab_runs(profiles):
        for c in s.get("comparisons", []):
            b, o = c.get("baseline") or {}, c.get("optimized") or {}
            sm = c.get("savings_model") or {}
            rows.append({"run": r["rel_path"], "run_id": s.get("run_id"), "device": s.get("device"), "gpu_name": gpu,
                         "opt": c.get("opt"), "model": c.get("model"), "layers": c.get("layers"),
                         "tokens": c.get("tokens"), "attn": c.get("attn"), "baseline": b.get("arm"),
                         "optimized": o.get("arm"), "baseline_step_ms": b.get("step_ms"),
                         "optimized_step_ms": o.get("step_ms"),
                         **{f"{role}_{k}": arm.get(k) for role, arm in (("baseline", b), ("optimized", o))
                            for k in ("step_ms_p20", "step_ms_p80", "n")},
                         "speedup": c.get("speedup"),
                         "step_gain_pct": pct_gain(b.get("step_ms"), o.get("step_ms")),
                         "fwd_gain_pct": pct_gain(b.get("fwd_ms"), o.get("fwd_ms")),
                         "bwd_gain_pct": pct_gain(b.get("bwd_ms"), o.get("bwd_ms")),
                         "baseline_syncs_per_step": b.get("syncs_per_step"),
                         "optimized_syncs_per_step": o.get("syncs_per_step"),
                         "extra_mem_mib": _num(o.get("peak_mem_mib")) - _num(b.get("peak_mem_mib")),
                         "predicted_ms": sm.get("predicted_ms"), "measured_ms": sm.get("measured_ms"),
                         "formula": sm.get("formula"), "equivalent": c.get("equivalent"), "status": c.get("status"),
                         "source": src})
    if not rows:
        return _empty(AB_COMPARISON_COLUMNS)
    return pd.DataFrame(rows, columns=AB_COMPARISON_COLUMNS)


def ab_results(profiles: str | None = None) -> pd.DataFrame:
    """results.csv of every A/B run below `profiles`, concatenated (long format), with a `run` column."""
    frames = []
    for r in runs_of(profiles, "ab").to_dict("records"):
        df = _read_csv(os.path.join(r["path"], "results.csv"))
        if len(df):
            df.insert(0, "run", r["rel_path"])
            frames.append(df)
    if not frames:
        return _empty(["run", "run_id", "opt", "arm", "rep", "step", "metric", "value", "unit"])
    return pd.concat(frames, ignore_index=True)


def step_samples(profiles: str | None = None) -> pd.DataFrame:
    """step_ms rows of every A/B run (one per timed step): run, opt, arm, rep, step, step_ms."""
    df = ab_results(profiles)
    s = df[df["metric"] == "step_ms"]
    out = s[["run", "opt", "arm", "rep", "step"]].copy()
    out["step_ms"] = pd.to_numeric(s["value"], errors="coerce")
    return out.reset_index(drop=True)


# --- benchmark suites -------------------------------------------------------------------------------------------

_ALIASES = {"L": "layers", "num_layers": "layers", "n_layers": "layers", "predicted_ms": "predicted_saving_ms",
            "measured_ms": "measured_saving_ms", "variant": "arm", "savings_formula": "formula"}


def _normalize(df: pd.DataFrame) -> pd.DataFrame:
    ren = {k: v for k, v in _ALIASES.items() if k in df.columns and v not in df.columns}
    return df.rename(columns=ren)


def bench_frames(profiles: str | None = None, suite: str | None = None) -> dict[str, pd.DataFrame]:
    """The CSVs of every benchmark-suite folder below `profiles` (of one `suite` when given), concatenated per file
    stem without the `<suite>_` prefix: {"summary": ..., "steps": ..., "layers": ..., <other stem>: ...}; `arms`
    (moe_arms.csv: one row per config and arm) is read as "summary". Lists of records in the summary JSON that no CSV
    holds become frames too (packing's summary.json: "arms" -> "summary", "savings", "sweep", "sweep_fits"). Each
    frame gets `bench` (the suite),
    `run` (folder) and `source` (file) columns; column aliases are normalized (module docstring). Also
    {"json": DataFrame of (run, bench, source, summary dict)}."""
    root = _root_of(profiles)
    runs = runs_of(profiles, "bench")
    if suite is not None:
        runs = runs[runs["suite"] == suite]
    acc: dict[str, list] = {}
    js = []

    def add(stem, df, path):
        df = _normalize(df)
        df.insert(0, "bench", r["suite"])
        df.insert(1, "run", r["rel_path"])
        df["source"] = _rel(path, os.path.dirname(root))
        mine.setdefault(stem, []).append(df)

    for r in runs.to_dict("records"):
        mine: dict[str, list] = {}
        for p in sorted(glob.glob(os.path.join(r["path"], "*.csv"))):
            df = _read_csv(p)
            if df.empty:
                continue
            stem = os.path.basename(p)[:-4]
            if stem.startswith(r["suite"] + "_"):
                stem = stem[len(r["suite"]) + 1:]
            if stem == "results" and "section" in df:  # packing: long rows of several sections
                stem = "results_long"
            add("summary" if stem == "arms" else stem, df, p)
        for name in ("summary.json", f"{r['suite']}_summary.json"):
            p = os.path.join(r["path"], name)
            s = _read_json(p)
            if not isinstance(s, dict):
                continue
            js.append({"run": r["rel_path"], "bench": r["suite"], "source": _rel(p, os.path.dirname(root)),
                       "summary": s})
            for key, val in s.items():  # sections held only in the JSON (packing: arms, savings, sweep, ...)
                if not (isinstance(val, list) and val and all(isinstance(x, dict) for x in val)):
                    continue
                stem = "summary" if key in ("arms", "arms_results") else key
                if stem in mine or key in ("configs", "kernels", "skipped"):
                    continue
                add(stem, pd.json_normalize(val, max_level=0), p)
        if "summary" not in mine and "results_long" in mine:
            p = os.path.join(r["path"], "results.csv")
            for stem, df in _frames_from_long(pd.concat(mine["results_long"], ignore_index=True)).items():
                if stem not in mine and len(df):
                    add(stem, df.drop(columns=["bench", "run", "source"], errors="ignore"), p)
        for k, v in mine.items():
            acc.setdefault(k, []).extend(v)
    out = {k: pd.concat(v, ignore_index=True) for k, v in acc.items()}
    out.setdefault("summary", _empty(["bench", "run", "config", "model", "layers", "tokens", "arm", "step_ms",
                                      "source"]))
    out["json"] = pd.DataFrame(js, columns=["run", "bench", "source", "summary"])
    return out


def _nearest_rank(xs, q: float) -> float:
    """The bench modules' quantile: sorted values at index round(q·(n-1))."""
    xs = sorted(float(x) for x in xs if x == x)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))] if xs else float("nan")


def _frames_from_long(df: pd.DataFrame) -> dict:
    """Per-arm summary, savings, sweep and sweep_fits rebuilt from a bench's long results.csv (packing's sections
    "arms", "s", "sweep"), for a folder whose summary.json is missing: medians and nearest-rank p20 / p80 over the
    timed steps (rep >= 0), syncs_per_step from the counted step (rep -1), predicted savings from
    `workbench.savings.packing_saving` with the recorded s_ms, measured = median(rebuild) - median(arm)."""
    out: dict = {}
    keys = [k for k in ("model", "layers", "tokens", "backend", "arm") if k in df]
    if "section" not in df or not keys:
        return out
    a = df[df["section"] == "arms"]
    rows = []
    for key, g in a.groupby(keys, sort=False):
        kd = dict(zip(keys, key))
        timed = g[g["rep"] >= 0] if "rep" in g else g
        v = lambda m: pd.to_numeric(timed.loc[timed["metric"] == m, "value"], errors="coerce")  # noqa: E731
        step = v("step_ms").tolist()
        syncs = pd.to_numeric(g.loc[g["metric"] == "syncs_per_step", "value"], errors="coerce")
        rows.append({**kd, "step_ms": float(np.median(step)) if step else float("nan"),
                     "step_ms_p20": _nearest_rank(step, 0.2), "step_ms_p80": _nearest_rank(step, 0.8),
                     "fwd_ms": float(v("fwd_ms").median()), "bwd_ms": float(v("bwd_ms").median()),
                     "peak_mem_mib": float(v("peak_mem_mib").max()), "loss": float(v("loss").median()),
                     "syncs_per_step": float(syncs.iloc[0]) if len(syncs) else float("nan"), "n": len(step),
                     "device_name": g["device_name"].iloc[0] if "device_name" in g else None})
    summary = pd.DataFrame(rows)
    out["summary"] = summary
    s_ms = df[(df["section"] == "s") & (df["metric"] == "s_ms")]
    sav = []
    if len(summary) and len(s_ms):
        from workbench.savings import packing_saving
        for r in summary[summary["arm"].isin(["cached", "precomputed"])].to_dict("records"):
            m = s_ms[(s_ms["model"] == r["model"]) & (s_ms.get("backend") == r.get("backend"))]
            base = summary[(summary["model"] == r["model"]) & (summary["backend"] == r.get("backend"))
                           & (summary["arm"] == "rebuild")]
            if m.empty or base.empty:
                continue
            s = float(m["value"].iloc[0])
            measured = float(base["step_ms"].iloc[0]) - r["step_ms"]
            pr = packing_saving(int(r["layers"]), s, arm=r["arm"], measured_ms=measured)
            sav.append({"model": r["model"], "layers": r["layers"], "tokens": r.get("tokens"),
                        "backend": r.get("backend"), "arm": r["arm"], "s_ms": s, "predicted_ms": pr["predicted_ms"],
                        "measured_ms": measured, "implied_s_ms": pr["implied_s_ms"], "formula": pr["formula"]})
    out["savings"] = _normalize(pd.DataFrame(sav))
    sw = df[(df["section"] == "sweep") & (df["metric"] == "step_ms")]
    srows, fits = [], []
    if len(sw):
        med = sw.groupby(["model", "backend", "layers", "arm"])["value"].median().unstack("arm")
        for (model, backend, L), r in med.iterrows():
            if {"rebuild", "cached"} <= set(r.index):
                srows.append({"model": model, "backend": backend, "layers": int(L), "rebuild_ms": r["rebuild"],
                              "cached_ms": r["cached"], "saving_ms": r["rebuild"] - r["cached"]})
        for (model, backend), g in pd.DataFrame(srows).groupby(["model", "backend"]) if srows else []:
            s = s_ms[(s_ms["model"] == model) & (s_ms["backend"] == backend)]
            fits.append({"model": model, "backend": backend, "layers": g["layers"].tolist(),
                         "predicted_slope_ms_per_layer": 2 * float(s["value"].iloc[0]) if len(s) else float("nan")})
    out["sweep"] = pd.DataFrame(srows)
    out["sweep_fits"] = pd.DataFrame(fits)
    return out


def bench_comparisons(profiles: str | None = None, suite: str | None = None) -> pd.DataFrame:
    """Baseline vs optimized per benchmark config (from summary.csv rows: one per config and arm), in the shape of
    `ab_comparisons` (run, opt, model, layers, tokens, step ms of both arms, gains in percent, extra memory,
    predicted / measured saving)."""
    frames = bench_frames(profiles, suite)
    s = frames["summary"]
    sav = frames.get("savings")
    dev = runs_of(profiles, "bench").set_index("rel_path")["device_name"].to_dict()
    rows = []
    if s.empty or "arm" not in s or "step_ms" not in s:
        return _empty(AB_COMPARISON_COLUMNS)
    keys = [k for k in ("run", "bench", "config", "model", "backend", "layers", "tokens") if k in s]
    for key, g in s.groupby(keys, dropna=False, sort=False):
        kd = dict(zip(keys, key if isinstance(key, tuple) else (key,)))
        opt = kd.get("bench")
        base_arm, opt_arm = BASELINES.get(opt), OPTIMIZED.get(opt)
        arms = g.set_index("arm")
        if base_arm not in arms.index or opt_arm not in arms.index:
            arms_list = list(g["arm"])
            if len(arms_list) < 2:
                continue
            base_arm, opt_arm = arms_list[0], arms_list[1]
        b, o = arms.loc[base_arm], arms.loc[opt_arm]
        if isinstance(b, pd.DataFrame):
            b = b.iloc[0]
        if isinstance(o, pd.DataFrame):
            o = o.iloc[0]
        get = lambda row, k: row[k] if k in row.index else None  # noqa: E731
        pred = {}
        if sav is not None and len(sav) and "arm" in sav:  # packing keeps its savings rows apart
            m = sav[(sav["run"] == kd.get("run")) & (sav["arm"] == opt_arm)]
            for k in ("model", "backend", "layers"):
                if k in kd and k in m:
                    m = m[m[k] == kd[k]]
            if len(m):
                pred = m.iloc[0].to_dict()
        rows.append({"run": kd.get("run"), "run_id": kd.get("config"), "device": None,
                     "gpu_name": _first(get(b, "device_name"), dev.get(kd.get("run"))), "opt": opt,
                     "model": kd.get("model"),
                     "layers": kd.get("layers"), "tokens": kd.get("tokens"),
                     "attn": _first(kd.get("backend"), get(b, "attn")),
                     "baseline": base_arm, "optimized": opt_arm, "baseline_step_ms": get(b, "step_ms"),
                     "optimized_step_ms": get(o, "step_ms"),
                     **{f"{role}_{k}": get(arm, k) for role, arm in (("baseline", b), ("optimized", o))
                        for k in ("step_ms_p20", "step_ms_p80", "n")},
                     "speedup": _num(get(b, "step_ms")) / _num(get(o, "step_ms")) if _num(get(o, "step_ms")) else None,
                     "step_gain_pct": pct_gain(get(b, "step_ms"), get(o, "step_ms")),
                     "fwd_gain_pct": pct_gain(get(b, "fwd_ms"), get(o, "fwd_ms")),
                     "bwd_gain_pct": pct_gain(get(b, "bwd_ms"), get(o, "bwd_ms")),
                     "baseline_syncs_per_step": _first(get(b, "syncs_per_step"), get(b, "check_syncs")),
                     "optimized_syncs_per_step": _first(get(o, "syncs_per_step"), get(o, "check_syncs")),
                     "extra_mem_mib": _num(get(o, "peak_mem_mib")) - _num(get(b, "peak_mem_mib")),
                     "predicted_ms": _first(get(o, "predicted_saving_ms"), get(b, "predicted_saving_ms"),
                                            pred.get("predicted_saving_ms")),
                     "measured_ms": _first(get(o, "measured_saving_ms"), get(b, "measured_saving_ms"),
                                           pred.get("measured_saving_ms")),
                     "formula": _first(get(o, "formula"), get(b, "formula"), pred.get("formula")),
                     "equivalent": get(o, "equivalent"),
                     "status": get(o, "status"), "source": get(b, "source")})
    if not rows:
        return _empty(AB_COMPARISON_COLUMNS)
    return pd.DataFrame(rows, columns=AB_COMPARISON_COLUMNS)


def all_comparisons(profiles: str | None = None) -> pd.DataFrame:
    """`ab_comparisons` and `bench_comparisons` together, with a `from` column ("ab" / "bench")."""
    a = ab_comparisons(profiles).assign(**{"from": "ab"})
    b = bench_comparisons(profiles).assign(**{"from": "bench"})
    frames = [f for f in (a, b) if len(f)]
    if not frames:
        return _empty(AB_COMPARISON_COLUMNS + ["from"])
    return pd.concat(frames, ignore_index=True)


# --- instrumentation overhead --------------------------------------------------------------------------------------

OVERHEAD_COLUMNS = ["run", "model", "layers", "tokens", "device_name", "variant", "ranges", "count_syncs", "step_ms",
                    "step_ms_p20", "step_ms_p80", "n", "overhead_pct", "command", "source"]


def overhead_table(profiles: str | None = None) -> pd.DataFrame:
    """Instrumentation overhead (workbench.bench.overhead): one row per run and variant (off / ranges / counter /
    both) with the median step_ms, p20-p80, n and the overhead over "off" in percent."""
    root = _root_of(profiles)
    rows = []
    for r in runs_of(profiles, "overhead").to_dict("records"):
        p = os.path.join(r["path"], "overhead.json")
        o = _read_json(p) or {}
        for v in o.get("rows", []):
            rows.append({"run": r["rel_path"], "model": o.get("model"), "layers": o.get("layers"),
                         "tokens": o.get("tokens"), "device_name": o.get("device_name") or r.get("device_name"),
                         **{k: v.get(k) for k in ("variant", "ranges", "count_syncs", "step_ms", "step_ms_p20",
                                                  "step_ms_p80", "n", "overhead_pct")},
                         "command": o.get("command"), "source": _rel(p, os.path.dirname(root))})
    if not rows:
        return _empty(OVERHEAD_COLUMNS)
    return pd.DataFrame(rows, columns=OVERHEAD_COLUMNS)


def overhead_samples(profiles: str | None = None) -> pd.DataFrame:
    """Every step time of the overhead runs: run, variant, sample, step_ms."""
    rows = []
    for r in runs_of(profiles, "overhead").to_dict("records"):
        o = _read_json(os.path.join(r["path"], "overhead.json")) or {}
        for v, xs in (o.get("samples_ms") or {}).items():
            rows += [{"run": r["rel_path"], "variant": v, "sample": i, "step_ms": x} for i, x in enumerate(xs)]
    return pd.DataFrame(rows, columns=["run", "variant", "sample", "step_ms"])


# --- claims (REFERENCE §1) ----------------------------------------------------------------------------------------

CLAIM_COLUMNS = ["opt", "upstream", "model", "gpu", "scope", "claimed_low_pct", "claimed_high_pct", "claimed_extra",
                 "claim"]


def claims_table() -> pd.DataFrame:
    """The seed articles' claims (REFERENCE §1) as numbers. `scope`: step (per batch / steps/s), fwd, bwd,
    hotspot_fwd / hotspot_bwd (the MoE routing block alone), model (a prediction of the (L-1)·m model), mask_ms
    (cost of one packed SDPA mask rebuild). Gains are throughput gains in percent (baseline/optimized - 1);
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
         "dynamic queries num_experts -> 1 (each bincount reads back twice on CUDA: ~3 per layer, REFERENCE §1)"),
        ("all", "all three", None, None, "step", 25.0, 25.0, None,
         "\"~25%\", not additive; varies with model, backend, GPU memory"),
    ]
    return pd.DataFrame(rows, columns=CLAIM_COLUMNS)


def ours_table(profiles: str | None = None) -> pd.DataFrame:
    """Our measured gains in the claims' terms, long format: one row per (comparison, scope in step / fwd / bwd):
    opt, model, layers, tokens, gpu, scope, ours_pct, baseline, optimized, extra_mem_mib, from, source."""
    c = all_comparisons(profiles)
    cols = ["opt", "model", "layers", "tokens", "gpu", "scope", "ours_pct", "ours_extra", "baseline", "optimized",
            "extra_mem_mib", "from", "source"]
    rows = []
    for r in c.to_dict("records"):
        base = {"opt": r["opt"], "model": r["model"], "layers": r["layers"], "tokens": r["tokens"],
                "gpu": r.get("gpu_name") or r.get("device"), "baseline": r["baseline"], "optimized": r["optimized"],
                "extra_mem_mib": r["extra_mem_mib"], "from": r["from"], "source": r["source"]}
        if isinstance(r.get("attn"), str) and r["from"] == "bench":
            base["model"] = f"{r['model']} ({r['attn']})"
        mem = _num(r["extra_mem_mib"])
        for scope, key in (("step", "step_gain_pct"), ("fwd", "fwd_gain_pct"), ("bwd", "bwd_gain_pct")):
            v = _num(r.get(key))
            if v != v:
                continue
            rows.append({**base, "scope": scope, "ours_pct": v,
                         "ours_extra": f"{mem:+.0f} MiB peak" if scope == "step" and mem == mem else None})
        pred, b = _num(r.get("predicted_ms")), _num(r.get("baseline_step_ms"))
        if pred == pred and b == b and b > pred:  # the model's own prediction, in the claim's terms
            rows.append({**base, "scope": "model", "ours_pct": pct_gain(b, b - pred),
                         "ours_extra": f"predicted {pred:.1f} ms of {b:.1f} ms"})
        sb, so = _num(r.get("baseline_syncs_per_step")), _num(r.get("optimized_syncs_per_step"))
        if sb == sb and so == so:
            rows.append({**base, "scope": "syncs", "ours_pct": float("nan"),
                         "ours_extra": f"syncs/step {sb:.0f} -> {so:.0f}"})
    sav = bench_frames(profiles, "packing").get("savings")
    if sav is not None and len(sav) and "s_ms" in sav:
        for (model, backend), g in sav.groupby(["model", "backend"] if "backend" in sav else ["model"], sort=False):
            rows.append({"opt": "packing", "model": f"{model} ({backend})", "layers": g["layers"].iloc[0],
                         "tokens": g["tokens"].iloc[0] if "tokens" in g else None,
                         "gpu": None, "scope": "mask_ms", "ours_pct": float("nan"),
                         "ours_extra": f"s = {g['s_ms'].iloc[0]:.3f} ms per metadata build ({backend})",
                         "baseline": "rebuild", "optimized": None, "extra_mem_mib": float("nan"), "from": "bench",
                         "source": g["source"].iloc[0]})
    if not rows:
        return _empty(cols)
    return pd.DataFrame(rows, columns=cols)


def same_model(claim_model, our_model) -> bool:
    """Whether our model is the claim's: the same preset, or the same size where the claim names only a size
    ("8B" matches llama-3.1-8b and qwen3-8b)."""
    if not claim_model or not our_model or not isinstance(our_model, str):
        return False
    c, o = str(claim_model).lower(), re.sub(r"\s*\(.*\)$", "", our_model.lower())
    if c == o:
        return True
    size = lambda s: (re.findall(r"(\d+(?:\.\d+)?b)\b", s) or [None])[-1]  # noqa: E731
    return "-" not in c and size(c) is not None and size(c) == size(o)


def claims_vs_ours(profiles: str | None = None) -> pd.DataFrame:
    """Each claim (REFERENCE §1) beside our measurements of the same optimization and scope: one row per claim and
    matching measurement (a claim without one keeps a row with `ours_pct` NaN and `note` "no data"). `same_model`
    says whether our model is the claim's (we often run fewer layers: `layers`)."""
    claims = claims_table()
    ours = ours_table(profiles)
    rows = []
    for c in claims.to_dict("records"):
        m = ours[(ours["opt"] == c["opt"]) & (ours["scope"] == c["scope"])]
        same = m[[same_model(c["model"], o) for o in m["model"]]] if len(m) else m
        if len(same):  # a measurement of the claim's own model: show those only
            m = same
        if m.empty:
            rows.append({**c, "ours_model": None, "layers": None, "tokens": None, "ours_gpu": None,
                         "ours_pct": float("nan"), "ours_extra": None, "same_model": False, "note": "no data",
                         "source": None})
            continue
        for o in m.to_dict("records"):
            rows.append({**c, "ours_model": o["model"], "layers": o["layers"], "tokens": o["tokens"],
                         "ours_gpu": o["gpu"], "ours_pct": o["ours_pct"], "ours_extra": o["ours_extra"],
                         "same_model": same_model(c["model"], o["model"]),
                         "note": f"{o['baseline']} -> {o['optimized']} ({o['from']})", "source": o["source"]})
    cols = CLAIM_COLUMNS + ["ours_model", "layers", "tokens", "ours_gpu", "ours_pct", "ours_extra", "same_model",
                            "note", "source"]
    return pd.DataFrame(rows, columns=cols)


# --- savings models ----------------------------------------------------------------------------------------------

SAVINGS_COLUMNS = ["run", "opt", "model", "layers", "tokens", "arm", "formula", "predicted_ms", "measured_ms",
                   "error_ms", "measured_over_predicted", "from", "source"]


def _bench_savings(profiles) -> pd.DataFrame:
    """Per-arm savings rows of the benchmark suites' summary frames (a config-level prediction repeated on every
    arm row, as offload writes it, is kept once, on the optimized arm)."""
    frames = bench_frames(profiles)
    cols = ["run", "opt", "model", "layers", "tokens", "arm", "formula", "predicted_ms", "measured_ms", "from",
            "source"]
    parts = [f for f in (frames.get("summary"), frames.get("savings"))
             if f is not None and len(f) and ({"predicted_saving_ms", "measured_saving_ms"} & set(f.columns))]
    if not parts:
        return _empty(cols)
    s = pd.concat(parts, ignore_index=True)
    for k in ("predicted_saving_ms", "measured_saving_ms", "formula", "config", "model", "layers", "tokens"):
        if k not in s:
            s[k] = None
    s = s[s["predicted_saving_ms"].notna() | s["measured_saving_ms"].notna()]
    rows = []
    if "backend" not in s:
        s["backend"] = None
    keys = ["run", "bench", "config", "model", "backend", "layers", "tokens", "predicted_saving_ms",
            "measured_saving_ms"]
    for key, g in s.groupby(keys, dropna=False, sort=False):
        kd = dict(zip(keys, key))
        arms = list(g["arm"])
        arm = OPTIMIZED.get(kd["bench"]) if len(arms) > 1 and OPTIMIZED.get(kd["bench"]) in arms else arms[0]
        r = g[g["arm"] == arm].iloc[0]
        be = kd["backend"] if kd["backend"] is not None and kd["backend"] == kd["backend"] else None
        rows.append({"run": kd["run"], "opt": kd["bench"], "model": kd["model"], "layers": kd["layers"],
                     "tokens": kd["tokens"], "arm": f"{arm} ({be})" if be else arm,
                     "formula": _first(r["formula"], BENCH_FORMULAS.get(kd["bench"])),
                     "predicted_ms": kd["predicted_saving_ms"],
                     "measured_ms": kd["measured_saving_ms"], "from": "bench", "source": r["source"]})
    return pd.DataFrame(rows, columns=cols)


def savings_table(profiles: str | None = None) -> pd.DataFrame:
    """Savings models against measurement: one row per comparison with a prediction or a measurement (A/B runs'
    savings_model and the benchmark suites' predicted / measured saving). error_ms = measured - predicted;
    measured_over_predicted = measured / predicted (1 = the model is exact; offload calls it overlap efficiency)."""
    a = ab_comparisons(profiles).assign(**{"from": "ab"})
    a = a.rename(columns={"optimized": "arm"})
    frames = [a[["run", "opt", "model", "layers", "tokens", "arm", "formula", "predicted_ms", "measured_ms", "from",
                 "source"]]] if len(a) else []
    b = _bench_savings(profiles)
    if len(b):
        frames.append(b)
    c = pd.concat(frames, ignore_index=True) if frames else _empty(SAVINGS_COLUMNS)
    c = c[c["predicted_ms"].notna() | c["measured_ms"].notna()] if len(c) else c
    if c.empty:
        return _empty(SAVINGS_COLUMNS)
    out = c[["run", "opt", "model", "layers", "tokens", "arm", "formula", "predicted_ms", "measured_ms", "from",
             "source"]].copy()
    p = pd.to_numeric(out["predicted_ms"], errors="coerce")
    m = pd.to_numeric(out["measured_ms"], errors="coerce")
    out["predicted_ms"], out["measured_ms"] = p, m
    out["error_ms"] = m - p
    out["measured_over_predicted"] = np.where(p.abs() > 0, m / p.where(p.abs() > 0), np.nan)
    return out[SAVINGS_COLUMNS].reset_index(drop=True)


def savings_figure(df: pd.DataFrame, visualize: bool = False):
    """Measured vs predicted saving (ms), one point per comparison, with the y = x line."""
    import plotly.express as px
    import plotly.graph_objects as go

    d = df.dropna(subset=["predicted_ms", "measured_ms"])
    fig = px.scatter(d, x="predicted_ms", y="measured_ms", color="opt", hover_data=["model", "layers", "tokens",
                                                                                    "source"],
                     title="savings models: measured vs predicted (ms per step)")
    if len(d):
        lo = float(min(d["predicted_ms"].min(), d["measured_ms"].min(), 0.0))
        hi = float(max(d["predicted_ms"].max(), d["measured_ms"].max()))
        fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="y = x", line=dict(dash="dot")))
    if visualize:
        fig.show()
    return fig


# --- L sweep ----------------------------------------------------------------------------------------------------

SWEEP_COLUMNS = ["group", "layers", "baseline", "optimized", "baseline_ms", "optimized_ms", "saving_ms"]


def l_sweep(summary: pd.DataFrame, baseline: str | None = None, optimized: str | None = None,
            by=("bench", "model", "backend", "tokens"), y: str = "step_ms") -> pd.DataFrame:
    """Saving per layer count: for each group (`by` columns present in `summary`) and each `layers`, the baseline
    arm's `y` minus the optimized arm's. Arms default to the bench's BASELINES / OPTIMIZED. `summary` is one row per
    (config, arm), e.g. `bench_frames(...)["summary"]`."""
    if summary is None or summary.empty or "layers" not in summary or "arm" not in summary or y not in summary:
        return _empty(SWEEP_COLUMNS)
    keys = [k for k in by if k in summary]
    rows = []
    groups = summary.groupby(keys, dropna=False, sort=False) if keys else [((), summary)]
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        bench = dict(zip(keys, key)).get("bench")
        b_arm = baseline or BASELINES.get(bench)
        o_arm = optimized or OPTIMIZED.get(bench)
        label = " ".join(str(k) for k in key if k is not None and k == k) or "all"
        for L, gl in g.groupby("layers", sort=True):
            vb = pd.to_numeric(gl.loc[gl["arm"] == b_arm, y], errors="coerce").median()
            vo = pd.to_numeric(gl.loc[gl["arm"] == o_arm, y], errors="coerce").median()
            if vb != vb or vo != vo:
                continue
            rows.append({"group": label, "layers": int(L), "baseline": b_arm, "optimized": o_arm,
                         "baseline_ms": float(vb), "optimized_ms": float(vo), "saving_ms": float(vb - vo)})
    if not rows:
        return _empty(SWEEP_COLUMNS)
    return pd.DataFrame(rows, columns=SWEEP_COLUMNS)


def bench_sweep(profiles: str | None = None, suite: str = "packing") -> tuple[pd.DataFrame, pd.DataFrame]:
    """(sweep, fit) of a benchmark suite's L sweep: its own "sweep" records (layers, saving_ms; packing writes them,
    grouped by model and backend) when present, else `l_sweep` of its per-arm summary; the fit's predicted slope
    from its "sweep_fits" records (`predicted_slope_ms_per_layer`, = p·s) or from `predicted_slopes`."""
    frames = bench_frames(profiles, suite)
    sw = frames.get("sweep")
    pred: dict = {}
    if sw is not None and len(sw) and {"layers", "saving_ms"} <= set(sw.columns):
        keys = [k for k in ("bench", "model", "backend", "tokens") if k in sw]
        d = sw.copy()
        d["group"] = d[keys].astype(str).agg(" ".join, axis=1) if keys else "all"
        for c, alt in (("baseline_ms", "rebuild_ms"), ("optimized_ms", "cached_ms")):
            d[c] = d[alt] if alt in d else np.nan
        d["baseline"] = BASELINES.get(suite)
        d["optimized"] = OPTIMIZED.get(suite)
        sweep = d[SWEEP_COLUMNS].sort_values(["group", "layers"]).reset_index(drop=True)
        fits = frames.get("sweep_fits")
        if fits is not None and "predicted_slope_ms_per_layer" in fits:
            for r in fits.to_dict("records"):
                label = " ".join(str(r.get(k)) for k in keys if k in r and r.get(k) is not None)
                pred[label] = r["predicted_slope_ms_per_layer"]
    else:
        sweep = l_sweep(frames["summary"])
        pred = predicted_slopes(frames["summary"])
    return sweep, l_sweep_fit(sweep, predicted_slope_ms=pred)


def l_sweep_comparisons(comps: pd.DataFrame) -> pd.DataFrame:
    """An L sweep from comparisons (`ab_comparisons` / `all_comparisons`: e.g. `python -m workbench.ab --opt packing
    --layers L` at several L): saving = baseline_step_ms - optimized_step_ms per (opt, model, tokens, arms) and L
    (the median where an L was run more than once)."""
    if comps is None or comps.empty:
        return _empty(SWEEP_COLUMNS)
    c = comps.dropna(subset=["layers", "baseline_step_ms", "optimized_step_ms"])
    rows = []
    for key, g in c.groupby(["opt", "model", "tokens", "baseline", "optimized"], dropna=False, sort=False):
        label = f"{key[0]} {key[1]} {key[2]:.0f}" if key[2] == key[2] else f"{key[0]} {key[1]}"
        for L, gl in g.groupby("layers", sort=True):
            b = float(pd.to_numeric(gl["baseline_step_ms"]).median())
            o = float(pd.to_numeric(gl["optimized_step_ms"]).median())
            rows.append({"group": label, "layers": int(L), "baseline": key[3], "optimized": key[4],
                         "baseline_ms": b, "optimized_ms": o, "saving_ms": b - o})
    if not rows:
        return _empty(SWEEP_COLUMNS)
    return pd.DataFrame(rows, columns=SWEEP_COLUMNS)


def linear_fit(x, y) -> dict:
    """Least-squares y = slope·x + intercept: slope, intercept, r2, rmse and n (NaN where fewer than 2 points or x
    constant)."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    n = int(x.size)
    nan = float("nan")
    if n < 2 or np.ptp(x) == 0:
        return {"n": n, "slope": nan, "intercept": nan, "r2": nan, "rmse": nan}
    slope, intercept = np.polyfit(x, y, 1)
    pred = slope * x + intercept
    ss_res = float(((y - pred) ** 2).sum())
    ss_tot = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else nan)
    return {"n": n, "slope": float(slope), "intercept": float(intercept), "r2": float(r2),
            "rmse": float(math.sqrt(ss_res / n))}


FIT_COLUMNS = ["group", "n_points", "slope_ms_per_layer", "intercept_ms", "r2", "rmse_ms",
               "predicted_slope_ms_per_layer", "slope_error_pct", "implied_zero_layer"]


def l_sweep_fit(sweep: pd.DataFrame, x: str = "layers", y: str = "saving_ms", predicted_slope_ms=None) -> pd.DataFrame:
    """Linear fit of the saving against L per group: the (L-1)·s model says saving = s·L - s, so slope = s (per
    rebuilding pass: s·p with checkpointing), intercept = -s and the fit crosses zero at L = 1.

    `predicted_slope_ms`: a number or {group: number} (e.g. p·s from measured build costs); then
    slope_error_pct = (slope - predicted) / predicted · 100. `implied_zero_layer` = -intercept / slope (1 when the
    (L-1) form holds)."""
    if sweep is None or sweep.empty:
        return _empty(FIT_COLUMNS)
    rows = []
    for grp, g in sweep.groupby("group", sort=False) if "group" in sweep else [("all", sweep)]:
        f = linear_fit(g[x], g[y])
        pred = predicted_slope_ms.get(grp) if isinstance(predicted_slope_ms, dict) else predicted_slope_ms
        pred = _num(pred)
        err = (f["slope"] - pred) / pred * 100.0 if pred == pred and pred != 0 else float("nan")
        zero = -f["intercept"] / f["slope"] if f["slope"] == f["slope"] and f["slope"] != 0 else float("nan")
        rows.append({"group": grp, "n_points": f["n"], "slope_ms_per_layer": f["slope"], "intercept_ms": f["intercept"],
                     "r2": f["r2"], "rmse_ms": f["rmse"], "predicted_slope_ms_per_layer": pred,
                     "slope_error_pct": err, "implied_zero_layer": zero})
    return pd.DataFrame(rows, columns=FIT_COLUMNS)


def predicted_slopes(summary: pd.DataFrame, by=("bench", "model", "backend", "tokens")) -> dict:
    """{group: predicted slope of saving vs L, ms per layer} from a benchmark summary, for `l_sweep_fit`: its
    `predicted_slope_ms_per_layer` column, else `s_ms` times `passes` (2 with checkpointing when absent): the
    (L-1)·s model removes one build per layer per rebuilding pass. Groups are labelled as in `l_sweep`."""
    if summary is None or summary.empty:
        return {}
    keys = [k for k in by if k in summary]
    out = {}
    for key, g in (summary.groupby(keys, dropna=False, sort=False) if keys else [((), summary)]):
        key = key if isinstance(key, tuple) else (key,)
        label = " ".join(str(k) for k in key if k is not None and k == k) or "all"
        if "predicted_slope_ms_per_layer" in g:
            v = pd.to_numeric(g["predicted_slope_ms_per_layer"], errors="coerce").median()
        elif "s_ms" in g:
            passes = pd.to_numeric(g["passes"], errors="coerce").median() if "passes" in g else 2.0
            v = pd.to_numeric(g["s_ms"], errors="coerce").median() * (passes if passes == passes else 2.0)
        else:
            continue
        if v == v:
            out[label] = float(v)
    return out


def l_sweep_figure(sweep: pd.DataFrame, fit: pd.DataFrame | None = None, visualize: bool = False):
    """Saving (ms) against L per group, with the fitted line of each group."""
    import plotly.express as px
    import plotly.graph_objects as go

    fig = px.scatter(sweep, x="layers", y="saving_ms", color="group", title="saving vs layers (L sweep)",
                     labels={"saving_ms": "saving_ms (baseline - optimized)"})
    fit = l_sweep_fit(sweep) if fit is None else fit
    for r in fit.to_dict("records"):
        g = sweep[sweep["group"] == r["group"]]
        if len(g) < 2 or r["slope_ms_per_layer"] != r["slope_ms_per_layer"]:
            continue
        xs = np.array([g["layers"].min(), g["layers"].max()], dtype=float)
        fig.add_trace(go.Scatter(x=xs, y=r["slope_ms_per_layer"] * xs + r["intercept_ms"], mode="lines",
                                 name=f"fit {r['group']} (r2 {r['r2']:.3f})", line=dict(dash="dash")))
    if visualize:
        fig.show()
    return fig


# --- syncs -----------------------------------------------------------------------------------------------------

SYNC_COLUMNS = ["run", "opt", "arm", "layer", "pass", "source", "syncs_per_step", "witness"]
_SYNC_METRIC = re.compile(r"^syncs_by_(?:layer_pass|layer)/(?P<layer>[^/]+)(?:/(?P<pass>[^/]+))?$")
_SYNC_SOURCE = re.compile(r"^syncs_by_source/(?P<source>.+)$")


def syncs_attribution(profiles: str | None = None) -> pd.DataFrame:
    """Syncs per step attributed to layer / pass / source line, per arm, long format, from
    (a) results.csv rows `syncs_by_layer_pass/<layer>/<pass>`, `syncs_by_layer/<layer>`, `syncs_by_source/<src>`
    (witness "counter"; averaged over the steps that recorded them), (b) benchmark summary columns named
    `syncs_<layer>_<pass>` (e.g. moe's `syncs_L00_forward`; witness "counter"), and (c) the sync events of every GPU
    trace (witness "trace", `workbench.traces.sync_counts`, per step). Empty when none is in the folder."""
    rows = []
    df = ab_results(profiles)
    if len(df):
        m = df["metric"].astype(str)
        sel = df[m.str.startswith("syncs_by_")]
        for (run, opt, arm, metric), g in sel.groupby(["run", "opt", "arm", "metric"], dropna=False):
            v = pd.to_numeric(g["value"], errors="coerce")
            steps = g["step"].notna().sum()
            per_step = float(v.mean()) if steps else float(v.sum())
            a = _SYNC_METRIC.match(metric)
            s = _SYNC_SOURCE.match(metric)
            rows.append({"run": run, "opt": opt, "arm": arm, "layer": a.group("layer") if a else None,
                         "pass": (a.group("pass") if a else None), "source": s.group("source") if s else None,
                         "syncs_per_step": per_step, "witness": "counter"})
    s = bench_frames(profiles)["summary"]
    pat = re.compile(r"^syncs_(L\d+)_([a-z]+)$")
    for col in [c for c in s.columns if pat.match(str(c))] if len(s) else []:
        layer, pass_ = pat.match(col).groups()
        for r in s.to_dict("records"):
            v = _num(r.get(col))
            if v == v:
                rows.append({"run": r["run"], "opt": r["bench"], "arm": r["arm"], "layer": layer, "pass": pass_,
                             "source": None, "syncs_per_step": v, "witness": "counter"})
    for t in trace_files(profiles).to_dict("records"):
        if t["format"] not in ("events", "nsys-sqlite", "torch"):
            continue
        if t["format"] != "events" and t["has_events"]:
            continue
        try:
            ev = load_trace(t["path"])
        except Exception:  # noqa: BLE001 - an unreadable trace is skipped, the others stand
            continue
        if not (ev["kind"] == "kernel").any():
            continue  # a CPU trace witnesses no syncs
        from workbench.traces import sync_counts
        sc = sync_counts(ev)
        for r in sc.to_dict("records"):
            rows.append({"run": t["run"], "opt": t["opt"], "arm": t["arm"], "layer": r["layer"],
                         "pass": r["pass"] or None, "source": f"{r['kind']}:{r['name']}", "syncs_per_step": r["count"],
                         "witness": "trace"})
    logs = run_log_attribution(profiles)
    if len(logs):
        rows += logs.to_dict("records")
    if not rows:
        return _empty(SYNC_COLUMNS)
    return pd.DataFrame(rows, columns=SYNC_COLUMNS)


def syncs_by_layer(attr: pd.DataFrame) -> pd.DataFrame:
    """Pivot of an attribution frame: one row per (witness, run, opt, arm, layer), one column per pass, and a
    `total` column (syncs per step)."""
    a = attr[attr["layer"].notna()].copy() if len(attr) else attr
    if a.empty:
        return _empty(["witness", "run", "opt", "arm", "layer", "total"])
    a["pass"] = a["pass"].fillna("all")
    p = a.pivot_table(index=["witness", "run", "opt", "arm", "layer"], columns="pass", values="syncs_per_step",
                      aggfunc="sum", fill_value=0.0)
    p["total"] = p.sum(axis=1)
    p.columns.name = None
    return p.reset_index()


def syncs_by_source(attr: pd.DataFrame, top: int = 15) -> pd.DataFrame:
    """The `top` source lines by syncs per step, per (witness, run, opt, arm)."""
    a = attr[attr["source"].notna()] if len(attr) else attr
    if a.empty:
        return _empty(["witness", "run", "opt", "arm", "source", "syncs_per_step"])
    g = a.groupby(["witness", "run", "opt", "arm", "source"], dropna=False)["syncs_per_step"].sum().reset_index()
    g = g.sort_values(["witness", "run", "opt", "arm", "syncs_per_step"], ascending=[True, True, True, True, False])
    return g.groupby(["witness", "run", "opt", "arm"], dropna=False).head(top).reset_index(drop=True)


def sources_side_by_side(attr: pd.DataFrame) -> pd.DataFrame:
    """Per (run, opt, arm) and source line ("file.py:123", the function name dropped): syncs per step by each witness
    in its own column, and `differs` where they do not match (e.g. CUDA's debug mode also warns on a blocking
    host-to-device copy, which the dispatch counter does not count)."""
    a = attr[attr["source"].notna()].copy() if len(attr) else attr
    if a.empty:
        return _empty(["run", "opt", "arm", "source", "differs"])
    a["source"] = a["source"].astype(str).str.replace(r"\s*\(.*\)$", "", regex=True)
    p = a.pivot_table(index=["run", "opt", "arm", "source"], columns="witness", values="syncs_per_step",
                      aggfunc="sum")
    p.columns.name = None
    # only arms seen by two or more witnesses are compared
    p = p[p.groupby(level=["run", "opt", "arm"]).transform("count").max(axis=1) > 0]
    w = list(p.columns)
    p["differs"] = p[w].fillna(0).nunique(axis=1) > 1 if len(w) > 1 else False
    p = p.reset_index()
    multi = p.groupby(["run", "opt", "arm"])[w].transform(lambda c: c.notna().any()).sum(axis=1) > 1 if len(w) > 1 \
        else pd.Series(False, index=p.index)
    return p[multi].sort_values(["run", "arm", w[0]], ascending=[True, True, False]).reset_index(drop=True)


def count_syncs_live(opt: str = "packing", arms=None, model: str | None = None, tokens: int = 256, steps: int = 1,
                     layers: int | None = None, seed: int = 0) -> pd.DataFrame:
    """Run a tiny CPU training step per arm (default: every arm of `opt`; arms a CPU cannot run raise) with the
    dispatch-level sync counter and return its attribution, long format (columns of `syncs_attribution`, witness
    "counter (live, CPU)"): rows by (layer, pass) and rows by source line. On a CPU the counter reports what would
    sync on CUDA. Seconds on the tiny presets; for notebooks whose profiles folder has no per-layer attribution."""
    import dataclasses

    import torch

    from workbench import opts as registry
    from workbench.ab import CPU_DEFAULTS, apply_arms
    from workbench.data import make_batches, to_device
    from workbench.harness import enable_checkpointing, mean_per_step, train_steps
    from workbench.instrument import Ranges, instrument_layers
    from workbench.models import build_model

    mod = registry.module(opt)
    arms = list(arms or mod.ARMS)
    name = model or CPU_DEFAULTS[opt]["model"]
    device = torch.device("cpu")
    m = build_model(name, layers=layers, device=device, seed=seed)
    enable_checkpointing(m)
    instrument_layers(m)
    cpu_batches = make_batches("lognormal:5.5:0.8:16", tokens, 1, m.config.vocab_size, seed=seed)
    rows = []
    for arm in arms:
        handle = apply_arms(m, {opt: arm})
        try:
            # each arm gets its own copies: collate-time work (precomputed metadata) writes into batch.meta
            fresh = [dataclasses.replace(b, doc_lens=list(b.doc_lens), meta=dict(b.meta)) for b in cpu_batches]
            batches = to_device(fresh, device, prepare=handle.prepare_batch)
            recs = train_steps(m, batches, steps=steps, warmup=0, ranges=Ranges(nvtx=False, profiler=False),
                               count_syncs=True, inputs_fn=handle.inputs_fn)
        finally:
            handle.revert()
        lp = mean_per_step(recs, "syncs_by_layer_pass")
        src = mean_per_step(recs, "syncs_by_source")
        run = f"live {name} cpu"
        for (layer, pass_), v in lp.items():
            rows.append({"run": run, "opt": opt, "arm": arm, "layer": layer or "model", "pass": pass_, "source": None,
                         "syncs_per_step": v, "witness": "counter (live, CPU)"})
        for s, v in src.items():
            rows.append({"run": run, "opt": opt, "arm": arm, "layer": None, "pass": None, "source": s,
                         "syncs_per_step": v, "witness": "counter (live, CPU)"})
        if not lp and not src:
            rows.append({"run": run, "opt": opt, "arm": arm, "layer": "model", "pass": None, "source": None,
                         "syncs_per_step": 0.0, "witness": "counter (live, CPU)"})
    return pd.DataFrame(rows, columns=SYNC_COLUMNS)


WITNESS_COLUMNS = ["run", "opt", "model", "arm", "scope", "counter_syncs_per_step", "cuda_debug_syncs_per_step",
                   "trace_syncs_per_step", "agree", "note", "source"]


def _witness_note(counter, debug, trace) -> tuple[object, str]:
    have = {k: v for k, v in (("counter", counter), ("debug mode", debug), ("trace", trace)) if v == v}
    if len(have) < 2:
        missing = [k for k in ("debug mode", "trace") if k not in have]
        return None, ("one witness only: " + ", ".join(f"no {k}" for k in missing) +
                      " (CUDA's sync debug mode needs a GPU and --cross-check; the trace witness needs a GPU trace)")
    vals = list(have.values())
    if max(vals) - min(vals) < 0.5:
        return True, "agree"
    parts = []
    if debug == debug and counter == counter and debug != counter:
        parts.append(f"debug mode - counter = {debug - counter:+.1f}: debug mode also warns on blocking host-to-device "
                     "copies and on declared syncs (expected_sync), which the counter leaves out, and misses "
                     "torch.cuda.synchronize / Event.synchronize (see sources_side_by_side)")
    if trace == trace and counter == counter and trace != counter:
        parts.append(f"trace - counter = {trace - counter:+.1f}: the trace also sees the timers' event syncs and "
                     "declared syncs, and one sync per blocking read, not per value read")
    return False, "; ".join(parts)


def three_witnesses(profiles: str | None = None) -> pd.DataFrame:
    """The three sync witnesses side by side, per arm: the dispatch-level counter (syncs_per_step), CUDA's sync
    debug mode (cuda_sync_warnings_per_step, with --cross-check on a GPU) and the trace (host-blocking sync events
    per step of the arm's GPU trace). `agree` is None with one witness, else whether they match within 0.5 per
    step; `note` says why they differ. A/B runs give per-step numbers (scope "step"); benchmark suites' equivalence
    checks give one forward+backward (scope "check")."""
    rows = []
    arms = ab_arms(profiles)
    trace_counts = _trace_syncs_per_step(profiles)
    for a in arms.to_dict("records"):
        counter = _num(a.get("syncs_per_step"))
        debug = _num(a.get("cuda_sync_warnings_per_step"))
        trace = _num(a.get("trace_syncs_per_step"))
        if trace != trace:
            trace = _num(trace_counts.get((a["run"], a["opt"], a["arm"])))
        agree, note = _witness_note(counter, debug, trace)
        rows.append({"run": a["run"], "opt": a["opt"], "model": a["model"], "arm": a["arm"], "scope": "step",
                     "counter_syncs_per_step": counter, "cuda_debug_syncs_per_step": debug,
                     "trace_syncs_per_step": trace, "agree": agree, "note": note, "source": a["source"]})
    s = bench_frames(profiles)["summary"]
    if len(s):
        for r in s.to_dict("records"):
            scope = "check" if _num(r.get("check_syncs")) == _num(r.get("check_syncs")) else "step"
            counter = _num(r.get("check_syncs") if scope == "check" else r.get("syncs_per_step"))
            if counter != counter:
                continue
            debug = _num(_first(r.get("check_cuda_sync_warnings"), r.get("cuda_sync_warnings_per_step"),
                                r.get("cuda_sync_warnings")))
            agree, note = _witness_note(counter, debug, float("nan"))
            label = _first(r.get("config"), r.get("model"))
            be = r.get("backend")
            if be is not None and be == be:
                label = f"{label} ({be})"
            rows.append({"run": r["run"], "opt": r["bench"], "model": label,
                         "arm": r["arm"], "scope": scope, "counter_syncs_per_step": counter,
                         "cuda_debug_syncs_per_step": debug, "trace_syncs_per_step": float("nan"), "agree": agree,
                         "note": note, "source": r["source"]})
    for r in run_logs(profiles).to_dict("records"):
        agree, note = _witness_note(r["counter_syncs_per_step"], r["cuda_debug_syncs_per_step"], float("nan"))
        rows.append({"run": r["run"], "opt": "plain HF", "model": f"{r['model']} L{r['layers']} T{r['tokens']}",
                     "arm": r["log"][:-4], "scope": "step", "counter_syncs_per_step": r["counter_syncs_per_step"],
                     "cuda_debug_syncs_per_step": r["cuda_debug_syncs_per_step"], "trace_syncs_per_step": float("nan"),
                     "agree": agree, "note": note + _folder_note(r["run"], r["log"], profiles),
                     "source": r["source"]})
    if not rows:
        return _empty(WITNESS_COLUMNS)
    return pd.DataFrame(rows, columns=WITNESS_COLUMNS)


def _folder_note(run: str, log: str, profiles) -> str:
    """The recorded explanation of a log (the note of the COMMAND*.txt that names it), for a witness note."""
    for p in sorted(glob.glob(os.path.join(_root_of(profiles), run, "COMMAND*.txt"))):
        c = parse_command_txt(p)
        if log in c["files"] and c["note"]:
            return f" | recorded: {c['note']}"
    return ""


def _trace_syncs_per_step(profiles) -> dict:
    out = {}
    for t in trace_files(profiles).to_dict("records"):
        if t["format"] != "events":
            continue
        try:
            ev = load_trace(t["path"])
        except Exception:  # noqa: BLE001
            continue
        if (ev["kind"] == "kernel").any():
            from workbench.traces import host_syncs_per_step
            out[(t["run"], t["opt"], t["arm"])] = host_syncs_per_step(ev)
    return out


def _last_json_line(path: str):
    """The last line of a text file that parses as JSON (the CLIs' final line), or None."""
    try:
        with open(path, errors="replace") as f:
            lines = [ln.strip() for ln in f if ln.strip().startswith(("{", "["))]
    except OSError:
        return None
    for ln in reversed(lines):
        try:
            return json.loads(ln)
        except ValueError:
            continue
    return None


def _witness_rows(path: str) -> list:
    """The op rows of a witness file: witness.json, or the last JSON line of a witness.log."""
    data = _read_json(path) if path.endswith(".json") else _last_json_line(path)
    if isinstance(data, list) and data and all(isinstance(x, dict) and "op" in x for x in data):
        return data
    return []


def witness_ops(profiles: str | None = None) -> pd.DataFrame:
    """Per-op witness rows (`python -m workbench.bench.witness`: its last stdout line, saved as witness.json or in
    witness.log): op, counter, cpu_only, cuda_debug_warnings, agree."""
    rows = []
    for r in runs_of(profiles, "witness").to_dict("records"):
        for name in ("witness.json", "witness.log"):
            data = _witness_rows(os.path.join(r["path"], name))
            if data:
                rows += [{"run": r["rel_path"], **x} for x in data]
                break
    df = pd.DataFrame(rows, columns=["run", "op", "counter", "cpu_only", "cuda_debug_warnings"])
    df["agree"] = df["counter"] == df["cuda_debug_warnings"]
    return df


# --- logs of `python -m workbench.run` ----------------------------------------------------------------------------

RUNLOG_COLUMNS = ["run", "log", "command", "model", "layers", "tokens", "device", "steps", "step_ms",
                  "counter_syncs_per_step", "cuda_debug_syncs_per_step", "source"]


def _run_log_files(profiles) -> list[str]:
    root = _root_of(profiles)
    out = []
    for p in sorted(glob.glob(os.path.join(root, "**", "*.log"), recursive=True)):
        if os.sep + "traces" + os.sep in p or os.path.basename(p).startswith(("witness", "overhead")):
            continue
        doc = _last_json_line(p)
        if isinstance(doc, dict) and "steps" in doc and "syncs_by_layer" in doc:
            out.append(p)
    return out


def run_logs(profiles: str | None = None) -> pd.DataFrame:
    """Logs of `python -m workbench.run` (one instrumented run of a plain HF model, e.g. `run_qwen3.log`): one row per
    log with the model, layers, tokens, median step_ms, the counter's syncs per step and, with --cross-check on a GPU,
    CUDA's sync-debug-mode warnings per step; `command` from the folder's COMMAND.txt."""
    root = _root_of(profiles)
    rows = []
    for p in _run_log_files(profiles):
        doc = _last_json_line(p)
        steps = doc.get("steps") or []
        cmd = command_notes(os.path.dirname(p))["files"].get(os.path.basename(p))
        col = lambda k: [x.get(k) for x in steps if x.get(k) is not None]  # noqa: E731
        rows.append({"run": _rel(os.path.dirname(p), root), "log": os.path.basename(p), "command": cmd,
                     "model": doc.get("model"), "layers": doc.get("layers"), "tokens": doc.get("tokens"),
                     "device": doc.get("device"), "steps": len(steps),
                     "step_ms": float(np.median(col("step_ms"))) if col("step_ms") else float("nan"),
                     "counter_syncs_per_step": float(np.mean(col("syncs"))) if col("syncs") else float("nan"),
                     "cuda_debug_syncs_per_step": float(np.mean(col("cuda_sync_warnings")))
                     if col("cuda_sync_warnings") else float("nan"),
                     "source": _rel(p, os.path.dirname(root))})
    return pd.DataFrame(rows, columns=RUNLOG_COLUMNS)


def run_log_attribution(profiles: str | None = None) -> pd.DataFrame:
    """The per-layer / per-pass table and the per-source-line table that `python -m workbench.run` prints (last
    step), parsed from its logs, in the long format of `syncs_attribution` (opt "plain HF", arm = the log's stem)."""
    root = _root_of(profiles)
    rows = []
    for p in _run_log_files(profiles):
        run, arm = _rel(os.path.dirname(p), root), os.path.basename(p)[:-4]
        doc = _last_json_line(p) or {}
        lines = open(p, errors="replace").read().splitlines()
        mode, header = None, []
        for ln in lines:
            t = ln.strip()
            if t.startswith("syncs per layer and pass"):
                mode, header = "layer", []
                continue
            if t.startswith("source lines that sync"):
                mode, header = "source", []
                continue
            if t.startswith("witnesses differ") and "by source line" in t:
                mode, header = "debug", []
                continue
            if not t or t.startswith("{"):
                mode = None
                continue
            if mode == "layer":
                parts = t.split()
                if parts[0] == "layer":
                    header = parts
                    continue
                if header and len(parts) == len(header):
                    for h, v in zip(header[1:], parts[1:]):
                        if h != "total":
                            rows.append({"run": run, "opt": "plain HF", "arm": arm, "layer": parts[0], "pass": h,
                                         "source": None, "syncs_per_step": float(v), "witness": "counter"})
            elif mode in ("source", "debug"):
                parts = t.split(None, 1)
                if len(parts) == 2 and parts[0].isdigit():
                    rows.append({"run": run, "opt": "plain HF", "arm": arm, "layer": None, "pass": None,
                                 "source": parts[1], "syncs_per_step": float(parts[0]),
                                 "witness": "counter" if mode == "source" else "cuda debug mode"})
        if not any(r["arm"] == arm and r["layer"] for r in rows) and doc.get("syncs_by_layer"):
            for layer, v in doc["syncs_by_layer"].items():
                rows.append({"run": run, "opt": "plain HF", "arm": arm, "layer": layer or "model", "pass": "all",
                             "source": None, "syncs_per_step": float(v), "witness": "counter"})
    return pd.DataFrame(rows, columns=SYNC_COLUMNS)


# --- traces ----------------------------------------------------------------------------------------------------

TRACE_COLUMNS = ["run", "opt", "arm", "format", "path", "size_mib", "has_events"]


def trace_files(profiles: str | None = None) -> pd.DataFrame:
    """Every trace file below `profiles` (`traces/<opt>/<arm>.<ext>` inside A/B runs, or anywhere): format "torch"
    (Chrome trace: open in Perfetto), "nsys" (.nsys-rep: Nsight Systems), "nsys-sqlite", "events" (the parsed
    events DataFrame, parquet / csv.gz); `has_events` = a parsed events file sits next to it."""
    root = _root_of(profiles)
    rows = []
    if not os.path.isdir(root):
        return _empty(TRACE_COLUMNS)
    for d, dirs, files in os.walk(root):
        dirs.sort()
        for fn in sorted(files):
            suf = next((s for s in _TRACE_SUFFIXES if fn.endswith(s)), None)
            if suf is None:
                continue
            stem = fn[: -len(suf)]
            fmt = {".pt.trace.json.gz": "torch", ".pt.trace.json": "torch", ".nsys-rep": "nsys",
                   ".sqlite": "nsys-sqlite", ".events.parquet": "events", ".events.csv.gz": "events"}[suf]
            p = os.path.join(d, fn)
            parts = _rel(d, root).split(os.sep)
            if "traces" in parts:
                i = parts.index("traces")
                run = os.sep.join(parts[:i]) or "."
                opt = parts[i + 1] if len(parts) > i + 1 else None
            else:
                run, opt = _rel(d, root), None
            has_events = any(os.path.exists(os.path.join(d, stem + s)) for s in (".events.parquet", ".events.csv.gz"))
            rows.append({"run": run, "opt": opt, "arm": stem, "format": fmt, "path": p,
                         "size_mib": os.path.getsize(p) / 2**20, "has_events": has_events})
    if not rows:
        return _empty(TRACE_COLUMNS)
    return pd.DataFrame(rows, columns=TRACE_COLUMNS)


def load_trace(path: str) -> pd.DataFrame:
    """The events DataFrame of a trace file (`workbench.traces.load_events`); a saved events file next to a raw
    trace is preferred (parsing a large Chrome trace takes a while)."""
    from workbench.traces import load_events

    for suf in (".pt.trace.json.gz", ".pt.trace.json", ".nsys-rep", ".sqlite"):
        if path.endswith(suf):
            stem = path[: -len(suf)]
            for ev in (".events.parquet", ".events.csv.gz"):
                if os.path.exists(stem + ev):
                    return load_events(stem + ev)
            if suf == ".nsys-rep":
                if os.path.exists(stem + ".sqlite"):
                    return load_events(stem + ".sqlite")
                raise ValueError(f"{path}: export it first: nsys export --type sqlite -o {stem}.sqlite {path}")
    return load_events(path)


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
        if part in ("attn/meta", "meta"):
            return "metadata build"
        if part == "reload":
            return "reload"
        if part:
            return str(part)
        return pass_ or "range"
    if kind == "memcpy":
        return f"copy {name}"
    if kind == "sync":
        return "sync"
    if kind == "kernel":
        return f"kernel ({pass_})" if pass_ else "kernel"
    return kind


def _merge_kernels(tl: pd.DataFrame, gap_ms: float) -> pd.DataFrame:
    """Merge back-to-back kernels of one lane, category and layer (gaps under `gap_ms`) into one bar named
    "N kernels": a GPU step has thousands of kernels, and a timeline needs the busy intervals."""
    k = tl["category"].astype(str).str.startswith("kernel")
    if gap_ms is None or gap_ms < 0 or not k.any():
        return tl
    ker = tl[k].sort_values(["lane", "start_ms"], kind="stable")
    out, cur = [], None
    for r in ker.to_dict("records"):
        key = (r["lane"], r["category"], r["layer"])
        same = cur is not None and key == (cur["lane"], cur["category"], cur["layer"])
        if same and r["start_ms"] - cur["end_ms"] <= gap_ms:
            cur["end_ms"] = max(cur["end_ms"], r["end_ms"])
            cur["_n"] += 1
            continue
        if cur is not None:
            out.append(cur)
        cur = {**r, "_n": 1}
    out.append(cur)
    for r in out:
        if r["_n"] > 1:
            r["name"] = f"{r['_n']} kernels"
        r["dur_ms"] = r["end_ms"] - r["start_ms"]
        del r["_n"]
    merged = pd.DataFrame(out, columns=TIMELINE_COLUMNS)
    return pd.concat([tl[~k], merged], ignore_index=True).sort_values("start_ms", kind="stable").reset_index(drop=True)


def layer_timeline(events: pd.DataFrame, step: int = 0, layers=None, max_rows: int = 20000,
                   merge_gap_ms: float | None = 0.05) -> pd.DataFrame:
    """Rows to draw one traced step as a per-layer timeline: lanes "host" (wb/Lxx/fwd|recompute|bwd ranges),
    "host parts" (their attn / mlp parts), "host meta / reload" (metadata builds, offload reloads), "host syncs",
    and one lane per GPU stream labelled by role
    (compute / copy, from `stream_roles`), with its kernels, copies and GPU-projected ranges. Times in ms from the
    step's start; `layers` = a list like ["L00", "L01"] keeps those layers' events (GPU work without a layer stays).
    Back-to-back kernels of one lane and layer (gaps <= `merge_gap_ms`) become one bar ("N kernels"; None keeps
    every kernel). Events of a torch CPU trace give the host lane only."""
    if events is None or events.empty:
        return _empty(TIMELINE_COLUMNS)
    win = step_windows(events)
    ev = events
    if len(win):
        w = win.iloc[min(step, len(win) - 1)]
        t0, t1 = int(w["start_ns"]), int(w["end_ns"])
        ev = ev[(ev["end_ns"] >= t0) & (ev["start_ns"] <= t1)]
    else:
        t0 = int(ev["start_ns"].min())
    ev = ev[ev["kind"].isin(["range", "kernel", "memcpy", "sync"])]
    host_ranges = (ev["kind"] == "range") & ev["stream"].isna()
    keep = ~host_ranges | ev["name"].astype(str).str.match(r"^wb/L\d+/")
    ev = ev[keep]
    if layers is not None:
        ev = ev[ev["layer"].isin(list(layers)) | (ev["layer"].isna() & ev["stream"].notna())]
    roles = stream_roles(events).set_index("stream")["lane"].to_dict() if events["stream"].notna().any() else {}
    rows = []
    for r in ev.head(max_rows).to_dict("records"):
        st = r["stream"]
        if st is not None and st == st:
            lane = roles.get(int(st), f"stream {int(st)}")
        elif r["kind"] == "sync":
            lane = "host syncs"
        else:
            lane = "host"
        layer, pass_, part = (None if (v is None or v != v) else v for v in (r["layer"], r["pass"], r["part"]))
        cat = _category(r["kind"], r["name"], pass_, part)
        if lane == "host" and part:  # nested ranges get their own lanes so the short ones stay visible
            lane = "host meta / reload" if cat in ("metadata build", "reload") else "host parts"
        rows.append({"lane": lane, "category": cat, "name": r["name"],
                     "layer": layer, "pass": pass_, "part": part, "start_ms": (r["start_ns"] - t0) / 1e6,
                     "end_ms": (r["end_ns"] - t0) / 1e6, "dur_ms": (r["end_ns"] - r["start_ns"]) / 1e6})
    if not rows:
        return _empty(TIMELINE_COLUMNS)
    return _merge_kernels(pd.DataFrame(rows, columns=TIMELINE_COLUMNS), merge_gap_ms)


def timeline_figure(tl: pd.DataFrame, title: str = "one step, per layer", visualize: bool = False):
    """Horizontal bars (start_ms .. end_ms) per lane, coloured by category: copy vs compute streams, metadata
    builds, syncs."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for cat, g in tl.groupby("category", sort=False):
        text = [f"{n}<br>{la or ''} {p or ''} {pt or ''}<br>{d:.3f} ms" for n, la, p, pt, d in
                zip(g["name"], g["layer"], g["pass"], g["part"], g["dur_ms"])]
        fig.add_trace(go.Bar(y=g["lane"], x=g["dur_ms"], base=g["start_ms"], orientation="h", name=str(cat),
                             hovertext=text, hoverinfo="text"))
    fig.update_layout(barmode="overlay", title=title, xaxis_title="ms from step start", yaxis_title="",
                      height=250 + 40 * max(1, tl["lane"].nunique() if len(tl) else 1))
    if visualize:
        fig.show()
    return fig


META_COLUMNS = ["layer", "pass", "builds_per_step", "total_ms_per_step", "median_ms"]


def meta_builds(events: pd.DataFrame) -> pd.DataFrame:
    """Packed-metadata builds (`wb/Lxx/attn/meta` ranges; GPU projections where the trace has them) per layer and
    pass: builds and ms per step, median ms per build. The rebuild arm shows one per layer and pass; cached one per
    step; precomputed none."""
    from workbench.traces.analysis import ranges, steps_in

    r = ranges(events, "auto")
    r = r[r["part"].isin(["attn/meta", "meta"])].copy() if len(r) else r
    if r.empty:
        return _empty(META_COLUMNS)
    n = steps_in(events)
    r["dur_ms"] = (r["end_ns"] - r["start_ns"]) / 1e6
    r["pass"] = r["pass"].fillna("")
    g = r.groupby(["layer", "pass"])["dur_ms"]
    out = pd.DataFrame({"builds_per_step": g.count() / n, "total_ms_per_step": g.sum() / n,
                        "median_ms": g.median()}).reset_index()
    return out[META_COLUMNS]


def arm_events(profiles: str | None = None, opt: str | None = None) -> dict:
    """{(run, opt, arm): events DataFrame} of every trace below `profiles` (one per arm, saved events preferred)."""
    out = {}
    tf = trace_files(profiles)
    if opt is not None and len(tf):
        tf = tf[tf["opt"] == opt]
    order = {"events": 0, "nsys-sqlite": 1, "torch": 2, "nsys": 3}
    for t in sorted(tf.to_dict("records"), key=lambda t: order.get(t["format"], 9)):
        key = (t["run"], t["opt"], t["arm"])
        if key in out or t["format"] == "nsys":
            continue
        try:
            out[key] = load_trace(t["path"])
        except Exception:  # noqa: BLE001 - an unreadable trace is skipped
            continue
    return out


# --- display -----------------------------------------------------------------------------------------------------

def show(fig, png: str | None = None) -> None:
    """Show a figure ($WB_PLOTLY_RENDERER, default "plotly_mimetype+notebook": JupyterLab / VS Code draw the plotly
    mimetype, classic Jupyter and nbconvert HTML the HTML output, with plotly.js embedded once per notebook, so it
    is viewable offline); also write a PNG to `png` (or to $WB_PNG_DIR/<title>.png) when kaleido is installed."""
    import plotly.io as pio

    wanted = os.environ.get("WB_PLOTLY_RENDERER", "plotly_mimetype+notebook")
    if pio.renderers.default != wanted:  # set once: plotly.js is embedded at activation, not in every figure
        pio.renderers.default = wanted
    fig.show()
    out = png
    if out is None and os.environ.get("WB_PNG_DIR"):
        title = (fig.layout.title.text or "figure") if fig.layout.title else "figure"
        out = os.path.join(os.environ["WB_PNG_DIR"], re.sub(r"[^A-Za-z0-9_.-]+", "_", title)[:80] + ".png")
    if out:
        try:
            import kaleido  # noqa: F401
        except ImportError:
            return
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        fig.write_image(out)


def no_data(what: str, profiles: str | None = None) -> str:
    """The line a notebook prints where a folder lacks a suite."""
    return f"no data for {what} in {_root_of(profiles)}"


# --- more figures ------------------------------------------------------------------------------------------------

def claims_figure(cvo: pd.DataFrame, visualize: bool = False):
    """Claimed gain (bar: low..high) beside ours (points), per claim with a percent figure; `cvo` is
    `claims_vs_ours(...)`."""
    import plotly.graph_objects as go

    d = cvo[cvo["claimed_low_pct"].notna()].copy()
    d["claim_label"] = d["opt"] + " " + d["scope"] + " " + d["model"].fillna("").astype(str)
    claims = d.drop_duplicates("claim_label")
    fig = go.Figure()
    fig.add_trace(go.Bar(x=claims["claim_label"], y=claims["claimed_high_pct"], name="claimed",
                         hovertext=claims["claim"], opacity=0.5))
    ours = d[d["ours_pct"].notna()]
    if len(ours):
        fig.add_trace(go.Scatter(x=ours["claim_label"], y=ours["ours_pct"], mode="markers", name="ours",
                                 marker=dict(size=10),
                                 hovertext=(ours["ours_model"].astype(str) + " L" + ours["layers"].astype(str) +
                                            " T" + ours["tokens"].astype(str) + " " + ours["ours_gpu"].astype(str))))
    fig.update_layout(title="claimed vs measured gain (%; baseline/optimized - 1)", yaxis_title="gain_pct")
    if visualize:
        fig.show()
    return fig


def overhead_figure(samples: pd.DataFrame, visualize: bool = False):
    """Step times per instrumentation variant (box plot); `samples` is `overhead_samples(...)`."""
    import plotly.express as px

    fig = px.box(samples, x="variant", y="step_ms", color="run", points="all",
                 title="instrumentation overhead: step_ms per variant")
    if visualize:
        fig.show()
    return fig


def syncs_figure(by_layer: pd.DataFrame, visualize: bool = False):
    """Syncs per step per layer and arm (bars), one facet per optimization; `by_layer` is `syncs_by_layer(...)`."""
    import plotly.express as px

    fig = px.bar(by_layer, x="layer", y="total", color="arm", barmode="group", facet_row="opt",
                 hover_data=["witness", "run"], title="syncs per step, per layer and arm",
                 labels={"total": "syncs_per_step"})
    if visualize:
        fig.show()
    return fig


def per_layer_figure(df: pd.DataFrame, y=("reload_ms", "compute_ms"), x: str = "layer", color: str = "config",
                     title: str = "per-layer inputs of the savings model", visualize: bool = False):
    """Lines of the `y` columns against `x`, one colour per `color` value (e.g. offload's c = reload_ms and
    g = compute_ms per layer, from `bench_frames(..., "offload")["layers"]`)."""
    import plotly.express as px

    ys = [c for c in y if c in df]
    long = df.melt(id_vars=[c for c in (x, color) if c in df], value_vars=ys, var_name="what", value_name="ms")
    fig = px.line(long, x=x, y="ms", color=color if color in long else None, line_dash="what", markers=True,
                  title=title)
    if visualize:
        fig.show()
    return fig
