"""The prospective held-out design of issue 37, fixed BEFORE the GPU run that judges it. Run from the repo root:

    python profiles/2026-11-26_h100_replication/prospective.py     # writes prospective.json here (deterministic)

What it states, per headline comparison (packing, moe, offload):
- the estimate from EVERY committed process of this folder (packing 20, moe 8, offload 8), on the machines they ran
  on (COMMAND.txt: machine A = GPU-3e294211 ran packing_a, moe_a, offload_a; machine B = GPU-67f63166 ran packing_b,
  offload_b), rep 0 of each process left out (the warm-up rep a0cecde did not discard itself);
- the claim about a rerun on ANOTHER machine: `replication.machine_prediction` (the process means' ANOVA by machine:
  omega, the machine component, with J - 1 = 1 df for packing and offload; moe ran on one machine, so its interval
  assumes no machine component and the held-out machine tests exactly that). With 2 machines the interval is wide
  where omega is large (packing: about 2 Satterthwaite df): stated, not hidden;
- the held-out plan: M NEW processes of the same command on a THIRD machine (the next lease: gpu/jobs/heldout.sh),
  seeds never used here, and the pass rule with its numbers: the fraction of the M inside the interval >= its null 5%
  quantile (`replication.new_machine_null`: the M share one machine effect, simulated at the estimated omega / tau'),
  and var(held-out means) / MSW inside its F(M - 1, K - J) interval (`replication.heldout_new_machine_check`);
- the GPU minutes the estimate's processes took (processes.json wall times), sigma and tau (REML, machines pooled).
The headline (`workbench.analysis.processes`) reads this file's estimate, CI, prediction interval, K, R and minutes.
The held-out analysis (gpu/analyze_heldout.py) reads this file and applies it unchanged.
"""
import json
import os
import sys

sys.path.insert(0, os.getcwd())
from workbench.ab.processes import per_rep_log_ratios  # noqa: E402
from workbench.measure import replication  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MACHINES = {"A": "GPU-3e294211", "B": "GPU-67f63166"}
"""The two H100s of this folder's two leases (COMMAND.txt)."""
COMPARISONS = {  # comparison: (baseline, arm, {machine: [job folders]}, held-out M, held-out --reps)
    "packing": ("rebuild", "cached", {"A": ["packing_a"], "B": ["packing_b"]}, 6, 4),
    "moe": ("eager", "sort_bincount", {"A": ["moe_a"]}, 4, 3),
    "offload": ("sync_reload", "double_buffer", {"A": ["offload_a"], "B": ["offload_b"]}, 4, 3),
}
COMMON = "--headline --batches 1 --steps 2 --warmup 2 --warmup-max 6"
HELDOUT_SEED = 200
RULE = ("pass when (1) the fraction of the M held-out processes (one new machine) inside pi95 >= inside_null_q05 and "
        "(2) var(held-out process means) / msw lies inside f_interval; each held-out process mean = the mean of its "
        "per-rep log(baseline / arm) over its timed reps (the engine discards its own warm-up rep: --reps R gives R "
        "timed reps, a0cecde's --reps R+1 less rep 0)")


def processes(jobs):
    out = []
    for j in jobs:
        with open(os.path.join(HERE, j, "processes.json"), encoding="utf-8") as f:
            rec = json.load(f)
        for p in rec["processes"]:
            d = os.path.join(HERE, j, p["folder"])
            if p["rc"] == 0 and os.path.isfile(os.path.join(d, "summary.json")):
                out.append((d, float(p["wall_s"])))
    return out


def main():
    out = {"rule": RULE, "machines": MACHINES, "estimate_commit": "a0cecde", "comparisons": {}}
    for name, (base, arm, by_machine, M, reps) in COMPARISONS.items():
        groups, wall_s, folders = [], 0.0, {}
        for m, jobs in by_machine.items():
            procs = processes(jobs)
            groups.append([per_rep_log_ratios(d, name, base, arm, skip_reps=1) for d, _ in procs])
            wall_s += sum(w for _, w in procs)
            folders[m] = [os.path.relpath(d, HERE) for d, _ in procs]
        pred = replication.machine_prediction(groups)
        comps = replication.reml_components([g for m in groups for g in m], ci=False)
        null = replication.new_machine_null(pred, M)
        out["comparisons"][name] = {
            "baseline": base, "arm": arm, "folders": folders, "gpu_minutes": round(wall_s / 60, 1),
            "reps_per_process": pred["R"], "sigma": comps["sigma"], "tau": comps["tau"], "prediction": pred,
            "heldout_plan": {
                "M": M, "machine": "a third H100 (the next lease), none of the estimate's",
                "command": f"python -m workbench.ab --opt {name} {COMMON} --reps {reps} --processes {M} "
                           f"--seed {HELDOUT_SEED}",
                "null": null}}
        print(f"{name}: {pred['speedup']:.4f}x over K={pred['K']} processes on J={pred['J']} machines, CI (these "
              f"machines) [{pred['ci95'][0]:.4f}, {pred['ci95'][1]:.4f}]; a rerun on another machine: PI "
              f"[{pred['pi95'][0]:.4f}, {pred['pi95'][1]:.4f}] ({pred['method']}); held out M={M}: inside >= "
              f"{null['inside_null_q05']:.2f}, variance ratio in [{null['f_interval'][0]:.2f}, "
              f"{null['f_interval'][1]:.2f}]; simulated coverage {null['coverage']:.3f}")
    with open(os.path.join(HERE, "prospective.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, default=float)
        f.write("\n")


if __name__ == "__main__":
    main()
