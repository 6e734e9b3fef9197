"""Regional torch.compile (workbench/opts/compile.py): batches padded to fixed tokens, the layers compiled in
place once, a recompile (a shape change across batches) or a graph break fails the arm in one line, revert restores the
eager layers. CPU: inductor with the C compiler; tiny-llama with one layer keeps the one compile short."""
import shutil

import pytest
import torch

from workbench.errors import WorkbenchError

pytestmark = pytest.mark.skipif(not any(shutil.which(c) for c in ("gcc", "cc", "clang")),
                                reason="inductor on a CPU needs a C compiler")


def test_pad_batch_keeps_the_loss_targets():
    from workbench.opts.compile import pad_batch
    from workbench.step.data import make_batches
    b = make_batches("uniform:16:64", 256, 1, 256, seed=0)[0]
    p = pad_batch(b, 300)
    assert p.tokens == 300 and p.doc_lens == [*b.doc_lens, 300 - b.tokens]
    assert torch.equal(p.input_ids[:, :b.tokens], b.input_ids) and (p.labels[:, b.tokens:] == -100).all()
    assert torch.equal(p.position_ids[0, b.tokens:], torch.arange(300 - b.tokens))
    assert pad_batch(p, 300) is p
    with pytest.raises(WorkbenchError, match="exceeds the fixed 200"):
        pad_batch(b, 200)


def test_regional_compile_static_then_a_recompile_fails():
    from workbench import opts
    from workbench.instrument import instrument_layers
    from workbench.step import harness
    from workbench.step.data import make_batches, to_device
    from workbench.step.models import build_model
    torch._dynamo.reset()
    m = build_model("tiny-llama", layers=1, device="cpu")
    harness.enable_checkpointing(m)
    instrument_layers(m)
    layer = m.base_model.model.model.layers[0]
    eager_forward = type(layer).forward
    batches = make_batches("uniform:16:64", 256, 3, 256, seed=0)
    assert len({b.tokens for b in batches}) > 1  # the batches differ in length: padding is what makes them static
    opt = harness.make_optimizer(m, lr=0.0)
    ref = [harness.train_step(m, b, opt).loss for b in batches]

    h = opts.apply(m, "compile", "regional", tokens=256)
    padded = to_device(batches, "cpu", prepare=h.prepare_batch)
    assert {b.tokens for b in padded} == {256}
    got = [harness.train_step(m, padded[i % 3], opt).loss for i in range(4)]
    assert h.info["graphs"] == 1 and h.info["compile_s"] > 0  # one graph, compiled in the first step only
    assert got[:3] == pytest.approx(ref, rel=1e-4)  # the pad document changes no loss target
    from workbench.instrument import SyncCounter
    with SyncCounter(device_type="cpu"):  # the counted pass: under a dispatch mode the eager layer runs, no error
        assert harness.train_step(m, padded[0], opt).loss == pytest.approx(ref[0], rel=1e-4)
    assert h.info["graphs"] == 1
    h.revert()
    assert "forward" not in vars(layer) and type(layer).forward is eager_forward
    assert "forward" in vars(layer.self_attn) and "forward" in vars(layer.mlp)  # the range wrappers are back

    # negative control: without padding the second batch has another length: a recompile, one line
    h = opts.apply(m, "compile", "regional", backend="aot_eager")  # the guard is the backend's: no codegen needed
    raw = to_device(batches, "cpu")
    harness.train_step(m, raw[0], opt)
    with pytest.raises(WorkbenchError, match="recompiled in step 2") as e:
        harness.train_step(m, raw[1], opt)
    assert "\n" not in str(e.value)
    h.revert()


def test_unsupported_without_a_c_compiler(monkeypatch):
    from workbench.opts import compile as comp
    from workbench.step.models import build_model
    m = build_model("tiny-llama", layers=1, device="cpu")
    monkeypatch.setattr(comp.shutil, "which", lambda name: None)
    assert "C compiler" in comp.unsupported("regional", m, "cpu")
    assert comp.unsupported("eager", m, "cpu") is None


