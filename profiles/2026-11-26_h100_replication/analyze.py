"""Issue 37's held-out check and the gate's same-commit runs, from this folder's processes. Run from the repo root:

    python profiles/2026-11-26_h100_replication/analyze.py      # prints the tables, writes analysis.json here

Processes: each `pNN/` is one `python -m workbench.ab ... --seed S` (jobs.txt); rep 0 of each is the warm-up rep
left out (the commit that ran them, a0cecde, had no discarded rep of its own). The estimate uses the first K = 4
processes of each comparison; every later process is held out (never used in the estimate).
"""
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.getcwd())
from workbench.ab.processes import per_rep_log_ratios  # noqa: E402
from workbench.analysis.loader import step_samples  # noqa: E402
from workbench.compare import gate_stats  # noqa: E402
from workbench.measure import power, replication  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
K = 4
COMPARISONS = [("packing", "rebuild", "cached", ["packing_a", "packing_b"]),
               ("moe", "eager", "sort_bincount", ["moe_a"]),
               ("offload", "sync_reload", "double_buffer", ["offload_a", "offload_b"])]


def procs(jobs):
    return [os.path.join(HERE, j, d) for j in jobs for d in sorted(os.listdir(os.path.join(HERE, j)))
            if d.startswith("p") and os.path.isdir(os.path.join(HERE, j, d))]


def rep_means(run, name, arm):
    by = {}
    for x in step_samples(run).get(name, []):
        if x["arm"] == arm and x["rep"] >= 1:
            by.setdefault(x["rep"], []).append(x["step_ms"])
    return [float(np.mean(v)) for _, v in sorted(by.items())]


out = {"K": K, "comparisons": []}
for name, base, arm, jobs in COMPARISONS:
    runs = procs(jobs)
    groups = [per_rep_log_ratios(r, name, base, arm, skip_reps=1) for r in runs]
    est = replication.process_estimate(groups[:K])
    held = [float(np.mean(g)) for g in groups[K:]]
    chk = replication.heldout_check(est, held)
    allp = replication.process_estimate(groups)
    single = [replication.process_estimate([g]) for g in groups[:1]]
    row = {"comparison": name, "baseline": base, "arm": arm, "processes": len(runs), "reps_per_process": len(groups[0]),
           "estimate_K4": est, "heldout": chk, "all_processes": allp,
           "heldout_speedups": [math.exp(m) for m in held]}
    out["comparisons"].append(row)
    print(f"{name}: K={K} estimate {est['speedup']:.4f}x CI [{est['ci95'][0]:.4f}, {est['ci95'][1]:.4f}] "
          f"PI [{est['pi95'][0]:.4f}, {est['pi95'][1]:.4f}] sigma {100*est['sigma']:.2f}% tau {100*est['tau']:.2f}%")
    print(f"   held out M={len(held)}: {json.dumps({k: v for k, v in chk.items() if not isinstance(v, list)}, default=float)}")
    print(f"   all {len(runs)} processes: {allp['speedup']:.4f}x CI [{allp['ci95'][0]:.4f}, {allp['ci95'][1]:.4f}] "
          f"PI [{allp['pi95'][0]:.4f}, {allp['pi95'][1]:.4f}] sigma {100*allp['sigma']:.2f}% tau {100*allp['tau']:.2f}%")

# The gate on the sync-heavy packing comparison's baseline arm: A/A run SD from 3 same-commit processes, the
# baseline run one more, then every other same-commit process as a "new" run, and the injected ones.
runs = procs(["packing_a", "packing_b"])
aa, baseline, new = runs[:3], runs[3], runs[4:] + runs[:3]
rs = gate_stats.run_sd([rep_means(r, "packing", "rebuild") for r in aa])
within = [np.log(rep_means(r, "packing", "rebuild")) for r in runs]
rep_sd_pct = 100 * math.sqrt(np.mean([np.var(w, ddof=1) for w in within]))
noise = power.Noise(rep_sd_pct=rep_sd_pct, step_sd_pct=0.1, batch_sd_pct=0.0, drift_pct=0.0)
design = gate_stats.GateDesign(reps=4, steps=2, batches=1, arms=2, run_sd_pct=rs["run_sd_pct"])
tol = gate_stats.tolerance_pct(noise, design, sims=2000)
power2 = gate_stats.detection_rate(noise, design, tol, slowdown_pct=2.0, sims=2000)
base_ms = rep_means(baseline, "packing", "rebuild")
decisions = [gate_stats.decide(gate_stats.speedup_ci(base_ms, rep_means(r, "packing", "rebuild"))["ci95"], tol)
             for r in new]
inj = procs(["packing_inject2pct"])
inj_dec = [gate_stats.decide(gate_stats.speedup_ci(base_ms, rep_means(r, "packing", "rebuild"))["ci95"], tol)
           for r in inj]
slow = np.mean([np.mean(rep_means(r, "packing", "rebuild")) for r in inj]) / \
    np.mean([np.mean(rep_means(r, "packing", "rebuild")) for r in runs]) - 1
out["gate"] = {"run_sd": rs, "rep_sd_pct": rep_sd_pct, "tolerance_pct": tol, "power_2pct_stated": power2,
               "same_commit_decisions": decisions, "injected_decisions": inj_dec,
               "injected_slowdown_pct_measured": 100 * slow}
print(f"gate: run SD {rs['run_sd_pct']:.2f}% (upper bound; point {rs['point_sd_pct']:.2f}%), rep SD {rep_sd_pct:.2f}%, "
      f"tolerance {tol:.2f}%, stated power at 2%: {power2:.2f}")
print(f"   {len(decisions)} same-commit gate runs: {decisions.count('fail')} fail; injected "
      f"(+{100*slow:.2f}% measured): {inj_dec.count('fail')}/{len(inj_dec)} fail")
with open(os.path.join(HERE, "analysis.json"), "w") as f:
    json.dump(out, f, indent=1, default=float)
