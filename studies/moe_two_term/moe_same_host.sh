#!/usr/bin/env bash
# Issue 39 (done-when 2 for MoE), written 2026-11-27 (7) before its run: MoE's untraced model on its two held-out shapes,
# its dose measured in the same lease on the same GPUs (packing's same-machine design, which confirmed llama-3.1-8b 8 L:
# profiles/2026-11-27_h100_same_machine). One host of NGPU GPUs (a 4- or 2-GPU kind, H100 or H200: the claim is for the
# host's GPUs, named in gpus.csv), every GPU running the same sequence on its own seed blocks, so each part's processes
# spread over the GPUs alike and a cut costs every part alike:
#   dose (D_A)  verdict A (V1)  verdict B (V1)  dose (D_B)  verdict A (V2)  verdict B (V2)  seeds (same, each)
#   dose:      python -m workbench.ab.dose --opt moe --model gpt-oss-20b --layers 4 --tokens 8192 --levels 3 --reps 2
#                --batches 1 --steps 1 --warmup 1 --warmup-max 4 --timing none --trace none --processes N --seed S --out ...
#              (the committed MoE dose's shape and protocol, untimed: profiles/2026-11-27_h100_dose_moe_rule)
#   verdict A: python -m workbench.ab --opt moe --model gpt-oss-20b --layers 8 --tokens 4096 --steps 1 --reps 4 --headline
#                --batches 1 --trace none --seed S --processes N --out ...        (verdicts.sh's moe_l8_4k)
#   verdict B: the same with --model qwen3-30b-a3b --layers 4 --tokens 8192                 (verdicts.sh's moe_q30_l4)
#   seeds:     gpt-oss-20b 4 L 8k, --steps 1 --reps 4 --headline --batches 1 --trace none, one process with
#              --process-seeds same --seed 900 and one with --process-seeds each --seed 910+g (studies/moe_two_term/process_seeds.sh's
#              question, now balanced over the GPUs instead of back to back on one: a GPU's effect enters both
#              variances alike, which costs the test power and removes the drift confound that script names)
# Seeds: dose 2000 + 100 g + k, A 3000 + 100 g + k, B 4000 + 100 g + k (k counts that part's processes on GPU g):
# all fresh. Defaults D_A=3 D_B=2 V1=2 V2=2: per GPU ~5 x 90 + 8 x 105 + 2 x 105 s = ~1500 s on an H100 (dose
# processes 83-88 s, verdict processes 99-112 s in profiles/2026-11-27_h100_dose_moe_rule and _verdicts_untraced);
# at NGPU = 4: 20 dose, 16 + 16 verdict, 4 + 4 seeds processes. Planned chance (plan.assurance over the 3-process
# pilots of profiles/2026-11-27_h100_verdicts_untraced, a new dose of 20, 16 verdict processes): confirmed 22%
# (gpt-oss-20b 8 L, pilot ratio 1.15) and 28% (qwen3-30b-a3b, 0.89), refuted 9% and 5%; one 2-GPU lease alone (10 dose,
# 8 + 8) 10% and 10%. MoE's process spread (15-21%) is the reason; an undecided outcome is reported as such. Read with
#   cp -r profiles/2026-11-27_h100_verdicts_untraced/moe_* /tmp/mp/; workbench verdicts /tmp/mp/moe_l8_4k /tmp/mp/moe_q30_l4 --dose profiles/2026-11-27_h100_dose_moe_rule --write
#   python -c "import json; from workbench.savings import plan; [print(s, plan.assurance({'comparison': 'moe', 'verdict': 'inconclusive', 'family_size': 1, **json.load(open(f'/tmp/mp/{s}/verdicts.json'))['comparisons'][0]['savings_model']}, 16, dose=20)) for s in ('moe_l8_4k', 'moe_q30_l4')]"
#
# The rule, fixed now: the untraced form, revision "2026-11-27 (7)" (workbench/savings/untraced.py, this commit): u's se
# over the dose's processes where the verdict ran on exactly the dose's GPUs (this design), else over machines; band
# [0.8, 1.25] at 90%, one comparison per folder. The seeds rule as process_seeds.sh wrote it: F = var(each) / var(same)
# of the log process-mean savings, one-sided, p < 0.05 reads "the seed drives the spread".
# Analysis (CPU, DIR = this job's $OUT copied into profiles/; studies/moe_two_term/moe_same_host_merge.sh DIR does the merges and runs
# the three commands below into DIR/dose_analysis.txt, verdicts.txt and seeds.txt):
#   bash studies/moe_two_term/moe_same_host_merge.sh DIR       # DIR/dose, DIR/moe_l8_4k, DIR/moe_q30_l4
#   python -m workbench.savings.dose_fit DIR/dose
#   workbench verdicts DIR/moe_l8_4k DIR/moe_q30_l4 --dose DIR/dose --write
#   python -c "import glob, math, statistics as st; from scipy import stats; from workbench.analysis.between_runs import folder_savings as f
#     v = {m: [math.log(x) for d in sorted(glob.glob('DIR/g*/seeds_' + m)) for x in f(d).get('moe', [])] for m in ('same', 'each')}
#     F = st.variance(v['each']) / st.variance(v['same']); print({m: (len(x), st.stdev(x)) for m, x in v.items()}, F, stats.f.sf(F, len(v['each']) - 1, len(v['same']) - 1))"
# Cut by the lease: the processes that ended are merged and judged; the cut is reported.
# A 2-GPU host (when no 4-GPU kind is lent): the same script gives half (10 dose, 8 + 8 verdict, 2 + 2 seeds processes);
# a second lease with SEED_OFFSET=50 (fresh seeds) adds as many, and `moe_same_host_merge.sh DIR DIR2` folds both
# leases' folders into DIR. The design then spans two hosts, the dose and the verdicts alike over the same GPUs (an H100
# pair and an H200 pair, if so they come: the claim is then for those four GPUs, named in each gpus.csv). One lease's
# seeds part is 2 + 2 processes, F on (1, 1) df: it is read only with the second lease's (4 + 4).
# CPU check (tiny presets on the CPU, 2 "GPUs", not a result; ~6 min):
#   CAMP=/tmp/camp CPU=1 NGPU=2 D_A=2 D_B=0 V1=2 V2=0 bash studies/moe_two_term/moe_same_host.sh && bash studies/moe_two_term/moe_same_host_merge.sh /tmp/camp/moe_host
# GPU smoke test of the plumbing (tiny presets on every GPU, ~2 min, not a result): TINY=1 D_A=1 D_B=0 V1=2 V2=0 ...
set -u
for v in ${V1:-2} ${V2:-2}; do  # --processes 1 runs in place, not as a campaign that processes_merge can fold
  [ "$v" -ne 1 ] || { echo "V1, V2: 0 or at least 2 verdict processes per GPU (1 runs in place)"; exit 2; }
