"""The levers run's `path` arms (`lever_run.path_comparison`: attention and precision applied together) on a bf16 base
on the CPU: q / k / v reach flex in one dtype under every precision arm (the path's flex arms are not a dtype mix),
and the path's baseline (dense + fp32-adapters, checkpointed) is the dense arm alone: same loss and gradients, and
its checkpoint recompute matches its forward (no CheckpointError)."""
import dataclasses
import json
import types
from unittest import mock

import pytest
import torch

from workbench.measure import equivalence
from workbench.ab import levers as lever_run
from workbench.step.data import batch_from_lengths
from workbench.step.harness import enable_checkpointing, train_step
from workbench.instrument import instrument_layers
from workbench.step.models import build_model, lora_parameters
from workbench.opts import apply_all, attention, precision

LENS = [13, 5, 21, 9]


def _model(prec="autocast"):
    m = build_model("tiny-llama", layers=2, dtype=torch.bfloat16, precision=prec)
    enable_checkpointing(m)
    instrument_layers(m)
    return m


@dataclasses.dataclass
class _Cmp:  # the fields of a planner Comparison that path_comparison replaces
    opt: str
    name: str = "lever"
    arms: list = dataclasses.field(default_factory=list)
    baseline: str = ""
    optimized: str = ""
    excluded: dict = dataclasses.field(default_factory=dict)
    explicit_arms: bool = True


def _path_arms():
    return lever_run.path_comparison([_Cmp("attention", baseline="dense"),
                                      _Cmp("precision", baseline="fp32-adapters")]).arms


def test_path_arms_are_the_levers_cumulatively():
    arms = [(a.label, a.arms) for a in _path_arms()]
    assert arms == [("baseline", {"attention": "dense", "precision": "fp32-adapters"}),
                    ("+attention", {"attention": "flex", "precision": "fp32-adapters"}),
                    ("+precision", {"attention": "flex", "precision": "bf16"})]
    # the path starts from each comparison's baseline (the run's recipe), not from the module's BASELINE
    realistic = lever_run.path_comparison([_Cmp("precision", baseline="autocast"), _Cmp("attention", baseline="dense")])
    assert [(a.label, a.arms) for a in realistic.arms] == [
        ("baseline", {"precision": "autocast", "attention": "dense"}),
        ("+precision", {"precision": "bf16", "attention": "dense"}),
        ("+attention", {"precision": "bf16", "attention": "flex"})]


@pytest.mark.parametrize("run_precision, lever_baseline", [("autocast", "autocast"), ("auto", "fp32-adapters"),
                                                           ("fp32-adapters", "fp32-adapters"), ("bf16", None)])
def test_the_precision_lever_starts_from_the_runs_recipe(run_precision, lever_baseline):
    """--opt levers: the precision lever's baseline is the run's --precision (autocast on a GPU, as Trainer(bf16=True)
    runs), so the traced baseline and the path start from the realistic step; under --precision bf16 it is gone."""
    from workbench.ab.cli import CPU_DEFAULTS, parse_args
    from workbench.ab.planner import plan
    cpu = torch.device("cpu")
    a = parse_args(["--opt", "levers", "--device", "cpu", "--precision", run_precision])
    comps = {c.opt: c for c in plan(a.resolved(cpu, CPU_DEFAULTS["_run"]), cpu)}
    assert {"attention", "expert_lora"} <= set(comps)
    if lever_baseline is None:
        assert "precision" not in comps
    else:
        c = comps["precision"]
        assert (c.baseline, c.optimized) == (lever_baseline, "bf16")
        assert [(a.label, a.arms) for a in c.arms] == [(lever_baseline, {"precision": lever_baseline}),
                                                        ("bf16", {"precision": "bf16"})]


@pytest.mark.parametrize("prec", precision.ARMS)
def test_qkv_reach_flex_in_one_dtype(monkeypatch, prec):
    from workbench.step import precision_mode as P
    seen = []
    real = attention._flex_kernel

    def spy(q, k, v, *a, **kw):
        seen.append((q.dtype, k.dtype, v.dtype))
        return real(q, k, v, *a, **kw)
    monkeypatch.setattr(attention, "_flex_kernel", spy)
    m = _model()
    h = apply_all(m, {"attention": "flex", "precision": prec})
    try:
        b = h.prepare_batch(batch_from_lengths(LENS, m.config.vocab_size, seed=0))
        with torch.no_grad(), P.forward_context(h.precision("autocast"), "cpu"):  # flex itself: forward only (CPU)
            m(**h.inputs_fn(m, b))
    finally:
        h.revert()
    assert len(seen) == 2 and set(seen) == {(torch.bfloat16,) * 3}


