"""peft's LoRA adapters batched across the projections that read the same input, as a lever.

    # T = tokens, d = hidden size, r = LoRA rank, n = projections in a group, o_i = projection i's output size

Arms (module contract in `workbench.opts`):
- `separate` (baseline): peft as shipped: every adapted projection computes `result + B_i(A_i(x)) * s_i` on its own
  (two small GEMMs, a scale and an add per projection; each A_i GEMM reads the whole input x).
- `fused` (optimized): the projections of one group that read the same input (q/k/v of the attention, gate/up of the
  MLP: `GROUPS`) compute their adapters together, in the group's first projection:
      h = x @ [A_1; ...; A_n]^T                                  one GEMM, (T, n r): x read once, not n times
      y = h @ blockdiag(s_1 B_1, ..., s_n B_n)^T                 one GEMM, (T, o_1 + ... + o_n), the scale folded in
  and each projection adds its column block of y to its base output. The backward reads x once for the stacked A's
  gradient and writes one input gradient (T, d) instead of n, which autograd would otherwise add up.

Same function as peft's: the same products summed in another grouping (the scale s_i folded into B_i is exact for a
power of two, peft's default alpha = 2r gives 2); tests/test_lora_fusion.py checks loss and every LoRA gradient
against `separate` with a wrong block order as the negative control, and counts 0 syncs added.

How it hooks in: peft's own extension point for another LoRA forward, a `LoraVariant` in each projection's
`lora_variant[adapter]` (what DoRA uses), so the base layer, the dtype cast of the input and the result's dtype
stay peft's. The group's first projection computes every member's delta and keeps the others' on the group; each
later member takes its own. The decoder's attention and MLP call the members in order on one input (Llama, Qwen3,
Mistral, gpt-oss attention in transformers), checked in every forward: a member called with no delta waiting, or
a first member called while deltas still wait, is a one-line error. `revert` removes the variants.

Beside the activations lever's `selective` it conflicts (`path_conflict`). Refused in one line (`unsupported`): LoRA dropout > 0 (each projection would draw its own mask), more than one
active adapter, a LoRA variant already there (DoRA, aLoRA, ...), a bias on lora_B, merged adapters, and a model with
no group of two adapted projections.

Predicted saving (`lever_prediction`): the breakdown cannot hold it apart: the adapters' GEMMs are `gemm` kernels
like the base projections', and their scale / add are `norm_elementwise`. So the saving is counted, not read off
the trace: the HBM bytes the fused arm does not move (`removed_bytes`), over the device's HBM bandwidth
(`workbench.step.flops.PEAK_HBM_TB_PER_S`). Launches removed are not counted in ms (the step at the path's shapes is
GPU-bound).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from workbench.errors import UnsupportedArm, WorkbenchError
from workbench.opts import Handle

SPEC = {"order": 16, "lever": "norm_elementwise", "in_all": False,
        "help": "separate (baseline: peft's LoRA, two small GEMMs per projection), fused (optimized: the adapters of "
                "q/k/v and of gate/up batched, one stacked-A GEMM and one block-diagonal-B GEMM per group)",
        "cpu": {"model": "tiny-llama"}, "gpu": {"model": "llama-3.1-8b", "layers": 8, "tokens": 16384},
        "all_variants": ()}
"""What the CLIs say of this optimization (`workbench.opts.registry`); a lever (`lever`: the component a compiled
step's fused scale-and-add lands in; its prediction is counted, `lever_prediction`), not part of `--opt all`."""

ARMS = ("separate", "fused")
BASELINE = "separate"
OPTIMIZED = "fused"

GROUPS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))
"""Sibling projections (under one parent module) that read the same input."""


def _lora_linear():
    from peft.tuners.lora.layer import Linear
    return Linear


def groups(model) -> list[list[tuple[str, torch.nn.Module]]]:
    """[[(name, peft LoRA Linear), ...], ...]: every group of `GROUPS` with at least two adapted members under one
    parent, members in `GROUPS` order."""
    Linear = _lora_linear()
    out = []
    for pname, parent in model.named_modules():
        for names in GROUPS:
            members = [(f"{pname}.{n}", getattr(parent, n)) for n in names
                       if isinstance(getattr(parent, n, None), Linear)]
            if len(members) >= 2:
                out.append(members)
    return out