def _layer_model():
    from workbench.instrument import instrument_layers
    from workbench.step import harness
    from workbench.step.models import build_model
    torch._dynamo.reset()
    m = build_model("tiny-llama", layers=1, device="cpu")
    harness.enable_checkpointing(m)
    instrument_layers(m)
    return m


def _steps(m, arm, n, compiled: bool):
    """`n` steps over 3 batches of different lengths with the attention lever's `arm` (and the regional compile,
    aot_eager: the same graphs and guards as inductor, no code generation); (losses, compile handle's info)."""
    from workbench import opts
    from workbench.step import harness
    from workbench.step.data import make_batches, to_device
    batches = make_batches("uniform:16:64", 256, 3, 256, seed=0)
    opt = harness.make_optimizer(m, lr=0.0)
    hc = opts.apply(m, "compile", "regional", tokens=256, backend="aot_eager") if compiled else None
    ha = opts.apply(m, "attention", arm)
    try:
        pad = hc.prepare_batch if hc else (lambda b: b)
        data = to_device(batches, "cpu", prepare=lambda b: ha.prepare_batch(pad(b)))
        losses = [harness.train_step(m, data[i % 3], opt, inputs_fn=ha.inputs_fn).loss for i in range(n)]
        return losses, (dict(hc.info) if hc else None)
    finally:
        ha.revert()
        if hc:
            hc.revert()


def test_compiled_layer_with_the_attention_levers_arms():
    """Regional compile with the attention lever: `dense` compiles once and runs batches of other document counts
    without a recompile (the same losses as eager); `varlen` and, on a CPU, `flex` would specialise on the document
    lengths every batch: refused in one line at the first call, before anything compiles."""
    m = _layer_model()
    eager, _ = _steps(m, "dense", 3, compiled=False)
    got, info = _steps(m, "dense", 4, compiled=True)
    assert info["graphs"] == 1 and got[:3] == pytest.approx(eager, rel=1e-4)
    for arm in ("varlen", "flex"):
        torch._dynamo.reset()
        with pytest.raises(WorkbenchError, match=f"cannot run with the wb_attention_{arm} attention") as e:
            _steps(m, arm, 2, compiled=True)
        assert "\n" not in str(e.value)
    from workbench.opts import compile as comp
    assert comp.specialising_attention("wb_attention_flex", "cuda") is None  # on a GPU: left to the guards
    assert comp.specialising_attention("wb_packing_varlen", "cuda")
    assert comp.specialising_attention("sdpa", "cpu") is None


def test_flex_compiles_inside_the_fullgraph_layer(monkeypatch):
    """The H100 path of 2026-11-27 (llama-3.1-8b, 16k): +compile beside attention=flex failed with a graph break,
    because the flex call stepped out of dispatch modes through a mode-stack query dynamo cannot trace. Inside a graph
    flex is now flex_attention itself, which dynamo compiles with the layer. On a CPU flex's forward (no gradients)
    runs flex itself, so the fullgraph layer is traced here (the CPU training refusal lifted for the test): one graph,
    the eager forward's output. Before the fix this raised "graph break ... torch.* op returned non-Tensor"; and with
    ranges on (the GPU run's default) the BlockMask build's NVTX span was a second graph break, "Unsupported method
    call" (`span` is a no-op inside a graph now)."""
    from workbench import opts
    from workbench.instrument.ranges import Ranges
    from workbench.opts import compile as comp
    from workbench.opts import packing
    from workbench.step.data import make_batches, to_device
    from workbench.step.models import build_model
    torch._dynamo.reset()
    m = build_model("tiny-llama", layers=2, device="cpu")
    ha = opts.apply(m, "attention", "flex")
    hc = None
    try:
        monkeypatch.setattr(comp, "specialising_attention", lambda impl, device_type: None)
        hc = opts.apply(m, "compile", "regional", tokens=256, backend="aot_eager")
        data = to_device(make_batches("uniform:16:64", 256, 3, 256, seed=0), "cpu",
                         prepare=lambda b: ha.prepare_batch(hc.prepare_batch(b)))
        assert len({tuple(b.doc_lens) for b in data}) == 3  # other documents in every batch: other BlockMasks
        hc.revert()
        with torch.no_grad():
            ref = [m(**ha.inputs_fn(m, b)).logits for b in data]
        assert packing._flex_fn("cpu") is not packing._flex_fn("cpu")  # outside a graph: a call that leaves modes
        hc = opts.apply(m, "compile", "regional", tokens=256, backend="aot_eager")
        with torch.no_grad(), Ranges(nvtx=True, profiler=True).activate():  # as the GPU run: ranges on
            got = [m(**ha.inputs_fn(m, b)).logits for b in data]
        # one graph for both layers and every batch: the BlockMasks are built before the layers (`_prime_flex`), so
        # no layer builds one inside its graph (a graph of its own, and a checkpointed layer's recompute would run
        # the other one)
        assert hc.info["graphs"] == 1
    finally:
        if hc is not None:
            hc.revert()
        ha.revert()
    for g, r in zip(got, ref):
        assert torch.allclose(g, r, rtol=1e-4, atol=1e-5)


