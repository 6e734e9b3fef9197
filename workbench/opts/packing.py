"""Packed-sequence metadata: per-layer rebuild vs once-per-batch cache vs collate-time precompute.

    # T = packed tokens, D = documents, L = layers, H = query heads, Hkv = key/value heads, E = head dim,
    # W = sliding window, QB / KB = query / key blocks of a flex BlockMask

Arms (module contract in `workbench.opts`):
- `rebuild` (baseline): every attention call, in every layer and again in the checkpoint recompute, derives the
  packed metadata from `position_ids` with transformers' own flash-path ops (`_is_packed_sequence`,
  `prepare_fa_kwargs_from_position_ids`, then `int(max_length)` as the kernel needs a host int: 3 syncs), and the
  sdpa / eager backends then build the dense block-diagonal mask with Unsloth's pre-#4243 recipe (document lengths
  `tolist()`: 1 more sync, and a Python loop over documents). Flex builds a BlockMask with `create_block_mask`.
- `cached`: the same build, once per batch: the first layer builds, every later layer and the recompute reuse it.
  A batch that carries transformers' padding-free keys (`cu_seq_lens_q/k`, `max_length_q/k`: TRL's padding-free
  collator, `DataCollatorWithFlattening(return_flash_attn_kwargs=True)`) is not built from at all: its keys are the
  metadata (`meta_from_batch_keys`, 0 syncs), and the sdpa / eager mask is built from them on the device.
  A lookup hits only for the very same `position_ids` tensor object at the same version (`_version`), and the cache
  is emptied at the start of every model forward and at the end of the backward that used it, so nothing outlives
  the step that needs it.
- `precomputed`: `Handle.prepare_batch` builds everything on the CPU at collate time (from the batch's
  `position_ids`, before the copy to the device); `Handle.inputs_fn` hands it to the model as `cu_seq_lens_q/k`,
  Python-int `max_length_q/k` (transformers' padding-free convention) and `wb_packed` (a `PackedMeta`). 0 syncs.
  A batch that already carries the padding-free keys (TRL's) needs no `prepare_batch`: the keys are used as they are.

Backends (one registered attention function per backend, `wb_packing_<backend>`; the arm is held on each attention
module as `_wb_packing`):
- `varlen`: flash-attn's `flash_attn_varlen_func` when installed, else torch's `varlen_attn` (GPU). On the CPU the
  same function is computed per document from the same `cu_seqlens` (an SDPA / eager call per document), so CPU
  tests exercise the same metadata code. Reading the document lengths back for that loop is CPU-only
  (`host_only`): a GPU kernel takes `cu_seqlens` as a tensor.
- `sdpa`: transformers' SDPA call with a dense (1, 1, T, T) boolean block-diagonal causal mask.
- `eager`: the family's own eager attention with an additive float mask (GPT-OSS: with its sinks).
- `flex`: flex attention (compiled once per process) with a BlockMask; training needs a GPU.

Only `AttentionInterface` is registered, deliberately not `AttentionMaskInterface`: with a mask function registered,
transformers runs `find_packed_sequence_indices` (1 sync) in every model forward and builds its own mask, for every
arm alike, which would hide the metadata cost this module measures and make `precomputed` non-zero. Without one,
the attention function receives `attention_mask=None` and builds (or looks up) the metadata itself.

Syncs per build, c (multi-document batch): varlen 3, sdpa 4, eager 4, flex 3 (see `SYNCS_PER_BUILD`); a batch of one
document is not packed, and the build stops after the packed check (varlen 1, sdpa / eager 2, flex 1).
Per step: rebuild c * L * passes (passes = 2 under checkpointing: forward + recompute), cached c, precomputed 0;
cached and precomputed 0 on a batch with the padding-free keys.

Dose (`apply(model, "cached", dose=u)`, for `workbench.ab.dose`): the cached arm with only u of its L*p - 1 cache hits
per step, granted in `packing_savings.dose_order`; every other call rebuilds as `rebuild` does. Syncs per step
c * (L*p - u); u = 0 runs as `rebuild`, u = L*p - 1 as `cached`.
"""
from __future__ import annotations

import dataclasses
import inspect
import sys
import weakref

import torch

from workbench.errors import UnsupportedArm, WorkbenchError
from workbench.instrument import span, state
from workbench.instrument.syncs import host_only, outside_dispatch_modes
from workbench.opts.packing_savings import DOSE, dose_order, dose_units
from workbench.step import flops
from workbench.step.models import FAMILY_DEFAULT_ATTN, base_model_of, family_of

SPEC = {"order": 1, "savings": "workbench.opts.packing_savings",
        "help": "rebuild (baseline), cached (optimized), precomputed (floor)",
        "cpu": {"model": "tiny-qwen3"}, "gpu": {"model": "qwen3-0.6b", "tokens": 16384}, "all_variants": ()}
"""What the CLIs say of this optimization (`workbench.opts.registry`): arms help, default shapes."""

ARMS = ("rebuild", "cached", "precomputed")
BASELINE = "rebuild"
OPTIMIZED = "cached"
BACKENDS = ("varlen", "sdpa", "eager", "flex")

