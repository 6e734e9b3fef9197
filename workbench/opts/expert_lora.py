"""LoRA on fused MoE experts without a materialized whole-weight delta or gradient ("split LoRA").

    # N = tokens, k = experts per token, S = N*k routed rows, E = experts, K = in features, N_out = out features,
    # r = LoRA rank

peft's `target_parameters` LoRA parametrizes a fused expert weight (E, ., .): while the experts run, reading
`experts.gate_up_proj` returns W + s * lhs @ rhs for all E experts (peft's `_LoraFactorsProxy`, one `baddbmm`). What
the experts implementation does with that tensor decides the cost:

- `eager` (baseline): transformers' per-expert loop as shipped (`experts_implementation="eager"`). It indexes the
  folded weight once per expert hit (`w[e]`); in the backward each `w[e]` back-propagates through a zero tensor the
  size of all E experts (`select_backward`: a zero-fill, then an add into the whole-weight gradient), E_hit times per
  weight per layer and pass: the "slice gradients (fill + add)" component `workbench.traces.lever_advice.slice_gradients` finds in
  40-72% of the traced MoE steps. Plus 1 + c*E_hit host syncs per layer and pass (`workbench.opts.moe`).
- `split` (optimized): the frozen base weight W (the parametrization's `original`, never the folded tensor) goes
  through one grouped GEMM per projection over the routed rows sorted by expert, and the adapter is applied as two
  low-rank grouped GEMMs over the same rows, y = x @ W[e] + s * (x @ A[e]) @ B[e], with A, B peft's own factors (the
  proxy's `lhs` / `rhs`, oriented per layout). No (E, K, N_out) tensor is built in the forward or the backward: W
  takes no gradient (frozen), and the adapters' gradients are grouped GEMMs of size (E, K, r) and (E, r, N_out).
  Routing is `workbench.opts.moe.route_no_sync` (stable sort, device counts, cumsum offsets): 0 syncs.
- `grouped_mm` (the anchor): transformers' own `experts_implementation="grouped_mm"` as shipped, with peft's folded
  weight: no per-expert slices, but the folded (E, K, N_out) weight in the forward and its whole gradient (one
  grouped GEMM) in the backward. What a user would pick.

One whole-weight tensor per LoRA-adapted weight and forward stays in every arm, `split` included: peft registers
its parametrization on each activation with torch's consistency check (`register_parametrization` without
`unsafe=True` evaluates W + s * lhs @ rhs once and drops it). It needs no gradient; removing it is peft's to do.

All arms compute the same function. `split` does not round W + s*A@B to the weights' dtype before the matmul, so
in bf16 it rounds differently from `eager`: on the tiny presets its deviation from the fp32 reference is of the
same size as eager's (loss within 2e-4, expert LoRA gradients within 0.15 relative L2, both arms). In fp32 it
matches eager to rounding (tests/test_opt_expert_lora.py).

Where peft does not hand over factors (several active adapters, fp8 weights, a peft without `_LoraFactorsProxy`),
`split` reads peft's folded weight instead: the same function, without the saving; `handle.info["lora_path"]` says
which path each weight took ("factors", "folded", or "none" without LoRA on it).

Use: `handle = workbench.opts.apply(model, "expert_lora", "split")`; `handle.revert()` restores the previous experts
implementation. Registered through transformers' `ExpertsInterface` (`set_experts_implementation`); nothing patched.
"""
from __future__ import annotations

import functools

from torch.nn.utils import parametrize

from workbench.step import models
from workbench.errors import UnsupportedArm, WorkbenchError
from workbench.opts import Handle, moe

SPEC = {"order": 12, "lever": "slice gradients (fill + add)", "in_all": False,
        "help": "eager (baseline: transformers' per-expert loop over peft's folded LoRA weights), split (optimized: "
                "frozen base in one grouped GEMM, LoRA as low-rank grouped GEMMs on the routed rows), grouped_mm "
                "(transformers' grouped_mm over the folded weights: the anchor)",
        "cpu": {"model": "tiny-qwen3-moe"}, "gpu": {"model": "qwen3-30b-a3b", "layers": 8, "tokens": 8192},
        "all_variants": (), "families": ("qwen3_moe", "gpt_oss")}
