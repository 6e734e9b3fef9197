#!/usr/bin/env bash
# CPU evidence for issue 41's anomaly (2 shared cores: about 1.5 minutes): the backward's whole-weight expert
# gradient ops (SelectBackward0 zero_ / add_) and the LoRA gradients present, tiny-qwen3-moe, the `all` baseline arm
# (rebuild+sync_reload+eager), bf16 under autocast: one process; FSDP2 x 2 (gloo) as before the fix; FSDP2 x 2 fixed.
# Needs the GPU image's transformers (5.17) first on the path: TF517=DIR, a `pip install --no-deps --target DIR
# transformers==5.17.0 "huggingface_hub>=1.5,<2" httpx` (with 5.24 the checkpoint call is already hook-free).
#   TF517=/tmp/t517 bash profiles/2026-11-26_h100x4_fourgpu/anomaly_ops.sh   -> anomaly_cpu_ops.json
set -eu
D=profiles/2026-11-26_h100x4_fourgpu
PY="${PYTHON:-python3}"
export PYTHONPATH="$PWD:${TF517:?TF517=a folder holding transformers 5.17}" OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=lo
A="--opt all --only all --device cpu --dtype bf16 --precision autocast"
T=$(mktemp -d)
$PY -m workbench.ab.distributed.backward_ops $A --json "$T/one.json" > /dev/null 2>&1
$PY -m torch.distributed.run --standalone --nproc-per-node 2 $D/anomaly_ops_prefix.py $A --json "$T/two_prefix.json" \
    > /dev/null 2>&1
$PY -m torch.distributed.run --standalone --nproc-per-node 2 -m workbench.ab.distributed.backward_ops $A \
    --json "$T/two_fixed.json" > /dev/null 2>&1
$PY - "$T" "$D/anomaly_cpu_ops.json" <<'PY'
import json, sys
t, out = sys.argv[1:]
runs = {}
for k in ("one", "two_prefix", "two_fixed"):
    d = json.load(open(f"{t}/{k}.json"))
    c = d["comparisons"][0]
    runs[k] = {"command": d["command"], "git_sha": d["git_sha"], "transformers": d["transformers"],
               **{x: c[x] for x in ("model", "layers", "tokens", "arm", "world_size", "select_backward", "lora_grads",
                                    "lora_grads_present")}}
runs["two_prefix"]["command"] += "   (the offload checkpoint as before the fix: anomaly_ops_prefix.py)"
json.dump(runs, open(out, "w"), indent=1)
print(json.dumps(runs, indent=1))
PY
rm -rf "$T"
