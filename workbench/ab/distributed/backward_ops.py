"""The whole-weight expert gradient, counted: the aten ops of one step's backward by autograd node and tensor shape,
one process or FSDP2 (the anomaly, on the CPU; exact counts, no time).

    python -m workbench.ab.distributed.backward_ops --opt all --only all --device cpu --dtype bf16 \\
        --precision autocast --json OUT/one.json                                                      # one process
    torchrun --standalone --nproc-per-node 2 -m workbench.ab.distributed.backward_ops --opt all --only all \\
        --device cpu --dtype bf16 --precision autocast --json OUT/two.json                            # FSDP2, gloo

It takes `python -m workbench.ab`'s flags for what to build and runs each planned comparison's baseline arm: one
warm-up step, then one step under torch.profiler (CPU activity, shapes recorded) on this rank's first batch. Counted:
`aten::zero_`, `aten::fill_` and `aten::add_` inside `autograd::engine::evaluate_function: NODE`, by NODE and the
op's first input shape. transformers' eager experts index the (LoRA-folded) 3-D expert weight once per expert hit
(`self.gate_up_proj[expert_idx]`, `self.down_proj[expert_idx]`); each index back-propagates as `SelectBackward0`: a
zero-filled gradient the size of ALL experts (zero_), the expert's slice copied in, and an add into the sum of the
others (add_, E_hit - 1 per weight): the fill + add kernels of the GPU traces. Also counted: how many LoRA parameters
got a gradient. Rank 0 writes --json (and the last stdout line)."""
from __future__ import annotations

import collections
import sys

TOOL = "python -m workbench.ab.distributed.backward_ops"
OPS = ("aten::zero_", "aten::fill_", "aten::add_")
NODE_PREFIX = "autograd::engine::evaluate_function: "


def build_parser():
    from workbench.cli import parser
    p = parser("workbench.ab.distributed.backward_ops", __doc__)
    p.add_argument("--json", default=None, help="write the result here (rank 0), besides stdout's last line")
    return p


def count_backward_ops(events, ops=OPS) -> dict:
    """{"op|node|shape": n} over torch.profiler's `events()`: each op of `ops` under an autograd node (its nearest
    `evaluate_function` ancestor), by the node's name and the op's first input shape."""
    out = collections.Counter()
    for e in events:
        if e.name not in ops:
            continue
        par = e.cpu_parent
        while par is not None and not par.name.startswith(NODE_PREFIX):
            par = par.cpu_parent
        if par is None:
            continue
        shape = tuple(e.input_shapes[0]) if e.input_shapes else ()
        out[f"{e.name}|{par.name[len(NODE_PREFIX):]}|{list(shape)}"] += 1
    return dict(sorted(out.items()))


def select_backward(counts: dict) -> dict:
    """{"shape": {"zero_": n, "add_": m}} of the SelectBackward0 ops of `count_backward_ops`'s result: per 3-D expert
    weight shape, the whole-weight zero fills and adds."""
    out: dict = {}
    for k, n in counts.items():
        op, node, shape = k.split("|")
        if node == "SelectBackward0" and op in ("aten::zero_", "aten::add_"):
            out.setdefault(shape, {"zero_": 0, "add_": 0})[op.split("::")[1]] += n
    return out


def profile_step(step) -> dict:
    """`count_backward_ops` of one call of `step()` under torch.profiler (CPU activity, shapes recorded)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        step()
    return count_backward_ops(prof.events())


def one(p, cmp) -> dict | None:
    from workbench.ab.arm import _free
    from workbench.ab.distributed.probe import baseline_spec
    from workbench.measure.equivalence import GradCapture
    from workbench.step.models import lora_parameters

    spec = baseline_spec(cmp)
    p.progress(f"[{cmp.name}] {spec.label}" + (f" x {p.world} ranks (FSDP2)" if p.ctx else " (one process)"))
    model = p.runner.build(cmp)
    try:
        batch = p.args.data.make_batches(cmp.tokens, model.config.vocab_size, seed=p.runner.data_seed())[0]
        cap = GradCapture(lora_parameters(model))

        def step():
            p.runner.run_arm_steps(model, [batch], spec, cmp, steps=1, warmup=0, optimizer=cap, reset=lambda: None)
        step()  # warm
        counts = profile_step(step)
        grads = cap.grads or {}
        layers = model.config.num_hidden_layers
    finally:
        del model
        _free(p.device)
    if not p.is_main:
        return None
    return {"name": cmp.name, "model": cmp.model, "layers": layers, "tokens": cmp.tokens, "arm": spec.label,
            "world_size": p.world, "rank": p.rank, "select_backward": select_backward(counts),
            "lora_grads": len(grads), "lora_grads_present": sum(g is not None for g in grads.values()),
            "backward_ops": counts}


def main(argv=None) -> int:
    from workbench.ab.distributed.probe import setup, write_json
    from workbench.measure.results import git_sha

    argv = list(sys.argv[1:] if argv is None else argv)
    p = setup(build_parser(), argv)
    try:
        results = [one(p, c) for c in p.comps]
        if p.is_main:
            import transformers
            prefix = f"torchrun --nproc-per-node {p.world} -m" if p.ctx is not None else "python -m"
            write_json(p.own.json, {"tool": TOOL, "command": f"{prefix} workbench.ab.distributed.backward_ops "
                                    + " ".join(argv), "git_sha": git_sha(), "transformers": transformers.__version__,
                                    "world_size": p.world, "comparisons": results})
        return 0
    finally:
        p.close()


if __name__ == "__main__":
    from workbench.ab.distributed.probe import run_rank_main
    raise SystemExit(run_rank_main(main))
