"""Does FSDP2 compute the one-process function at the step's precision (bf16 under autocast)? The check the timed
distributed runs make in fp32 only (`DistRunner.check_against_single`), here at the precision they time.

    torchrun --standalone --nproc-per-node 4 -m workbench.ab.distributed.equiv_bf16 --opt packing --json OUT.json
    torchrun --standalone --nproc-per-node 2 -m workbench.ab.distributed.equiv_bf16 --opt packing --device cpu \\
        --model tiny-llama --tokens 64 --dtype bf16 --precision autocast --json OUT.json      # CPU, gloo (the test)

It takes `python -m workbench.ab`'s flags for what to build (--opt, --only, --model, --layers, --tokens, --attn,
--dtype, --precision, --seed, --lora-rank, ...; the GPU defaults on a GPU) and checks the baseline arm of every
planned comparison, on the first batch of each rank (rank r: seed + r * DATA_SEED_STRIDE, as in the timed runs):

1. sharded: the model under FSDP2 (`DistRunner.build`), one step of the arm at the step's precision; the LoRA
   gradients after FSDP2's reduce-scatter (averaged over ranks), gathered whole, and the mean loss;
2. one process: every rank builds the unsharded model (same seed, same weights) and runs its own batch at the step's
   precision, then in fp32 (`equivalence.Upcast`, the fp32 reference's precision and options); the per-batch
   gradients are summed over ranks (the gloo control group) and divided by N: one process with gradient
   accumulation over the N batches (loss / N each), computed on N devices at once (the same kernels on the same
   batch give the same per-batch gradient on any of them);
3. the verdict, `equivalence.judge_sharded` (criterion and tolerance fixed there, SHARDED_FACTOR), and its negative
   control in the same run: the last rank judges the sharded gradient with its own batch's contribution taken out
   (G - g_r / N, the loss likewise), which must fail.

Rank 0 writes the JSON (`--json`, and the last stdout line): per comparison the verdict, the worst tensors, the
negative control; `equivalent` overall. Exit status 0 when every comparison is equivalent and every negative control
failed, 1 otherwise, 2 for bad input. Without torchrun it runs as one rank (the sharded run is then one process too).
"""
from __future__ import annotations

import sys

import torch

from workbench.errors import WorkbenchError

TOOL = "python -m workbench.ab.distributed.equiv_bf16"


def build_parser():
    from workbench.cli import parser
    p = parser("workbench.ab.distributed.equiv_bf16", __doc__)
    p.add_argument("--json", default=None, help="write the verdict here (rank 0), besides stdout's last line")
    return p


def _cpu_grads(grads: dict) -> dict:
    return {n: (None if g is None else g.detach().float().cpu()) for n, g in grads.items()}


def _one_step(p, model, batch, spec, cmp, *, options=None, precision=None) -> dict:
    """{"loss", "grads"} of one step of `spec` on `batch` in this process (no collective: `Runner.run_arm_steps`)."""
    from workbench.ab.runner import Runner
    from workbench.measure.equivalence import GradCapture
    from workbench.step.models import lora_parameters

    cap = GradCapture(lora_parameters(model))
    recs = Runner.run_arm_steps(p.runner, model, [batch], spec, cmp, steps=1, warmup=0, optimizer=cap,
                                reset=lambda: None, options=options, precision=precision)
    return {"loss": float(recs[0].loss), "grads": _cpu_grads(cap.grads or {})}


def _sum_over_ranks(p, res: dict, names: list, shapes: dict) -> dict:
    """The mean over ranks of every rank's {"loss", "grads"} (a missing gradient counts as zeros; None when no rank
    has one), on every rank."""
    import torch.distributed as dist

    if p.ctx is None:
        return res
    out = {}
    for n in names:  # the same order on every rank
        g = res["grads"].get(n)
        has = torch.tensor([0.0 if g is None else 1.0], dtype=torch.float64)
        t = torch.zeros(shapes[n], dtype=torch.float32) if g is None else g.clone()
        with p.ctx.guard():
            dist.all_reduce(t, op=dist.ReduceOp.SUM, group=p.ctx.control)
            dist.all_reduce(has, op=dist.ReduceOp.SUM, group=p.ctx.control)
        out[n] = None if has.item() == 0 else t / p.world
    return {"loss": p.ctx.all_mean(res["loss"]), "grads": out}