SYNCS_PER_BUILD = {"varlen": 3, "sdpa": 4, "eager": 4, "flex": 3}
"""c: device-to-host reads of one metadata build for a packed (multi-document) batch."""
SYNCS_PER_BUILD_ONE_DOC = {"varlen": 1, "sdpa": 2, "eager": 2, "flex": 1}
"""c for a batch holding one document (position_ids = 0..T-1: not packed)."""

FLEX_BLOCK = 128
_META_KEY = "packing"


# --- metadata ---------------------------------------------------------------------------------------------------

@dataclasses.dataclass(eq=False)
class PackedMeta:
    """The packed metadata of one batch, plus the per-backend variants built from it (lazily)."""
    cu_seqlens: torch.Tensor
    """(D+1,) int32 cumulative document lengths, on the model's device."""
    max_seqlen: int
    """Longest document, a host int (what varlen kernels take)."""
    tokens: int
    doc_lens: list[int] | None = None
    """Host copy of the document lengths (mask loops, the CPU varlen loop); None until read."""
    doc_ids: torch.Tensor | None = None
    """(T,) document index of each token (flex mask_mod)."""
    variants: dict = dataclasses.field(default_factory=dict)
    """(backend, W, dtype) -> mask tensor or BlockMask."""
    position_ids: object = None
    """Weak reference to the position_ids this was built from (the cache key); None when precomputed."""
    version: int = -1


def _hf_flash_packing_fns():
    """transformers' own flash-path functions (present in 5.17 and 5.23); the rebuild arm calls exactly these."""
    from transformers.modeling_flash_attention_utils import _is_packed_sequence, prepare_fa_kwargs_from_position_ids
    return _is_packed_sequence, prepare_fa_kwargs_from_position_ids


def build_meta(position_ids: torch.Tensor) -> PackedMeta:
    """cu_seqlens / max_seqlen from position_ids, with transformers' per-layer flash-path ops. Syncs: 3 when packed
    (the packed check's bool, `nonzero`, `int(max)`), 1 when not (the check)."""
    is_packed, prepare = _hf_flash_packing_fns()
    T = position_ids.shape[-1]
    if bool(is_packed(position_ids, position_ids.shape[0])):  # sync: 0-d bool read back
        (cu_q, _), (max_q, _) = prepare(position_ids)  # sync: nonzero
        max_seqlen = int(max_q)  # sync: flash / varlen kernels take max_seqlen as a host int
        cu = cu_q
    else:
        cu = torch.tensor([0, T], dtype=torch.int32).to(position_ids.device, non_blocking=True)
        max_seqlen = T
    return PackedMeta(cu_seqlens=cu, max_seqlen=max_seqlen, tokens=T)


def meta_from_position_ids_host(position_ids: torch.Tensor) -> PackedMeta:
    """The same metadata, computed on the CPU at collate time (host reads only: no device sync), with everything
    the in-model code would otherwise read back (document lengths) already on the host."""
    if position_ids is None:
        raise WorkbenchError("packing needs position_ids in the batch (restarting at 0 in every document)")
    pos = position_ids.detach().cpu()
    meta = build_meta(pos)
    meta.doc_lens = [int(n) for n in meta.cu_seqlens.diff().tolist()]
    return meta


def _host_doc_lens(meta: PackedMeta, why: str | None = None) -> list[int]:
    """Document lengths on the host: `tolist()`, 1 sync (declared CPU-only when `why` is given)."""
    if meta.doc_lens is None:
        if why is None:
            meta.doc_lens = meta.cu_seqlens.diff().tolist()  # sync: Unsloth's per-layer lengths.tolist()
        else:
            with host_only(why):
                meta.doc_lens = meta.cu_seqlens.diff().tolist()
    return meta.doc_lens


def dense_mask_loop(doc_lens: list[int], T: int, device, window: int | None = None) -> torch.Tensor:
    """(T, T) bool block-diagonal causal mask (with a sliding window W: q - k < W), built with a Python loop over
    documents as Unsloth did before #4243. Sync-free given host lengths."""
    mask_TT = torch.zeros(T, T, dtype=torch.bool, device=device)
    start = 0
    for n in doc_lens:
        blk = torch.ones(n, n, dtype=torch.bool, device=device).tril_()
        if window is not None:
            blk = blk.triu_(-(window - 1))
        mask_TT[start:start + n, start:start + n] = blk
        start += n
    return mask_TT


PADDING_FREE_KEYS = ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")
"""transformers' padding-free batch keys (`DataCollatorWithFlattening(return_flash_attn_kwargs=True)`, TRL's
padding-free collator): cumulative document lengths (a tensor, built on the CPU at collate time) and the longest
document (a Python int)."""


