#!/usr/bin/env bash
# GPU minutes: about 21 on one H100 (per-process wall times of profiles/2026-11-26_h100_replication/*/processes.json: packing 50 s, moe 87 s, offload 65 s): packing_aa 2.5, packing 5.0, gate 3.4, moe 5.8, offload 4.4; HELDOUT_PARTS="packing_aa packing" alone is 7.5.
# Issue 37's held-out check on a THIRD machine, as fixed beforehand in profiles/2026-11-26_h100_replication/
# prospective.json (its commands: same flags as that folder's jobs, new seeds, --reps one less because the engine
# now discards its own warm-up rep), plus the gate's same-commit A/A processes on this machine:
#   packing_aa  3 A/A processes of packing (--aa, seed 300): the gate's run SD on this machine
#   packing     6 held-out packing processes (seed 200): the prediction interval's test, and 5 gate decisions
#   gate        4 more packing processes (seed 206): gate decisions 6-9 on this machine (21 with machines A and B)
#   moe         4 held-out moe processes (seed 200)
#   offload     4 held-out offload processes (seed 200)
# Parts run in that order (HELDOUT_PARTS picks and orders a subset); each writes $CAMP/heldout/<part>/ (the
# --processes folder: pNN/ run folders, processes.json). The machine's name and UUID go to $CAMP/heldout/gpu.csv.
# Analysis, on a CPU afterwards (from the repo root):
#   python studies/heldout_replication/analyze_heldout.py $CAMP/heldout        # prints the verdicts, writes $CAMP/heldout/analysis.json
# CPU check of the same commands (tiny presets, not a result): CAMP=/tmp/camp PACKING_M=2 SMALL_M=2 AA_K=3 GATE_M=1 bash studies/heldout_replication/heldout.sh
set -u
OUT=${HELDOUT_OUT:-$CAMP/heldout}  # prospective2.sh: $CAMP/prospective2
SEED=${HELDOUT_SEED:-200}  # the held-out parts' first seed (prospective2.sh: 400, never used before)
mkdir -p $OUT
nvidia-smi -i ${CUDA_VISIBLE_DEVICES:-0} --query-gpu=name,uuid --format=csv > $OUT/gpu.csv 2>/dev/null || echo "no nvidia-smi" > $OUT/gpu.csv
COMMON="--headline --batches 1 --steps 2 --warmup 2 --warmup-max 6"
part() {  # name, then the python -m workbench.ab arguments
  local name=$1; shift
  echo "$(date +%s) start $name: python -m workbench.ab $* --out $OUT/$name" >> $OUT/jobs.txt
  python -m workbench.ab "$@" --out $OUT/$name > $OUT/$name.out 2> $OUT/$name.err
  echo "$(date +%s) end $name rc=$?" >> $OUT/jobs.txt
}
for p in ${HELDOUT_PARTS:-packing_aa packing gate moe offload}; do
  case $p in
    packing_aa) part packing_aa --opt packing --aa $COMMON --reps 4 --processes ${AA_K:-3} --seed 300 ;;
    packing) part packing --opt packing $COMMON --reps 4 --processes ${PACKING_M:-6} --seed $SEED ;;
    gate) part gate --opt packing $COMMON --reps 4 --processes ${GATE_M:-4} --seed 206 ;;
    moe) part moe --opt moe $COMMON --reps 3 --processes ${SMALL_M:-4} --seed $SEED ;;
    offload) part offload --opt offload $COMMON --reps 3 --processes ${SMALL_M:-4} --seed $SEED ;;
    *) echo "unknown part $p" >> $OUT/jobs.txt ;;
  esac
done
echo "$(date +%s) done" >> $OUT/jobs.txt
