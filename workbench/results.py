"""Run results on disk: `profiles/<run_id>/` (or `--out`) holding results.csv, summary.json and meta.json.

- `results.csv`: long format, one row per number: run_id, opt, arm, rep, step, metric, value, unit, plus the
  environment columns (`ENV_COLUMNS`), so runs concatenate and compare.
- `summary.json`: the A/B JSON object (DESIGN "CLI contract").
- `meta.json`: command, git sha, package versions, device, driver, NVML readings, status
  ("running" | "complete" | "incomplete" | "failed").

Every write is atomic (temp file + os.replace): a Ctrl-C leaves the earlier files intact and the run marked
incomplete. `load_run(dir)` reads a run back for notebooks.
"""
from __future__ import annotations

import csv
import datetime as _dt
import json
import math
import os
import platform
import random
import shlex
import subprocess
import sys

import pandas as pd

RESULT_COLUMNS = ["run_id", "opt", "arm", "rep", "step", "metric", "value", "unit"]
ENV_COLUMNS = ["device", "gpu_name", "model", "layers", "tokens", "attn", "torch", "transformers", "git_sha"]

STEP_METRICS = {"step_ms": "ms", "fwd_ms": "ms", "bwd_ms": "ms", "opt_ms": "ms", "syncs": "count",
                "syncs_declared": "count", "cuda_sync_warnings": "count", "peak_mem_mib": "MiB", "tokens": "tokens",
                "loss": "nats"}
"""StepRecord fields written as rows, with their units."""


def new_run_id(tag: str = "") -> str:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    suffix = f"{random.randrange(16**4):04x}"
    return f"{stamp}-{tag}-{suffix}" if tag else f"{stamp}-{suffix}"


def atomic_write_text(path: str, text: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def atomic_write_json(path: str, obj) -> None:
    atomic_write_text(path, json.dumps(_jsonable(obj), indent=2, allow_nan=False, default=str) + "\n")


def _jsonable(o):
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {str(k): _jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_jsonable(v) for v in o]
    if hasattr(o, "item") and not isinstance(o, (str, bytes)):
        try:
            return _jsonable(o.item())
        except (ValueError, TypeError):
            return str(o)
    return o


def git_sha(cwd: str | None = None) -> str | None:
    """HEAD's sha (with "-dirty" when tracked files changed), or None outside a git checkout."""
    cwd = cwd or os.path.dirname(os.path.abspath(__file__))
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True,
                             timeout=10).stdout.strip()
        if not sha:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def versions() -> dict:
    """Versions of Python and the packages the numbers depend on (None where not installed)."""
    from importlib import metadata
    out = {"python": platform.python_version()}
    for pkg in ("torch", "transformers", "peft", "triton", "numpy", "nvidia-ml-py", "nvtx", "flash-attn"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    try:
        import torch
        out["cuda"] = torch.version.cuda
        out["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    except Exception:  # pragma: no cover
        pass
    return out


def device_info(device) -> dict:
    """Device name (and capability, driver, memory on CUDA)."""
    import torch
    d = torch.device(device)
    info = {"type": d.type, "name": platform.processor() or platform.machine(), "cpu_count": os.cpu_count()}
    if d.type == "cuda":
        p = torch.cuda.get_device_properties(d)
        info.update(name=p.name, capability=f"{p.major}.{p.minor}", total_mem_mib=p.total_memory / 2**20)
        from workbench.instrument import NvmlSampler
        info.update(NvmlSampler(device_index=d.index or 0).device_info())
    return info


class RunWriter:
    """Collects rows and writes the run folder; every `flush()` rewrites results.csv atomically."""

    def __init__(self, out_dir: str, run_id: str, *, argv: list[str] | None = None, env: dict | None = None,
                 extra_meta: dict | None = None):
        self.out_dir = out_dir
        self.run_id = run_id
        os.makedirs(out_dir, exist_ok=True)
        self.env = {c: None for c in ENV_COLUMNS}
        self.env.update(env or {})
        self.rows: list[dict] = []
        self.meta = {
            "run_id": run_id, "status": "running",
            "command": " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv)),
            "cwd": os.getcwd(), "git_sha": git_sha(), "versions": versions(), "host": platform.node(),
            "started": _dt.datetime.now().isoformat(timespec="seconds"), "ended": None,
        }
        self.meta.update(extra_meta or {})
        self.env.setdefault("git_sha", self.meta["git_sha"])
        if self.env.get("git_sha") is None:
            self.env["git_sha"] = self.meta["git_sha"]
        for k in ("torch", "transformers"):
            if self.env.get(k) is None:
                self.env[k] = self.meta["versions"].get(k)
        self.write_meta()

    # -- paths ----------------------------------------------------------------------------------------------
    def path(self, *parts: str) -> str:
        p = os.path.join(self.out_dir, *parts)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        return p

    # -- rows ----------------------------------------------------------------------------------------------
    def add(self, opt: str, arm: str | None, metric: str, value, unit: str, rep=None, step=None, **env) -> None:
        row = {"run_id": self.run_id, "opt": opt, "arm": arm, "rep": rep, "step": step, "metric": metric,
               "value": value, "unit": unit}
        e = dict(self.env)
        e.update(env)
        row.update({c: e.get(c) for c in ENV_COLUMNS})
        self.rows.append(row)

    def add_steps(self, opt: str, arm: str, rep: int, records, **env) -> None:
        """One row per StepRecord field in `STEP_METRICS` (None values skipped)."""
        for r in records:
            for metric, unit in STEP_METRICS.items():
                v = getattr(r, metric, None)
                if v is None:
                    continue
                self.add(opt, arm, metric, v, unit, rep=rep, step=r.step, **env)

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows, columns=RESULT_COLUMNS + ENV_COLUMNS)

    def flush(self) -> None:
        path = os.path.join(self.out_dir, "results.csv")
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=RESULT_COLUMNS + ENV_COLUMNS)
            w.writeheader()
            for r in self.rows:
                w.writerow({k: ("" if v is None or (isinstance(v, float) and not math.isfinite(v)) else v)
                            for k, v in r.items()})
        os.replace(tmp, path)

    # -- json ----------------------------------------------------------------------------------------------
    def write_summary(self, summary: dict) -> None:
        atomic_write_json(os.path.join(self.out_dir, "summary.json"), summary)

    def write_meta(self) -> None:
        atomic_write_json(os.path.join(self.out_dir, "meta.json"), self.meta)

    def finish(self, status: str, **extra) -> None:
        """Flush rows and mark the run `status` (complete / incomplete / failed)."""
        self.meta.update(extra)
        self.meta["status"] = status
        self.meta["ended"] = _dt.datetime.now().isoformat(timespec="seconds")
        self.flush()
        self.write_meta()


def load_run(run_dir: str) -> tuple[pd.DataFrame, dict, dict]:
    """(results DataFrame, summary dict or {}, meta dict) of a run folder."""
    df = pd.read_csv(os.path.join(run_dir, "results.csv"))

    def j(name):
        p = os.path.join(run_dir, name)
        if not os.path.exists(p):
            return {}
        with open(p) as f:
            return json.load(f)
    return df, j("summary.json"), j("meta.json")


def step_stats(values) -> dict:
    """median, p20, p80 and n of a list of numbers (NaN-free)."""
    import numpy as np
    v = np.asarray([x for x in values if x is not None and x == x], dtype=float)
    if v.size == 0:
        return {"median": None, "p20": None, "p80": None, "n": 0}
    return {"median": float(np.median(v)), "p20": float(np.percentile(v, 20)), "p80": float(np.percentile(v, 80)),
            "n": int(v.size)}