def meta_from_batch_keys(kwargs: dict, position_ids: torch.Tensor) -> PackedMeta | None:
    """The packed metadata the batch already carries (`PADDING_FREE_KEYS`), None when it carries none. No device
    read: `cu_seq_lens_q` is used as it is, `max_length_q` is a host int, and the per-token document index the masks
    need is computed on the device (`doc_ids_from_cu_seqlens`)."""
    cu_q, cu_k, max_q, max_k = (kwargs.get(k) for k in PADDING_FREE_KEYS)
    if cu_q is None and max_q is None:
        return None
    if cu_q is None or max_q is None or not isinstance(cu_q, torch.Tensor) or cu_q.dim() != 1:
        raise WorkbenchError("packed batch keys: cu_seq_lens_q (a 1-d tensor) and max_length_q (an int) come together "
                             "(transformers' padding-free convention)")
    if (cu_k is not None and tuple(cu_k.shape) != tuple(cu_q.shape)) or (
            isinstance(max_k, int) and isinstance(max_q, int) and max_k != max_q):
        raise WorkbenchError("packed batch keys: cu_seq_lens_k / max_length_k differ from the _q keys (self-attention "
                             "over one packed row takes the same documents)")
    if isinstance(max_q, torch.Tensor):
        if max_q.device.type != "cpu":
            raise WorkbenchError("packed batch keys: max_length_q is a device tensor (reading it back is a sync); "
                                 "the padding-free convention makes it a Python int")
        max_q = int(max_q)
    T = position_ids.shape[-1]
    cu = cu_q.to(device=position_ids.device, dtype=torch.int32, non_blocking=True)
    return PackedMeta(cu_seqlens=cu, max_seqlen=int(max_q), tokens=T, doc_ids=doc_ids_from_cu_seqlens(cu, T))


def doc_ids_from_cu_seqlens(cu_seqlens: torch.Tensor, T: int) -> torch.Tensor:
    """(T,) document index of each token from (D+1,) cumulative lengths, on their device, sync-free."""
    t_T = torch.arange(T, device=cu_seqlens.device, dtype=cu_seqlens.dtype)
    return torch.searchsorted(cu_seqlens[1:].contiguous(), t_T, right=True).to(torch.int32)


def dense_mask_from_doc_ids(doc_ids_T: torch.Tensor, window: int | None = None) -> torch.Tensor:
    """(T, T) bool block-diagonal causal mask (sliding window W: q - k < W) from per-token document indices,
    sync-free; the same mask as `dense_mask_loop` over the same documents."""
    T = doc_ids_T.shape[0]
    t_T = torch.arange(T, device=doc_ids_T.device)
    d_TT = t_T.view(T, 1) - t_T.view(1, T)
    mask_TT = (doc_ids_T.view(T, 1) == doc_ids_T.view(1, T)) & (d_TT >= 0)
    if window is not None:
        mask_TT &= d_TT < window
    return mask_TT


def _doc_ids_from_position_ids(position_ids: torch.Tensor) -> torch.Tensor:
    """(T,) document index per token, sync-free: documents start where position_ids hits its minimum."""
    pos_T = position_ids.reshape(-1)
    return (pos_T == pos_T.min()).to(torch.int32).cumsum(0) - 1


def _doc_mask_mod(doc_ids_T: torch.Tensor):
    def mask_mod(b, h, q_idx, kv_idx):
        return (doc_ids_T[q_idx] == doc_ids_T[kv_idx]) & (q_idx >= kv_idx)
    return mask_mod


def flex_block_tensors_host(doc_lens: list[int], block: int = FLEX_BLOCK) -> dict:
    """BlockMask pieces for a block-diagonal causal mask, computed on the CPU from host document lengths
    (collate time; O(QB * KB), no T x T mask). Same blocks as `create_block_mask` with the document mask_mod."""
    T = sum(doc_lens)
    doc_T = torch.repeat_interleave(torch.arange(len(doc_lens), dtype=torch.int32), torch.tensor(doc_lens),
                                    output_size=T)
    nb = (T + block - 1) // block
    first = torch.arange(nb) * block
    last = torch.clamp(first + block, max=T) - 1
    qf, ql = doc_T[first], doc_T[last]
    i = torch.arange(nb).view(nb, 1)
    j = torch.arange(nb).view(1, nb)
    valid_QK = (j <= i) & (ql.view(1, nb) >= qf.view(nb, 1))
    one_doc = (qf == ql) & (last - first + 1 == block)  # a short last block is padded: never full
    full_QK = (j < i) & one_doc.view(nb, 1) & one_doc.view(1, nb) & (qf.view(nb, 1) == qf.view(1, nb))
    partial_QK = valid_QK & ~full_QK
    return block_tables(doc_T, partial_QK, full_QK)


def block_tables(doc_T: torch.Tensor, partial_QK: torch.Tensor, full_QK: torch.Tensor) -> dict:
    """BlockMask tables from the (query block, key block) selections: per query block the number of partial / full
    key blocks and their indices first (stable order), shaped (1, 1, nb[, nb]) as BlockMask takes them."""
    nb = partial_QK.shape[0]

    def pack(sel_QK):
        num = sel_QK.sum(-1).to(torch.int32)
        order = torch.argsort((~sel_QK).to(torch.int8), dim=-1, stable=True).to(torch.int32)
        return num.view(1, 1, nb), order.view(1, 1, nb, nb)

    kv_num, kv_idx = pack(partial_QK)
    full_num, full_idx = pack(full_QK)
    return {"doc_ids": doc_T, "kv_num_blocks": kv_num, "kv_indices": kv_idx, "full_kv_num_blocks": full_num,
            "full_kv_indices": full_idx}


