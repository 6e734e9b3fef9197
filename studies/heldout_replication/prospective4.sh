#!/usr/bin/env bash
# GPU minutes: about 23 on one H100 (4 processes of `--opt all --headline`, every comparison of the headline in each:
# 329 s and 372 s a process on machine G, profiles/2026-11-26_h100_all_processes_g/processes.json)
# Issue 37: the held-out check of profiles/2026-11-26_h100_all_processes_g/prospective_v4.json (packing from machines
# A-E and G) on a machine none of its `machines`, with seeds never used (700..). Its `all` processes are also the
# second machine of the `all` row's estimate (a v5 from G and this machine, judged on a third).
# Writes $CAMP/prospective4/gpu.csv and $CAMP/prospective4/all/ (a --processes folder), jobs.txt.
# Analysis, on a CPU afterwards (from the repo root):
#   python studies/heldout_replication/analyze_heldout_v2.py $CAMP/prospective4 --design profiles/2026-11-26_h100_all_processes_g/prospective_v4.json
#   python -m workbench.report $CAMP/prospective4/all/p00          # one process's tables
# CPU check of the same commands (tiny presets, not a result): CAMP=/tmp/camp ALL_M=2 bash studies/heldout_replication/prospective4.sh
#
# RAN 2026-11-26 (6) on machine H: 3 of 4 processes (profiles/2026-11-26_h100_prospective4/). The same
# job is v5's held-out run (profiles/2026-11-26_h100_prospective4/prospective_v5.json: `all` from G and H) and packing's
# fourth held-out process count for v4, on a machine none of A-H, with v5's seeds:
#   P_NAME=prospective5 P_SEED=800 CAMP=/tmp/camp bash studies/heldout_replication/prospective4.sh          (~23.4 GPU minutes)
# Analysis (CPU), each design's rule as committed (each refuses a machine it pooled):
#   for v in profiles/2026-11-26_h100_prospective4/prospective_v5.json profiles/2026-11-26_h100_all_processes_g/prospective_v4.json \
#            profiles/2026-11-26_h100_prospective2/prospective_v3.json profiles/2026-11-26_h100_replication/prospective_v2.json; do
#     python studies/heldout_replication/analyze_heldout_v2.py $CAMP/prospective5 --design $v; done
#   (v5: all; v4: packing; v3: moe; v2: offload; an interrupted run: python -m workbench.ab.processes $CAMP/prospective5/all first)
set -u
OUT=$CAMP/${P_NAME:-prospective4}
mkdir -p $OUT
nvidia-smi -i ${CUDA_VISIBLE_DEVICES:-0} --query-gpu=name,uuid --format=csv > $OUT/gpu.csv 2>/dev/null || echo "no nvidia-smi" > $OUT/gpu.csv
echo "$(date +%s) start all" >> $OUT/jobs.txt
python -m workbench.ab --opt all --headline --batches 1 --steps 2 --warmup 2 --warmup-max 6 --reps 3 \
  --processes ${ALL_M:-4} --seed ${P_SEED:-700} --out $OUT/all > $OUT/all.out 2> $OUT/all.err
echo "$(date +%s) end all rc=$?" >> $OUT/jobs.txt
