"""A lower bound on one training step's memory, from the model config and the batch shape alone (no model built).

    bytes >= weights + activations + LoRA state + max(loss path, one layer's eager attention)

- weights: the base model's parameters (embeddings, the LM head unless tied, attention projections, the MLP or
  every expert), in the model dtype, divided over the ranks under FSDP2; norms and biases are left out (small).
- activations, by the activations arm (`workbench.opts.activations`; `checkpointing` True is `full`, False `none`):
  - `full`: each layer's input (T x hidden) kept for the recompute (a lower bound: one layer's saved tensors are live
    too while it recomputes, as under `selective`, left out here as the committed bounds have it);
  - `none`: every layer's saved tensors. A dense layer's are counted (`SAVED_BYTES_PER_TOKEN`: the bytes a llama
    layer saves per token under bf16 autocast with fp32 adapters, from saved_tensors_hooks on layers of different
    widths, `tests/test_activations.py` recounts them; x dtype_bytes / 2 for another dtype); regionally compiled
    (`compiled`) it saves fewer (`COMPILED_SAVED_BYTES_PER_TOKEN`). llama-3.1-8b at 32 layers and 8192 tokens:
    86.2 GB eager, against 89.7 GB measured on the H200 at the levers path's baseline. A MoE layer's are counted
    the same way per family (`MOE_SAVED_BYTES_PER_TOKEN`: per token and per unit of hidden, q, kv, the routed widths
    top_k x expert width and top_k x hidden, the experts, top_k), plus, where the experts read peft's folded weight
    (`folded_experts`: every experts implementation but the expert_lora lever's `split`), that folded W + delta of
    gate_up and down (E x 3 x hidden x expert width in the model dtype, once per layer): the grouped GEMM saves the
    weight it multiplied, the per-expert loop a slice (a view that keeps the whole tensor); `split` saves peft's
    factors and the frozen parameter instead, and two more routed copies of the hidden state per token
    (`SPLIT_EXTRA`). A compiled MoE layer is counted as the eager one (its regions save somewhat less);
  - `selective`: each layer's input and the outputs of its GEMMs and attention (`selective_per_token`; a MoE
    layer's experts are grouped GEMMs the policy recomputes: of them only the router's logits are kept), plus one
    layer's saved tensors (its recompute; the policy recomputes the folded expert weight, no GEMM's output);
  - `offload`: two layers' saved tensors on the device (the one back-propagating, the one reloading); the other
    layers' in pinned host memory (`Estimate.host_bytes`).
- LoRA state: the adapters (rank r on q/k/v/o and the MLP linears, and on every expert's fused gate_up / down
  parameters through peft's target_parameters: E x r x (in + out) each) in their dtype (fp32 unless --precision
  bf16), four copies live through every step from the second on: the parameters, the runner's snapshot that resets
  each arm (`models.lora_resetter`), AdamW's two moments. At qwen3-30b-a3b's 48 layers that is 4 x 2.39 GiB.
- loss path: 12 bytes per logit (T x vocab) at the loss backward, in any model dtype: under autocast the bf16 logits
  (2), HF's fp32 upcast (4) and log_softmax's fp32 output (4) in the forward, then the output, the incoming gradient
  and log_softmax's input gradient (3 x 4) in the backward (`tests/test_memory_estimate.py` counts the live tensors).
- eager attention (`--attn eager`): one layer's H x T x T at its peak, 12 bytes an element with the fp32 softmax of
  the llama / qwen eager path (bf16 scores, fp32 probabilities and their gradients), 3 x the model dtype with
  gpt-oss's sinks (scores, sinks-concatenated and max-shifted logits), plus the additive T x T masks (gpt-oss: a full
  and a sliding one).

The loss path and a layer's attention peak at different moments (the loss's tensors are freed before the first
layer's backward), so the bound takes the larger, with every other term live at both. Every term is what the step
must hold at that moment, so a run whose bound exceeds the device cannot fit; the real peak is higher (the allocator's
fragmentation, temporaries, a MoE layer's LoRA-merged expert weights, the equivalence phase's captured gradients,
the fp32 reference's upcast weights). qwen3-30b-a3b at 24 layers and 8192 tokens: bound 48.5 GiB, measured peak
48.65 GiB on the H100 (gpu_out kp3/qwen_moe24). `workbench.ab.preflight` refuses a run whose bound exceeds the device."""
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
    lora_state_bytes: int = 0
    host_bytes: int = 0
    """Pinned host memory the step holds (the offload arm's saved activations); not part of `total_bytes`."""

    @property
    def total_bytes(self) -> int:
        """Weights, activations and the LoRA state, plus the larger of the loss path and eager attention (they peak
        at different moments of the step)."""
        return (self.weights_bytes + self.activations_bytes + self.lora_state_bytes
                + max(self.logits_bytes, self.eager_scores_bytes))

    def describe(self) -> str:
        parts = [("weights", self.weights_bytes), ("activations", self.activations_bytes),
                 ("LoRA state", self.lora_state_bytes)]
        text = ", ".join(f"{name} {b / GIB:.1f}" for name, b in parts if b)
        peak = [(name, b) for name, b in (("loss path", self.logits_bytes),
                                          ("eager attention", self.eager_scores_bytes)) if b]
        if len(peak) == 2:
            text += f", the larger of {peak[0][0]} {peak[0][1] / GIB:.1f} and {peak[1][0]} {peak[1][1] / GIB:.1f}"
        elif peak:
            text += f", {peak[0][0]} {peak[0][1] / GIB:.1f}"
        return text + " GiB"


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
            "tied": bool(_get(config, "tie_word_embeddings", default=False)),
            "sinks": getattr(config, "model_type", None) == "gpt_oss",  # eager attention with sinks (its own path)
            "masks": len(set(_get(config, "layer_types", default=None) or ["full_attention"]))}


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


