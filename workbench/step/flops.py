"""Model FLOPs of one LoRA training step, counted analytically from the HF config and the packed batch.

    # T = packed tokens, D = documents (lengths d), L = layers, H = hidden, Hq / Hkv = query / key-value heads,
    # hd = head dim, I = MLP (or expert) intermediate, V = vocab, E = experts, k = experts per token,
    # S = T*k routed rows, r = LoRA rank, W = sliding window

Conventions:

- A multiply-add is 2 FLOPs: a GEMM (m, n) x (n, p) is 2*m*n*p. Only matmul-type work is counted (linears, expert
  GEMMs, attention QK^T and PV, the LoRA fold of the fused experts); elementwise ops (norms, activations, rotary,
  softmax, residuals, bias adds, the loss) are left out. That is also what `torch.utils.flop_counter.FlopCounterMode`
  counts, which the tests compare against.
- Frozen base weights: forward 2*rows*in*out; backward input gradients only (another 2*rows*in*out), no weight
  gradient. The first decoder layer's q/k/v projections get no input gradient either: the embedding output does not
  require grad (frozen embeddings, no `enable_input_require_grads`), so autograd skips it (`embed_grad=True` when it
  does require grad).
- LoRA on a linear (rank r; `lora_A` in->r, `lora_B` r->out): forward 2*rows*r*(in+out); backward the input gradients
  and the weight gradients of both factors, 2x the forward (3x in all). Layer 0's q/k/v adapters skip `lora_A`'s
  input gradient, as their base does.
- LoRA on the fused experts (peft `target_parameters`, `expert_lora="peft_fold"`, what runs): peft folds the adapter
  into the expert stack, W' = W + s * B@A, one `baddbmm` of 2*E*in*out*r per parameter, evaluated `fold_evals` times
  per forward (a peft with `_LoraFactorsProxy`, 0.21 here: once by torch's `register_parametrization` consistency
  check and once by the experts' forward, so 2; an older peft builds the delta once, 1; `peft_fold_evals()`).
  W' requires grad, so the backward also computes the weight gradient of the stack on the routed rows (2*S*in*out)
  and back-propagates through the fold (2 bmms, 2 * 2*E*in*out*r). `expert_lora="factored"` counts an ideal
  per-row adapter instead (the 3x rule on S rows).
- Checkpointing (`checkpointing=True`: non-reentrant, every decoder layer, `workbench.step.harness.enable_checkpointing`):
  each decoder layer's forward runs again in the backward ("recompute"); the LM head and embeddings do not. With
  torch's checkpoint early stop (`early_stop=True`, torch's default) the recompute ends once the last tensor saved
  for the backward is rebuilt, so a dense-MLP layer's final GEMM is not recomputed: down_proj's `lora_B` (2*T*r*H)
  when down_proj is adapted, else the frozen down_proj itself (2*T*I*H). An MoE layer ends in the routing-weight
  multiply, which saves the experts' output: recomputed whole.
- Attention scores (QK^T and PV, per query head; GQA changes only the K/V projections, Hkv*hd wide), over P
  (query, key) pairs per layer, forward 2 matmuls = 4*P*hd*Hq:
  - `attention="block_diagonal"` (default): what flash / varlen / flex kernels compute on a packed batch, the
    causal pairs inside each document: P = sum_d d*(d+1)/2 (the FA papers' d^2/2 convention differs by d/2 per
    document); a sliding layer counts min(i+1, W) keys for query i (HF's mask keeps keys i-W < j <= i). Tile
    granularity (partly masked blocks computed whole) is ignored. This is the useful work, the one to report MFU on.
  - `attention="dense"`: what sdpa / eager with an explicit (T, T) mask compute, P = T^2 in every layer, sliding
    ones included (the mask is applied after the full QK^T).
  - `attention="causal"`: NeMo's convention (`causal_self_attn`: half the dense square), per document for a packed
    batch: P = sum_d d^2 / 2 (a sliding layer: `causal_pairs`, as NeMo counts GPT-OSS's window). It differs from
    block_diagonal by d/2 per document; use it to compare with figures NeMo publishes (`nemo_flops`).
  - `attention="auto"`: `attention_mode(config._attn_implementation)`.
  - backward: `attn_bwd_matmuls` score-sized matmuls (4: autograd through eager's matmuls, dQ dK dV dP; 5: fused
    kernels, flash / memory-efficient / CPU flash, that also recompute QK^T), so 2x or 2.5x the forward. Default:
    4 for eager implementations, else 5.
- MoE: the router H->E (forward and input gradient) on all T tokens, the experts' gate_up (H->2I) and down (I->H) on
  S = T*k routed rows. Qwen3-MoE layers in `mlp_only_layers` (or off `decoder_sparse_step`) have a dense MLP.
- LM head: H->V on all T tokens (HF computes the logits of every position), forward and input gradient.

`step_flops` returns each component with its forward / recompute / backward parts; `total` is what the hardware
executes (recompute included, HFU-style), `model` leaves the recompute out (MFU-style).

Two MFU conventions, side by side in every run (summary.json's `mfu` and `mfu_nemo`; `workbench lever_path`):
- ours (`mfu`): `step_flops(...)["model"]` with block-diagonal attention, as above: frozen weights get no weight
  gradient, each LoRA adapter its exact 3x, the attention backward 5 (fused) or 4 (eager) score-sized matmuls.
- NeMo AutoModel's (`mfu_nemo`, `nemo_flops`): the full-training FLOPs of the same tokens, 3 x forward (forward,
  input gradient, weight gradient of every linear), attention `causal` (d^2 / 2 per document), the LM head, no
  router, no LoRA matmuls; then x (2 + r) / 3 for LoRA with r = trainable / frozen parameters (its benchmark recipe:
  the weight-gradient third scaled by the trainable share).
"""
from __future__ import annotations

