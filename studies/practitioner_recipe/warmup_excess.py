"""The warm-up a budgeted main run spent in its timed reps past the fewest steps (every batch twice: 4 with the main
command's 2 batches), per comparison: what `Protocol.rep_warmup_max` now leaves out under a budget.

    python studies/practitioner_recipe/warmup_excess.py profiles/2026-11-29_h200_gate_design4/main_budget_lost/warmup_steps.csv.gz

The file holds the warm-up steps (metric warmup_step_ms) of the lost default-budget run's results.csv, as far as it
had run (its fourth comparison: 2 of 5 rep passes); rep -1 is the discarded rep, which keeps its cap.
"""
import collections
import csv
import gzip
import sys

FEWEST = 4

steps = collections.defaultdict(list)
for r in csv.DictReader(gzip.open(sys.argv[1], "rt")):
    steps[(r["comparison"], r["arm"], int(r["rep"]))].append(float(r["value"]))
total, past = collections.Counter(), collections.Counter()
for (comparison, _arm, rep), ms in steps.items():
    total[comparison] += sum(ms) / 1000
    if rep >= 0:
        past[comparison] += sum(ms[FEWEST:]) / 1000
for c in total:
    print(f"{c}: warm-up {total[c]:.0f} s, past {FEWEST} steps in the timed reps {past[c]:.0f} s")
print(f"past {FEWEST} steps in the timed reps, all comparisons: {sum(past.values()):.0f} s")
