"""MoE routing: HF's per-expert loop vs argsort + one count vs sync-free grouped GEMM.

    # N = tokens, k = experts per token, S = N*k routed rows, E = experts, H = hidden, I = expert intermediate

Arms, registered through transformers' `ExpertsInterface` and switched with `model.set_experts_implementation`
(the same hook in transformers 5.17 and 5.23; `self` is the `@use_experts_implementation` experts module, whose
flags `is_transposed`, `has_bias`, `has_gate`, `has_post_expert_norm` say how its weights are laid out):

- `eager` (baseline): transformers' own per-expert loop, as shipped (`experts_implementation="eager"`). Per MoE layer
  and pass: 1 `nonzero` + per expert hit a `==` test, a `torch.where` and 0-d-tensor weight indexing (`.item()`):
  1 + 7*E_hit syncs for GPT-OSS (4 indexed parameters), 1 + 5*E_hit for Qwen3-MoE (2).
- `sort_bincount` (optimized, Unsloth #535): stable argsort of the expert ids, per-expert counts on the device
  (`histc`; CUDA `bincount` would read min/max back twice more), ONE `.tolist()`, per-expert matmuls over
  contiguous slices of the sorted rows, empty experts skipped. 1 sync per layer and pass.
- `sort_split` (opt-in: --arms; a mechanism probe): `sort_bincount` with the sorted rows taken by one
  `split` instead of a slice per expert. Same forward, same syncs, bitwise the same gradients; its backward writes
  one (S,H) gradient where the slices' write E_hit of them (`slice_backward` zero-fills the whole input each time).
  Its measured speedups over eager, beside sort_bincount's: the MoE backward runs' COMMAND.txt under profiles/.
- `grouped`: sync-free. Stable sort, `histc` counts, `cumsum` offsets kept on the device, one grouped GEMM per
  projection: `torch._grouped_mm` / `F.grouped_mm` where it is sync-free (bf16 on sm90/sm100 CUDA; on CPU for
  fp32/bf16/fp16 with 16-byte-aligned strides), else the Triton kernel (`workbench.kernels.grouped_gemm`), else (CPU,
  other dtypes) a dense masked loop over experts. Option `gemm="auto"|"torch"|"triton"|"dense"`. 0 syncs.
- `hf_grouped_mm` (the anchor): transformers' own `experts_implementation="grouped_mm"`, its default for these
  models, as shipped: what a user would pick instead of our arms. Sync-free too.
- `liger_experts` (opt-in: --arms): Liger-Kernel's fused MoE (`LigerFusedMoEFunction`, what its `LigerExperts`
  runs: gather + grouped GEMM + SwiGLU fused, token aggregation, a backward that recomputes instead of caching) over
  the experts' `gate_up_proj` / `down_proj` as the module reads them (peft's folded W + delta under LoRA). Qwen3-MoE's
  SwiGLU experts only (GPT-OSS's are custom: interleaved gate/up, clamp, biases; Liger's own gpt-oss patch leaves
  them alone), a CUDA device (Triton), and liger-kernel installed (`pip install liger-kernel`): else refused in one
  line.
- `hf_batched_mm` (opt-in, never in the defaults): transformers' `batched_mm`, which gathers one weight matrix per
  routed row: S x H x 2I elements for gate_up alone. Refused by `unsupported` when that would not fit the device.

All arms compute the same function as `eager` (same weights, gate and bias handling; the per-token sum over k runs
in a different order, so bf16 agrees within dtype tolerance). LoRA on the fused expert parameters (peft
`target_parameters`) works with every arm: peft parametrizes `gate_up_proj` / `down_proj` around the experts'
forward, and the functions here read the parameters through the module like HF's own do.

Expert ids outside [0, E) raise `WorkbenchError`: `sort_bincount` checks its host counts (free); `grouped` checks on
the host for CPU tensors and with `torch._assert_async` (a device-side assert, no sync) on CUDA.

Use: `handle = workbench.opts.apply(model, "moe", "grouped", gemm="triton")`; `handle.revert()` restores the
model's previous experts implementation.

Dose (`apply(model, "sort_bincount", dose=j)`, for `workbench.ab.dose`): `sort_bincount` in the first j of the L MoE
layers, HF's eager loop in the rest (one experts function, `wb_moe_dose`, picks per layer). j = 0 runs and syncs as
`eager`, j = L as `sort_bincount`; each unit removes that layer's 7*E_hit (GPT-OSS) syncs per pass.
"""
from __future__ import annotations

