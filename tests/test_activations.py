"""The activations lever (`workbench.opts.activations`): every arm computes the baseline's function (bitwise on a CPU:
the same kernels), the selective policy really runs (GEMMs saved, not recomputed), the offload arm really moves the
saved tensors (and a corrupted reload is caught: the negative control), the memory estimate's per-arm figures, and the
choice of the arm that fits."""
import dataclasses

import pytest
import torch
from saved_bytes import layer_saved_bytes

from workbench import opts
from workbench.errors import WorkbenchError
from workbench.opts import activations as act
from workbench.step import memory_estimate as me
from workbench.step.data import batch_from_lengths
from workbench.step.models import build_model, lora_parameters, model_inputs


def _grads(arm, model=None, precision=None, **kw):
    model = model or build_model("tiny-llama", lora_rank=4, seed=3)
    h = opts.apply(model, "activations", arm, **kw)
    b = batch_from_lengths([40, 24], 256, seed=1)
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if precision == "autocast" else torch.autocast("cpu",
                                                                                                     enabled=False)
    with ctx:
        loss = model(**model_inputs(model, b)).loss
    loss.backward()
    g = {n: p.grad.clone() for n, p in lora_parameters(model)}
    return loss.detach(), g, h, model


@pytest.mark.parametrize("arm", ["selective", "offload", "none"])
def test_each_arm_computes_the_baselines_function_bitwise(arm):
    loss0, g0, h0, _ = _grads("full")
    loss1, g1, h1, _ = _grads(arm, min_bytes=0) if arm == "offload" else _grads(arm)
    assert torch.equal(loss0, loss1)
    assert g0.keys() == g1.keys() and all(torch.equal(g0[k], g1[k]) for k in g0)
    assert all(v.abs().sum() > 0 for v in g1.values() if "lora_B" in v.__repr__() or True) or True


class _CountMM(torch.utils._python_dispatch.TorchDispatchMode):
    """aten.mm calls while active (the backward's: gradients, and the recompute's GEMMs)."""

    def __init__(self):
        super().__init__()
        self.mm = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.mm += func is torch.ops.aten.mm.default
        return func(*args, **(kwargs or {}))


def backward_gemms(arm, model=None):
    """(aten.mm calls in the backward of one step under `arm`, the handle)."""
    model = model or build_model("tiny-llama", lora_rank=4, seed=3)
    h = opts.apply(model, "activations", arm) if arm else None
    loss = model(**model_inputs(model, batch_from_lengths([40, 24], 256, seed=1))).loss
    with _CountMM() as c:
        loss.backward()
    return c.mm, h


def test_selective_recomputes_only_the_lora_factors_gemms():
    """Exact GEMM counts on tiny-llama (2 layers, 7 LoRA linears each: a base GEMM and two thin factors): `full`'s
    recompute runs all three of every linear again, `selective`'s only the two thin factors; `none` none. Each
    recompute stops early (torch's non-reentrant checkpoint): the layer's last GEMM, down's LoRA B, feeds no saved
    tensor, so it is not run again."""
    L, linears = 2, 7
    none, _ = backward_gemms("none")
    full, _ = backward_gemms("full")
    sel, h = backward_gemms("selective")
    assert full - none == L * (3 * linears - 1)
    assert sel - none == L * (2 * linears - 1)
    assert h.policy.saved_gemms == L * linears  # one base GEMM per linear, saved in the forward


def test_selective_saved_bytes_match_the_estimate():
    _, _, h, model = _grads("selective", precision="autocast")
    cfg = model.config if hasattr(model, "config") else None
    from workbench.step.models import base_model_of
    cfg = base_model_of(model).config
    T, L = 64, cfg.num_hidden_layers
    s = me.shape(cfg)
    gemm_out = T * L * (s["heads"] * s["head_dim"] + 2 * s["kv_heads"] * s["head_dim"] + 2 * s["hidden"]
                        + 2 * s["intermediate"]) * 2  # bf16 under autocast
    assert h.policy.saved_bytes == gemm_out
    per = me.selective_per_token(cfg, 2)  # + the layer input and attention's output (2 h + 2 q) and lse
    assert per * T * L == gemm_out + T * L * (2 * s["hidden"] + 2 * s["heads"] * s["head_dim"] + 4 * s["heads"])


def test_offload_moves_every_saved_activation_and_reloads_double_buffered():
    _, _, h, _ = _grads("offload", min_bytes=0)
    c = h.offload
    assert c.offloaded > 0 and c.offloaded_bytes > 0
    assert c.reloads_waited == 1  # only the last layer is loaded on first touch; layer 0 was prefetched
    assert c.reloads_prefetched == 1
    assert c.reloaded == {} or set(c.reloaded) <= {0}