def block_mask_from_tensors(parts: dict, T: int, block: int = FLEX_BLOCK):
    """Assemble a BlockMask from `flex_block_tensors_host` pieces already on the device."""
    from torch.nn.attention.flex_attention import BlockMask
    return BlockMask.from_kv_blocks(parts["kv_num_blocks"], parts["kv_indices"], parts["full_kv_num_blocks"],
                                    parts["full_kv_indices"], BLOCK_SIZE=block,
                                    mask_mod=_doc_mask_mod(parts["doc_ids"]), seq_lengths=(T, T))


def _variant(meta: PackedMeta, backend: str, window: int | None, dtype: torch.dtype, device) -> object:
    """The mask (sdpa / eager) or BlockMask (flex) of this meta, built on first use."""
    key = (backend, window, dtype if backend == "eager" else None)
    got = meta.variants.get(key)
    if got is not None:
        return got
    T = meta.tokens
    if backend == "flex":
        from torch.nn.attention.flex_attention import create_block_mask
        if window is not None:
            raise UnsupportedArm("flex backend: sliding windows are not implemented")
        if meta.doc_ids is None:
            raise WorkbenchError("flex metadata lacks doc_ids")
        got = create_block_mask(_doc_mask_mod(meta.doc_ids), 1, None, T, T, device=device, BLOCK_SIZE=FLEX_BLOCK,
                                _compile=torch.device(device).type == "cuda")
    else:
        if meta.doc_lens is None and meta.doc_ids is not None:  # from the batch's keys: no host read
            mask_TT = dense_mask_from_doc_ids(meta.doc_ids.to(device), window)
        else:
            mask_TT = dense_mask_loop(_host_doc_lens(meta), T, device, window)
        if backend == "sdpa":
            got = mask_TT.view(1, 1, T, T)
        else:  # eager: additive float mask, 0 where attended, the dtype's min elsewhere
            got = torch.zeros(1, 1, T, T, dtype=dtype, device=device).masked_fill_(
                ~mask_TT.view(1, 1, T, T), torch.finfo(dtype).min)
    meta.variants[key] = got
    return got


# --- per-model state: arm, backend, the cache --------------------------------------------------------------------

class PackingState:
    """What the attention function of one model needs: its arm, backend and (cached arm) the one-batch cache."""

    def __init__(self, arm: str, backend: str, dose: int | None = None, rank: dict | None = None):
        self.arm, self.backend = arm, backend
        self.entry: PackedMeta | None = None
        self.builds = 0
        """Metadata builds from position_ids so far (tests and reports)."""
        self.from_batch_keys = 0
        """Batches whose metadata came from their padding-free keys (`PADDING_FREE_KEYS`; cached / precomputed)."""
        self.dose, self.rank, self.calls = dose, rank or {}, {}
        """Dose only: the cache hits allowed per step (None: all), {(id of an attention module, its k-th call in a
        step): the order hits are granted in}, {id of an attention module: its calls so far this step}."""

    def clear(self) -> None:
        self.entry = None
        self.calls = {}

    def may_reuse(self, module) -> bool:
        """Whether this call of `module` may take the cached build: always, except under a dose, where only the calls
        ranked below `dose` (`dose_order`) may."""
        if self.dose is None:
            return True
        k = self.calls.get(id(module), 0)
        self.calls[id(module)] = k + 1
        return self.rank.get((id(module), k), self.dose) < self.dose

    def lookup(self, position_ids: torch.Tensor) -> PackedMeta | None:
        """The cached meta iff built from this very tensor object, unmodified since."""
        e = self.entry
        if e is None or e.position_ids is None:
            return None
        if e.position_ids() is position_ids and e.version == position_ids._version:
            return e
        return None

    def store(self, position_ids: torch.Tensor, meta: PackedMeta) -> None:
        meta.position_ids = weakref.ref(position_ids)
        meta.version = position_ids._version
        self.entry = meta


def _build_in_model(position_ids: torch.Tensor, backend: str) -> PackedMeta:
    meta = build_meta(position_ids)
    if backend == "flex":
        meta.doc_ids = _doc_ids_from_position_ids(position_ids)
    return meta


