"""What would move an arm closer to the GPU's limit: read off its step breakdown (`workbench.traces.decompose`).

Each component of a traced step has one lever. `levers(components, ...)` ranks the components that are not the
useful matrix work (GEMM, attention) by their share of the step and names the lever of each that takes at least
`min_share` of it. Attention is named too when the arm computes it dense over the packed sequence (T^2, `sdpa` or
`eager` with a packed mask) where a varlen / flash kernel would compute only the block-diagonal part. A pattern in
the top kernels is named before the components it hides in: a gradient built slice by slice (zero-fills and adds of
whole tensors, counted as norm_elementwise), the cost of a per-expert loop over LoRA-adapted fused experts.
"""
from __future__ import annotations

from workbench.traces.components import COMPONENTS, LEVER_ONLY, LEVERS, attention_component

DENSE_ATTENTION = tuple(c.attention_flops for c in COMPONENTS.values() if c.group == "lever" and c.attention_flops)
"""("dense",): the attention FLOP classes (`workbench.step.flops.attention_mode`) computed over the whole packed sequence."""
DENSE_ATTENTION_COMPONENT = attention_component("dense")
SLICE_GRADIENTS_COMPONENT = "slice gradients (fill + add)"
LOSS_COMPONENT = "loss (logits, non-GEMM)"
RECOMPUTE_COMPONENT = "recompute"
LOSS_CLASSES = ("attention", "glue", "copy", "norm_elementwise", "other")
"""The busy classes of `LOSS_COMPONENT`: everything but GEMM (the lm_head matmuls, which a fused loss keeps) and the
optimizer."""
LEVER_COMPONENTS = frozenset({*LEVERS, *LEVER_ONLY})
"""The components a lever optimization may name in its SPEC's `lever` (`workbench.opts.registry`): every row
`levers()` can emit (`workbench.traces.components` owns them, with their lever text)."""

FILL, ADD = "FillFunctor", "CUDAFunctor_add"
"""The kernels of a gradient built slice by slice: `select_backward` zero-fills a tensor of the whole weight's shape
(Fill) and autograd adds it into the gradient (add). A loop over the experts of a fused, LoRA-adapted expert weight
(`w[e]` per expert: HF's eager loop, the per-expert arms) does this E times per weight per layer, each one the size
of all E experts (tests/test_moe.py counts the select_backwards on CPU)."""
MIN_SLICE_GRAD_CALLS = 64
"""Fill and add calls per step from which the pattern is named (one layer of a 64-expert model)."""


def experts_of(model: str | None, layers: int | None = None) -> int | None:
    """Experts per MoE layer of a model the workbench builds (its config's num_experts / num_local_experts); None for
    a dense model, or a name no config is found for."""
    if not model:
        return None
    from workbench.step.memory_estimate import shape
    from workbench.step.models import load_config
    from workbench.errors import WorkbenchError
    try:
        return shape(load_config(model, layers))["experts"] or None
    except WorkbenchError:  # not a preset nor a checkpoint folder here: no experts known
        return None


def slice_gradients(top_kernels: list[dict] | None, step_ms: float | None, experts: int | None = None) -> dict | None:
    """The whole-tensor gradient per slice (FILL + ADD kernels, each at least MIN_SLICE_GRAD_CALLS and at least
    `experts` per step), from `decompose.top_kernels` rows: {component, ms, share (of the step), fills, adds, lever};
    None when absent, and None for a model without experts (`experts` None or 1): the pattern is a per-expert loop's,
    and a dense step's own fills and adds (residual gradients, gradient buffers: hundreds of fills and over a thousand
    adds per step on a dense 8B model at full depth) are no such loop."""
    if not top_kernels or not step_ms or not experts or experts < 2:
        return None
    fills = [k for k in top_kernels if FILL in str(k.get("name"))]
    adds = [k for k in top_kernels if ADD in str(k.get("name"))]
    nf, na = sum(k["count"] for k in fills), sum(k["count"] for k in adds)
    least = max(MIN_SLICE_GRAD_CALLS, experts)
    if nf < least or na < least:
        return None
    ms = sum(k["ms"] for k in fills + adds)
    return {"component": SLICE_GRADIENTS_COMPONENT, "ms": ms, "share": ms / step_ms, "fills": nf, "adds": na,
            "lever": f"{nf:.0f} zero-fills and {na:.0f} adds of whole tensors per step ({ms:.0f} ms): "
                     + COMPONENTS[SLICE_GRADIENTS_COMPONENT].lever}


