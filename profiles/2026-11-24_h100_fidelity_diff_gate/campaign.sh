#!/usr/bin/env bash
# One H100 campaign (2026-11-24): issue 21 (fidelity on the two shapes) and issue 23 (one real diff, one gate
# detection). Runs from a git-archive copy in /tmp/wb; writes logs and small outputs into $R, a tarball at the end.
set -u
R=/tmp/wb/campaign; mkdir -p $R/logs $R/runs
J=$R/logs/jobs.txt
job() { local name=$1; shift; echo "$(date +%T) start $name: $*" >> $J;
        "$@" > $R/logs/$name.out 2> $R/logs/$name.err; echo "$(date +%T) end $name rc $?" >> $J; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $R/logs/gpu.txt 2>&1
python3 -c "import torch,transformers,peft;print(torch.__version__,transformers.__version__,peft.__version__)" > $R/logs/versions.txt 2>&1
# issue 23: a baseline (the offload comparison, llama-3.1-8b 8 layers: the quietest on the H200, rep SD 0.0%), the same under fp32-adapters, their diff
job B   python3 -m workbench.ab --opt offload --trace torch --out $R/runs/B
job P32 python3 -m workbench.ab --opt offload --trace torch --precision fp32-adapters --out $R/runs/P32
job diff_component python3 -m workbench.diff $R/runs/P32 $R/runs/B
job diff_layer     python3 -m workbench.diff $R/runs/P32 $R/runs/B --by layer
# issue 21: the harness against a real Trainer step, both shapes
job fid_llama python3 -m workbench.fidelity --model llama-3.1-8b --layers 8 --tokens 16384 --out $R/runs/fid_llama
job fid_qwen3moe python3 -m workbench.fidelity --model qwen3-30b-a3b --layers 8 --tokens 8192 --out $R/runs/fid_qwen3moe
# issue 23: the gate. An A/A run for its tolerance, a gate with nothing injected, then one with a 2% slowdown
job AA python3 -m workbench.ab --opt offload --aa --out $R/runs/AA
job gate_clean python3 -m workbench.gate --baseline $R/runs/B --aa $R/runs/AA --budget-s 300 --out $R/runs/G0
N=$(python3 - <<PY
import json, torch, time
s = json.load(open("$R/runs/B/summary.json"))
c = [c for c in s["comparisons"] if (c.get("optimized") or {}).get("arm")][0]
step_ms = float(c["optimized"]["step_ms"])
a = torch.ones(4096, 4096, device="cuda", dtype=torch.bfloat16)
for _ in range(20): a = torch.mm(a, a) * (1 / 4096)
torch.cuda.synchronize(); t = time.perf_counter()
for _ in range(200): a = torch.mm(a, a) * (1 / 4096)
torch.cuda.synchronize(); per = (time.perf_counter() - t) / 200 * 1e3
print(max(1, round(0.02 * step_ms / per)))
PY
)
echo "inject N=$N x 4096^3 bf16 (2% of the baseline run's optimized step)" >> $J
WORKBENCH_INJECT_GEMMS=$N:4096 job gate_injected python3 -m workbench.gate --baseline $R/runs/B --aa $R/runs/AA --budget-s 300 --out $R/runs/G1
echo "$(date +%T) ALL DONE" >> $J
# bring back: everything but raw traces (events files kept)
cd /tmp/wb && tar --exclude='*.json.gz' --exclude='*.pt.trace.json' -czf /tmp/wb/campaign.tgz campaign
