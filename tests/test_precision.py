"""workbench.step.precision_mode: resolution, what each precision builds, the harness's forward under autocast, checkpoint
recompute keeping the autocast state (torch's and the offload arms'), and the A/B runner judging an autocast run
by the bf16 criterion (the packing arms on CPU bf16 autocast; a negative control that fails)."""
import json
import os

import pytest
import torch

from workbench.measure import equivalence
from workbench.step import precision_mode as precision
from workbench.step.data import make_batches
from workbench.step.harness import enable_checkpointing, make_optimizer, train_step
from workbench.step.models import build_model, lora_parameters, model_inputs


def test_resolve():
    assert precision.resolve("cuda", "auto") == "autocast"
    assert precision.resolve(torch.device("cpu"), "auto") == "fp32-adapters"
    for p in precision.PRECISIONS:
        assert precision.resolve("cpu", p) == p and precision.resolve("cuda", p) == p
    with pytest.raises(ValueError):
        precision.resolve("cpu", "fp8")


def test_forward_context():
    with precision.forward_context("autocast", "cpu"):
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    for p in ("bf16", "fp32-adapters"):
        with precision.forward_context(p, "cpu"):
            assert not torch.is_autocast_enabled("cpu")


@pytest.mark.parametrize("p,base,adapters", [("auto", torch.float32, torch.float32),
                                             ("fp32-adapters", torch.float32, torch.float32),
                                             ("autocast", torch.bfloat16, torch.float32),
                                             ("bf16", torch.bfloat16, torch.bfloat16)])
def test_what_each_precision_builds(p, base, adapters):
    m = build_model("tiny-qwen3", lora_rank=4, precision=p)
    assert {q.dtype for n, q in m.named_parameters() if not q.requires_grad} == {base}
    assert {q.dtype for _, q in lora_parameters(m)} == {adapters}
    at = precision.resolve("cpu", p)
    assert precision.compute_dtype(m, at) == (torch.bfloat16 if p in ("autocast", "bf16") else torch.float32)
    assert not any(k.startswith("wb_") and "precision" in k for mod in m.modules() for k in vars(mod))  # not stashed


def _proj_dtypes(model):
    """dtype of every LoRA-A matmul output (the adapter's own compute) during a forward."""
    seen = []
    hooks = [mod.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
             for n, mod in model.named_modules() if n.endswith("q_proj.lora_A.default")]
    return seen, hooks


def test_harness_forward_autocasts_backward_does_not():
    """Under precision autocast the fp32 adapters compute in bf16 (autocast), as Trainer(bf16=True) runs them; with
    fp32-adapters (the reference) they compute in fp32."""
    batch = make_batches("uniform:10:40", 96, 1, 256)[0]
    for p, want in (("autocast", torch.bfloat16), ("fp32-adapters", torch.float32)):
        m = build_model("tiny-qwen3", lora_rank=4, precision=p)
        seen, hooks = _proj_dtypes(m)
        rec = train_step(m, batch, make_optimizer(m), precision=p)
        for h in hooks:
            h.remove()
        assert seen and set(seen) == {want}, (p, seen)
        assert all(q.dtype == torch.float32 for _, q in lora_parameters(m)) and rec.loss == rec.loss
        assert not torch.is_autocast_enabled("cpu")


def _run_checkpointed(model, batch, arm, capture):
    """One forward + backward under CPU bf16 autocast with offload `arm` applied; returns (loss, LoRA grads).
    `capture` collects (dtype, output) of layer 0's LoRA'd q_proj on every call: the forward and the recompute (early
    in the layer: a non-reentrant recompute stops once the saved tensors are back, before the layer's end)."""
    from workbench.opts import offload

    q_proj = model.get_base_model().model.layers[0].self_attn.q_proj
    hook = q_proj.register_forward_hook(lambda m, i, o: capture.append((o.dtype, o.detach().clone())))
    h = offload.apply(model, arm)
    try:
        model.zero_grad(set_to_none=True)
        with precision.forward_context("autocast", "cpu"):
            loss = model(**model_inputs(model, batch)).loss
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in lora_parameters(model)}
    finally:
        h.revert()
        hook.remove()


@pytest.fixture(scope="module")
def autocast_model():
    m = build_model("tiny-qwen3", layers=3, lora_rank=4, precision="autocast")
    return m, make_batches("uniform:10:60", 160, 1, m.config.vocab_size, seed=1)[0]


@pytest.mark.parametrize("arm", ["no_offload", "sync_reload", "double_buffer"])
def test_recompute_keeps_the_autocast_state(autocast_model, arm):
    """Torch's checkpoint (no_offload) and the offload arms' own checkpoint function recompute under the autocast
    state of the forward: the recomputed layer output equals the original in dtype and value."""
    model, batch = autocast_model
    calls = []
    _run_checkpointed(model, batch, arm, calls)
    assert len(calls) == 2, f"{arm}: expected the forward and one recompute, got {len(calls)} calls"
    (d0, o0), (d1, o1) = calls
    assert d0 == d1 and torch.equal(o0, o1)


def test_offload_grads_equal_no_offload_under_autocast(autocast_model):
    model, batch = autocast_model
    loss_ref, ref = _run_checkpointed(model, batch, "no_offload", [])
    for arm in ("sync_reload", "double_buffer"):
        loss, got = _run_checkpointed(model, batch, arm, [])
        assert torch.equal(loss, loss_ref)
        bad = [n for n in ref if not torch.equal(got[n], ref[n])]
        assert not bad, f"{arm}: {len(bad)} LoRA gradients differ under autocast, e.g. {bad[0]}"