def _step(m, batch, arms, built_precision):
    """One step with `arms` applied, at the arms' precision (the precision lever's) or the one `m` was built for."""
    h = apply_all(m, arms)
    try:
        cap = equivalence.GradCapture(lora_parameters(m))
        rec = train_step(m, h.prepare_batch(batch), cap, inputs_fn=h.inputs_fn, precision=h.precision(built_precision))
        return rec.loss, cap.grads
    finally:
        h.revert()


def test_path_baseline_trains_as_the_dense_arm_alone():
    m = _model()
    batch = batch_from_lengths(LENS, m.config.vocab_size, seed=0)
    path = _step(m, batch, _path_arms()[0].arms, "autocast")
    alone = _step(_model("fp32-adapters"), batch, {"attention": "dense"}, "fp32-adapters")  # the path baseline's
    assert path[0] == alone[0] and path[1].keys() == alone[1].keys()
    assert all(torch.equal(path[1][n], alone[1][n]) for n in path[1])
    autocast = _step(m, batch, {"attention": "dense"}, "autocast")  # negative control: the model's own (autocast)
    assert autocast[0] != path[0]


def test_an_interrupted_runs_path_comes_from_its_levers_plan():
    """A levers run cut off after the path's timed steps (no `path` comparison in summary.json yet): lever_path
    rebuilds the path's points from `levers.run`, in order, on the first comparison's shape."""
    from workbench.ab import lever_path
    first = {"name": "expert_lora", "opt": "expert_lora", "model": "qwen3-30b-a3b", "layers": 8, "tokens": 8192,
             "attn": "sdpa", "baseline": {"arm": "eager"}, "optimized": {"arm": "split"}}
    summary = {"comparisons": [first], "levers": {"run": ["expert_lora", "attention", "path"]}}
    c, order = lever_path._path_of(summary)
    assert order == ["baseline", "+expert_lora", "+attention"]
    assert (c["name"], c["status"], c["model"], c["tokens"]) == ("path", "incomplete", "qwen3-30b-a3b", 8192)
    # a run without a path in its plan is read as before: its one lever comparison
    c, order = lever_path._path_of({"comparisons": [first], "levers": {"run": ["expert_lora"]}})
    assert order == ["eager", "split"]


def test_on_a_gpu_the_levers_start_from_autocast_and_time_the_anchor():
    """The plan a GPU run gets (planned here, nothing runs): the precision lever starts from autocast (`--precision
    auto` on CUDA), the expert lever times transformers' grouped_mm beside eager and split, and the attention lever
    the varlen kernel beside dense and flex (LEVER_ANCHOR)."""
    from workbench.ab.cli import GPU_DEFAULTS, parse_args
    from workbench.ab.planner import plan
    cuda = torch.device("cuda")
    a = parse_args(["--opt", "levers", "--model", "tiny-qwen3-moe"]).resolved(cuda, GPU_DEFAULTS["_run"])
    comps = {c.opt: c for c in plan(a, cuda)}
    assert comps["precision"].baseline == "autocast"
    assert [a.label for a in comps["expert_lora"].arms] == ["eager", "split", "grouped_mm"]
    # the varlen kernel a user would pick instead of flex, timed beside it (attention's LEVER_ANCHOR; GPU only)
    assert [a.label for a in comps["attention"].arms] == ["dense", "flex", "varlen"]
    cpu = torch.device("cpu")
    a = parse_args(["--opt", "levers", "--model", "tiny-qwen3-moe", "--device", "cpu"]).resolved(cpu, GPU_DEFAULTS["_run"])
    assert [s.label for s in {c.opt: c for c in plan(a, cpu)}["attention"].arms] == ["dense", "flex"]


def _lever_result(opt, opt_arm, opt_ci, anchor, anchor_ci, **anchor_kw):
    return {"name": opt, "opt": opt, "status": "ok",
            "optimized": {"arm": opt_arm, "status": "ok", "vs_baseline": {"speedup": sum(opt_ci) / 2, "ci95": opt_ci}},
            "others": [{"arm": anchor, "status": "ok", "equivalent": True,
                        "vs_baseline": {"speedup": sum(anchor_ci) / 2, "ci95": anchor_ci}, **anchor_kw}]}


