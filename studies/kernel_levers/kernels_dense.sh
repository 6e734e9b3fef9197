#!/usr/bin/env bash
# expected GPU minutes: 8 on one H100 (2 comparisons x 3 arms x (4 + 1 discarded) reps x ~4-5 steps of ~2.5 s, + builds)
# Issue 40 items 1-2 (K1): the dense-model kernel levers on llama-3.1-8b at full depth, 32 layers, 16384 tokens, the
# step Trainer(bf16=True) runs (autocast, fp32 adapters), with transformers' own flex_attention on the packed batch
# (its BlockMask: documents' blocks only; `--attn varlen` would name a packing backend, which only the packing /
# attention opts install: any other --opt would silently run sdpa's dense T x T mask, ~2x the step at 16k):
#   liger     eager | liger (Liger RMSNorm + RoPE + SwiGLU) | torch_rmsnorm (torch's fused rms_norm only)
#   fused_ce  eager | liger_flce (Liger fused linear CE, chunk_mem_const 1: 32 chunks) | cce (filter_eps=None)
# Memory (issue 40): memory_estimate's bound at this shape is 43.1 GiB (the liger run's eager arm peaked at 43.38);
# the fused_ce run of 2026-11-26 failed on every arm in its counted pass, asking for 31.99 GiB = 32 heads x 16381^2
# x 4 bytes: flex's dense fp32 fallback, as the sync counter's dispatch mode kept torch.compile off transformers'
# flex_attention (fixed: workbench/instrument/syncs.py runs it outside the mode). The loss was not the cause.
# Peak memory per arm is in each run (peak_mem_mib, reset every step). Equivalence: the bf16 criterion of
# workbench/measure/equivalence.py (fixed before this run). Arithmetic: baseline step ~2.3-2.6 s (1155 ms at 8k with
# flex, x2 for 16k); per arm and rep 2-4 warmup + 2 timed steps on 1 batch; 15 arm-reps per comparison ~3.3 min,
# + build, equivalence, counted pass ~0.7 min: ~4 min each.
# Writes $CAMP/kernels_dense/{liger,fused_ce}/ (ab run folders) and their .out / .err, versions.txt, jobs.txt.
# Analysis (CPU, afterwards, from the repo root):
#   cp -r $CAMP/kernels_dense profiles/<date>_h100_kernels_dense
#   python -m workbench.report profiles/<date>_h100_kernels_dense/liger
#   python -m workbench.report profiles/<date>_h100_kernels_dense/fused_ce
#   workbench readme_results      # the results page picks the folders up
# CPU check of the same commands (tiny preset; liger's own arm is refused on a CPU, cce too; not a result):
#   CAMP=/tmp/camp MODEL=tiny-llama LAYERS=2 TOKENS=256 ATTN=sdpa TRITON_INTERPRET=1 bash studies/kernel_levers/kernels_dense.sh
#   (flex has no CPU backward: sdpa there)
set -u
OUT=$CAMP/kernels_dense
mkdir -p $OUT
PY="${PYTHON:-python}"
# the wheels the lead staged in .gpu/ (no deps: keep the image's torch and triton)
$PY -c "import liger_kernel, cut_cross_entropy" 2>/dev/null || \
  $PY -m pip install -q --no-index --no-deps --find-links .gpu --find-links .gpu/wheels \
    liger-kernel==0.8.5 cut-cross-entropy==25.1.1 > $OUT/pip.log 2>&1
$PY -c "import importlib.metadata as m; print(*(f'{p} {m.version(p)}' for p in ('torch','triton','transformers','liger-kernel','cut-cross-entropy')), sep='\n')" \
  > $OUT/versions.txt 2>&1
nvidia-smi -i ${CUDA_VISIBLE_DEVICES:-0} --query-gpu=name,uuid --format=csv >> $OUT/versions.txt 2>/dev/null || echo "no nvidia-smi" >> $OUT/versions.txt
SHAPE="--model ${MODEL:-llama-3.1-8b} --layers ${LAYERS:-32} --tokens ${TOKENS:-16384} --attn ${ATTN:-flex_attention}"
PROTO="--reps 4 --batches 1 --warmup-max 4"
for opt in ${KD_PARTS:-liger fused_ce}; do  # KD_PARTS=fused_ce: the loss levers alone (liger ran on two machines)
  cmd="$PY -m workbench.ab --opt $opt $SHAPE $PROTO --out $OUT/$opt --force"
  echo "$(date +%s) start $opt: $cmd" >> $OUT/jobs.txt
  $cmd > $OUT/$opt.out 2> $OUT/$opt.err
  rc=$?
  echo "$(date +%s) end $opt rc=$rc" >> $OUT/jobs.txt
done
echo "$(date +%s) done" >> $OUT/jobs.txt
