"""What would move an arm closer to the GPU's limit: read off its step breakdown (`workbench.traces.decompose`).

Each component of a traced step has one lever. `levers(components, ...)` ranks the components that are not the
useful matrix work (GEMM, attention) by their share of the step and names the lever of each that takes at least
`min_share` of it. Attention is named too when the arm computes it dense over the packed sequence (T^2, `sdpa` or
`eager` with a packed mask) where a varlen / flash kernel would compute only the block-diagonal part.
"""
from __future__ import annotations

LEVERS = {
    "launch_gap": "host-bound: the GPU waits for launches; fewer, larger kernels (fused / grouped ops, "
                  "torch.compile) or CUDA graphs",
    "sync_stall": "host syncs drain the queue: remove the readbacks (cache metadata once per batch, count on the "
                  "device, precompute on the CPU)",
    "exposed_copy": "host<->device copies not hidden: prefetch on a side stream (double buffering), or keep the "
                    "tensors on the GPU when memory allows",
    "glue": "metadata builds and MoE routing / permute kernels: build once per batch, fuse the permutation into the "
            "grouped GEMM",
    "norm_elementwise": "norms, activations and pointwise ops are memory-bound: fused kernels (e.g. fused RMSNorm / "
                        "SwiGLU / cross-entropy) or torch.compile",
    "copy": "device copies, mostly dtype casts (direct_copy / bfloat16_copy kernels: e.g. fp32 LoRA adapters on a "
            "bf16 base cast activations both ways in every layer): keep the adapters in the compute dtype, fuse "
            "the casts, avoid materializing layouts",
    "optimizer": "optimizer step: fused / foreach AdamW (already fused on CUDA here)",
    "other": "uncategorized kernels: see the top kernels",
}
DENSE_ATTENTION = ("dense",)


def levers(components: list[dict], *, attention_flops: str | None = None, min_share: float = 0.05) -> list[dict]:
    """[{component, ms, share, lever}] for the components (rows of `decompose.summary(...)`) other than gemm /
    attention that take at least `min_share` of the step, largest first; plus attention when it is computed dense."""
    rows = [r for r in components if r.get("component") in LEVERS and (r.get("share") or 0) >= min_share]
    out = [{"component": r["component"], "ms": r["ms"], "share": r["share"], "lever": LEVERS[r["component"]]}
           for r in sorted(rows, key=lambda r: -r["share"])]
    att = next((r for r in components if r.get("component") == "attention"), None)
    if attention_flops in DENSE_ATTENTION:
        gemm = next((r for r in components if r.get("component") == "gemm"), None)
        out.append({"component": "attention (dense)", "ms": (att or {}).get("ms"), "share": (att or {}).get("share"),
                    "lever": "the backend computes attention over the whole packed sequence (T^2; its matmuls count "
                             f"as GEMM: {100 * (gemm or {}).get('share', 0):.0f}% of the step): a varlen / flash "
                             "kernel computes only the documents' blocks"})
    return out
