#!/usr/bin/env bash
# The levers path past NeMo (activations lever), one part per call, each under a 540 s timeout (9 minutes).
# Run from the repository root on the GPU machine, detached, writing under $OUT:
#   source .gpu/env.sh; nohup setsid bash studies/levers_past_nemo/run.sh nemo8k > /tmp/lpn.log 2>&1 &
#   ... poll: tail -3 $OUT/nemo8k.log ; when done: bash studies/levers_past_nemo/run.sh report
# Parts (device time each, at most; LIMIT_S sets the timeout): nemo8k 9 min, l16k 9 min, nemo8k_path and l16k_path
# (--only path, every point traced: 4 and 6 min on an H200), moe 9 min, gptoss 9 min, report 1 min (no GPU work).
# Budget: nemo8k + l16k + report = 19 minutes of one H200; moe + gptoss + report = 19 more (the README says why their
# depths and protocol fit 9 minutes each).
set -u
PART=${1:?part: nemo8k | l16k | nemo8k_path | l16k_path | moe | gptoss | report}
OUT=${OUT:?set OUT}
mkdir -p "$OUT"
LIMIT_S=${LIMIT_S:-540}
COMMON="--reps 4 --steps 1 --batches 1 --warmup-max 4 --only activations,path"
PATH_TRACED="--reps 4 --steps 1 --batches 1 --warmup-max 4 --only path --trace torch"  # every point traced
MOE_COMMON="--reps 4 --steps 1 --batches 1 --warmup-max 2 --only path --trace torch"
run() {  # name, then the arguments of python -m workbench.ab (COMMON, or MOE_COMMON where the part sets it)
  local name=$1; shift
  local cmd="python -m workbench.ab --opt levers $* ${PROTOCOL:-$COMMON} --out $OUT/$name"
  { echo "# $(date -u +%FT%TZ) git $(git rev-parse HEAD 2>/dev/null || cat .gpu/sha 2>/dev/null)"; echo "$cmd"
    nvidia-smi --query-gpu=name,uuid,clocks.max.sm,power.limit --format=csv,noheader 2>/dev/null; } >> "$OUT/COMMAND.txt"
  timeout -k 10 "$LIMIT_S" $cmd > "$OUT/$name.log" 2>&1
  echo "end $name rc=$? $(date -u +%FT%TZ)" | tee -a "$OUT/COMMAND.txt"
}
case $PART in
  nemo8k) run nemo8k --model llama-3.1-8b --layers 32 --lengths fixed:4096 --tokens 8192;;
  l16k) run l16k --model llama-3.1-8b --layers 32 --lengths fixed:4096 --tokens 16384;;
  moe) PROTOCOL=$MOE_COMMON run moe_qwen3 --model qwen3-30b-a3b --layers ${MOE_LAYERS:-8} --lengths fixed:4096 --tokens 8192;;
  nemo8k_path) PROTOCOL=$PATH_TRACED run nemo8k_path --model llama-3.1-8b --layers 32 --lengths fixed:4096 --tokens 8192;;
  l16k_path) PROTOCOL=$PATH_TRACED run l16k_path --model llama-3.1-8b --layers 32 --lengths fixed:4096 --tokens 16384;;
  gptoss) PROTOCOL=$MOE_COMMON run moe_gptoss --model gpt-oss-20b --layers ${GPTOSS_LAYERS:-6} --lengths fixed:4096 --tokens 8192;;
  report)
    dirs=$(for d in nemo8k l16k nemo8k_path l16k_path moe_qwen3 moe_gptoss; do [ -f "$OUT/$d/summary.json" ] || [ -f "$OUT/$d/results.csv" ] && echo "$OUT/$d"; done)
    echo "python -m workbench lever_path $dirs --out $OUT/path" >> "$OUT/COMMAND.txt"
    python -m workbench lever_path $dirs --out "$OUT/path" > "$OUT/path.log" 2>&1; cat "$OUT/path.log";;
  *) echo "unknown part $PART (nemo8k | l16k | nemo8k_path | l16k_path | moe | gptoss | report)"; exit 2;;
esac
