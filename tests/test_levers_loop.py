"""Closing the loop: lever optimizations in the registry, `--opt levers` on a CPU (equivalence, counts,
the path), arms that change the numerics judged against fp32 (with negative controls), predictions from a
breakdown, the verdict's arithmetic, and `workbench.ab.lever_path`. Fake levers: tests/fixtures/lever_*.py, registered
through $WORKBENCH_OPTS."""
import csv
import json
import os
import subprocess
import sys
import types

import pytest
import torch

from workbench.cli import run_main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LEVERS = "fixtures.lever_copy,fixtures.lever_attention,fixtures.lever_experts"
FAST = ["--tokens", "64", "--batches", "1", "--steps", "1", "--warmup", "0", "--warmup-max", "0", "--reps", "2", "--device", "cpu"]


@pytest.fixture
def levers_env(monkeypatch):
    monkeypatch.setenv("WORKBENCH_OPTS", LEVERS)
    from fixtures import lever_attention, lever_copy
    monkeypatch.setattr(lever_copy, "BREAK", False)
    monkeypatch.setattr(lever_attention, "DIFFER", False)
    from workbench.opts import registry as opt_registry
    real = opt_registry.levers
    monkeypatch.setattr(opt_registry, "levers", lambda: tuple(o for o in real() if o.startswith("lever_")))
    return lever_copy, lever_attention, real


def _run(capsys, argv):
    from workbench import ab
    rc = run_main(ab.main, argv)
    out, err = capsys.readouterr()
    return rc, json.loads([ln for ln in out.splitlines() if ln.strip()][-1]), out, err


# --- the registry ------------------------------------------------------------------------------------------------

def test_registry_names_levers_and_in_all(levers_env):
    from workbench.opts import registry as reg
    assert reg.levers() == ("lever_copy", "lever_attention", "lever_experts")  # the fakes (the fixture's filter)
    assert set(levers_env[2]()) >= {"lever_copy", "lever_attention", "lever_experts"}
    assert (reg.lever("lever_copy"), reg.lever("lever_experts")) == ("copy", "slice gradients (fill + add)")
    assert reg.lever("packing") is None and reg.in_all("packing") is True  # in_all defaults to True
    assert reg.in_all("lever_copy") is False
    from workbench.traces.lever_advice import LEVER_COMPONENTS, LEVERS as L
    assert LEVER_COMPONENTS == set(L) | {"attention (dense)", "slice gradients (fill + add)", "loss (logits, non-GEMM)",
                                           "recompute"}


