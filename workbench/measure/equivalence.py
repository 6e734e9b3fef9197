"""Does an arm compute the same function as its baseline? The criterion, fixed before any run.

    # T = packed tokens of the timed batch

The check runs one forward + backward of every arm from the same initial weights on the comparison's first timed
batch (batch 0 of the sequence every arm is timed on), and compares the loss and every LoRA gradient:

1. Direct: relative L2 error per gradient tensor, ||g_arm - g_base|| / ||g_base||, and the relative loss difference,
   each at most `RTOL[dtype]`. Scale-aware: no absolute tolerance that a small tensor could hide under.
2. Low precision only (bf16 / fp16), when 1. fails: both arms are judged against an fp32 run of the baseline arm on
   the same batch. bf16 gradients carry rounding noise of their own (LoRA gradients of rarely hit experts: 10-30%
   relative L2 against fp32), and two arms that sum in different orders (a per-expert `index_add_` against one
   grouped GEMM) land in different places inside it. The arm passes when every gradient is no further from fp32
   than `REF_FACTOR` x the baseline's own error + RTOL, and its loss likewise. Where fp32 does not fit on the
   device for the whole batch, the reference is computed over the batch's documents in chunks and summed with
   token weights: packed documents are isolated, so this is the same function, on the same batch.

The dtype that picks the tolerance is the one the step computes in (`workbench.step.precision_mode.compute_dtype`): bf16 for a
run under autocast (precision `autocast`), whatever dtype the parameters hold; the fp32 reference runs without
autocast. The criterion is written into meta.json before the first step (`describe()`), and never changes during a
run.
"""
from __future__ import annotations

import torch

RTOL = {torch.float32: 1e-4, torch.float64: 1e-7, torch.bfloat16: 2e-2, torch.float16: 5e-3}
"""Relative L2 error per gradient tensor (and relative loss difference) allowed against the baseline arm."""

REF_FACTOR = 1.5
"""Against the fp32 reference, an arm may be at most REF_FACTOR x the baseline's own error + RTOL away."""

LOW_PRECISION = (torch.bfloat16, torch.float16)


def describe(dtype) -> dict:
    return {"criterion": "relative L2 per LoRA gradient tensor and relative loss difference <= rtol, against the "
                         "baseline arm on the first timed batch; in bf16/fp16, where that fails, against an fp32 run "
                         "of the baseline arm on the same batch: error <= ref_factor x the baseline's error + rtol",
            "rtol": RTOL.get(dtype, RTOL[torch.float32]), "ref_factor": REF_FACTOR, "dtype": str(dtype)}


def rel_l2(g: torch.Tensor, g_ref: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(g - g_ref) / torch.linalg.vector_norm(g_ref).clamp_min(1e-30))


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-12)


def compare(out: dict, ref: dict, dtype) -> dict:
    """Criterion 1 of one arm's {"loss", "grads"} against the baseline's."""
    rtol = RTOL.get(dtype, RTOL[torch.float32])
    loss_rel = _rel(out["loss"], ref["loss"])
    bitwise = out["loss"] == ref["loss"]
    gmax, grel, ok, mismatched, worst = 0.0, 0.0, True, [], None
    for n, g_ref in ref["grads"].items():
        g = out["grads"].get(n)
        if (g is None) != (g_ref is None) or (g is not None and g.shape != g_ref.shape):
            ok, bitwise = False, False
            mismatched.append(n)
            continue
        if g is None:
            continue
        bitwise = bitwise and torch.equal(g, g_ref)
        if g.numel():
            gmax = max(gmax, float((g - g_ref).abs().max()))
        rel = rel_l2(g, g_ref)
        if worst is None or rel > grel:
            grel, worst = rel, n
        ok = ok and rel <= rtol
    res = {"equivalent": bool(ok and loss_rel <= rtol), "bitwise": bool(bitwise), "loss_abs_diff": abs(
        out["loss"] - ref["loss"]), "loss_rel_diff": loss_rel, "grad_max_abs_diff": gmax, "grad_max_rel_l2": grel,
        "worst_grad": worst, "rtol": rtol}
    if mismatched:
        res["mismatched_grads"] = mismatched[:5]
    return res


