#!/usr/bin/env bash
# GPU minutes: about 10 on one H100 (3 packing processes ~1.3 min each, 3 MoE processes ~2 min each, each traced)
# Issue 39: theta's traced input c at the process level. `python -m workbench.savings.dose_fit` prints, beside its
# decision, c over every traced process of a dose folder (`c_over_processes`); profiles/2026-11-26_h100_dose holds 2
# traced packing processes (1 df) and 3 MoE ones with one traced step each (c 39.7-75.3 ms per layer). Each
# invocation below is one process whose levels are timed untimed (`--timing none`) and then traced (`--trace torch`:
# the traced pass runs in the first untimed process only, hence one invocation per seed); MoE with --steps 3 so each
# traced level has 3 steps (c gets its own interval over steps). Seeds 20-22 never used.
# Writes $CAMP/dose_traced/{packing,moe}_sNN/ (dose folders) and jobs.txt. Afterwards (CPU, from the repo root):
#   python -m workbench.ab.dose_merge profiles/2026-11-26_h100_dose/packing $CAMP/dose_traced/packing_s2?
#   python -m workbench.ab.dose_merge profiles/2026-11-26_h100_dose/moe $CAMP/dose_traced/moe_s2?
#   python -m workbench.savings.dose_fit profiles/2026-11-26_h100_dose/<opt> --calibration profiles/2026-11-26_h100_dose/calibration.json
# CPU check (tiny presets, no GPU events so no c, not a result; ~4 min):
#   CAMP=/tmp/camp PACKING="--opt packing --layers 2" MOE="--opt moe --layers 2" bash studies/savings_models/dose_traced.sh
set -u
OUT=$CAMP/dose_traced
mkdir -p $OUT
nvidia-smi -i ${CUDA_VISIBLE_DEVICES:-0} --query-gpu=name,uuid --format=csv > $OUT/gpu.csv 2>/dev/null || echo "no nvidia-smi" > $OUT/gpu.csv
PACKING=${PACKING:---opt packing --model qwen3-14b --layers 8 --tokens 16384}
MOE=${MOE:---opt moe --model gpt-oss-20b --layers 4 --tokens 8192}
one() {  # name seed limit_s flags
  local name=$1 seed=$2 limit=$3; shift 3
  echo "$(date +%s) start $name: python -m workbench.ab.dose $* --seed $seed" >> $OUT/jobs.txt
  timeout --signal=TERM --kill-after=30 $limit python -m workbench.ab.dose "$@" --timing none --processes 1 \
    --trace torch --seed $seed --out $OUT/$name > $OUT/$name.out 2> $OUT/$name.err
  echo "$(date +%s) end $name rc=$?" >> $OUT/jobs.txt
}
# DT_SEEDS / DT_PARTS: which seeds and models (2026-11-26 (6) ran seeds 20-21 of both on machine I; packing_s22 was
# left out, moe_s22 never started: the next run is DT_PARTS=moe DT_SEEDS="23 24 25")
for s in ${DT_SEEDS:-20 21 22}; do
  [[ " ${DT_PARTS:-packing moe} " == *" packing "* ]] && one packing_s$s $s 150 $PACKING --reps 2 --batches 1 --steps 2 --warmup 2
  [[ " ${DT_PARTS:-packing moe} " == *" moe "* ]] && one moe_s$s $s 200 $MOE --levels 3 --reps 2 --batches 1 --steps 3 --warmup 1 --warmup-max 4
done
echo "$(date +%s) done" >> $OUT/jobs.txt