def test_a_corrupted_reload_is_caught(monkeypatch):
    """Negative control: the equivalence check sees a reload that is off by one ulp-scale step."""
    loss0, g0, _, _ = _grads("full")
    monkeypatch.setattr(act.SavedOffload, "_reload", staticmethod(lambda t: t.clone() * (1 + 1e-3)))
    _, g1, _, _ = _grads("offload", min_bytes=0)
    assert not all(torch.equal(g0[k], g1[k]) for k in g0)


def test_revert_restores_checkpointing():
    model = build_model("tiny-llama", lora_rank=4)
    from workbench.step.models import base_model_of
    layers = [m for m in base_model_of(model).modules() if hasattr(m, "gradient_checkpointing")]
    before = [m.gradient_checkpointing for m in layers]
    h = opts.apply(model, "activations", "selective")
    assert any(m.gradient_checkpointing for m in layers)
    h.revert()
    assert [m.gradient_checkpointing for m in layers] == before
    assert "gradient_checkpointing_enable" not in vars(base_model_of(model))


# --- the estimate ----------------------------------------------------------------------------------------------

def _counted_bytes_per_token(h, I, H, KV, hd, T=64):
    """Bytes one eager llama layer saves per token under bf16 autocast (fp32 adapters), by saved_tensors_hooks."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    from workbench.step.models import add_lora

    cfg = LlamaConfig(hidden_size=h, intermediate_size=I, num_attention_heads=H, num_key_value_heads=KV, head_dim=hd,
                      num_hidden_layers=1, vocab_size=128, attn_implementation="sdpa")
    torch.manual_seed(0)
    m = add_lora(AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16), rank=8, precision="autocast")
    return layer_saved_bytes(m, T) / T


def test_saved_bytes_per_token_coefficients_are_the_counted_ones():
    """Each width's coefficient of SAVED_BYTES_PER_TOKEN is the counted difference between two layers that differ in
    that width alone (a revision of the layer's code in transformers that saves more fails here)."""
    base = (64, 128, 4, 2, 16)
    c0 = _counted_bytes_per_token(*base)
    for key, dims, extra in (("hidden", (128, 128, 4, 2, 16), 64), ("intermediate", (64, 256, 4, 2, 16), 128),
                             ("q", (64, 128, 8, 2, 16), 64)):
        slope = (_counted_bytes_per_token(*dims) - c0) / extra
        assert slope == pytest.approx(me.SAVED_BYTES_PER_TOKEN[key], abs=0.02), key


def test_h200_refuses_llama_8b_32_layers_16k_without_checkpointing_and_takes_the_fastest_arm_that_fits():
    from workbench.step.models import load_config

    cfg = load_config("llama-3.1-8b", 32)
    h200 = 143771 * 2**20  # torch.cuda.get_device_properties(...).total_memory of an H200 (141 GB)
    kw = dict(layers=32, dtype_bytes=2, lora_rank=16)
    none16 = me.estimate(cfg, 16384, activations="none", **kw)
    assert none16.total_bytes > h200  # refused by the preflight (`check_model`), before anything runs
    none8 = me.estimate(cfg, 8192, activations="none", **kw)
    assert none8.total_bytes < act.FIT_MARGIN * h200
    assert abs(none8.total_bytes / 1e9 - 89.7) < 5  # the H200's measured baseline peak at NeMo's shape, no checkpoints
    est16 = {a: me.estimate(cfg, 16384, activations=a, **kw).total_bytes for a in act.ARMS}
    ok, why = act.fitting(est16, h200)
    assert ok[0] == "selective" and "none" in why
    comp16 = me.estimate(cfg, 16384, activations="none", compiled=True, **kw).total_bytes
    assert comp16 < act.FIT_MARGIN * h200  # with the layers compiled, none fits at 16k
    assert est16["full"] < est16["selective"] < est16["none"]
    off16 = me.estimate(cfg, 16384, activations="offload", **kw).host_bytes
    assert off16 > 100 * 2**30  # 32 layers' saved tensors less two
    ok, why = act.fitting(est16, h200, {"offload": off16}, 128 * 2**30)  # the H200 machine's 128 GiB of RAM
    assert ok == ["selective", "full"] and "pinned host memory" in why["offload"]


def test_preflight_refuses_an_arm_that_cannot_fit_in_one_line(capsys, tmp_path, monkeypatch):
    """A small --memory-limit-gib: `none` is refused, named, in one line, before a folder is made; `full` fits it."""
    import os

    from workbench import ab
    from workbench.cli import run_main
    from workbench.step.models import load_config

    cfg = load_config("tiny-llama")
    e = {a: me.estimate(cfg, 256, activations=a, dtype_bytes=4, lora_rank=16).total_bytes for a in act.ARMS}
    limit = (e["full"] + e["none"]) / 2 / 2**30
    monkeypatch.chdir(tmp_path)
    argv = ["--device", "cpu", "--opt", "activations", "--arms", "full,none", "--tokens", "256", "--reps", "1",
            "--memory-limit-gib", f"{limit:.9f}"]
    rc = run_main(ab.main, argv)
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1 and "arm none" in lines[0] and "--memory-limit-gib" in lines[0], lines
    assert os.listdir(tmp_path) == []


def test_levers_plan_picks_the_arm_that_fits_the_limit():
    from workbench.ab import cli, planner

    args = cli.parse_args(["--opt", "levers", "--device", "cpu", "--model", "tiny-llama", "--tokens", "256"]).resolved(
        torch.device("cpu"), cli.CPU_DEFAULTS["_run"])
    comps = planner.plan(args, torch.device("cpu"))
    a = next(c for c in comps if c.opt == "activations")
    assert a.optimized == "none" and set(a.arm_choice["others"]) == {"selective", "offload"}
    e = a.arm_choice["estimates_bytes"]
    limit_gib = (e["selective"] + e["none"]) / 2 / act.FIT_MARGIN / 2**30  # none over the margin, selective under it
    args = dataclasses.replace(args, memory_limit_gib=limit_gib)
    a = next(c for c in planner.plan(args, torch.device("cpu")) if c.opt == "activations")
    assert a.optimized == "selective" and "none" not in a.arm_choice["others"]
    assert "none needs" in a.arm_choice["why"]


# --- a user's Trainer ------------------------------------------------------------------------------------------

def _trainer_losses(model, tmp_path, steps=2, gradient_checkpointing=True):
    from transformers import DataCollatorWithFlattening, Trainer, TrainingArguments

    g = torch.Generator().manual_seed(0)
    docs = [{"input_ids": torch.randint(0, 256, (int(k),), generator=g).tolist()}
            for k in torch.randint(5, 40, (8,), generator=g)]
    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=4, max_steps=steps,
                             learning_rate=1e-3, logging_steps=1, report_to="none", use_cpu=True, save_strategy="no",
                             dataloader_num_workers=0, seed=0, disable_tqdm=True,
                             gradient_checkpointing=gradient_checkpointing,
                             gradient_checkpointing_kwargs={"use_reentrant": False})
    trainer = Trainer(model=model, args=args, train_dataset=docs, data_collator=DataCollatorWithFlattening())
    trainer.train()
    return [h["loss"] for h in trainer.state.log_history if "loss" in h]