def test_recompute_without_the_autocast_state_differs(autocast_model, monkeypatch):
    """Negative control: an offload recompute that drops the autocast state computes another function."""
    from workbench.opts import offload

    model, batch = autocast_model
    calls = []
    _, ref = _run_checkpointed(model, batch, "no_offload", [])
    monkeypatch.setattr(offload.Offloader, "autocast_state", staticmethod(lambda x: None))
    _, got = _run_checkpointed(model, batch, "sync_reload", calls)
    assert not torch.equal(calls[0][1], calls[1][1])
    assert any(not torch.equal(got[n], ref[n]) for n in ref)


def test_upcast_reference_runs_without_autocast():
    m = build_model("tiny-qwen3", lora_rank=4, precision="autocast")
    batch = make_batches("uniform:10:40", 96, 1, 256)[0]
    with equivalence.Upcast(m):
        at = equivalence.REFERENCE_PRECISION
        assert precision.compute_dtype(m, at) == torch.float32
        seen, hooks = _proj_dtypes(m)
        train_step(m, batch, equivalence.GradCapture(lora_parameters(m)), precision=at)
        for h in hooks:
            h.remove()
        assert set(seen) == {torch.float32}
    assert next(m.parameters()).dtype == torch.bfloat16


def test_the_step_runs_the_precision_it_is_passed():
    """The precision is passed to the step, not read off the model: one model built for autocast computes its
    adapters in bf16 when stepped at autocast and in fp32 when stepped at fp32-adapters (the two must differ)."""
    batch = make_batches("uniform:10:40", 96, 1, 256)[0]
    m = build_model("tiny-qwen3", lora_rank=4, precision="autocast")
    got = {}
    for at in ("autocast", "fp32-adapters"):
        seen, hooks = _proj_dtypes(m)
        train_step(m, batch, equivalence.GradCapture(lora_parameters(m)), precision=at)
        for h in hooks:
            h.remove()
        got[at] = set(seen)
    assert got == {"autocast": {torch.bfloat16}, "fp32-adapters": {torch.float32}}


# --- the A/B runner: an autocast run judged by the bf16 criterion ------------------------------------------------

FAST = ["--tokens", "128", "--steps", "1", "--warmup", "0", "--warmup-max", "0", "--device", "cpu", "--reps", "1"]


def _ab(capsys, argv):
    from workbench import ab
    from workbench.cli import run_main

    rc = run_main(ab.main, argv)
    out, err = capsys.readouterr()
    return rc, json.loads([ln for ln in out.splitlines() if ln.strip()][-1]), err


def _have_packing():
    try:
        from workbench import opts
        opts.module("packing")
        return True
    except Exception:
        return False


@pytest.mark.skipif(not _have_packing(), reason="workbench.opts.packing not available")
def test_ab_packing_arms_under_autocast_are_equivalent(capsys, tmp_path):
    rc, res, err = _ab(capsys, ["--opt", "packing", "--model", "tiny-qwen3", "--precision", "autocast", *FAST,
                                "--out", str(tmp_path)])
    assert rc == 0, err
    c = res["comparisons"][0]
    assert c["equivalent"] and all(e["equivalent"] for e in c["equivalence"].values())
    meta = json.load(open(os.path.join(tmp_path, "meta.json")))
    assert meta["args"]["precision"] == "autocast"
    assert meta["equivalence_criterion"]["dtype"] == "torch.bfloat16"
    assert meta["equivalence_criterion"]["rtol"] == equivalence.RTOL[torch.bfloat16]
    import csv
    from workbench.measure.results import ENV_COLUMNS
    if "precision" in ENV_COLUMNS:  # the environment column, where results.py carries it
        rows = list(csv.DictReader(open(os.path.join(tmp_path, "results.csv"))))
        assert rows and {r["precision"] for r in rows} == {"autocast"}


def test_ab_auto_resolves_to_fp32_adapters_on_cpu(capsys, tmp_path, monkeypatch):
    from fixtures import fake_opts
    fake_opts.install(monkeypatch)
    rc, res, err = _ab(capsys, ["--opt", "packing", "--model", "tiny-qwen3", *FAST, "--out", str(tmp_path)])
    assert rc == 0, err
    meta = json.load(open(os.path.join(tmp_path, "meta.json")))
    assert meta["args"]["precision"] == "fp32-adapters" and meta["equivalence_criterion"]["dtype"] == "torch.float32"


def test_ab_autocast_wrong_arm_fails(capsys, tmp_path, monkeypatch):
    """Negative control: under autocast an arm computing another function (half the labels dropped) is judged not
    equivalent, after the fp32 reference (run without autocast) is consulted."""
    from fixtures import fake_opts
    fake_opts.install(monkeypatch)
    fake_opts.DIFFER_ARMS.add(("packing", "cached"))
    rc, res, err = _ab(capsys, ["--opt", "packing", "--model", "tiny-qwen3", "--precision", "autocast", *FAST,
                                "--out", str(tmp_path)])
    assert rc == 1
    e = res["comparisons"][0]["equivalence"]["cached"]
    assert not e["equivalent"] and e["judged_by"].startswith("fp32") and e["rtol"] == equivalence.RTOL[torch.bfloat16]
