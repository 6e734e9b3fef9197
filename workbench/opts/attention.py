"""Packed attention as a lever: a dense T x T mask vs block-diagonal kernels (lever "attention (dense)").

    # T = packed tokens, D = documents, H = query heads, Hkv = key/value heads, E = head dim,
    # W = sliding window, QB / KB = query / key blocks of a flex BlockMask

Arms (module contract in `workbench.opts`), each a function registered in transformers' `AttentionInterface`
(`wb_attention_<arm>`, set with `set_attn_implementation`):
- `dense` (baseline): what transformers runs on a packed batch: `sdpa` with the block-diagonal causal mask as a dense
  (1, 1, T, T) boolean mask, or for GPT-OSS (attention sinks) its `eager` attention with the same mask as an additive
  float mask. Computes all T^2 scores and masks the ones between documents away.
- `flex` (optimized): torch's `flex_attention` with a document BlockMask (causal, within the document, within the
  layer's window W): only the blocks on the documents' diagonal are computed. GPT-OSS's sinks are exact through flex's
  log-sum-exp: a sink logit s_h added to each row's softmax denominator scales that row's output by
  Z / (Z + e^s_h) = sigmoid(lse - s_h) (`with_sinks`). On a GPU flex is compiled once per process (the packing
  module's). flex has no CPU backward: on the CPU a training step runs `cpu_flex`, the same function (out and lse)
  per document; a forward without gradients runs flex itself.
- `varlen`: the packing module's varlen path (flash-attn's `flash_attn_varlen_func`, else torch's `varlen_attn`; on
  the CPU one call per document). No varlen kernel here takes sinks: refused for GPT-OSS on a GPU.

Metadata, for every arm alike, is built on the CPU at collate time (`prepare_batch`, from the batch's position_ids:
document lengths, cu_seqlens, max_seqlen, document ids, and for flex the BlockMask's block tables per window) and
reaches the attention as `wb_attention` (a `packing.PackedMeta`). The dense mask and the flex BlockMask are made from
it on the device in the first attention call of a step and reused by every later layer and the checkpoint recompute:
once per batch, sync-free. So the arms differ in the attention kernel only (0 syncs each; the packing lever measures
the metadata's own cost). Only AttentionInterface is registered (not AttentionMaskInterface): transformers then
builds no mask of its own and runs no packed-sequence check.

All arms compute the same function (loss and gradients) as the model's own attention on the packed batch; in bf16
they agree within the dtype's tolerance (different summation orders).
"""
from __future__ import annotations

import dataclasses
import importlib.util

import torch

from workbench.errors import UnsupportedArm, WorkbenchError
from workbench.instrument import span, state
from workbench.step import flops
from workbench.step.models import FAMILY_DEFAULT_ATTN, base_model_of, family_of
from workbench.opts import Handle, packing

SPEC = {"order": 11,
        "help": "dense (baseline: the packed block-diagonal mask as a dense T x T mask, sdpa; eager for GPT-OSS's "
                "sinks), flex (optimized: flex_attention with a document BlockMask; sinks through its LSE), varlen "
                "(flash / torch varlen kernel; not GPT-OSS on a GPU)",
        "cpu": {"model": "tiny-gpt-oss"}, "gpu": {"model": "llama-3.1-8b", "layers": 8, "tokens": 16384},
        "all_variants": (), "in_all": False, "lever": "attention (dense)"}
"""What the CLIs say of this optimization (`workbench.opts.registry`); a lever (`lever`), not part of `--opt all`."""

ARMS = ("dense", "flex", "varlen")
BASELINE = "dense"
OPTIMIZED = "flex"
LEVER_ANCHOR = "varlen"
"""In `--opt levers` on a GPU, the arm a user would pick instead of flex for packed documents (flash-attn / torch's
varlen kernel), timed beside it in the attention comparison (attention is 48% of llama-3.1-8b's flex step at
16k, and flex was never compared with a varlen kernel there); skipped where it cannot run (GPT-OSS's sinks)."""
FLEX_BLOCK = packing.FLEX_BLOCK
ATTENTION_FLOPS = {"dense": "dense", "flex": "block_diagonal", "varlen": "block_diagonal"}
"""Each arm's attention count for `workbench.step.flops.step_flops(attention=...)`: dense computes T^2 scores (declared
to `flops.declare_attention` under each arm's implementation name, so a run counts what the arm ran)."""
_KEY = "attention"


