#!/usr/bin/env bash
# GPU minutes: at most 12 + overrun on one H100 / H200 (the main command's default budget, workbench/ab/budget.py),
# plus ~3 for the callback's cost (studies/practitioner_recipe/trainer_cost.py). Two things, in order:
# 1. the main command as a user types it on one GPU, with its default budget (12 min, said on its first lines):
#      python -m workbench.ab --out $OUT/main
#    writes $OUT/main/ (run folder), main.out / main.err, COMMAND.txt; its closing lines give the wall time against the
#    budget ("within" / "OVER") and the recommended apply_optimizations(...) line. The README quotes that wall time.
# 2. the callback's cost on a real Trainer step (studies/practitioner_recipe/trainer_cost.py: NVTX ranges vs plain, adjacent pairs; the sync
#    counter's step; one traced step): $OUT/trainer_cost/{plain,cached}/, trainer_cost.out.
# CPU check (tiny presets, budget 1 min; not a result): OUT=/tmp/mb MAIN_ARGS="--device cpu --budget-min 1" \
#   TC_ARGS="--cpu --model tiny-qwen3 --layers 2 --docs-per-step 4 --pairs 2" bash studies/practitioner_recipe/main_budget.sh
set -u
OUT=${OUT:?set OUT to the output folder}
mkdir -p $OUT
nvidia-smi -i ${CUDA_VISIBLE_DEVICES:-0} --query-gpu=name,uuid --format=csv > $OUT/gpu.csv 2>/dev/null || echo "no nvidia-smi" > $OUT/gpu.csv
echo "main: python -m workbench.ab --out $OUT/main ${MAIN_ARGS:-}" > $OUT/COMMAND.txt
echo "trainer_cost: python studies/practitioner_recipe/trainer_cost.py $OUT/trainer_cost ${TC_ARGS:-}" >> $OUT/COMMAND.txt
t0=$(date +%s)
python -m workbench.ab --out $OUT/main ${MAIN_ARGS:-} > $OUT/main.out 2> $OUT/main.err
echo "main rc=$? wall_s=$(( $(date +%s) - t0 ))" >> $OUT/jobs.txt
t0=$(date +%s)
python studies/practitioner_recipe/trainer_cost.py $OUT/trainer_cost ${TC_ARGS:-} > $OUT/trainer_cost.out 2> $OUT/trainer_cost.err
echo "trainer_cost rc=$? wall_s=$(( $(date +%s) - t0 ))" >> $OUT/jobs.txt