def judge_by_reference(out: dict, base: dict, ref32: dict, dtype) -> dict:
    """Criterion 2: the arm and the baseline against an fp32 run of the baseline arm."""
    rtol = RTOL.get(dtype, RTOL[torch.float32])
    l_ref = ref32["loss"]
    loss_arm, loss_base = _rel(out["loss"], l_ref), _rel(base["loss"], l_ref)
    loss_ok = loss_arm <= REF_FACTOR * loss_base + rtol
    worst, worst_ratio, e_arm_max, e_base_max, ok = None, 0.0, 0.0, 0.0, True
    for n, g32 in ref32["grads"].items():
        g, gb = out["grads"].get(n), base["grads"].get(n)
        if g32 is None or g is None or gb is None:
            if not (g32 is None and g is None and gb is None):
                ok = False
            continue
        e_arm, e_base = rel_l2(g, g32), rel_l2(gb, g32)
        e_arm_max, e_base_max = max(e_arm_max, e_arm), max(e_base_max, e_base)
        ratio = e_arm / max(e_base, 1e-30)
        ok = ok and e_arm <= REF_FACTOR * e_base + rtol
        if worst is None or ratio > worst_ratio:
            worst, worst_ratio = n, ratio
    return {"equivalent": bool(ok and loss_ok), "judged_by": "fp32 reference (the baseline arm in float32)",
            "ref_loss_rel_err": loss_arm, "ref_loss_rel_err_baseline": loss_base,
            "ref_grad_max_rel_l2": e_arm_max, "ref_grad_max_rel_l2_baseline": e_base_max,
            "ref_worst_grad": worst, "ref_worst_ratio": worst_ratio, "ref_factor": REF_FACTOR}


class GradCapture:
    """Stands in for the optimizer in the equivalence step: snapshots the LoRA gradients instead of stepping."""

    def __init__(self, named_params):
        self.named = list(named_params)
        self.grads: dict | None = None

    def step(self):
        self.grads = {n: (p.grad.detach().float().clone() if p.grad is not None else None) for n, p in self.named}

    def zero_grad(self, set_to_none=True):
        for _, p in self.named:
            p.grad = None


REFERENCE_PRECISION = "fp32-adapters"
"""The precision of the fp32 reference's step (`workbench.step.precision_mode`): no autocast, so fp32 parameters compute in
fp32. Every caller of `reference_fp32` passes it to its step."""


class Upcast:
    """Parameters (not buffers: rotary tables stay as built) in float32 for a reference pass, then back to their
    own dtypes; a bf16 / fp16 value survives the round trip exactly. The steps inside must run without autocast
    (`reference_fp32`'s `run_one` runs precision fp32-adapters): an autocast forward would compute in bf16 whatever
    the parameters hold."""

    def __init__(self, model, dtype=torch.float32):
        self.model, self.dtype, self.orig = model, dtype, {}

    def __enter__(self):
        try:
            with torch.no_grad():
                for n, p in self.model.named_parameters():
                    if p.is_floating_point() and p.dtype != self.dtype:
                        self.orig[n] = p.dtype
                        p.data = p.data.to(self.dtype)
        except BaseException:  # out of memory half way: the model as it was, before the caller retries in chunks
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        with torch.no_grad():
            for n, p in self.model.named_parameters():
                if n in self.orig:
                    p.data = p.data.to(self.orig[n])
                    p.grad = None
        self.orig = {}
        return False


def targets(batch) -> int:
    """Positions the causal-LM loss averages over: labels shifted by one, -100 ignored (each document's first)."""
    return int((batch.labels[:, 1:] != -100).sum())


def split_by_documents(batch, parts: int) -> list:
    """The packed batch as `parts` packed batches of whole documents, in order (CPU batches, before collate-time
    preparation)."""
    from workbench.step.data import PackedBatch

    total = sum(batch.doc_lens)
    groups: list[list[int]] = [[] for _ in range(max(1, parts))]
    cum = 0
    for d, n in enumerate(batch.doc_lens):  # a document goes to the share its middle token falls in: in order
        groups[min(len(groups) - 1, int((cum + n / 2) * len(groups) / total))].append(d)
        cum += n
    out, start = [], 0
    for g in (g for g in groups if g):
        lens = [batch.doc_lens[d] for d in g]
        sl = slice(start, start + sum(lens))
        out.append(PackedBatch(batch.input_ids[:, sl].clone(), batch.position_ids[:, sl].clone(),
                               batch.labels[:, sl].clone(), lens, {}))
        start = sl.stop
    return out