def test_the_path_takes_a_lever_at_its_anchor_only_when_the_anchor_clearly_wins():
    """`faster_anchor`: the anchor's speedup CI entirely above the optimized arm's puts the anchor on the path
    (`prune_path` rebuilds the path with it and records why); overlapping intervals, a non-equivalent anchor or one
    that failed keep the OPTIMIZED arm (the negative controls)."""
    from workbench.ab import levers
    from workbench.ab.cli import CPU_DEFAULTS, parse_args
    from workbench.ab.planner import plan

    win = _lever_result("attention", "flex", [1.80, 1.85], "varlen", [1.90, 2.00])
    arm, why = levers.faster_anchor(win)
    assert arm == "varlen" and "above flex's" in why
    assert levers.faster_anchor(_lever_result("attention", "flex", [1.80, 1.92], "varlen", [1.90, 2.00])) is None
    assert levers.faster_anchor(_lever_result("attention", "flex", [1.80, 1.85], "varlen", [1.90, 2.00],
                                              equivalent=False)) is None
    assert levers.faster_anchor(_lever_result("attention", "flex", [1.80, 1.85], "varlen", [1.90, 2.00],
                                              status="failed")) is None
    assert levers.faster_anchor(_lever_result("precision", "bf16", [1.0, 1.1], "x", [2.0, 2.1])) is None  # no anchor

    cpu = torch.device("cpu")
    a = parse_args(["--opt", "levers", "--model", "tiny-llama", "--layers", "2", "--tokens", "256"]).resolved(
        cpu, CPU_DEFAULTS["_run"])
    comps = [c for c in plan(a, cpu) if c.opt in ("attention", "precision")]
    sel = levers.Selection(comparisons=comps, predictions={}, skipped={})
    path = levers.path_comparison(comps)
    assert {s.label: s.arms.get("attention") for s in path.arms}["+attention"] == "flex"
    prec = {"name": "precision", "opt": "precision", "status": "ok",
            "optimized": {"arm": "bf16", "status": "ok", "vs_baseline": {"speedup": 1.1, "ci95": [1.05, 1.15]}}}
    new = levers.prune_path(sel, [win, prec], path)
    assert new is not path and {s.label: s.arms.get("attention") for s in new.arms}["+attention"] == "varlen"
    assert sel.path_arms["attention"]["arm"] == "varlen" and sel.describe()["path_arms"] == sel.path_arms
    sel2 = levers.Selection(comparisons=comps, predictions={}, skipped={})
    lose = _lever_result("attention", "flex", [1.80, 1.92], "varlen", [1.90, 2.00])
    assert levers.prune_path(sel2, [lose, prec], path) is path and sel2.path_arms == {}