def test_an_unknown_lever_component_is_one_line(tmp_path):
    (tmp_path / "badlever.py").write_text(
        'SPEC = {"order": 9, "help": "a, b", "cpu": {"model": "tiny-qwen3"}, "gpu": {"model": "qwen3-0.6b"}, '
        '"all_variants": (), "lever": "teleport"}\n')
    env = {**os.environ, "WORKBENCH_OPTS": "badlever", "PYTHONPATH": os.pathsep.join([str(tmp_path), ROOT])}
    r = subprocess.run([sys.executable, "-m", "workbench.ab", "--help"], env=env, capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "'teleport' is no component of workbench.traces.lever_advice" in r.stderr


def test_opt_all_leaves_the_levers_out(levers_env):
    from workbench.ab.cli import CPU_DEFAULTS, parse_args
    from workbench.ab.planner import plan
    cpu = torch.device("cpu")

    def planned(*argv):  # what ab.main plans: the config resolved for the device first
        return plan(parse_args([*argv, "--device", "cpu"]).resolved(cpu, CPU_DEFAULTS["_run"]), cpu)

    comps = planned("--opt", "all")
    assert not [c for c in comps if c.opt.startswith("lever_")]
    combined = next(c for c in comps if c.opt == "all")
    assert all(not o.startswith("lever_") for s in combined.arms for o in s.arms)
    levers = planned("--opt", "levers")
    assert [c.opt for c in levers] == ["lever_copy", "lever_attention", "lever_experts"]
    assert {(c.model, c.tokens) for c in levers} == {("tiny-qwen3-moe", 256)}  # one shape: the same batches


# --- --opt levers on a CPU ----------------------------------------------------------------------------------------

def test_levers_on_a_dense_model_cpu(levers_env, capsys, tmp_path):
    out = tmp_path / "run"
    rc, s, stdout, err = _run(capsys, ["--opt", "levers", "--model", "tiny-qwen3", *FAST, "--out", str(out)])
    assert rc == 0, err[-3000:]
    cmps = {c["name"]: c for c in s["comparisons"]}
    assert list(cmps) == ["lever_copy", "lever_attention", "path"]  # the expert lever does not apply to a dense model
    assert "no experts" in s["levers"]["skipped"]["lever_experts"]
    assert s["levers"]["breakdown"] is None and "CPU" in s["levers"]["trace_note"]
    for c in cmps.values():
        assert c["equivalent"] is True and c["status"] == "ok", c["errors"]
    # the numerics-changing arm: judged against fp32, next to the baseline's own deviation
    nc = cmps["lever_copy"]["numerics_change"]["rounded"]
    assert nc["within_tolerance"] is True and nc["grad_max_rel_dev_baseline"] == 0.0  # fp32 baseline = reference
    assert 0 < nc["grad_max_rel_dev"] <= nc["k"] * nc["floor"]
    assert cmps["lever_copy"]["optimized"]["numerics_change"] == nc
    assert cmps["lever_attention"]["numerics_change"] == {}
    assert cmps["lever_attention"]["optimized"]["bitwise"] is True
    # predictions: none without a trace; the saved fraction is the module's
    assert cmps["lever_copy"]["lever"]["saved_fraction"] == 0.5
    assert cmps["lever_copy"]["lever"]["predicted_ms"] is None
    assert cmps["lever_copy"]["savings_model"]["verdict"] is None
    # the path: cumulative, in order, on the same batches
    assert cmps["path"]["path"] == ["baseline", "+lever_copy", "+lever_attention"]
    assert cmps["path"]["batches"] == cmps["lever_copy"]["batches"] == cmps["lever_attention"]["batches"]
    assert "+lever_copy" in cmps["path"]["numerics_change"] and "+lever_attention" in cmps["path"]["numerics_change"]
    assert "lever_copy" in stdout.split("\n{")[0] and "predicted ms" in stdout  # the levers' table

    # the path to the best step, from the run folder
    from workbench.ab import lever_path
    assert lever_path.main([str(out), "--out", str(tmp_path / "path")]) == 0
    with open(tmp_path / "path" / "path.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["arm"] for r in rows] == ["baseline", "+lever_copy", "+lever_attention"]
    assert rows[0]["speedup_vs_prev"] == "" and float(rows[2]["speedup_vs_prev"]) > 0
    assert all(r["equivalent"] == "True" for r in rows)
    # MFU's FLOPs: the useful work (block-diagonal attention), the same at every point; HFU's: as each point runs it
    from workbench.step import flops
    useful = flops.for_comparison("tiny-qwen3", None, 64, "flash_attention_2", lengths=s_lengths(out), batches=1,
                                  seed=0, lora_rank=16)[0]["model"] / 1e12
    assert [float(r["model_tflop_per_step"]) for r in rows] == pytest.approx([useful] * 3)
    assert [r["attention_flops"] for r in rows] == ["dense", "dense", "block_diagonal"]
    assert os.path.getsize(tmp_path / "path" / "path.png") > 0

    # the verdict's arithmetic, on this run's timings with a prediction given (as a GPU run's trace would)
    from workbench.ab import levers as lever_run
    from workbench.savings import verdicts
    from workbench.measure.results import load_run
    c = cmps["lever_attention"]
    m = verdicts.measured_saving(load_run(str(out))[0], "lever_attention", "dense", "blocks")
    preds = {"lever_attention": {**lever_run.predict("lever_attention", None), "predicted_ms": 2.0,
                                 "predicted_se": 0.1}}
    timed = c["baseline"]["step_ms_mean"]
    writer = types.SimpleNamespace(flush=lambda: None, out_dir=str(out))
    for traced in (1.05 * timed, 1.4 * timed):  # the traced baseline step: 5% off its timed one, then 40% off
        bd = {"steps": 4, "components": [{"component": "step_ms", "ms": traced}]}
        lever_run.annotate(writer, {"comparisons": [c]}, lever_run.Selection([], preds, {}, bd, None), "cuda")
        sm = c["savings_model"]
        assert sm["measured_ms"] == pytest.approx(m["mean"])
        if traced < 1.1 * timed:
            assert sm["ratio"] == pytest.approx(m["mean"] / 2.0)
            assert sm["verdict"] in ("confirmed", "refuted", "inconclusive") and "p_confirm_holm" in sm
        else:  # the traced pass the prediction comes from is not the step that was timed: no verdict
            assert sm["verdict"] == "no verdict: instrument" and "+40.0%" in sm["reason"]


def test_a_numerics_arm_beyond_tolerance_is_flagged_moe(levers_env, capsys, tmp_path):
    """Negative control: the numerics-changing lever also drops half the tokens' loss: flagged, the run fails.
    On an MoE model the expert lever applies and runs."""
    copy = levers_env[0]
    copy.BREAK = True
    rc, s, _, err = _run(capsys, ["--opt", "levers", "--model", "tiny-qwen3-moe", *FAST, "--out", str(tmp_path / "run")])
    assert rc == 1
    cmps = {c["name"]: c for c in s["comparisons"]}
    assert set(cmps) == {"lever_copy", "lever_attention", "lever_experts", "path"}
    nc = cmps["lever_copy"]["numerics_change"]["rounded"]
    assert nc["within_tolerance"] is False and cmps["lever_copy"]["equivalent"] is False
    assert nc["grad_max_rel_dev"] > nc["k"] * max(nc["grad_max_rel_dev_baseline"], nc["floor"])
    assert cmps["lever_experts"]["equivalent"] is True and cmps["lever_attention"]["equivalent"] is True
    assert any("lever_copy arm rounded is not equivalent" in f and "BEYOND TOLERANCE" in f for f in s["failures"])


def s_lengths(run_dir) -> str:
    with open(os.path.join(run_dir, "meta.json")) as f:
        return json.load(f)["args"]["lengths"]


# --- the parts ----------------------------------------------------------------------------------------------------

def _grads(*vals):
    return {"w": torch.tensor(vals, dtype=torch.float32)}


def test_numerics_judge_k_times_the_baselines_deviation():
    from workbench.measure import numerics
    ref32 = {"loss": 2.0, "grads": _grads(1.0, 0.0)}
    base = {"loss": 2.0, "grads": _grads(1.0, 0.02)}  # deviates 0.02 from fp32
    ok = numerics.judge({"loss": 2.0, "grads": _grads(1.0, 0.059)}, base, ref32, "x")
    bad = numerics.judge({"loss": 2.0, "grads": _grads(1.0, 0.061)}, base, ref32, "x")  # > 3 x 0.02
    assert ok["equivalent"] and not bad["equivalent"]
    assert ok["numerics_change"]["grad_max_rel_dev_baseline"] == pytest.approx(0.02)
    # an fp32 baseline deviates 0: the floor (1e-2) is the yardstick
    base0 = {"loss": 2.0, "grads": _grads(1.0, 0.0)}
    assert numerics.judge({"loss": 2.0, "grads": _grads(1.0, 0.029)}, base0, ref32, "x")["equivalent"]
    assert not numerics.judge({"loss": 2.0, "grads": _grads(1.0, 0.031)}, base0, ref32, "x")["equivalent"]
    assert not numerics.judge({"loss": 2.1, "grads": _grads(1.0, 0.0)}, base0, ref32, "x")["equivalent"]  # loss


def test_prediction_is_component_ms_times_saved_fraction(levers_env):
    from workbench.ab import levers as lever_run
    bd = {"components": [{"component": "copy", "ms": 10.0, "share": 0.2}, {"component": "attention", "ms": 3.0,
                                                                            "share": 0.06}],
          "levers": [{"component": "copy", "ms": 10.0, "share": 0.2}], "se_ms": {"copy": 0.4}, "steps": 5}
    p = lever_run.predict("lever_copy", bd)
    assert (p["named"], p["component_ms"], p["predicted_ms"], p["predicted_se"]) == (True, 10.0, 5.0, 0.2)
    q = lever_run.predict("lever_attention", bd)  # attention not dense here: not named
    assert q["named"] is False and q["predicted_ms"] == 3.0
    run, why = lever_run.choose(["lever_attention", "lever_copy"], {"lever_copy": p, "lever_attention": q})
    assert run == ["lever_copy"] and "attention (dense)" in why["lever_attention"]
    none = {o: lever_run.predict(o, None) for o in ("lever_copy", "lever_attention")}
    assert lever_run.choose(["lever_copy", "lever_attention"], none) == (["lever_copy", "lever_attention"], {})
    bd["levers"].append({"component": "attention (dense)", "ms": 30.0, "share": 0.5})
    preds = {o: lever_run.predict(o, bd) for o in ("lever_copy", "lever_attention")}
    assert lever_run.choose(["lever_copy", "lever_attention"], preds)[0] == ["lever_attention", "lever_copy"]


def test_predictions_from_a_traced_breakdown(levers_env):
    """A synthetic traced step with known components (tests/synthetic_traces.py): the dense-attention lever's
    predicted saving is the step's attention time (15 us) x its SAVED_FRACTION; under a block-diagonal kernel the
    breakdown does not name it and the lever does not run."""
    from synthetic_traces import EXPECTED_ONE_STEP, one_step

    from workbench.ab import levers as lever_run
    bd = lever_run.breakdown_of(one_step(), "sdpa")
    p = lever_run.predict("lever_attention", bd)
    assert p["named"] is True and p["component_ms"] == pytest.approx(EXPECTED_ONE_STEP["attention"] / 1e3)
    assert p["predicted_ms"] == pytest.approx(EXPECTED_ONE_STEP["attention"] / 1e3)
    assert p["predicted_se"] is None  # one traced step: no spread
    flash = lever_run.breakdown_of(one_step(), "flash_attention_2")
    assert lever_run.predict("lever_attention", flash)["named"] is False
    q = lever_run.predict("lever_copy", bd)  # no device copies in this step: not named
    assert q["named"] is False
    run, why = lever_run.choose(["lever_copy", "lever_attention"], {"lever_copy": q, "lever_attention": p})
    assert run == ["lever_attention"] and set(why) == {"lever_copy"}


# --- the path leaves out a lever that made the step slower ---------------------------------------------

def _res(verdict, status="ok", ci=(0.8, 0.9)):
    return {"name": "x", "opt": "x", "status": status,
            "optimized": {"arm": "o", "status": status, "vs_baseline": {"speedup": 0.85, "ci95": list(ci),
                                                                        "verdict": verdict}}}


def test_left_out_reason_rule():
    from workbench.ab.levers import left_out_reason
    assert left_out_reason(_res("slower")).startswith("slower (0.850x [0.800, 0.900])")
    assert left_out_reason(_res("faster", ci=(1.1, 1.2))) is None
    assert left_out_reason(_res("no detectable difference (±3%)", ci=(0.97, 1.02))) is None
    assert left_out_reason(_res("not a result (CPU timing)")) is None  # a CPU timing decides nothing
    assert left_out_reason(_res("slower", status="failed")) == "failed"
    assert left_out_reason({"name": "x", "opt": "x", "status": "failed", "errors": ["boom"]}) == "failed"


def test_the_path_leaves_a_slower_lever_out(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("WORKBENCH_OPTS", "fixtures.lever_attention,fixtures.lever_slow")
    from fixtures import lever_attention, lever_slow
    monkeypatch.setattr(lever_attention, "BASELINE_SLEEP_S", lever_slow.SLEEP_S)  # faster by the arms, not by noise
    from workbench.opts import registry as opt_registry
    real = opt_registry.levers
    monkeypatch.setattr(opt_registry, "levers", lambda: tuple(o for o in real() if o.startswith("lever_")))
    from workbench.ab import runner
    monkeypatch.setattr(runner, "timing_on", lambda r, device_type: r)  # verdicts from CPU timings, for this test
    argv = ["--opt", "levers", "--model", "tiny-qwen3", "--tokens", "64", "--batches", "1", "--steps", "2",
            "--warmup", "0", "--warmup-max", "0", "--reps", "4", "--device", "cpu", "--out", str(tmp_path / "r")]
    rc, s, stdout, err = _run(capsys, argv)
    cmps = {c["name"]: c for c in s["comparisons"]}
    assert cmps["lever_slow"]["optimized"]["vs_baseline"]["verdict"] == "slower", cmps["lever_slow"]["optimized"]
    assert list(s["levers"]["left_out_of_path"]) == ["lever_slow"]
    assert s["levers"]["left_out_of_path"]["lever_slow"].startswith("slower (")
    assert cmps["path"]["path"] == ["baseline", "+lever_attention"]  # negative control: the other lever stays
    line = next(ln for ln in stdout.splitlines() if ln.startswith("lever_slow "))
    assert "path: left out: slower" in line
    assert "left out" not in next(ln for ln in stdout.splitlines() if ln.startswith("lever_attention "))


def test_what_holds_the_paths_last_measured_point_back():
    """Goals: where one is missed, the last point's breakdown names what holds it back. The H100 path of
    2026-11-27 failed at +compile, after +precision: the held-back line belongs to the last point the path measured
    (+precision, with its trace), never to a failed point without one; the levers largest first (a slice-gradient
    lever, which `levers` puts first, after a larger pointwise one); and the MFU the point would reach with GEMM alone
    (mfu / GEMM's share of the traced step)."""
    from workbench.ab import lever_path

    lv = [{"component": "slice gradients (fill + add)", "ms": 76.0, "share": 0.06},
          {"component": "norm_elementwise", "ms": 418.4, "share": 0.331},
          {"component": "copy", "ms": 219.4, "share": 0.174}]
    assert lever_path.held_back(lv) == ("norm_elementwise (418.4 ms, 33%); copy (219.4 ms, 17%); "
                                        "slice gradients (fill + add) (76.0 ms, 6%)")
    assert lever_path.held_back([]) is None
    rows = [{"arm": "baseline", "status": "ok", "mfu": 0.1, "ms_gemm": 1000.0, "ms_norm_elementwise": 3000.0,
             "held_back_by": "x"},
            {"arm": "+precision", "status": "ok", "mfu": 0.254, "ms_gemm": 1031.0, "ms_norm_elementwise": 654.0,
             "ms_copy": 137.0, "ms_attention": 197.0, "ms_launch_gap": 19.0, "held_back_by": "norm_elementwise"},
            {"arm": "+compile", "status": "failed", "mfu": None, "held_back_by": None}]
    lever_path.mark_last_measured(rows)
    assert [r["held_back_by"] for r in rows] == [None, "norm_elementwise", None]
    assert rows[1]["gemm_share"] == pytest.approx(1031.0 / 2038.0)
    assert rows[1]["mfu_if_only_gemm"] == pytest.approx(0.254 * 2038.0 / 1031.0)
    assert "gemm_share" not in rows[0] and "gemm_share" not in rows[2]
