"""Forced-balanced MoE routing: separates the experts kernels' efficiency from the router's load imbalance.

    # N = tokens, k = experts per token, E = experts

Arms (module contract in `workbench.opts`), with whatever experts implementation the model runs (`--experts`, or an
arm of `moe` / `expert_lora` in the same spec):
- `routed` (baseline): the router's own top-k experts per token (what training runs).
- `balanced`: every experts module receives top_k_index[n, j] = (n * k + j) mod E instead (round robin over the
  routed rows: each expert gets N*k/E rows, within one; a token never gets one expert twice while k <= E), with the
  router's own top-k weights. Built once per shape on the device, no host read. Timing `balanced` against `routed` on
  the same experts kernels says how much of an MoE step is load imbalance (the busiest expert's rows set a grouped
  GEMM's tail); NeMo's published MoE MFU (28% for Qwen3-30B-A3B and GPT-OSS-20B) is measured with such a gate.

`balanced` computes a different function by design (DIFFERENT_FUNCTION, stated before any run): tokens go to other
experts, so the loss and the gradients are those of another routing, and no tolerance against `routed` or fp32 could
accept it. The runner judges it by `workbench.measure.numerics.judge_different` instead: (a) the same pre-hooks with
the change switched off (`balance=False`: the hooks run and hand the router's own ids back, on the same experts
kernels) are equivalent to `routed` under the normal criterion, which proves the plumbing; (b) `balanced`'s loss is
finite and its LoRA gradients finite and non-zero. The tables report it as "different function (stated)", not as
equivalent and not as failed; the run completes (exit 0) when (a) and (b) hold. The router still gets gradients through
the weights. Applied as a forward pre-hook on each experts module (the
`@use_experts_implementation` module's call: hidden, top_k_index, top_k_weights); `revert` removes the hooks.

Use: `python -m workbench.ab --opt moe_balance --model qwen3-30b-a3b --layers 8 --experts grouped_mm`.
"""
from __future__ import annotations

import torch

from workbench.errors import UnsupportedArm, WorkbenchError
from workbench.opts import Handle

SPEC = {"order": 15, "in_all": False, "families": ("qwen3_moe", "gpt_oss"),
        "help": "routed (baseline: the router's top-k), balanced (every expert gets N*k/E rows, round robin; a "
                "different function, stated: separates kernel efficiency from load imbalance)",
        "cpu": {"model": "tiny-qwen3-moe"}, "gpu": {"model": "qwen3-30b-a3b", "layers": 8, "tokens": 8192},
        "all_variants": ()}
"""What the CLIs say of this optimization (`workbench.opts.registry`); not part of `--opt all`."""

ARMS = ("routed", "balanced")
BASELINE = "routed"
OPTIMIZED = "balanced"
DIFFERENT_FUNCTION = {
    "why": "balanced sends each token's k routed rows round robin to the experts instead of the router's top-k, so "
           "the loss and gradients are those of another routing, not the model's.",
    "off": {"balance": False}}
"""Stated before any run (`workbench.opts.protocol`): `apply(model, "balanced", balance=False)` is the arm's code path
(the same pre-hooks) handing the router's own ids back."""


def balanced_ids(N: int, k: int, E: int, device) -> torch.Tensor:
    """(N, k) expert ids (n*k + j) mod E, int64: every expert gets N*k/E rows, within one."""
    return (torch.arange(N * k, device=device) % E).view(N, k)


def experts_modules(model) -> list:
    """The `@use_experts_implementation` experts modules of the model (an `experts` child with `num_experts`)."""
    return [m for name, m in model.named_modules() if name.endswith("mlp.experts") and hasattr(m, "num_experts")]


def unsupported(arm: str, model, device) -> str | None:
    if arm not in ARMS:
        return f"unknown moe_balance arm {arm!r}; arms: {', '.join(ARMS)}"
    from workbench.opts.moe import experts_model_problem
    return experts_model_problem(model, "moe_balance")


def apply(model, arm: str, balance: bool = True, **options) -> Handle:
    """`balanced`: a pre-hook on every experts module replaces the router's top-k ids by `balanced_ids`; `routed`
    changes nothing. `balance=False` (DIFFERENT_FUNCTION's off switch): the same hooks, which build the balanced ids
    and hand the router's own back. The handle's revert() removes the hooks."""
    if options:
        raise WorkbenchError(f"moe_balance: unknown options {', '.join(sorted(options))}")
    why = unsupported(arm, model, None)
    if why is not None:
        raise UnsupportedArm(why)
    h = Handle(opt="moe_balance", arm=arm)
    if arm == BASELINE:
        return h
    mods = experts_modules(model)
    if not mods:
        raise WorkbenchError("moe_balance: no experts modules (`...mlp.experts` with num_experts) in the model")
    cache: dict = {}

    def hook(mod, args, kwargs):
        ids = args[1] if len(args) >= 2 else kwargs["top_k_index"]
        N, k = ids.shape[0], ids.shape[-1]
        key = (N, k, mod.num_experts, ids.device, ids.dtype)
        if key not in cache:
            cache[key] = balanced_ids(N, k, mod.num_experts, ids.device).to(ids.dtype)
        new = cache[key].view(ids.shape) if balance else ids
        if len(args) >= 2:
            return (args[0], new, *args[2:]), kwargs
        return args, {**kwargs, "top_k_index": new}

    for m in mods:
        hd = m.register_forward_pre_hook(hook, with_kwargs=True)
        h.undo.append(hd.remove)
    h.info["experts_modules"] = len(mods)
    h.info["balance"] = bool(balance)
    return h
