"""A lower bound on one training step's memory, from the model config and the batch shape alone (no model built).

    bytes >= weights + activations + logits + eager attention scores

- weights: the base model's parameters (embeddings, the LM head unless tied, attention projections, the MLP or
  every expert), in the model dtype, divided over the ranks under FSDP2; norms, biases, LoRA and the optimizer's
  state are left out (small).
- activations: under activation checkpointing, each layer's input (T x hidden) kept for the recompute; without it,
  per layer the norm outputs, q/k/v and the attention output, and the MLP's gate, up and product (T x top_k x the
  expert width for a MoE layer).
- logits: T x vocab in the model dtype, plus their fp32 copy for the loss when the model dtype is narrower.
- eager attention (`--attn eager`): one layer's T x T scores per query head, plus the T x T additive mask.

Every term is what the step must hold at its peak, so a run whose bound exceeds the device cannot fit; the real
peak is higher (the allocator, temporaries, a layer's recompute). `workbench.ab.preflight` refuses such a run."""
from __future__ import annotations

import dataclasses
import os

GIB = 2**30

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
"""Bytes per element of each --dtype."""


@dataclasses.dataclass(frozen=True)
class Estimate:
    weights_bytes: int
    activations_bytes: int
    logits_bytes: int
    eager_scores_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.activations_bytes + self.logits_bytes + self.eager_scores_bytes

    def describe(self) -> str:
        parts = [("weights", self.weights_bytes), ("activations", self.activations_bytes),
                 ("logits", self.logits_bytes), ("eager T x T scores", self.eager_scores_bytes)]
        return ", ".join(f"{name} {b / GIB:.1f}" for name, b in parts if b) + " GiB"


def _get(config, *names, default=None):
    for n in names:
        v = getattr(config, n, None)
        if v is not None:
            return v
    return default


def shape(config) -> dict:
    """The config fields the estimate uses, with the families' names reconciled."""
    hidden = config.hidden_size
    heads = config.num_attention_heads
    head_dim = _get(config, "head_dim", default=hidden // heads)
    experts = _get(config, "num_experts", "num_local_experts", default=0) or 0
    return {"hidden": hidden, "heads": heads, "kv_heads": _get(config, "num_key_value_heads", default=heads),
            "head_dim": head_dim, "vocab": config.vocab_size, "layers": config.num_hidden_layers,
            "intermediate": config.intermediate_size, "experts": experts,
            "expert_width": _get(config, "moe_intermediate_size", "intermediate_size") if experts else 0,
            "top_k": _get(config, "num_experts_per_tok", default=1) if experts else 0,
            "dense_layers": len(_get(config, "mlp_only_layers", default=()) or ()) if experts else 0,
            "tied": bool(_get(config, "tie_word_embeddings", default=False))}


def weight_params(config, layers: int | None = None) -> int:
    """Parameters of the embeddings, LM head, attention projections and MLPs / experts (norms and biases left out)."""
    s = shape(config)
    L = layers if layers is not None else s["layers"]
    h, q, kv = s["hidden"], s["heads"] * s["head_dim"], s["kv_heads"] * s["head_dim"]
    attn = h * q + 2 * h * kv + q * h
    dense_mlp = 3 * h * s["intermediate"]
    if s["experts"]:
        moe = s["experts"] * 3 * h * s["expert_width"] + h * s["experts"]  # experts + router
        dense = min(s["dense_layers"], L)
        mlp = dense * dense_mlp + (L - dense) * moe
    else:
        mlp = L * dense_mlp
    embed = s["vocab"] * h
    return embed * (1 if s["tied"] else 2) + L * attn + mlp


def estimate(config, tokens: int, *, layers: int | None = None, dtype_bytes: int = 4, checkpointing: bool = True,
             eager_attention: bool = False, weight_shards: int = 1) -> Estimate:
    """The lower bound for one step of `tokens` packed tokens on one device (see the module docstring);
    `weight_shards`: the ranks the weights are sharded over (FSDP), each holding its share."""
    s = shape(config)
    L = layers if layers is not None else s["layers"]
    T, h, b = tokens, s["hidden"], dtype_bytes
    q, kv = s["heads"] * s["head_dim"], s["kv_heads"] * s["head_dim"]
    if checkpointing:
        act = L * T * h * b
    else:
        width = s["top_k"] * s["expert_width"] if s["experts"] else s["intermediate"]
        act = L * T * (2 * h + 2 * q + 2 * kv + 3 * width) * b
    logits = T * s["vocab"] * (b + (4 if b < 4 else 0))
    eager = (s["heads"] + 1) * T * T * b if eager_attention else 0
    return Estimate(weight_params(config, L) * b // max(weight_shards, 1), act, logits, eager)


def host_ram_bytes() -> int | None:
    """The machine's physical memory (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def device_bytes(device) -> tuple[int | None, str]:
    """(the memory a step on `device` can use, its name): a GPU's total memory, or the host's RAM on a CPU."""
    if getattr(device, "type", str(device)) == "cuda":
        import torch
        return torch.cuda.get_device_properties(device).total_memory, "GPU memory"
    return host_ram_bytes(), "host RAM"
