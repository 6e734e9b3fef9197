#!/usr/bin/env bash
# Issue 39, written 2026-11-27 (6) before its run: what drives MoE's spread of the saving between processes? The
# saving's process means on gpt-oss-20b 4 L 8k spread by tau' 21% within a run (profiles/between_runs.json), and each
# process seeds its own weights, router, LoRA and batches (--seed S + k). A user's rerun keeps the model and the data:
# if the seed drives the spread, the "rerun" population is narrower than the one the verdicts used, and MoE's verdicts
# (more than 30 + 40 processes planned) would need far fewer processes of one model.
# Two runs, untraced, on one GPU, back to back (~1.5-2 min a process, ~14 min):
#   same: --process-seeds same --seed 900 --processes 4   (one model and its batches, 4 processes)
#   each: --process-seeds each --seed 910 --processes 4   (4 models and batch sets, seeds 910-913)
# The rule, fixed now: on the log of each process's mean saving (sort_bincount vs eager), F = var(each) / var(same) on
# (3, 3) df, one-sided; p < 0.05 reads "the seed drives the spread", else "no evidence that it does" (4 + 4 processes
# detect an SD ratio of about 3 or more: a smaller effect reads as no evidence, and is reported as such). Drift over
# the run (same runs first) is a confound the back-to-back order cannot remove; it is reported.
# Analysis (CPU; DIR = this job's $OUT, copied into profiles/):
#   python -c "import math, statistics as st; from scipy import stats; from workbench.analysis.between_runs import folder_savings as f
#     v = {m: [math.log(x) for x in f('DIR/' + m)['moe']] for m in ('same', 'each')}; F = st.variance(v['each']) / st.variance(v['same'])
#     print({m: st.stdev(x) for m, x in v.items()}, F, stats.f.sf(F, len(v['each']) - 1, len(v['same']) - 1))"
# CPU check (tiny preset, not a result): CAMP=/tmp/camp CPU=1 bash studies/moe_two_term/process_seeds.sh
set -u
OUT=$CAMP/process_seeds
mkdir -p $OUT
PY=${PY:-python}
if [ -n "${CPU:-}" ]; then SHAPE="--model tiny-gpt-oss --layers 1 --tokens 256 --device cpu"; else SHAPE="--model gpt-oss-20b --layers 4 --tokens 8192"; fi
nvidia-smi -i ${CUDA_VISIBLE_DEVICES:-0} --query-gpu=name,uuid --format=csv > $OUT/gpu.csv 2>/dev/null || echo "no nvidia-smi" > $OUT/gpu.csv
for spec in "same 900" "each 910"; do
  set -- $spec
  echo "$(date +%s) start $1" >> $OUT/jobs.txt
  $PY -m workbench.ab --opt moe $SHAPE --headline --batches 1 --steps 1 --reps 4 --trace none --processes 4 \
    --process-seeds $1 --seed $2 --out $OUT/$1 > $OUT/$1.out 2> $OUT/$1.err
  echo "$(date +%s) end $1 rc=$?" >> $OUT/jobs.txt
done
