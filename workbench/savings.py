"""The analytic savings models, as pure functions; each docstring states its formula and inputs.

Sections: packing ((L-1)*s), offload ((L-1)*min(c,g) as published, plus the first reload behind the queued work),
MoE routing. Each returns a dict with at least
`formula`, `predicted_ms` and `inputs`. `workbench.verdicts` feeds them in-situ inputs from traces, propagates
the inputs' spread, and judges them against the engine's measured saving.
"""
from __future__ import annotations

# --- packing ------------------------------------------------------------------------------------------------

def packing_saving(layers: int, s_ms: float, *, checkpointing: bool = True, arm: str = "cached",
                   measured_ms: float | None = None) -> dict:
    """Packed-metadata caching vs per-layer rebuild: predicted saving per step (L-1)·s per rebuilding pass.

    The `rebuild` arm builds the metadata in every layer of every pass that runs attention: the forward, plus
    the recompute under checkpointing, so p = 2 with checkpointing, else 1, and L·p builds per step. `cached`
    builds once per step (the recompute reuses the forward's build); `precomputed` builds on the CPU at collate
    time, none inside the step:

        builds removed   n = L·p - b,  b = 1 (cached) or 0 (precomputed)
        predicted_ms     = n·s
                         = (L-1)·s·p + (p-1)·s      for cached: the (L-1)·s per pass of the Unsloth article, plus
                                                    the recompute's first layer, which also hits the cache
        implied_s_ms     = measured_ms / n

    Inputs: L = decoder layers; `s_ms` = measured cost of one build, including the stall its syncs cause (e.g.
    wall time of back-to-back builds with a sync after each, or the `wb/Lxx/attn/meta` ranges of a trace);
    `measured_ms` = median step time of rebuild minus that of the arm (same batches, interleaved runs).
    """
    if layers <= 0:
        raise ValueError(f"layers must be positive, got {layers}")
    if s_ms < 0:
        raise ValueError(f"s_ms must be non-negative, got {s_ms}")
    if arm not in ("cached", "precomputed"):
        raise ValueError(f"arm must be cached or precomputed, got {arm!r}")
    passes = 2 if checkpointing else 1
    builds_after = 1 if arm == "cached" else 0
    removed = layers * passes - builds_after
    predicted = removed * float(s_ms)
    return {
        "formula": "(L*p - b)*s = (L-1)*s*p + (p-1)*s  (b=1 cached, 0 precomputed: L*p*s)" if arm == "cached"
        else "L*p*s  (precomputed: every in-step build removed)",
        "predicted_ms": predicted,
        "measured_ms": None if measured_ms is None else float(measured_ms),
        "implied_s_ms": None if measured_ms is None else float(measured_ms) / removed,
        "inputs": {"layers": layers, "s_ms": float(s_ms), "passes": passes, "checkpointing": checkpointing,
                   "arm": arm, "builds_rebuild": layers * passes, "builds_arm": builds_after,
                   "builds_removed": removed},
    }


# --- offload ------------------------------------------------------------------------------------------------