import re

PEAK_BF16_DENSE_TFLOPS: dict[str, float] = {
    # Hopper (H100 / H200 datasheets: 1,979 TFLOPS "with sparsity" for SXM, 1,671 for NVL, 1,513 for PCIe)
    "NVIDIA H100 80GB HBM3": 989.4,
    "NVIDIA H100 SXM": 989.4,
    "NVIDIA H100": 989.4,
    "NVIDIA H100 PCIe": 756.5,
    "NVIDIA H100 NVL": 835.5,
    "NVIDIA H800": 989.4,
    "NVIDIA H200": 989.4,
    "NVIDIA H200 NVL": 835.5,
    "NVIDIA GH200": 989.4,
    # Blackwell (HGX B200: 4.5 PFLOPS sparse per GPU; GB200 NVL72: 5 PFLOPS sparse per GPU)
    "NVIDIA B200": 2250.0,
    "NVIDIA GB200": 2500.0,
    # Ampere (A100 datasheet: 312 dense / 624 sparse, SXM and PCIe alike; A10: 125 / 250)
    "NVIDIA A100-SXM4-80GB": 312.0,
    "NVIDIA A100-SXM4-40GB": 312.0,
    "NVIDIA A100-PCIE-40GB": 312.0,
    "NVIDIA A100 80GB PCIe": 312.0,
    "NVIDIA A100": 312.0,
    "NVIDIA A10": 125.0,
    # Ada (L40S: 362.05 dense / 733 sparse; L40: 181.05 / 362.1; L4: 121 / 242)
    "NVIDIA L40S": 362.05,
    "NVIDIA L40": 181.05,
    "NVIDIA L4": 121.0,
    # AMD Instinct (MI300X: 1,307.4 dense bf16; MI325X the same)
    "AMD Instinct MI300X": 1307.4,
    "AMD Instinct MI325X": 1307.4,
}
"""Dense (no 2:4 sparsity) bf16 tensor-core peaks, TFLOP/s, from the vendors' datasheets (the "with sparsity"
figures halved where only those are printed), keyed by `torch.cuda.get_device_name()`. Boost clocks: a real step
reaches a sustained clock below them, so MFU against these is a lower bound."""

PEAK_HBM_TB_PER_S: dict[str, float] = {
    "NVIDIA H100 80GB HBM3": 3.35,
    "NVIDIA H100 SXM": 3.35,
    "NVIDIA H100 PCIe": 2.0,
    "NVIDIA H100 NVL": 3.9,
    "NVIDIA H200": 4.8,
    "NVIDIA H200 NVL": 4.8,
    "NVIDIA B200": 8.0,
    "NVIDIA A100-SXM4-80GB": 2.039,
    "NVIDIA A100-SXM4-40GB": 1.555,
    "AMD Instinct MI300X": 5.3,
}
"""HBM bandwidth, TB/s, from the vendors' datasheets, keyed by `torch.cuda.get_device_name()`: the rate a counted
bytes saving is divided by (`workbench.opts.lora_fusion.lever_prediction`); a step reaches less, so a prediction
from it is a lower bound on the time those bytes take."""

