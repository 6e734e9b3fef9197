"""Fused linear cross-entropy as a lever: the loss without materialized logits.

    # T = packed tokens, H = hidden size, V = vocabulary, C = Liger's chunk budget (chunk_mem_const)

Arms (module contract in `workbench.opts`):
- `eager` (baseline): the model's own forward: `lm_head` makes the (T, V) logits (bf16 under autocast), transformers'
  `ForCausalLMLoss` casts them to fp32, shifts the labels (pad with -100, drop the first) and takes the cross-entropy
  (mean over the tokens whose label is not -100, or sum / `num_items_in_batch` where the caller passes it, as
  Trainer does).
- `liger_flce` (optimized): Liger-Kernel's fused linear cross-entropy
  (`liger_kernel.transformers.functional.liger_fused_linear_cross_entropy`): the tokens in chunks, each chunk's
  logits made, turned into loss and gradients in place (Triton), then dropped. Chunking is a stated setting
  (`chunk_mem_const`, option `chunk_mem_const=`, Liger's default 1): chunk = next_pow2(ceil(T / ceil(V / (C H)))),
  32 chunks at llama-3's head (V = 128256, H = 4096); the run records the setting and the chunks it gave
  (`fused_ce.chunk_mem_const`, `fused_ce.chunks`). Liger reads the count of valid labels back to the host: 1 sync
  per step.
- `cce`: Apple's Cut Cross-Entropy, `cut_cross_entropy.linear_cross_entropy(e, c, targets, ignore_index=-100,
  reduction=..., shift=False, filter_eps=None)`: blockwise logits in SRAM, the log-sum-exp in the forward, the
  logits recomputed in the backward (one more T x H x V matmul); `filter_eps=None`: exact gradients (its default
  filter skips small gradient entries).

Where it plugs in: transformers' `loss_function` extension point receives the logits, already made by `lm_head`, so
a fused loss cannot use it; the fused arms replace the CausalLM's forward on the instance (`hf.forward`): the decoder
(`hf.model`, every keyword passed through as the model's own forward passes it), then the fused loss on the last
hidden state and `lm_head.weight`, the labels shifted and -100 ignored exactly as `ForCausalLMLoss` does
(`shift_labels=` taken where given), mean or sum / `num_items_in_batch` likewise. Under autocast the hidden state
and the weight go in at the autocast dtype, as `lm_head` would compute. It returns the loss and no logits; without
labels, or with `logits_to_keep` or positional arguments, it calls the model's own forward (logits as usual).
`revert` deletes the instance forward.

Refused (one line, `unsupported`): an `lm_head` that is not a plain Linear (a LoRA adapter or a peft wrapper on it:
a fused loss reads `lm_head.weight` directly and would skip the adapter silently), a bias on it, a config with
`output_router_logits` (its auxiliary loss would be dropped) or a final logit soft-cap; `cce` without CUDA (its Triton
kernels fail under TRITON_INTERPRET=1), `liger_flce` without CUDA unless TRITON_INTERPRET=1 (then Liger's kernel
runs in the interpreter: the CPU tests).

Every arm computes the baseline's function up to summation order and the logits' rounding (the fused arms keep them
in fp32 where eager rounds them to bf16 first): the existing criterion of `workbench.measure.equivalence`.

Predicted saving (`workbench.ab.levers`): the lever-only component `loss (logits, non-GEMM)` (busy time outside the
decoder layers that is neither GEMM nor the optimizer: the logits' fp32 cast, log-softmax and its backward, the
embedding's backward and the final norm) x SAVED_FRACTION. Bytes per logit in eager outside the GEMMs: cast 6,
log-softmax 8, nll 4, its backward 12, cast back 6, ~36; Liger's kernel reads the chunk and writes its gradient
in place, ~4: 32/36, rounded down to 0.85 for the embedding and norm kernels in the same component. The lm_head
GEMMs stay (cce adds one).
"""
from __future__ import annotations

import functools
import importlib.util
import os

import torch

from workbench.errors import UnsupportedArm, WorkbenchError
from workbench.opts import Handle
from workbench.step.models import base_model_of, family_of

