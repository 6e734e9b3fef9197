#!/bin/bash
# issue 22, second H100 run: the levers and the path after the fixes (counted pass under flex, step_guard, realistic baseline)
mkdir -p R
run() { name=$1; shift; echo "$(date +%T) start $name: python3 -m workbench.ab $* --out R/$name" >> R/jobs.txt
  python3 -m workbench.ab "$@" --out R/$name > R/$name.out 2> R/$name.err; echo "$(date +%T) end $name rc $?" >> R/jobs.txt; }
python3 -m pytest -q -p no:cacheprovider tests/test_step_guard.py tests/test_opt_attention.py tests/test_lever_path_arms.py > R/pytest.out 2>&1; echo "$(date +%T) gpu pytest rc $?" >> R/jobs.txt
run llama_levers --opt levers --model llama-3.1-8b --layers 8 --tokens 16384 --trace torch --reps 4
python3 -m workbench.lever_path R/llama_levers --out R/path_llama > R/path_llama.out 2>&1; echo "$(date +%T) path llama rc $?" >> R/jobs.txt
run gptoss8k_levers --opt levers --model gpt-oss-20b --layers 4 --tokens 8192 --trace torch --reps 4
python3 -m workbench.lever_path R/gptoss8k_levers --out R/path_gptoss > R/path_gptoss.out 2>&1; echo "$(date +%T) path gptoss rc $?" >> R/jobs.txt
run gptoss16k_best --opt attention --model gpt-oss-20b --layers 4 --tokens 16384 --arms flex,flex --precision bf16 --reps 4 --force
run qwen3moe_levers --opt levers --model qwen3-30b-a3b --layers 8 --tokens 8192 --trace torch --reps 4
python3 -m workbench.lever_path R/llama_levers R/gptoss8k_levers R/qwen3moe_levers --out R/path > R/path.out 2>&1; echo "$(date +%T) path all rc $?" >> R/jobs.txt
echo "$(date +%T) ALL DONE" >> R/jobs.txt
