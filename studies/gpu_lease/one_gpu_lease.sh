#!/usr/bin/env bash
# The open GPU campaigns that fit one H200 and the 30 minutes of one session (only one-GPU machines are lent), in order
# of their issues, one chain, nothing beside it on the GPU (design 4's noise is that of a host of its own):
#   1. the gate, design 4 (studies/gate_power/README.md: 6 A/A processes, 30% injected, 4 + 4 decisions), ~15 min
#   2. the main command at its default budget (12 min, studies/practitioner_recipe/main_budget_main.sh), ~12.5 min
# gpt-oss-20b's path (studies/levers_past_nemo/run.sh gptoss, ~12 min) does not fit beside them and waits for a lease.
# Ran once (profiles/2026-11-29_h200_gate_design4/COMMAND.txt: the gate's decisions exited 2 on a bug since fixed, the
# main command was lost with the machine). Its open parts then ran as finish_design4_lease.sh (design 4's unrun
# decisions, the main command, gpt-oss-20b's path); this plan stays for design 4 whole in one lease (about 29 minutes).
# Written before its run. From the repository root on the GPU machine (after bash ../shared/gpu/stage.sh here, the tree
# carried with .gpu):
#   bash studies/gpu_lease/one_gpu_lease.sh        # detached; then poll at once and again, never idle 30 s:
#   PARTS="gate main_budget levers" bash studies/gpu_lease/fetch_parts.sh 240
C=${CAMP:-/tmp/camp}
G="--opt packing --headline --model qwen3-0.6b --layers 12 --tokens 16384 --batches 1 --steps 4 --warmup 2 --warmup-max 6 --reps 8"
GATE="OUT=$C/gate AA_PROCESSES=6 SEED=500 REGRESSION_PCT=30 SHAPE='$G' bash studies/gate_power/job.sh > $C/gate.log 2>&1"
MAIN="python -c 'import accelerate' 2>/dev/null || python -m pip install -q --no-deps --target .gpu/site .gpu/extra/*.whl; OUT=$C/main_budget bash studies/practitioner_recipe/main_budget_main.sh"
GPTOSS="OUT=$C/levers LIMIT_S=900 GPTOSS_LAYERS=24 bash studies/levers_past_nemo/run.sh gptoss"
mkdir -p $C
if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 2 ]; then  # an x2 host: the gate alone on GPU 0, the rest on GPU 1 (~25 min)
  CHAINS=("0:$GATE" "1:$MAIN;$GPTOSS")
else                                                      # one GPU: the gate, then the main command (~29 min)
  CHAINS=("0:$GATE;$MAIN")
fi
nohup setsid bash studies/gpu_lease/chains.sh "${CHAINS[@]}" > /tmp/one_gpu_lease.log 2>&1 < /dev/null &