"""What the CLIs say of this optimization (`workbench.opts.registry`); a lever (`workbench.traces.lever_advice`), run by
`--opt levers`, not by `--opt all`."""

ARMS = ("eager", "split", "grouped_mm")
BASELINE = "eager"
OPTIMIZED = "split"

SAVED_FRACTION = 1.0
LEVER_ANCHOR = "grouped_mm"
"""`--opt levers` times this arm beside the lever's two on a GPU: transformers' default experts (`grouped_mm`), the
anchor a user would pick instead of the per-expert loop (`workbench.ab.planner._lever_plan`)."""
"""Share of the traced baseline's "slice gradients (fill + add)" time the split arm removes: all of it (it builds no
whole-weight tensor; the tests count 0 select_backwards). The baseline's per-expert syncs, launches and base-weight
gradient GEMMs go too, so the prediction is a floor."""

SPLIT_NAME = "wb_split_lora"
"""Name in transformers' ExpertsInterface (with a forced gemm: `wb_split_lora_<gemm>`)."""
IMPL_NAMES = {"eager": "eager", "split": SPLIT_NAME, "grouped_mm": "grouped_mm"}


# --- the split forward ------------------------------------------------------------------------------------------

def _is_factor_proxy(p) -> bool:
    """peft's `_LoraFactorsProxy` (W + scaling * lhs @ rhs), recognized by its fields, not its private class name."""
    return all(hasattr(p, a) for a in ("lhs", "rhs", "scaling"))


def lora_factors(self, name: str):
    """(w_EKN, lora, path) of the fused weight `name` of experts module `self`, oriented so `x @ w[e]` applies expert e.

    w_EKN: the frozen base weight when peft hands over its factors (path "factors"; lora = (a_EKr, b_ErN, scaling),
    x @ (W + delta)[e] = x @ w[e] + scaling * (x @ a[e]) @ b[e]); otherwise the weight as the module reads it, peft's
    folded W + delta ("folded") or the plain parameter ("none"), with lora None.
    """
    transposed = getattr(self, "is_transposed", False)
    plist = self.parametrizations[name] if parametrize.is_parametrized(self, name) else None
    if plist is None or len(plist) != 1 or not _is_factor_proxy(plist[0]):
        w = getattr(self, name)
        return (w if transposed else w.transpose(1, 2)), None, ("none" if plist is None else "folded")
    proxy = plist[0]
    w = plist.original  # stored layout; delta = lhs @ rhs in the same layout
    if transposed:  # (E, K, N_out)
        w_EKN, a_EKr, b_ErN = w, proxy.lhs, proxy.rhs
    else:  # stored (E, N_out, K), as nn.Linear: delta^T = rhs^T @ lhs^T
        w_EKN, a_EKr, b_ErN = w.transpose(1, 2), proxy.rhs.transpose(1, 2), proxy.lhs.transpose(1, 2)
    # grouped GEMMs take a row- or column-major weight; peft's factors are permuted views (E*r*(K+N_out): small)
    lora = (a_EKr.to(w.dtype).contiguous(), b_ErN.to(w.dtype).contiguous(), proxy.scaling)
    return w_EKN, lora, "factors"


def _project(x_SK, w_EKN, lora, offs_E, ids_S, gemm: str, info: dict | None, key: str):
    """Grouped x @ w[e] over the rows of each expert, plus the low-rank LoRA term on the same rows."""
    x_SK = x_SK.to(w_EKN.dtype)  # as transformers' grouped_mm: under autocast the input may arrive in fp32
    kind = moe.resolve_gemm(gemm, x_SK, w_EKN)
    y = moe.grouped_gemm(kind, x_SK, w_EKN, offs_E, ids_S)
    if info is not None:
        info.setdefault("gemm_resolved", {})[key] = kind
    if lora is None:
        return y
    a_EKr, b_ErN, scaling = lora
    t_Sr = moe.grouped_gemm(moe.resolve_gemm(gemm, x_SK, a_EKr), x_SK, a_EKr, offs_E, ids_S) * scaling
    return y + moe.grouped_gemm(moe.resolve_gemm(gemm, t_Sr, b_ErN), t_Sr, b_ErN, offs_E, ids_S)


