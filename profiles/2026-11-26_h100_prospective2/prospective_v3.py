"""Issue 37's prospective design for MoE on a FIFTH machine, fixed BEFORE the GPU run that judges it. Run from the
repo root:

    python profiles/2026-11-26_h100_prospective2/prospective_v3.py   # writes prospective_v3.json here (deterministic)

Why a v3: prospective_v2.json kept prospective.json's rule for MoE (its estimate ran on machine A only, so one pooled
process SD and no machine component). On machine D (GPU-a88e16ff, this folder) MoE's 4 held-out processes gave
1.0861x (+1.3% from A's estimate), but 1 of 4 inside its interval [1.0473, 1.0975] (null 5% quantile 3/4) and a
spread 7.71x A's process variance (F interval [0.07, 5.89]): FAILED, as packing's pooled rule had failed on machine
C. Packing's and offload's v2 rule (each machine its own process SD) held on D.

What it states: MoE (`eager` vs `sort_bincount`) from EVERY process of machines A (profiles/2026-11-26_h100_replication/
moe_a, rep 0 left out as in v2) and D (this folder's moe, whose engine discards its own warm-up rep), by v2's
"spread" model (`replication.spread_prediction`, `replication.spread_null`): the interval for one process on a new
machine and the pass rule for M = 4 processes there. With J = 2 machines the machine component and the spread of
process variances are weakly known: the interval is what two machines say. Packing and offload are not re-run (they
held on D under v2). The machines in the estimates (A, B, C, D: every UUID any estimate or held-out check used) are
refused by the analysis: `python gpu/analyze_heldout_v2.py $CAMP/prospective3 --design
profiles/2026-11-26_h100_prospective2/prospective_v3.json`; the run: gpu/jobs/prospective3.sh.
"""
import json
import os
import sys

sys.path.insert(0, os.getcwd())
from workbench.ab.processes import per_rep_log_ratios  # noqa: E402
from workbench.measure import replication  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPL = os.path.join(os.path.dirname(HERE), "2026-11-26_h100_replication")
MACHINES = {"A": "GPU-3e294211", "B": "GPU-67f63166", "C": "GPU-04e06adb-d036-7a5b-f68b-2fa970fd5f24",
            "D": "GPU-a88e16ff-90c3-5501-345a-a2ebd366fc92"}
BY_MACHINE = {"A": [(os.path.join(REPL, "moe_a"), 1)], "D": [(os.path.join(HERE, "moe"), 0)]}
M, REPS, GPU_MINUTES, SEED = 4, 3, 6.8, 500
"""M and R as v2's MoE part; 6.8 minutes: the moe part's wall time on D (jobs.txt here); seeds 500.. never used."""
COMMON = "--headline --batches 1 --steps 2 --warmup 2 --warmup-max 6"
RULE = ("machine check first: the held-out folder's gpu.csv UUID must start with none of `machines` (else refused, "
        "no verdict). model 'spread' (v2's): pass when (1) the fraction of the M process means inside pi95 >= "
        "null.inside_null_q05 and (2) T = (L_new - mean L) / sd L <= null.spread_t_q95 (replication.spread_check), "
        "i.e. the SD of the M means <= null.max_sd_log. Fewer than 2 processes: not judged.")


def processes(folder, skip):
    with open(os.path.join(folder, "processes.json"), encoding="utf-8") as f:
        rec = json.load(f)
    return [(os.path.join(folder, p["folder"]), float(p["wall_s"]), skip) for p in rec["processes"]
            if p["rc"] == 0 and os.path.isfile(os.path.join(folder, p["folder"], "summary.json"))]


def main():
    root = os.path.dirname(os.path.dirname(HERE))
    groups, folders, wall_s = [], {}, 0.0
    for m, jobs in BY_MACHINE.items():
        procs = [p for folder, skip in jobs for p in processes(folder, skip)]
        groups.append([per_rep_log_ratios(d, "moe", "eager", "sort_bincount", skip_reps=s) for d, _, s in procs])
        folders[m] = [os.path.relpath(d, root) for d, _, _ in procs]
        wall_s += sum(w for _, w, _ in procs)
    pred = replication.spread_prediction(groups)
    null = replication.spread_null(pred, M)
    factor = null["max_sd_log"] / max(pred["process_sd_log"])
    rule = (f"inside >= {null['inside_null_q05']:.3f} and the {M} means' SD <= {100 * null['max_sd_log']:.2f}% "
            f"(T <= {null['spread_t_q95']:.2f}: it fails only for a machine {factor:.1f}x noisier than the noisiest "
            f"of {pred['J']} seen)")
    out = {"rule": RULE, "rule_commit": "the commit that adds this file, before any run it judges: git log "
                                        "--format=%h -- profiles/2026-11-26_h100_prospective2/prospective_v3.json",
           "machines": MACHINES, "supersedes": "prospective_v2.json's MoE part (its pooled rule failed on machine D)",
           "run": {"job": "gpu/jobs/prospective3.sh", "writes": "$CAMP/prospective3",
                   "analysis": "python gpu/analyze_heldout_v2.py $CAMP/prospective3 --design "
                               "profiles/2026-11-26_h100_prospective2/prospective_v3.json",
                   "gpu_minutes": {"moe": GPU_MINUTES, "total": GPU_MINUTES},
                   "machine": "a fifth H100: its UUID none of `machines`"},
           "comparisons": {"moe": {
               "baseline": "eager", "arm": "sort_bincount", "model": "spread", "folders": folders,
               "estimate_gpu_minutes": round(wall_s / 60, 1), "prediction": pred,
               "heldout_plan": {"M": M, "reps": REPS, "gpu_minutes": GPU_MINUTES,
                                "command": f"python -m workbench.ab --opt moe {COMMON} --reps {REPS} --processes {M} "
                                           f"--seed {SEED}",
                                "null": null, "pass_when": rule}}}}
    print(f"moe (spread): {pred['speedup']:.4f}x over K={pred['K']} processes on J={pred['J']} machines; one process "
          f"on a new machine: PI [{pred['pi95'][0]:.4f}, {pred['pi95'][1]:.4f}]; held out M={M}: {rule}")
    with open(os.path.join(HERE, "prospective_v3.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, default=float)
        f.write("\n")


if __name__ == "__main__":
    main()
