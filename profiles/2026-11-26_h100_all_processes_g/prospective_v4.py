"""Issue 37's prospective design v4, fixed BEFORE the GPU run that judges it. Run from the repo root:

    python profiles/2026-11-26_h100_all_processes_g/prospective_v4.py   # writes prospective_v4.json here (deterministic)

Why a v4: on a seventh H100 (machine G, GPU-37258bfc, this folder: `--opt all --headline --processes 2`, every
comparison of the headline in each process), packing's two processes read 1.1748x and 1.1786x, above the upper end
of v2's interval for one process on a new machine [1.0070, 1.1613] (v2's rule, recomputed for M = 2: 0 of 2 inside,
null 5% quantile 1 of 2: it would FAIL; not a pre-registered check, as M = 2 and 3 reps were not v2's plan). The
machine means of packing so far: A 1.061, B 1.080, C 1.104, D 1.116, E 1.063 (its gate processes, the same command),
G 1.177: the machine component is larger than three machines showed (v2's omega 1.85%). MoE on G (1.110, 1.110) lay
inside v3's interval; offload on G (1.0143, 1.0144) inside v2's.

What it states, per comparison, from EVERY clean process of every machine that ran the headline command (R as each
ran; rep 0 left out of the replication campaign's runs, whose engine kept it), by v2's "spread" model
(`replication.spread_prediction` / `spread_null`): the interval for one process on a NEW machine and the pass rule
for M = 4 processes there.
- packing (`rebuild` vs `cached`): machines A, B, C, D, E, G (J = 6), R = 4 reps a process except G's 3 (the
  held-out run's R is 3 too);
- moe and offload are not revised: G's processes lay inside their intervals (v3's and v2's stand). Folding G in was
  tried and is not done: with 2 near-identical processes on G (moe 1.1098 / 1.1103, offload 1.0143 / 1.0144) its
  1-df process variance is tiny, the spread of log variances across machines (eta) balloons, and the intervals
  became [0.85, 1.39] (moe) and [0.91, 1.13] (offload): a 2-process machine says little about process spread;
- all: ONE machine (G, K = 2): no machine component, so no claim about a new machine. It needs a second machine's
  processes first (then a v5), said in `not_estimated`.
The held-out run: `gpu/jobs/prospective4.sh` (`--opt all --headline --processes 4 --seed 700`: every comparison in
each process, as on G) on a machine none of `machines`; analysis: `python gpu/analyze_heldout_v2.py $CAMP/prospective4
--design profiles/2026-11-26_h100_all_processes_g/prospective_v4.json`. Its `all` processes become the second
machine of `all`'s estimate (v5), whose held-out check needs a third.
"""
import json
import os
import sys

sys.path.insert(0, os.getcwd())
from workbench.ab.processes import per_rep_log_ratios  # noqa: E402
from workbench.measure import replication  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
P = os.path.dirname(HERE)
MACHINES = {"A": "GPU-3e294211", "B": "GPU-67f63166", "C": "GPU-04e06adb-d036-7a5b-f68b-2fa970fd5f24",
            "D": "GPU-a88e16ff-90c3-5501-345a-a2ebd366fc92", "E": "GPU-224ce504-ef8a-4a44-e7a3-a76ed41b0569",
            "G": "GPU-37258bfc-7ec2-cc3e-d74a-6b7342bdcb0c"}
REPL = os.path.join(P, "2026-11-26_h100_replication")
COMPARISONS = {
    "packing": ("rebuild", "cached", {
        "A": [(os.path.join(REPL, "packing_a"), 1)], "B": [(os.path.join(REPL, "packing_b"), 1)],
        "C": [(os.path.join(P, "2026-11-26_h100_heldout", "packing"), 0)],
        "D": [(os.path.join(P, "2026-11-26_h100_prospective2", "packing"), 0)],
        "E": [(os.path.join(P, "2026-11-26_h100_gate_e", "gate"), 0)], "G": [(HERE, 0)]}),
}
M, REPS, GPU_MINUTES, SEED = 4, 3, 23.4, 700
"""M processes of `--opt all --headline --reps 3` on one new machine; 23.4 minutes: 4 x G's mean process wall time
(329 s and 372 s, processes.json here); seeds 700.. never used."""
COMMON = "--headline --batches 1 --steps 2 --warmup 2 --warmup-max 6"
COMMAND = f"python -m workbench.ab --opt all {COMMON} --reps {REPS} --processes {M} --seed {SEED}"
RULE = ("machine check first: the held-out folder's gpu.csv UUID must start with none of `machines` (else refused, "
        "no verdict). model 'spread' (v2's), per comparison: pass when (1) the fraction of the M process means inside "
        "pi95 >= null.inside_null_q05 and (2) T = (L_new - mean L) / sd L <= null.spread_t_q95 "
        "(replication.spread_check), i.e. the SD of the M means <= null.max_sd_log. Fewer than 2 processes: not judged.")