ATTENTION_MODES = ("block_diagonal", "dense", "causal")
_BLOCK_DIAGONAL_IMPLS = ("flash_attention_2", "flash_attention_3", "flex_attention", "paged_attention")
"""transformers' own implementations that skip masked blocks; every other HF one is dense on a packed batch."""
_EAGER_IMPLS = {"eager"}
"""Implementations whose backward is autograd through eager matmuls (4 score-sized matmuls, not 5)."""
_DECLARED: dict[str, str] = {}
"""{implementation name: attention count} of the attention functions an optimization registers outside transformers
(`declare_attention`: each module states its own, where it registers them)."""
COMPONENTS = ("attn_proj", "attn_scores", "mlp", "moe_experts", "router", "lm_head", "lora", "lora_experts")
PASSES = ("forward", "recompute", "backward")


def peak_tflops(device_name: str) -> float | None:
    """Dense bf16 peak (TFLOP/s) of a device name: the exact key, else the longest key found in the name (case
    blind, ending at a word boundary, so "NVIDIA L4" does not match an L40S); None when unknown (a CPU, say)."""
    if not device_name:
        return None
    if device_name in PEAK_BF16_DENSE_TFLOPS:
        return PEAK_BF16_DENSE_TFLOPS[device_name]
    name = device_name.lower()
    best = None
    for key in PEAK_BF16_DENSE_TFLOPS:
        if re.search(re.escape(key.lower()) + r"(?![0-9a-z])", name) and (best is None or len(key) > len(best)):
            best = key
    return PEAK_BF16_DENSE_TFLOPS[best] if best is not None else None


def declare_attention(modes: dict[str, str], *, eager: tuple[str, ...] = ()) -> None:
    """An attention implementation registered outside transformers states its count here, once, beside its
    registration (`workbench.opts.packing`, `workbench.opts.attention`): {name: "block_diagonal" | "dense"}, and the
    names whose backward is eager autograd (`eager`)."""
    bad = {k: v for k, v in modes.items() if v not in ATTENTION_MODES}
    if bad:
        raise ValueError(f"declare_attention: modes must be one of {ATTENTION_MODES}, got {bad}")
    _DECLARED.update(modes)
    _EAGER_IMPLS.update(eager)


def attention_mode(attn_implementation: str | None) -> str:
    """The `attention` count of an attention implementation on a packed batch: "block_diagonal" for the ones that
    skip masked blocks (flash / flex, and what an optimization declares so: `declare_attention`), "dense" for sdpa and
    eager with a (T, T) mask. (A batch of one document may reach sdpa as `is_causal` with no mask, which the fused
    kernels run causally: block_diagonal.)"""
    if attn_implementation in _DECLARED:
        return _DECLARED[attn_implementation]
    return "block_diagonal" if attn_implementation in _BLOCK_DIAGONAL_IMPLS else "dense"


def attention_bwd_matmuls(attn_implementation: str | None) -> int:
    """Score-sized matmuls of the attention backward (see the module docstring): 4 for eager autograd, else 5."""
    return 4 if attn_implementation in _EAGER_IMPLS else 5


def default_lora_targets() -> tuple[str, ...]:
    """What `workbench.step.models.add_lora` targets: the attention / MLP linears and the fused expert parameters."""
    from workbench.step.models import LORA_TARGET_EXPERT_PARAMETERS, LORA_TARGET_MODULES
    return tuple(LORA_TARGET_MODULES) + tuple(LORA_TARGET_EXPERT_PARAMETERS)


def peft_fold_evals() -> int:
    """Evaluations of the expert LoRA fold per forward with the installed peft (see the module docstring)."""
    try:
        from peft.tuners.lora import layer
    except ImportError:
        return 2
    return 2 if hasattr(layer, "_LoraFactorsProxy") else 1


