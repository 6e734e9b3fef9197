"""expert_lora arms (split LoRA on fused experts): same loss and LoRA gradients as transformers' eager loop over
peft's folded weights (fp32, CPU), a negative control that must fail the same check, no whole-weight tensor and no
select_backward in the split arm, 0 syncs per MoE layer and pass, apply / revert / unsupported.

    # E = experts, k = experts per token
"""
import pytest
import torch

from test_moe import FAMILY_SYNCS_PER_EXPERT, _expert_hits, _model_and_batch, _SliceGradients
from workbench.errors import UnsupportedArm, WorkbenchError
from workbench.opts import expert_lora

PRESETS = ["tiny-qwen3-moe", "tiny-gpt-oss"]
LOSS_TOL = dict(atol=1e-5, rtol=1e-5)
GRAD_TOL = dict(atol=1e-6, rtol=1e-4)
"""Fixed before the first run: fp32 on CPU, the split arm only reorders sums (x@W + s*(x@A)@B vs x@(W + s*A@B))."""
ARMS_OPTIONS = [("split", {}), ("split", {"gemm": "dense"}), ("grouped_mm", {})]


def _loss_and_grads(model, batch):
    from workbench.step.models import lora_parameters, model_inputs

    model.zero_grad(set_to_none=True)
    loss = model(**model_inputs(model, batch)).loss
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in lora_parameters(model) if p.grad is not None}


def _run_arm(model, batch, arm, **options):
    from workbench.opts import apply

    handle = apply(model, "expert_lora", arm, **options)
    try:
        return (*_loss_and_grads(model, batch), dict(handle.info))
    finally:
        handle.revert()


def _assert_matches(loss, grads, ref_loss, ref_grads, what):
    torch.testing.assert_close(loss, ref_loss, **LOSS_TOL, msg=lambda m: f"{what} loss: {m}")
    assert grads.keys() == ref_grads.keys(), what
    for n in ref_grads:
        torch.testing.assert_close(grads[n], ref_grads[n], **GRAD_TOL, msg=lambda m: f"{what} {n}: {m}")


@pytest.fixture(scope="module", params=PRESETS)
def reference(request):
    """(model, batch, eager loss, eager LoRA gradients) of a tiny MoE preset, 2 layers, LoRA on the fused experts."""
    model, batch = _model_and_batch(request.param)
    loss, grads, _ = _run_arm(model, batch, "eager")
    expert_lora_names = [n for n in grads if "experts" in n and "lora_" in n]
    assert expert_lora_names and all(grads[n].abs().sum() > 0 for n in expert_lora_names)
    return request.param, model, batch, loss, grads


@pytest.mark.parametrize("arm,options", ARMS_OPTIONS, ids=["split", "split-dense", "grouped_mm"])
def test_arms_match_eager_loss_and_lora_gradients(reference, arm, options):
    preset, model, batch, ref_loss, ref_grads = reference
    loss, grads, info = _run_arm(model, batch, arm, **options)
    _assert_matches(loss, grads, ref_loss, ref_grads, f"{preset} {arm} {options}")
    if arm == "split":  # peft handed over its factors: the saving path, not the folded fallback
        assert info["lora_path"] == {"gate_up_proj": "factors", "down_proj": "factors"}
        assert set(info["gemm_resolved"].values()) == {options.get("gemm", "torch")}


def test_negative_control_the_neighbouring_experts_lora_fails(reference, monkeypatch):
    """The same check must fail for a split arm that applies expert e+1's adapter to expert e's rows."""
    preset, model, batch, ref_loss, ref_grads = reference
    real = expert_lora.lora_factors

    def rolled(self, name):
        w, lora, path = real(self, name)
        a, b, s = lora
        return w, (a.roll(1, 0), b.roll(1, 0), s), path

    monkeypatch.setattr(expert_lora, "lora_factors", rolled)
    loss, grads, _ = _run_arm(model, batch, "split")
    with pytest.raises(AssertionError):
        _assert_matches(loss, grads, ref_loss, ref_grads, f"{preset} rolled")


