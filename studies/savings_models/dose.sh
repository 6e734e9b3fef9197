#!/usr/bin/env bash
# GPU minutes: at most 14 on one H100 (a hard cap: packing about 9, MoE the rest under `timeout`; arithmetic below)
# Issue 39 item 2: the sync-driven models' inputs measured without the instrument, a dose-response. The levels of each
# fix run as the arms of one engine comparison per process (python -m workbench.ab.dose), timed three ways (--timing
# none: NVTX only; torch: the same timed steps under torch.profiler; nsys: the process under nsys, the reps in its
# capture range), 3 processes per mode, modes interleaved per process; one torch-traced pass of every level in the
# first untimed process gives the model's traced input c per unit. Decision rule fixed before this run in
# workbench/savings/dose_fit.py (decide). Writes $CAMP/dose/{packing,moe}/ (dose_run.json, <mode>/pNN/ run folders).
#
# Arithmetic (from the replication campaign: ~50 s per packing process of 2 arms x (6 + 1 discarded) reps on
# qwen3-14b = ~18 s build/equivalence + 14 arm blocks x ~2.3 s (6-7 steps of ~0.35 s)). Here --batches 1 (warmup
# 2 steps + 2 timed = 4 steps, ~1.4 s a block) and R = 2 (+ 1 discarded): 5 levels x 3 reps = 15 blocks = ~21 s
# + ~20 s fixed = ~40 s a process untimed, ~55 s under torch.profiler (+ the profile's processing at each block's
# end), ~70 s under nsys (start, report write): ~165 s per process index, x 3 = ~8.3 min, + the traced pass of 5
# levels (~1 min) = ~9.3 min. MoE (gpt-oss-20b, 8 layers, 8192 tokens, eager ~3.2 s a step: 1.75 s at 4 layers in
# profiles/2026-11-25_h100_lengths) with 3 levels (0, 4, 8), --batches 1 --steps 1 (3 steps a block, ~10 s),
# R = 2: 9 blocks = ~90 s + ~35 s fixed = ~2 min a process: 3 modes x 3 processes would be ~19 min alone. It gets
# what is left of the 14 (`timeout`, about 4.5 min: the first process index of each mode, maybe a second untimed);
# dose_run.json is rewritten after every process, so a cut run keeps what finished. The MoE half needs ~20 more
# GPU minutes for K = 3 per mode: say so in the note rather than shrink the shape.
#
# Analysis (CPU, from the repo root):
#   python -m workbench.savings.dose_fit $CAMP/dose/packing --calibration profiles/calibration.json
#   python -m workbench.savings.dose_fit $CAMP/dose/moe --calibration profiles/calibration.json
# (then copy the two folders without traces/ into profiles/<date>_h100_dose/; notebook 02 reads them)
# CPU check of the same commands (tiny presets, no GPU events so no c, not a result; about 10 min on 2 loaded cores):
#   CAMP=/tmp/camp PACKING="--opt packing --layers 2" MOE="--opt moe --layers 2" MODES=none,torch \
#     BUDGET_S=1800 bash studies/savings_models/dose.sh
set -u
OUT=$CAMP/dose
mkdir -p $OUT
nvidia-smi -i ${CUDA_VISIBLE_DEVICES:-0} --query-gpu=name,uuid --format=csv > $OUT/gpu.csv 2>/dev/null || echo "no nvidia-smi" > $OUT/gpu.csv
if [ -z "${NSYS:-}" ] && ! command -v nsys >/dev/null; then  # Nsight Compute carries nsys (shared/gpu/README.md)
  NSYS=$(ls -d /usr/local/cuda*/bin/nsys /opt/nvidia/*/target-linux-x64/nsys /opt/nvidia/*/*/target-linux-x64/nsys \
         /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys /opt/nvidia/nsight-systems/*/bin/nsys \
         2>/dev/null | head -1)
  [ -n "$NSYS" ] && export NSYS || echo "$(date +%s) no nsys found: the nsys mode is skipped" >> $OUT/jobs.txt
fi
echo "$(date +%s) nsys: ${NSYS:-$(command -v nsys)}" >> $OUT/jobs.txt
MODES=${MODES:-none,torch,nsys}
BUDGET_S=${BUDGET_S:-840}
T0=$(date +%s)
PACKING=${PACKING:---opt packing --model qwen3-14b --layers 8 --tokens 16384}
MOE=${MOE:---opt moe --model gpt-oss-20b --layers 8 --tokens 8192}
run() {  # name, seconds at most, timing modes, processes, flags
  local name=$1 limit=$2 modes=$3 k=$4; shift 4
  echo "$(date +%s) start $name (limit ${limit}s): python -m workbench.ab.dose $*" >> $OUT/jobs.txt
  timeout --signal=TERM --kill-after=30 $limit python -m workbench.ab.dose "$@" --timing $modes --processes $k \
    --trace torch --out $OUT/$name > $OUT/$name.out 2> $OUT/$name.err
  echo "$(date +%s) end $name rc=$?" >> $OUT/jobs.txt
}
run packing $((BUDGET_S * 2 / 3)) $MODES ${PACKING_K:-3} $PACKING --reps 2 --batches 1 --steps 2 --warmup 2
run moe $((BUDGET_S - ($(date +%s) - T0))) ${MOE_MODES:-$MODES} ${MOE_K:-3} $MOE --levels 3 --reps 2 --batches 1 --steps 1 --warmup 1 --warmup-max 4
for name in packing moe; do
  [ -f $OUT/$name/dose_run.json ] || continue
  python -m workbench.savings.dose_fit $OUT/$name --calibration $OUT/calibration.json > $OUT/$name.analysis.txt 2>&1
  echo "$(date +%s) analysis $name rc=$?" >> $OUT/jobs.txt
done
echo "$(date +%s) done" >> $OUT/jobs.txt
