#!/usr/bin/env bash
# expected GPU minutes: 7 on ONE 4-GPU host (4 GPUs x 7 min wall), a hard deadline of 540 s
#
# Issue 41 after the fix of the offload checkpoint under FSDP2 (merge eaf0076: with the GPU image's transformers 5.17,
# FSDP2's hooks ran inside the offload Function and every LoRA gradient was lost; found from the 4-GPU run of
# profiles/2026-11-26_h100x4_fourgpu/). Everything FSDP2 ran with offload before the fix is void: the 2-GPU d2_rest
# offload / all savings (H200) and this host's d4 offload. So, on one host, in this order:
#   1. equiv_all     studies/four_gpu/equiv_all.sh: FSDP2 x 2 vs one process at bf16 for the `all` model (the check that
#                    crashed), and the whole-weight expert-gradient ops on rank 0 of 2 (backward_ops)   (~100 s)
#   2. offload at 1, 2 and 4 ranks (llama-3.1-8b 8 L 16k, --headline, sync_reload vs double_buffer, 4 reps + the
#      discarded one, warmup capped at 3 steps): o1 on GPU 0 alone, o2 on GPUs 0,1 (FSDP2), o4 on all four (FSDP2).
#      The projection at 4 ranks is computed from o1 and o2 by the rule committed before the 4-GPU run
#      (straggler.projection with the contention term of this host's bandwidth.json; rule_commit aed9af7) and judged
#      against o4 by straggler.judge_projection                                                          (~220 s)
#   3. anomaly       the `all` baseline traced again, 1 rank (GPU 0) and 2 ranks (GPUs 1,2) at the same time, as in
#                    fourgpu.sh: after the fix the 2-rank step must do the expert-gradient work too        (~60 s)
# Analysis (CPU): python studies/four_gpu/analyze_fourgpu.py profiles/2026-11-26_h100x4_fourgpu --fix DIR   (DIR = $CAMP/fourgpu_fix)
set -u
OUT="$CAMP/fourgpu_fix"
mkdir -p "$OUT/logs"
PY="${PYTHON:-python3}"
export NCCL_NVLS_ENABLE=0 TOKENIZERS_PARALLELISM=false
DEADLINE_S="${FOURGPU_DEADLINE_S:-540}"
T0=$SECONDS
log() { echo "$(date +%T) +$((SECONDS - T0))s $*" >> "$OUT/logs/jobs.txt"; }
left() { echo $((DEADLINE_S - (SECONDS - T0))); }
run() {  # run NAME LIMIT_S CMD...
  local name=$1 lim=$2 l; shift 2; l=$(left); [ "$l" -lt "$lim" ] && lim=$l
  if [ "$lim" -lt 20 ]; then log "skip $name: ${lim}s left"; return 0; fi
  log "start $name (limit ${lim}s): $*"
  timeout -k 15 "$lim" "$@" > "$OUT/logs/$name.log" 2>&1
  log "end $name rc $?"
}
TR="$PY -m torch.distributed.run --standalone"
DEV=""
if [ "${FOURGPU_CPU:-0}" = 1 ]; then DEV="--device cpu"; fi
{ echo "${WORKBENCH_GIT_SHA:-$(git rev-parse HEAD 2>/dev/null)}"; \
  $PY -c "import torch, transformers, peft; print(torch.__version__, transformers.__version__, peft.__version__)"; \
  nvidia-smi -L 2>/dev/null; } > "$OUT/logs/env.txt" 2>&1

log "start equiv_all"
CAMP="$OUT" bash studies/four_gpu/equiv_all.sh > "$OUT/logs/equiv_all.log" 2>&1
log "end equiv_all rc $?"

OFF="--opt offload --headline --reps 4 --warmup-max 3 --seed 0 $DEV"
run o1 100 env CUDA_VISIBLE_DEVICES=0 $PY -m workbench.ab $OFF --out "$OUT/o1"
run o2 110 env CUDA_VISIBLE_DEVICES=0,1 $TR --nproc-per-node 2 -m workbench.ab $OFF --out "$OUT/o2"
run o4 120 $TR --nproc-per-node 4 -m workbench.ab $OFF --out "$OUT/o4"

l=$(left); [ "$l" -gt 90 ] && l=90
if [ "$l" -ge 40 ]; then
  log "start anomaly one + two (limit ${l}s)"
  CUDA_VISIBLE_DEVICES=0 timeout -k 15 "$l" $PY -m workbench.ab.distributed.trace_classes --opt all --only all \
      --warmup 2 --steps 1 $DEV --json "$OUT/anomaly_one.json" > "$OUT/logs/anomaly_one.log" 2>&1 &
  pid1=$!
  CUDA_VISIBLE_DEVICES=1,2 timeout -k 15 "$l" $TR --nproc-per-node 2 -m workbench.ab.distributed.trace_classes \
      --opt all --only all --warmup 2 --steps 1 $DEV --json "$OUT/anomaly_two.json" > "$OUT/logs/anomaly_two.log" 2>&1
  rc2=$?; wait "$pid1"; rc1=$?
  log "end anomaly rc one $rc1 two $rc2"
else
  log "skip anomaly: ${l}s left"
fi
log "ALL DONE in $((SECONDS - T0)) s"
