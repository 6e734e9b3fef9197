"""One arm's step, timed and then traced, written as its time per kernel class (`workbench.traces.class_totals`):
the small summary that lets two set-ups' steps be read against each other class by class without their traces.

    python -m workbench.ab.distributed.trace_classes --opt all --only all --json OUT/one.json              # 1 GPU
    torchrun --standalone --nproc-per-node 2 -m workbench.ab.distributed.trace_classes --opt all --only all \\
        --json OUT/two.json                                                                               # FSDP2
    python -m workbench.ab.distributed.trace_classes --opt packing --device cpu --json OUT/cpu.json        # CPU check

It takes `python -m workbench.ab`'s flags for what to build (the GPU defaults on a GPU) and runs each planned
comparison's baseline arm (`--arm optimized` for the optimized one) on this process's batches (under torchrun, every
rank its own, FSDP2 as in the timed runs), with no engine: --warmup steps, then --steps untimed-instrument steps
(their wall time, the max across ranks per step under torchrun: the data-parallel step), then a torch.profiler pass
of 1 + --steps steps (the first discarded by the schedule). Every rank is profiled (the profiler's host cost falls on
all alike); rank 0 reads its own trace into `class_totals` and deletes it unless --keep-traces.
Writes (rank 0) --json and prints it as the last stdout line: per comparison the arm, shape, world size, the step
times and `classes`.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile

from workbench.errors import WorkbenchError

TOOL = "python -m workbench.ab.distributed.trace_classes"


def build_parser():
    from workbench.cli import parser
    p = parser("workbench.ab.distributed.trace_classes", __doc__)
    p.add_argument("--json", default=None, help="write the result here (rank 0), besides stdout's last line")
    p.add_argument("--arm", default="baseline", choices=("baseline", "optimized"), help="which arm of each comparison")
    p.add_argument("--trace-dir", default=None, help="where the traces go (default: a temporary folder)")
    p.add_argument("--keep-traces", action="store_true", help="keep the Chrome traces (deleted by default)")
    return p


def one(p, cmp, trace_dir: str) -> dict | None:
    from workbench.ab.arm import _free
    from workbench.ab.distributed.probe import baseline_spec
    from workbench.measure.results import safe_name
    from workbench.opts import unsupported_reason
    from workbench.step.models import lora_resetter
    from workbench.traces import from_torch_trace
    from workbench.traces.capture import torch_profile
    from workbench.traces.class_totals import class_totals

    a, runner, device = p.args, p.runner, p.device
    label = cmp.baseline if p.own.arm == "baseline" else cmp.optimized
    if label is None:
        raise WorkbenchError(f"{cmp.name}: no {p.own.arm} arm")
    spec = baseline_spec(cmp) if p.own.arm == "baseline" else next(s for s in cmp.arms if s.label == label)
    p.progress(f"[{cmp.name}] building {cmp.model}" + (f" x {p.world} ranks (FSDP2)" if p.ctx else ""))
    model = runner.build(cmp)
    try:
        why = unsupported_reason(model, spec.arms, device, runner.options(cmp))
        if why:
            raise WorkbenchError(f"{cmp.name}: arm {spec.label} cannot run here: {why}")
        batches = a.data.make_batches(cmp.tokens, model.config.vocab_size, seed=runner.data_seed())
        reset = lora_resetter(model)
        p.progress(f"[{cmp.name}] {spec.label}: {a.warmup} warmup + {a.steps} steps")
        recs = runner.run_arm_steps(model, batches, spec, cmp, steps=a.steps, warmup=a.warmup, reset=reset)
        own_ms = [float(r.step_ms) for r in recs]
        dp_ms = [p.ctx.all_max(x) for x in own_ms] if p.ctx is not None else own_ms
        path = os.path.join(trace_dir, f"{safe_name(cmp.name)}.{safe_name(spec.label)}.rank{p.rank}.pt.trace.json.gz")
        p.progress(f"[{cmp.name}] {spec.label}: torch.profiler pass (1 + {a.steps} steps) -> {path}")

        def run_steps(step_fn):
            runner.run_arm_steps(model, batches, spec, cmp, steps=1 + a.steps, warmup=0,
                                 on_step=lambda r: step_fn(), reset=reset)
        torch_profile(run_steps, path, device=device, warmup=1, steps=a.steps)
        layers = model.config.num_hidden_layers
    finally:
        del model
        _free(device)
    if not p.is_main:
        return None
    p.progress(f"[{cmp.name}] reading {path}")
    classes = class_totals(from_torch_trace(path))
    return {"name": cmp.name, "opt": cmp.opt, "model": cmp.model, "layers": layers, "tokens": cmp.tokens,
            "arm": spec.label, "world_size": p.world, "rank": p.rank, "precision": a.step.precision,
            "warmup": a.warmup, "steps": a.steps, "step_ms": dp_ms, "rank0_step_ms": own_ms,
            "traced_step_ms": classes["step_ms"], "classes": classes}


def main(argv=None) -> int:
    from workbench.ab.distributed.probe import setup, write_json
    from workbench.measure.results import device_info, git_sha

    argv = list(sys.argv[1:] if argv is None else argv)
    p = setup(build_parser(), argv)
    own_dir = p.own.trace_dir is None
    trace_dir = p.own.trace_dir or tempfile.mkdtemp(prefix="wb-trace-classes-")
    try:
        results = [one(p, c, trace_dir) for c in p.comps]
        if p.is_main:
            for r in results:
                top = sorted(r["classes"]["components_ms"].items(), key=lambda kv: -kv[1])[:4]
                p.progress(f"[{r['name']}] {r['arm']} x {r['world_size']}: step {r['step_ms']} ms, traced "
                           f"{r['traced_step_ms']:.1f} ms: " + ", ".join(f"{c} {ms:.1f}" for c, ms in top))
            prefix = f"torchrun --nproc-per-node {p.world} -m" if p.ctx is not None else "python -m"
            write_json(p.own.json, {"tool": TOOL, "command": f"{prefix} workbench.ab.distributed.trace_classes "
                                    + " ".join(argv), "git_sha": git_sha(),
                                    "device": device_info(p.device).get("name") or str(p.device),
                                    "world_size": p.world, "comparisons": results})
        return 0
    finally:
        if not p.own.keep_traces:
            if own_dir:
                shutil.rmtree(trace_dir, ignore_errors=True)
            else:
                for f in os.listdir(trace_dir):
                    if f.endswith(f".rank{p.rank}.pt.trace.json.gz"):
                        os.remove(os.path.join(trace_dir, f))
        p.close()


if __name__ == "__main__":
    from workbench.ab.distributed.probe import run_rank_main
    raise SystemExit(run_rank_main(main))