def _meta_for_call(st: PackingState, module, position_ids, kwargs, backend: str, window, dtype, device):
    """(meta, variant) for one attention call, per the arm. Builds run inside `wb/<layer>/attn/meta`."""
    if st.arm == "precomputed":
        meta = kwargs.get("wb_packed")
        if meta is None:
            meta = _meta_of_batch_keys(st, position_ids, kwargs)
        if meta is None:
            raise WorkbenchError("packing arm 'precomputed' needs the batch's packed metadata: the padding-free keys "
                                 "cu_seq_lens_q/k and max_length_q/k (DataCollatorWithFlattening("
                                 "return_flash_attn_kwargs=True), TRL's padding-free collator), or batches prepared by "
                                 "Handle.prepare_batch and passed with Handle.inputs_fn")
        if meta.tokens != position_ids.shape[-1]:
            raise WorkbenchError(f"precomputed packing metadata is for {meta.tokens} tokens, the batch has "
                                 f"{position_ids.shape[-1]}")
        variant = None if backend == "varlen" else _variant(meta, backend, window, dtype, device)
        return meta, variant
    meta = st.lookup(position_ids) if st.arm == "cached" and st.may_reuse(module) else None
    if meta is None and st.arm == "cached" and st.dose is None:
        meta = _meta_of_batch_keys(st, position_ids, kwargs)
    if meta is not None and (backend == "varlen" or (backend, window, dtype if backend == "eager" else None)
                             in meta.variants):
        return meta, (None if backend == "varlen" else _variant(meta, backend, window, dtype, device))
    with span(f"wb/{state.current_layer()}/attn/meta"):
        if meta is None:
            meta = _build_in_model(position_ids, backend)
            st.builds += 1
            if st.arm == "cached" and st.lookup(position_ids) is None:  # a dose's rebuild keeps the first build
                st.store(position_ids, meta)
        variant = None if backend == "varlen" else _variant(meta, backend, window, dtype, device)
    return meta, variant


def _meta_of_batch_keys(st: PackingState, position_ids, kwargs) -> PackedMeta | None:
    """The batch's own padding-free metadata (`meta_from_batch_keys`), cached for the step like a build; None when
    the batch carries no keys."""
    meta = st.lookup(position_ids)
    if meta is not None:
        return meta
    meta = meta_from_batch_keys(kwargs, position_ids)
    if meta is not None:
        st.from_batch_keys += 1
        st.store(position_ids, meta)
    return meta


# --- attention functions -----------------------------------------------------------------------------------------

def _family_eager(module):
    fn = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
    if fn is None:
        raise WorkbenchError(f"no eager_attention_forward next to {type(module).__name__}")
    return fn


def _has_sinks(module, kwargs) -> bool:
    return kwargs.get("s_aux") is not None or getattr(module, "sinks", None) is not None


def _window(module, kwargs) -> int | None:
    w = kwargs.get("sliding_window", getattr(module, "sliding_window", None))
    return int(w) if w else None


def _state_of(module) -> PackingState:
    st = getattr(module, "_wb_packing", None)
    if st is None:
        raise WorkbenchError(f"{type(module).__name__} has no packing state: use workbench.opts.packing.apply(model, "
                             "arm) rather than setting the attention implementation by hand")
    return st


def _check_position_ids(position_ids, query):
    if position_ids is None:
        raise WorkbenchError("packed attention needs position_ids (restarting at 0 in every document); the batch "
                             "has none")
    if query.shape[0] != 1:
        raise WorkbenchError(f"packed attention expects one packed row (batch size 1), got {query.shape[0]}")


def _common(module, query, kwargs, backend):
    st = _state_of(module)
    position_ids = kwargs.get("position_ids")
    _check_position_ids(position_ids, query)
    return st, position_ids, _window(module, kwargs)


