"""Issue 40: an arm that computes a different function by design (DIFFERENT_FUNCTION) and passed its checks reads
"different fn (stated)" wherever an arm's equivalence is shown (the analysis frame, the results page, the run's arm
table, savings_frame, the levers table), never "yes" nor the "NO" of a failure; one whose checks failed reads
"NO (different fn)"; an ordinary non-equivalent arm still reads "NO" (the negative control). The field is read from
where the run wrote it (summary.json's `different_function.passed`). The levers path never switches such a lever on
(left out, saying why), and apply_optimizations refuses such an arm unless told the caller knows. Run folders: the
schema's writer of tests/test_analysis.py; fake levers: tests/fixtures/lever_*.py through $WORKBENCH_OPTS."""
from __future__ import annotations

import json
import os

import pytest

from workbench import analysis as an
from workbench.cli import run_main
from workbench.measure.numerics import DIFFERENT_CELL, DIFFERENT_FAILED_CELL, equiv_cell
from workbench.report import tables

from test_analysis import arm, comparison, vs, write_run


def _df(passed: bool) -> dict:
    """A `judge_different` result as the runner writes it into summary.json (its fields that the tables read)."""
    return {"why": "balanced sends tokens to other experts.", "criterion": "(a) ...; (b) ...",
            "off_path_equivalent": passed, "off_path": {"bitwise": passed}, "loss_finite": True,
            "problems": [] if passed else ["with the change off it differs from the baseline"], "passed": passed}


def _balanced(passed: bool, status: str = "ok") -> dict:
    """A moe_balance comparison: routed (baseline), balanced (a stated different function: `equivalent` False by
    construction), and an ordinary arm `routed#copy` that is equivalent."""
    bal = arm("balanced", 90.0, v=vs(1.11, 1.09, 1.13))
    bal.update(equivalent=False, bitwise=False, different_function=_df(passed))
    c = comparison("moe_balance", arm("routed", 100.0), bal, [arm("routed#copy", 100.0, v=vs(1.0, 0.99, 1.01))],
                   status=status)
    c.update(equivalent=False, different_function={"balanced": bal["different_function"]},
             equivalence={"routed": {"equivalent": True}, "balanced": {"equivalent": False},
                          "routed#copy": {"equivalent": True}})
    return c


def _ordinary_not_equivalent(status: str = "failed") -> dict:
    """An ordinary arm that is not equivalent (no DIFFERENT_FUNCTION): the negative control, an ordinary failure."""
    bad = arm("liger", 90.0, v=vs(1.11, 1.09, 1.13))
    bad["equivalent"] = False
    c = comparison("liger", arm("eager", 100.0), bad, status=status)
    c["equivalent"] = False
    return c


@pytest.fixture
def profiles(tmp_path):
    """A complete GPU run with a passed different-function arm and an ordinary non-equivalent arm (its comparison's
    status ok: what the page must still call NO); a failed run with a failed different-function arm."""
    root = tmp_path / "profiles" / "camp"
    write_run(str(root / "good"), [_balanced(True), _ordinary_not_equivalent(status="ok")])
    write_run(str(root / "bad"), [_balanced(False, status="failed"), _ordinary_not_equivalent()], status="failed")
    return str(tmp_path / "profiles")


def test_the_cell():
    assert equiv_cell(False, True) == DIFFERENT_CELL == "different fn (stated)"
    assert equiv_cell(False, False) == DIFFERENT_FAILED_CELL == "NO (different fn)"
    assert equiv_cell(True, float("nan"), True) == "bitwise"  # a frame's NaN: no different-function field
    assert (equiv_cell(True, None), equiv_cell(False, None), equiv_cell(None), equiv_cell(float("nan"))) == \
        ("yes", "NO", "-", "-")


def test_the_analysis_frame_reads_the_runs_field(profiles):
    df = an.comparisons(profiles, include_incomplete=True)
    got = {(r["folder"].split("/")[-1], r["arm"]): r["different_function_passed"] for r in df.to_dict("records")}
    assert got[("good", "balanced")] is True and got[("bad", "balanced")] is False
    assert got[("good", "routed#copy")] is None and got[("good", "liger")] is None  # ordinary arms: no field
    assert not df["equivalent"][df["arm"] == "balanced"].any()  # never called equivalent


