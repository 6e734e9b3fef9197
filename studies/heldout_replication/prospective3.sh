#!/usr/bin/env bash
# GPU minutes: about 7 on one H100 (the moe part of prospective2.sh took 6.8 on machine D).
# Issue 37's MoE held-out check on a FIFTH machine, as fixed beforehand in profiles/2026-11-26_h100_prospective2/
# prospective_v3.json (estimate: machines A and D, each its own process SD): heldout.sh's moe part with seeds never
# used (500..), written to $CAMP/prospective3/ (gpu.csv: the machine's UUID, which must be none of A's, B's, C's or
# D's: the analysis refuses it otherwise).
# Analysis, on a CPU afterwards (from the repo root):
#   python studies/heldout_replication/analyze_heldout_v2.py $CAMP/prospective3 --design profiles/2026-11-26_h100_prospective2/prospective_v3.json
# CPU check of the same commands (tiny presets, not a result):
#   CAMP=/tmp/camp SMALL_M=2 bash studies/heldout_replication/prospective3.sh
set -u
HELDOUT_OUT=$CAMP/prospective3 HELDOUT_SEED=500 HELDOUT_PARTS="moe" bash studies/heldout_replication/heldout.sh
