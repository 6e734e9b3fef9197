"""The two rules' probabilities when the D decisions of a campaign share one baseline run (the gate's own simulator,
`gate_stats.simulate_rep_means`; decisions by `gate_stats.speedup_ci` and `decide`): the binomial rates assume
independent decisions, but every re-run is judged against the same baseline, so its run offset is shared.

    python studies/gate_power/shared_baseline_rates.py REP_SD STEP_SD RUN_SD REPS STEPS TOLERANCE REGRESSION [D] [CAMPAIGNS]

RUN_SD is the true run SD (%) the campaign is simulated at; TOLERANCE the gate's (%); prints P(>= 2 of D same-commit
decisions fail), P(>= 3 of D injected decisions fail), and the per-decision rates.
"""
import dataclasses
import sys

import numpy as np

from workbench.compare import gate_stats
from workbench.measure import power


def main(argv):
    rep_sd, step_sd, run_sd, reps, steps, tol, reg = (float(a) for a in argv[:7])
    d_n = int(argv[7]) if len(argv) > 7 else 4
    campaigns = int(argv[8]) if len(argv) > 8 else 2000
    noise = power.Noise(rep_sd_pct=rep_sd, step_sd_pct=step_sd, batch_sd_pct=0.0, drift_pct=0.0)
    design = gate_stats.GateDesign(reps=int(reps), steps=int(steps), batches=1, arms=2, run_sd_pct=run_sd)
    rng = np.random.default_rng(0)
    counts = {1.0: [], 1 + reg / 100: []}
    for _ in range(campaigns):
        base, _ = gate_stats.simulate_rep_means(rng, noise, design)
        for slow, out in counts.items():
            fails = 0
            for _ in range(d_n):
                _, new = gate_stats.simulate_rep_means(rng, noise, design, slow)
                fails += gate_stats.decide(gate_stats.speedup_ci(base, new)["ci95"], tol) == "fail"
            out.append(fails)
    same, inj = np.asarray(counts[1.0]), np.asarray(counts[1 + reg / 100])
    print(f"run SD {run_sd}%, tolerance {tol}%, {reg}% injected, D={d_n}, {campaigns} campaigns: "
          f"per-decision false-fail {same.mean() / d_n:.4f}, P(>=2 of {d_n} same fail) {(same >= 2).mean():.4f}; "
          f"per-decision detection {inj.mean() / d_n:.4f}, P(>=3 of {d_n} injected fail) {(inj >= 3).mean():.4f}")


if __name__ == "__main__":
    main(sys.argv[1:])