def test_the_path_declines_an_anchor_another_lever_cannot_run_beside(monkeypatch):
    """The H100 run of 2026-11-27 (profiles/2026-11-27_h100_llama16k): varlen beat flex clearly (2.218x [2.209, 2.227]
    against 2.178x [2.162, 2.194]), the path took it, and regional compile refused varlen at its first step: the
    +compile point failed and took +liger down with it. Now the conflict is known before the path runs: the anchor is
    declined (attention stays at flex, compile stays on), and a lever that conflicts even at the other's OPTIMIZED arm
    (on a CPU flex has no backward that compiles) is left out with the reason, never a failed point. Negative control:
    without compile on the path the anchor is taken.

    The rerun of the path (2026-11-27, machine O) then failed at +liger beside +compile: Liger's RoPE calls a function
    marked torch.compiler.disable, a graph break in the fullgraph layer. That conflict is known before the path runs
    too: liger is left out where compile is on (compile comes first: the order of predicted saving), and kept where
    Liger has no such call (the control: `compile_disabled_entry` None) or compile is off."""
    from workbench.ab import levers
    from workbench.ab.cli import CPU_DEFAULTS, parse_args
    from workbench.ab.planner import plan
    from workbench.opts import compile as comp

    assert comp.path_conflict({"attention": "varlen", "compile": "regional"}, "cuda")
    assert comp.path_conflict({"attention": "flex", "compile": "regional"}, "cuda") is None
    assert comp.path_conflict({"attention": "varlen", "compile": "eager"}, "cuda") is None
    assert comp.path_conflict({"attention": "flex", "compile": "regional"}, "cpu")

    cpu = torch.device("cpu")
    a = parse_args(["--opt", "levers", "--model", "tiny-llama", "--layers", "2", "--tokens", "256"]).resolved(
        cpu, CPU_DEFAULTS["_run"])
    comps = [c for c in plan(a, cpu) if c.opt in ("attention", "compile", "liger")]
    assert {c.opt for c in comps} == {"attention", "compile", "liger"}
    win = _lever_result("attention", "flex", [2.162, 2.194], "varlen", [2.209, 2.227])
    ok = [{"name": o, "opt": o, "status": "ok",
           "optimized": {"arm": arm, "status": "ok", "vs_baseline": {"speedup": s, "ci95": [s - 0.01, s + 0.01]}}}
          for o, arm, s in (("compile", "regional", 1.444), ("liger", "liger", 1.078))]
    sel = levers.Selection(comparisons=comps, predictions={}, skipped={})
    from workbench.opts import liger
    monkeypatch.setattr(liger, "compile_disabled_entry", lambda: None)  # control: a Liger without the marked call
    path = levers.prune_path(sel, [win, *ok], levers.path_comparison(comps), "cuda")
    last = path.arms[-1].arms
    assert last["attention"] == "flex" and last["compile"] == "regional" and last["liger"] == "liger"
    assert sel.path_arms == {} and "varlen" in sel.anchors_declined["attention"]
    assert sel.describe()["anchors_declined"] == sel.anchors_declined and "compile" not in sel.left_out

    monkeypatch.setattr(liger, "compile_disabled_entry", lambda: "liger_kernel.backends.dispatch.dispatch")
    sel_l = levers.Selection(comparisons=comps, predictions={}, skipped={})
    path_l = levers.prune_path(sel_l, [win, *ok], levers.path_comparison(comps), "cuda")
    assert sel_l.left_out["liger"].startswith("conflicts: liger cannot run inside regional compile")
    assert path_l.arms[-1].arms == {**{k: v for k, v in last.items() if k != "liger"}}
    assert liger.path_conflict({"liger": "torch_rmsnorm", "compile": "regional"}, "cuda") is None
    assert liger.path_conflict({"liger": "liger", "compile": "eager"}, "cuda") is None
    monkeypatch.setattr(liger, "compile_disabled_entry", lambda: None)

    sel_cpu = levers.Selection(comparisons=comps, predictions={}, skipped={})
    path_cpu = levers.prune_path(sel_cpu, [win, *ok], levers.path_comparison(comps), "cpu")
    assert sel_cpu.left_out["compile"].startswith("conflicts: ")
    assert all("compile" not in s.label for s in path_cpu.arms) and path_cpu.arms[-1].arms["attention"] == "varlen"

    full = levers.path_comparison(comps)  # --only path: no lever comparison ran, the path alone is planned
    sel_only = levers.Selection(comparisons=[full], predictions={}, skipped={}, on_path=comps)
    only = levers.prune_path(sel_only, [], full, "cpu")
    assert "compile" in sel_only.left_out and all("compile" not in s.label for s in only.arms)
    assert levers.prune_path(levers.Selection(comparisons=[full], predictions={}, skipped={}, on_path=comps), [], full,
                             "cuda") is full  # on a GPU flex and compile can run together: the path as planned

    no_compile = [c for c in comps if c.opt != "compile"]
    sel3 = levers.Selection(comparisons=no_compile, predictions={}, skipped={})
    path3 = levers.prune_path(sel3, [win, ok[1]], levers.path_comparison(no_compile), "cuda")
    assert path3.arms[-1].arms["attention"] == "varlen" and sel3.anchors_declined == {}


def test_apply_optimizations_refuses_arms_that_cannot_run_together():
    """The path's conflict rule holds for a user's own model too: compile="regional" beside attention="varlen" is one
    line before anything is applied; each arm alone applies (the control)."""
    from workbench.api import apply_optimizations
    from workbench.errors import WorkbenchError

    model = _model()
    with pytest.raises(WorkbenchError, match="regional compile cannot run beside attention=varlen") as e:
        apply_optimizations(model, attention="varlen", compile="regional")
    assert "\n" not in str(e.value) and model.config._attn_implementation == "sdpa"
    with apply_optimizations(model, attention="varlen"):
        assert model.config._attn_implementation == attention.impl_name("varlen")
    assert model.config._attn_implementation == "sdpa"


