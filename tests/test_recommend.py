"""The A/B's recommendation names only what was measured faster than transformers' default, and an arm measured slower
than that default warns once when applied."""
import json
import os
import warnings

import pytest

from workbench.ab import recommend
from workbench.paths import REPO_ROOT

MOE_ALL_ARMS = os.path.join(REPO_ROOT, "profiles", "2026-11-23_h100_verdicts", "ab_traced")
"""A committed H100 run with eager, sort_bincount, grouped and hf_grouped_mm on gpt-oss-20b 4 L 8k."""
MOE_ANCHOR = os.path.join(REPO_ROOT, "profiles", "2026-11-27_h100_kernels_path", "qwen_moe")


def _summary(d):
    return json.load(open(os.path.join(d, "summary.json")))


def test_committed_moe_run_never_recommends_sort_bincount_over_grouped_mm():
    rec = recommend.recommend(MOE_ALL_ARMS, _summary(MOE_ALL_ARMS))
    assert rec["moe"]["arm"] != "sort_bincount" and "hf_grouped_mm" in rec["moe"]["why"]
    assert rec["offload"]["arm"] is None  # double_buffer is slower than plain checkpointing; none is a reference
    lines = recommend.lines(MOE_ALL_ARMS, _summary(MOE_ALL_ARMS), "cuda", "NVIDIA H100 80GB HBM3")
    assert lines[-1].startswith("recommended on this machine: nothing")


def test_committed_anchor_run_recommends_the_arm_decided_faster_than_grouped_mm():
    lines = recommend.lines(MOE_ANCHOR, _summary(MOE_ANCHOR), "cuda", "NVIDIA H100 80GB HBM3")
    assert 'recommended on this machine: apply_optimizations(model, moe="grouped")' in lines
    assert any(ln.startswith('  moe="grouped": 1.0') and "faster than hf_grouped_mm" in ln for ln in lines)
    assert lines[0].startswith("moe: grouped saved ") and "of the step on NVIDIA H100" in lines[0]


def _moe_run(tmp_path, arms_ms: dict, reps=4):
    from workbench.measure.results import RunWriter
    w = RunWriter(str(tmp_path), "r", env={"device": "cuda"}, extra_meta={"device": {"type": "cuda"}})
    for rep in range(reps):
        for arm, ms in arms_ms.items():
            for step in range(3):
                w.add("moe", arm, "step_ms", ms * (1 + 0.001 * ((rep + step) % 3)), "ms", rep=rep, step=step, batch=0)
    names = list(arms_ms)
    arm = lambda a: {"arm": a, "step_ms": arms_ms[a], "equivalent": True}  # noqa: E731
    summary = {"device": "cuda", "comparisons": [{"name": "moe", "opt": "moe", "status": "ok", "baseline": arm(names[0]),
                                                   "optimized": arm(names[1]), "others": [arm(a) for a in names[2:]]}]}
    w.write_summary(summary)
    w.finish("complete")
    return summary


def test_sort_bincount_faster_than_eager_is_not_recommended_without_grouped_mm(tmp_path, monkeypatch):
    s = _moe_run(tmp_path / "a", {"eager": 100.0, "sort_bincount": 90.0, "hf_grouped_mm": 70.0})
    assert recommend.recommend(str(tmp_path / "a"), s)["moe"]["arm"] is None
    s = _moe_run(tmp_path / "b", {"eager": 100.0, "sort_bincount": 90.0})
    rec = recommend.recommend(str(tmp_path / "b"), s)
    assert rec["moe"]["arm"] is None and "did not run" in rec["moe"]["why"]
    from workbench.opts import moe  # negative control: measured against the eager baseline, sort_bincount would win
    monkeypatch.setattr(moe, "TRANSFORMERS_DEFAULT", None)
    assert recommend.recommend(str(tmp_path / "b"), s)["moe"]["arm"] == "sort_bincount"


def test_cpu_run_recommends_nothing(tmp_path):
    s = _moe_run(tmp_path, {"hf_grouped_mm": 70.0, "grouped": 60.0})
    assert recommend.lines(str(tmp_path), s, "cpu")[-1].startswith("recommended: nothing: a CPU run")
    assert recommend.recommend(str(tmp_path), s)["moe"]["arm"] == "grouped"  # the same rows on a GPU


def test_arm_slower_than_the_default_warns_once(monkeypatch):
    from workbench import api
    from workbench.step.models import build_model
    monkeypatch.setattr(api, "_WARNED", set())
    with pytest.warns(UserWarning, match="sort_bincount.*slower than hf_grouped_mm") as rec:
        api.apply_optimizations(build_model("tiny-qwen3-moe", lora_rank=4), moe="sort_bincount").revert()
    assert len([w for w in rec if "slower" in str(w.message)]) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        api.apply_optimizations(build_model("tiny-qwen3-moe", lora_rank=4), moe="sort_bincount").revert()
        api.apply_optimizations(build_model("tiny-qwen3-moe", lora_rank=4), moe="grouped").revert()