def recompute_per_step(events) -> "pd.Series":
    """Per traced step (index: step), the ms of `RECOMPUTE_COMPONENT`: busy time charged to kernels of the decoder
    layers' `recompute` pass (`decompose.breakdown(by_layer=True)`; the `wb/Lxx/recompute` ranges of checkpointing):
    what keeping the activations would save."""
    from workbench.traces import decompose

    b = decompose.breakdown(events, by_layer=True)
    steps = sorted(b["step"].unique()) if len(b) else []
    sel = b[(b["pass"] == "recompute") & (b["group"] == "busy")] if len(b) else b
    return sel.groupby("step")["ms"].sum().reindex(steps, fill_value=0.0)


def loss_per_step(events) -> "pd.Series":
    """Per traced step (index: step), the ms of `LOSS_COMPONENT`: busy time charged to kernels outside every decoder
    layer (`decompose.breakdown(by_layer=True)`, layer "") of the classes `LOSS_CLASSES`. That is the head's work
    besides its GEMMs: the logits' casts, the loss's log-softmax / nll and their backward, plus the embedding's
    backward and the final norm (small beside the (T, V) logits)."""
    from workbench.traces import decompose

    b = decompose.breakdown(events, by_layer=True)
    steps = sorted(b["step"].unique()) if len(b) else []
    sel = b[(b["layer"] == "") & b["component"].isin(LOSS_CLASSES)]
    return sel.groupby("step")["ms"].sum().reindex(steps, fill_value=0.0)


def levers(components: list[dict], *, attention_flops: str | None = None, min_share: float = 0.05,
           top_kernels: list[dict] | None = None, loss_ms: float | None = None,
           experts: int | None = None, recompute_ms: float | None = None) -> list[dict]:
    """[{component, ms, share, lever}] for the components (rows of `decompose.summary(...)`) other than gemm /
    attention that take at least `min_share` of the step, largest first, with the loss's non-GEMM work
    (`loss_ms`, the mean of `loss_per_step`) and the layers' recompute (`recompute_ms`, the mean of
    `recompute_per_step`: a part of the busy components, named for the activations lever) among them; plus attention when it is computed dense; first of all, a
    gradient built slice by slice (`slice_gradients`, from `top_kernels`, on a model of `experts` experts a layer)
    that takes `min_share`."""
    rows = [r for r in components if r.get("component") in LEVERS and (r.get("share") or 0) >= min_share]
    step = next((r.get("ms") for r in components if r.get("component") == "step_ms"), None)
    if loss_ms is not None and step and loss_ms / step >= min_share:
        rows.append({"component": LOSS_COMPONENT, "ms": loss_ms, "share": loss_ms / step})
    if recompute_ms is not None and step and recompute_ms / step >= min_share:  # the checkpointed layers' recompute
        rows.append({"component": RECOMPUTE_COMPONENT, "ms": recompute_ms, "share": recompute_ms / step})
    out = [{"component": r["component"], "ms": r["ms"], "share": r["share"],
            "lever": LEVERS.get(r["component"]) or COMPONENTS[r["component"]].lever}
           for r in sorted(rows, key=lambda r: -r["share"])]
    sg = slice_gradients(top_kernels, step, experts)
    if sg is not None and sg["share"] >= min_share:
        out.insert(0, sg)
    att = next((r for r in components if r.get("component") == "attention"), None)
    if attention_flops in DENSE_ATTENTION:
        gemm = next((r for r in components if r.get("component") == "gemm"), None)
        out.append({"component": DENSE_ATTENTION_COMPONENT, "ms": (att or {}).get("ms"), "share": (att or {}).get("share"),
                    "lever": COMPONENTS[DENSE_ATTENTION_COMPONENT].lever
                             + f" (its matmuls count as GEMM here: {100 * (gemm or {}).get('share', 0):.0f}% of the step)"})
    return out


def main(argv=None) -> int:
    """`workbench levers`: each component and its lever."""
    from workbench.cli import parser
    parser("workbench levers", __doc__ + "\nPrints each component and its lever.").parse_args(argv)
    width = max(map(len, LEVERS))
    for component, lever in LEVERS.items():
        print(f"{component:<{width}}  {lever}")
    return 0


if __name__ == "__main__":
    import sys

    from workbench.cli import run_main
    sys.exit(run_main(main))
