"""MoE's two-term model (studies/moe_two_term/moe_two_term.py) and its readings (moe_backward.py): the fit recovers u
and beta, the probe's rules reach each decision (a per-family constant, which the fit alone cannot tell from the
backward term, reads "not this mechanism" at the probe), held-out shapes only, runs from before the fit never
confirm, and the committed readings."""
import os

import numpy as np
from workbench.paths import REPO_ROOT
import pytest

from workbench.cli import run_main
from workbench.errors import WorkbenchError
from studies.moe_two_term import moe_backward as mb
from studies.moe_two_term import moe_two_term as tt

PROFILES = os.path.join(REPO_ROOT, "profiles")
FIT = os.path.join(PROFILES, "2026-11-27_h200x2_moe_work_b", tt.FIT_FILE)
SHAPES = [("gpt-oss-20b", 2048), ("gpt-oss-20b", 4096), ("gpt-oss-20b", 8192),
          ("qwen3-30b-a3b", 4096), ("qwen3-30b-a3b", 8192), ("qwen3-30b-a3b", 16384)]


def _pts(saving_of, k=6, sd_ms=10.0, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for model, tokens in SHAPES:
        s = tt.shape(model)
        removed = tt.PASSES * 4 * s["E"] * tt.SYNCS_PER_EXPERT[s["family"]]
        extra = tt.gradient_gb("sort_bincount", model, 4, tokens, removed) - tt.gradient_gb("eager", model, 4,
                                                                                             tokens, removed)
        for _ in range(k):
            out.append({"model": model, "layers": 4, "tokens": tokens, "syncs_removed": removed, "extra_gb": extra,
                        "saving_ms": saving_of(s["family"], removed, extra) + rng.normal(0, sd_ms),
                        "gpu_name": "NVIDIA H200"})
    return out


def test_the_fit_recovers_u_and_beta():
    f = tt.fit(_pts(lambda fam, n, gb: 0.085 * n - 1.2 * gb))
    assert f["u_ci90"][0] < 0.085 < f["u_ci90"][1] and f["beta_ci90"][0] < 1.2 < f["beta_ci90"][1]
    assert abs(f["u_ms"] - 0.085) < 0.005 and abs(f["beta_ms_per_gb"] - 1.2) < 0.1


def test_row_gradient_gb_is_k_minus_1_times_eagers_extra():
    # qwen3-30b-a3b 4 L 16k, every expert hit: 4 x 128 x (8 - 1) x 16384 x 2048 x 2 bytes
    removed = 2 * 4 * 128 * 5
    extra = (tt.gradient_gb("sort_bincount", "qwen3-30b-a3b", 4, 16384, removed)
             - tt.gradient_gb("eager", "qwen3-30b-a3b", 4, 16384, removed))
    assert extra == pytest.approx(4 * 128 * 7 * 16384 * 2048 * 2 / 1e9)
    with pytest.raises(WorkbenchError):
        tt.row_gradient_elements("grouped", layers=1, tokens=1, top_k=1, experts_hit=1, hidden=1)


def _pred(f):
    return tt.predict(f, "qwen3-30b-a3b", 4, 16384, 2 * 4 * 128 * 5)


def test_a_family_constant_fits_a_beta_too_and_the_probe_tells_them_apart():
    """The negative control: per-sync savings that differ by family only (no backward term) still fit a beta (the
    extra GB is the family's too), which is why the fit alone is not the mechanism; at the probe such a world saves
    nothing by splitting (and the split's saving over eager stays sort_bincount's), and rule (2) reads "not this
    mechanism"."""
    f = tt.fit(_pts(lambda fam, n, gb: (0.06 if fam == "qwen3_moe" else 0.085) * n, sd_ms=5.0))
    assert f["beta_ci90"][0] > 0  # a spurious backward term
    pred, rng = _pred(f), np.random.default_rng(1)
    sb_over_eager = 0.06 * pred["syncs_removed"]
    assert mb.probe_verdict(f, pred, list(rng.normal(sb_over_eager, 15, 8)), list(rng.normal(0, 15, 8)))[
        "decision"].startswith("not this mechanism")


def test_rule_2_reads_each_decision_and_plans_its_chance():
    real = tt.fit(_pts(lambda fam, n, gb: 0.085 * n - 1.2 * gb))
    pred, rng = _pred(real), np.random.default_rng(2)
    gb = pred["gb"]
    a = 0.085 * pred["syncs_removed"] + 1.2 * (gb["eager"] - gb["sort_split"])
    b = 1.2 * (gb["sort_bincount"] - gb["sort_split"])
    ok = (list(rng.normal(a, 10, 8)), list(rng.normal(b, 10, 8)))
    assert mb.probe_verdict(real, pred, *ok)["decision"] == "mechanism measured"
    assert mb.probe_verdict(real, pred, *ok, equivalent=False)["decision"].startswith("inconclusive")
    wide = (list(rng.normal(a, 300, 4)), list(rng.normal(b, 300, 4)))
    assert mb.probe_verdict(real, pred, *wide)["decision"] == "inconclusive"
    committed = tt.read_fit(FIT)
    plan = mb.plan_probe(committed, committed["prediction"], 0.93, 0.89, 0.10, 8, sims=300)
    assert plan.get("mechanism measured", 0) > 0.7 and plan.get("not this mechanism (or not all of it)", 0) < 0.05
    shifted = mb.plan_probe(committed, committed["prediction"], 0.93, 0.89, 0.10, 8, sims=300, lease_sd=0.137)
    assert shifted.get("mechanism measured", 0) < plan["mechanism measured"]  # a lease's own level costs chance
    none = mb.plan_probe(committed, committed["prediction"], 0.35, 0.05, 0.10, 8, sims=100)
    assert none.get("not this mechanism (or not all of it)", 0) > 0.95


def test_the_committed_probe_reads_inconclusive_under_rule_1_and_is_not_read_under_rule_2(capsys):
    probe = os.path.join(PROFILES, "2026-11-27_h200x2_moe_probe")
    assert mb.probe(FIT, probe)["decision"] == "inconclusive"
    assert run_main(mb.main, ["probe", FIT, probe]) == 0
    assert "not read: 2 processes" in capsys.readouterr().out


def test_judge_reads_held_out_shapes_only_and_never_confirms_runs_from_before_the_fit():
    rows = {r["shape"]: r for r in mb.judge_held_out(tt.read_fit(FIT),
                                                     [os.path.join(PROFILES, "2026-11-27_h200x2_moe_same_host")])}
    assert rows["qwen3-30b-a3b 4 L 8192"]["verdict"] == "not judged: a shape the fit used"
    held = rows["gpt-oss-20b 8 L 4096"]
    assert held["processes"] == 8  # the merge's copies counted once
    assert held["verdict"].startswith("exploratory: ") and held["seen"]


def test_bad_input_is_one_line(tmp_path, capsys):
    assert run_main(mb.main, ["judge", str(tmp_path / "none.json"), str(tmp_path)]) == 2
    old = tmp_path / "old.json"
    old.write_text('{"u_ms": 0.08}')
    assert run_main(mb.main, ["probe", str(old), str(tmp_path)]) == 2
    assert run_main(mb.main, ["fit", str(tmp_path / "missing")]) == 2
    assert run_main(mb.main, ["fit", os.path.dirname(FIT)]) == 2  # the committed fit is a record: --force replaces it
    for shape_args in (["qwen3-30b-a3b", "x", "1"], ["nomodel", "4", "16"], ["qwen3-30b-a3b", "0", "5"]):
        assert run_main(mb.main, ["probe", FIT, str(tmp_path), "--shape", *shape_args]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 7 and "Traceback" not in err and "--force" in err
    assert "LAYERS and TOKENS must be positive integers" in err and "nomodel: not an MoE preset" in err


def test_shape_prediction_is_the_probes_at_its_shape_and_the_committed_run_reads_mechanism_measured(capsys):
    """`probe --shape` predicts as `fit --predict` wrote (the committed record), and the four-H200 run reads as its
    COMMAND.txt says: rule (2) "mechanism measured"; judge: gpt-oss-20b 8 L 8k confirmed, qwen3 8 L 8k inconclusive."""
    f = tt.read_fit(FIT)
    p = mb.shape_prediction(f, "qwen3-30b-a3b", 4, 16384)
    assert p["split_over_sort_bincount_ms"] == pytest.approx(f["prediction"]["split_over_sort_bincount_ms"])
    assert p["split_over_eager_ms"] == pytest.approx(f["prediction"]["split_over_eager_ms"])
    run = os.path.join(PROFILES, "2026-11-27_h200x4_moe_backward")
    assert mb.probe_processes(f, [run])["decision"] == "mechanism measured"
    assert mb.probe_processes(f, [run], ("qwen3-30b-a3b", 4, 16384))["decision"] == "mechanism measured"
    assert mb.probe_processes(f, [run], ("qwen3-30b-a3b", 6, 12288))["decision"].startswith("not read: 0 processes")
    rows = {r["shape"]: r["verdict"] for r in mb.judge_held_out(f, [run])}
    assert rows == {"gpt-oss-20b 8 L 8192": "confirmed", "qwen3-30b-a3b 8 L 8192": "inconclusive",
                    "qwen3-30b-a3b 4 L 16384": "not judged: a shape the fit used"}
    assert run_main(mb.main, ["probe", FIT, run, "--shape", "qwen3-30b-a3b", "4", "16384"]) == 0
    out = capsys.readouterr().out
    assert "size present" in out and "mechanism measured" in out
    with open(os.path.join(run, "probe.txt")) as fh:
        assert fh.read() == out


def test_the_third_held_out_shape_reads_as_its_command_says(capsys):
    """qwen3-30b-a3b 6 L 12k (written before its run, 62f6579): alone, the two-term model confirmed and rule (2) at that
    shape "mechanism measured"; beside, in one Holm family with the other two held-out shapes, it is inconclusive."""
    f = tt.read_fit(FIT)
    third = os.path.join(PROFILES, "2026-11-27_h200x4_moe_q6l12k")
    alone = mb.judge_held_out(f, [third])
    assert [(r["shape"], r["verdict"]) for r in alone] == [("qwen3-30b-a3b 6 L 12288", "confirmed")]
    assert mb.probe_processes(f, [third], ("qwen3-30b-a3b", 6, 12288))["decision"] == "mechanism measured"
    three = {r["shape"]: r["verdict"] for r in mb.judge_held_out(f, [os.path.join(PROFILES, "2026-11-27_h200x4_moe_backward"),
                                                                       third])}
    assert three["qwen3-30b-a3b 6 L 12288"] == "inconclusive" and three["gpt-oss-20b 8 L 8192"] == "confirmed"
    for args, name in ((["judge", FIT, third], "judge.txt"),
                       (["probe", FIT, third, "--shape", "qwen3-30b-a3b", "6", "12288"], "probe.txt")):
        assert run_main(mb.main, args) == 0
        with open(os.path.join(third, name)) as fh:
            assert fh.read() == capsys.readouterr().out


def test_by_pass_adds_the_held_out_shapes_only_and_the_figure_labels_them():
    """Notebook 02's MoE figure: the fit's six shapes, then each held-out shape of `studies/moe_two_term/moe_backward.sh`'s folders
    (job_roots), never a shape the fit used (the probe's 4 L 16k there), labelled "held out"."""
    from studies.moe_two_term.moe_figure import pass_figure

    f = tt.read_fit(FIT)
    roots = tt.job_roots(PROFILES, "studies/moe_two_term/moe_backward.sh")
    assert sorted(os.path.basename(r) for r in roots) == ["2026-11-27_h200x4_moe_backward", "2026-11-27_h200x4_moe_q6l12k"]
    assert tt.job_roots(PROFILES, "gpu/jobs/none.sh") == []
    rows = tt.by_pass(f, FIT, held_out=roots)
    assert [r["shape"] for r in rows if r["held_out"]] == ["gpt-oss-20b 8 L 8192", "qwen3-30b-a3b 8 L 8192",
                                                           "qwen3-30b-a3b 6 L 12288"]
    assert len([r for r in rows if not r["held_out"]]) == 6 == len(tt.by_pass(f, FIT))
    ticks = pass_figure(rows).data[0].x
    assert sum("held out" in t for t in ticks) == 3