import functools
import importlib.util

import torch

from workbench.errors import UnsupportedArm, WorkbenchError
from workbench.instrument import state
from workbench.instrument.ranges import span
from workbench.instrument.syncs import host_only
from workbench.step import models
from workbench.step.models import MOE_FAMILIES, base_model_of, family_of
from workbench.opts import Handle

SPEC = {"order": 3, "apply_order": 2, "savings": "workbench.opts.moe_savings",
        "help": "eager (baseline), sort_bincount (optimized), grouped (sync-free: torch._grouped_mm, or a Triton "
                "kernel where that is missing), hf_grouped_mm (transformers' own grouped_mm: the anchor), "
                "hf_batched_mm, sort_split (opt-in: --arms only; sort_split is sort_bincount with one split, the probe of "
                "its backward)",
        "cpu": {"model": "tiny-gpt-oss"}, "gpu": {"model": "gpt-oss-20b", "layers": 4, "tokens": 8192},
        "all_variants": ("grouped", "hf_grouped_mm"), "families": ("qwen3_moe", "gpt_oss")}
"""What the CLIs say of this optimization (`workbench.opts.registry`): arms help, default shapes, and for `--opt all`
the floor (our sync-free grouped experts) and the anchor (transformers' own grouped_mm) in place of the routing fix."""

ARMS = ("eager", "sort_bincount", "grouped", "hf_grouped_mm", "hf_batched_mm", "liger_experts", "sort_split")
BASELINE = "eager"
OPTIMIZED = "sort_bincount"
OPT_IN_ARMS = ("hf_batched_mm", "liger_experts", "sort_split")
TRANSFORMERS_DEFAULT = "hf_grouped_mm"
"""transformers' default experts implementation (`grouped_mm`, sync-free): what a recommendation must beat."""
SLOWER_THAN_DEFAULT = {
    "eager": "the per-expert loop: gpt-oss-20b 4 L 8k, 1870 ms a step against hf_grouped_mm's 1310 on an H100 "
             "(profiles/2026-11-23_h100_verdicts/ab_traced), 1644 against 1204 on an H200",
    "sort_bincount": "a fix of the eager loop, not of grouped_mm: gpt-oss-20b 4 L 8k, 1672 ms a step against "
                     "hf_grouped_mm's 1310 on an H100 (profiles/2026-11-23_h100_verdicts/ab_traced), 1481 against "
                     "1204 on an H200"}
"""Arms measured slower than TRANSFORMERS_DEFAULT: `apply_optimizations` warns once when one is asked for."""
"""Arms run only when named (--arms): hf_batched_mm would need ~1 TiB at the GPU default shapes; liger_experts needs
liger-kernel and a GPU; sort_split is a probe of sort_bincount's backward, not a fix the seeds name."""
GEMMS = ("auto", "torch", "triton", "dense")

_NO_TRITON = ("gemm='triton' needs the triton package, which is not installed: pip install 'workbench[triton]' "
              "(Linux), or use gemm='auto', 'torch' or 'dense'")

DOSE = {"arm": "sort_bincount", "unit": "MoE layers switched to sort_bincount"}
"""The dose-response (`workbench.ab.dose`): the arm that takes `dose=j`, and what one unit of j is."""
DOSE_IMPL = "wb_moe_dose"

IMPL_NAMES = {"eager": "eager", "sort_bincount": "wb_sort_bincount", "grouped": "wb_grouped",
              "hf_grouped_mm": "grouped_mm", "hf_batched_mm": "batched_mm", "liger_experts": "wb_liger_experts",
              "sort_split": "wb_sort_split"}
"""Names in transformers' ExpertsInterface (grouped with a forced gemm: `wb_grouped_<gemm>`)."""


# --- shared pieces --------------------------------------------------------------------------------------------

