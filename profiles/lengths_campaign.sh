#!/usr/bin/env bash
# Issue 25's sensitivity campaign: each optimization's headline comparison (baseline and optimized arm only, traced
# for the savings-model verdict) on three document-length distributions: the synthetic default and two real ones
# from data/ (data:chat, 107 to 478 short documents per 16k batch; data:code, 1 to 12 long ones).
#
#   bash profiles/lengths_campaign.sh OUT_DIR          # BUDGET_MIN=12 by default
#   DISTS='code=data:code chat=data:chat' OPTS='packing moe' bash profiles/lengths_campaign.sh OUT_DIR   # a subset, in order
#
# Writes OUT_DIR/<distribution>/<opt>/ (one ab run folder each) and OUT_DIR/jobs.txt (start / end / rc per job).
# Resumable: a run folder whose meta.json says "complete" is skipped, an unfinished one is rerun with --force.
# BUDGET_MIN: no job starts once the elapsed minutes plus its estimate would pass the budget; rerun the same command
# to go on. Estimates (H100, seconds per traced headline run, from profiles/*/logs/jobs.txt and the runs' wall_s:
# offload 4 arms traced 264 s -> 2 arms ~150 s; packing ~100 s; moe ~270 s), so all 9 runs take about 26 minutes
# on an H100 (3 calls with the default budget), more where a distribution packs many documents per batch.
# Afterwards: python -c "from workbench import lengths_sensitivity as ls; print(ls.table(ls.run_folders('OUT_DIR')))"
set -u
if [ $# -ne 1 ] || [ -z "$1" ]; then
    echo "usage: bash profiles/lengths_campaign.sh OUT_DIR (env BUDGET_MIN, default 12)" >&2
    exit 2
fi
OUT=$1
BUDGET_MIN=${BUDGET_MIN:-12}
case $BUDGET_MIN in ''|*[!0-9]*) echo "BUDGET_MIN must be a whole number of minutes, got '$BUDGET_MIN'" >&2; exit 2;; esac
PY=${PYTHON:-python3}
mkdir -p "$OUT" || exit 2
J=$OUT/jobs.txt
DISTS=${DISTS:-"synthetic=lognormal:5.5:0.8:16 chat=data:chat code=data:code"}  # TAG=SPEC ..., run in this order
OPTS=${OPTS:-"packing offload moe"}
est_s() { case $1 in packing) echo 100;; offload) echo 150;; moe) echo 270;; *) echo 200;; esac; }
T0=$(date +%s)
total=0; done_n=0
for _ in $DISTS; do for _ in $OPTS; do total=$((total + 1)); done; done
complete() { [ -f "$1/meta.json" ] && grep -q '"status": *"complete"' "$1/meta.json"; }
log() { echo "$(date +%T) $*" | tee -a "$J"; }

for d in $DISTS; do
    tag=${d%%=*}; spec=${d#*=}
    for opt in $OPTS; do
        dir=$OUT/$tag/$opt
        if complete "$dir"; then
            done_n=$((done_n + 1)); log "[$done_n/$total] skip $tag/$opt: complete already"; continue
        fi
        elapsed=$(( $(date +%s) - T0 )); e=$(est_s "$opt")
        if [ $((elapsed + e)) -gt $((BUDGET_MIN * 60)) ]; then
            log "budget: $done_n of $total runs complete after ${elapsed}s; $tag/$opt (~${e}s) would pass BUDGET_MIN=$BUDGET_MIN; rerun the same command to go on"
            exit 0
        fi
        force=(); [ -d "$dir" ] && force=(--force)
        mkdir -p "$OUT/$tag"
        log "[$((done_n + 1))/$total] start $tag/$opt (~${e}s, ${elapsed}s elapsed): $PY -m workbench.ab --opt $opt --headline --trace torch --lengths $spec --out $dir ${force[*]}"
        $PY -m workbench.ab --opt "$opt" --headline --trace torch --lengths "$spec" --out "$dir" "${force[@]}" \
            > "$OUT/$tag.$opt.out" 2> "$OUT/$tag.$opt.err"
        rc=$?
        if complete "$dir"; then done_n=$((done_n + 1)); fi
        log "[$done_n/$total] end $tag/$opt rc $rc in $(( $(date +%s) - T0 - elapsed ))s (log: $OUT/$tag.$opt.out / .err)"
    done
done
log "ALL DONE: $done_n of $total runs complete"
$PY - "$OUT" <<'PY'
import sys
from workbench.analysis import lengths as ls
t = ls.table(ls.run_folders(sys.argv[1]))
cols = ["lengths", "opt", "docs_per_batch_mean", "docs_per_batch_min", "docs_per_batch_max", "speedup", "ci95_lo",
        "ci95_hi", "verdict", "savings_verdict", "savings_ratio"]
print(t[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
PY