def saved_fraction(doc_lens: list[int]) -> float:
    """The share of a dense arm's T^2 score work outside the documents' causal blocks: 1 - sum d^2 / T^2 (what a
    block-diagonal kernel skips, ignoring block granularity and the causal half both compute)."""
    T = sum(doc_lens)
    return 1.0 - sum(d * d for d in doc_lens) / (T * T) if T else 0.0


# --- metadata (CPU, collate time) --------------------------------------------------------------------------------

def interval_block_parts(doc_lens: list[int], window: int | None = None, block: int = FLEX_BLOCK) -> dict:
    """BlockMask block tables of the packed causal mask, from host document lengths (O(QB * KB), no T x T mask).

    Query t attends keys [lo(t), t] with lo(t) = max(start of t's document, t - W + 1): an interval whose lower end
    never decreases with t. A block pair (query rows qf..ql, keys kf..kl) holds a valid pair iff m = max(qf, kf) <= ql
    and lo(m) <= kl; it is full iff lo(ql) <= kf and kl <= qf (a short last block is padded: never full). The same
    blocks as `create_block_mask` with `mask_mod(doc_ids, window)` (tests)."""
    T = sum(doc_lens)
    lens = torch.tensor(doc_lens, dtype=torch.long)
    doc_T = torch.repeat_interleave(torch.arange(len(doc_lens), dtype=torch.int32), lens, output_size=T)
    starts = torch.repeat_interleave(torch.cumsum(lens, 0) - lens, lens, output_size=T)
    t = torch.arange(T)
    lo_T = starts if window is None else torch.maximum(starts, t - window + 1)
    nb = (T + block - 1) // block
    first = torch.arange(nb) * block
    last = torch.clamp(first + block, max=T) - 1
    complete = last - first + 1 == block
    qf, ql = first.view(nb, 1), last.view(nb, 1)
    kf, kl = first.view(1, nb), last.view(1, nb)
    m = torch.maximum(qf, kf)
    valid_QK = (m <= ql) & (lo_T[m.clamp(max=T - 1)] <= kl)
    full_QK = (lo_T[ql] <= kf) & (kl <= qf) & complete.view(nb, 1) & complete.view(1, nb)
    partial_QK = valid_QK & ~full_QK
    return packing.block_tables(doc_T, partial_QK, full_QK)


def mask_mod(doc_ids_T: torch.Tensor, window: int | None = None):
    """flex mask_mod of the packed causal mask: same document, causal, within the window."""
    if window is None:
        def mod(b, h, q_idx, kv_idx):
            return (doc_ids_T[q_idx] == doc_ids_T[kv_idx]) & (q_idx >= kv_idx)
    else:
        def mod(b, h, q_idx, kv_idx):
            return (doc_ids_T[q_idx] == doc_ids_T[kv_idx]) & (q_idx >= kv_idx) & (q_idx - kv_idx < window)
    return mod


def block_mask(parts: dict, T: int, window: int | None, block: int = FLEX_BLOCK):
    """A BlockMask from `interval_block_parts` tables (on the device), sync-free."""
    from torch.nn.attention.flex_attention import BlockMask
    return BlockMask.from_kv_blocks(parts["kv_num_blocks"], parts["kv_indices"], parts["full_kv_num_blocks"],
                                    parts["full_kv_indices"], BLOCK_SIZE=block,
                                    mask_mod=mask_mod(parts["doc_ids"], window), seq_lengths=(T, T))


def _wkey(window: int | None) -> str:
    return "full" if window is None else str(window)