def combine(results: list[dict], weights: list[float]) -> dict:
    """Token-weighted sum of per-chunk {"loss", "grads"}: the loss and gradients of the whole batch."""
    loss = sum(w * r["loss"] for r, w in zip(results, weights))
    grads = {}
    for n in results[0]["grads"]:
        gs = [(r["grads"].get(n), w) for r, w in zip(results, weights)]
        if all(g is None for g, _ in gs):
            grads[n] = None
            continue
        grads[n] = sum(w * g for g, w in gs if g is not None)
    return {"loss": loss, "grads": grads}


def reference_fp32(model, run_one, batch, progress=None, device=None) -> dict:
    """{"loss", "grads", "chunks"} of `run_one(batch)` (the baseline arm's one step, at `REFERENCE_PRECISION`) with
    the parameters in fp32. On
    an out-of-memory error the batch is split into 2, 4, ... chunks of whole documents and the chunks' results are
    combined with token weights (`combine`)."""
    parts = 1
    while True:
        try:
            chunks = split_by_documents(batch, parts) if parts > 1 else [batch]
            n = [targets(c) for c in chunks]
            with Upcast(model):
                res = [run_one(c) for c in chunks]
            out = combine(res, [k / max(sum(n), 1) for k in n]) if parts > 1 else res[0]
            out["chunks"] = len(chunks)
            return out
        except torch.OutOfMemoryError:
            if parts >= len(batch.doc_lens):
                raise
            parts *= 2
            if device is not None and torch.device(device).type == "cuda":
                torch.cuda.empty_cache()
            if progress:
                progress(f"fp32 reference does not fit at once; over the batch's documents in {parts} chunks")


# --- a sharded run (FSDP2) against one process, in low precision ---------------------------------------------------

SHARDED_FACTOR = 1.5
"""FSDP2 over N ranks against one process over the same N batches (gradient accumulation, loss / N per batch), both
at the step's precision (bf16 under autocast). A LoRA gradient tensor passes when

    rel_l2(g_sharded, g_one) <= SHARDED_FACTOR x rel_l2(g_one, g_one_fp32) + RTOL[float32]

Why this tolerance: FSDP2 runs the same kernels on each rank's batch as one process does on that batch; what may
differ is the order in which the N per-batch gradients are summed (reduce-scatter against accumulation) and any
kernel FSDP2 picks differently for its gathered weights. If the sharded run carried rounding of its own, independent
of the one-process run's and of the same size (the bf16 error against fp32, the right-hand distance), the two would
lie about sqrt(2) = 1.41 x that distance apart: SHARDED_FACTOR = 1.5 (the house's REF_FACTOR) admits that and no
more. A defect that changes the function (a rank's batch dropped, a sum where a mean belongs, a wrong shard) moves
a gradient by a part of the gradient itself: the check reports, from the same run, how far dropping each rank's
batch would move every tensor (`drop_rel_l2`), and calls itself decisive only where that distance exceeds the
tolerance. The loss likewise, with the relative loss differences. RTOL[float32] is the floor for tensors whose bf16
error is ~0 (a LoRA A gradient while B is still zero)."""


