#!/usr/bin/env bash
# Detached lease plan (the `.gpu/lease_plan.sh` some COMMAND.txt files name): runs the named jobs in order until LEASE_S seconds after start, each under a
# timeout of the time left (a job with less than its minimum left is skipped); one-GPU jobs on GPU 0, a job with
# PIN="" on every GPU (it pins its own children). Progress in $CAMP/progress; studies/gpu_lease/poll.sh brings it back.
# Launch (device tool, kind nvidia-h100-x1 or a 4-GPU kind, carry [".gpu"], this call only):
#   source .gpu/env.sh; rm -rf /tmp/camp; PLAN="job ..." LEASE_S=1560 nohup setsid bash studies/gpu_lease/lease_plan.sh > /tmp/lease.log 2>&1 &
#   sleep 25; cat /tmp/lease.log /tmp/camp/gpus.csv; bash studies/gpu_lease/poll.sh 520
# Poll (later calls, carry nothing: carrying .gpu again replaces it on the device under the running job):
#   bash studies/gpu_lease/poll.sh 540
# Never edit tracked code while a lease runs: each call copies the working tree, and later processes import it.
set -u
CAMP=${CAMP:-/tmp/camp}; mkdir -p $CAMP
# run from a copy of the staged packages: a later call that carries .gpu/ replaces it on the device under a running job
rm -rf /tmp/gpusite && cp -r .gpu/site /tmp/gpusite 2>/dev/null && export PYTHONPATH="$PWD:/tmp/gpusite"
T0=$(date +%s); T_END=$((T0 + ${LEASE_S:-1560}))
KNOWN=" $(grep -rhoE 'GPU-[0-9a-f]{8}' profiles 2>/dev/null | sort -u | tr '\n' ' ')"  # the GPUs profiles/ names, read from its run folders
nvidia-smi --query-gpu=index,name,uuid --format=csv,noheader > $CAMP/gpus.csv 2>/dev/null || echo "no nvidia-smi" > $CAMP/gpus.csv
n=$(wc -l < $CAMP/gpus.csv); new=0; newl=""
while IFS=, read -r i name uuid; do u=$(echo $uuid | cut -c1-12); case " $KNOWN " in *" $u "*) ;; *) new=$((new+1)); newl="$newl $u";; esac; done < $CAMP/gpus.csv
echo "$n GPUs (new: $new$newl); plan: $PLAN; T_END $T_END" >> $CAMP/progress
git rev-parse HEAD > $CAMP/sha 2>/dev/null || cp .gpu/sha $CAMP/sha 2>/dev/null
job() {  # name -> min_seconds and command
  case $1 in
    dose_same10) MIN=300; CMD="python -m workbench.ab.dose --opt packing --model qwen3-14b --layers 8 --tokens 16384 --reps 2 --batches 1 --steps 2 --warmup 2 --timing none --processes 10 --seed 50 --trace none --out $CAMP/dose_same";;
    v_pack_llama10) MIN=200; CMD="CAMP=$CAMP/v_pack_llama10 ONLY=packing_llama8 VERDICT_K=10 TRACE=none SEED=800 MOE=0 OFFLOAD=0 bash studies/savings_models/verdicts.sh";;
    seeds_moe) MIN=300; CMD="CAMP=$CAMP/seeds_moe bash studies/moe_two_term/process_seeds.sh";;
    moe_host) MIN=600; PIN=""; CMD="CAMP=$CAMP bash studies/moe_two_term/moe_same_host.sh";;
    moe_work) MIN=300; PIN=""; CMD="CAMP=$CAMP bash studies/moe_two_term/moe_work.sh";;
    moe_backward) MIN=300; PIN=""; CMD="CAMP=$CAMP bash studies/moe_two_term/moe_backward.sh";;
    moe_q6l12k) MIN=150; PIN=""; CMD="CAMP=$CAMP RUN=q6l12k SEED_OFFSET=500 bash studies/moe_two_term/moe_backward.sh";;
    cpu_smoke) MIN=5; CMD="python -c 'import torch; print(torch.cuda.is_available())'";;
    *) MIN=-1;;
  esac
}
for j in $PLAN; do
  PIN=0; job $j; now=$(date +%s); left=$((T_END - now))
  if [ "$MIN" -lt 0 ]; then echo "unknown job $j" >> $CAMP/progress; continue; fi
  if [ $left -lt $MIN ]; then echo "skip $j (${left}s left) $now" >> $CAMP/progress; continue; fi
  echo "start $j on GPU ${PIN:-all} (timeout ${left}s) $now" >> $CAMP/progress
  if [ -n "$PIN" ]; then CUDA_VISIBLE_DEVICES=$PIN timeout -k 10 $left bash -c "$CMD" > $CAMP/$j.log 2>&1
  else timeout -k 10 $left setsid bash -c "$CMD" > $CAMP/$j.log 2>&1; fi  # every GPU: the job pins its own children
  echo "end $j rc=$? $(date +%s)" >> $CAMP/progress
done
echo "DONE $(date +%s)" >> $CAMP/progress
