"""Liger-Kernel's pointwise kernels (RMSNorm, RoPE, SwiGLU) as a lever, with torch's fused RMSNorm as a control.

    # T = packed tokens, H = hidden size, I = intermediate size, L = layers

Arms (module contract in `workbench.opts`):
- `eager` (baseline): the model's own RMSNorm, rotary embedding and SwiGLU MLP, as transformers ships them.
- `liger` (optimized): `liger_kernel.transformers.apply_liger_kernel_to_<family>(model=..., rms_norm=True, rope=True,
  swiglu=..., cross_entropy=False, fused_linear_cross_entropy=False)` on the built model (the loss is left alone: the
  `fused_ce` lever owns it). What that `model=` path patches (Liger 0.8.5, read from its `monkey_patch.py`):
  1. globals of the family's `transformers.models.<family>.modeling_<family>` module: `apply_rotary_pos_emb` (the
     attention forward looks it up there at every call: RoPE is patched only this way, so it holds for every model
     of the family in the process while applied), and the `<Family>RMSNorm` / `<Family>MLP` classes (for models
     built later);
  2. every RMSNorm instance (the final norm, the layers' input / post-attention norms, Qwen3's q_norm / k_norm):
     attributes `offset`, `casting_mode`, `variance_epsilon`, `in_place`, `row_mode`, `impl`, `mode` and instance-level
     `forward`, `extra_repr`, `_get_name`;
  3. every dense MLP instance: instance-level `forward` (LigerSwiGLUMLP's) and `_get_name`.
  `apply` snapshots the `__dict__` of the modeling module and of every module of the model, runs Liger's function,
  and records what changed; `revert` puts back every attribute it changed and deletes every one it added (only where
  the value is still Liger's). Liger's instance `forward` replaces the workbench's `wb/Lxx/mlp` range wrapper
  (`workbench.instrument.ranges`): the range is put back around Liger's forward, so traces keep their parts.
  SwiGLU per family: llama and qwen3 on; qwen3_moe off (Liger's swiglu there swaps the experts for `LigerExperts`,
  a base-kernel arm of the MoE levers, not a pointwise kernel); gpt_oss off (Liger leaves it off: gpt-oss's experts
  are custom, with a clamp and alpha = 1.702).
- `torch_rmsnorm` (control): only the family's RMSNorm replaced, by torch's own `torch.nn.functional.rms_norm` (one
  fused kernel on CUDA), RoPE and SwiGLU eager; so the table says which kernel earns what (Liger's RMSNorm was
  reported 1.6x slower than torch's at H = 4096 on the H100).

Every arm computes the baseline's function up to summation order and rounding (a fused kernel keeps the fp32
intermediates in registers instead of rounding them to the activations' dtype): the existing criterion of
`workbench.measure.equivalence` (bf16: relative L2 2e-2, else against an fp32 reference), fixed before the run.

Where it runs: Liger's kernels are Triton kernels and need a CUDA device. Under `TRITON_INTERPRET=1` on a CPU its
RoPE runs, but its RMSNorm and SwiGLU kernels do not (Liger 0.8.5 with Triton 3.9: they call `.to()` on a Python float
argument, which the interpreter passes unwrapped): `liger` is refused on a CPU, `torch_rmsnorm` runs anywhere.

Predicted saving (`workbench.ab.levers`): the `norm_elementwise` component x SAVED_FRACTION. The fraction is a
count of bytes moved per token and layer by the eager pointwise kernels on llama-3.1-8b under autocast with
checkpointing (forward + recompute + backward): RMSNorm ~260 H, SwiGLU ~36 I, RoPE ~300 KB, LoRA adds ~770 KB,
residual adds ~150 KB, ~2.8 MB in all; Liger's kernels move ~32 H, ~22 I and ~60 KB: ~1.4 MB saved, about half.
"""
from __future__ import annotations

import importlib
import importlib.util

import torch

from workbench.errors import UnsupportedArm, WorkbenchError
from workbench.opts import Handle
from workbench.step.models import base_model_of, family_of