def split_lora_experts_forward(self, hidden_states, top_k_index, top_k_weights, *, gemm: str = "auto",
                               check_routing: bool = True, info: dict | None = None):
    """hidden (N,H), ids / weights (N,k) -> (N,H): sync-free routing, frozen base and LoRA factors as grouped GEMMs."""
    N = hidden_states.shape[0]
    k = top_k_index.shape[-1]
    E = self.num_experts
    x_SH, ids_sorted_S, order_S, offs_E = moe.route_no_sync(self, hidden_states, top_k_index, check_routing)
    ids_safe_S = ids_sorted_S.clamp(0, E - 1)  # bias gathers stay in bounds even with checks off
    has_gate = getattr(self, "has_gate", True)
    has_bias = getattr(self, "has_bias", False)
    up_name = "gate_up_proj" if has_gate else "up_proj"
    w_up, lora_up, path_up = lora_factors(self, up_name)
    w_down, lora_down, path_down = lora_factors(self, "down_proj")
    if info is not None:
        info["lora_path"] = {up_name: path_up, "down_proj": path_down}
    h = _project(x_SH, w_up, lora_up, offs_E, ids_sorted_S, gemm, info, up_name)
    if has_bias:
        h = h + getattr(self, f"{up_name}_bias")[ids_safe_S]
    h = moe.activation(self, h)
    y = _project(h, w_down, lora_down, offs_E, ids_sorted_S, gemm, info, "down_proj")
    if has_bias:
        y = y + self.down_proj_bias[ids_safe_S]
    return moe.combine(self, y, order_S, top_k_weights, N, k, hidden_states.dtype)


# --- the opt-module contract ----------------------------------------------------------------------------------

def unsupported(arm: str, model, device) -> str | None:
    """Why this model / device cannot run `arm` (None: it can): every arm runs on an MoE model of the workbench's
    families, with or without LoRA on its experts."""
    if arm not in ARMS:
        return f"unknown arm {arm!r}; arms: {', '.join(ARMS)}"
    return moe.experts_model_problem(model, "expert_lora")


def implementation_name(arm: str, gemm: str = "auto") -> str:
    if arm == "split" and gemm != "auto":
        return f"{SPLIT_NAME}_{gemm}"
    return IMPL_NAMES[arm]


def register(arm: str, gemm: str = "auto", check_routing: bool = True, info: dict | None = None) -> str:
    """Register the arm's experts function in transformers' ExpertsInterface (split only: the others are
    transformers' own); returns its name."""
    from transformers.integrations.moe import ExpertsInterface

    name = implementation_name(arm, gemm)
    if arm == "split":
        ExpertsInterface.register(name, functools.partial(split_lora_experts_forward, gemm=gemm,
                                                          check_routing=check_routing, info=info))
    return name


def apply(model, arm: str, gemm: str = "auto", check_routing: bool = True) -> Handle:
    """Switch every MoE layer of `model` (HF or peft-wrapped) to `arm`; `handle.revert()` restores the previous one.

    gemm: split arm only, "auto" | "torch" | "triton" | "dense" (`workbench.opts.moe.resolve_gemm`).
    check_routing: split arm only; False drops the out-of-range check (a device-side assert on CUDA).
    """
    why = unsupported(arm, model, None)
    if why is not None:
        raise UnsupportedArm(why)
    if gemm not in moe.GEMMS:
        raise WorkbenchError(f"unknown gemm {gemm!r}; choose from {', '.join(moe.GEMMS)}")
    if arm != "split" and gemm != "auto":
        raise WorkbenchError(f"gemm={gemm!r} applies to the split arm only, not {arm!r}")
    info: dict = {"gemm": gemm} if arm == "split" else {}
    return moe.switch_experts(model, "expert_lora", arm, register(arm, gemm, check_routing, info), info)


def _register_names() -> None:
    """This module's wb_split_lora* names, offered to `workbench.step.models` (check_experts, build_model) on import."""
    for gemm in moe.GEMMS:
        name = implementation_name("split", gemm)
        if name not in models.EXPERTS_CHOICES:
            models.WORKBENCH_EXPERTS.setdefault(name, functools.partial(register, "split", gemm))


_register_names()
