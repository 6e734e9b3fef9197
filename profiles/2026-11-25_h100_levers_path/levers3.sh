#!/bin/bash
# issue 22, third H100 call: the GPU tests the first call's test bug poisoned, and qwen3-30b-a3b's path with its traces
mkdir -p R
python3 -m pytest -q -p no:cacheprovider tests/test_opt_attention.py tests/test_lever_path_arms.py tests/test_step_guard.py > R/pytest.out 2>&1; echo "$(date +%T) gpu pytest rc $?" >> R/jobs.txt
echo "$(date +%T) start qwen3moe_path: python3 -m workbench.ab --opt levers --model qwen3-30b-a3b --layers 8 --tokens 8192 --trace torch --reps 4 --only path --out R/qwen3moe_path" >> R/jobs.txt
python3 -m workbench.ab --opt levers --model qwen3-30b-a3b --layers 8 --tokens 8192 --trace torch --reps 4 --only path --out R/qwen3moe_path > R/qwen3moe_path.out 2> R/qwen3moe_path.err; echo "$(date +%T) end qwen3moe_path rc $?" >> R/jobs.txt
python3 -m workbench.lever_path R/qwen3moe_path --out R/path_qwen3 > R/path_qwen3.out 2>&1; echo "$(date +%T) path rc $?" >> R/jobs.txt
echo "$(date +%T) ALL DONE" >> R/jobs.txt
