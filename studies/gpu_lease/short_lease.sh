#!/usr/bin/env bash
# What fits in about 14 minutes of an H200 x4 lease (after open_campaigns.sh's lease was lost with its results):
#   GPU 0: the gate, design 3 (about 10 min); GPU 1: the callback's cost (studies/practitioner_recipe/trainer_cost.py);
#   GPU 2: qwen3-30b-a3b's MoE path at 32 layers (about 9 min); GPU 3: the main command with an 8-minute budget (its
#   default, 12 min, does not fit what was left of the session's device time; the planner is the same code).
C=${CAMP:-/tmp/camp}
G="--opt packing --headline --model qwen3-0.6b --layers 12 --tokens 16384 --batches 1 --steps 4 --warmup 2 --warmup-max 6 --reps 8"
nohup setsid bash studies/gpu_lease/chains.sh \
 "0:OUT=$C/gate AA_PROCESSES=8 SEED=500 SHAPE='$G' bash studies/gate_power/job.sh > $C/gate.log 2>&1" \
 "1:python -c 'import accelerate' 2>/dev/null || python -m pip install -q --no-deps --target .gpu/site .gpu/extra/*.whl; mkdir -p $C/callback; python studies/practitioner_recipe/trainer_cost.py $C/callback/trainer_cost > $C/callback/trainer_cost.out 2> $C/callback/trainer_cost.err" \
 "2:OUT=$C/levers LIMIT_S=960 MOE_LAYERS=32 bash studies/levers_past_nemo/run.sh moe" \
 "3:sleep 20; OUT=$C/main_budget MAIN_ARGS='--budget-min 8' bash studies/practitioner_recipe/main_budget_main.sh" \
 > /tmp/open_campaigns.log 2>&1 < /dev/null &