def test_reapplied_arm_reuses_its_graphs():
    """The engine applies the arm anew in every rep (and in the equivalence check): each apply compiles with the same
    backend callable, so dynamo's cache of the layer's code object serves every later apply. A backend built per apply
    failed its BACKEND_MATCH guard and recompiled each time, until the recompile limit (8) failed the arm in its ninth
    apply (the H100 NeMo-shape run of 2026-11-27: 2 graphs a apply, failed in rep 3). Negative control: dynamo's
    cache holds one entry per apply when the backend differs."""
    from workbench import opts
    from workbench.step import harness
    from workbench.step.data import make_batches, to_device
    m = _layer_model()
    batches = make_batches("uniform:16:64", 256, 1, 256, seed=0)
    opt = harness.make_optimizer(m, lr=0.0)
    graphs = []
    for _ in range(10):  # past torch._dynamo.config.recompile_limit (8)
        h = opts.apply(m, "compile", "regional", tokens=256, backend="aot_eager")
        data = to_device(batches, "cpu", prepare=h.prepare_batch)
        for _step in range(3):  # compile_s needs the third step's start
            harness.train_step(m, data[0], opt)
        graphs.append(h.info["graphs_here"])
        h.revert()
    assert graphs == [1] + [0] * 9  # compiled once, then served from the cache
    assert h.info["graphs"] == 1 and h.info["compile_s"] >= 0

    from workbench.opts import compile as comp
    assert comp.shared_backend("aot_eager") is comp.shared_backend("aot_eager")
    assert comp.shared_backend("inductor") is not comp.shared_backend("aot_eager")


def test_a_backend_per_apply_hits_the_recompile_limit(monkeypatch):
    """Negative control of the test above: a new backend object per apply (the code before the fix) compiles in every
    apply and fails, in one line, when dynamo's recompile limit is hit."""
    from workbench import opts
    from workbench.opts import compile as comp
    from workbench.step import harness
    from workbench.step.data import make_batches, to_device
    monkeypatch.setattr(comp, "shared_backend", lambda compiler: comp._Backend(compiler))
    m = _layer_model()
    batches = make_batches("uniform:16:64", 256, 1, 256, seed=0)
    opt = harness.make_optimizer(m, lr=0.0)
    # the limit (8 by default) reached sooner; dynamo's own patch (a monkeypatch of its config module broke it for
    # the tests after this one)
    with torch._dynamo.config.patch(recompile_limit=3), \
            pytest.raises(WorkbenchError, match="recompile limit hit") as e:
        for _ in range(5):
            h = opts.apply(m, "compile", "regional", tokens=256, backend="aot_eager")
            try:
                assert h.info["graphs_here"] == 0
                harness.train_step(m, to_device(batches, "cpu", prepare=h.prepare_batch)[0], opt)
                assert h.info["graphs_here"] == 1  # compiled again: the cached graphs' backend differs
            finally:
                h.revert()
    assert "\n" not in str(e.value)
    torch._dynamo.reset()