def test_winning_arms_hand_the_paths_last_point_to_apply_optimizations(tmp_path):
    """A levers run's path, as a user's keywords: the levers kept, each at the arm the path ran (the anchor it took:
    varlen), the slower one left out; applied to a model and reverted. A folder that is no levers run: one line."""
    from workbench.api import apply_optimizations, winning_arms
    from workbench.errors import WorkbenchError
    from workbench.step.models import build_model

    run = tmp_path / "levers"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({"comparisons": [], "levers": {
        "run": ["attention", "liger", "path"], "left_out_of_path": {"liger": "slower (0.950x [0.930, 0.970])"},
        "path_arms": {"attention": {"arm": "varlen", "why": "..."}}}}))
    arms = winning_arms(str(run))
    assert arms == {"attention": "varlen"}
    (run / "summary.json").write_text(json.dumps({"comparisons": [], "levers": {
        "run": ["attention", "path"], "left_out_of_path": {}, "path_arms": {}}}))
    assert winning_arms(str(run)) == {"attention": "flex"}  # no anchor taken: the OPTIMIZED arm
    model = build_model("tiny-llama", lora_rank=4)
    apply_optimizations(model, **arms).revert()
    (run / "summary.json").write_text(json.dumps({"comparisons": []}))
    with pytest.raises(WorkbenchError, match="not a `python -m workbench.ab --opt levers` run"):
        winning_arms(str(run))


def test_each_point_carries_nemos_mfu_as_the_run_wrote_it():
    """A run whose arms wrote `flops_per_batch` without NeMo's count per batch (the H100 NeMo-shape run of 2026-11-27)
    still gives each point's NeMo-convention MFU: the run's own, from the same timed steps."""
    import json
    import os
    from workbench.ab.lever_path import rows_of
    from workbench.measure.results import comparison_arms
    run = os.path.join(os.path.dirname(__file__), "..", "profiles", "2026-11-27_h100_kernels_path", "nemo")
    rows = rows_of(run)
    arms = comparison_arms(next(c for c in json.load(open(os.path.join(run, "summary.json")))["comparisons"]
                                if c["name"] == "path"))
    assert [r["arm"] for r in rows] == ["baseline", "+attention", "+precision", "+liger"]
    for r in rows:
        assert r["mfu_nemo"] == arms[r["arm"]]["mfu_nemo"] and 0 < r["mfu_nemo"] < r["mfu"]


def test_lever_path_says_what_the_path_left_out_and_the_anchors_it_declined(tmp_path):
    """`workbench lever_path` prints, under a run's points, each lever the path left out and each anchor it
    declined, with the reason summary.json holds; a run with neither prints no such line (the control)."""
    from workbench.ab import lever_path

    run = tmp_path / "run"
    run.mkdir()
    lev = {"run": ["attention", "compile", "path"], "left_out_of_path": {"liger": "slower (0.950x [0.930, 0.970])"},
           "anchors_declined": {"attention": "attention stays at flex, not its faster anchor varlen: regional compile "
                                             "cannot run beside attention=varlen: ..."}}
    (run / "summary.json").write_text(json.dumps({"levers": lev, "comparisons": []}))
    notes = lever_path.path_notes(str(run))
    assert notes == ["left out of the path: liger (slower (0.950x [0.930, 0.970]))",
                     "anchor declined: " + lev["anchors_declined"]["attention"]]
    (run / "summary.json").write_text(json.dumps({"levers": {"run": ["attention"]}, "comparisons": []}))
    assert lever_path.path_notes(str(run)) == [] and lever_path.path_notes(str(tmp_path / "none")) == []


