#!/usr/bin/env bash
# GPU minutes: about 22 on one H100 (packing 8 processes x ~50 s, moe 8 x ~110 s at 4 reps; profiles/2026-11-26_h100_prospective2/jobs.txt)
# Issue 37: did the NVTX backend move the failed held-out checks? The staging bug (profiles/2026-11-26_h100_gate_e/
# COMMAND.txt) ran some processes of one campaign with the nvtx package and the rest with torch.cuda.nvtx. Here the two
# backends are the arms of a paired design on ONE machine: for each seed, one process with the package and one with
# $WORKBENCH_NVTX_BACKEND=torch.cuda.nvtx (workbench/instrument/ranges.py), their order alternating by seed; the same
# seed gives both the same batches. Decision rule (studies/heldout_replication/analyze_nvtx_ab.py, fixed before the run): per comparison, the
# 95% t-interval over seeds of (log speedup with torch.cuda.nvtx - log speedup with nvtx); "the backend moves the
# speedup" when it excludes 0, else "no effect shown" with the interval as its bound.
# Writes $CAMP/nvtx_ab/{packing,moe}/{nvtx,torch}_sNNN/ (one run folder each: its own process and model build, the
# discarded warm-up rep) and jobs.txt.
# Analysis (CPU, from the repo root): python studies/heldout_replication/analyze_nvtx_ab.py $CAMP/nvtx_ab
# CPU check (tiny presets; on a CPU both backends are "off": not a result):
#   CAMP=/tmp/camp NVTX_AB_SEEDS="600 601" NVTX_AB_OPTS=packing bash studies/heldout_replication/nvtx_ab.sh
set -u
OUT=$CAMP/nvtx_ab
mkdir -p $OUT
nvidia-smi -i ${CUDA_VISIBLE_DEVICES:-0} --query-gpu=name,uuid --format=csv > $OUT/gpu.csv 2>/dev/null || echo "no nvidia-smi" > $OUT/gpu.csv
COMMON="--headline --batches 1 --steps 2 --warmup 2 --warmup-max 6"
one() {  # opt, backend (nvtx | torch), seed, reps
  local opt=$1 b=$2 seed=$3 reps=$4 env=""
  [ "$b" = torch ] && env="WORKBENCH_NVTX_BACKEND=torch.cuda.nvtx"
  echo "$(date +%s) start $opt $b seed $seed" >> $OUT/jobs.txt
  env $env python -m workbench.ab --opt $opt $COMMON --reps $reps --seed $seed --out $OUT/$opt/${b}_s$seed \
    > $OUT/$opt/${b}_s$seed.out 2> $OUT/$opt/${b}_s$seed.err
  echo "$(date +%s) end $opt $b seed $seed rc=$?" >> $OUT/jobs.txt
}
for opt in ${NVTX_AB_OPTS:-packing moe}; do
  mkdir -p $OUT/$opt
  reps=4  # a GPU run outside --processes needs 4 reps for a verdict
  k=0
  for seed in ${NVTX_AB_SEEDS:-600 601 602 603}; do
    if [ $((k % 2)) = 0 ]; then one $opt nvtx $seed $reps; one $opt torch $seed $reps
    else one $opt torch $seed $reps; one $opt nvtx $seed $reps; fi
    k=$((k + 1))
  done
done
echo "$(date +%s) done" >> $OUT/jobs.txt
