"""Replay a budgeted main run through `workbench.ab.budget.RunBudget` on a fake clock, at other budgets.

    python studies/practitioner_recipe/replay_budget.py RUN_PARENT [MINUTES ...]

RUN_PARENT holds main.err (the progress lines) and main/ (summary.json, results.csv.gz), as main_budget_main.sh
writes them. Per comparison it reconstructs: the timing phase (the sum of its warm-up, discarded and timed steps: a
lower bound, the sessions' apply / revert not counted), the other phases (its wall_s less that), split into before and
after the timing phase by the progress lines' minutes left (0.1 min resolution). Then it runs the planner's arithmetic
at each budget with the engine's stopping rule (each rep pass costing the measured timing over its passes) and prints
each comparison's share, reps, the floors line and the closing line."""
import csv
import gzip
import json
import re
import sys

from workbench.ab.budget import RunBudget
from workbench.measure import engine


def reconstruct(parent):
    s = json.load(open(f"{parent}/main/summary.json"))
    rows = list(csv.DictReader(gzip.open(f"{parent}/main/results.csv.gz", "rt")))
    err = open(f"{parent}/main.err").read().splitlines()

    def left(line):
        m = re.search(r"\[(\d+\.\d) min (left of|over the)", line)
        return float(m.group(1)) * (1 if m.group(2) == "left of" else -1)

    out = []
    for k, c in enumerate(s["comparisons"], 1):
        lines = [ln for ln in err if ln.startswith(f"[{k}/{len(s['comparisons'])} {c['name']}]")]
        before_min = left(lines[0]) - [left(ln) for ln in lines if " equivalence " in ln][-1]
        timing_s = sum(float(r["value"]) for r in rows if r["comparison"] == c["name"]
                       and r["metric"] in ("warmup_step_ms", "discarded_step_ms", "step_ms")) / 1000
        p = c["protocol"]
        arms = 2 + len(c.get("others", []))
        passes = p["reps"] + p["discarded_reps"]
        other_s = c["wall_s"] - timing_s
        before_s = min(before_min * 60, other_s)
        out.append(dict(name=c["name"], arms=arms, before_s=before_s, after_s=other_s - before_s,
                        pass_s=timing_s / passes, timing_s=timing_s, discard=p["discarded_reps"]))
    return s, out


def replay(cmps, minutes):
    clk = [0.0]
    b = RunBudget(minutes * 60, [c["arms"] for c in cmps], clock=lambda: clk[0])
    print(f"-- {minutes:g} min")
    for c in cmps:
        b.begin_comparison()
        clk[0] += c["before_s"]
        share = b.timing_share_s()
        p = engine.Protocol(reps=4, steps=2, budget_s=share, discard_reps=c["discard"])
        every = engine.stop_every(p, c["arms"])
        t = c["discard"] * c["pass_s"]
        rep = 0
        while True:
            t += c["pass_s"]
            rep += 1
            if rep < p.reps or (rep % every and rep < p.max_reps):
                continue
            if t + every * c["pass_s"] > share or rep + every > p.max_reps:
                break
        clk[0] += t
        b.end_timing(rep, c["arms"], engine.floor_reps(p, c["arms"]), c["discard"])
        clk[0] += c["after_s"]
        b.end_comparison()
        print(f"{c['name']:8s} share {share / 60:.2f} min, {rep} reps, timing {t / 60:.2f} min, "
              f"ends at {b.elapsed_s() / 60:.2f} min")
        if (line := b.floors_line()) is not None:
            print("  " + line)
    print(b.closing_line())


if __name__ == "__main__":
    summary, cmps = reconstruct(sys.argv[1])
    for c in cmps:
        print(f"{c['name']:8s} arms {c['arms']}  before {c['before_s'] / 60:.2f}  timing {c['timing_s'] / 60:.2f} "
              f"({c['pass_s']:.1f} s a pass, {c['pass_s'] / c['arms']:.1f} s an arm's rep)  after {c['after_s'] / 60:.2f}"
              f" min")
    print(f"floors and other phases: {sum(c['before_s'] + c['timing_s'] + c['after_s'] for c in cmps) / 60:.2f} min; "
          f"the run's wall: {summary['wall_s'] / 60:.2f} min")
    for m in [float(x) for x in sys.argv[2:]] or [summary["budget"]["minutes"], 12.0]:
        replay(cmps, m)
