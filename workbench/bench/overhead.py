"""Instrumentation overhead: ranges on/off x sync counter on/off, interleaved, on one real shape.

    python -m workbench.bench.overhead --model qwen3-0.6b --tokens 16384 --reps 5 --steps 4 --out DIR   # GPU
    python -m workbench.bench.overhead --smoke                                                           # CPU

Each rep runs every variant once (order rotated per rep), `--steps` timed steps each after one warmup; the
report gives the median step time of each variant, p20-p80, and its overhead over the all-off variant.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

VARIANTS = {  # name: (ranges, count_syncs)
    "off": (False, False),
    "ranges": (True, False),
    "counter": (False, True),
    "both": (True, True),
}


def _q(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="qwen3-0.6b")
    p.add_argument("--layers", type=int, default=None)
    p.add_argument("--tokens", type=int, default=16384)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--attn", default=None)
    p.add_argument("--experts", default=None)
    p.add_argument("--out", default=None)
    p.add_argument("--smoke", action="store_true", help="tiny CPU run (checks the script, not a result)")
    a = p.parse_args(argv)
    if a.smoke:
        a.model, a.tokens, a.reps, a.steps = "tiny-qwen3", 128, 2, 1

    from workbench.data import make_batches, to_device
    from workbench.harness import enable_checkpointing, make_optimizer, train_steps
    from workbench.instrument import Ranges, instrument_layers
    from workbench.models import build_model, resolve_device

    device = resolve_device("auto")
    model = build_model(a.model, layers=a.layers, attn=a.attn, device=device, experts_implementation=a.experts)
    enable_checkpointing(model)
    instrument_layers(model)
    opt = make_optimizer(model)
    batches = to_device(make_batches("lognormal:6.2:0.8:16", a.tokens, 2, model.config.vocab_size), device)
    train_steps(model, batches, steps=1, warmup=1, optimizer=opt, count_syncs=True)  # compile/heuristics warm-up
    step_ms: dict[str, list[float]] = {v: [] for v in VARIANTS}
    names = list(VARIANTS)
    for rep in range(a.reps):
        order = names[rep % len(names):] + names[:rep % len(names)]
        for v in order:
            ranges_on, count = VARIANTS[v]
            recs = train_steps(model, batches, steps=a.steps, warmup=1, optimizer=opt,
                               ranges=Ranges(nvtx=ranges_on, profiler=ranges_on), count_syncs=count)
            step_ms[v] += [r.step_ms for r in recs]
            print(f"rep {rep + 1}/{a.reps} {v}: {statistics.median(r.step_ms for r in recs):.2f} ms",
                  file=sys.stderr, flush=True)
    base = statistics.median(step_ms["off"])
    rows = []
    for v in names:
        med = statistics.median(step_ms[v])
        rows.append({"variant": v, "ranges": VARIANTS[v][0], "count_syncs": VARIANTS[v][1], "step_ms": med,
                     "step_ms_p20": _q(step_ms[v], 0.2), "step_ms_p80": _q(step_ms[v], 0.8), "n": len(step_ms[v]),
                     "overhead_pct": 100.0 * (med - base) / base})
    out = {"model": a.model, "layers": model.config.num_hidden_layers, "tokens": a.tokens, "device": str(device),
           "device_name": _device_name(device), "command": " ".join(["python -m workbench.bench.overhead"] +
                                                                    (argv if argv is not None else sys.argv[1:])),
           "rows": rows, "samples_ms": step_ms}
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "overhead.json"), "w") as f:
            json.dump(out, f, indent=1)
    print(f"{'variant':>8} {'step_ms':>9} {'p20':>9} {'p80':>9} {'n':>3} {'overhead':>9}")
    for r in rows:
        print(f"{r['variant']:>8} {r['step_ms']:9.2f} {r['step_ms_p20']:9.2f} {r['step_ms_p80']:9.2f} {r['n']:3d} "
              f"{r['overhead_pct']:8.2f}%")
    print(json.dumps({k: v for k, v in out.items() if k != "samples_ms"}))
    return 0


def _device_name(device) -> str:
    import torch
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


if __name__ == "__main__":
    sys.exit(main())