LORA_STATE_COPIES = 4
"""Copies of the LoRA adapters live through a step from the second on: the parameters, the runner's reset snapshot
(`workbench.step.models.lora_resetter`), AdamW's exp_avg and exp_avg_sq."""

LOSS_BYTES_PER_LOGIT = 12
"""Bytes per logit (T x vocab) live at the loss backward of HF's ForCausalLMLoss, in bf16 under autocast and in fp32
alike (the module docstring; `tests/test_memory_estimate.py` counts them)."""

EAGER_BYTES_PER_SCORE = 12
"""Bytes per H x T x T element at the peak of the llama / qwen eager attention path (fp32 softmax), in bf16 under
autocast and in fp32 alike; gpt-oss's path (sinks, softmax in the model dtype) peaks at 3 x the model dtype."""


def lora_params(config, rank: int = 16, layers: int | None = None) -> int:
    """Parameters of the workbench's LoRA adapters (`workbench.step.models.lora_config`): r x (in + out) on each of
    q/k/v/o and gate/up/down, and E x r x (in + out) on each of a MoE layer's fused gate_up and down experts."""
    s = shape(config)
    L = layers if layers is not None else s["layers"]
    h, q, kv = s["hidden"], s["heads"] * s["head_dim"], s["kv_heads"] * s["head_dim"]
    attn = (h + q) + 2 * (h + kv) + (q + h)
    dense_mlp = 3 * (h + s["intermediate"])
    if s["experts"]:
        w = s["expert_width"]
        moe = s["experts"] * ((h + 2 * w) + (w + h))
        dense = min(s["dense_layers"], L)
        mlp = dense * dense_mlp + (L - dense) * moe
    else:
        mlp = L * dense_mlp
    return rank * (L * attn + mlp)


