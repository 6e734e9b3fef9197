#!/usr/bin/env bash
# Part 1 of main_budget.sh alone: the main command on one GPU with $MAIN_ARGS; writes $OUT/main/, main.out, main.err, jobs.txt.
set -u
OUT=${OUT:?set OUT to the output folder}; mkdir -p $OUT
nvidia-smi -i ${CUDA_VISIBLE_DEVICES:-0} --query-gpu=name,uuid --format=csv > $OUT/gpu.csv 2>/dev/null
echo "main: python -m workbench.ab --out $OUT/main ${MAIN_ARGS:-}" > $OUT/COMMAND.txt
t0=$(date +%s)
python -m workbench.ab --out $OUT/main ${MAIN_ARGS:-} > $OUT/main.out 2> $OUT/main.err
echo "main rc=$? wall_s=$(( $(date +%s) - t0 ))" >> $OUT/jobs.txt
