#!/usr/bin/env bash
# Design 4's 8 decisions again, over its own baseline and 6 A/A processes, after the re-run's argv was fixed (the first
# 8 re-runs exited 2 at `--checkpointing`, which workbench.ab did not accept). Waits for the lease's chain to end (the
# GPU to itself), then alternates same-commit and injected decisions, each into fixed_<kind><i>/.
G=${G:-/tmp/camp/gate}; INJECT=${INJECT:?the injection job.sh sized, e.g. 498:4096}
while ! grep -q DONE ${CAMP:-/tmp/camp}/progress 2>/dev/null; do sleep 2; done
AA=$(for k in 1 2 3 4 5 6; do echo -n " $G/aa$k"; done)
log() { echo "$(date +%s) $*" >> "$G/jobs.txt"; }
log "decide_again: commit $(git rev-parse --short HEAD 2>/dev/null || echo '(see COMMAND.txt)'), injection $INJECT"
for i in 1 2 3 4; do
  python -m workbench gate --baseline $G/baseline --aa $AA --regression-pct 30 --out $G/fixed_same$i \
    > $G/fixed_same$i.out 2> $G/fixed_same$i.err; log "fixed_same$i rc=$?"
  WORKBENCH_INJECT_GEMMS=$INJECT python -m workbench gate --baseline $G/baseline --aa $AA --regression-pct 30 \
    --out $G/fixed_inj$i > $G/fixed_inj$i.out 2> $G/fixed_inj$i.err; log "fixed_inj$i rc=$?"
done
log "decide_again done"
