#!/usr/bin/env bash
# Issue 39, MoE: the two-term model's next run, written 2026-11-27 (9) before it (studies/moe_two_term/moe_backward.py,
# rule (2) and `judge`; the fit and its prediction in profiles/2026-11-27_h200x2_moe_work_b/moe_backward.json).
# Per GPU g, rounds r = 0..R-1 (R=2 default), each the three runs in an order rotated by r + g:
#   probe  python -m workbench.ab --opt moe --model qwen3-30b-a3b --layers 4 --tokens 16384 --arms eager,sort_bincount,sort_split
#   q8l8k  python -m workbench.ab --opt moe --model qwen3-30b-a3b --layers 8 --tokens 8192 --headline    (held out: 8 layers)
#   o8l8k  python -m workbench.ab --opt moe --model gpt-oss-20b   --layers 8 --tokens 8192 --headline    (held out)
#   each with --steps 1 --reps 4 --batches 1 --trace none --seed 7000 + 100 g + 10 r + i (+ SEED_OFFSET) --out g<g>/r<r>_<name>
# Time (H200 pair, 2026-11-27): probe ~150 s, the 8-layer runs ~100-150 s each: ~420 s a round. A 4-GPU kind with R=2
# gives 8 processes a shape in ~850 s; a 2-GPU kind R=3, 6 a shape in ~1260 s. The fit's GPUs are H200s: a lease on
# H100s reads "not judged: another GPU model" (ask for nvidia-h200-x4 or nvidia-h200-x2).
# Launch: R=2 PLAN="moe_backward" LEASE_S=1560 nohup setsid bash studies/gpu_lease/lease_plan.sh ...  (studies/gpu_lease/lease_plan.sh's header)
# Analysis (CPU; DIR = this job's $OUT copied into profiles/; F = profiles/2026-11-27_h200x2_moe_work_b/moe_backward.json):
#   python -m studies.moe_two_term.moe_backward probe F DIR        # rule (2): mechanism measured / not this mechanism / inconclusive
#   python -m studies.moe_two_term.moe_backward judge F DIR        # the two-term model on the two held-out shapes, Holm over both
# CPU check (tiny presets, not a result): CAMP=/tmp/camp CPU=1 NGPU=1 R=1 bash studies/moe_two_term/moe_backward.sh
# Ran 2026-11-27 (10) on four H200s (profiles/2026-11-27_h200x4_moe_backward): rule (2) "mechanism measured"; judge:
#   gpt-oss-20b 8 L 8k confirmed, qwen3-30b-a3b 8 L 8k inconclusive (1.19 [1.07, 1.32]).
# The third held-out shape, written 2026-11-27 (10) after that reading and before its run (RUN="q6l12k" SEED_OFFSET=500,
#   lease_plan job moe_q6l12k; R=2 on 4 GPUs: 8 processes, ~420 s, fewer if the lease cuts it; 4 or more are read):
#   q6l12k python -m workbench.ab --opt moe --model qwen3-30b-a3b --layers 6 --tokens 12288 --arms eager,sort_bincount,sort_split
#   (held out: 6 layers, 12k tokens; qwen3, the family where the model missed). Read, as written now:
#   python -m studies.moe_two_term.moe_backward judge F DIR3      # predicted 334 ms (se 15); the one-term model's 645
#   python -m studies.moe_two_term.moe_backward judge F DIR DIR3  # beside: the three held-out shapes in one Holm family
#   python -m studies.moe_two_term.moe_backward probe F DIR3 --shape qwen3-30b-a3b 6 12288  # rule (2) at a second shape:
#     split over sort_bincount 353 [298, 407] ms, over eager 687 [641, 732]; planned chance of "mechanism measured"
#     0.60 at 8 processes, 0.37 at 4 (ratios 1.11 / 0.89 as at the probe, process SD 10%); 1.0 at ratio 1; the
#     negative control (ratios 0.35 / 0.05) "not this mechanism" 1.0
set -u
. "$(dirname "$0")/per_gpu.sh"; per_gpu_setup moe_backward  # OUT, PY, NGPU, gpus.csv
NAMES=(probe q8l8k o8l8k q6l12k)  # a run's seed offset i is its index here
RUN=(${RUN:-probe q8l8k o8l8k})  # the runs of a round (RUN="q6l12k": the third held-out shape, 2026-11-27 (10))
args() {  # name -> the run's arguments (per_gpu_shape: CPU=1 gives the tiny presets)
  case $1 in
    probe) per_gpu_shape qwen3-30b-a3b 4 16384 --arms eager,sort_bincount,sort_split;;
    q8l8k) per_gpu_shape qwen3-30b-a3b 8 8192 --headline;;
    o8l8k) per_gpu_shape gpt-oss-20b 8 8192 --headline;;
    q6l12k) per_gpu_shape qwen3-30b-a3b 6 12288 --arms eager,sort_bincount,sort_split;;
  esac
}
STEP_ARGS="--steps 1 --reps 4 --batches 1"
index() { local j; for j in "${!NAMES[@]}"; do [ "${NAMES[$j]}" = "$1" ] && echo $j; done; }
rounds() {  # GPU g: R rounds of the RUN runs, rotated by r + g
  local g=$1 r k name n=${#RUN[@]}
  for r in $(seq 0 $((${R:-2} - 1))); do
    for k in $(seq 0 $((n - 1))); do
      name=${RUN[$(( (k + r + g) % n ))]}
      per_gpu_run $g r${r}_$name $name $((7000 + 100 * g + 10 * r + $(index $name) + ${SEED_OFFSET:-0}))
    done
  done
}
per_gpu_all rounds
