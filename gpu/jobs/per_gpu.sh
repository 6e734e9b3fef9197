# Sourced by the jobs that run one sequence on every GPU of a host (moe_same_host.sh, moe_work.sh):
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
  echo "{\"job\": \"gpu/jobs/$1.sh\", \"note\": \"each run folder below is one process of this job's design\"}" > $OUT/design.json
}
