#!/usr/bin/env bash
# A short poll of studies/gpu_lease/chains.sh: sleep $1 s (keep it under the call limit, and call again at once: the
# machine goes back after 30 s with no call, and takes every detached job with it), print the progress, then copy each
# finished part named in $PARTS (a folder under $CAMP and its .log) into $OUT as its own .tgz, without the Kineto JSON
# (what a call brings back is size-limited; the .events.parquet stay). A part already fetched is not packed again.
#   PARTS="gate main_budget" bash studies/gpu_lease/fetch_parts.sh 240
C=${CAMP:-/tmp/camp}; sleep ${1:-200}; tail -4 $C/progress 2>/dev/null | cut -c1-80
for f in $C/*.log; do echo "== $f: $(tail -c 200 "$f" | tail -1)"; done 2>/dev/null
for p in ${PARTS:-}; do
  [ -e "$OUT/$p.tgz" ] || tar czf "$OUT/$p.tgz" --exclude='*.pt.trace.json.gz' --exclude='*.nsys-rep' -C $C $p $(ls $C/$p.log 2>/dev/null | xargs -r -n1 basename) 2>/dev/null
done
ls -la $OUT
