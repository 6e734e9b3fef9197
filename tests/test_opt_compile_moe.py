"""Regional compile of the MoE presets (workbench/opts/compile.py, `regions`): a layer holding peft's LoRA on its
experts' parameters (ParamWrapper) is compiled by region, the experts running eagerly under the experts arm switched
on. The same function as eager by the runner's criterion (`workbench.measure.equivalence.compare`: relative L2 per
LoRA gradient and relative loss <= 1e-4 in fp32), a perturbed region is what that check catches (the negative
control), and compiling the experts themselves is the one-line graph break the regions avoid."""
import shutil

import pytest
import torch

from workbench.errors import WorkbenchError

pytestmark = pytest.mark.skipif(not any(shutil.which(c) for c in ("gcc", "cc", "clang")),
                                reason="inductor on a CPU needs a C compiler")


def _model(preset, experts):
    from workbench import opts
    from workbench.instrument import instrument_layers
    from workbench.step import harness
    from workbench.step.models import build_model
    torch._dynamo.reset()
    m = build_model(preset, device="cpu")
    harness.enable_checkpointing(m)
    instrument_layers(m)
    opts.apply(m, "expert_lora", experts)
    return m


def _step(m, batch) -> dict:
    """{"loss", "grads"} of one forward + backward (what the runner's equivalence phase compares)."""
    from workbench.step.models import lora_parameters, model_inputs
    m.zero_grad(set_to_none=True)
    loss = m(**model_inputs(m, batch)).loss
    loss.backward()
    return {"loss": float(loss.detach()), "grads": {n: p.grad.clone() for n, p in lora_parameters(m)}}


def _compare(m, backend, steps=2):
    """(equivalence of each compiled step against the eager padded one, the handle's info)."""
    from workbench import opts
    from workbench.measure import equivalence
    from workbench.step.data import make_batches, to_device
    from workbench.opts.compile import pad_batch
    batches = [pad_batch(b, 256) for b in to_device(make_batches("uniform:16:64", 256, steps, 256, seed=0), "cpu")]
    ref = [_step(m, b) for b in batches]
    h = opts.apply(m, "compile", "regional", tokens=256, backend=backend)
    try:
        return [equivalence.compare(_step(m, b), r, torch.float32) for b, r in zip(batches, ref)], dict(h.info)
    finally:
        h.revert()


@pytest.mark.parametrize("preset,experts,backend", [("tiny-qwen3-moe", "split", "inductor"),
                                                    ("tiny-gpt-oss", "split", "aot_eager"),
                                                    ("tiny-gpt-oss", "grouped_mm", "aot_eager")])
def test_moe_layers_compile_by_region_and_compute_the_eager_function(preset, experts, backend):
    m = _model(preset, experts)
    layer = m.base_model.model.model.layers[0]
    attn_range = vars(layer.self_attn)["forward"]
    res, info = _compare(m, backend)
    router = "mlp.gate" if preset == "tiny-qwen3-moe" else "mlp.router"
    assert set(info["regions"]) == {"self_attn", router, "input_layernorm", "post_attention_layernorm"}
    assert info["graphs"] >= 4  # one per region kind at least, every one compiled in the first step
    assert all(r["equivalent"] for r in res), res
    assert max(r["grad_max_rel_l2"] for r in res) < 1e-5  # fp32: rounding only
    # reverted: the layer's forward and its regions' as the instrumentation left them
    assert "forward" not in vars(layer) and vars(layer.self_attn)["forward"] is attn_range
    assert "forward" not in vars(layer.mlp.experts)


def test_a_perturbed_region_is_what_the_equivalence_check_catches(monkeypatch):
    """Negative control: the router region's scores off by 1e-3 relative (a region that computed another function)
    fails the same check the arm passes."""
    from workbench.opts import compile as comp
    real = comp._compiled_body

    def perturbed(fn, layer, guard, *more):
        body = real(fn, layer, guard, *more)
        if getattr(fn, "__self__", None) is getattr(layer.mlp, "gate", None):
            return lambda *a, **k: tuple(t * 1.001 if t.is_floating_point() and i == 1 else t
                                         for i, t in enumerate(body(*a, **k)))
        return body
    monkeypatch.setattr(comp, "_compiled_body", perturbed)
    res, _ = _compare(_model("tiny-qwen3-moe", "split"), "aot_eager", steps=1)
    assert not res[0]["equivalent"] and res[0]["grad_max_rel_l2"] > 1e-4


def test_compiling_the_experts_too_is_a_one_line_graph_break(monkeypatch):
    """What the regions leave out: peft's ParamWrapper inside a fullgraph region (its parametrization's
    Parameter.set_) fails the arm in one line; the experts in no region is what makes the arm run."""
    from workbench.opts import compile as comp
    from workbench.step import harness
    from workbench.step.data import make_batches, to_device
    monkeypatch.setattr(comp, "regions", lambda layer: [("mlp", layer.mlp), ("self_attn", layer.self_attn)])
    m = _model("tiny-qwen3-moe", "split")
    h = comp.apply(m, "regional", tokens=256, backend="aot_eager")
    try:
        data = to_device(make_batches("uniform:16:64", 256, 1, 256, seed=0), "cpu", prepare=h.prepare_batch)
        with pytest.raises(WorkbenchError, match="graph break") as e:
            harness.train_step(m, data[0], harness.make_optimizer(m, lr=0.0))
        assert "\n" not in str(e.value) and "set_" in str(e.value.__cause__)
    finally:
        h.revert()