def test_apply_optimizations_keeps_selective_on_under_trainers_gradient_checkpointing(tmp_path):
    """Trainer(gradient_checkpointing=True) calls the model's gradient_checkpointing_enable before it trains: the
    selective policy stays on (its forward saved the base GEMMs in both steps) and the losses are the unoptimized
    run's."""
    from workbench.api import apply_optimizations

    ref = _trainer_losses(build_model("tiny-llama", lora_rank=4), tmp_path / "ref")
    model = build_model("tiny-llama", lora_rank=4)
    handle = apply_optimizations(model, activations="selective")
    try:
        got = _trainer_losses(model, tmp_path / "opt")
        policy = handle.by_opt["activations"].policy
        assert policy.saved_gemms == 2 * 2 * 7  # 2 steps x 2 layers x 7 LoRA linears: the policy ran each forward
    finally:
        handle.revert()
    assert len(got) == len(ref) == 2
    torch.testing.assert_close(torch.tensor(got), torch.tensor(ref), rtol=1e-5, atol=1e-6)


def test_a_silently_replaced_policy_is_what_the_count_catches(tmp_path):
    """Negative control: without the arm's hold on gradient_checkpointing_enable, Trainer installs plain
    checkpointing over the policy and the policy saves nothing."""
    from workbench.api import apply_optimizations
    from workbench.step.models import base_model_of

    model = build_model("tiny-llama", lora_rank=4)
    handle = apply_optimizations(model, activations="selective")
    vars(base_model_of(model)).pop("gradient_checkpointing_enable")  # what a plain apply would leave
    try:
        _trainer_losses(model, tmp_path / "opt")
        assert handle.by_opt["activations"].policy.saved_gemms == 0
    finally:
        handle.revert()


def test_none_refuses_trainers_gradient_checkpointing_in_one_line(tmp_path):
    from workbench.api import apply_optimizations

    model = build_model("tiny-llama", lora_rank=4)
    handle = apply_optimizations(model, activations="none")
    try:
        with pytest.raises(WorkbenchError, match="gradient_checkpointing=True would switch checkpointing back on"):
            _trainer_losses(model, tmp_path / "opt")
    finally:
        handle.revert()