SAVED_BYTES_PER_TOKEN = {"hidden": 15.0, "q": 10.75, "kv": 0.5, "intermediate": 8.75}
"""Bytes a dense decoder layer (llama / qwen3: RMSNorms, q/k/v/o, rotary, sdpa, SwiGLU, LoRA on every linear) saves
for its backward per token and per unit of each width (hidden, q = heads x head_dim, kv = kv_heads x head_dim, the MLP's
intermediate), eager under bf16 autocast with fp32 adapters: counted with saved_tensors_hooks (unique storages, the
parameters' left out) on layers whose widths differ one at a time. The norms' fp32 upcasts make the hidden
coefficient odd; sdpa keeps k and v unexpanded (kv's small coefficient)."""
COMPILED_SAVED_BYTES_PER_TOKEN = {"hidden": 7.0, "q": 10.75, "kv": 0.5, "intermediate": 6.75}
"""The same layer regionally compiled (inductor, the compile lever): its partitioner recomputes the norms' and the
SiLU's pointwise work in the backward instead of saving their inputs. Counted so on a CPU's inductor; on the H200 the
measured peak is lower still (62.8 GB against 73.1 estimated at llama-3.1-8b 32 layers, 8192 tokens): a bound above."""
MOE_SAVED_BYTES_PER_TOKEN = {
    "qwen3_moe": {"hidden": 10.0, "q": 14.125, "kv": 4.0625, "routed_width": 8.0, "routed_hidden": 4.0,
                  "experts": 4.0, "routed": 38.0, "token": 328.0},
    "gpt_oss": {"hidden": 10.0, "q": 8.15625, "kv": 0.0, "routed_width": 14.0, "routed_hidden": 4.0, "experts": 0.0,
                "routed": 36.0, "token": 196.0}}
"""Bytes a MoE decoder layer saves for its backward per token and per unit of each width, eager under bf16 autocast
with fp32 adapters, its experts on transformers' grouped_mm (the folded weight left out: it is per layer, not per
token): hidden, q = heads x head_dim, kv = kv_heads x head_dim, routed_width = top_k x expert width (the experts'
gate/up and activation outputs per routed row), routed_hidden = top_k x hidden (the routed rows in and out), experts
(the router's logits and probabilities), routed = top_k (ids, weights, sort indices), token = 1 (what does not
depend on the widths: ids, positions, the masks' rows). Counted with saved_tensors_hooks
on one-layer models whose widths differ one at a time (tests/test_memory_estimate.py recounts them); the other MoE
families take qwen3_moe's. qwen3-30b-a3b's widths: 229 KB per token (8192 tokens: 1.75 GiB a layer)."""
SPLIT_EXTRA = {"routed_hidden": 2.0, "routed": 24.0}
"""What the expert_lora lever's split arm saves per token beyond grouped_mm's counts (both families): the sorted
routed rows cast to the weights' dtype, kept for the LoRA factors' gradients."""
ACTIVATION_ARMS = ("full", "selective", "offload", "none")


def saved_per_token(config, dtype_bytes: int = 2, compiled: bool = False) -> float:
    """Bytes one dense decoder layer saves for its backward per token with no checkpointing (see
    SAVED_BYTES_PER_TOKEN), at `dtype_bytes` (the counted bf16 figures scaled by dtype_bytes / 2)."""
    s = shape(config)
    c = COMPILED_SAVED_BYTES_PER_TOKEN if compiled else SAVED_BYTES_PER_TOKEN
    widths = {"hidden": s["hidden"], "q": s["heads"] * s["head_dim"], "kv": s["kv_heads"] * s["head_dim"],
              "intermediate": s["intermediate"]}
    return sum(c[k] * w for k, w in widths.items()) * dtype_bytes / 2


def moe_saved_per_token(config, dtype_bytes: int = 2, folded_experts: bool = True) -> float:
    """Bytes one MoE decoder layer saves for its backward per token with no checkpointing (`MOE_SAVED_BYTES_PER_TOKEN`,
    plus `SPLIT_EXTRA` where the experts do not read the folded weight), at `dtype_bytes`; the folded weight itself is
    `folded_expert_bytes`."""
    s = shape(config)
    c = dict(MOE_SAVED_BYTES_PER_TOKEN.get(getattr(config, "model_type", None), MOE_SAVED_BYTES_PER_TOKEN["qwen3_moe"]))
    if not folded_experts:
        c = {k: v + SPLIT_EXTRA.get(k, 0.0) for k, v in c.items()}
    k = s["top_k"]
    widths = {"hidden": s["hidden"], "q": s["heads"] * s["head_dim"], "kv": s["kv_heads"] * s["head_dim"],
              "routed_width": k * s["expert_width"], "routed_hidden": k * s["hidden"], "experts": s["experts"],
              "routed": k, "token": 1}
    return sum(c[key] * w for key, w in widths.items()) * dtype_bytes / 2