def causal_pairs(d: int, window: int | None = None) -> int:
    """(query, key) pairs a causal document of d tokens attends, keys i-W < j <= i with a window W."""
    if window is None or window >= d:
        return d * (d + 1) // 2
    return window * (window + 1) // 2 + (d - window) * window


def attention_pairs(doc_lens: list[int], attention: str, window: int | None = None) -> int:
    """Score pairs of one attention layer over a packed batch (see `attention` in the module docstring)."""
    if attention == "dense":
        t = sum(doc_lens)
        return t * t
    if attention == "block_diagonal":
        return sum(causal_pairs(d, window) for d in doc_lens)
    if attention == "causal":  # NeMo: half the square per document (d^2 / 2, a half-integer sum kept exact x 2 below)
        return sum(d * d / 2 if window is None or window >= d else causal_pairs(d, window) for d in doc_lens)
    raise ValueError(f"attention must be one of {ATTENTION_MODES} or 'auto', got {attention!r}")


def linear_flops(rows: int, in_f: int, out_f: int, *, input_grad: bool = True) -> dict:
    """A frozen linear on `rows` rows: forward and backward (input gradient only) FLOPs."""
    f = 2 * rows * in_f * out_f
    return {"forward": f, "backward": f if input_grad else 0}


def lora_flops(rows: int, in_f: int, out_f: int, rank: int, *, input_grad: bool = True) -> dict:
    """A LoRA adapter (A: in->r, B: r->out) on `rows` rows: forward; backward = weight gradients of A and B plus the
    input gradients of B and (when the layer's input requires grad) of A: 2x the forward."""
    a, b = 2 * rows * in_f * rank, 2 * rows * rank * out_f
    return {"forward": a + b, "backward": a + 2 * b + (a if input_grad else 0)}


class _Acc:
    def __init__(self):
        self.c = {name: dict.fromkeys(PASSES, 0) for name in COMPONENTS}

    def add(self, comp: str, fwd: int, bwd: int, recompute: bool):
        self.c[comp]["forward"] += fwd
        if recompute:
            self.c[comp]["recompute"] += fwd
        self.c[comp]["backward"] += bwd


def _family(config) -> str:
    from workbench.step.models import family_of
    return family_of(config)