def check(p, cmp) -> dict:
    """The check of `cmp`'s baseline arm (module docstring); the verdict on rank 0, None elsewhere."""
    from workbench.ab.arm import _free
    from workbench.ab.distributed.probe import baseline_spec, ran_attention
    from workbench.measure import equivalence
    from workbench.opts import unsupported_reason
    from workbench.step import precision_mode as _prec
    from workbench.step.models import lora_parameters

    a, runner, device = p.args, p.runner, p.device
    spec = baseline_spec(cmp)
    p.progress(f"[{cmp.name}] FSDP2 x {p.world} ranks: one step of {spec.label}")
    model = runner.build(cmp)
    try:
        why = unsupported_reason(model, spec.arms, device, runner.options(cmp))
        if why:
            raise WorkbenchError(f"{cmp.name}: the baseline arm {spec.label} cannot run here: {why}")
        layers, vocab = model.config.num_hidden_layers, model.config.vocab_size
        batch = a.data.make_batches(cmp.tokens, vocab, seed=runner.data_seed())[0]
        ran_attn = ran_attention(runner, model, cmp)
        dtype = _prec.compute_dtype(model, a.step.precision)
        cap = equivalence.GradCapture(lora_parameters(model))
        # DistRunner.run_arm_steps: the gradients gathered whole (averaged over ranks by FSDP2), the loss averaged
        recs = runner.run_arm_steps(model, [batch], spec, cmp, steps=1, warmup=0, optimizer=cap, reset=lambda: None)
        sharded = {"loss": float(recs[0].loss), "grads": _cpu_grads(cap.grads or {})}
    finally:
        del model
        _free(device)
    p.progress(f"[{cmp.name}] one process: the unsharded model on every rank, its own batch, at "
               f"{a.step.precision} and in fp32")
    plain = runner.build_unsharded(cmp) if p.ctx is not None else runner.build(cmp)
    try:
        shapes = {n: tuple(q.shape) for n, q in lora_parameters(plain)}
        names = list(shapes)  # lora_parameters' order: the same on every rank
        own = _one_step(p, plain, batch, spec, cmp)
        ref_opts = runner.reference_options(cmp, ran_attn)
        own32 = equivalence.reference_fp32(  # upcast; where fp32 does not fit, over the batch's documents in chunks
            plain, lambda b: _one_step(p, plain, b, spec, cmp, options=ref_opts,
                                       precision=equivalence.REFERENCE_PRECISION), batch, p.progress, device)
    finally:
        del plain
        _free(device)
    one = _sum_over_ranks(p, own, names, shapes)
    one32 = _sum_over_ranks(p, own32, names, shapes)
    norms = {n: (0.0 if g is None else float(torch.linalg.vector_norm(g))) for n, g in own["grads"].items()}
    # the negative control, on the last rank: the sharded result with this rank's batch taken out
    control = None
    if p.rank == p.world - 1 and p.world > 1:
        dropped = {"loss": sharded["loss"] - own["loss"] / p.world,
                   "grads": {n: (g if g is None or own["grads"].get(n) is None else g - own["grads"][n] / p.world)
                             for n, g in sharded["grads"].items()}}
        c = equivalence.judge_sharded(dropped, one, one32)
        control = {"what": f"the sharded gradient and loss with rank {p.rank}'s batch taken out (G - g_r / N)",
                   "equivalent": c["equivalent"], "grad_max_rel_l2": c["grad_max_rel_l2"],
                   "worst_ratio_to_tol": c["worst_ratio_to_tol"], "failing_tensors": c["n_failing"]}
    gathered = p.ctx.gather({"norms": norms, "loss": own["loss"], "control": control}) if p.ctx is not None \
        else [{"norms": norms, "loss": own["loss"], "control": None}]
    if not p.is_main:
        return None
    batch_norms = {n: [g["norms"].get(n, 0.0) for g in gathered] for n in names}
    res = equivalence.judge_sharded(sharded, one, one32, batch_norms)
    control = next((g["control"] for g in gathered if g["control"] is not None), None)
    return {"name": cmp.name, "opt": cmp.opt, "model": cmp.model, "layers": layers, "tokens": cmp.tokens,
            "attn": ran_attn, "arm": spec.label, "precision": a.step.precision, "dtype": str(dtype),
            "reference_attn": next((v["backend"] for v in ref_opts.values() if isinstance(v, dict) and "backend" in v),
                                   ran_attn),
            "per_rank_loss_one_process": [g["loss"] for g in gathered], **res,
            "negative_control": control,
            "control_failed_as_it_must": None if control is None else not control["equivalent"]}


def _g(x) -> str:
    return "none" if x is None else f"{x:.3g}"


def summary_line(r: dict) -> str:
    """One comparison's verdict in one line (a missing number reads "none"; no tensor compared says why)."""
    head = (f"[{r['name']}] FSDP2 vs one process at {r['precision']}: "
            f"{'equivalent' if r['equivalent'] else 'NOT equivalent'}")
    if r.get("why_not_compared"):
        return f"{head}: {r['why_not_compared']}"
    ctl = r["negative_control"]
    return (f"{head} (grad max rel L2 {_g(r['grad_max_rel_l2'])}, bf16 vs fp32 "
            f"{_g(r['grad_max_bf16_vs_fp32_rel_l2'])}, worst ratio to tolerance {_g(r['worst_ratio_to_tol'])}; "
            f"decisive {r['decisive']}; negative control "
            f"{'failed, as it must' if r['control_failed_as_it_must'] else ctl}"
            + (f"; {r['n_mismatched']} tensors mismatched: {r['mismatched_why']}" if r.get("n_mismatched") else "")
            + ")")


def main(argv=None) -> int:
    from workbench.ab.distributed.probe import setup, write_json
    from workbench.measure.equivalence import SHARDED_FACTOR

    argv = list(sys.argv[1:] if argv is None else argv)
    p = setup(build_parser(), argv)
    try:
        results = [check(p, c) for c in p.comps]
        if not p.is_main:
            return 0
        ok = all(r["equivalent"] and r["control_failed_as_it_must"] is not False for r in results)
        from workbench.measure.results import device_info, git_sha
        dev = device_info(p.device)
        out = {"tool": TOOL, "command": f"torchrun --nproc-per-node {p.world} -m workbench.ab.distributed.equiv_bf16 "
               + " ".join(argv) if p.ctx is not None else f"{TOOL} " + " ".join(argv),
               "git_sha": git_sha(), "world_size": p.world, "backend": None if p.ctx is None else p.ctx.backend,
               "device": dev.get("name") or str(p.device), "factor": SHARDED_FACTOR,
               "against": "one process with gradient accumulation over the ranks' batches (loss / N each), at the "
                          "step's precision; its distance to the same in fp32 sets the tolerance",
               "comparisons": results, "equivalent": ok}
        write_json(p.own.json, out)  # the verdict on disk (and stdout) before anything is printed from it
        for r in results:
            p.progress(summary_line(r))  # stderr
        return 0 if ok else 1
    finally:
        p.close()


if __name__ == "__main__":
    from workbench.ab.distributed.probe import run_rank_main
    raise SystemExit(run_rank_main(main))
