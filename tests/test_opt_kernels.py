"""The ecosystem's kernels as levers: `workbench.opts.liger` and `workbench.opts.fused_ce`.

On a CPU these check the plumbing: what Liger's `model=` path patches and that revert restores exactly that (a forgotten
revert is caught), the torch rms_norm control arm, the refusals, the fused forward's loss against transformers' own
(Liger's fused cross-entropy runs under TRITON_INTERPRET=1, which tests/conftest.py sets without a GPU), and a
transformers Trainer training with the levers on. Liger's RMSNorm / SwiGLU and Cut Cross-Entropy do not run in the
Triton interpreter (see the modules' docstrings): their numerics run on CUDA only.
"""
import importlib.util
import os

import pytest
import torch

from workbench.errors import UnsupportedArm, WorkbenchError
from workbench.step.data import batch_from_lengths
from workbench.step.models import base_model_of, build_model, model_inputs

TINY = ["tiny-llama", "tiny-qwen3", "tiny-qwen3-moe", "tiny-gpt-oss"]
HAVE_LIGER = importlib.util.find_spec("liger_kernel") is not None
HAVE_CCE = importlib.util.find_spec("cut_cross_entropy") is not None
CUDA = torch.cuda.is_available()
TRITON_CPU = os.environ.get("TRITON_INTERPRET") == "1" and importlib.util.find_spec("triton") is not None
needs_liger = pytest.mark.skipif(not HAVE_LIGER, reason="liger-kernel not installed (the kernels extra)")
flce_runs = pytest.mark.skipif(not (HAVE_LIGER and (CUDA or TRITON_CPU)),
                               reason="Liger's fused cross-entropy needs CUDA or TRITON_INTERPRET=1 with triton")
cuda_only = pytest.mark.skipif(not CUDA, reason="Liger's RMSNorm / SwiGLU and Cut Cross-Entropy do not run in the "
                                                "Triton interpreter (a float argument; a None pointer): CUDA only")


def _model(name="tiny-llama", **kw):
    from workbench.instrument import instrument_layers
    m = build_model(name, lora_rank=4, device="cuda" if kw.pop("cuda", False) else "cpu", **kw)
    instrument_layers(m)  # as the runner builds it: Liger's instance forwards meet the range wrappers
    return m


def _state(hf, family):
    """Every attribute binding Liger's model= path may touch: the modeling module's globals, every module's
    __dict__ (by identity)."""
    from workbench.opts import liger
    objs = [liger.modeling_module(family), *hf.modules()]
    return [(id(o), {k: id(v) for k, v in vars(o).items()}) for o in objs]


def _loss_and_grads(model, batch):
    for p in model.parameters():
        p.grad = None
    loss = model(**model_inputs(model, batch)).loss
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _close(a, b, rtol=1e-4):
    (la, ga), (lb, gb) = a, b
    torch.testing.assert_close(la, lb, rtol=rtol, atol=1e-6)
    assert ga.keys() == gb.keys() and ga
    for n in ga:
        assert torch.linalg.vector_norm(ga[n] - gb[n]) <= rtol * torch.linalg.vector_norm(gb[n]) + 1e-8, n


# --- liger: what it patches, and revert ------------------------------------------------------------------------------

@needs_liger
@pytest.mark.parametrize("name", TINY)
def test_liger_patch_is_reverted_exactly(name):
    from workbench.instrument.ranges import range_name_of
    from workbench.opts import liger
    from workbench.step.models import family_of

    model = _model(name)
    hf = base_model_of(model)
    fam = family_of(hf.config)
    mod = liger.modeling_module(fam)
    before, rope0 = _state(hf, fam), mod.apply_rotary_pos_emb
    layer = hf.model.layers[0]
    changed = liger.patch_liger(hf)
    try:
        assert _state(hf, fam) != before  # the negative control: a forgotten revert is seen by this very check
        assert mod.apply_rotary_pos_emb is not rope0 and "liger" in mod.apply_rotary_pos_emb.__module__
        assert "liger" in vars(hf.model.norm)["forward"].__func__.__module__
        assert "liger" in vars(layer.input_layernorm)["forward"].__func__.__module__
        if fam == "qwen3":
            assert "forward" in vars(layer.self_attn.q_norm)
        mlp_patched = "forward" in vars(layer.mlp) and range_name_of(vars(layer.mlp)["forward"]) is not None
        assert range_name_of(vars(layer.mlp)["forward"]) == "wb/L00/mlp"  # the range is kept around Liger's forward
        if liger.SWIGLU[fam]:
            assert mlp_patched and layer.mlp._get_name() == "LigerSwiGLUMLP"
        else:  # qwen3_moe: LigerExperts belong to the MoE levers; gpt_oss: Liger leaves SwiGLU off
            assert "Liger" not in type(layer.mlp.experts).__name__ and "forward" not in vars(layer.mlp.experts)
    finally:
        liger.restore(changed)
    assert _state(hf, fam) == before
    assert mod.apply_rotary_pos_emb is rope0