def step_flops(config, doc_lens: list[int], *, lora_rank: int, lora_targets=None, attention: str = "block_diagonal",
               checkpointing: bool = True, early_stop: bool = True, attn_bwd_matmuls: int | None = None,
               embed_grad: bool = False, expert_lora: str = "peft_fold", fold_evals: int | None = None) -> dict:
    """FLOPs of one forward + backward of a LoRA model on a packed batch with these document lengths.

    `config`: the HF config (`workbench.step.models.load_config`, or `model.config`); `lora_targets`: module names
    (`q_proj`, ...) and fused expert parameters (`mlp.experts.gate_up_proj`, ...), default those of
    `workbench.step.models.add_lora`. Returns {component: {"forward", "recompute", "backward", "total"}} for
    `COMPONENTS`, plus "by_pass" ({pass: FLOPs}), "total" (all passes), "model" (forward + backward, no recompute),
    "tokens", "attention" (the count used), "attn_bwd_matmuls", "note". See the module docstring for the rules.
    """
    if not doc_lens or any(int(d) <= 0 for d in doc_lens):
        raise ValueError(f"doc_lens must be positive and non-empty, got {doc_lens}")
    if lora_rank is None or lora_rank <= 0:
        raise ValueError(f"lora_rank must be positive, got {lora_rank}")
    if expert_lora not in ("peft_fold", "factored"):
        raise ValueError(f"expert_lora must be 'peft_fold' or 'factored', got {expert_lora!r}")
    doc_lens = [int(d) for d in doc_lens]
    impl = getattr(config, "_attn_implementation", None)
    if attention == "auto":
        attention = attention_mode(impl)
    if attention not in ATTENTION_MODES:
        raise ValueError(f"attention must be one of {ATTENTION_MODES} or 'auto', got {attention!r}")
    if attn_bwd_matmuls is None:
        attn_bwd_matmuls = attention_bwd_matmuls(impl)
    targets = set(default_lora_targets() if lora_targets is None else lora_targets)
    expert_targets = {t.rsplit(".", 1)[-1] for t in targets if "experts." in t}
    r = lora_rank

    fam = _family(config)
    if fold_evals is None and expert_lora == "peft_fold" and expert_targets and fam not in ("llama", "qwen3"):
        fold_evals = peft_fold_evals()  # imports peft (~1 s): only where an expert LoRA fold is counted
    T = sum(doc_lens)
    Hd = config.hidden_size
    hq = config.num_attention_heads
    hkv = getattr(config, "num_key_value_heads", None) or hq
    hd = getattr(config, "head_dim", None) or Hd // hq
    L = config.num_hidden_layers
    V = config.vocab_size
    layer_types = getattr(config, "layer_types", None)
    window = getattr(config, "sliding_window", None)

    acc = _Acc()
    rc = checkpointing

    def linear(comp: str, name: str, rows: int, i: int, o: int, input_grad: bool = True, last: bool = False):
        """`last`: the layer's final linear; with early stop its trailing GEMM is not recomputed (its output is
        saved by nothing): lora_B when adapted (lora_A's output is saved for lora_B's weight gradient), else the
        base GEMM (a frozen weight's backward needs only the weight)."""
        lora = name in targets
        base = linear_flops(rows, i, o, input_grad=input_grad)
        acc.add(comp, base["forward"], base["backward"], rc and not (last and early_stop and not lora))
        if lora:
            lo = lora_flops(rows, i, o, r, input_grad=input_grad)
            acc.add("lora", lo["forward"], lo["backward"], rc)
            if rc and last and early_stop:
                acc.c["lora"]["recompute"] -= 2 * rows * r * o

    for li in range(L):
        # attention: q, k, v (GQA: k, v are Hkv*hd wide), o; layer 0's inputs need no gradient
        qkv_grad = li > 0 or embed_grad
        linear("attn_proj", "q_proj", T, Hd, hq * hd, qkv_grad)
        linear("attn_proj", "k_proj", T, Hd, hkv * hd, qkv_grad)
        linear("attn_proj", "v_proj", T, Hd, hkv * hd, qkv_grad)
        linear("attn_proj", "o_proj", T, hq * hd, Hd)
        sliding = layer_types is not None and layer_types[li] == "sliding_attention" and window
        pairs = attention_pairs(doc_lens, attention, window if sliding else None)
        one = round(2 * pairs) * hd * hq  # one score-sized matmul over all query heads (2 * pairs: an integer)
        acc.add("attn_scores", 2 * one, attn_bwd_matmuls * one, rc)

        # MLP
        if fam in ("llama", "qwen3") or (fam == "qwen3_moe" and not _qwen3_moe_sparse(config, li)):
            inter = config.intermediate_size
            linear("mlp", "gate_proj", T, Hd, inter)
            linear("mlp", "up_proj", T, Hd, inter)
            linear("mlp", "down_proj", T, inter, Hd, last=True)
            continue
        if fam == "qwen3_moe":
            E, k, inter = config.num_experts, config.num_experts_per_tok, config.moe_intermediate_size
        else:  # gpt_oss
            E, k, inter = config.num_local_experts, config.num_experts_per_tok, config.intermediate_size
        S = T * k
        router = linear_flops(T, Hd, E)
        acc.add("router", router["forward"], router["backward"], rc)
        for pname, i, o in (("gate_up_proj", Hd, 2 * inter), ("down_proj", inter, Hd)):
            base = linear_flops(S, i, o)
            acc.add("moe_experts", base["forward"], base["backward"], rc)
            if pname not in expert_targets:
                continue
            if expert_lora == "factored":
                lo = lora_flops(S, i, o, r)
                acc.add("lora_experts", lo["forward"], lo["backward"], rc)
            else:
                fold = 2 * E * i * o * r
                acc.add("lora_experts", fold_evals * fold, 2 * S * i * o + 2 * fold, rc)

    head = linear_flops(T, Hd, V)
    acc.add("lm_head", head["forward"], head["backward"], False)

    out: dict = {}
    for name, parts in acc.c.items():
        out[name] = dict(parts, total=sum(parts.values()))
    by_pass = {p: sum(acc.c[n][p] for n in COMPONENTS) for p in PASSES}
    out["by_pass"] = by_pass
    out["total"] = sum(by_pass.values())
    out["model"] = by_pass["forward"] + by_pass["backward"]
    out["tokens"] = T
    out["attention"] = attention
    out["attn_bwd_matmuls"] = attn_bwd_matmuls
    out["note"] = (f"matmul FLOPs (multiply-add = 2) of one {'checkpointed ' if rc else ''}LoRA step (r={r}) on "
                   f"{len(doc_lens)} documents, {T} tokens; attention scores {attention} "
                   f"({'causal pairs per document' if attention == 'block_diagonal' else 'T^2 per layer'}, backward "
                   f"{attn_bwd_matmuls} matmuls); frozen base: input gradients only; expert LoRA {expert_lora}"
                   f"{f' (fold x{fold_evals} per forward)' if expert_lora == 'peft_fold' and fold_evals else ''}; "
                   "elementwise ops (norms, activations, rotary, softmax, loss) not counted")
    return out