def _why_not(mod) -> str | None:
    """Why one peft LoRA Linear cannot join a fused group (None: it can)."""
    active = list(mod.active_adapters)
    if len(active) != 1:
        return f"{len(active)} active adapters (fused takes exactly one)"
    a = active[0]
    if a not in mod.lora_A:
        return f"adapter {a!r} has no LoRA A here"
    if a in getattr(mod, "lora_variant", {}):
        return f"a LoRA variant is already installed ({type(mod.lora_variant[a]).__name__}: DoRA or another)"
    drop = mod.lora_dropout[a]
    if not isinstance(drop, torch.nn.Identity) and getattr(drop, "p", 0.0) > 0:
        return f"LoRA dropout {drop.p} > 0 (each projection draws its own mask)"
    if mod.lora_B[a].bias is not None:
        return "lora_B has a bias"
    if getattr(mod, "merged", False):
        return "the adapters are merged into the base weights"
    return None


def unsupported(arm: str, model, device) -> str | None:
    if arm not in ARMS:
        return f"unknown lora_fusion arm {arm!r}; arms: {', '.join(ARMS)}"
    if arm == BASELINE:
        return None
    try:
        found = groups(model)
    except ImportError:
        return "fused LoRA needs peft"
    if not found:
        return ("no group of two peft LoRA projections that read the same input "
                f"({' / '.join('/'.join(g) for g in GROUPS)})")
    for members in found:
        for name, mod in members:
            why = _why_not(mod)
            if why:
                return f"{name}: {why}"
    return None


class _Group:
    """One fused group: its members' modules, and the deltas the first member computed for the later ones."""

    def __init__(self, names: list[str], mods: list, adapter: str, order: list[int] | None = None):
        self.names, self.mods, self.adapter = names, mods, adapter
        self.order = order or list(range(len(mods)))
        """The members whose B's fill the block diagonal, in order (the identity; a test's negative control permutes
        it)."""
        self.pending: dict[int, torch.Tensor] = {}

    def deltas(self, x: torch.Tensor) -> list[torch.Tensor]:
        a = self.adapter
        A = torch.cat([m.lora_A[a].weight for m in self.mods], 0)
        B = torch.block_diag(*[self.mods[i].lora_B[a].weight * self.mods[i].scaling[a] for i in self.order])
        y = F.linear(F.linear(x, A), B)
        return list(y.split([m.lora_B[a].weight.shape[0] for m in self.mods], dim=-1))


class _Member:
    """peft's `LoraVariant` interface (its `forward(module, active_adapter, x, result)`) for member `i` of a group."""

    def __init__(self, group: _Group, i: int):
        self.group, self.i = group, i

    def forward(self, module, active_adapter, x, result, **kwargs):
        g = self.group
        if self.i == 0:
            if g.pending:
                g.pending = {}
                raise WorkbenchError(f"lora_fusion: {g.names[0]} was called again before "
                                     f"{', '.join(g.names[1:])} took their deltas (they do not read one input in order)")
            first, *rest = g.deltas(x)
            g.pending = dict(enumerate(rest, 1))
            return result + first
        d = g.pending.pop(self.i, None)
        if d is None:
            raise WorkbenchError(f"lora_fusion: {g.names[self.i]} was called without {g.names[0]} on its input first")
        return result + d

    # the rest of peft's LoraVariant interface: nothing to set up, and merging is peft's own per projection
    @staticmethod
    def init(module, adapter_name, **kwargs):
        return None

    def supports_lora_conversion(self) -> bool:
        return False