SPEC = {"order": 14,
        "help": "eager (baseline: lm_head + transformers' cross-entropy on fp32 logits), liger_flce (optimized: "
                "Liger's fused linear cross-entropy, chunked; CUDA), cce (Cut Cross-Entropy, exact gradients: "
                "filter_eps=None; CUDA)",
        "cpu": {"model": "tiny-llama"}, "gpu": {"model": "llama-3.1-8b", "layers": 8, "tokens": 16384},
        "all_variants": (), "in_all": False, "lever": "loss (logits, non-GEMM)",
        "families": ("llama", "qwen3", "qwen3_moe", "gpt_oss")}
"""What the CLIs say of this optimization (`workbench.opts.registry`); a lever (`lever`), not part of `--opt all`."""

ARMS = ("eager", "liger_flce", "cce")
BASELINE = "eager"
OPTIMIZED = "liger_flce"
SAVED_FRACTION = 0.85
"""The share of the `loss (logits, non-GEMM)` component the fused loss removes (the byte count in the docstring)."""
IGNORE_INDEX = -100
"""The label ignored by the loss, as transformers' `ForCausalLMLoss`."""
CHUNK_MEM_CONST = 1
"""Liger's default chunk budget (transient logits of about C x T x H elements); option `chunk_mem_const=`."""
_PACKAGES = {"liger_flce": ("liger_kernel", "liger-kernel"), "cce": ("cut_cross_entropy", "cut-cross-entropy")}


def _interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def unsupported(arm: str, model, device) -> str | None:
    if arm not in ARMS:
        return f"unknown fused_ce arm {arm!r}; arms: {', '.join(ARMS)}"
    if arm == BASELINE:
        return None
    hf = base_model_of(model)
    head = getattr(hf, "lm_head", None)
    if type(head) is not torch.nn.Linear:
        what = "a LoRA adapter" if hasattr(head, "lora_A") else f"a {type(head).__name__}"
        return (f"lm_head carries {what}, not a plain Linear: a fused loss reads lm_head.weight directly and would "
                "skip it silently")
    if head.bias is not None:
        return "lm_head has a bias, which the fused loss here does not add"
    if getattr(hf.config, "output_router_logits", False):
        return "the config asks for output_router_logits: the fused forward would drop the router's auxiliary loss"
    if getattr(hf.config, "final_logit_softcapping", None):
        return "the config soft-caps the logits (final_logit_softcapping), which the fused forward does not"
    mod, pkg = _PACKAGES[arm]
    if importlib.util.find_spec(mod) is None:
        return f"{pkg} is not installed (pip install -e '.[kernels]')"
    cuda = torch.device(device).type == "cuda"
    if arm == "cce" and not cuda:
        return "Cut Cross-Entropy's Triton kernels need a CUDA device (they fail under TRITON_INTERPRET=1)"
    if arm == "liger_flce" and not cuda and not _interpreted():
        return "Liger's fused cross-entropy needs a CUDA device (or TRITON_INTERPRET=1 on a CPU)"
    return None


def shifted_labels(labels: torch.Tensor, shift_labels: torch.Tensor | None = None) -> torch.Tensor:
    """The targets, flattened, as `ForCausalLMLoss` makes them: token t predicts label t+1, the last one ignored."""
    if shift_labels is None:
        shift_labels = torch.nn.functional.pad(labels, (0, 1), value=IGNORE_INDEX)[..., 1:]
    return shift_labels.reshape(-1)


