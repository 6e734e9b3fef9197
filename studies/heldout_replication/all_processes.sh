#!/usr/bin/env bash
# GPU minutes: about 12 on one H100 (4 processes of the 'all' headline comparison, qwen3-30b-a3b 8 layers 8k, ~3 min each:
# the H200 g1_rest run's per-rep wall time; unmeasured on an H100)
# Issue 37: the headline's fourth row (`all`: cached+double_buffer+sort_bincount vs rebuild+sync_reload+eager) has no
# process-level claim. Run this on TWO machines (two leases; the machine's UUID names the folder), then write the
# held-out design from both (studies/heldout_replication/design_spread.py) BEFORE a third
# machine runs it again with ALL_SEED=700 (M = 4).
# Writes $CAMP/all_processes/<GPU-uuid-prefix>/ (a --processes folder) and jobs.txt.
# Analysis (CPU): python -m workbench.report $CAMP/all_processes/<uuid>   (its processes.json holds the estimate)
# CPU check (tiny presets, not a result): CAMP=/tmp/camp ALL_K=2 bash studies/heldout_replication/all_processes.sh
set -u
U=$(nvidia-smi -i ${CUDA_VISIBLE_DEVICES:-0} --query-gpu=uuid --format=csv,noheader 2>/dev/null | head -1 | cut -c1-12)
OUT=$CAMP/all_processes/${U:-cpu}
mkdir -p $OUT
echo "$(date +%s) start all on ${U:-cpu}" >> $CAMP/all_processes/jobs.txt
python -m workbench.ab --opt all --headline --batches 1 --steps 2 --warmup 2 --warmup-max 6 --reps 3 \
  --processes ${ALL_K:-4} --seed ${ALL_SEED:-600} --out $OUT > $OUT.out 2> $OUT.err
echo "$(date +%s) end all rc=$?" >> $CAMP/all_processes/jobs.txt
