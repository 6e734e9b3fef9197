#!/usr/bin/env bash
# Issue 39, MoE's mechanism probe (written 2026-11-27 (9) before its run): eager, sort_bincount and sort_split in one
# process at qwen3-30b-a3b 4 L 16k, one process a GPU (seeds 6000 + g). The prediction and the rule are in
# studies/moe_two_term/moe_backward.py and profiles/2026-11-27_h200x2_moe_work_b/moe_backward.json (committed before).
#   CAMP=/tmp/camp bash studies/moe_two_term/moe_probe.sh          (every GPU nvidia-smi lists; NGPU=1 for one)
# Ran once (profiles/2026-11-27_h200x2_moe_probe, REPS=4, rule (1)); the next probe is studies/moe_two_term/moe_backward.sh (rule (2)).
# Analysis: python -m studies.moe_two_term.moe_backward probe profiles/2026-11-27_h200x2_moe_work_b/moe_backward.json DIR
# CPU check (tiny preset, not a result): CPU=1 NGPU=1 CAMP=/tmp/camp bash studies/moe_two_term/moe_probe.sh
set -u
OUT=${CAMP:-/tmp/camp}/moe_probe; mkdir -p $OUT
NGPU=${NGPU:-$(nvidia-smi -L 2>/dev/null | wc -l)}; [ "$NGPU" -ge 1 ] || NGPU=1
if [ -n "${CPU:-}" ]; then A="--model tiny-qwen3-moe --layers 1 --tokens 1024 --device cpu"
else A="--model qwen3-30b-a3b --layers 4 --tokens 16384"; fi
for g in $(seq 0 $((NGPU - 1))); do
  CUDA_VISIBLE_DEVICES=$g python -m workbench.ab --opt moe $A --arms eager,sort_bincount,sort_split --steps 1 \
    --reps ${REPS:-4} --batches 1 --trace none --seed $((6000 + g)) --out $OUT/g$g > $OUT/g$g.log 2>&1 &
done
wait
for g in $(seq 0 $((NGPU - 1))); do tail -n 4 $OUT/g$g.log; done
