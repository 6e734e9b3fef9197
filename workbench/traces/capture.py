"""Trace capture: a torch.profiler pass of one arm, and Nsight Systems re-launches of the A/B command.

Timing runs and profiled runs are separate passes: a trace never inflates a timing (DESIGN).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import Callable

import torch

from workbench.errors import WorkbenchError

NSYS_PROFILE_ARGS = ["profile", "-t", "cuda,nvtx", "--sample=none", "--cpuctxsw=none", "--backtrace=none",
                     "-c", "cudaProfilerApi", "--capture-range-end=stop", "--force-overwrite", "true"]
"""CPU sampling off (a 2 GB capture of a toy run otherwise); capture only between
torch.cuda.profiler.start() and stop()."""


def torch_profile(run_steps: Callable[[Callable[[], None]], None], path: str, *, device: torch.device,
                  warmup: int, steps: int) -> str:
    """Profile `run_steps(on_step)` with torch.profiler and write a Chrome trace to `path` (`.json.gz`).

    `run_steps` runs `warmup + steps` steps and calls `on_step()` after each one (it is `prof.step`); the schedule
    records the last `steps`. On CUDA, `cuda_sync` events are enabled (the third sync witness).
    """
    from torch.profiler import profile, schedule

    from workbench.measure.engine import profiler_activities

    acts, kwargs = profiler_activities(device)  # the same profiler `--timing torch` times under (workbench.ab.dose)
    sched = schedule(wait=max(warmup - 1, 0), warmup=1 if warmup else 0, active=steps, repeat=1)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with profile(activities=acts, schedule=sched, record_shapes=False, with_stack=False, **kwargs) as prof:
        run_steps(prof.step)
    tmp = path + ".tmp.json.gz" if path.endswith(".gz") else path + ".tmp.json"
    prof.export_chrome_trace(tmp)
    os.replace(tmp, path)
    return path


def nsys_path() -> str | None:
    """The nsys binary: $NSYS, else `nsys` on PATH."""
    p = os.environ.get("NSYS")
    if p and os.path.isfile(p) and os.access(p, os.X_OK):
        return p
    return shutil.which("nsys")


def require_nsys() -> str:
    p = nsys_path()
    if p is None:
        raise WorkbenchError("--trace nsys: Nsight Systems (nsys) not found on PATH or in $NSYS; install Nsight Systems "
                             "(or the nsys that Nsight Compute carries) and put it on PATH or in $NSYS")
    return p


def nsys_command(nsys: str, out_stem: str, child_argv: list[str], module: str = "workbench.ab") -> list[str]:
    """`nsys profile ... -o OUT python -m MODULE ARGS` (the child wraps its measured steps in
    torch.cuda.profiler.start()/stop())."""
    return [nsys, *NSYS_PROFILE_ARGS, "-o", out_stem, sys.executable, "-m", module, *child_argv]


def run_nsys(nsys: str, out_stem: str, child_argv: list[str], log_path: str, timeout_s: float | None = None) -> str:
    """Run the child under nsys, convert a leftover `.qdstrm` with $QDSTRM_IMPORTER when needed, export SQLite.

    Returns the `.sqlite` path; raises WorkbenchError with the log's tail when a step fails.
    """
    os.makedirs(os.path.dirname(os.path.abspath(out_stem)), exist_ok=True)
    cmd = nsys_command(nsys, out_stem, child_argv)
    with open(log_path, "w") as log:
        log.write(" ".join(cmd) + "\n")
        log.flush()
        rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s)
    rep = out_stem + ".nsys-rep"
    if not os.path.exists(rep) and os.path.exists(out_stem + ".qdstrm"):
        imp = os.environ.get("QDSTRM_IMPORTER")
        if not imp or not os.path.exists(imp):
            raise WorkbenchError(f"nsys left only {out_stem}.qdstrm and $QDSTRM_IMPORTER is not set "
                                 "(point it at nsys's QdstrmImporter, or put libdw.so.1 and libelf.so.1 on LD_LIBRARY_PATH)")
        with open(log_path, "a") as log:
            subprocess.call([imp, "-i", out_stem + ".qdstrm"], stdout=log, stderr=subprocess.STDOUT)
    if not os.path.exists(rep):
        raise WorkbenchError(f"nsys produced no report (exit {rc}); see {log_path}: {_tail(log_path)}")
    sqlite = out_stem + ".sqlite"
    with open(log_path, "a") as log:
        rc2 = subprocess.call([nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "-o", sqlite, rep],
                              stdout=log, stderr=subprocess.STDOUT)
    if not os.path.exists(sqlite):
        raise WorkbenchError(f"nsys export failed (exit {rc2}); see {log_path}: {_tail(log_path)}")
    if rc != 0:
        raise WorkbenchError(f"the profiled child exited {rc}; see {log_path}: {_tail(log_path)}")
    return sqlite


def _tail(path: str, n: int = 1) -> str:
    try:
        with open(path) as f:
            lines = [ln.strip() for ln in f if ln.strip()]
        return " | ".join(lines[-n:])
    except OSError:
        return ""