SPEC = {"order": 13,
        "help": "eager (baseline: the model's own RMSNorm / RoPE / SwiGLU), liger (optimized: Liger-Kernel's "
                "RMSNorm, RoPE and SwiGLU on the built model; CUDA), torch_rmsnorm (control: torch's fused "
                "rms_norm in place of the family's RMSNorm only)",
        "cpu": {"model": "tiny-llama"}, "gpu": {"model": "llama-3.1-8b", "layers": 8, "tokens": 16384},
        "all_variants": (), "in_all": False, "lever": "norm_elementwise",
        "families": ("llama", "qwen3", "qwen3_moe", "gpt_oss")}
"""What the CLIs say of this optimization (`workbench.opts.registry`); a lever (`lever`), not part of `--opt all`."""

ARMS = ("eager", "liger", "torch_rmsnorm")
BASELINE = "eager"
OPTIMIZED = "liger"
SAVED_FRACTION = 0.5
"""The share of the `norm_elementwise` component the `liger` arm removes (the byte count in the module docstring)."""

FAMILIES = SPEC["families"]
SWIGLU = {"llama": True, "qwen3": True, "qwen3_moe": False, "gpt_oss": False}
"""Whether the `liger` arm asks Liger for its SwiGLU MLP, per family (see the module docstring)."""
LIGER_VERSION = "0.8.5"
"""The Liger-Kernel release this module was written against (the `kernels` extra pins it)."""


def modeling_module(family: str):
    """transformers' modeling module of `family` (where Liger patches RoPE and the classes)."""
    return importlib.import_module(f"transformers.models.{family}.modeling_{family}")


def _liger_installed() -> bool:
    return importlib.util.find_spec("liger_kernel") is not None


def unsupported(arm: str, model, device) -> str | None:
    if arm not in ARMS:
        return f"unknown liger arm {arm!r}; arms: {', '.join(ARMS)}"
    fam = family_of(base_model_of(model).config)
    if fam not in FAMILIES:
        return f"liger: no kernels for family {fam!r} here; families: {', '.join(FAMILIES)}"
    if arm == "liger":
        if not _liger_installed():
            return "liger-kernel is not installed (pip install -e '.[kernels]')"
        if torch.device(device).type != "cuda":
            return ("Liger's Triton kernels need a CUDA device (under TRITON_INTERPRET=1 its RMSNorm and SwiGLU "
                    "kernels fail: a Python float argument)")
    return None


def compile_disabled_entry() -> str | None:
    """The Liger function the patched RoPE calls that torch.compile must not trace (marked `torch.compiler.disable`),
    or None. Liger 0.8.5's `liger_rotary_pos_emb` calls `liger_kernel.backends.dispatch.dispatch`, which is so marked:
    dynamo cannot put it in a graph, and a fullgraph graph then fails ("Skip calling `torch.compiler.disable()`d
    function" at the levers' path's +liger point after +compile)."""
    if not _liger_installed():
        return None
    try:  # the module, not `from liger_kernel.backends import dispatch` (the package re-exports the function by name)
        mod = importlib.import_module("liger_kernel.backends.dispatch")
    except ImportError:
        return None
    fn = getattr(mod, "dispatch", None)
    return "liger_kernel.backends.dispatch.dispatch" if getattr(fn, "_torchdynamo_disable", False) else None


def path_conflict(arms: dict, device_type: str) -> str | None:
    """Why `liger` cannot run beside the compile lever's `regional` arm at a levers' path point `arms` ({opt: arm}):
    regional compile traces each decoder layer whole (fullgraph=True), and Liger's RoPE goes through a function
    torch.compile must not trace (`compile_disabled_entry`). The control `torch_rmsnorm` has no such call. None where
    nothing is known against it."""
    from workbench.opts import compile as compile_opt

    if arms.get("liger") != OPTIMIZED or arms.get("compile", compile_opt.BASELINE) == compile_opt.BASELINE:
        return None
    entry = compile_disabled_entry()
    if entry is None:
        return None
    return (f"liger cannot run inside regional compile's fullgraph layers: its RoPE calls {entry}, which is marked "
            f"torch.compiler.disable (a graph break)")


# --- snapshot / restore of what a patch changes --------------------------------------------------------------------

_MISSING = object()


def snapshot(objs) -> list[tuple[object, dict]]:
    """[(obj, shallow copy of its __dict__)] for every object (modules, Python modules)."""
    return [(o, dict(vars(o))) for o in objs]