def apply(model, arm: str, b_order: tuple | None = None) -> Handle:
    """Install the fused groups (`fused`); `separate` changes nothing. `b_order`: the block order of each group's B's
    (default the identity; a permutation computes another function: the tests' negative control). Returns a Handle
    whose revert() removes every installed variant."""
    why = unsupported(arm, model, None)
    if why is not None:
        raise UnsupportedArm(why)
    h = Handle(opt="lora_fusion", arm=arm)
    if arm == BASELINE:
        return h
    found = groups(model)
    for members in found:
        names, mods = [n for n, _ in members], [m for _, m in members]
        adapter = mods[0].active_adapters[0]
        mine = list(b_order) if b_order is not None and sorted(b_order) == list(range(len(mods))) else None
        g = _Group(names, mods, adapter, mine)  # (`b_order` of another group's size: this group in its own order)
        for i, m in enumerate(mods):
            m.lora_variant[adapter] = _Member(g, i)

            def undo(m=m, adapter=adapter):
                m.lora_variant.pop(adapter, None)
            h.undo.append(undo)
    h.info.update(groups=len(found), projections=sum(len(g) for g in found))
    return h


def path_conflict(arms: dict, device_type: str) -> str | None:
    """Why `fused` cannot run beside the activations lever's `selective` at a levers' path point: its policy recomputes
    only GEMMs with a dimension at most the LoRA rank r, and the fused GEMMs' is n r, so it would save the block-diagonal
    GEMM's (T, o_1 + ... + o_n) output, as large as the base projections', which its memory estimate does not count."""
    if arms.get("lora_fusion") == OPTIMIZED and arms.get("activations") == "selective":
        return ("fused LoRA cannot run beside activations=selective: its policy would save the fused B GEMM's output "
                "(inner dimension n x r > r), which the selective memory estimate does not count")
    return None


def removed_bytes(config, tokens: int, *, checkpointing: bool, element_bytes: int = 2) -> int:
    """HBM bytes per step the `fused` arm does not move, against `separate`, counted per group of n projections that
    read x (T x d) with outputs o_i (terms of T x r size left out):
        forward   (n - 1) reads of x by the A GEMMs, and the scale: a read and a write of each (T, o_i) output
        recompute the forward again where the layers are checkpointed
        backward  (n - 1) reads of x by the A gradients; (n - 1) input gradients (T, d) written and added up (a read
                  of two and a write each); the scale's backward (a read and a write of each (T, o_i))
    x L layers x `element_bytes` (the compute dtype: 2 for bf16 activations)."""
    from workbench.step.memory_estimate import shape

    s = shape(config)
    d, q, kv, ffn = s["hidden"], s["heads"] * s["head_dim"], s["kv_heads"] * s["head_dim"], s["intermediate"]
    outs = ((q, kv, kv), (ffn, ffn))
    per_layer = 0
    for o in outs:
        n = len(o)
        fwd = (n - 1) * d + 2 * sum(o)
        bwd = (n - 1) * d + (n - 1) * d + 3 * (n - 1) * d + 2 * sum(o)
        per_layer += fwd * (2 if checkpointing else 1) + bwd
    return int(per_layer * tokens * s["layers"] * element_bytes)


def lever_prediction(breakdown: dict, config, tokens: int, checkpointing: bool, device_name: str | None) -> dict:
    """The predicted saving from counted bytes (see the module's doc): {component_ms, predicted_ms, named, basis}.
    `named` is True wherever there is a traced breakdown: its gemm component always holds the adapter GEMMs, so the
    trace cannot rule the lever out. No prediction on a device whose HBM bandwidth is not in the table."""
    from workbench.step.flops import PEAK_HBM_TB_PER_S

    nbytes = removed_bytes(config, tokens, checkpointing=checkpointing)
    tbps = PEAK_HBM_TB_PER_S.get(device_name or "")
    ms = nbytes / (tbps * 1e12) * 1e3 if tbps else None
    basis = f"counted: {nbytes / 1e9:.3g} GB per step not moved (stacked A reads x once, one input gradient, the " \
            "scale folded into B)"
    basis += (f" / {tbps} TB/s HBM" if tbps else f"; no HBM bandwidth known for {device_name!r}: no ms" if device_name
              else "; no GPU: no ms")
    return {"component": COUNTED_COMPONENT, "component_ms": ms, "predicted_ms": ms, "named": breakdown is not None,
            "basis": basis, "saved_fraction": 1.0}


COUNTED_COMPONENT = "adapter bytes (counted)"
"""What the levers' table names as this lever's component: the breakdown has none of its own."""