@needs_liger
def test_liger_revert_restores_the_exact_forward():
    from workbench.opts import apply as opt_apply
    from workbench.opts import liger

    model = _model("tiny-qwen3")
    hf = base_model_of(model)
    batch = batch_from_lengths([7, 9, 16], hf.config.vocab_size)
    with torch.no_grad():
        ref = model(**model_inputs(model, batch)).loss
    changed = liger.patch_liger(hf)
    liger.restore(changed)
    with torch.no_grad():
        assert torch.equal(model(**model_inputs(model, batch)).loss, ref)
    if not CUDA:
        with pytest.raises(UnsupportedArm, match="CUDA"):
            opt_apply(model, "liger", "liger")
    assert liger.unsupported("liger", model, "cpu") is not None
    assert liger.unsupported("torch_rmsnorm", model, "cpu") is None
    assert "unknown" in liger.unsupported("fastest", model, "cpu")


@needs_liger
def test_ligers_rope_breaks_a_fullgraph_compile():
    """The fact behind `liger.path_conflict` (the H100 path's +liger point failed beside +compile, 2026-11-27): the
    RoPE Liger patches into the modeling module calls a function marked torch.compiler.disable, so dynamo cannot trace
    it into a fullgraph graph. Checked on the installed Liger, not assumed: fullgraph compile of the patched RoPE
    raises before any Triton kernel runs (a CPU suffices); the model's own RoPE compiles (the control)."""
    from torch._dynamo import exc as dynamo_exc
    from workbench.opts import liger

    entry = liger.compile_disabled_entry()
    assert entry == "liger_kernel.backends.dispatch.dispatch"
    hf = base_model_of(_model("tiny-llama"))
    mod = liger.modeling_module("llama")
    q = k = torch.randn(1, 2, 8, 16)
    cos = sin = torch.randn(1, 8, 16)
    own = mod.apply_rotary_pos_emb
    torch._dynamo.reset()
    torch.compile(own, backend="eager", fullgraph=True)(q, k, cos, sin)
    changed = liger.patch_liger(hf)
    try:
        torch._dynamo.reset()
        with pytest.raises(dynamo_exc.Unsupported, match="torch.compiler.disable"):
            torch.compile(mod.apply_rotary_pos_emb, backend="eager", fullgraph=True)(q, k, cos, sin)
    finally:
        liger.restore(changed)
    assert mod.apply_rotary_pos_emb is own
    assert liger.path_conflict({"liger": "liger", "compile": "regional"}, "cuda").endswith(
        "marked torch.compiler.disable (a graph break)")


@pytest.mark.parametrize("name", TINY)
def test_torch_rmsnorm_arm(name, monkeypatch):
    from workbench.opts import apply as opt_apply
    from workbench.opts import liger

    model = _model(name)
    hf = base_model_of(model)
    batch = batch_from_lengths([7, 9, 16], hf.config.vocab_size)
    ref = _loss_and_grads(model, batch)
    calls = []
    real = torch.nn.functional.rms_norm
    monkeypatch.setattr(torch.nn.functional, "rms_norm", lambda *a, **k: calls.append(1) or real(*a, **k))
    norms = [m for m in hf.modules() if liger.is_rmsnorm(m)]
    h = opt_apply(model, "liger", "torch_rmsnorm")
    try:
        got = _loss_and_grads(model, batch)
        assert len(calls) == len(norms) > 0  # every norm ran torch's kernel, once per forward
    finally:
        h.revert()
    _close(got, ref)
    assert all("forward" not in vars(m) for m in norms)
    calls.clear()
    _loss_and_grads(model, batch)
    assert calls == []  # reverted: the family's own norm again


@cuda_only
@needs_liger
@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen3"])
def test_liger_kernels_equivalent_on_cuda(name):
    from workbench.opts import apply as opt_apply
    from workbench.step.data import to_device

    model = _model(name, cuda=True)
    batch = to_device([batch_from_lengths([7, 9, 16], model.config.vocab_size)], torch.device("cuda"))[0]
    ref = _loss_and_grads(model, batch)
    h = opt_apply(model, "liger", "liger")
    try:
        got = _loss_and_grads(model, batch)
    finally:
        h.revert()
    _close(got, ref, rtol=2e-2)