def test_moe_presets_are_no_longer_refused_and_a_dense_layer_has_no_regions():
    from workbench.opts import compile as comp
    from workbench.step.models import build_model
    moe = build_model("tiny-qwen3-moe", layers=1, device="cpu")
    assert comp.unsupported("regional", moe, "cpu") is None
    assert comp.parameter_lora(moe).endswith("mlp.experts")
    dense = build_model("tiny-llama", layers=1, device="cpu")
    assert comp.regions(dense.base_model.model.model.layers[0]) is None
    names = [n for n, _ in comp.regions(moe.base_model.model.model.layers[0])]
    assert "mlp" not in names and not any("experts" in n for n in names)


def test_levers_path_on_a_moe_preset_runs_compiled_with_the_activations_lever(capsys, tmp_path, monkeypatch):
    """`--opt levers --only activations,path` on tiny-qwen3-moe, CPU, one layer: the path switches regional compile
    on (by region) beside the expert lever and the activations lever, every point equivalent to the baseline; the
    closing line counts the comparisons asked for (2), not the plan's levers. The attention lever is kept out here:
    on a CPU its flex arm cannot run inside a compiled layer, and the path would leave compile out for it
    (`compile.path_conflict`; on a GPU the two run together). The fused loss is kept out too: on a CPU its Liger
    kernel runs in Triton's interpreter, most of this test's time (its own tests: tests/test_opt_kernels.py)."""
    import json

    from workbench import ab
    from workbench.cli import run_main
    from workbench.opts import attention, fused_ce
    monkeypatch.setattr(attention, "unsupported", lambda arm, model, device: "kept out of this test")
    monkeypatch.setattr(fused_ce, "unsupported", lambda arm, model, device: "kept out of this test")
    rc = run_main(ab.main, ["--opt", "levers", "--model", "tiny-qwen3-moe", "--layers", "1", "--device", "cpu",
                            "--only", "activations,path", "--reps", "1", "--steps", "1", "--batches", "1",
                            "--warmup-max", "1", "--out", str(tmp_path / "run")])
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.strip()]
    summary = json.loads(lines[-1])
    assert rc == 0, summary["failures"]
    assert any(ln.startswith("complete: 2/2 comparisons, all arms equivalent") for ln in lines)
    path = next(c for c in summary["comparisons"] if c["name"] == "path")
    arms = [path["baseline"], *path["others"], path["optimized"]]
    labels = [a["arm"] for a in arms]
    assert "+compile" in labels and "+activations" in labels and "+expert_lora" in labels
    assert all(a["status"] == "ok" and a["equivalent"] for a in arms)
    last = path["optimized"]["info"]
    assert last["compile.regions"] and last["expert_lora.experts_implementation"] == "wb_split_lora"
    assert summary["levers"]["arm_choice"]["activations"]["optimized"] in ("none", "offload", "selective", "full")


def _configuration_steps(m, precision: str, steps: int = 2) -> dict:
    """`steps` training steps of the regional compile (aot_eager) beside the precision lever's arm `precision`, as one
    levers path point runs them (the arms applied, the steps, the arms reverted); the compile handle's info."""
    from workbench import opts
    from workbench.step import harness
    from workbench.step.data import make_batches, to_device
    hp = opts.apply(m, "precision", precision)
    hc = opts.apply(m, "compile", "regional", tokens=256, backend="aot_eager")
    try:
        data = to_device(make_batches("uniform:16:64", 256, steps, 256, seed=0), "cpu", prepare=hc.prepare_batch)
        opt = harness.make_optimizer(m, lr=0.0)
        for b in data:
            harness.train_step(m, b, opt, precision=hp.precision)
        return dict(hc.info)
    finally:
        hc.revert()
        hp.revert()


def test_each_path_point_has_its_own_recompile_limit():
    """gpt-oss-20b's levers path switches compile on before precision (its order by predicted saving): the +compile
    point's graphs, traced under autocast, stay in dynamo's cache of each region's code while the +precision point (no
    autocast: dynamo's GLOBAL_STATE guard fails) compiles its own. Dynamo's recompile limit counts a code object's
    graphs across every point, so the H200 run (24 layers) hit its 8 at its third compiled point, in +precision's
    first step. Each point's limit now counts only its own graphs: here the limit is 3 and tiny-gpt-oss makes 2
    graphs of a region's code a point (layer 0, whose input needs no gradient, and layer 1), so the second point's
    second graph is the code's fourth, the one that failed before."""
    m = _model("tiny-gpt-oss", "split")
    with torch._dynamo.config.patch(recompile_limit=3):
        first = _configuration_steps(m, "autocast")
        second = _configuration_steps(m, "bf16")  # on this fp32 base: fp32 adapters, no autocast
        again = [_configuration_steps(m, arm)["graphs_here"] for arm in ("autocast", "bf16")]
    assert first["graphs_here"] >= 2 and second["graphs_here"] >= 2  # other graphs at each point: other guards
    assert again == [0, 0]  # the next reps run the graphs each point compiled, compiling none


def test_a_point_that_needs_more_graphs_than_the_limit_still_fails():
    """Negative control of the test above: the limit still binds within one point: tiny-gpt-oss's first point makes 2
    graphs of a region's code, over a limit of 1, and fails in one line."""
    m = _model("tiny-gpt-oss", "split")
    with torch._dynamo.config.patch(recompile_limit=1), \
            pytest.raises(WorkbenchError, match="recompile limit hit in step 1") as e:
        _configuration_steps(m, "autocast")
    assert "\n" not in str(e.value)
    torch._dynamo.reset()