def test_the_results_page(profiles):
    from workbench.report import readme as rr
    page = rr.page_markdown(profiles, include_incomplete=True)
    speed = page[page.index("## Speedups"): page.index("\n## ", page.index("## Speedups") + 1)]
    rows = {}
    for line in speed.splitlines():
        if line.startswith("| ") and "->" in line and "camp/" in line:
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[(cells[-1].split("camp/")[1].split("/")[0], cells[5].split(" -> ")[1])] = cells[12]
    assert rows[("good", "balanced")] == "different fn (stated)"
    assert rows[("good", "liger")] == "NO"  # the negative control: an ordinary non-equivalent arm
    assert rows[("good", "routed#copy")] == "yes"
    # a failed different-function arm fails its comparison and its run: no row among the results, listed as left out
    assert not [k for k in rows if k[0] == "bad"]
    left = page[page.index("## Left out"):]
    assert "camp/bad" in left or "bad" in left.split("## Commands")[0]


def _arm_cells(c: dict) -> dict:
    lines = tables.comparison_table(c).splitlines()
    head = lines[1].split()
    return {ln.split()[0]: ln for ln in lines[2:2 + len(tables.arms_frame(c))]}, head


def test_the_runs_arm_table_and_savings_frame():
    """Three arms, one with the field and one without (a NaN in the frame): each reads its own."""
    cells, _ = _arm_cells(_balanced(True))
    assert "different fn (stated)" in cells["balanced"] and cells["routed#copy"].split()[-2] == "yes"
    assert cells["routed"].split()[-2] == "ref"
    failed, _ = _arm_cells(_balanced(False, status="failed"))
    assert "NO (different fn)" in failed["balanced"]
    plain, _ = _arm_cells(_ordinary_not_equivalent())
    assert plain["liger"].split()[-2] == "NO" and "different" not in plain["liger"]
    sf = tables.savings_frame({"comparisons": [_balanced(True), _balanced(False), _ordinary_not_equivalent()]})
    assert sf["different_function_passed"].tolist() == [True, False, None]


# --- the levers: the path never switches a different function on ------------------------------------------------

def _result(different=None, verdict="faster"):
    o = {"arm": "half", "status": "ok", "vs_baseline": {"speedup": 1.2, "ci95": [1.1, 1.3], "verdict": verdict}}
    r = {"name": "lever_different", "opt": "lever_different", "status": "ok", "optimized": o}
    if different is not None:
        o["different_function"] = _df(different)
        r["different_function"] = {"half": o["different_function"]}
    return r


def test_left_out_reason_and_the_levers_table():
    from workbench.ab import levers as lever_run
    assert lever_run.left_out_reason(_result(True)) == lever_run.DIFFERENT_FN  # faster, yet no speed lever
    assert lever_run.left_out_reason(_result()) is None  # the negative control: the same result, no field
    lv = {"component": "launch_gap", "predicted_ms": None}
    s = {"comparisons": [{**_result(True), "lever": lv},
                         {**_result(False), "lever": lv, "name": "failed_one", "opt": "x"},
                         {**_result(), "lever": lv, "name": "plain", "opt": "y", "equivalent": False}],
         "levers": {"left_out_of_path": {"lever_different": lever_run.DIFFERENT_FN}}}
    lines = {ln.split()[0]: ln for ln in lever_run.table(s).splitlines()[1:]}
    assert "different fn (stated)" in lines["lever_different"] and "path: left out: different function" in \
        lines["lever_different"]
    assert "NO (different fn)" in lines["failed_one"]
    assert "different" not in lines["plain"] and " False " in lines["plain"]


