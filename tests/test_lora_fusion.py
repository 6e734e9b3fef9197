"""opts/lora_fusion (the fused-LoRA lever): `fused` computes peft's LoRA (loss and every LoRA gradient against
`separate`, checkpointed, on the dense presets), a wrong block order of the B's as the negative control, 0 syncs added,
revert bitwise, the one-line refusals, the compiled layer (fullgraph) and the counted prediction."""
import pytest
import torch

from workbench.errors import UnsupportedArm, WorkbenchError
from workbench.instrument import SyncCounter, instrument_layers
from workbench.measure import equivalence
from workbench.opts import apply as apply_opt, lora_fusion as lf, module
from workbench.step.data import batch_from_lengths
from workbench.step.harness import enable_checkpointing, train_step
from workbench.step.models import build_model, lora_parameters

LENS = [13, 5, 21, 9]
RTOL = 1e-5
"""fp32: the same products summed in another grouping; measured 4e-7 of each gradient's largest entry."""


def _model(preset="tiny-llama"):
    m = build_model(preset, layers=2, precision="fp32-adapters")
    enable_checkpointing(m)
    instrument_layers(m)
    return m


def _step(model, batch):
    cap = equivalence.GradCapture(lora_parameters(model))
    counter = SyncCounter(device_type="cpu")
    rec = train_step(model, batch, cap, counter=counter, precision="fp32-adapters")
    return rec.loss, cap.grads, counter.total


def _worst(a: dict, b: dict) -> float:
    assert a.keys() == b.keys() and a
    return max(float((a[k] - b[k]).abs().max() / a[k].abs().max()) for k in a)


def test_registered_as_a_lever_outside_all():
    from workbench.opts import protocol, registry
    assert module("lora_fusion") is lf and protocol.problems(lf) == []
    assert registry.lever("lora_fusion") and not registry.in_all("lora_fusion")
    assert "lora_fusion" in registry.levers()


@pytest.mark.parametrize("preset", ["tiny-llama", "tiny-qwen3", "tiny-gpt-oss"])
def test_fused_is_peft_lora_and_a_wrong_order_is_not(preset):
    batch = batch_from_lengths(LENS, 256, seed=1)
    m = _model(preset)
    loss0, g0, syncs0 = _step(m, batch)
    h = apply_opt(m, "lora_fusion", "fused")
    assert h.info["groups"] == (2 if preset == "tiny-gpt-oss" else 4)  # q/k/v (and gate/up: the dense MLPs) a layer
    loss1, g1, syncs1 = _step(m, batch)
    h.revert()
    assert abs(loss1 - loss0) <= RTOL * abs(loss0) and _worst(g0, g1) < RTOL
    assert syncs1 == syncs0  # 0 added
    bad = apply_opt(m, "lora_fusion", "fused", b_order=(0, 2, 1))  # k's and v's B blocks swapped
    loss2, g2, _ = _step(m, batch)
    bad.revert()
    assert _worst(g0, g2) > 1e3 * RTOL  # the check can fail
    loss3, g3, _ = _step(m, batch)
    assert loss3 == loss0 and all(torch.equal(g0[k], g3[k]) for k in g0)  # reverted: peft's forward again


def test_refusals_are_one_line():
    m = _model()
    q = m.base_model.model.model.layers[0].self_attn.q_proj
    q.lora_dropout["default"] = torch.nn.Dropout(0.1)
    why = lf.unsupported("fused", m, "cpu")
    assert "dropout 0.1" in why and "\n" not in why
    with pytest.raises(UnsupportedArm):
        apply_opt(m, "lora_fusion", "fused")
    assert lf.unsupported("separate", m, "cpu") is None
    assert "no group" in lf.unsupported("fused", torch.nn.Linear(2, 2), "cpu")


def test_a_member_called_out_of_order_fails_in_one_line():
    m = _model()
    h = apply_opt(m, "lora_fusion", "fused")
    k = m.base_model.model.model.layers[0].self_attn.k_proj
    with pytest.raises(WorkbenchError, match="without .*q_proj"):
        k(torch.randn(1, 3, m.config.hidden_size))
    h.revert()


def test_fused_inside_the_compiled_layer():
    """The regional compile (fullgraph, aot_eager: dynamo's graphs and guards) traces the group's hand-over."""
    from workbench import opts
    from workbench.step import harness
    from workbench.step.data import make_batches, to_device
    batches = make_batches("uniform:16:64", 256, 2, 256, seed=0)
    out = {}
    for fused in (False, True):
        m = _model()
        hc = opts.apply(m, "compile", "regional", tokens=256, backend="aot_eager")
        hf = opts.apply(m, "lora_fusion", "fused") if fused else None
        try:
            data = to_device(batches, "cpu", prepare=hc.prepare_batch)
            out[fused] = [harness.train_step(m, data[i % 2], harness.make_optimizer(m, lr=0.0)).loss for i in range(3)]
        finally:
            if hf:
                hf.revert()
            hc.revert()
    assert out[True] == pytest.approx(out[False], rel=RTOL)


def test_counted_prediction():
    """The bytes the fused arm does not move, by hand for llama-3.1-8b's shape (d 4096, q 4096, k/v 1024, ffn
    14336), and the prediction over the H200's bandwidth; no bandwidth known: no prediction."""
    from types import SimpleNamespace
    cfg = SimpleNamespace(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                          intermediate_size=14336, num_hidden_layers=32, vocab_size=128256)
    d, qkv, gu = 4096, 4096 + 2 * 1024, 2 * 14336
    fwd = (2 * d + 2 * qkv) + (d + 2 * gu)
    bwd = (10 * d + 2 * qkv) + (5 * d + 2 * gu)
    assert lf.removed_bytes(cfg, 8192, checkpointing=False) == (fwd + bwd) * 8192 * 32 * 2
    assert lf.removed_bytes(cfg, 8192, checkpointing=True) == (2 * fwd + bwd) * 8192 * 32 * 2
    p = lf.lever_prediction({"components": []}, cfg, 8192, False, "NVIDIA H200")
    assert p["named"] and p["predicted_ms"] == pytest.approx((fwd + bwd) * 8192 * 64 / 4.8e12 * 1e3)
    assert lf.lever_prediction(None, cfg, 8192, False, "unknown GPU")["predicted_ms"] is None


def test_apply_optimizations_switches_it_on_and_off():
    from workbench import apply_optimizations
    batch = batch_from_lengths(LENS, 256, seed=1)
    m = _model()
    loss0, g0, _ = _step(m, batch)
    h = apply_optimizations(m, lora_fusion="fused")
    attn = m.base_model.model.model.layers[0].self_attn
    assert all("default" in getattr(attn, p).lora_variant for p in ("q_proj", "k_proj", "v_proj"))
    loss1, g1, _ = _step(m, batch)
    h.revert()
    assert not attn.q_proj.lora_variant and _worst(g0, g1) < RTOL


def test_conflicts_with_selective_checkpointing_only():
    assert "selective" in lf.path_conflict({"lora_fusion": "fused", "activations": "selective"}, "cuda")
    assert lf.path_conflict({"lora_fusion": "fused", "activations": "none"}, "cuda") is None
    assert lf.path_conflict({"lora_fusion": "separate", "activations": "selective"}, "cuda") is None