done
. "$(dirname "$0")/per_gpu.sh"; per_gpu_setup moe_host  # OUT, PY, NGPU, gpus.csv
if [ -n "${CPU:-}${TINY:-}" ]; then  # TINY=1: the tiny presets on the GPUs (a smoke test of the plumbing, not a result)
  DEV=${CPU:+--device cpu}
  DOSE="--opt moe --model tiny-gpt-oss --layers 2 --tokens 256 $DEV"
  A="--opt moe --model tiny-gpt-oss --layers 1 --tokens 256 $DEV"; B="--opt moe --model tiny-qwen3-moe --layers 2 --tokens 256 $DEV"
  SEEDS="--opt moe --model tiny-gpt-oss --layers 1 --tokens 256 $DEV"
else
  DOSE="--opt moe --model gpt-oss-20b --layers 4 --tokens 8192"
  A="--opt moe --model gpt-oss-20b --layers 8 --tokens 4096"; B="--opt moe --model qwen3-30b-a3b --layers 4 --tokens 8192"
  SEEDS="--opt moe --model gpt-oss-20b --layers 4 --tokens 8192"
fi
DOSE_ARGS="--levels 3 --reps 2 --batches 1 --steps 1 --warmup 1 --warmup-max 4 --timing none --trace none"
V_ARGS="--steps 1 --reps 4 --headline --batches 1 --trace none"

gpu_loop() {  # g: this GPU's whole sequence, each part a --processes campaign of its own seed block
  local g=$1 d=$OUT/g$1 nd=0 na=0 nb=0
  mkdir -p $d
  log() { echo "$(date +%s) g$g $*" >> $OUT/jobs.txt; }
  part() {  # name count base_seed used_so_far module args...
    local name=$1 n=$2 base=$3 used=$4 mod=$5; shift 5
    [ "$n" -ge 1 ] || return 0
    local seed=$((base + 100 * g + used + ${SEED_OFFSET:-0}))
    log "start $name n=$n seed=$seed"
    CUDA_VISIBLE_DEVICES=$g $PY -m $mod "$@" --processes $n --seed $seed --out $d/$name > $d/$name.out 2> $d/$name.err
    log "end $name rc=$?"
  }
  part dose_1 ${D_A:-3} 2000 $nd workbench.ab.dose $DOSE $DOSE_ARGS; nd=$((nd + ${D_A:-3}))
  part moe_l8_4k_1 ${V1:-2} 3000 $na workbench.ab $A $V_ARGS; na=$((na + ${V1:-2}))
  part moe_q30_l4_1 ${V1:-2} 4000 $nb workbench.ab $B $V_ARGS; nb=$((nb + ${V1:-2}))
  part dose_2 ${D_B:-2} 2000 $nd workbench.ab.dose $DOSE $DOSE_ARGS
  part moe_l8_4k_2 ${V2:-2} 3000 $na workbench.ab $A $V_ARGS
  part moe_q30_l4_2 ${V2:-2} 4000 $nb workbench.ab $B $V_ARGS
  log "start seeds_same"
  CUDA_VISIBLE_DEVICES=$g $PY -m workbench.ab $SEEDS $V_ARGS --processes 1 --process-seeds same --seed 900 \
    --out $d/seeds_same > $d/seeds_same.out 2> $d/seeds_same.err; log "end seeds_same rc=$?"
  log "start seeds_each"
  CUDA_VISIBLE_DEVICES=$g $PY -m workbench.ab $SEEDS $V_ARGS --processes 1 --process-seeds each --seed $((910 + g + ${SEED_OFFSET:-0})) \
    --out $d/seeds_each > $d/seeds_each.out 2> $d/seeds_each.err; log "end seeds_each rc=$?"
  log "done"
}
for g in $(seq 0 $((NGPU - 1))); do gpu_loop $g & done
wait
echo "$(date +%s) all GPUs done" >> $OUT/jobs.txt