def test_path_levers_leaves_a_stated_different_function_out(monkeypatch):
    monkeypatch.setenv("WORKBENCH_OPTS", "fixtures.lever_attention,fixtures.lever_different")
    import types
    from workbench.ab import levers as lever_run
    chosen = [types.SimpleNamespace(opt=o, name=o, optimized=None) for o in ("lever_attention", "lever_different")]
    on, out = lever_run.path_levers(chosen)
    assert [c.opt for c in on] == ["lever_attention"] and out == {"lever_different": lever_run.DIFFERENT_FN}
    # prune_path keeps out what was left out when planned, with no result of its own yet (--only path) ...
    sel = lever_run.Selection(chosen, {}, {}, left_out=dict(out))
    path = object()
    assert lever_run.prune_path(sel, [], path) is path
    # ... and never takes it back: the other lever failed, so no lever is left for a path
    failed = {"name": "lever_attention", "opt": "lever_attention", "status": "failed"}
    assert lever_run.prune_path(sel, [failed], path) is None
    assert sel.left_out == {"lever_different": lever_run.DIFFERENT_FN, "lever_attention": "failed"}


def test_a_levers_run_judges_the_lever_and_keeps_it_off_the_path(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("WORKBENCH_OPTS", "fixtures.lever_attention,fixtures.lever_different,fixtures.lever_slow")
    from fixtures import lever_attention
    monkeypatch.setattr(lever_attention, "DIFFER", False)
    from workbench.opts import registry as opt_registry
    real = opt_registry.levers
    monkeypatch.setattr(opt_registry, "levers", lambda: tuple(o for o in real() if o.startswith("lever_")))
    from workbench import ab
    argv = ["--opt", "levers", "--model", "tiny-qwen3", "--tokens", "64", "--batches", "1", "--steps", "1",
            "--warmup", "0", "--warmup-max", "0", "--reps", "2", "--device", "cpu", "--out", str(tmp_path / "r")]
    rc = run_main(ab.main, argv)
    stdout, err = capsys.readouterr()
    assert rc == 0, err[-3000:]
    s = json.loads([ln for ln in stdout.splitlines() if ln.strip()][-1])
    cmps = {c["name"]: c for c in s["comparisons"]}
    d = cmps["lever_different"]
    assert d["status"] == "ok" and d["equivalent"] is False and d["different_function"]["half"]["passed"] is True
    from workbench.ab.levers import DIFFERENT_FN
    assert s["levers"]["left_out_of_path"] == {"lever_different": DIFFERENT_FN}
    assert cmps["path"]["path"] == ["baseline", "+lever_attention", "+lever_slow"]  # the others stay on it
    assert all("lever_different" not in a for a in cmps["path"]["path"])
    line = next(ln for ln in stdout.splitlines() if ln.startswith("lever_different "))
    assert "different fn (stated)" in line and "path: left out: different function (stated)" in line
    assert "left out" not in next(ln for ln in stdout.splitlines() if ln.startswith("lever_attention "))
    # the run's own arm table says it too
    assert any(ln.strip().startswith("half") and "different fn (stated)" in ln for ln in stdout.splitlines())


# --- apply_optimizations -----------------------------------------------------------------------------------------

def test_apply_optimizations_refuses_a_different_function_unless_told():
    from workbench.api import apply_optimizations
    from workbench.errors import WorkbenchError
    from workbench.step.models import build_model
    model = build_model("tiny-qwen3-moe", lora_rank=4)
    with pytest.raises(WorkbenchError, match="moe_balance='balanced' computes a different function by design") as e:
        apply_optimizations(model, moe_balance="balanced")
    assert "\n" not in str(e.value) and "allow_different_function=True" in str(e.value)
    from workbench.opts.moe_balance import experts_modules
    assert not any(m._forward_pre_hooks for m in experts_modules(model))  # nothing stayed applied
    with apply_optimizations(model, moe_balance="routed") as h:  # the negative control: its baseline arm
        assert h.different_function == {}
    with apply_optimizations(model, moe_balance="balanced", allow_different_function=True) as h:
        assert list(h.different_function) == ["moe_balance"] and "routing" in h.different_function["moe_balance"]
        assert any(m._forward_pre_hooks for m in experts_modules(model))
    assert not any(m._forward_pre_hooks for m in experts_modules(model))