def test_the_last_point_says_when_it_ran_below_the_paths_clock():
    """The compiled point of the H100 llama 16k path (run_r, 2026-11-27) ran at a median SM clock of 1455 MHz against
    1950 at the baseline: lever_path says so beside its GEMM bound, with the GEMM time of the point before. A path
    whose clocks agree within 5% gets no note (the control: the same rows with the last clock raised)."""
    import os
    from workbench.ab.lever_path import clock_note, rows_of
    run = os.path.join(os.path.dirname(__file__), "..", "profiles", "2026-11-27_h100_llama16k_path", "run_r",
                       "llama16k_path")
    rows = rows_of(run)
    last = next(r for r in rows if r.get("mfu_if_only_gemm") is not None)
    assert last["arm"] == "+compile" and last["sm_clock_mhz"] == 1455.0
    assert last["clock_note"].startswith("SM clock 1455 MHz, 695 W against 1950 MHz at baseline; its GEMMs took ")
    assert "at +precision" in last["clock_note"]
    same = [dict(r) for r in rows]
    lastc = next(r for r in same if r["arm"] == "+compile")
    lastc["sm_clock_mhz"] = 0.96 * max(r["sm_clock_mhz"] for r in same)
    assert clock_note(same, lastc) is None
    lastc["sm_clock_mhz"] = None
    assert clock_note(same, lastc) is None


def test_runs_that_share_a_name_keep_apart_in_the_path():
    """The same part run on several machines (run_o/llama16k_path, run_p/llama16k_path) gets parent/name labels, so
    path.csv and the figure keep each run's points apart; a name met once stays as it is (the control)."""
    from workbench.ab.lever_path import run_labels
    runs = ["p/run_o/llama16k_path", "p/run_p/llama16k_path/", "q/nemo"]
    assert run_labels(runs) == {"p/run_o/llama16k_path": "run_o/llama16k_path",
                                "p/run_p/llama16k_path/": "run_p/llama16k_path", "q/nemo": "nemo"}


def test_the_path_declines_the_expert_anchor_when_a_compiled_point_assumed_split():
    """qwen3-30b-a3b at 32 layers, 8192 tokens: with split on the path the compiled point's activations arm is `none`
    (114.6 GiB: no folded expert stack per layer), where the run's own experts (grouped_mm, folded) would take
    `selective` (142.4 GiB for none). The expert lever's anchor grouped_mm reads the folded weight, so the path declines
    it and keeps split; the control: a compiled choice made for folded experts leaves the anchor to be taken."""
    from workbench.ab import levers
    from workbench.ab.cli import GPU_DEFAULTS, parse_args
    from workbench.ab.planner import plan
    from workbench.step import memory_estimate as me

    gpu = torch.device("cuda")
    a = parse_args(["--opt", "levers", "--model", "qwen3-30b-a3b", "--layers", "32", "--tokens", "8192",
                    "--memory-limit-gib", "140.4", "--device", "cpu"]).resolved(gpu, GPU_DEFAULTS["_run"])
    comps = [c for c in plan(a, gpu) if c.opt in ("expert_lora", "compile", "activations")]
    runner = types.SimpleNamespace(args=a, device=gpu)
    with mock.patch.object(me, "host_ram_bytes", lambda: 128 * me.GIB):
        compiled = levers.compiled_choices(runner, comps)
    assert compiled["activations"]["optimized"] == "none" and compiled["activations"]["folded_experts"] is False
    assert next(c for c in comps if c.opt == "activations").arm_choice["optimized"] == "selective"
    win = _lever_result("expert_lora", "split", [1.10, 1.12], "grouped_mm", [1.20, 1.25])
    ok = [{"name": o, "opt": o, "status": "ok",
           "optimized": {"arm": arm, "status": "ok", "vs_baseline": {"speedup": 1.3, "ci95": [1.29, 1.31]}}}
          for o, arm in (("compile", "regional"), ("activations", "selective"))]
    sel = levers.Selection(comparisons=comps, predictions={}, skipped={}, compiled_arms=compiled)
    path = levers.prune_path(sel, [win, *ok], levers.path_comparison(comps), "cuda")
    last = path.arms[-1].arms
    assert last["expert_lora"] == "split" and last["activations"] == "none" and last["compile"] == "regional"
    assert levers.SPLIT_MEMORY in sel.anchors_declined["expert_lora"]

    folded = {"activations": {**compiled["activations"], "folded_experts": True}}
    sel2 = levers.Selection(comparisons=comps, predictions={}, skipped={}, compiled_arms=folded)
    levers.prune_path(sel2, [win, *ok], levers.path_comparison(comps), "cuda")
    assert sel2.path_arms["expert_lora"]["arm"] == "grouped_mm" and "expert_lora" not in sel2.anchors_declined
