#!/usr/bin/env bash
# expected GPU minutes: 3 on 2 GPUs of a 2- or 4-GPU host (equiv ~110 s as in the 4-GPU job, backward_ops ~40 s)
#
# Issue 41 after the fix of the offload checkpoint under FSDP2 (transformers 5.17's partial(layer.__call__): every
# LoRA gradient was lost): FSDP2 x 2 against one process at bf16 (autocast) for the `all` model (qwen3-30b-a3b 8 L 8k,
# arm rebuild+sync_reload+eager), the check that crashed in the 4-GPU run, then the whole-weight expert gradient
# ops counted on rank 0 of 2 (they must now match one process's: backward_ops). Writes $CAMP/equiv_all/.
#   CAMP=/tmp/camp bash studies/four_gpu/equiv_all.sh                        # GPU
#   EQUIV_ALL_CPU=1 CAMP=/tmp/camp bash studies/four_gpu/equiv_all.sh        # the same commands on the CPU, tiny preset
# Analysis (CPU, afterwards): python studies/four_gpu/analyze_fourgpu.py DIR reads DIR/equiv_n*.json: copy $CAMP/equiv_all/
# equiv_n2_all.json beside the 4-GPU folder's files (profiles/2026-11-26_h100x4_fourgpu/) and run it again.
set -u
OUT="$CAMP/equiv_all"
mkdir -p "$OUT/logs"
PY="${PYTHON:-python3}"
export NCCL_NVLS_ENABLE=0 TOKENIZERS_PARALLELISM=false
TR="$PY -m torch.distributed.run --standalone --nproc-per-node 2"
A="--opt all --headline --only all"
LIM=110
if [ "${EQUIV_ALL_CPU:-0}" = 1 ]; then
  A="$A --device cpu --dtype bf16 --precision autocast"; LIM=400
  export OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=lo
else
  export CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0,1}"
fi
{ echo "${WORKBENCH_GIT_SHA:-$(git rev-parse HEAD 2>/dev/null)}"; \
  $PY -c "import torch, transformers, peft; print(torch.__version__, transformers.__version__, peft.__version__)"; \
  nvidia-smi -L 2>/dev/null; } > "$OUT/logs/env.txt" 2>&1
timeout -k 15 "$LIM" $TR -m workbench.ab.distributed.equiv_bf16 $A --json "$OUT/equiv_n2_all.json" \
    > "$OUT/logs/equiv_n2_all.log" 2>&1
echo "equiv rc $?" >> "$OUT/logs/jobs.txt"
timeout -k 15 "$LIM" $TR -m workbench.ab.distributed.backward_ops $A --json "$OUT/backward_ops_two.json" \
    > "$OUT/logs/backward_ops_two.log" 2>&1
echo "backward_ops rc $?" >> "$OUT/logs/jobs.txt"