def make_prepare_batch(hf_model, arm: str):
    """CPU batch -> the batch with this arm's metadata in `batch.meta` (collate time, before the copy)."""
    windows = packing._windows(hf_model)

    def prepare_batch(batch):
        meta = packing.meta_from_position_ids_host(batch.position_ids)
        lens = meta.doc_lens
        items = {"cu_seqlens": meta.cu_seqlens, "max_seqlen": meta.max_seqlen, "doc_lens": list(lens),
                 "tokens": meta.tokens,
                 "doc_ids": torch.repeat_interleave(torch.arange(len(lens), dtype=torch.int32),
                                                    torch.tensor(lens), output_size=meta.tokens)}
        if arm == "flex":
            for w in windows:
                for k, v in interval_block_parts(lens, w).items():
                    if k != "doc_ids":
                        items[f"flex/{_wkey(w)}/{k}"] = v
        new = dict(batch.meta)
        new.update({f"{_KEY}/{k}": v for k, v in items.items()})
        return dataclasses.replace(batch, meta=new)

    return prepare_batch


def inputs_fn(model, batch) -> dict:
    """Prepared batch (on the device) -> model kwargs: ids, positions, labels and `wb_attention`. No device reads."""
    if batch.position_ids is None:
        raise WorkbenchError("packed attention needs position_ids (restarting at 0 in every document)")
    g = {k[len(_KEY) + 1:]: v for k, v in batch.meta.items() if k.startswith(_KEY + "/")}
    if "cu_seqlens" not in g:
        raise WorkbenchError("attention arms need their batches prepared (Handle.prepare_batch on the CPU batch, "
                             "before the copy to the device)")
    meta = packing.PackedMeta(cu_seqlens=g["cu_seqlens"], max_seqlen=int(g["max_seqlen"]), tokens=int(g["tokens"]),
                              doc_lens=list(g["doc_lens"]), doc_ids=g["doc_ids"])
    meta.variants["flex_parts"] = {k[5:]: v for k, v in g.items() if k.startswith("flex/")}
    _prime_flex(meta)
    return dict(input_ids=batch.input_ids, position_ids=batch.position_ids, labels=batch.labels, use_cache=False,
                wb_attention=meta)


# --- per-call pieces (made once per batch, on the device) ---------------------------------------------------------

def _meta_of(query, kwargs) -> packing.PackedMeta:
    meta = kwargs.get("wb_attention")
    if meta is None:
        raise WorkbenchError("attention arm: no wb_attention metadata reached the attention; apply the optimization "
                             "with workbench.opts.apply and feed the model through its handle's inputs_fn")
    if query.shape[0] != 1:
        raise WorkbenchError(f"packed attention expects one packed row (batch size 1), got {query.shape[0]}")
    if meta.tokens != query.shape[2]:
        raise WorkbenchError(f"attention metadata is for {meta.tokens} tokens, the batch has {query.shape[2]}")
    return meta


def _prime_flex(meta) -> None:
    """Every BlockMask of the batch, built once in `inputs_fn`, before any layer runs (sync-free: device tables).
    Built inside the first layer instead, it was part of that layer's graph under the compile lever's regional
    compile but an input of the same layer's recompute (cached by then): two graphs for one checkpointed layer, and
    the recompute's saved tensors differed (torch.utils.checkpoint's CheckpointError).
    Its few kernels run outside every layer's range now, so a trace no longer counts them as layer 0's glue."""
    parts = meta.variants["flex_parts"]
    for wkey in sorted({k.split("/", 1)[0] for k in parts}):
        window = None if wkey == "full" else int(wkey)
        p = {k.split("/", 1)[1]: v for k, v in parts.items() if k.startswith(wkey + "/")}
        meta.variants[("flex", window)] = block_mask({**p, "doc_ids": meta.doc_ids}, meta.tokens, window)


def _cached(meta, key, build):
    got = meta.variants.get(key)
    if got is None:
        with span(f"wb/{state.current_layer()}/attn/meta"):
            got = meta.variants[key] = build()
    return got