def _qwen3_moe_sparse(config, li: int) -> bool:
    """Qwen3MoeDecoderLayer's rule: a sparse MoE block unless in mlp_only_layers or off decoder_sparse_step."""
    return (li not in (getattr(config, "mlp_only_layers", None) or [])
            and config.num_experts > 0 and (li + 1) % getattr(config, "decoder_sparse_step", 1) == 0)


def throughput(flops: dict | float, seconds: float, device_name: str | None = None) -> dict:
    """Achieved TFLOP/s of a step and its utilization of the device's dense bf16 peak.

    `flops`: a `step_flops` result (then "tflops" / "mfu" use its "model" FLOPs, recompute left out, and
    "hfu_tflops" / "hfu" its "total") or a number of FLOPs. Utilizations are None when the device is unknown.
    """
    if seconds <= 0:
        raise ValueError(f"seconds must be positive, got {seconds}")
    peak = peak_tflops(device_name) if device_name else None
    if isinstance(flops, dict):
        model, total = flops["model"], flops["total"]
    else:
        model = total = float(flops)
    tf, htf = model / seconds / 1e12, total / seconds / 1e12
    return {"tflops": tf, "mfu": tf / peak if peak else None, "hfu_tflops": htf, "hfu": htf / peak if peak else None,
            "peak_tflops": peak}


def nemo_flops(config, doc_lens: list[int], *, lora_params: int | None = None,
               frozen_params: int | None = None) -> dict:
    """NeMo AutoModel's FLOPs of one step on these documents (see the module docstring): `full` = 3 x the forward
    of every linear (q, k, v, o; gate, up, down or each token's k experts' gate_up and down; the LM head) and the
    attention scores counted `causal`; `lora_factor` = (2 + r) / 3 with r = lora_params / frozen_params (1.0 without
    counts: full training); `model` = full x lora_factor. Packed documents are counted each on its own, as NeMo's
    per-sequence formula counts each of its sequences."""
    if not doc_lens or any(int(d) <= 0 for d in doc_lens):
        raise ValueError(f"doc_lens must be positive and non-empty, got {doc_lens}")
    doc_lens = [int(d) for d in doc_lens]
    fam = _family(config)
    T = sum(doc_lens)
    Hd, hq = config.hidden_size, config.num_attention_heads
    hkv = getattr(config, "num_key_value_heads", None) or hq
    hd = getattr(config, "head_dim", None) or Hd // hq
    layer_types = getattr(config, "layer_types", None)
    window = getattr(config, "sliding_window", None)
    fwd = 0
    for li in range(config.num_hidden_layers):
        fwd += 2 * T * Hd * (2 * hq * hd + 2 * hkv * hd)  # q, o; k, v
        sliding = layer_types is not None and layer_types[li] == "sliding_attention" and window
        fwd += 2 * round(2 * attention_pairs(doc_lens, "causal", window if sliding else None)) * hd * hq  # QK^T, PV
        if fam in ("llama", "qwen3") or (fam == "qwen3_moe" and not _qwen3_moe_sparse(config, li)):
            fwd += 2 * T * 3 * Hd * config.intermediate_size
        elif fam == "qwen3_moe":
            fwd += 2 * T * config.num_experts_per_tok * 3 * Hd * config.moe_intermediate_size
        else:  # gpt_oss
            fwd += 2 * T * config.num_experts_per_tok * 3 * Hd * config.intermediate_size
    fwd += 2 * T * Hd * config.vocab_size
    full = 3 * fwd
    ratio = (lora_params / frozen_params) if lora_params is not None and frozen_params else None
    factor = 1.0 if ratio is None else (2 + ratio) / 3
    return {"full": full, "lora_factor": factor, "param_ratio": ratio, "model": full * factor}