def judge_sharded(sharded: dict, one: dict, one_fp32: dict, batch_norms: dict | None = None) -> dict:
    """The SHARDED_FACTOR criterion. `sharded`, `one`, `one_fp32`: {"loss", "grads": {name: tensor}} (the sharded run
    averaged over ranks; one process averaged over the same N batches, at the step's precision and in fp32).

    `batch_norms`: {name: [||g_r|| for r in 0..N-1]}, the norms of the one-process per-batch gradients: the built-in
    negative control. Dropping batch r moves the mean G = sum_r g_r / N by g_r / N, a relative L2 distance of exactly
    ||g_r|| / (N ||G||); the check is `decisive` when, for every r, some tensor would move beyond its tolerance.

    A gradient that one side has and another lacks (or of another shape) is a mismatch: never equivalent.
    `mismatched_why` says which side lacks which tensors; with no tensor compared the verdict is not equivalent and
    `why_not_compared` says why in one line (the sharded run had no LoRA gradient at all)."""
    floor = RTOL[torch.float32]
    per, ok, mismatched = {}, True, []
    worst, worst_ratio = None, 0.0
    caught: list[int] | None = None
    for n, g1 in one["grads"].items():
        g, g32 = sharded["grads"].get(n), one_fp32["grads"].get(n)
        if g1 is None or g is None or g32 is None:
            if not (g1 is None and g is None and g32 is None):
                ok = False
                mismatched.append((n, "missing in " + ", ".join(
                    side for side, t in (("sharded", g), ("one process", g1), ("one process fp32", g32))
                    if t is None)))
            continue
        if g.shape != g1.shape:
            ok = False
            mismatched.append((n, f"shape {tuple(g.shape)} sharded vs {tuple(g1.shape)} one process"))
            continue
        e, noise = rel_l2(g.float(), g1.float()), rel_l2(g1.float(), g32.float())
        tol = SHARDED_FACTOR * noise + floor
        per[n] = rec = {"rel_l2": e, "bf16_vs_fp32_rel_l2": noise, "tol": tol, "passes": e <= tol}
        norm1 = float(torch.linalg.vector_norm(g1.float()))
        if batch_norms and n in batch_norms and norm1 > 0:
            nb = len(batch_norms[n])
            drop = [float(x) / (nb * norm1) for x in batch_norms[n]]
            rec["drop_rel_l2"] = drop
            caught = [0] * nb if caught is None else caught
            for r, d in enumerate(drop):
                caught[r] += int(d > tol)
        ok = ok and rec["passes"]
        ratio = e / tol
        if worst is None or ratio > worst_ratio:
            worst, worst_ratio = n, ratio
    l_e, l_noise = _rel(sharded["loss"], one["loss"]), _rel(one["loss"], one_fp32["loss"])
    loss_tol = SHARDED_FACTOR * l_noise + floor
    extra = [n for n in sharded["grads"] if n not in one["grads"]]  # a name the one-process run does not have
    mismatched += [(n, "missing in one process (a name of the sharded run only)") for n in extra]
    ok = ok and not extra
    out = {"equivalent": bool(ok and l_e <= loss_tol and per),
           "criterion": f"per LoRA gradient tensor and for the loss: rel_l2(sharded, one process) <= {SHARDED_FACTOR} "
                        f"x rel_l2(one process, one process in fp32) + {floor}",
           "factor": SHARDED_FACTOR, "floor": floor, "tensors": len(per),
           "loss_rel_diff": l_e, "loss_bf16_vs_fp32_rel": l_noise, "loss_tol": loss_tol,
           "grad_max_rel_l2": max((r["rel_l2"] for r in per.values()), default=None),
           "grad_max_bf16_vs_fp32_rel_l2": max((r["bf16_vs_fp32_rel_l2"] for r in per.values()), default=None),
           "worst_grad": worst, "worst_ratio_to_tol": worst_ratio,
           "worst_tensors": [{"name": n, **{k: v for k, v in r.items() if k != "drop_rel_l2"}} for n, r in sorted(
               per.items(), key=lambda kv: -kv[1]["rel_l2"] / kv[1]["tol"])[:5]],
           "n_failing": sum(not r["passes"] for r in per.values()),
           "failing": sorted(n for n, r in per.items() if not r["passes"])[:10],
           "drop_batch_caught_by_tensors": caught,
           "decisive": None if caught is None else bool(min(caught) > 0)}
    if mismatched:
        out["mismatched_grads"] = [n for n, _ in mismatched[:5]]
        out["n_mismatched"] = len(mismatched)
        out["mismatched_why"] = _mismatch_summary(mismatched)
    if not per:
        out["why_not_compared"] = (f"no LoRA gradient tensor compared: {len(mismatched)} mismatched, "
                                   + "; ".join(f"{k} ({v['count']}, e.g. {v['names'][0]})"
                                               for k, v in out.get("mismatched_why", {}).items())
                                   if mismatched else "no LoRA gradient tensor in the one-process run")
    return out


def _mismatch_summary(mismatched: list) -> dict:
    """{reason: {"count", "names" (the first 10)}} of `judge_sharded`'s mismatched tensors: which side lacks which."""
    out: dict = {}
    for n, why in mismatched:
        rec = out.setdefault(why, {"count": 0, "names": []})
        rec["count"] += 1
        if len(rec["names"]) < 10:
            rec["names"].append(n)
    return out