def dense_mask(doc_ids_T: torch.Tensor, window: int | None) -> torch.Tensor:
    """(1, 1, T, T) bool: same document, causal, within the window. Sync-free (device comparisons)."""
    T = doc_ids_T.shape[0]
    return packing.dense_mask_from_doc_ids(doc_ids_T, window).view(1, 1, T, T)


def with_sinks(out_BHTE: torch.Tensor, lse_BHT: torch.Tensor, sinks_H: torch.Tensor) -> torch.Tensor:
    """Attention with a sink logit per head in every row's softmax denominator, from the sink-free output and its
    log-sum-exp: out * Z / (Z + e^s) = out * sigmoid(lse - s). Exact; computed in fp32."""
    w = torch.sigmoid(lse_BHT.float() - sinks_H.float().view(1, -1, 1))
    return (out_BHTE.float() * w.unsqueeze(-1)).to(out_BHTE.dtype)


def cpu_flex(query, key, value, doc_lens: list[int], window: int | None, scale: float):
    """What flex computes with the document BlockMask, per document (CPU training path: flex has no CPU backward):
    (out (1, H, T, E), lse (1, H, T)), lse of the scaled scores in natural log as flex returns it."""
    g = query.shape[1] // key.shape[1]
    outs, lses, start = [], [], 0
    for n in doc_lens:
        q = query[:, :, start:start + n]
        k, v = (x[:, :, start:start + n].repeat_interleave(g, dim=1) for x in (key, value))
        s = torch.matmul(q, k.transpose(-1, -2)) * scale
        i = torch.arange(n, device=query.device)
        d = i.view(n, 1) - i.view(1, n)
        keep = d >= 0 if window is None else (d >= 0) & (d < window)
        s = s.masked_fill(~keep, float("-inf"))
        lse = torch.logsumexp(s, dim=-1)
        outs.append(torch.matmul(torch.exp(s - lse.unsqueeze(-1)), v))
        lses.append(lse)
        start += n
    return torch.cat(outs, dim=2), torch.cat(lses, dim=2)


def _flex_kernel(query, key, value, bm, scale, need_lse: bool):
    """flex_attention (compiled on a GPU, eager on the CPU: forward only) -> (out, lse or None)."""
    fn = packing._flex_fn(query.device.type)
    gqa = key.shape[1] != query.shape[1]
    if not need_lse:
        return fn(query, key, value, block_mask=bm, scale=scale, enable_gqa=gqa), None
    try:
        from torch.nn.attention.flex_attention import AuxRequest
    except ImportError:  # torch before return_aux: the deprecated return_lse
        return fn(query, key, value, block_mask=bm, scale=scale, enable_gqa=gqa, return_lse=True)
    out, aux = fn(query, key, value, block_mask=bm, scale=scale, enable_gqa=gqa, return_aux=AuxRequest(lse=True))
    return out, aux.lse


def _sinks(module, kwargs):
    s = kwargs.get("s_aux")
    return s if s is not None else getattr(module, "sinks", None)


def _check_dropout(dropout):
    if dropout:
        raise WorkbenchError(f"attention arms compute attention without dropout; the model asks for {dropout}")


# --- attention functions (one per arm) -------------------------------------------------------------------------------

def dense_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    meta = _meta_of(query, kwargs)
    window = packing._window(module, kwargs)
    mask = _cached(meta, ("dense", window), lambda: dense_mask(meta.doc_ids, window))
    if _sinks(module, kwargs) is not None:  # GPT-OSS: its eager attention (sinks) with the additive mask
        add = _cached(meta, ("dense_add", window, query.dtype), lambda: torch.zeros(
            mask.shape, dtype=query.dtype, device=query.device).masked_fill_(~mask, torch.finfo(query.dtype).min))
        out, _ = packing._family_eager(module)(module, query, key, value, add, dropout=dropout, scaling=scaling)
        return out, None
    return sdpa_attention_forward(module, query, key, value, mask, dropout=dropout, scaling=scaling)