@needs_liger
@pytest.mark.skipif(not (CUDA or TRITON_CPU), reason="needs CUDA or TRITON_INTERPRET=1")
def test_liger_rope_matches_transformers():
    """The one Liger pointwise kernel the interpreter runs: its RoPE against transformers' on the same cos / sin."""
    from liger_kernel.transformers.rope import liger_rotary_pos_emb
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 4, 8, 16, generator=g), torch.randn(1, 2, 8, 16, generator=g)
    ang = torch.randn(1, 8, 8, generator=g)
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)
    for got, want in zip(liger_rotary_pos_emb(q.clone(), k.clone(), cos, sin), apply_rotary_pos_emb(q, k, cos, sin)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


# --- fused_ce --------------------------------------------------------------------------------------------------------

def test_shifted_labels_as_transformers():
    from transformers.loss.loss_utils import ForCausalLMLoss
    from workbench.opts.fused_ce import shifted_labels

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(1, 12, 50, generator=g)
    labels = torch.randint(0, 50, (1, 12), generator=g)
    labels[0, 3] = -100
    want = ForCausalLMLoss(logits, labels, 50)
    got = torch.nn.functional.cross_entropy(logits.view(-1, 50), shifted_labels(labels), ignore_index=-100)
    assert torch.equal(got, want)
    bad = torch.nn.functional.cross_entropy(logits.view(-1, 50), labels.view(-1), ignore_index=-100)
    assert not torch.equal(bad, want)  # unshifted labels: the check can fail


def test_liger_chunks_rule():
    from workbench.opts.fused_ce import liger_chunks
    assert liger_chunks(16384, 128256, 4096) == 32  # llama-3's head: Liger's 32 chunks
    assert liger_chunks(16384, 128256, 4096, chunk_mem_const=4) == 8
    assert liger_chunks(100, 256, 64) == 4 and liger_chunks(5, 256, 64) == 3


@flce_runs
@pytest.mark.parametrize("num_items", [None, 20])
def test_liger_flce_matches_eager_and_reverts(num_items):
    from workbench.opts import apply as opt_apply

    model = _model("tiny-llama")
    hf = base_model_of(model)
    batch = batch_from_lengths([7, 9, 16], hf.config.vocab_size)
    batch.labels[0, 5:9] = -100
    kw = {} if num_items is None else {"num_items_in_batch": torch.tensor(num_items)}

    def run():
        for p in model.parameters():
            p.grad = None
        loss = model(**model_inputs(model, batch), **kw).loss
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    ref = run()
    h = opt_apply(model, "fused_ce", "liger_flce")
    try:
        assert getattr(vars(hf).get("forward"), "_wb_fused_ce", None) == "liger_flce"
        got = run()
        assert h.info["chunks"] >= 1 and h.info["chunk_mem_const"] == 1
    finally:
        h.revert()
    _close(got, ref)
    assert "forward" not in vars(hf)
    assert torch.equal(run()[0], ref[0])


def test_fused_ce_refuses_lora_on_lm_head():
    from peft import LoraConfig, get_peft_model

    from workbench.api import apply_optimizations
    from workbench.opts import fused_ce

    base = build_model("tiny-llama", lora=False)
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "lm_head"]))
    for arm in ("liger_flce", "cce"):
        why = fused_ce.unsupported(arm, model, "cpu")
        assert why is not None and "LoRA adapter" in why and "lm_head.weight" in why
    with pytest.raises(UnsupportedArm, match="LoRA adapter"):
        apply_optimizations(model, fused_ce="liger_flce")
    assert "forward" not in vars(base_model_of(model))  # nothing applied
    assert fused_ce.unsupported("eager", model, "cpu") is None
    plain = build_model("tiny-llama", lora_rank=4)  # the control: LoRA elsewhere, lm_head plain
    if HAVE_LIGER and TRITON_CPU:
        assert fused_ce.unsupported("liger_flce", plain, "cpu") is None
    if HAVE_CCE and not CUDA:
        assert "CUDA" in fused_ce.unsupported("cce", plain, "cpu")
    with pytest.raises(WorkbenchError, match="chunk_mem_const"):
        fused_ce.apply(plain, "liger_flce", chunk_mem_const=0)


