"""Issue 37's revised prospective design for a FOURTH machine, fixed BEFORE the GPU run that judges it. Run from the
repo root:

    python profiles/2026-11-26_h100_replication/prospective_v2.py   # writes prospective_v2.json here (deterministic)

Why a v2: prospective.json's prediction (machines A and B, one pooled process SD) was tested on 6 processes of
machine C: 5 of 6 inside its interval (holds), but their spread was 4.26x the pooled within-machine variance (F
interval [0.16, 3.38]): FAILED. Machines differ in their process SD too (packing: 0.84%, 1.63%, 2.49% on A, B, C).

What it states, per headline comparison:
- packing: the estimate from EVERY process of machines A, B (this folder, a0cecde, rep 0 left out) and C
  (profiles/2026-11-26_h100_heldout/packing, 15d877f, whose engine discards its own warm-up rep), each machine its
  own process SD: `replication.spread_prediction` (machine component omega, log-normal spread eta of the process
  variance across machines; the interval for one process on a new machine integrates over both, its level
  calibrated by simulation) and `replication.spread_null` (the pass rule's numbers for M processes of one new
  machine: the fraction inside >= its null 5% quantile, and the one-sided spread check T <= t_q95, said as the
  largest passing SD of the M process means);
- offload: the same model from its two machines (A 6, B 2 processes): with J = 2 and B's 1 df the spread check is
  nearly vacuous (stated in the json as max_sd_log); the interval is what two machines say;
- moe: ran on machine A only: no machine-to-machine information, so its interval and check are prospective.json's
  (`replication.machine_prediction`: no machine component; the F test against A's process variance); a failure
  there reads "the new machine differs from A", not "the model is wrong";
- the machines already in the estimate (their GPU UUIDs): the analysis refuses a held-out folder from any of them;
- the run: gpu/jobs/prospective2.sh (heldout.sh's packing / moe / offload parts, seeds never used before) and its
  GPU minutes; the analysis: python gpu/analyze_heldout_v2.py $CAMP/prospective2.
"""
import json
import os
import sys

sys.path.insert(0, os.getcwd())
from workbench.ab.processes import per_rep_log_ratios  # noqa: E402
from workbench.measure import replication  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
HELDOUT_C = os.path.join(os.path.dirname(HERE), "2026-11-26_h100_heldout")
MACHINES = {"A": "GPU-3e294211", "B": "GPU-67f63166", "C": "GPU-04e06adb-d036-7a5b-f68b-2fa970fd5f24"}
"""The H100s of the estimate (COMMAND.txt here: A and B, the short UUIDs it recorded; the held-out folder's
gpu.csv: C). A held-out folder whose gpu.csv UUID starts with any of these is refused."""
COMPARISONS = {  # comparison: (baseline, arm, {machine: [(folder, reps left out)]}, held-out M, held-out --reps)
    "packing": ("rebuild", "cached", {"A": [(os.path.join(HERE, "packing_a"), 1)],
                                      "B": [(os.path.join(HERE, "packing_b"), 1)],
                                      "C": [(os.path.join(HELDOUT_C, "packing"), 0)]}, 6, 4),
    "moe": ("eager", "sort_bincount", {"A": [(os.path.join(HERE, "moe_a"), 1)]}, 4, 3),
    "offload": ("sync_reload", "double_buffer", {"A": [(os.path.join(HERE, "offload_a"), 1)],
                                                 "B": [(os.path.join(HERE, "offload_b"), 1)]}, 4, 3),
}
GPU_MINUTES = {"packing": 5.0, "moe": 5.8, "offload": 4.4}
"""gpu/jobs/heldout.sh line 2 (per-process wall times of the first campaign), plus a few minutes to start."""
COMMON = "--headline --batches 1 --steps 2 --warmup 2 --warmup-max 6"
HELDOUT_SEED = 400
"""Seeds 400.. never used: A 0-19, B 12-19 and 100-105, C 200-209 and 300-302."""
RULE = ("machine check first: the held-out folder's gpu.csv UUID must start with none of `machines` (else: refused, "
        "no verdict). Then per comparison, each held-out process mean = the mean of its per-rep log(baseline / arm) "
        "over its timed reps (the engine discards its own warm-up rep). model 'spread' (packing, offload): pass when "
        "(1) the fraction of the M inside pi95 >= null.inside_null_q05 and (2) T = (L_new - mean L) / sd L <= "
        "null.spread_t_q95, L_new = log var(held-out means) - b(M - 1) (replication.spread_check), i.e. their SD <= "
        "null.max_sd_log. model 'pooled' (moe: one machine): prospective.json's rule (replication."
        "heldout_new_machine_check): inside >= inside_null_q05 and var(held-out means) / msw inside f_interval. "
        "Another M than planned: the null recomputed with the same seed. A part with fewer than 2 processes: not "
        "judged, said so.")