def flex_attention_fn(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    _check_dropout(dropout)
    meta = _meta_of(query, kwargs)
    window = packing._window(module, kwargs)
    sinks = _sinks(module, kwargs)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    training = torch.is_grad_enabled() and any(x.requires_grad for x in (query, key, value))
    if query.device.type == "cpu" and training:  # flex has no CPU backward: the same function per document
        out, lse = cpu_flex(query, key, value, meta.doc_lens, window, scale)
    else:
        bm = meta.variants.get(("flex", window))  # built by inputs_fn (`_prime_flex`), one per window of the batch
        if bm is None:
            raise WorkbenchError(f"flex: no BlockMask tables for window {_wkey(window)} (the batch was prepared for "
                                 "another model)")
        out, lse = _flex_kernel(query, key, value, bm, scale, need_lse=sinks is not None)
    if sinks is not None:
        out = with_sinks(out, lse, sinks)
    return out.transpose(1, 2).contiguous(), None


def varlen_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    meta = _meta_of(query, kwargs)
    window = packing._window(module, kwargs)
    if query.is_cuda:
        if _sinks(module, kwargs) is not None:
            raise UnsupportedArm("varlen on a GPU: no varlen kernel here takes attention sinks (GPT-OSS)")
        return packing._gpu_varlen(module, query, key, value, meta, window, scaling)
    return packing._per_document(module, query, key, value, meta.doc_lens, window, dropout, scaling, kwargs)


_FNS = {"dense": dense_attention, "flex": flex_attention_fn, "varlen": varlen_attention}


def impl_name(arm: str) -> str:
    return f"wb_attention_{arm}"


flops.declare_attention({impl_name(arm): mode for arm, mode in ATTENTION_FLOPS.items()})


def register() -> None:
    """Register `wb_attention_<arm>` with transformers' AttentionInterface (idempotent)."""
    from transformers import AttentionInterface
    for arm, fn in _FNS.items():
        AttentionInterface.register(impl_name(arm), fn)


# --- the opt module contract ------------------------------------------------------------------------------------------

def unsupported(arm: str, model, device) -> str | None:
    if arm not in ARMS:
        return f"unknown attention arm {arm!r}; arms: {', '.join(ARMS)}"
    cuda = torch.device(device).type == "cuda"
    if arm == "varlen" and cuda:
        return packing.unsupported("cached", model, device, "varlen")
    if arm == "flex" and importlib.util.find_spec("torch.nn.attention.flex_attention") is None:
        return "flex attention needs torch.nn.attention.flex_attention (torch 2.5+)"
    return None


def _kernel(arm: str, device) -> str:
    cpu = torch.device(device).type != "cuda"
    return {"dense": "sdpa / eager (sinks), dense T x T mask",
            "flex": "per-document CPU path (flex: no CPU backward)" if cpu else "flex_attention, document BlockMask",
            "varlen": "per-document sdpa / eager (CPU)" if cpu else "flash-attn / torch varlen_attn"}[arm]


def apply(model, arm: str, **options) -> Handle:
    """Route the model's attention through `wb_attention_<arm>`; returns a Handle (revert() restores the model's
    attention implementation)."""
    if options:
        raise WorkbenchError(f"attention: unknown options {', '.join(sorted(options))}")
    hf = base_model_of(model)
    device = next(hf.parameters()).device
    why = unsupported(arm, model, device)
    if why is not None:
        raise UnsupportedArm(why)
    register()
    original = hf.config._attn_implementation or FAMILY_DEFAULT_ATTN[family_of(hf.config)]
    h = Handle(opt="attention", arm=arm, info={"kernel": _kernel(arm, device)})
    hf.set_attn_implementation(impl_name(arm))
    h.undo.append(lambda: hf.set_attn_implementation(original))
    h.prepare_batch = make_prepare_batch(hf, arm)
    h.inputs_fn = inputs_fn
    return h