def changes(before: list[tuple[object, dict]]) -> list[tuple[object, str, object, object]]:
    """[(obj, attribute, value before or _MISSING, value now)] for every attribute added or rebound since `before`."""
    out = []
    for o, old in before:
        now = vars(o)
        for k, v in now.items():
            if old.get(k, _MISSING) is not v:
                out.append((o, k, old.get(k, _MISSING), v))
    return out


def restore(changed: list[tuple[object, str, object, object]]) -> None:
    """Undo `changes(...)`: rebind each attribute to its old value (delete the added ones), where it still holds the
    patched value (a later patch of someone else's is left alone)."""
    for o, k, old, new in reversed(changed):
        d = vars(o)
        if d.get(k, _MISSING) is not new:
            continue
        if old is _MISSING:
            del d[k]
        else:
            d[k] = old


def _keep_ranges(changed) -> None:
    """Put the `wb/Lxx/...` range wrapper (`workbench.instrument.ranges`) back around a patched instance forward."""
    from workbench.instrument.ranges import range_name_of, wrap_in_range
    for o, k, old, _new in changed:
        name = range_name_of(old) if k == "forward" else None
        if name is not None:
            wrap_in_range(o, name)


# --- the arms ---------------------------------------------------------------------------------------------------------

def _liger_fn(family: str):
    from liger_kernel.transformers import monkey_patch
    return getattr(monkey_patch, f"apply_liger_kernel_to_{family}")


def patch_liger(hf) -> list:
    """Liger's pointwise kernels on HF model `hf` (its `model=` path); returns the changes (`changes`) for `restore`.
    Runs on any device (the kernels themselves need CUDA: `unsupported`)."""
    fam = family_of(hf.config)
    fn = _liger_fn(fam)  # imported before the snapshot: an import's own side effects are not ours to undo
    objs = [modeling_module(fam), *hf.modules()]
    before = snapshot(objs)
    fn(model=hf, rms_norm=True, rope=True, swiglu=SWIGLU[fam], cross_entropy=False,
       fused_linear_cross_entropy=False)
    changed = changes(before)
    _keep_ranges(changed)
    return changes(before)


def is_rmsnorm(module) -> bool:
    """A family's RMSNorm (LlamaRMSNorm, Qwen3RMSNorm, Qwen3MoeRMSNorm, GptOssRMSNorm)."""
    return type(module).__name__.endswith("RMSNorm") and hasattr(module, "variance_epsilon")


def torch_rmsnorm_forward(self, hidden_states):
    """torch's fused RMSNorm with the module's weight and epsilon (normalized over the last dimension)."""
    w = self.weight if self.weight.dtype == hidden_states.dtype else self.weight.to(hidden_states.dtype)
    return torch.nn.functional.rms_norm(hidden_states, (hidden_states.shape[-1],), w, self.variance_epsilon)


def patch_torch_rmsnorm(hf) -> list:
    """Every RMSNorm of `hf` computed by `torch.nn.functional.rms_norm`; returns the changes for `restore`."""
    norms = [m for m in hf.modules() if is_rmsnorm(m)]
    if not norms:
        raise WorkbenchError("liger torch_rmsnorm: the model has no RMSNorm modules")
    before = snapshot(norms)
    for m in norms:
        m.forward = torch_rmsnorm_forward.__get__(m, type(m))
    return changes(before)


def apply(model, arm: str, **options) -> Handle:
    """Switch the model to the arm's kernels in place; the Handle's revert() restores every attribute it changed."""
    if options:
        raise WorkbenchError(f"liger: unknown options {', '.join(sorted(options))}")
    hf = base_model_of(model)
    why = unsupported(arm, model, next(hf.parameters()).device)
    if why is not None:
        raise UnsupportedArm(why)
    fam = family_of(hf.config)
    h = Handle(opt="liger", arm=arm)
    if arm == "eager":
        h.info["kernels"] = "eager (the model's own)"
        return h
    changed = patch_liger(hf) if arm == "liger" else patch_torch_rmsnorm(hf)
    h.undo.append(lambda: restore(changed))
    if arm == "liger":
        h.info.update(kernels="liger rms_norm, rope" + (", swiglu" if SWIGLU[fam] else ""),
                      liger_version=_version(), swiglu=SWIGLU[fam])
    else:
        h.info["kernels"] = "torch.nn.functional.rms_norm"
    h.info["patched_attributes"] = len(changed)
    return h


def _version() -> str:
    from importlib.metadata import version
    return version("liger-kernel")
