"""Packed-sequence metadata arms: same function as the per-layer rebuild, exact sync counts, no stale cache.

    # T = packed tokens, L = layers, c = syncs per metadata build, p = passes that build (forward, recompute)
"""
import pytest
import torch

from workbench.step.data import batch_from_lengths, make_batches, to_device
from workbench.errors import UnsupportedArm, WorkbenchError
from workbench.step.harness import enable_checkpointing, train_steps
from workbench.instrument import SyncCounter, instrument_layers, state
from workbench.step.models import build_model, model_inputs
from workbench.opts import packing
from workbench.opts.packing_savings import packing_saving

from conftest import TINY, per_document_reference as _per_document_reference

L = 2
LENS = [13, 5, 21, 9]        # longer than GPT-OSS's tiny sliding window (8): sliding layers are exercised
LENS_B = [20, 8, 10, 10]     # same T as LENS, other boundaries: a stale cache would be silently wrong


def _backends(preset):
    return ["varlen", "eager"] + ([] if "gpt-oss" in preset else ["sdpa"])


CASES = [(p, b) for p in TINY for b in _backends(p)]


def _model(preset, arm, backend, checkpointing=True):
    model = build_model(preset, layers=L)
    if checkpointing:
        enable_checkpointing(model)
    instrument_layers(model)
    return model, packing.apply(model, arm, backend=backend)


def _step(model, handle, batch):
    """One forward + backward under the sync counter; returns (loss, LoRA grads, counter)."""
    if handle.prepare_batch is not None:
        batch = handle.prepare_batch(batch)
    with SyncCounter(device_type="cpu") as c:
        with state.phase(state.FORWARD):
            loss = model(**handle.inputs_fn(model, batch)).loss
        with state.phase(state.BACKWARD):
            loss.backward()
    grads = [p.grad.detach().clone() for _, p in sorted(model.named_parameters()) if p.requires_grad]
    model.zero_grad(set_to_none=True)
    return loss.detach(), grads, c


def _assert_same(a, b):
    assert torch.equal(a[0], b[0]), (a[0], b[0])
    assert len(a[1]) == len(b[1]) > 0
    for ga, gb in zip(a[1], b[1]):
        assert torch.equal(ga, gb)


@pytest.mark.parametrize("preset, backend", CASES)
def test_arms_compute_the_same_function_with_exact_sync_counts(preset, backend):
    c = packing.SYNCS_PER_BUILD[backend]
    batch = batch_from_lengths(LENS, 256, seed=1)
    out = {}
    for arm in packing.ARMS:
        model, h = _model(preset, arm, backend)
        out[arm] = _step(model, h, batch)
        counter = out[arm][2]
        expected = {"rebuild": c * L * 2, "cached": c, "precomputed": 0}[arm]
        assert counter.total == expected, (arm, counter.by("layer", "pass_"))
        if arm == "rebuild":  # c in every layer, in the forward and again in the recompute
            assert counter.by("layer", "pass_") == {(f"L{i:02d}", p): c for i in range(L)
                                                    for p in ("forward", "recompute")}
        if arm == "cached":  # built once, by the first layer's forward
            assert counter.by("layer", "pass_") == {("L00", "forward"): c}
            assert h.packing_state.builds == 1
            assert h.packing_state.entry is None  # emptied once the backward finished
    _assert_same(out["cached"], out["rebuild"])
    _assert_same(out["precomputed"], out["rebuild"])


def test_without_checkpointing_rebuild_is_c_times_layers():
    batch = batch_from_lengths(LENS, 256, seed=1)
    model, h = _model("tiny-qwen3", "rebuild", "sdpa", checkpointing=False)
    assert _step(model, h, batch)[2].total == packing.SYNCS_PER_BUILD["sdpa"] * L


