#!/usr/bin/env bash
# Every GPU campaign still open, as one lease of an H200 x2 host (about 16 minutes held; one chain per GPU; two chains,
# not four: design 3's A/A spread came mostly from host contention with three other chains, studies/gate_power/README.md):
#   GPU 0: the gate, design 4 (studies/gate_power/README.md: 6 A/A processes, 30% injected, 4 + 4 decisions), ~15 min
#   GPU 1: the main command at its default budget (12 min, studies/practitioner_recipe/main_budget_main.sh), ~13 min
# Then, in a lease of its own: gpt-oss-20b's path, whose +precision arm hit dynamo's recompile limit
# (profiles/2026-11-28_h200x4_open_campaigns/moe_gptoss.log; the limit is now counted per handle, opts/compile.py, tested on
# the CPU only): OUT=$C/levers LIMIT_S=900 GPTOSS_LAYERS=24 bash studies/levers_past_nemo/run.sh gptoss (~12 min)
# Written before its run. From the repository root on the GPU machine (after bash ../shared/gpu/stage.sh here, the
# tree carried with .gpu; accelerate staged in .gpu/extra if the machine lacks it):
#   bash studies/gpu_lease/open_campaigns.sh        # detached; then poll at once and again, never idle 30 s:
#   PARTS="gate main_budget" bash studies/gpu_lease/fetch_parts.sh 240
# Each part writes under $CAMP (default /tmp/camp); results go to profiles/<date>_<gpu>_<part>/ with a COMMAND.txt.
C=${CAMP:-/tmp/camp}
G="--opt packing --headline --model qwen3-0.6b --layers 12 --tokens 16384 --batches 1 --steps 4 --warmup 2 --warmup-max 6 --reps 8"
nohup setsid bash studies/gpu_lease/chains.sh \
 "0:OUT=$C/gate AA_PROCESSES=6 SEED=500 REGRESSION_PCT=30 SHAPE='$G' bash studies/gate_power/job.sh > $C/gate.log 2>&1" \
 "1:python -c 'import accelerate' 2>/dev/null || python -m pip install -q --no-deps --target .gpu/site .gpu/extra/*.whl; OUT=$C/main_budget bash studies/practitioner_recipe/main_budget_main.sh" \
 > /tmp/open_campaigns.log 2>&1 < /dev/null &