def selective_per_token(config, dtype_bytes: int = 2) -> float:
    """Bytes one decoder layer keeps per token under the selective arm's policy (`workbench.opts.activations.Policy`:
    the outputs of aten mm / addmm / bmm wider than the LoRA rank, and of the attention kernels): its input, the
    outputs of q, k, v, o and of attention (its output, and a float32 log-sum-exp per head of sdpa's and flex's
    kernels), and then
    - a dense layer: gate, up and down (2 x intermediate + hidden);
    - a MoE layer: the router's logits (one per expert). Its experts run as grouped GEMMs (aten._grouped_mm: split,
      transformers' grouped_mm), which the policy does not save: they are recomputed with the pointwise work, so
      nothing per routed row is kept. transformers' per-expert `eager` loop runs aten mm per expert, which the
      policy saves: top_k x (2 x expert width + hidden) more per token, not charged here (the levers path runs
      selective with its experts on split).
    Counted with saved_tensors_hooks' complement, the storages alive after the forward (tests/retained_bytes.py), on
    one-layer qwen3-moe and gpt-oss models of two shapes (tests/test_memory_estimate.py): exact per token, apart from
    what every layer shares (the rotary tables, position ids). gpt-oss's eager attention saves no log-sum-exp (its
    scores instead, H x T x T per layer: not charged here; the path runs it on flex)."""
    s = shape(config)
    h, q, kv = s["hidden"], s["heads"] * s["head_dim"], s["kv_heads"] * s["head_dim"]
    mlp = s["experts"] if s["experts"] else 2 * s["intermediate"] + h
    return (h + (q + 2 * kv + h) + q + mlp) * dtype_bytes + 4 * s["heads"]


def folded_expert_bytes(config, dtype_bytes: int) -> int:
    """Bytes of one MoE layer's folded expert weights (peft's W + delta of gate_up and down: E x 3 x hidden x expert
    width), what a layer keeps for its backward where its experts read the folded weight; 0 for a dense model."""
    s = shape(config)
    return s["experts"] * 3 * s["hidden"] * s["expert_width"] * dtype_bytes


def folded_experts_of(experts_implementation: str | None) -> bool:
    """Whether experts implementation `experts_implementation` (None: transformers' default, grouped_mm) reads peft's
    folded expert weight: every one but the expert_lora lever's split (`wb_split_lora*`)."""
    return not str(experts_implementation or "").startswith("wb_split_lora")


def activation_bytes(config, tokens: int, layers: int, dtype_bytes: int, activations: str,
                     compiled: bool = False, folded_experts: bool = True) -> tuple[int, int]:
    """(device bytes, pinned host bytes) of the saved activations of `layers` layers at `tokens` under activations arm
    `activations` (`ACTIVATION_ARMS`; the module docstring); `folded_experts`: a MoE layer's experts read peft's
    folded weight (and keep it for the backward)."""
    s = shape(config)
    T, h, b, L = tokens, s["hidden"], dtype_bytes, layers
    if activations not in ACTIVATION_ARMS:
        raise ValueError(f"unknown activations arm {activations!r}; arms: {', '.join(ACTIVATION_ARMS)}")
    if s["experts"]:
        layer = int(T * moe_saved_per_token(config, b, folded_experts))
        layer += folded_expert_bytes(config, b) if folded_experts else 0
    else:
        layer = int(T * saved_per_token(config, b, compiled))
    if activations == "none":
        return L * layer, 0
    if activations == "full":
        return L * T * h * b, 0
    if activations == "selective":
        # the policy recomputes the fold (not a GEMM): no layer keeps it but the one recomputing
        return int(L * T * selective_per_token(config, b)) + layer, 0
    return min(2, L) * layer, max(L - 2, 0) * layer