@pytest.mark.parametrize("preset, backend", CASES)
def test_packed_loss_is_token_weighted_mean_of_document_losses(preset, backend):
    model = build_model(preset, layers=L).eval()
    batch = batch_from_lengths(LENS, 256, seed=2)
    with torch.no_grad():
        ref = _per_document_reference(model, batch)
        h = packing.apply(model, "cached", backend=backend)
        packed = model(**h.inputs_fn(model, batch)).loss.double()
        h.revert()
        torch.testing.assert_close(packed, ref, rtol=1e-5, atol=1e-6)
        # negative control: one long document (positions 0..T-1) lets documents see each other
        h = packing.apply(model, "rebuild", backend=backend)
        leaky = model(**dict(h.inputs_fn(model, batch), position_ids=torch.arange(batch.tokens)[None])).loss
        h.revert()
        assert (leaky.double() - ref).abs() > 1e-4


@pytest.mark.parametrize("preset, backend", [("tiny-qwen3", "sdpa"), ("tiny-gpt-oss", "eager")])
def test_two_batches_in_a_row_and_a_stale_cache_is_caught(preset, backend, monkeypatch):
    a, b = batch_from_lengths(LENS, 256, seed=3), batch_from_lengths(LENS_B, 256, seed=4)
    assert a.tokens == b.tokens
    ref_model, ref = _model(preset, "rebuild", backend)
    refs = [_step(ref_model, ref, x) for x in (a, b)]
    for arm in ("cached", "precomputed"):
        model, h = _model(preset, arm, backend)
        for x, r in zip((a, b), refs):
            _assert_same(_step(model, h, x), r)
    # negative control: a cache keyed on the shape only, never emptied, hands batch a's metadata to batch b
    def stale_lookup(self, position_ids):
        e = self.entry
        return e if e is not None and e.tokens == position_ids.shape[-1] else None
    monkeypatch.setattr(packing.PackingState, "lookup", stale_lookup)
    monkeypatch.setattr(packing.PackingState, "clear", lambda self: None)
    model, h = _model(preset, "cached", backend)
    _assert_same(_step(model, h, a), refs[0])
    stale = _step(model, h, b)
    assert not torch.equal(stale[0], refs[1][0])  # the equivalence check would flag it


def test_cache_misses_on_a_new_tensor_or_an_in_place_change():
    model, h = _model("tiny-llama", "cached", "sdpa", checkpointing=False)
    st = h.packing_state
    pos = batch_from_lengths(LENS, 256).position_ids
    meta = packing.build_meta(pos)
    st.store(pos, meta)
    assert st.lookup(pos) is meta
    assert st.lookup(pos.clone()) is None
    pos[0, 3] = 0  # same object, new contents
    assert st.lookup(pos) is None


@pytest.mark.parametrize("lens, backend", [([48], "sdpa"), ([1, 7, 1, 1, 12, 1], "varlen"), ("budget", "varlen")],
                         ids=["one-doc", "len-1-docs", "fills-budget"])
def test_edge_cases(lens, backend):
    if lens == "budget":
        batch = make_batches("fixed:40", 40, 1, 256, seed=5)[0]
        assert batch.doc_lens == [40]
    else:
        batch = batch_from_lengths(lens, 256, seed=5)
    one_doc = len(batch.doc_lens) == 1
    c = (packing.SYNCS_PER_BUILD_ONE_DOC if one_doc else packing.SYNCS_PER_BUILD)[backend]
    out = {}
    for arm in packing.ARMS:
        model, h = _model("tiny-llama", arm, backend)
        out[arm] = _step(model, h, batch)
        assert out[arm][2].total == {"rebuild": c * L * 2, "cached": c, "precomputed": 0}[arm]
    _assert_same(out["cached"], out["rebuild"])
    _assert_same(out["precomputed"], out["rebuild"])
    model = build_model("tiny-llama", layers=L).eval()
    with torch.no_grad():
        ref = _per_document_reference(model, batch)
        h = packing.apply(model, "rebuild", backend=backend)
        torch.testing.assert_close(model(**h.inputs_fn(model, batch)).loss.double(), ref, rtol=1e-5, atol=1e-6)


