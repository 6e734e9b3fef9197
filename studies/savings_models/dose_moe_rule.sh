#!/usr/bin/env bash
# GPU minutes: about 8 on one H100 (2 MoE dose processes: the first times its levels untimed and then traces each level
# for 6 steps, ~5 min; the second untimed only, ~2.5 min; from moe_s20/s21 of 2026-11-26 (6): ~3.2 min a process at 3
# traced steps)
# Issue 39: MoE's theta under the committed rule (workbench/savings/dose_fit.py `decide`, unchanged). In
# profiles/2026-11-26_h100_dose/moe the rule reads c from the traced process its dose_run.json names (none/p00: ONE
# traced step a level, so c has no CI and the decision can only say "inconclusive (no bounded theta)"); the traced
# processes added later do not change which one the rule reads, and choosing one of them now, after seeing their c,
# would be a choice made on the data. So, fixed here before the run: a NEW dose folder whose first process traces
# every level for 6 steps (`--steps 6`: c from 6 traced steps a level, with its t-interval), seeds 30-31 never used;
# then the 8 untimed processes of the committed folder are merged in (python -m workbench.ab.dose_merge checks opt,
# unit, levels and shape), and the committed rule decides on the new folder. Its decision is MoE's rule reading.
# Writes $CAMP/dose_moe_rule/ (a dose folder) and jobs.txt. Afterwards (CPU, from the repo root):
#   cp -r $CAMP/dose_moe_rule profiles/<date>_h100_dose_moe_rule
#   python -m workbench.ab.dose_merge profiles/<date>_h100_dose_moe_rule profiles/2026-11-26_h100_dose/moe   (its 8 untimed and 2 profiler-on
#     processes; it refuses another shape or levels; INTO's traced process, the 6-step one, stays the rule's)
#   python -m workbench.savings.dose_fit profiles/<date>_h100_dose_moe_rule --calibration profiles/<date>_h100_dose_moe_rule/calibration.json
# CPU check (tiny preset, no GPU events so no c, not a result): CAMP=/tmp/camp MOE="--opt moe --layers 2" bash studies/savings_models/dose_moe_rule.sh
set -u
OUT=$CAMP/dose_moe_rule
mkdir -p $CAMP
nvidia-smi -i ${CUDA_VISIBLE_DEVICES:-0} --query-gpu=name,uuid --format=csv > $CAMP/dose_moe_rule_gpu.csv 2>/dev/null || echo "no nvidia-smi" > $CAMP/dose_moe_rule_gpu.csv
MOE=${MOE:---opt moe --model gpt-oss-20b --layers 4 --tokens 8192}
echo "$(date +%s) start dose_moe_rule" >> $CAMP/dose_moe_rule_jobs.txt
python -m workbench.ab.dose $MOE --levels 3 --reps 2 --batches 1 --steps 6 --warmup 1 --warmup-max 4 \
  --timing none --processes 2 --trace torch --seed 30 --out $OUT > $CAMP/dose_moe_rule.out 2> $CAMP/dose_moe_rule.err
echo "$(date +%s) end dose_moe_rule rc=$?" >> $CAMP/dose_moe_rule_jobs.txt