@cuda_only
def test_cce_matches_eager_on_cuda():
    from workbench.opts import apply as opt_apply
    from workbench.step.data import to_device

    model = _model("tiny-llama", cuda=True)
    batch = to_device([batch_from_lengths([7, 9, 16], model.config.vocab_size)], torch.device("cuda"))[0]
    ref = _loss_and_grads(model, batch)
    for arm in ("cce", "liger_flce"):
        h = opt_apply(model, "fused_ce", arm)
        try:
            got = _loss_and_grads(model, batch)
        finally:
            h.revert()
        _close(got, ref, rtol=2e-2)


def test_loss_lever_row():
    from workbench.traces.lever_advice import LOSS_COMPONENT, LEVER_COMPONENTS, levers

    comps = [{"component": "step_ms", "ms": 100.0, "share": 1.0}, {"component": "gemm", "ms": 60.0, "share": 0.6}]
    rows = levers(comps, loss_ms=8.0, min_share=0.05)
    assert [r["component"] for r in rows] == [LOSS_COMPONENT] and rows[0]["share"] == pytest.approx(0.08)
    assert levers(comps, loss_ms=4.0, min_share=0.05) == []  # under the share: not named
    assert LOSS_COMPONENT in LEVER_COMPONENTS


# --- apply_optimizations in a user's Trainer -------------------------------------------------------------------------

def _train(model, tmp_path, steps=2):
    from transformers import DataCollatorWithFlattening, Trainer, TrainingArguments

    g = torch.Generator().manual_seed(0)
    docs = [{"input_ids": torch.randint(0, 256, (int(n),), generator=g).tolist()}
            for n in torch.randint(5, 40, (8,), generator=g)]
    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=4, max_steps=steps,
                             learning_rate=1e-3, logging_steps=1, report_to="none", use_cpu=not CUDA,
                             save_strategy="no", dataloader_num_workers=0, seed=0, disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=docs, data_collator=DataCollatorWithFlattening())
    trainer.train()
    return [h["loss"] for h in trainer.state.log_history if "loss" in h]


@flce_runs
def test_trainer_trains_with_the_kernel_levers(tmp_path, monkeypatch):
    """A transformers Trainer trains 2 steps with liger=torch_rmsnorm (Liger's own kernels need CUDA: on a CPU the
    control arm stands in for the plumbing) and fused_ce=liger_flce, to the losses it reaches without them."""
    from workbench.api import apply_optimizations

    ref = _train(build_model("tiny-llama", lora_rank=4), tmp_path / "ref")
    model = build_model("tiny-llama", lora_rank=4)
    calls = []
    real = torch.nn.functional.rms_norm
    monkeypatch.setattr(torch.nn.functional, "rms_norm", lambda *a, **k: calls.append(1) or real(*a, **k))
    with apply_optimizations(model, liger="liger" if CUDA else "torch_rmsnorm", fused_ce="liger_flce") as h:
        got = _train(model, tmp_path / "opt")
        assert h.by_opt["fused_ce"].info["chunks"] >= 1  # the fused loss ran
        assert CUDA or calls  # torch's rms_norm ran
    assert "forward" not in vars(base_model_of(model))
    assert len(got) == len(ref) == 2
    torch.testing.assert_close(torch.tensor(got), torch.tensor(ref), rtol=1e-3 if not CUDA else 2e-2, atol=1e-5)


def test_loss_per_step_counts_the_head_outside_gemm():
    """Busy time outside every decoder layer, GEMM and optimizer excluded (a synthetic trace with known answers)."""
    from synthetic_traces import Trace

    from workbench.traces.lever_advice import loss_per_step

    t = Trace()
    t.range("wb/step", 0, 100)
    t.range("wb/fwd", 0, 60)
    t.range("wb/L00/fwd", 0, 20)
    t.launch(1, "kernel", "vectorized_elementwise_kernel", 2, 10)  # in the layer: not the loss's
    t.launch(21, "kernel", "sm90_xmma_gemm_bf16", 21, 40)  # the lm_head GEMM: stays
    t.launch(41, "kernel", "direct_copy_kernel_cuda", 41, 47)  # the logits' fp32 cast: 6 us
    t.launch(48, "kernel", "cunn_SoftMaxForward", 48, 52)  # log-softmax: 4 us
    t.range("wb/opt", 70, 90)
    t.launch(71, "kernel", "multi_tensor_apply_kernel", 71, 80)  # the optimizer: not the loss's
    got = loss_per_step(t.events())
    assert list(got.round(6)) == [0.010]  # ms