def _per_document(module, query, key, value, doc_lens, window, dropout, scaling, kwargs):
    """The varlen function on the CPU: one call per document (q/k/v sliced by cu_seqlens), concatenated."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    sinks = _has_sinks(module, kwargs)
    eager = _family_eager(module) if sinks else None
    outs, start = [], 0
    for n in doc_lens:
        q, k, v = (x[:, :, start:start + n] for x in (query, key, value))
        if sinks:  # GPT-OSS: its eager attention carries the sinks; causal (+ window) mask per document
            m = torch.ones(n, n, dtype=torch.bool, device=query.device).tril_()
            if window is not None:
                m = m.triu_(-(window - 1))
            add = torch.zeros(1, 1, n, n, dtype=query.dtype, device=query.device).masked_fill_(
                ~m.view(1, 1, n, n), torch.finfo(query.dtype).min)
            o, _ = eager(module, q, k, v, add, dropout=dropout, scaling=scaling)
        elif window is not None and n > window:
            m = torch.ones(n, n, dtype=torch.bool, device=query.device).tril_().triu_(-(window - 1))
            o, _ = sdpa_attention_forward(module, q, k, v, m.view(1, 1, n, n), dropout=dropout, scaling=scaling)
        else:
            o, _ = sdpa_attention_forward(module, q, k, v, None, dropout=dropout, scaling=scaling, is_causal=True)
        outs.append(o)
        start += n
    return torch.cat(outs, dim=1), None


_VARLEN_HAS_GQA: bool | None = None


def _gpu_varlen(module, query, key, value, meta, window, scaling):
    """flash-attn's varlen kernel when installed, else torch's `varlen_attn`. q/k/v (1,H,T,E) -> (1,T,H,E)."""
    global _VARLEN_HAS_GQA
    q_THE, k_THE, v_THE = (x[0].transpose(0, 1).contiguous() for x in (query, key, value))
    win = (window - 1, 0) if window is not None else (-1, 0)
    cu, mx = meta.cu_seqlens, meta.max_seqlen
    try:
        from flash_attn import flash_attn_varlen_func
    except ImportError:
        flash_attn_varlen_func = None
    if flash_attn_varlen_func is not None:
        out = flash_attn_varlen_func(q_THE, k_THE, v_THE, cu, cu, mx, mx, softmax_scale=scaling, causal=True,
                                     window_size=win)
    else:
        from torch.nn.attention.varlen import varlen_attn
        if _VARLEN_HAS_GQA is None:
            _VARLEN_HAS_GQA = "enable_gqa" in inspect.signature(varlen_attn).parameters
        extra = {}
        if k_THE.shape[1] != q_THE.shape[1]:
            if _VARLEN_HAS_GQA:
                extra["enable_gqa"] = True
            else:
                g = q_THE.shape[1] // k_THE.shape[1]
                k_THE, v_THE = k_THE.repeat_interleave(g, dim=1), v_THE.repeat_interleave(g, dim=1)
        out = varlen_attn(q_THE, k_THE, v_THE, cu, cu, mx, mx, scale=scaling, window_size=win, **extra)
    out = out[0] if isinstance(out, tuple) else out
    return out.unsqueeze(0), None


def varlen_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    st, position_ids, window = _common(module, query, kwargs, "varlen")
    meta, _ = _meta_for_call(st, module, position_ids, kwargs, "varlen", window, query.dtype, query.device)
    if query.is_cuda:
        if _has_sinks(module, kwargs):
            raise UnsupportedArm("varlen backend on a GPU: varlen kernels here have no attention sinks (GPT-OSS)")
        return _gpu_varlen(module, query, key, value, meta, window, scaling)
    doc_lens = meta.doc_lens if meta.doc_lens is not None else _host_doc_lens(
        meta, "CPU varlen loop reads cu_seqlens; a GPU varlen kernel takes it as a tensor")
    return _per_document(module, query, key, value, doc_lens, window, dropout, scaling, kwargs)


def sdpa_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    st, position_ids, window = _common(module, query, kwargs, "sdpa")
    if _has_sinks(module, kwargs):
        raise UnsupportedArm("sdpa backend: SDPA has no attention sinks (GPT-OSS); use eager or varlen")
    _, mask = _meta_for_call(st, module, position_ids, kwargs, "sdpa", window, query.dtype, query.device)
    return sdpa_attention_forward(module, query, key, value, mask, dropout=dropout, scaling=scaling)


def eager_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    st, position_ids, window = _common(module, query, kwargs, "eager")
    _, mask = _meta_for_call(st, module, position_ids, kwargs, "eager", window, query.dtype, query.device)
    out, _ = _family_eager(module)(module, query, key, value, mask, dropout=dropout, scaling=scaling)
    return out, None


_FLEX_COMPILED = None


def _flex_fn(device_type: str):
    """flex_attention, compiled once per process on a GPU (eager on the CPU: forward only), called outside any
    dispatch mode (`outside_dispatch_modes`). Inside a graph dynamo is tracing (the compile lever's regional compile
    of the decoder layer) it is flex_attention itself, which dynamo compiles with the layer: no dispatch mode is active
    there (the compile lever runs the eager layer under one), and dynamo cannot trace the mode-stack query."""
    global _FLEX_COMPILED
    from torch.nn.attention.flex_attention import flex_attention
    if torch.compiler.is_compiling():
        return flex_attention
    if device_type != "cuda":
        fn = flex_attention
    else:
        if _FLEX_COMPILED is None:
            _FLEX_COMPILED = torch.compile(flex_attention)
        fn = _FLEX_COMPILED

    def call(*args, **kwargs):
        with outside_dispatch_modes():
            return fn(*args, **kwargs)
    return call


def flex_attention_fn(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    st, position_ids, window = _common(module, query, kwargs, "flex")
    if _has_sinks(module, kwargs):
        raise UnsupportedArm("flex backend: attention sinks (GPT-OSS) are not implemented")
    _, bm = _meta_for_call(st, module, position_ids, kwargs, "flex", window, query.dtype, query.device)
    out = _flex_fn(query.device.type)(query, key, value, block_mask=bm, scale=scaling,
                                      enable_gqa=key.shape[1] != query.shape[1])
    return out.transpose(1, 2).contiguous(), None


_FNS = {"varlen": varlen_attention, "sdpa": sdpa_attention, "eager": eager_attention, "flex": flex_attention_fn}


def impl_name(backend: str) -> str:
    return f"wb_packing_{backend}"


BACKEND_FLOPS = {"varlen": "block_diagonal", "flex": "block_diagonal", "sdpa": "dense", "eager": "dense"}
"""Each backend's attention count (`workbench.step.flops.attention_mode`): sdpa / eager build the dense T x T mask."""
flops.declare_attention({**{impl_name(b): m for b, m in BACKEND_FLOPS.items()},
                         **{b: m for b, m in BACKEND_FLOPS.items() if b in ("varlen", "flex")}},  # summary.json's attn
                        eager=(impl_name("eager"),))