def test_split_falls_back_to_peft_folded_weight_without_factors(reference, monkeypatch):
    """Where peft does not hand over factors, split reads the folded weight: the same function, path 'folded'."""
    preset, model, batch, ref_loss, ref_grads = reference
    monkeypatch.setattr(expert_lora, "_is_factor_proxy", lambda p: False)
    loss, grads, info = _run_arm(model, batch, "split")
    assert info["lora_path"] == {"gate_up_proj": "folded", "down_proj": "folded"}
    _assert_matches(loss, grads, ref_loss, ref_grads, f"{preset} folded")


class _WholeWeightTensors(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts ops that write a new tensor of a whole fused expert weight's numel (the fold W + s*A@B, its gradient,
    the zero tensors of select_backward and the adds into them); views and in-place ops on an input are not counted."""

    def __init__(self, numels):
        super().__init__()
        self.numels, self.n = set(numels), 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        ins = {t.untyped_storage().data_ptr() for t in torch.utils._pytree.tree_leaves((args, kwargs))
               if isinstance(t, torch.Tensor)}
        outs = out if isinstance(out, (tuple, list)) else (out,)
        self.n += sum(1 for o in outs if isinstance(o, torch.Tensor) and o.numel() in self.numels
                      and o.untyped_storage().data_ptr() not in ins)
        return out


@pytest.mark.parametrize("preset", PRESETS)
def test_split_builds_no_whole_weight_tensor_and_no_slice_gradient(preset):
    """eager: per_layer * E_hit select_backwards (the slice-gradient pattern of workbench.traces.lever_advice.slice_gradients),
    each a whole-weight zero tensor and an add; grouped_mm: none, but the folded weight and its whole gradient;
    split: no whole-weight tensor in the backward, and in the forward only the fold peft's parametrization check
    computes (and drops) in every arm."""
    from workbench.step.models import LORA_TARGET_EXPERT_PARAMETERS, model_inputs
    from workbench.opts import apply

    model, batch = _model_and_batch(preset)
    hits = _expert_hits(model)
    weights = [p for n, p in model.named_parameters() if p.dim() == 3 and "experts" in n and "lora_" not in n]
    per_layer = len(LORA_TARGET_EXPERT_PARAMETERS)
    assert len(weights) == 2 * per_layer  # 2 layers
    numels = [p.numel() for p in weights]
    counts = {}
    for arm in expert_lora.ARMS:
        handle = apply(model, "expert_lora", arm)
        model.zero_grad(set_to_none=True)
        with _WholeWeightTensors(numels) as fwd:
            loss = model(**model_inputs(model, batch)).loss
        e_hit = sum(int(torch.unique(t).numel()) for t in hits.values())
        with _SliceGradients(numels) as sg, _WholeWeightTensors(numels) as bwd:
            loss.backward()
        handle.revert()
        counts[arm] = (sg.n, fwd.n, bwd.n)
        assert sg.n == (per_layer * e_hit if arm == "eager" else 0), (arm, sg.n, e_hit)
    W = len(weights)
    # forward: peft's register_parametrization checks its fold once per weight in every arm (torch's consistency
    # check, not unsafe=True); eager and grouped_mm fold it again when they read the weight
    assert counts["split"] == (0, W, 0), counts
    assert counts["grouped_mm"] == (0, 2 * W, W), counts  # the whole gradient of each folded weight
    n_sel = counts["eager"][0]
    assert counts["eager"] == (n_sel, 2 * W, 2 * n_sel - W), counts  # a zero tensor per slice, an add for all but one


@pytest.mark.parametrize("preset", PRESETS)
def test_syncs_per_moe_layer_and_pass(preset):
    """eager 1 + c*E_hit per MoE layer in the forward and the recompute (c = 7 GPT-OSS, 5 Qwen3-MoE); split and
    grouped_mm 0 in every pass."""
    from workbench.step.harness import enable_checkpointing
    from workbench.instrument import SyncCounter, instrument_layers, state
    from workbench.step.models import model_inputs
    from workbench.opts import apply

    model, batch = _model_and_batch(preset)
    enable_checkpointing(model)
    instrument_layers(model)
    hits = _expert_hits(model)
    for arm in expert_lora.ARMS:
        handle = apply(model, "expert_lora", arm)
        with SyncCounter(device_type="cpu") as c:
            with state.phase(state.FORWARD):
                loss = model(**model_inputs(model, batch)).loss
            fwd_hits = {layer: int(torch.unique(t).numel()) for layer, t in hits.items()}
            with state.phase(state.BACKWARD):
                loss.backward()
        handle.revert()
        by = c.by("layer", "pass_")
        assert len(fwd_hits) == 2
        for layer, e_hit in fwd_hits.items():
            want = 1 + FAMILY_SYNCS_PER_EXPERT[preset] * e_hit if arm == "eager" else 0
            for pass_ in ("forward", "recompute"):
                assert by.get((layer, pass_), 0) == want, (arm, layer, pass_, by)
            assert by.get((layer, "backward"), 0) == 0, (arm, layer, by)


# --- contract --------------------------------------------------------------------------------------------------

def test_apply_switches_and_revert_restores_the_experts_implementation():
    from workbench.step.models import base_model_of
    from workbench.opts import apply

    model, _ = _model_and_batch("tiny-qwen3-moe", experts_implementation=None)
    base = base_model_of(model)
    before = base.config._experts_implementation
    h = apply(model, "expert_lora", "split", gemm="dense")
    assert base.config._experts_implementation == "wb_split_lora_dense" == h.info["experts_implementation"]
    h.revert()
    assert base.config._experts_implementation == before
    for arm, opts in [("split", {"gemm": "cutlass"}), ("grouped_mm", {"gemm": "torch"}), ("fastest", {})]:
        with pytest.raises(WorkbenchError):
            apply(model, "expert_lora", arm, **opts)


def test_non_moe_model_is_unsupported_with_one_line():
    from workbench.step.models import build_model

    model = build_model("tiny-llama", layers=1, lora=False)
    why = expert_lora.unsupported("split", model, "cpu")
    assert why and "\n" not in why and "MoE" in why
    with pytest.raises(UnsupportedArm):
        expert_lora.apply(model, "split")


def test_spec_names_the_slice_gradient_lever_outside_opt_all():
    from workbench.traces import lever_advice as levers
    from workbench.opts import registry as opt_registry

    spec = opt_registry.spec("expert_lora")
    assert spec["order"] == 12 and spec["in_all"] is False and spec["all_variants"] == ()
    assert spec["lever"] == "slice gradients (fill + add)"
    assert levers.slice_gradients([{"name": levers.FILL, "count": 64, "ms": 1.0},
                                   {"name": levers.ADD, "count": 64, "ms": 1.0}], 10.0,
                                  experts=64)["component"] == spec["lever"]
    assert expert_lora.ARMS[0] == expert_lora.BASELINE == "eager" and expert_lora.OPTIMIZED == "split"
    assert 0 < expert_lora.SAVED_FRACTION <= 1


def test_experts_name_builds_a_model_that_trains_like_eager(reference):
    """`--experts wb_split_lora` (build_model's experts_implementation) runs the split arm from the start."""
    from workbench.step.models import build_model, check_experts

    preset, _, batch, ref_loss, ref_grads = reference
    for gemm in ("auto", "dense"):
        check_experts(expert_lora.implementation_name("split", gemm))
    model = build_model(preset, experts_implementation="wb_split_lora", layers=2)
    loss, grads = _loss_and_grads(model, batch)
    _assert_matches(loss, grads, ref_loss, ref_grads, f"{preset} built with wb_split_lora")