def param_counts(model) -> dict:
    """{"lora_params", "frozen_params"}: the model's trainable and frozen parameter elements (NeMo's r)."""
    seen, lora, frozen = set(), 0, 0
    for p in model.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        if p.requires_grad:
            lora += p.numel()
        else:
            frozen += p.numel()
    return {"lora_params": lora, "frozen_params": frozen}


def arm_batch_flops(config, doc_lens: list[int], *, attn_implementation: str | None, lora_rank: int,
                    checkpointing: bool = True, attention: str | None = None, lora_params: int | None = None,
                    frozen_params: int | None = None) -> dict:
    """One batch's FLOPs as a run records them per arm (summary.json's `flops_per_batch`): `model` = the useful work
    (block-diagonal attention, recompute left out: what MFU is of, whatever the arm ran), `total` = what the arm
    executed (its attention implementation's count, `attention_mode`, or `attention` where the arm's module states
    it: recompute included, HFU), `attention` = that count, `nemo` = NeMo's convention (`nemo_flops`, with the
    model's parameter counts where given: `param_counts`)."""
    mode = attention or attention_mode(attn_implementation)
    kw = dict(lora_rank=lora_rank, checkpointing=checkpointing, attn_bwd_matmuls=attention_bwd_matmuls(
        attn_implementation))
    done = step_flops(config, doc_lens, attention=mode, **kw)
    useful = done if mode == "block_diagonal" else step_flops(config, doc_lens, attention="block_diagonal", **kw)
    nemo = nemo_flops(config, doc_lens, lora_params=lora_params, frozen_params=frozen_params)["model"]
    return {"model": useful["model"], "total": done["total"], "attention": mode, "nemo": nemo}


def for_comparison(model: str, layers: int | None, tokens: int, attn: str | None, *, lengths: str, batches: int,
                   seed: int, lora_rank: int, checkpointing: bool = True, experts: str | None = None,
                   doc_lens: list[list[int]] | None = None) -> list[dict]:
    """`arm_batch_flops` of each distinct batch of an A/B comparison, from its written document lengths (`doc_lens`,
    summary.json's `batches`), or, for a run made before they were written, its batches rebuilt as `workbench.ab`
    built them (`make_batches` over meta.json's --lengths and seed: needs the length source's files on this machine).
    `attn`: the attention implementation that ran."""
    from workbench.step.models import load_config

    config = load_config(model, layers, None, experts)
    if doc_lens is None:
        from workbench.step.data import make_batches
        doc_lens = [b.doc_lens for b in make_batches(lengths, tokens, batches, config.vocab_size, seed=seed)]
    return [arm_batch_flops(config, d, attn_implementation=attn or config._attn_implementation, lora_rank=lora_rank,
                            checkpointing=checkpointing) for d in doc_lens]


def arm_throughput(batch_flops: list[dict], samples: list[dict], device_name: str | None) -> dict:
    """Model FLOPs per step, achieved TFLOP/s, MFU (of `model`, the useful work) and HFU (of `total`, what ran) of one
    arm over its timed samples (each sample's batch counted with its own FLOPs: sum of FLOPs / sum of step times);
    `batch_flops`: `arm_batch_flops` per batch."""
    if not batch_flops or not samples:
        return {}
    model = sum(batch_flops[s["batch"]]["model"] for s in samples)
    total = sum(batch_flops[s["batch"]]["total"] for s in samples)
    seconds = sum(s["step_ms"] for s in samples) / 1e3
    t = throughput({"model": model, "total": total}, seconds, device_name)
    out = {"model_tflop_per_step": model / len(samples) / 1e12, "achieved_tflops": t["tflops"], "mfu": t["mfu"],
           "hfu": t["hfu"], "peak_tflops": t["peak_tflops"], "attention_flops": batch_flops[0]["attention"]}
    if all("nemo" in b for b in batch_flops):
        nemo = sum(batch_flops[s["batch"]]["nemo"] for s in samples)
        out["nemo_tflop_per_step"] = nemo / len(samples) / 1e12
        out["mfu_nemo"] = throughput(nemo, seconds, device_name)["mfu"]
    return out
