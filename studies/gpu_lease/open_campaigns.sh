#!/usr/bin/env bash
# Every GPU campaign still open, as one lease of an H200 x4 host (about 18 minutes held; one chain per GPU):
#   GPU 0: the gate, design 3 (studies/gate_power/README.md), 17 processes of about 60 s: about 17 min
#   GPU 1: the main command in its default budget and the callback's cost (studies/practitioner_recipe/): about 16 min
#   GPU 2: the levers path with the fused-LoRA lever, every point traced, NeMo's shape (about 5 min), then gpt-oss-20b's
#          MoE path at its whole depth, 24 layers (about 10-12 min by studies/levers_past_nemo/README.md's arithmetic)
#   GPU 3: qwen3-30b-a3b's MoE path at the greatest depth whose fastest arm fits, 32 layers (about 14 min)
# Written before its run. From the repository root on the GPU machine (after bash ../shared/gpu/stage.sh here, the
# tree carried with .gpu; accelerate staged in .gpu/extra if the machine lacks it):
#   bash studies/gpu_lease/open_campaigns.sh        # detached; then poll at once and again, never idle 30 s:
#   PARTS="gate main_budget" bash studies/gpu_lease/fetch_parts.sh 240      (and the levers parts as they end)
# Each part writes under $CAMP (default /tmp/camp); results go to profiles/<date>_<gpu>_<part>/ with a COMMAND.txt.
C=${CAMP:-/tmp/camp}
G="--opt packing --headline --model qwen3-0.6b --layers 12 --tokens 16384 --batches 1 --steps 4 --warmup 2 --warmup-max 6 --reps 8"
nohup setsid bash studies/gpu_lease/chains.sh \
 "0:OUT=$C/gate AA_PROCESSES=8 SEED=500 SHAPE='$G' bash studies/gate_power/job.sh > $C/gate.log 2>&1" \
 "1:python -c 'import accelerate' 2>/dev/null || python -m pip install -q --no-deps --target .gpu/site .gpu/extra/*.whl; OUT=$C/main_budget bash studies/practitioner_recipe/main_budget.sh" \
 "2:OUT=$C/levers bash studies/levers_past_nemo/run.sh nemo8k_path; OUT=$C/levers LIMIT_S=900 GPTOSS_LAYERS=24 bash studies/levers_past_nemo/run.sh gptoss" \
 "3:OUT=$C/levers LIMIT_S=960 MOE_LAYERS=32 bash studies/levers_past_nemo/run.sh moe" \
 > /tmp/open_campaigns.log 2>&1 < /dev/null &
