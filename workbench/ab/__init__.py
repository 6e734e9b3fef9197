"""Interleaved A/B comparisons of the optimizations: a paired speedup with its 95% CI and a verdict per comparison,
equivalence checked on every run, sync counts and traces from separate passes.

    python -m workbench.ab                                   # --opt all: tiny presets on a CPU (time: profiles/timings.json)
    python -m workbench.ab --opt packing --trace torch       # + a torch.profiler pass of every arm
    python -m workbench.ab --opt packing --aa --reps 6       # A/A: the baseline against itself (the noise floor)
    python -m workbench.ab --opt packing --sweep layers=4,8,16,28      # one comparison per layer count
    python -m workbench.ab --opt moe --arms eager,grouped --target-ci 1 --budget-s 600
    python -m workbench.ab --opt all --nvtx-cost             # + per comparison: NVTX ranges off against on

How a comparison is measured (workbench/measure/engine.py): the model is built once; every arm sees the same sequence of
--batches packed batches. One discarded warm-up rep, then each rep runs every arm in a Williams order (over a cycle every arm
takes every position and comes right before every other arm equally often); per arm: apply, warm up until the step
time settles (at least --warmup steps and one pass over every batch, until a step is within --settle-pct
of the previous step on the same batch, at most --warmup-max), then --steps timed steps with no instrument but NVTX
ranges, then revert. Samples pair by (rep, step); the rep is the unit (arms run as blocks per rep): the speedup is
exp(mean over reps of log(mean baseline / mean arm)), with a 95% t-interval over reps (reps - 1 df) and a verdict
from 4 reps: faster, slower, or no detectable difference (±x%). No step is dropped; steps beyond 5 x MAD within an
arm and batch are listed. Under torchrun the samples are the slowest rank's step. After the timed reps, a counted pass (one
step per batch, the sync counter on) gives syncs per step and `instrumented_step_ms` (the counter's cost); --trace
adds profiled passes. Equivalence (workbench/measure/equivalence.py, criterion fixed before the run and written to
meta.json): one forward + backward of every arm on the first timed batch, relative L2 per LoRA gradient against the
baseline, or in bf16 against an fp32 run of the baseline on that batch.

Prints one table per comparison, then, as the last stdout line, one JSON object: {"run_id", "device",
"comparisons": [{"name", "opt", "model", "layers", "tokens", "baseline": ARM, "optimized": ARM, "others": [ARM],
"speedup", "speedup_ci95", "verdict", "n_pairs", "equivalent", "savings_model", ...}], "complete", "status"}.
Progress goes to stderr. Exit status 0 only when every comparison ran and every arm was equivalent; 2 for bad input
(one line, nothing written); 130 / 143 when interrupted (Ctrl-C / SIGTERM: the folder is kept, marked incomplete).
Files: runs/<run_id>/ (or --out, which must be new or empty unless --force): results.csv, summary.json, meta.json,
errors.log on every failure, traces/ when asked (workbench/measure/results.py describes the schema), and a file named
for the state while it is not complete: RUNNING (pid and heartbeat), INCOMPLETE or FAILED (workbench/measure/markers.py).

The package, along the data flow (each room one job):

    cli      argparse, converters, per-device defaults (no torch import: --help answers at once)
    config   ABConfig: the run's typed config tree (step/config's DataConfig + StepConfig), checked and resolved once
    planner  args -> validated comparisons (`plan`)
    session  folder, writer, NVML, signals, the comparison loop, verdicts, the final JSON (`main`), the nsys child
    runner   one comparison, phase by phase (`Runner`)
    arm      one arm on the device (its session, batch copies, memory)
    passes   torch.profiler and nsys passes
    summary  per-arm dicts and result rows

`from workbench import ab` exposes the main names (`ab.main`, `ab.Runner`, `ab.plan`, ...): they load on first use.
"""
from __future__ import annotations

import importlib

_HOME = {
    "main": "session", "_main": "session", "Terminated": "session", "_verdicts": "session",
    "_install_sigterm": "session",
    "parse_args": "cli", "parse_sweep": "ab_config", "ABConfig": "ab_config", "OPT_CHOICES": "cli", "HF_ATTN": "cli", "ARMS_HELP": "cli",
    "SWEEPABLE": "ab_config", "CPU_DEFAULTS": "cli", "GPU_DEFAULTS": "cli", "DOC": "cli",
    "DTYPE_CHOICES": "cli",
    "plan": "planner", "ArmSpec": "planner", "Comparison": "planner",
    "Runner": "runner", "_Session": "arm", "_free": "arm", "_fresh": "arm", "_plain": "arm",
    "DTYPES": "runner", "apply_arms": "runner", "unsupported_reason": "runner",
    "_Parked": "arm", "capture_child": "session",
}


def __getattr__(name: str):
    if name in _HOME:
        return getattr(importlib.import_module(f"workbench.ab.{_HOME[name]}"), name)
    raise AttributeError(f"module 'workbench.ab' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_HOME))