def register_backends() -> None:
    """Register `wb_packing_<backend>` with transformers' AttentionInterface (idempotent)."""
    from transformers import AttentionInterface
    for b, fn in _FNS.items():
        AttentionInterface.register(impl_name(b), fn)


# --- the opt module contract ---------------------------------------------------------------------------------------

def default_backend(model, device) -> str:
    fam = family_of(base_model_of(model).config)
    cuda = torch.device(device).type == "cuda"
    # varlen everywhere except GPT-OSS on a GPU (sinks): eager there
    return "eager" if (fam == "gpt_oss" and cuda) else "varlen"


def unsupported(arm: str, model, device, backend: str | None = None) -> str | None:
    """Why this device / model cannot run `arm` with `backend` (None: it can)."""
    if arm not in ARMS:
        return f"unknown packing arm {arm!r}"
    backend = backend or default_backend(model, device)
    if backend not in BACKENDS:
        return f"unknown attention backend {backend!r}; choose from {', '.join(BACKENDS)}"
    fam = family_of(base_model_of(model).config)
    cuda = torch.device(device).type == "cuda"
    if fam == "gpt_oss" and backend in ("sdpa", "flex"):
        return f"GPT-OSS has attention sinks: no {backend} backend (use eager, or varlen on the CPU)"
    if fam == "gpt_oss" and backend == "varlen" and cuda:
        return "GPT-OSS varlen on a GPU: no varlen kernel here takes attention sinks (use eager)"
    if backend == "flex" and not cuda:
        return "flex attention has no backward on the CPU (needs a GPU)"
    if backend == "varlen" and cuda:
        try:
            import flash_attn  # noqa: F401
        except ImportError:
            try:
                from torch.nn.attention.varlen import varlen_attn  # noqa: F401
            except ImportError:
                return "varlen backend needs flash-attn or torch.nn.attention.varlen (torch 2.10+)"
    return None


def _attention_modules(hf_model):
    from workbench.instrument.ranges import find_decoder_layers
    mods = [layer.self_attn for layer in find_decoder_layers(hf_model) if hasattr(layer, "self_attn")]
    if not mods:
        raise WorkbenchError("no self_attn modules found in the decoder layers")
    return mods


def _decoder(hf_model):
    dec = getattr(hf_model, "model", None)
    if dec is None or not isinstance(dec, torch.nn.Module):
        raise WorkbenchError(f"{type(hf_model).__name__} has no .model decoder")
    return dec


def _install_step_hooks(hf_model, st: PackingState) -> list:
    """Decoder hooks: require position_ids; empty the cache at the start of each forward and once the backward
    that used it (recompute included) has finished."""
    def pre(mod, args, kwargs):
        if kwargs.get("position_ids") is None:
            raise WorkbenchError("packed batches need position_ids (restarting at 0 in every document); the model "
                                 "was called without them, so documents cannot be told apart")
        st.clear()

    def post(mod, args, kwargs, out):
        h = out[0] if isinstance(out, tuple) else getattr(out, "last_hidden_state", None)
        if isinstance(h, torch.Tensor) and h.requires_grad and torch.is_grad_enabled():
            def on_grad(grad):
                torch.autograd.Variable._execution_engine.queue_callback(st.clear)
                return None
            h.register_hook(on_grad)
        else:  # no backward will recompute: nothing needs the entry past this forward
            st.clear()

    dec = _decoder(hf_model)
    return [dec.register_forward_pre_hook(pre, with_kwargs=True),
            dec.register_forward_hook(post, with_kwargs=True)]


def _inputs(batch) -> dict:
    if batch.position_ids is None:
        raise WorkbenchError("packed batches need position_ids (restarting at 0 in every document)")
    return dict(input_ids=batch.input_ids, position_ids=batch.position_ids, labels=batch.labels, use_cache=False)


def _windows(hf_model) -> list[int | None]:
    """The attention windows the model's layers use (None: full attention)."""
    out = []
    for m in _attention_modules(hf_model):
        w = getattr(m, "sliding_window", None)
        w = int(w) if w else None
        if w not in out:
            out.append(w)
    return out


def make_prepare_batch(hf_model, backend: str):
    """Collate-time (CPU) builder of the precomputed arm: puts cu_seqlens, max_seqlen, document lengths and the
    backend's masks / BlockMask pieces in `batch.meta`."""
    dtype = next(hf_model.parameters()).dtype
    windows = _windows(hf_model)

    def prepare_batch(batch):
        meta = meta_from_position_ids_host(batch.position_ids)
        T = meta.tokens
        items = {"cu_seqlens": meta.cu_seqlens, "max_seqlen": meta.max_seqlen, "doc_lens": list(meta.doc_lens),
                 "tokens": T}
        if backend in ("sdpa", "eager"):
            for w in windows:
                m = _variant(meta, backend, w, dtype, "cpu")
                items[f"mask/{w}"] = m
        elif backend == "flex":
            for k, v in flex_block_tensors_host(meta.doc_lens).items():
                items[f"flex/{k}"] = v
        new_meta = dict(batch.meta)
        new_meta.update({f"{_META_KEY}/{k}": v for k, v in items.items()})
        return dataclasses.replace(batch, meta=new_meta)

    return prepare_batch


