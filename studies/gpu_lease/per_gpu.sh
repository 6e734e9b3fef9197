# Sourced by the jobs that run one sequence on every GPU of a host (moe_same_host.sh, moe_work.sh, moe_backward.sh):
#   per_gpu_setup NAME   -> OUT=$CAMP/NAME made; PY (python unless set); NGPU (every GPU nvidia-smi lists, unless set;
#                           none: one line and exit 2); $OUT/gpus.csv (index, name, UUID of each GPU); $OUT/design.json
per_gpu_setup() {
  OUT=$CAMP/$1
  mkdir -p $OUT
  PY=${PY:-python}
  NGPU=${NGPU:-$(nvidia-smi -L 2>/dev/null | wc -l)}
  [ "$NGPU" -ge 1 ] || { echo "no GPU (set NGPU with CPU=1 for the CPU check)"; exit 2; }
  nvidia-smi --query-gpu=index,name,uuid --format=csv > $OUT/gpus.csv 2>/dev/null || echo "no nvidia-smi" > $OUT/gpus.csv
  # its runs are processes of this design, not runs of their own (workbench/measure/results.py DESIGN_FILE)
  echo "{\"job\": \"$0\", \"note\": \"each run folder below is one process of this job's design\"}" > $OUT/design.json
}
# per_gpu_shape MODEL LAYERS TOKENS [EXTRA...]: a run's shape arguments, what a job's `args NAME` echoes; with CPU=1 the
#   tiny preset of MODEL's family, 1 layer, a sixteenth of the tokens, on the CPU (the jobs' CPU check, not a result)
per_gpu_shape() {
  local m=$1 l=$2 t=$3; shift 3
  if [ -n "${CPU:-}" ]; then
    [ $m = gpt-oss-20b ] && m=tiny-gpt-oss || m=tiny-qwen3-moe
    echo "--model $m --layers 1 --tokens $((t / 16)) --device cpu $*"
  else
    echo "--model $m --layers $l --tokens $t $*"
  fi
}
# per_gpu_run G LABEL NAME SEED: one `python -m workbench.ab --opt moe` process on GPU G (the job's `args NAME`, then its
#   STEP_ARGS) into $OUT/gG/LABEL (.out, .err beside), its start and end in $OUT/jobs.txt
per_gpu_run() {
  local g=$1 label=$2 name=$3 seed=$4 d=$OUT/g$1
  echo "$(date +%s) g$g start $label seed=$seed" >> $OUT/jobs.txt
  CUDA_VISIBLE_DEVICES=$g $PY -m workbench.ab --opt moe $(args $name) $STEP_ARGS \
    --trace none --seed $seed --out $d/$label > $d/$label.out 2> $d/$label.err
  echo "$(date +%s) g$g end $label rc=$?" >> $OUT/jobs.txt
}
# per_gpu_all FN: `FN G` on every GPU at once (its sequence of per_gpu_run), each GPU's end and then all GPUs' in jobs.txt
per_gpu_all() {
  local g
  for g in $(seq 0 $((NGPU - 1))); do
    ( mkdir -p $OUT/g$g; $1 $g; echo "$(date +%s) g$g done" >> $OUT/jobs.txt ) &
  done
  wait
  echo "$(date +%s) all GPUs done" >> $OUT/jobs.txt
}
