#!/usr/bin/env bash
# expected GPU minutes: 8 on ONE 4-GPU host (4 GPUs x 8 min wall; nvidia-h200-x4 preferred: the projections came from H200s)
#
# Issue 41 (four GPUs), one call, a hard deadline of DEADLINE_S (475 s) for everything; each part gets
# min(its own limit, what is left), in the order of the done-when (estimates for an H100 x4):
#   1. bandwidth.json       pinned H2D / D2H GB/s per rank with 1, 2, 4 ranks copying at once     (~35 s, alone)
#   2. equiv_n4.json        FSDP2 x 4 vs one process at bf16 (autocast), packing's model (qwen3-0.6b 28 L 16k)  (~55 s)
#   3. anomaly_one/two.json the `all` baseline (qwen3-30b-a3b 8 L 8k), 2 warmup + 1 timed + 1 traced step: one process
#                           on GPU 0 and 2 ranks (FSDP2) on GPUs 1,2 AT THE SAME TIME (same host, CPU shared; the
#                           2-GPU run's g1 jobs shared it too); only the per-class summary comes back    (~105 s)
#   4. d4/p00 [p01]         packing, offload, moe at 4 ranks (FSDP2), headline arms, the 2-GPU run's shapes (kept:
#                           the projections are for them: qwen3-0.6b 28 L 16k, llama-3.1-8b 8 L 16k, gpt-oss-20b 4 L
#                           8k); REDUCED protocol: 3 reps (+ the engine's discarded warm-up rep), warmup capped at 3
#                           steps (2 batches + 1), no traces. K = FOURGPU_PROCESSES processes (default 1: one takes
#                           ~280 s, two do not fit the 8 minutes; the rep is then the unit, "within this run"; with
#                           K = 2 and FOURGPU_DEADLINE_S=760 the process is). Last, so a cut loses only its last
#                           comparison (moe)                                                             (~280 s)
#   5. equiv_n2.json        the same as 2. at 2 ranks, only when 60 s are left (on an H100 x4 likely not: raise
#                           FOURGPU_DEADLINE_S to 530 for it; with 110 s left the `all` model is checked too)
set -u
OUT="$CAMP/fourgpu"
mkdir -p "$OUT/logs"
PY="${PYTHON:-python3}"
K="${FOURGPU_PROCESSES:-1}"
DEADLINE_S="${FOURGPU_DEADLINE_S:-475}"
export NCCL_NVLS_ENABLE=0 TOKENIZERS_PARALLELISM=false
T0=$SECONDS
log() { echo "$(date +%T) +$((SECONDS - T0))s $*" >> "$OUT/logs/jobs.txt"; }
left() { echo $((DEADLINE_S - (SECONDS - T0))); }
limit() { local l w=$(($1 * SCALE)); l=$(left); [ "$w" -lt "$l" ] && echo "$w" || echo "$l"; }
run() {  # run NAME LIMIT_S CMD...: logged, cut at min(LIMIT_S, what is left)
  local name=$1 lim; lim=$(limit "$2"); shift 2
  if [ "$lim" -lt 20 ]; then log "skip $name: ${lim}s left"; return 0; fi
  log "start $name (limit ${lim}s): $*"
  timeout -k 15 "$lim" "$@" > "$OUT/logs/$name.log" 2>&1
  log "end $name rc $?"
}
TR="$PY -m torch.distributed.run --standalone"
# FOURGPU_CPU=1: the same commands on a CPU (tiny presets, gloo, bf16 under autocast, small copies, limits x 4):
# a functional check (244 s on 2 shared cores with FOURGPU_DEADLINE_S=1500, every part rc 0, at commit c1850b2)
DEV="" EQ_DEV="" BW="" SCALE=1
if [ "${FOURGPU_CPU:-0}" = 1 ]; then
  DEV="--device cpu" EQ_DEV="--device cpu --dtype bf16 --precision autocast" BW="--mib 16 --reps 3" SCALE=4
fi

{ nvidia-smi; nvidia-smi topo -m; } > "$OUT/logs/nvidia-smi.txt" 2>&1
{ echo "${WORKBENCH_GIT_SHA:-$(git rev-parse HEAD 2>/dev/null)}"; $PY -c "import torch, transformers, peft; print(torch.__version__, transformers.__version__, peft.__version__)"; \
  lscpu | head -20; numactl -H 2>/dev/null; } > "$OUT/logs/env.txt" 2>&1

run bandwidth 60 $TR --nproc-per-node 4 -m workbench.instrument.bandwidth --ranks 1,2,4 $BW --json "$OUT/bandwidth.json"

run equiv_n4 80 $TR --nproc-per-node 4 -m workbench.ab.distributed.equiv_bf16 --opt packing $EQ_DEV --json "$OUT/equiv_n4.json"

lim=$(limit 120)
if [ "$lim" -ge 40 ]; then
  log "start anomaly one + two (limit ${lim}s)"
  CUDA_VISIBLE_DEVICES=0 timeout -k 15 "$lim" $PY -m workbench.ab.distributed.trace_classes --opt all --only all \
      --warmup 2 --steps 1 $DEV --json "$OUT/anomaly_one.json" > "$OUT/logs/anomaly_one.log" 2>&1 &
  pid1=$!
  CUDA_VISIBLE_DEVICES=1,2 timeout -k 15 "$lim" $TR --nproc-per-node 2 -m workbench.ab.distributed.trace_classes \
      --opt all --only all --warmup 2 --steps 1 $DEV --json "$OUT/anomaly_two.json" > "$OUT/logs/anomaly_two.log" 2>&1
  rc2=$?; wait "$pid1"; rc1=$?
  log "end anomaly rc one $rc1 two $rc2"
else
  log "skip anomaly: ${lim}s left"
fi

for k in $(seq 0 $((K - 1))); do
  run "d4_p0$k" 320 $TR --nproc-per-node 4 -m workbench.ab --opt all --headline --only packing,offload,moe \
      --reps 4 --warmup-max 3 --seed "$k" $DEV --out "$OUT/d4/p0$k"
done

if [ "$(left)" -ge $((60 * SCALE)) ]; then
  if [ "$(left)" -ge $((110 * SCALE)) ]; then ONLY=packing,all; else ONLY=packing; fi
  run equiv_n2 110 env CUDA_VISIBLE_DEVICES=0,1 $TR --nproc-per-node 2 -m workbench.ab.distributed.equiv_bf16 \
      --opt all --headline --only "$ONLY" $EQ_DEV --json "$OUT/equiv_n2.json"
else
  log "skip equiv_n2: $(left)s left"
fi
log "ALL DONE in $((SECONDS - T0)) s"
