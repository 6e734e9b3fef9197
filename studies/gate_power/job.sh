#!/usr/bin/env bash
# GPU minutes: 1 + K + 2D processes (design 1: K=6, D=4, a 4-layer step, ~25-35 s each, about 7 minutes;
# design 2: K=8, D=4, a 12-layer 16k step, ~40-50 s each, about 13 minutes on one H200). Designs: README.md.
# The gate on a GPU: does it catch an injected slowdown of a stated size at its stated power, and fail same-commit
# re-runs at most at its stated rate? Every decision is made by `python -m workbench gate` itself. Plan, rule and the
# rates stated beforehand: studies/gate_power/README.md. Run from the repo root, detached, writing under $OUT:
#   OUT=$OUT nohup bash studies/gate_power/job.sh > $OUT/job.log 2>&1 &
# CPU check of the commands (tiny presets; the gate refuses a CPU baseline, so the decisions end "error: ... CPU"):
#   OUT=/tmp/gp SHAPE="--opt packing --headline --batches 1 --steps 2 --warmup 1 --reps 2" DECISIONS=1 bash studies/gate_power/job.sh
set -u
OUT=${OUT:?set OUT}
mkdir -p "$OUT"
# its run folders are processes of this design, not runs of their own (workbench/measure/results.py DESIGN_FILE)
echo "{\"job\": \"$0\", \"note\": \"each run folder below is one process of this job's design\"}" > $OUT/design.json
D=${DECISIONS:-4}                  # decisions of each kind (same-commit, injected)
K=${AA_PROCESSES:-6}               # same-commit A/A processes the run SD is bounded from
SEED=${SEED:-500}                  # the baseline's seed, and every A/A process's (the same batches: designs 1-2 used 510+k)
REG=${REGRESSION_PCT:-10}          # the stated regression the gate must catch, % of the gated arm's step
SHAPE=${SHAPE:-"--opt packing --headline --model qwen3-0.6b --layers 4 --tokens 4096 --batches 1 --steps 4 --warmup 2 --warmup-max 6 --reps 8"}
nvidia-smi --query-gpu=name,uuid --format=csv > "$OUT/gpu.csv" 2>/dev/null || echo "no nvidia-smi" > "$OUT/gpu.csv"
log() { echo "$(date +%s) $*" >> "$OUT/jobs.txt"; }
log "start: commit $(git rev-parse --short HEAD 2>/dev/null || cat .gpu/sha 2>/dev/null), D=$D, K=$K, regression $REG%, shape: $SHAPE"
python -m workbench.ab $SHAPE --seed $SEED --out "$OUT/baseline" > "$OUT/baseline.out" 2> "$OUT/baseline.err"; log "baseline rc=$?"
AA=""
for k in $(seq 1 "$K"); do
  python -m workbench.ab $SHAPE --aa --seed $SEED --out "$OUT/aa$k" > "$OUT/aa$k.out" 2> "$OUT/aa$k.err"; log "aa$k rc=$?"
  AA="$AA $OUT/aa$k"
done
# the injection, sized before any decision: N GEMMs of 4096 x 4096 (bf16) adding REG% of the baseline's gated-arm step
INJECT=$(python - "$OUT/baseline" "$REG" <<'PY'
import json, math, os, sys, torch
from workbench.step import inject
s = json.load(open(os.path.join(sys.argv[1], "summary.json")))
c = [c for c in s["comparisons"] if c["name"] == "packing"][0]
arm = c["baseline"]  # the arm the gate judges: the A/A processes' (`--aa` times the baseline arm)
step_ms = float(arm["step_ms_rep_geomean"] or arm["step_ms"])
dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
size, n_cal = 4096, 50
inject.extra_gemms(dev, f"5:{size}")  # warm the kernel
if dev.type == "cuda":
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize(); a.record(); inject.extra_gemms(dev, f"{n_cal}:{size}"); b.record(); torch.cuda.synchronize()
    per_ms = a.elapsed_time(b) / n_cal
else:
    per_ms = 1.0
n = max(1, math.ceil(float(sys.argv[2]) / 100 * step_ms / per_ms))
print(f"{n}:{size}")
print(f"step {step_ms:.2f} ms, one GEMM {per_ms:.4f} ms: {n} GEMMs add {100 * n * per_ms / step_ms:.1f}%", file=sys.stderr)
PY
2>> "$OUT/jobs.txt")
log "injection WORKBENCH_INJECT_GEMMS=$INJECT"
for i in $(seq 1 "$D"); do
  python -m workbench gate --baseline "$OUT/baseline" --aa $AA --regression-pct "$REG" --out "$OUT/same$i" \
    > "$OUT/same$i.out" 2> "$OUT/same$i.err"; log "same$i rc=$?"
  WORKBENCH_INJECT_GEMMS=$INJECT python -m workbench gate --baseline "$OUT/baseline" --aa $AA --regression-pct "$REG" \
    --out "$OUT/inj$i" > "$OUT/inj$i.out" 2> "$OUT/inj$i.err"; log "inj$i rc=$?"
done
# the tally: each decision's verdict line as the gate printed it (rc 0 pass, 1 fail, 2 refused / no verdict)
for f in "$OUT"/same*.out "$OUT"/inj*.out; do echo "$(basename "$f" .out): $(grep '^verdict: ' "$f" || tail -1 "${f%.out}.err")"; done > "$OUT/decisions.txt"
# the counts against the rules (studies/gate_power/README.md), from the verdict lines the gate printed ("verdict: fail
# ...", "verdict: pass ..."); a decision with neither (refused, rc 2, or crashed) is counted apart, never as a fail
for kind in same inj; do
  f=$(cat "$OUT"/$kind[0-9]*.out 2>/dev/null | grep -c '^verdict: fail'); p=$(cat "$OUT"/$kind[0-9]*.out 2>/dev/null | grep -c '^verdict: pass')
  echo "$kind: $f of $D failed, $p passed, $((D - f - p)) without a verdict (refused or crashed)"
done >> "$OUT/decisions.txt"
log "done"
