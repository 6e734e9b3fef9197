#!/usr/bin/env bash
# studies/gpu_lease/lease_plan.sh's poll: wait up to $1 seconds for the lease plan's DONE, printing progress; then pack /tmp/camp (no traces) into $OUT/camp.tgz.
CAMP=${CAMP:-/tmp/camp}; T=$(( $(date +%s) + ${1:-500} ))
while [ $(date +%s) -lt $T ] && ! grep -q '^DONE' $CAMP/progress 2>/dev/null; do sleep 10; done
cat $CAMP/progress 2>/dev/null; date +%s
for f in $CAMP/*.log; do echo "== $f"; tail -n 3 "$f"; done 2>/dev/null
find $CAMP -name jobs.txt -exec tail -n 4 {} \; 2>/dev/null
nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader 2>/dev/null
[ -n "${OUT:-}" ] && tar czf $OUT/camp.tgz --exclude='*.nsys-rep' --exclude='*.qdstrm' --exclude='*.sqlite' -C $(dirname $CAMP) $(basename $CAMP) && ls -la $OUT/camp.tgz