def _check_layout(self) -> None:
    if getattr(self, "_is_expert_parallel", False):
        raise UnsupportedArm("expert-parallel experts (sentinel expert ids) are not supported by the workbench arms")


def _expert_params(self):
    """(w_up_EKN, b_up_EN | None, w_down_EIH, b_down_EH | None), oriented so that `x @ w[e]` applies expert e.

    Read once per forward: under peft these are the LoRA-adjusted weights, rebuilt by its parametrization.
    """
    has_gate = getattr(self, "has_gate", True)
    has_bias = getattr(self, "has_bias", False)
    w_up = self.gate_up_proj if has_gate else self.up_proj
    b_up = (self.gate_up_proj_bias if has_gate else self.up_proj_bias) if has_bias else None
    w_down = self.down_proj
    b_down = self.down_proj_bias if has_bias else None
    if not getattr(self, "is_transposed", False):  # stored (E, out, in), as nn.Linear: use the transposed view
        w_up, w_down = w_up.transpose(1, 2), w_down.transpose(1, 2)
    return w_up, b_up, w_down, b_down


def activation(self, h):
    """GPT-OSS: interleaved gate/up, clamp 7.0, alpha 1.702 (its own `_apply_gate`); Qwen3-MoE: chunked silu."""
    return self._apply_gate(h) if getattr(self, "has_gate", True) else self.act_fn(h)


def _count_experts_no_sync(ids_S: torch.Tensor, E: int) -> torch.Tensor:
    """Tokens per expert, on the device, without a host read (CUDA `bincount` reads min and max back).

    Ids outside [0, E) are not counted (so the counts sum to less than S). Float histc is exact below 2**24 rows;
    CUDA gets int input as transformers does (deterministic mode accepts only int there, only float on CPU).
    """
    src = ids_S.float() if ids_S.device.type in ("cpu", "mps") else ids_S.int()
    return torch.histc(src, bins=E, min=0, max=E - 1)


def _range_error(E: int, counted: int, S: int) -> WorkbenchError:
    return WorkbenchError(f"MoE router returned expert ids outside [0, {E}): {S - counted} of {S} routed rows; "
                          f"check the router (num_experts={E}) or the model config")


def _device_assert(cond: torch.Tensor, msg: str) -> None:
    """A device-side assert: no host read; a failure surfaces at the next sync as a CUDA error."""
    try:
        torch._assert_async(cond, msg)
    except NotImplementedError:  # builds without the message overload on this device
        torch._assert_async(cond)


def combine(self, y_SH, order_S, top_k_weights_Nk, N: int, k: int, dtype):
    """Routing weights, back to token order, sum over each token's k experts (deterministic; no atomics)."""
    if getattr(self, "has_post_expert_norm", False):
        y_SH = self.post_expert_norm(y_SH)
    w_S = top_k_weights_Nk.reshape(-1)[order_S]
    y_SH = y_SH * w_S.unsqueeze(-1).to(y_SH.dtype)
    y_SH = y_SH.new_empty(y_SH.shape).index_copy(0, order_S, y_SH)
    return y_SH.view(N, k, -1).sum(dim=1).to(dtype)


# --- sort_bincount: one host read per layer (Unsloth #535) -------------------------------------------------------