def make_precomputed_inputs(hf_model, backend: str):
    """batch (on the device, prepared) -> model kwargs carrying the precomputed metadata. No device reads."""
    dtype = next(hf_model.parameters()).dtype

    def inputs_fn(model, batch):
        kw = _inputs(batch)
        g = {k[len(_META_KEY) + 1:]: v for k, v in batch.meta.items() if k.startswith(_META_KEY + "/")}
        if "cu_seqlens" not in g:
            raise WorkbenchError("packing arm 'precomputed': the batch was not prepared (run Handle.prepare_batch "
                                 "on the CPU batch before moving it to the device)")
        meta = PackedMeta(cu_seqlens=g["cu_seqlens"], max_seqlen=int(g["max_seqlen"]), tokens=int(g["tokens"]),
                          doc_lens=list(g["doc_lens"]))
        for k, v in g.items():
            if k.startswith("mask/"):
                w = None if k == "mask/None" else int(k[5:])
                meta.variants[(backend, w, dtype if backend == "eager" else None)] = v
        if backend == "flex":
            parts = {k[5:]: v for k, v in g.items() if k.startswith("flex/")}
            meta.doc_ids = parts["doc_ids"]
            meta.variants[("flex", None, None)] = block_mask_from_tensors(parts, meta.tokens)
        kw.update(cu_seq_lens_q=meta.cu_seqlens, cu_seq_lens_k=meta.cu_seqlens, max_length_q=meta.max_seqlen,
                  max_length_k=meta.max_seqlen, wb_packed=meta)
        return kw

    return inputs_fn


def apply(model, arm: str, backend: str | None = None, dose: int | None = None, **options):
    """Route the model's attention through `wb_packing_<backend>` with `arm`; returns a Handle (revert() restores
    the original attention implementation and removes every hook and attribute). `dose` (cached arm only): the cache
    hits allowed per step, 0 .. L*p - 1 (the module docstring)."""
    from workbench.opts import Handle

    if options:
        raise WorkbenchError(f"packing: unknown options {', '.join(sorted(options))}")
    hf = base_model_of(model)
    device = next(hf.parameters()).device
    backend = backend or default_backend(model, device)
    why = unsupported(arm, model, device, backend)
    if why is not None:
        raise UnsupportedArm(why)
    mods = _attention_modules(hf)
    rank, passes = None, 2 if getattr(hf, "is_gradient_checkpointing", False) else 1
    if dose is not None:
        top = dose_units(len(mods), passes == 2)
        if arm != DOSE["arm"] or not 0 <= int(dose) <= top:
            raise WorkbenchError(f"packing: dose takes the {DOSE['arm']} arm and 0..{top} (builds avoided), not {arm!r} with {dose}")
        rank = {(id(mods[i]), k): r for r, (i, k) in enumerate(dose_order(len(mods), passes))}
    register_backends()
    st = PackingState(arm, backend, None if dose is None else int(dose), rank)
    original = hf.config._attn_implementation or FAMILY_DEFAULT_ATTN[family_of(hf.config)]
    h = Handle(opt="packing", arm=arm, info={"backend": backend, "syncs_per_build": SYNCS_PER_BUILD[backend],
                                             **({} if dose is None else {"dose": int(dose)})})
    h.packing_state = st  # not in info (info is for reports): the cache, for tests and inspection
    hf.set_attn_implementation(impl_name(backend))
    h.undo.append(lambda: hf.set_attn_implementation(original))
    for m in mods:
        m._wb_packing = st
    h.undo.append(lambda: [delattr(m, "_wb_packing") for m in mods if "_wb_packing" in vars(m)])
    hooks = _install_step_hooks(hf, st)
    h.undo.append(lambda: [x.remove() for x in hooks])
    h.undo.append(st.clear)
    h.inputs_fn = lambda model_, batch: _inputs(batch)
    if arm == "precomputed":
        h.prepare_batch = make_prepare_batch(hf, backend)
        h.inputs_fn = make_precomputed_inputs(hf, backend)
    return h


def comparison_options(cmp, device, state: dict) -> dict:
    """This optimization's apply / unsupported keyword arguments for one comparison: the backend --attn names."""
    return {"backend": cmp.attn} if cmp.attn in BACKENDS else {}


def attention_backend(model, device, options: dict) -> str:
    """The attention backend the packing arms run (through transformers' AttentionInterface)."""
    return options.get("backend") or default_backend(model, device)


def reference_options(options: dict, ran_attn: str, device) -> dict:
    """Options of the fp32 equivalence reference: the varlen backend's kernels take only fp16 / bf16 on a GPU, so
    there the reference computes the same block-diagonal attention with the sdpa backend (dense mask)."""
    if ran_attn == "varlen" and torch.device(device).type == "cuda":
        return {**options, "backend": "sdpa"}
    return options