def test_missing_position_ids_is_a_clear_error():
    model, h = _model("tiny-llama", "cached", "varlen")
    batch = batch_from_lengths(LENS, 256)
    with pytest.raises(WorkbenchError, match="position_ids"):
        model(input_ids=batch.input_ids, labels=batch.labels, use_cache=False)
    batch.position_ids = None
    with pytest.raises(WorkbenchError, match="position_ids"):
        h.inputs_fn(model, batch)
    model, h = _model("tiny-llama", "precomputed", "varlen")
    with pytest.raises(WorkbenchError, match="prepare_batch"):
        h.inputs_fn(model, batch_from_lengths(LENS, 256))  # not prepared at collate time


def test_revert_restores_the_model():
    model = build_model("tiny-gpt-oss", layers=L).eval()
    batch = batch_from_lengths(LENS, 256, seed=6)
    with torch.no_grad():
        before = model(**model_inputs(model, batch)).loss
        h = packing.apply(model, "cached", backend="eager")
        assert model.config._attn_implementation == "wb_packing_eager"
        h.revert()
        assert model.config._attn_implementation == "eager"
        assert not any(hasattr(m, "_wb_packing") for m in model.modules())
        model(input_ids=batch.input_ids, labels=batch.labels, use_cache=False)  # pre-hook gone: no error
        assert torch.equal(model(**model_inputs(model, batch)).loss, before)


def test_unsupported_combinations():
    model = build_model("tiny-gpt-oss", layers=L)
    with pytest.raises(UnsupportedArm, match="sinks"):
        packing.apply(model, "cached", backend="sdpa")
    assert "GPU" in packing.unsupported("cached", build_model("tiny-llama", layers=L), "cpu", "flex")


def test_harness_counts_and_equivalence_over_several_batches():
    """Through the shared training loop: c*L*p / c / 0 syncs per step, identical losses over 2 batches."""
    batches = make_batches("uniform:3:30", 64, 2, 256, seed=7)
    losses, c = {}, packing.SYNCS_PER_BUILD["varlen"]
    for arm in packing.ARMS:
        model, h = _model("tiny-qwen3-moe", arm, "varlen")
        recs = train_steps(model, to_device(batches, "cpu", prepare=h.prepare_batch), steps=2,
                           inputs_fn=h.inputs_fn)
        assert [r.syncs for r in recs] == [{"rebuild": c * L * 2, "cached": c, "precomputed": 0}[arm]] * 2
        losses[arm] = [r.loss for r in recs]
    assert losses["cached"] == losses["rebuild"] == losses["precomputed"]


@pytest.mark.parametrize("lens, block", [([5, 3, 8], 4), ([130, 7, 200, 1, 62], 128), ([17], 8), ([9, 9, 3], 4)])
def test_flex_collate_time_block_mask_matches_create_block_mask(lens, block):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    T = sum(lens)
    parts = packing.flex_block_tensors_host(lens, block)
    doc = parts["doc_ids"]
    ref = create_block_mask(packing._doc_mask_mod(doc), 1, None, T, T, device="cpu", BLOCK_SIZE=block)
    got = packing.block_mask_from_tensors(parts, T, block)
    assert torch.equal(got.to_dense(), ref.to_dense())
    assert torch.equal(got.full_kv_num_blocks, ref.full_kv_num_blocks)
    assert torch.equal(got.kv_num_blocks, ref.kv_num_blocks)
    # and the in-model doc ids (from position_ids, sync-free) are the same
    pos = batch_from_lengths(lens, 256).position_ids
    with SyncCounter(device_type="cpu") as c:
        doc_in_model = packing._doc_ids_from_position_ids(pos)
    assert c.total == 0 and torch.equal(doc_in_model, doc.to(torch.int32))
    # flex (forward, CPU eager) with this mask == causal attention per document
    q, k, v = (torch.randn(1, 2, T, 8) for _ in range(3))
    out = flex_attention(q, k, v, block_mask=got)
    ref_out = torch.cat([torch.nn.functional.scaled_dot_product_attention(
        q[:, :, s:s + n], k[:, :, s:s + n], v[:, :, s:s + n], is_causal=True)
        for s, n in zip([sum(lens[:i]) for i in range(len(lens))], lens)], dim=2)
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-5)


