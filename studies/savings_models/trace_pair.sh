#!/usr/bin/env bash
# GPU minutes: about 3 on one H100 (two short runs of gpt-oss-20b at 2 layers, 4096 tokens, 1 rep; the nsys run adds one child per arm)
# Issue 39 item 1: one step of the same arm traced by each tool, for the trace-source parity test. The step is the MoE
# eager baseline of gpt-oss-20b, where the issue found the tools apart (GEMM 665.6 vs 185.3 ms, copy 341.9 vs 47.4):
# CUTLASS Kernel2 GEMMs, dtype-cast copies, fills and memsets. --batches 1 --steps 1: both tools trace one step on
# the same batch after the same warm-up. Writes $CAMP/trace_pair/<tool>/ (the ab run folders) and
# $CAMP/trace_pair/pair/{torch,nsys}.events.parquet (the first traced step of the eager arm, a few hundred KB each).
# Analysis (CPU, from the repo root; decision rule fixed in workbench/traces/parity.py before this run):
#   python -m workbench.traces.parity $CAMP/trace_pair/torch/traces/moe/eager.events.parquet \
#       $CAMP/trace_pair/nsys/traces/moe/eager.events.parquet --keep tests/data/trace_pair
#   git add tests/data/trace_pair/{torch,nsys}.events.parquet   # then tests/test_trace_parity.py stops skipping
# CPU check of the same commands (tiny preset, no kernels, not a result):
#   CAMP=/tmp/camp MODEL=tiny-gpt-oss LAYERS_TOKENS=" " TOOLS=torch bash studies/savings_models/trace_pair.sh   (about 90 s)
set -u
OUT=$CAMP/trace_pair
mkdir -p $OUT
nvidia-smi -i ${CUDA_VISIBLE_DEVICES:-0} --query-gpu=name,uuid --format=csv > $OUT/gpu.csv 2>/dev/null || echo "no nvidia-smi" > $OUT/gpu.csv
SHAPE="--opt moe --arms eager,sort_bincount --model ${MODEL:-gpt-oss-20b} ${LAYERS_TOKENS:---layers 2 --tokens 4096}"
for tool in ${TOOLS:-torch nsys}; do
  echo "$(date +%s) start $tool: python -m workbench.ab $SHAPE --reps 1 --batches 1 --steps 1 --warmup 2 --trace $tool" >> $OUT/jobs.txt
  python -m workbench.ab $SHAPE --reps 1 --batches 1 --steps 1 --warmup 2 --trace $tool --out $OUT/$tool \
    > $OUT/$tool.out 2> $OUT/$tool.err
  echo "$(date +%s) end $tool rc=$?" >> $OUT/jobs.txt
done
for arm in eager sort_bincount; do  # the parity table of each arm, for the note (eager's pair is the one kept)
  a=$OUT/torch/traces/moe/$arm.events.parquet; b=$OUT/nsys/traces/moe/$arm.events.parquet
  [ -f $b ] || b=$a  # CPU check: no nsys
  keep=""; [ $arm = eager ] && keep="--keep $OUT/pair"
  python -m workbench.traces.parity $a $b $keep > $OUT/parity_$arm.txt 2>&1
  echo "$(date +%s) parity $arm rc=$?" >> $OUT/jobs.txt
done
echo "$(date +%s) done" >> $OUT/jobs.txt
