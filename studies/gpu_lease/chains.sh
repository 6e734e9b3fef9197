#!/usr/bin/env bash
# One chain of commands per GPU, all detached together: bash studies/gpu_lease/chains.sh "0:cmd;cmd" "1:cmd" ...
# Copies the tree to $TREE first (a later call re-syncs the repository root under it), sources .gpu/env.sh, logs each
# command's start and end (rc, epoch s) in $CAMP/progress and writes DONE when every chain ended. Poll with fetch_parts.sh.
set -u
CAMP=${CAMP:-/tmp/camp}; TREE=${TREE:-/tmp/wbtree}; mkdir -p $CAMP
rm -rf $TREE && cp -r "$PWD" $TREE && cd $TREE   # later calls replace the synced tree; run from a copy
source .gpu/env.sh > $CAMP/env.log 2>&1
nvidia-smi --query-gpu=index,name,uuid,clocks.max.sm,power.limit --format=csv > $CAMP/gpus.csv
git rev-parse HEAD > $CAMP/sha 2>/dev/null
for chain in "$@"; do
  gpu=${chain%%:*}; cmds=${chain#*:}
  ( export CUDA_VISIBLE_DEVICES=$gpu; IFS=';'; for c in $cmds; do
      echo "start gpu$gpu $(date +%s) $c" >> $CAMP/progress
      bash -c "$c"; echo "end gpu$gpu rc=$? $(date +%s) $c" >> $CAMP/progress; done ) &
done
wait; echo "DONE $(date +%s)" >> $CAMP/progress