def test_packing_saving_formula():
    r = packing_saving(16, 0.5, checkpointing=False)
    assert r["predicted_ms"] == (16 - 1) * 0.5  # the seed article's (L-1)*s
    r = packing_saving(16, 0.5, checkpointing=True, measured_ms=12.4)
    assert r["predicted_ms"] == (16 * 2 - 1) * 0.5 == (16 - 1) * 0.5 * 2 + 0.5
    assert r["implied_s_ms"] == pytest.approx(12.4 / 31)
    assert packing_saving(16, 0.5, arm="precomputed")["predicted_ms"] == 16 * 2 * 0.5
    with pytest.raises(ValueError):
        packing_saving(0, 0.5)


def test_gpu_varlen_layout_with_a_reference_kernel(monkeypatch):
    """The GPU varlen call (layout, GQA repeat, causal window, cu_seqlens) against the CPU per-document path, with
    a reference kernel standing in for torch's varlen_attn (torch 2.11's signature: no enable_gqa)."""
    import torch.nn.attention.varlen as tv

    def ref_varlen(q, k, v, cu_seq_q, cu_seq_k, max_q, max_k, *, return_aux=None, scale=None, window_size=(-1, -1)):
        assert window_size == (-1, 0) and q.shape == k.shape == v.shape and isinstance(max_q, int)
        b = cu_seq_q.tolist()
        outs = [torch.nn.functional.scaled_dot_product_attention(
            *(x[s:e].transpose(0, 1)[None] for x in (q, k, v)), is_causal=True, scale=scale)[0].transpose(0, 1)
            for s, e in zip(b, b[1:])]
        return torch.cat(outs)

    monkeypatch.setattr(tv, "varlen_attn", ref_varlen)
    monkeypatch.setattr(packing, "_VARLEN_HAS_GQA", None)
    model = build_model("tiny-llama", layers=1)
    attn = model.base_model.model.model.layers[0].self_attn
    T = sum(LENS)
    q, k, v = torch.randn(1, 4, T, 16), torch.randn(1, 2, T, 16), torch.randn(1, 2, T, 16)
    meta = packing.meta_from_position_ids_host(batch_from_lengths(LENS, 256).position_ids)
    got, _ = packing._gpu_varlen(attn, q, k, v, meta, None, 0.25)
    want, _ = packing._per_document(attn, q, k, v, meta.doc_lens, None, 0.0, 0.25, {})
    assert got.shape == want.shape == (1, T, 4, 16)
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("arm", packing.ARMS)
def test_flex_attention_function_forward_on_cpu(arm):
    """The flex backend's attention function (forward only: flex has no CPU backward) for each arm."""
    model = build_model("tiny-llama", layers=1)
    attn = model.base_model.model.model.layers[0].self_attn
    batch = batch_from_lengths([130, 7, 60, 1, 40], 256)
    T = batch.tokens
    q, k, v = torch.randn(1, 4, T, 16), torch.randn(1, 2, T, 16), torch.randn(1, 2, T, 16)
    attn._wb_packing = packing.PackingState(arm, "flex")
    kw = {"position_ids": batch.position_ids}
    if arm == "precomputed":
        prepared = packing.make_prepare_batch(model.base_model.model, "flex")(batch)
        kw = packing.make_precomputed_inputs(model.base_model.model, "flex")(model, prepared)
    with torch.no_grad():
        got, _ = packing.flex_attention_fn(attn, q, k, v, None, scaling=0.25, **kw)
        want, _ = packing._per_document(attn, q, k, v, batch.doc_lens, None, 0.0, 0.25, {})
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
