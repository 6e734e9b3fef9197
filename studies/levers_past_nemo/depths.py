"""The MoE parts' depth choice: `workbench.step.memory_estimate` for the levers path's points, per depth, on one H200.

    python -m studies.levers_past_nemo.depths

Per model and depth, at 8192 tokens (bf16 base, autocast, fp32 adapters, rank 16): the path's baseline (full
checkpointing, the per-expert loop over peft's folded weights) and each activations arm at the path's last point
(experts on split; the estimate of `none` is the same compiled or eager for a MoE layer), in GiB, against 90% of the
H200's memory (`activations.FIT_MARGIN`), and the arm the activations lever takes there (`activations.lever_arms`:
the fastest that fits, as `levers.compiled_choices` asks it with split on the path; offload also within half the
host's 128 GiB). No GPU: estimates only.
"""
from __future__ import annotations

from unittest import mock

H200_GIB = 140.4
"""torch's total_memory of the H200 (the activations study's 126.4 GiB = 90% of it)."""
HOST_GIB = 128
"""The one-H200 machine's host memory (the device tool's description)."""
MODELS = {"qwen3-30b-a3b": (8, 12, 16, 24, 32, 40, 48), "gpt-oss-20b": (4, 8, 12, 16, 20, 24)}


def rows(tokens: int = 8192) -> list[str]:
    import torch

    from workbench.ab.ab_config import ABConfig
    from workbench.opts import activations as act
    from workbench.step import memory_estimate as me
    from workbench.step.models import load_config

    args = ABConfig.from_flat({"opt": "levers", "memory_limit_gib": H200_GIB, "dtype": "bf16"})
    dev = torch.device("cuda")
    out = [f"tokens {tokens}; limit {act.FIT_MARGIN:.0%} of {H200_GIB} GiB = {act.FIT_MARGIN * H200_GIB:.1f} GiB"]
    with mock.patch.object(me, "host_ram_bytes", lambda: HOST_GIB * me.GIB):
        for model, depths in MODELS.items():
            for L in depths:
                cfg = load_config(model, L)
                base = me.estimate_for(args, dev, cfg, tokens, L, activations="full", folded_experts=True)
                last = {a: me.estimate_for(args, dev, cfg, tokens, L, activations=a, compiled=True,
                                           folded_experts=False) for a in act.ARMS}
                pick = act.lever_arms(args, dev, cfg, tokens, L, compiled=True, folded_experts=False)
                arms = "  ".join(f"{a} {e.total_bytes / me.GIB:.1f}" + (f" (+{e.host_bytes / me.GIB:.0f} host)"
                                                                          if e.host_bytes else "")
                                 for a, e in last.items())
                out.append(f"{model:14s} L={L:2d}  baseline {base.total_bytes / me.GIB:6.1f}  last point: {arms}  "
                           f"-> lever takes {pick['optimized']}")
    return out


if __name__ == "__main__":
    print("\n".join(rows()))