def liger_chunks(tokens: int, vocab: int, hidden: int, chunk_mem_const: int = CHUNK_MEM_CONST) -> int:
    """How many chunks Liger 0.8.5's fused linear cross-entropy splits `tokens` into (its `chunk_size` rule)."""
    inc = -(-vocab // (chunk_mem_const * hidden))
    per = -(-tokens // inc)
    chunk = min(1 << (per - 1).bit_length(), tokens)
    return -(-tokens // chunk)


def _liger_loss(e, c, target, reduction: str, chunk_mem_const: int):
    from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy
    return liger_fused_linear_cross_entropy(e, c, target, ignore_index=IGNORE_INDEX, reduction=reduction,
                                            chunk_mem_const=chunk_mem_const)


def _cce_loss(e, c, target, reduction: str, chunk_mem_const: int):
    from cut_cross_entropy import linear_cross_entropy
    return linear_cross_entropy(e, c, target, ignore_index=IGNORE_INDEX, reduction=reduction, shift=False,
                                filter_eps=None)


_LOSSES = {"liger_flce": _liger_loss, "cce": _cce_loss}


def fused_loss(arm: str, hidden_BTH: torch.Tensor, weight_VH: torch.Tensor, labels, *, num_items_in_batch=None,
               shift_labels=None, chunk_mem_const: int = CHUNK_MEM_CONST) -> torch.Tensor:
    """The causal-LM loss of `hidden_BTH @ weight_VH.T` by arm `arm`'s fused kernel, reduced as `ForCausalLMLoss`."""
    target = shifted_labels(labels, shift_labels).to(hidden_BTH.device)
    e = hidden_BTH.reshape(-1, hidden_BTH.shape[-1])
    c = weight_VH
    dev = e.device.type
    if torch.is_autocast_enabled(dev):  # lm_head would run at the autocast dtype
        dt = torch.get_autocast_dtype(dev)
        e, c = e.to(dt), c.to(dt)
    elif e.dtype != c.dtype:
        e = e.to(c.dtype)
    reduction = "sum" if num_items_in_batch is not None else "mean"
    loss = _LOSSES[arm](e, c, target, reduction, chunk_mem_const)
    if num_items_in_batch is not None:
        if torch.is_tensor(num_items_in_batch):
            num_items_in_batch = num_items_in_batch.to(loss.device)
        loss = loss / num_items_in_batch
    return loss


def make_forward(hf, arm: str, info: dict, chunk_mem_const: int = CHUNK_MEM_CONST):
    """The CausalLM forward with the fused loss (see the module docstring); `info` gets the chunks of the first call."""
    from transformers.modeling_outputs import CausalLMOutputWithPast

    own = hf.forward  # the bound class forward (or an earlier instance-level one)
    decoder = getattr(hf, hf.base_model_prefix)

    @functools.wraps(own)  # the model's own signature: Trainer reads it to keep the batch's columns
    def forward(*args, **kwargs):
        labels = kwargs.get("labels")
        if args or labels is None or kwargs.get("logits_to_keep") not in (None, 0):
            return own(*args, **kwargs)
        kw = {k: v for k, v in kwargs.items() if k not in ("labels", "logits_to_keep")}
        out = decoder(**kw)
        hidden = out.last_hidden_state
        if arm == "liger_flce" and "chunks" not in info:
            info["chunks"] = liger_chunks(hidden.shape[0] * hidden.shape[1], hf.lm_head.weight.shape[0],
                                          hidden.shape[-1], chunk_mem_const)
        loss = fused_loss(arm, hidden, hf.lm_head.weight, labels, num_items_in_batch=kw.get("num_items_in_batch"),
                          shift_labels=kw.get("shift_labels"), chunk_mem_const=chunk_mem_const)
        return CausalLMOutputWithPast(loss=loss, logits=None, hidden_states=getattr(out, "hidden_states", None),
                                      attentions=getattr(out, "attentions", None))

    forward._wb_fused_ce = arm
    return forward


def apply(model, arm: str, chunk_mem_const: int = CHUNK_MEM_CONST) -> Handle:
    """Route the model's loss through the arm's kernel; the Handle's revert() restores the model's own forward."""
    if isinstance(chunk_mem_const, bool) or not isinstance(chunk_mem_const, int) or chunk_mem_const < 1:
        raise WorkbenchError(f"fused_ce: chunk_mem_const must be a positive integer, got {chunk_mem_const!r}")
    hf = base_model_of(model)
    why = unsupported(arm, model, next(hf.parameters()).device)
    if why is not None:
        raise UnsupportedArm(why)
    h = Handle(opt="fused_ce", arm=arm)
    if arm == BASELINE:
        h.info["loss"] = "lm_head + transformers ForCausalLMLoss (fp32 logits)"
        return h
    h.info.update(loss={"liger_flce": "Liger fused linear cross-entropy", "cce": "Cut Cross-Entropy, filter_eps=None"}
                  [arm], family=family_of(hf.config))
    if arm == "liger_flce":
        h.info["chunk_mem_const"] = chunk_mem_const
    had = "forward" in vars(hf)
    old = vars(hf).get("forward")
    new = make_forward(hf, arm, h.info, chunk_mem_const)
    hf.forward = new

    def restore():
        if vars(hf).get("forward") is not new:
            return  # replaced since by someone else: theirs to undo
        if had:
            hf.forward = old
        else:
            del hf.forward
    h.undo.append(restore)
    return h
