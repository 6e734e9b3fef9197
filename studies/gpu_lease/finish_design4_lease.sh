#!/usr/bin/env bash
# One H200 (one GPU), 30 minutes of device time; the open GPU campaigns in the order of their issues, one chain:
#   1. the gate's design 4, its three unrun decisions (studies/gate_power/README.md "Design 4: completion"), ~4 min
#   2. the main command at its default budget (studies/practitioner_recipe/README.md: predicted ~11.2 min), <= 12 min
#   3. gpt-oss-20b's levers path at the depth its study fixed for 9 minutes (studies/levers_past_nemo/README.md "The MoE
#      step": 6 layers, 540 s), with what device time is left
# Written before its run. From the repository root on the GPU machine (profiles/ holding calibration.json and the
# design-4 gate folder; the tree carried with .gpu):
#   bash studies/gpu_lease/finish_design4_lease.sh   # detached; then poll back to back, never idle 30 s:
#   PARTS="gate_rest main_budget levers" bash studies/gpu_lease/fetch_parts.sh 200
C=${CAMP:-/tmp/camp}
REST="OUT=$C/gate_rest bash studies/gate_power/finish_design4.sh > $C/gate_rest.log 2>&1"
MAIN="python -c 'import accelerate' 2>/dev/null || python -m pip install -q --no-deps --target .gpu/site .gpu/extra/*.whl; OUT=$C/main_budget bash studies/practitioner_recipe/main_budget_main.sh"
GPTOSS="OUT=$C/levers LIMIT_S=540 GPTOSS_LAYERS=6 bash studies/levers_past_nemo/run.sh gptoss"
mkdir -p $C
nohup setsid bash studies/gpu_lease/chains.sh "0:$REST;$MAIN;$GPTOSS" > /tmp/lease.log 2>&1 < /dev/null &
