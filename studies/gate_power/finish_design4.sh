#!/usr/bin/env bash
# Design 4's three unrun decisions (studies/gate_power/README.md "Design 4: completion"), against the committed
# baseline and A/A folders, in the design's alternation after the last one run: injected 3, same 4, injected 4.
# Writes $OUT/<name>/ (the gate's folder), <name>.out, <name>.err, and decisions.txt (rc per decision).
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
G=profiles/2026-11-29_h200_gate_design4/gate
AA="$G/aa1 $G/aa2 $G/aa3 $G/aa4 $G/aa5 $G/aa6"
nvidia-smi --query-gpu=name,uuid --format=csv > "$OUT/gpu.csv" 2>/dev/null
for d in inj3 same4 inj4; do
  cmd="python -m workbench gate --baseline $G/baseline --aa $AA --regression-pct 30 --out $OUT/fixed_$d"
  case $d in inj*) inj=498:4096;; *) inj=;; esac
  echo "${inj:+WORKBENCH_INJECT_GEMMS=$inj }$cmd" >> "$OUT/COMMAND.txt"
  if [ -n "$inj" ]; then WORKBENCH_INJECT_GEMMS=$inj $cmd > "$OUT/fixed_$d.out" 2> "$OUT/fixed_$d.err"
  else $cmd > "$OUT/fixed_$d.out" 2> "$OUT/fixed_$d.err"; fi
  echo "fixed_$d rc=$? $(date -u +%FT%TZ) $(grep -m1 'verdict' "$OUT/fixed_$d.out")" >> "$OUT/decisions.txt"
done
