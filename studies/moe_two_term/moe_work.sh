#!/usr/bin/env bash
# Issue 39 (done-when 2 for MoE: "refuted with its mechanism measured"), written 2026-11-27 (8) before its run. The
# untraced MoE model (one saving per removed sync, u, carried from the dose's shape) was refuted on qwen3-30b-a3b 4 L 8k
# on an H200 pair (0.054 ms a sync against the dose's 0.085: ratio 0.64 [0.52, 0.78]; gpt-oss-20b 8 L 4k 0.073, 0.86,
# inconclusive; profiles/2026-11-27_h200x2_moe_same_host). Which mechanism: does a removed sync save more where each
# expert iteration holds more GPU work (qwen3-30b-a3b's experts are 10.5x smaller a token), or does the family differ
# at equal work? studies/moe_two_term/moe_work.py holds the rule (its docstring), fixed in this commit.
# Design: the two families at three token counts each, matched in tokens per expert (256, 512, 1024), so W spans 4x
# within each family and the families overlap in W (qwen3 16k 9.7 GFLOP, gpt-oss 2k 12.7):
#   o2k o4k o8k: python -m workbench.ab --opt moe --model gpt-oss-20b   --layers 4 --tokens 2048|4096|8192
#   q4k q8k q16k: python -m workbench.ab --opt moe --model qwen3-30b-a3b --layers 4 --tokens 4096|8192|16384
#   each with --steps 1 --reps 4 --headline --batches 1 --trace none --seed S --out DIR: one untraced process a run,
#   its counts from its own counted pass (the protocol of the same-host verdicts; peak memory 21-42 GB at 8k, so
#   the 16k qwen3 and 8k gpt-oss runs fit an H100).
# Every GPU g runs rounds r = 0..R-1 (R=3 default), each round all six (the families alternating: o2k q4k o4k q8k o8k
# q16k) in an order rotated by r + 3 g, so each shape
# sits at every position and on every GPU alike, and a cut by the lease costs every shape alike (the cut round is
# reported). Seeds 5000 + 100 g + 10 r + i (+ SEED_OFFSET), all fresh. Time: 45-100 s a run on the H200 pair
# (jobs.txt of the same-host run), ~420 s a round, ~1300 s for R=3; at 2 GPUs 6 processes a shape, at 1 GPU 3.
# Planned power (from that run's spread, log SD of s ~0.12 a process): at 36 processes se(b) ~0.035 and se(c) ~0.05;
# a family gap like the pilot's (c = log 0.68 = -0.39) is read "families differ"; "flat" needs |b| below ~0.04.
# Several leases feed one reading (a short one cut early, then full ones), each with its own SEED_OFFSET (0, 50, 1000, 1050: seeds stay fresh):
# the fit's GPU terms take each GPU's level out; the analysis reads every lease's folder.
# The campaign's next lease (a 2- or 4-GPU kind; studies/gpu_lease/lease_plan.sh's launch line with these in front; the first, cut lease
# is profiles/2026-11-27_h200x2_moe_work_a, SEED_OFFSET 0):  SEED_OFFSET=50 R=3 PLAN="moe_work" LEASE_S=1560 nohup setsid bash ...
# Analysis (CPU; DIR = this job's $OUT copied into profiles/):
#   python -m studies.moe_two_term.moe_work DIR [DIR2 ...]         # -> DIR/moe_work.json and its lines (save as DIR/moe_work.txt)
# CPU check (tiny presets, not a result): CAMP=/tmp/camp CPU=1 NGPU=1 R=1 bash studies/moe_two_term/moe_work.sh
set -u
. "$(dirname "$0")/per_gpu.sh"; per_gpu_setup moe_work  # OUT, PY, NGPU, gpus.csv
NAMES=(o2k q4k o4k q8k o8k q16k)  # the families alternate: a round cut early still has both on each GPU
declare -A TOKENS=([o2k]=2048 [q4k]=4096 [o4k]=4096 [q8k]=8192 [o8k]=8192 [q16k]=16384)
args() {  # name -> the shape's arguments (per_gpu_shape: CPU=1 gives the tiny presets)
  local m=gpt-oss-20b
  [ "${1:0:1}" = q ] && m=qwen3-30b-a3b
  per_gpu_shape $m 4 ${TOKENS[$1]}
}
STEP_ARGS="--steps 1 --reps 4 --headline --batches 1"
rounds() {  # GPU g: R rounds of the six shapes, rotated by r + 3 g
  local g=$1 r k i
  for r in $(seq 0 $((${R:-3} - 1))); do
    for k in 0 1 2 3 4 5; do
      i=$(( (k + r + 3 * g) % 6 ))
      per_gpu_run $g r${r}_${NAMES[$i]} ${NAMES[$i]} $((5000 + 100 * g + 10 * r + i + ${SEED_OFFSET:-0}))
    done
  done
}
per_gpu_all rounds
