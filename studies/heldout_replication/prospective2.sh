#!/usr/bin/env bash
# GPU minutes: about 16 on one H100 (heldout.sh line 2: packing 5.0, moe 5.8, offload 4.4, plus the start).
# Issue 37's held-out check on a FOURTH machine, as fixed beforehand in profiles/2026-11-26_h100_replication/
# prospective_v2.json (estimate: machines A, B, C; each machine its own process SD): heldout.sh's packing, moe and
# offload parts with seeds never used (400..), written to $CAMP/prospective2/ (gpu.csv: the machine's UUID, which
# must be none of A's, B's or C's: the analysis refuses it otherwise).
# Analysis, on a CPU afterwards (from the repo root):
#   python studies/heldout_replication/analyze_heldout_v2.py $CAMP/prospective2     # prints the verdicts, writes analysis_v2.json there
# CPU check of the same commands (tiny presets, not a result):
#   CAMP=/tmp/camp PACKING_M=2 SMALL_M=2 bash studies/heldout_replication/prospective2.sh
set -u
HELDOUT_OUT=$CAMP/prospective2 HELDOUT_SEED=400 HELDOUT_PARTS="packing moe offload" bash studies/heldout_replication/heldout.sh