def processes(folder, skip):
    with open(os.path.join(folder, "processes.json"), encoding="utf-8") as f:
        rec = json.load(f)
    out = []
    for p in rec["processes"]:
        d = os.path.join(folder, p["folder"])
        if p["rc"] == 0 and os.path.isfile(os.path.join(d, "summary.json")):
            out.append((d, float(p["wall_s"]), skip))
    return out


def main():
    out = {"rule": RULE, "rule_commit": "the commit that adds this file, before any run it judges: "
                                        "git log --format=%h -- profiles/2026-11-26_h100_replication/prospective_v2.json",
           "machines": MACHINES, "supersedes": "prospective.json (its F test failed on machine C: spread 4.26x)",
           "run": {"job": "gpu/jobs/prospective2.sh", "writes": "$CAMP/prospective2",
                   "analysis": "python gpu/analyze_heldout_v2.py $CAMP/prospective2",
                   "gpu_minutes": {**GPU_MINUTES, "total": round(sum(GPU_MINUTES.values()), 1)},
                   "machine": "a fourth H100: its UUID none of `machines`"},
           "comparisons": {}}
    root = os.path.dirname(os.path.dirname(HERE))
    for name, (base, arm, by_machine, M, reps) in COMPARISONS.items():
        groups, wall_s, folders = [], 0.0, {}
        for m, jobs in by_machine.items():
            procs = [p for folder, skip in jobs for p in processes(folder, skip)]
            groups.append([per_rep_log_ratios(d, name, base, arm, skip_reps=s) for d, _, s in procs])
            wall_s += sum(w for _, w, _ in procs)
            folders[m] = [os.path.relpath(d, root) for d, _, _ in procs]
        if len(groups) >= 2:
            model, pred = "spread", replication.spread_prediction(groups)
            null = replication.spread_null(pred, M)
            factor = null["max_sd_log"] / max(pred["process_sd_log"])
            rule = (f"inside >= {null['inside_null_q05']:.3f} and the {M} means' SD <= "
                    f"{100 * null['max_sd_log']:.2f}% (T <= {null['spread_t_q95']:.2f}: it fails only for a machine "
                    f"{factor:.1f}x noisier than the noisiest of {pred['J']} seen)")
        else:
            model, pred = "pooled", replication.machine_prediction(groups)
            null = replication.new_machine_null(pred, M)
            rule = (f"inside >= {null['inside_null_q05']:.3f} and variance ratio in [{null['f_interval'][0]:.2f}, "
                    f"{null['f_interval'][1]:.2f}] (one machine: no machine component, A's process variance)")
        out["comparisons"][name] = {
            "baseline": base, "arm": arm, "model": model, "folders": folders,
            "estimate_gpu_minutes": round(wall_s / 60, 1), "prediction": pred,
            "heldout_plan": {"M": M, "reps": reps, "gpu_minutes": GPU_MINUTES[name],
                             "command": f"python -m workbench.ab --opt {name} {COMMON} --reps {reps} --processes {M} "
                                        f"--seed {HELDOUT_SEED}",
                             "null": null, "pass_when": rule}}
        print(f"{name} ({model}): {pred['speedup']:.4f}x over K={pred['K']} processes on J={pred['J']} machines; "
              f"one process on a new machine: PI [{pred['pi95'][0]:.4f}, {pred['pi95'][1]:.4f}]; held out M={M}: "
              f"{rule}")
    with open(os.path.join(HERE, "prospective_v2.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, default=float)
        f.write("\n")


if __name__ == "__main__":
    main()