def processes(folder, skip):
    with open(os.path.join(folder, "processes.json"), encoding="utf-8") as f:
        rec = json.load(f)
    return [(os.path.join(folder, p["folder"]), float(p["wall_s"]), skip) for p in rec["processes"]
            if p["rc"] == 0 and os.path.isfile(os.path.join(folder, p["folder"], "summary.json"))]


def main():
    root = os.path.dirname(P)
    comparisons = {}
    for name, (base, arm, by_machine) in COMPARISONS.items():
        groups, folders, wall_s = [], {}, 0.0
        for m, jobs in by_machine.items():
            procs = [p for folder, skip in jobs for p in processes(folder, skip)]
            groups.append([per_rep_log_ratios(d, name, base, arm, skip_reps=s) for d, _, s in procs])
            folders[m] = [os.path.relpath(d, root) for d, _, _ in procs]
            wall_s += sum(w for _, w, _ in procs)
        pred = replication.spread_prediction(groups)
        null = replication.spread_null(pred, M)
        factor = null["max_sd_log"] / max(pred["process_sd_log"])
        rule = (f"inside >= {null['inside_null_q05']:.3f} and the {M} means' SD <= {100 * null['max_sd_log']:.2f}% "
                f"(T <= {null['spread_t_q95']:.2f}: it fails only for a machine {factor:.1f}x noisier than the "
                f"noisiest of {pred['J']} seen)")
        comparisons[name] = {
            "baseline": base, "arm": arm, "model": "spread", "folders": folders,
            "estimate_gpu_minutes": round(wall_s / 60, 1), "prediction": pred,
            "heldout_plan": {"M": M, "reps": REPS, "gpu_minutes": GPU_MINUTES, "command": COMMAND, "null": null,
                             "pass_when": rule}}
        print(f"{name} (spread): {pred['speedup']:.4f}x [{pred['ci95'][0]:.4f}, {pred['ci95'][1]:.4f}] over "
              f"K={pred['K']} processes on J={pred['J']} machines (omega {100 * pred['omega']:.2f}%); one process on "
              f"a new machine: PI [{pred['pi95'][0]:.4f}, {pred['pi95'][1]:.4f}]; held out M={M}: {rule}")
    out = {"rule": RULE, "rule_commit": "the commit that adds this file, before any run it judges: git log "
                                        "--format=%h -- profiles/2026-11-26_h100_all_processes_g/prospective_v4.json",
           "machines": MACHINES,
           "supersedes": "prospective_v2.json's packing part (its interval did not hold on machine G: this folder's "
                         "COMMAND.txt); v2's offload and v3's moe stand",
           "not_estimated": {"all": "one machine (G, K = 2, this folder): a second machine's `--opt all --headline` "
                                    "processes first (the held-out run of this design supplies them), then a v5 and "
                                    "its held-out check on a third machine"},
           "run": {"job": "gpu/jobs/prospective4.sh", "writes": "$CAMP/prospective4",
                   "analysis": "python gpu/analyze_heldout_v2.py $CAMP/prospective4 --design "
                               "profiles/2026-11-26_h100_all_processes_g/prospective_v4.json",
                   "gpu_minutes": {"total": GPU_MINUTES}, "machine": "an H100 whose UUID is none of `machines`"},
           "comparisons": comparisons}
    with open(os.path.join(HERE, "prospective_v4.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, default=float)
        f.write("\n")


if __name__ == "__main__":
    main()