def offload_saving(c_ms, g_ms, *, layers: int | None = None, measured_ms: float | None = None,
                   lead_ms: float | None = None) -> dict:
    """Double-buffered reload vs blocking reload of offloaded checkpoints: predicted saving (L-1)·min(c, g).

    With one reload buffer, layer i's backward is its reload, then its recompute + backward: c_i + g_i per layer.
    With two, layer i-1's input reloads on the copy stream while layer i recomputes and back-propagates, so each
    such pair costs max(c_{i-1}, g_i) instead of c_{i-1} + g_i. The published form assumes the first reload of the
    backward (layer L-1's) has no compute to hide behind:

        published_ms = sum_{i=1}^{L-1} min(c_{i-1}, g_i)        (= (L-1)·min(c, g) when the layers are alike)

    With `lead_ms` = h, the GPU work already queued when the host issues that first reload (the loss and LM head's
    backward, and whatever the host ran ahead of), the first reload hides too: the blocking arm's copy waits for h,
    the double-buffered arm's copy starts at once (it waits only for the buffer's last reader):

        predicted_ms = min(c_{L-1}, h) + sum_{i=1}^{L-1} min(c_{i-1}, g_i)     (~ L·min(c, g) when h >= c)
        overlap_efficiency = measured_ms / predicted_ms

    The lead term was added after the H100 L sweeps (llama-3.1-8b at L=1, qwen3-8b at L=2-4) measured a saving the
    published form lacks, and the traces showed all L reloads hidden (profiles/RESULTS.md); without `lead_ms` the
    result is the published form.

    Inputs: `c_ms` = per-layer reload time, layer 0 first (host-to-device copy of the layer's input: reload
    ranges / H2D memcpy of a trace, or input bytes over the measured pinned bandwidth); `g_ms` = per-layer
    recompute + backward time, layer 0 first. Either may be one number for every layer, with `layers` = L.
    `measured_ms` = step time of the blocking arm minus that of the double-buffered arm (same batch, medians).
    """
    def per_layer(v, name):
        if isinstance(v, (int, float)):
            if layers is None:
                raise ValueError(f"{name} is one number: give layers= too")
            return [float(v)] * layers
        v = [float(x) for x in v]
        if layers is not None and len(v) != layers:
            raise ValueError(f"{name} has {len(v)} values for {layers} layers")
        return v

    c = per_layer(c_ms, "c_ms")
    g = per_layer(g_ms, "g_ms")
    if len(c) != len(g):
        raise ValueError(f"c_ms has {len(c)} layers, g_ms {len(g)}")
    if not c:
        raise ValueError("no layers")
    if any(x < 0 for x in c + g):
        raise ValueError("times must be non-negative")
    L = len(c)
    published = sum(min(c[i - 1], g[i]) for i in range(1, L))
    if lead_ms is not None and lead_ms < 0:
        raise ValueError("lead_ms must be non-negative")
    first = min(c[L - 1], float(lead_ms)) if lead_ms is not None else 0.0
    predicted = published + first
    blocking = sum(c) + sum(g)
    eff = None
    if measured_ms is not None and predicted > 0:
        eff = float(measured_ms) / predicted
    return {
        "formula": ("min(c_{L-1}, h) + sum_{i=1}^{L-1} min(c_{i-1}, g_i)  ~ L*min(c,g)" if lead_ms is not None
                    else "sum_{i=1}^{L-1} min(c_{i-1}, g_i)  ~ (L-1)*min(c,g)"),
        "predicted_ms": predicted,
        "published_ms": published,
        "first_reload_ms": first,
        "measured_ms": None if measured_ms is None else float(measured_ms),
        "overlap_efficiency": eff,
        "inputs": {"layers": L, "c_ms": c, "g_ms": g, "c_mean_ms": sum(c) / L, "g_mean_ms": sum(g) / L,
                   "lead_ms": lead_ms,
                   "blocking_backward_ms": blocking, "overlapped_backward_ms": blocking - predicted,
                   "bound": "reload" if sum(c) > sum(g) else "compute"},
    }


def reload_ms_from_bandwidth(nbytes: float, gb_per_s: float) -> float:
    """c from bytes and a measured pinned host-to-device bandwidth: c_ms = nbytes / (gb_per_s · 1e9) · 1e3."""
    if gb_per_s <= 0:
        raise ValueError("bandwidth must be positive")
    return float(nbytes) / (gb_per_s * 1e9) * 1e3


# --- moe ----------------------------------------------------------------------------------------------------

def moe_saving(*, syncs_removed: float, drain_stall_per_sync_ms: float, launch_gap_removed_ms: float,
               gemm_removed_ms: float) -> dict:
    """MoE routing arm vs HF's eager per-expert loop: the saving per step, from its parts (the articles give no
    formula):

        predicted_ms = syncs_removed · drain_stall_per_sync_ms + launch_gap_removed_ms + gemm_removed_ms

    Inputs, per training step: `syncs_removed` = the baseline's syncs minus the arm's (the sync counter);
    `drain_stall_per_sync_ms` = the GPU idle each sync causes in situ (the baseline trace's sync stalls / its
    syncs: the queue drains while the host waits, then the GPU waits for the next launch); `launch_gap_removed_ms`
    = launch-bound GPU idle of the baseline minus the arm's (the per-expert loop's small kernels issued at the
    host's pace); `gemm_removed_ms` = GEMM kernel time of the baseline minus the arm's (per-expert matmuls vs one
    grouped GEMM). What it leaves out (routing kernels, elementwise work, copies) shows in the decomposition.
    """
    terms = {"syncs removed x drain stall per sync": float(syncs_removed) * float(drain_stall_per_sync_ms),
             "launch gaps removed": float(launch_gap_removed_ms), "GEMM kernel time removed": float(gemm_removed_ms)}
    return {"formula": "syncs_removed*drain_stall_per_sync + launch_gap_removed + gemm_kernel_removed",
            "predicted_ms": sum(terms.values()), "terms": terms,
            "inputs": {"syncs_removed": syncs_removed, "drain_stall_per_sync_ms": drain_stall_per_sync_ms,
                       "launch_gap_removed_ms": launch_gap_removed_ms, "gemm_removed_ms": gemm_removed_ms}}