def estimate(config, tokens: int, *, layers: int | None = None, dtype_bytes: int = 4, checkpointing: bool = True,
             eager_attention: bool = False, weight_shards: int = 1, lora_rank: int = 16,
             adapter_bytes: int = 4, activations: str | None = None, compiled: bool = False,
             folded_experts: bool = True) -> Estimate:
    """The estimate for one step of `tokens` packed tokens on one device (see the module docstring);
    `activations`: the activations arm (None: `full` with `checkpointing`, else `none`), `compiled`: the layers
    regionally compiled; `weight_shards`: the ranks the weights are sharded over (FSDP), each holding its share;
    `adapter_bytes`: the LoRA adapters' element size (4 unless --precision bf16 puts them in the base dtype);
    `folded_experts`: a MoE model's experts read peft's folded weight (`folded_experts_of`)."""
    s = shape(config)
    L = layers if layers is not None else s["layers"]
    T, h, b = tokens, s["hidden"], dtype_bytes
    arm = activations or ("full" if checkpointing else "none")
    act, host = activation_bytes(config, T, L, b, arm, compiled, folded_experts)
    logits = T * s["vocab"] * LOSS_BYTES_PER_LOGIT
    scores = s["heads"] * T * T * (3 * b if s["sinks"] else EAGER_BYTES_PER_SCORE)
    eager = scores + s["masks"] * T * T * b if eager_attention else 0
    lora = LORA_STATE_COPIES * lora_params(config, lora_rank, L) * adapter_bytes // max(weight_shards, 1)
    return Estimate(weight_params(config, L) * b // max(weight_shards, 1), act, logits, eager, lora, host)


def estimate_for(args, device, config, tokens: int, layers: int | None, *, activations: str | None = None,
                 compiled: bool = False, attn: str | None = None, folded_experts: bool | None = None) -> Estimate:
    """`estimate` for a run's config (`workbench.ab.ab_config.ABConfig`: dtype, precision, LoRA rank, checkpointing,
    experts implementation) on `device`, under FSDP2 over $WORLD_SIZE ranks; `folded_experts` None: the run's
    --experts decides (`folded_experts_of`)."""
    if folded_experts is None:
        folded_experts = folded_experts_of(args.step.experts)
    from workbench.step import precision_mode as precision

    b = DTYPE_BYTES.get(args.step.dtype) or (2 if device.type == "cuda" else 4)
    adapter_b = b if precision.resolve(device.type, args.step.precision) == precision.BF16 else 4
    shards = int(os.environ.get("WORLD_SIZE", "1") or 1)
    return estimate(config, tokens, layers=layers, dtype_bytes=b, checkpointing=args.step.checkpointing,
                    eager_attention=(attn == "eager"), weight_shards=shards, lora_rank=args.step.lora_rank,
                    adapter_bytes=adapter_b, activations=activations, compiled=compiled,
                    folded_experts=folded_experts)


def host_ram_bytes() -> int | None:
    """The machine's physical memory (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def device_bytes(device, limit_gib: float | None = None) -> tuple[int | None, str]:
    """(the memory a step on `device` can use, its name): `limit_gib` when given (--memory-limit-gib), else a GPU's
    total memory (None where torch cannot query the device), or the host's RAM on a CPU."""
    if limit_gib is not None:
        return int(limit_gib * GIB), "--memory-limit-gib"
    if getattr(device, "type", str(device)) == "cuda":
        import torch
        try:
            return torch.cuda.get_device_properties(device).total_memory, "GPU memory"
        except (RuntimeError, AssertionError):  # no CUDA build / no such device: the memory is unknown
            return None, "GPU memory"
    return host_ram_bytes(), "host RAM"
