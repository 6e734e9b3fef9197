"""Each process's mean saving (baseline - arm, ms per step) from its run folder: what the between-run estimate
(`workbench.analysis.between_runs`), MoE's mechanism test (`moe_work`) and the job scripts read, computed as the
process-level verdict computes it (`verdicts.rep_savings`)."""
from __future__ import annotations

import os

from workbench.savings import verdicts


def process_saving(results, c: dict) -> float | None:
    """One process's mean saving (baseline - arm, ms per step) of comparison `c` from its results.csv frame: the mean
    of its reps' mean paired differences (`verdicts.rep_savings`, as the process-level verdict computes it)."""
    base, arm = (c.get("baseline") or {}).get("arm"), (c.get("optimized") or {}).get("arm")
    if not base or not arm or c.get("status") != "ok":
        return None
    reps = verdicts.rep_savings(results, c["name"], base, arm)
    return sum(reps) / len(reps) if reps else None


def folder_savings(run_dir: str) -> dict:
    """{comparison name: [each process's mean saving, ms]} of one `--processes K` folder anywhere (no profiles root:
    no exclusions; the processes that ran to the end), or of a plain run folder (`--processes 1` runs in place: one
    process, its summary.json beside)."""
    from workbench.measure.results import load_run, process_dirs

    out: dict = {}
    plain = [run_dir] if os.path.isfile(os.path.join(run_dir, "summary.json")) else []
    for d in process_dirs(run_dir) or plain:
        results, summary, _ = load_run(d)  # each process's files read once, for all its comparisons
        for c in summary.get("comparisons", []):
            v = process_saving(results, c)
            if v is not None:
                out.setdefault(c["name"], []).append(v)
    return out