def sort_bincount_experts_forward(self, hidden_states, top_k_index, top_k_weights, *, split: bool = False):
    """Stable argsort + device counts + ONE `.tolist()` + per-expert matmuls over contiguous slices.

    hidden_states (N,H), top_k_index (N,k), top_k_weights (N,k) -> (N,H). Experts with no rows are skipped.
    split: take the rows with one `split` (the `sort_split` arm) instead of a slice per expert (#535's own form). The
    same function and the same gradients, bitwise; only the backward differs: each slice's backward writes a zeroed
    (S,H) gradient that autograd then sums (E_hit x S x H elements a layer), the split's backward one `cat` (S x H).
    """
    _check_layout(self)
    N, H = hidden_states.shape
    k = top_k_index.shape[-1]
    E = self.num_experts
    S = N * k
    ids_S = top_k_index.reshape(-1)
    order_S = torch.argsort(ids_S, stable=True)
    counts_E = _count_experts_no_sync(ids_S, E)
    with span(f"wb/{state.current_layer()}/moe/counts_to_host"):
        counts = [int(c) for c in counts_E.tolist()]  # the one sync of this arm
    if sum(counts) != S:
        raise _range_error(E, sum(counts), S)
    x_SH = hidden_states[order_S // k]
    w_up, b_up, w_down, b_down = _expert_params(self)
    hit = [(e, n) for e, n in enumerate(counts) if n]
    rows = x_SH.split([n for _, n in hit]) if split else None
    parts, start = [], 0
    for i, (e, n) in enumerate(hit):
        h = (rows[i] if split else x_SH[start:start + n]) @ w_up[e]
        if b_up is not None:
            h = h + b_up[e]
        y = activation(self, h) @ w_down[e]
        if b_down is not None:
            y = y + b_down[e]
        parts.append(y)
        start += n
    y_SH = torch.cat(parts) if parts else hidden_states.new_zeros((0, H))
    return combine(self, y_SH, order_S, top_k_weights, N, k, hidden_states.dtype)


def dose_experts_forward(self, hidden_states, top_k_index, top_k_weights):
    """The dose's experts function: `sort_bincount` in a layer the dose switched (`_wb_dose_on`), else HF's own
    eager loop (the class's undecorated forward)."""
    if getattr(self, "_wb_dose_on", False):
        return sort_bincount_experts_forward(self, hidden_states, top_k_index, top_k_weights)
    return type(self).forward.__wrapped__(self, hidden_states, top_k_index, top_k_weights)


def experts_modules(model) -> list:
    """The `@use_experts_implementation` experts module of each MoE decoder layer, in layer order."""
    from workbench.instrument.ranges import find_decoder_layers
    return [m for layer in find_decoder_layers(base_model_of(model)) for m in layer.modules()
            if hasattr(m, "has_gate") and hasattr(m, "num_experts")]


def dose_units(layers: int, checkpointing: bool = True) -> int:
    """The most units a dose takes: every MoE layer (all L of GPT-OSS and the tiny presets)."""
    return layers


# --- grouped: sync-free ---------------------------------------------------------------------------------------

def _aligned_16(t: torch.Tensor) -> bool:
    size = t.element_size()
    return t.data_ptr() % 16 == 0 and all((s * size) % 16 == 0 for s in t.stride() if s != 1)


def _torch_grouped_mm_fn():
    return getattr(torch.nn.functional, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)


def torch_grouped_mm_sync_free(x: torch.Tensor, w: torch.Tensor) -> bool:
    """Whether torch's grouped GEMM takes a sync-free path for these operands.

    CUDA: bf16 on sm90/sm100 (the CUTLASS path; sm80's fallback reads offsets back). CPU (torch >= 2.10):
    fp32/bf16/fp16 with 16-byte-aligned strides. The CPU answer is about correctness only: a CPU run has no syncs.
    """
    if _torch_grouped_mm_fn() is None or x.dtype != w.dtype or not (_aligned_16(x) and _aligned_16(w)):
        return False
    if x.device.type == "cuda":
        return x.dtype == torch.bfloat16 and torch.cuda.get_device_capability(x.device)[0] in (9, 10)
    if x.device.type == "cpu":
        return x.dtype in (torch.float32, torch.bfloat16, torch.float16)
    return False


def resolve_gemm(gemm: str, x: torch.Tensor, w: torch.Tensor) -> str:
    """auto -> torch where its grouped GEMM is sync-free, else triton on CUDA, else dense (CPU odd dtypes)."""
    if gemm not in GEMMS:
        raise WorkbenchError(f"unknown gemm {gemm!r} for the grouped MoE arm; choose from {', '.join(GEMMS)}")
    if gemm != "auto":
        return gemm
    if torch_grouped_mm_sync_free(x, w):
        return "torch"
    return "triton" if x.device.type == "cuda" else "dense"


def _dense_grouped_mm(x_SK, w_EKN, ids_S):
    """Sync-free fallback: every expert's matmul over all rows, masked to its own (E times the work)."""
    y = x_SK.new_zeros((x_SK.shape[0], w_EKN.shape[2]))
    for e in range(w_EKN.shape[0]):
        y = y + torch.where((ids_S == e).unsqueeze(1), x_SK @ w_EKN[e], 0)
    return y


def grouped_gemm(kind: str, x_SK, w_EKN, offs_E, ids_S):
    if kind == "torch":
        return _torch_grouped_mm_fn()(x_SK, w_EKN, offs=offs_E)
    if kind == "triton":
        try:
            from workbench.kernels.grouped_gemm import grouped_mm
        except ModuleNotFoundError as e:  # triton is an optional extra (CUDA builds of torch bring it)
            if (e.name or "").split(".")[0] != "triton":
                raise
            raise UnsupportedArm(_NO_TRITON) from None
        return grouped_mm(x_SK, w_EKN, offs_E)
    if kind == "dense":
        return _dense_grouped_mm(x_SK, w_EKN, ids_S)
    raise WorkbenchError(f"unknown gemm kind {kind!r}")


def route_no_sync(self, hidden_states, top_k_index, check_routing: bool = True):
    """The routed rows sorted by expert, without a host read: (x_SH, ids_sorted_S, order_S, offs_E).

    Stable sort of the expert ids, `histc` counts and int32 `cumsum` offsets on the device (what a grouped GEMM
    takes). check_routing: ids outside [0, E) raise WorkbenchError (CPU: a host check, declared CPU-only) or trip a
    device-side assert (CUDA, no sync).
    """
    _check_layout(self)
    N = hidden_states.shape[0]
    k = top_k_index.shape[-1]
    E = self.num_experts
    S = N * k
    ids_S = top_k_index.reshape(-1)
    ids_sorted_S, order_S = torch.sort(ids_S, stable=True)
    counts_E = _count_experts_no_sync(ids_sorted_S, E)
    offs_E = torch.cumsum(counts_E, 0, dtype=torch.int32)
    if check_routing:
        if offs_E.device.type == "cpu":
            with host_only("routing range check: on CUDA a device-side assert, no sync"):
                counted = int(offs_E[-1]) if E > 0 else 0
            if counted != S:
                raise _range_error(E, counted, S)
        else:
            _device_assert(offs_E[-1] == S, "MoE router returned expert ids outside [0, num_experts)")
    return hidden_states[order_S // k], ids_sorted_S, order_S, offs_E


def grouped_experts_forward(self, hidden_states, top_k_index, top_k_weights, *, gemm: str = "auto",
                            check_routing: bool = True, info: dict | None = None):
    """Sort, device counts, cumsum offsets, grouped GEMMs: no host read (hidden (N,H), ids/weights (N,k) -> (N,H))."""
    N = hidden_states.shape[0]
    k = top_k_index.shape[-1]
    E = self.num_experts
    x_SH, ids_sorted_S, order_S, offs_E = route_no_sync(self, hidden_states, top_k_index, check_routing)
    ids_safe_S = ids_sorted_S.clamp(0, E - 1)  # bias gathers stay in bounds even with checks off
    w_up, b_up, w_down, b_down = _expert_params(self)
    w_up, w_down = w_up.to(x_SH.dtype), w_down.to(x_SH.dtype)  # no-ops unless the weights differ in dtype
    kind = resolve_gemm(gemm, x_SH, w_up)
    if info is not None:
        info["gemm_resolved"] = kind
    h = grouped_gemm(kind, x_SH, w_up, offs_E, ids_sorted_S)
    if b_up is not None:
        h = h + b_up[ids_safe_S]
    h = activation(self, h)
    y = grouped_gemm(kind, h, w_down, offs_E, ids_sorted_S)
    if b_down is not None:
        y = y + b_down[ids_safe_S]
    return combine(self, y, order_S, top_k_weights, N, k, hidden_states.dtype)


# --- liger_experts: Liger-Kernel's fused MoE ---------------------------------------------------------------------

_NO_LIGER = "liger_experts needs liger-kernel (pip install liger-kernel==0.8.5), which is not installed"


def liger_problem(model, device) -> str | None:
    """Why Liger's fused MoE cannot run these experts here (None: it can)."""
    if importlib.util.find_spec("liger_kernel") is None:
        return _NO_LIGER
    fam = family_of(base_model_of(model).config)
    if fam != "qwen3_moe":
        return (f"liger_experts takes SwiGLU experts without biases (Qwen3-MoE); {fam}'s experts are custom "
                "(GPT-OSS: interleaved gate/up, clamp, biases), which Liger's own patch leaves alone")
    dev = torch.device(device) if device is not None else next(model.parameters()).device
    if dev.type != "cuda":
        return "liger_experts: Liger's fused MoE is a Triton kernel for a GPU; no CPU path"
    return None


def liger_experts_forward(self, hidden_states, top_k_index, top_k_weights):
    """hidden (N,H), ids / weights (N,k) -> (N,H) through `LigerFusedMoEFunction` (gate_up (E,2I,H), down (E,H,I))."""
    from liger_kernel.ops.fused_moe import LigerFusedMoEFunction

    _check_layout(self)
    if getattr(self, "is_transposed", False) or getattr(self, "has_bias", False) or not getattr(self, "has_gate", True):
        raise UnsupportedArm("liger_experts: these experts are not Qwen3-MoE's (E, 2I, H) SwiGLU layout")
    w_up, w_down = self.gate_up_proj, self.down_proj  # under peft: the folded W + delta
    x = hidden_states.to(w_up.dtype)
    out = LigerFusedMoEFunction.apply(x, w_up, w_down.to(w_up.dtype), top_k_index.to(torch.int32),
                                      top_k_weights.to(w_up.dtype))
    return out.to(hidden_states.dtype)


# --- the opt-module contract ----------------------------------------------------------------------------------

def batched_mm_bytes(config, tokens: int) -> int:
    """What transformers' batched_mm gathers for gate_up in one MoE layer: a (H x 2I) weight per routed row."""
    dtype_bytes = 2 if str(getattr(config, "dtype", getattr(config, "torch_dtype", "bfloat16"))).endswith(
        ("bfloat16", "float16")) else 4
    k = config.num_experts_per_tok
    inter = getattr(config, "moe_intermediate_size", None) or config.intermediate_size
    return tokens * k * config.hidden_size * 2 * inter * dtype_bytes


def experts_model_problem(model, opt: str) -> str | None:
    """Why `--opt OPT` cannot swap this model's experts implementation (None: it can): not an MoE model of the
    workbench's families, or a transformers without ExpertsInterface."""
    try:
        fam = family_of(base_model_of(model).config)
    except WorkbenchError as e:
        return str(e)
    if fam not in MOE_FAMILIES:
        return f"--opt {opt} needs an MoE model ({', '.join(MOE_FAMILIES)}); this one is {fam}"
    try:
        from transformers.integrations.moe import ExpertsInterface  # noqa: F401
    except ImportError:
        return "this transformers has no ExpertsInterface (transformers >= 5 needed)"
    return None


def unsupported(arm: str, model, device, tokens: int | None = None) -> str | None:
    """Why this model/device cannot run `arm` (None: it can). Every arm runs on any device for MoE models, except
    hf_batched_mm where its gathered weights would not fit the device's memory (`tokens`: the batch's)."""
    if arm not in ARMS:
        return f"unknown arm {arm!r}; arms: {', '.join(ARMS)}"
    why = experts_model_problem(model, "moe")
    if why:
        return why
    if arm == "liger_experts":
        return liger_problem(model, device)
    if arm == "hf_batched_mm" and tokens and device is not None and torch.device(device).type == "cuda":
        need = batched_mm_bytes(base_model_of(model).config, tokens)
        free, _ = torch.cuda.mem_get_info(torch.device(device))
        if need > free:
            return (f"hf_batched_mm would gather {need / 2**30:.0f} GiB of expert weights per layer at {tokens} tokens "
                    f"({free / 2**30:.0f} GiB free): use hf_grouped_mm, or fewer --tokens")
    return None


def implementation_name(arm: str, gemm: str = "auto") -> str:
    if arm == "grouped" and gemm != "auto":
        return f"wb_grouped_{gemm}"
    return IMPL_NAMES[arm]


def register(arm: str, gemm: str = "auto", check_routing: bool = True, info: dict | None = None) -> str:
    """Register the arm's experts function in transformers' ExpertsInterface; returns its name."""
    from transformers.integrations.moe import ExpertsInterface

    name = implementation_name(arm, gemm)
    if arm == "sort_bincount":
        ExpertsInterface.register(name, sort_bincount_experts_forward)
    elif arm == "sort_split":
        ExpertsInterface.register(name, functools.partial(sort_bincount_experts_forward, split=True))
    elif arm == "grouped":
        ExpertsInterface.register(name, functools.partial(grouped_experts_forward, gemm=gemm,
                                                          check_routing=check_routing, info=info))
    elif arm == "liger_experts":
        ExpertsInterface.register(name, liger_experts_forward)
    return name


def apply(model, arm: str, gemm: str = "auto", check_routing: bool = True, dose: int | None = None) -> Handle:
    """Switch every MoE layer of `model` (HF or peft-wrapped) to `arm`; `handle.revert()` restores the previous one.

    gemm: grouped arm only, "auto" | "torch" | "triton" | "dense" (see the module docstring).
    check_routing: grouped arm only; False drops the out-of-range check (a device-side assert on CUDA).
    dose: sort_bincount arm only: switch the first `dose` MoE layers only (the module docstring).
    """
    why = unsupported(arm, model, None)
    if why is not None:
        raise UnsupportedArm(why)
    if dose is not None:
        return _apply_dose(model, arm, int(dose))
    if gemm not in GEMMS:
        raise WorkbenchError(f"unknown gemm {gemm!r}; choose from {', '.join(GEMMS)}")
    if arm != "grouped" and gemm != "auto":
        raise WorkbenchError(f"gemm={gemm!r} applies to the grouped arm only, not {arm!r}")
    if gemm == "triton" and importlib.util.find_spec("triton") is None:
        raise UnsupportedArm(_NO_TRITON)
    info: dict = {"gemm": gemm} if arm == "grouped" else {}
    return switch_experts(model, "moe", arm, register(arm, gemm, check_routing, info), info)


def _apply_dose(model, arm: str, dose: int) -> Handle:
    mods = experts_modules(model)
    if arm != DOSE["arm"] or not 0 <= dose <= len(mods):
        raise WorkbenchError(f"moe: dose takes the {DOSE['arm']} arm and 0..{len(mods)} (MoE layers), not {arm!r} "
                             f"with {dose}")
    from transformers.integrations.moe import ExpertsInterface

    ExpertsInterface.register(DOSE_IMPL, dose_experts_forward)
    for i, m in enumerate(mods):
        m._wb_dose_on = i < dose
    handle = switch_experts(model, "moe", arm, DOSE_IMPL, {"dose": dose})
    handle.undo.insert(0, lambda: [delattr(m, "_wb_dose_on") for m in mods if "_wb_dose_on" in vars(m)])
    return handle


def switch_experts(model, opt: str, arm: str, name: str, info: dict) -> Handle:
    """Switch the model to the registered experts implementation `name` (transformers' set_experts_implementation),
    checked; the handle switches back."""
    base = base_model_of(model)
    prev = base.config._experts_implementation
    base.set_experts_implementation(name)
    if base.config._experts_implementation != name:
        raise WorkbenchError(f"transformers did not switch the experts implementation to {name!r} "
                             f"(still {base.config._experts_implementation!r})")
    info["experts_implementation"] = name
    handle = Handle(opt=opt, arm=arm, info=info)
    handle.undo.append(lambda: base.set_experts_implementation(prev))
    return handle


def comparison_options(cmp, device, state: dict) -> dict:
    """This optimization's apply / unsupported keyword arguments for one comparison: the tokens per batch
    (hf_batched_mm's memory check)."""
    return {"tokens": cmp.tokens}


def _register_names() -> None:
    """This module's wb_* experts names, offered to `workbench.step.models` (check_experts, build_model) on import."""
    for arm in ARMS:
        for gemm in (GEMMS if arm == "grouped" else ("auto",)):
            name = implementation_name(arm, gemm)
            if name not in models.EXPERTS_CHOICES:
                models.WORKBENCH_EXPERTS.setdefault(name, functools.partial(register, arm, gemm))


_register_names()

