"""The plan for a new run of an inconclusive verdict (workbench/savings/plan.py): the processes a fresh run
needs, from the inconclusive one as a pilot, under the verdict test as committed."""
import math

import pytest

from workbench.savings import plan, verdicts


def _row(ratio=1.0, proc_sd_pct=10.0, k=3, pred_se_pct=1.0, source="untraced", predicted_df=9, family=1):
    p = 100.0
    m = ratio * p
    return {"comparison": "moe", "model": "m", "layers": 4, "tokens": 8192, "verdict": "inconclusive",
            "input_source": source, "measured_ms": m, "measured_se_ms": m * proc_sd_pct / 100 / math.sqrt(k),
            "measured_n_units": k, "predicted_ms": p, "predicted_se_ms": p * pred_se_pct / 100,
            "predicted_df": predicted_df, "family_size": family}


def _judge_at(row, kk):
    """verdicts.judge at K' processes with the plan's scaling (the prediction fixed: untraced), the pilot's SDs at
    their upper bounds as the plan takes them."""
    k = row["measured_n_units"]
    sd = row["measured_se_ms"] * math.sqrt(k) * plan._ucl(k - 1)
    return verdicts.judge(row["predicted_ms"], row["predicted_se_ms"] * plan._ucl(row["predicted_df"]),
                          row["measured_ms"], sd / math.sqrt(kk), kk - 1, predicted_df=row["predicted_df"])["verdict"]


def test_the_planned_size_is_where_the_committed_test_first_decides():
    row = _row(ratio=1.0, proc_sd_pct=20.0)
    got = plan.processes_to_decide(row)
    assert got["reads"] == "confirmed" and got["k"] > 3
    assert _judge_at(row, got["k"]) == "confirmed" and _judge_at(row, got["k"] - 1) == "inconclusive"
    noisier = plan.processes_to_decide(_row(ratio=1.0, proc_sd_pct=30.0))
    assert noisier["k"] > got["k"]  # a noisier pilot plans a larger run


def test_a_ratio_far_outside_the_band_plans_a_refutation():
    got = plan.processes_to_decide(_row(ratio=2.0, proc_sd_pct=40.0))
    assert got["reads"] == "refuted" and got["k"] >= 2


def test_a_prediction_too_wide_for_the_band_is_not_fixed_by_processes():
    """Negative control of the planner: the untraced prediction's se (the dose slope's) does not shrink with the
    verdict run's processes; near a band edge no K' decides, and the plan says the input needs precision."""
    got = plan.processes_to_decide(_row(ratio=1.1, proc_sd_pct=5.0, pred_se_pct=9.0))
    assert got["k"] is None and "not by processes" in got["why"]
    # the same row, its prediction the judged processes' own mean (traced, K - 1 df): processes do shrink it
    traced = plan.processes_to_decide(_row(ratio=1.1, proc_sd_pct=5.0, pred_se_pct=9.0, source="traced",
                                           predicted_df=2))
    assert traced["reads"] == "confirmed"


def test_the_family_size_makes_the_plan_larger_and_bad_rows_say_why():
    one = plan.processes_to_decide(_row(ratio=1.0, proc_sd_pct=20.0))
    two = plan.processes_to_decide(_row(ratio=1.0, proc_sd_pct=20.0, family=2))
    assert two["k"] >= one["k"]
    assert plan.processes_to_decide({**_row(), "measured_n_units": None})["k"] is None
    assert "at or below 0" in plan.processes_to_decide(_row(ratio=-0.5))["why"]
    text = plan.table([_row(ratio=1.0, proc_sd_pct=20.0), {**_row(), "verdict": "confirmed"}])
    assert text.count("\n") == 1 and "would read confirmed" in text


def test_the_cli_prints_the_plan_of_the_committed_untraced_run(tmp_path, capsys):
    import os
    import shutil
    from workbench.savings import verdicts_cli
    root = os.path.join(os.path.dirname(__file__), "..", "profiles")
    run = shutil.copytree(os.path.join(root, "2026-11-27_h100_verdicts_untraced", "moe_q30_l4"), tmp_path / "moe")
    rc = verdicts_cli.main([str(run), "--dose", os.path.join(root, "2026-11-27_h100_dose_moe_rule"), "--plan"])
    out = capsys.readouterr().out
    assert rc == 0 and "inconclusive" in out
    assert "moe qwen3-30b-a3b 4 L 8192 [untraced], pilot 3 processes, inconclusive: not by processes" in out


def _judge_both(row, kk, d):
    """verdicts.judge with a new dose run of d processes (the prediction's se as 1 / sqrt(d) from the pilot dose's) and
    a new verdict run of kk processes."""
    k = row["measured_n_units"]
    sd = row["measured_se_ms"] * math.sqrt(k) * plan._ucl(k - 1)
    se_p = row["predicted_se_ms"] * plan._ucl(row["predicted_df"]) * math.sqrt((row["predicted_df"] + 1) / d)
    return verdicts.judge(row["predicted_ms"], se_p, row["measured_ms"], sd / math.sqrt(kk), kk - 1,
                          predicted_df=d - 1)["verdict"]


def test_with_a_new_dose_run_the_plan_is_the_smallest_pair_that_decides():
    """Where no verdict run alone decides (the dose's interval spans a band edge), `with_dose` plans a new dose run
    and a new verdict run together: the pair it gives decides under verdicts.judge, and no pair of fewer processes in
    all does. Negative controls: a traced row is not planned with a dose, and a ratio on the band edge is not
    decidable at any size."""
    row = _row(ratio=1.1, proc_sd_pct=5.0, pred_se_pct=9.0)
    assert plan.processes_to_decide(row)["k"] is None
    got = plan.with_dose(row)
    assert got["reads"] == "confirmed" and got["dose"] > 10
    assert _judge_both(row, got["k"], got["dose"]) == "confirmed"
    total = got["k"] + got["dose"]
    assert all(_judge_both(row, kk, total - 1 - kk) == "inconclusive" for kk in range(2, total - 2))
    assert plan.with_dose(_row(ratio=1.15, source="traced", predicted_df=2))["k"] is None
    assert plan.with_dose(_row(ratio=1.25, proc_sd_pct=5.0, pred_se_pct=9.0))["k"] is None
    text = plan.table([row])
    assert f"{got['dose']} dose processes and {got['k']} verdict processes would read confirmed" in text


def test_the_pilots_sd_is_planned_at_its_upper_bound_as_the_held_out_run_asks():
    """The plan of 2026-11-27 (2) sized packing qwen3-14b 4 L at 8 processes from a 3-process pilot
    (profiles/2026-11-27_h100_verdicts_untraced) with the pilot's SD at its point value; the 8-process run
    (profiles/2026-11-27_h100_verdicts_planned) measured a process SD 1.4x the pilot's, and at the pilot's very ratio
    (1.09) its verdict was inconclusive. Checked on the committed runs: the held-out SD exceeds the pilot's point value
    but lies under its 80% upper bound, which the plan now uses; and the plan from the same pilot no longer promises a
    decision at 8 (a check that fails if the factor is dropped)."""
    import json
    import os
    root = os.path.join(os.path.dirname(__file__), "..", "profiles")

    def sm(folder):
        with open(os.path.join(root, folder, "packing_q14l4", "verdicts.json")) as f:
            return json.load(f)["comparisons"][0]["savings_model"]
    pilot, held = sm("2026-11-27_h100_verdicts_untraced"), sm("2026-11-27_h100_verdicts_planned")
    sd = {k: v["measured_se_ms"] * math.sqrt(v["measured_n_units"]) for k, v in (("pilot", pilot), ("held", held))}
    assert (pilot["measured_n_units"], held["measured_n_units"]) == (3, 8)
    assert sd["pilot"] < sd["held"] < sd["pilot"] * plan._ucl(2)
    assert held["verdict"] == "inconclusive" and abs(held["ratio"] - pilot["ratio"]) < 0.01
    assert plan._ucl(2) == pytest.approx(2.12, abs=0.01) and plan._ucl(None) == 1.0
    row = {"comparison": "packing", "verdict": "inconclusive", "family_size": 1, **pilot}
    got = plan.processes_to_decide(row)
    assert got["k"] is None or got["k"] > 8


def test_assurance_agrees_with_the_plan_only_where_the_pilot_is_sharp():
    """`assurance` simulates the planned run over the pilot's own uncertainty and judges it with the committed test.
    A sharp pilot (1% process SD, an exact input) inside the band: the planned size reads confirmed nearly always.
    Controls: a pilot ratio on the band's edge reads confirmed about as often as not; the same sharp pilot far outside
    the band reads refuted nearly always; the three chances sum to 1."""
    sharp = _row(ratio=1.0, proc_sd_pct=1.0, pred_se_pct=0.1, predicted_df=50)
    got = plan.processes_to_decide(sharp)
    a = plan.assurance(sharp, got["k"], draws=400)
    assert got["reads"] == "confirmed" and a["confirmed"] > 0.95
    assert sum(a.values()) == pytest.approx(1.0)
    edge = plan.assurance(_row(ratio=1.25, proc_sd_pct=1.0, pred_se_pct=0.1, predicted_df=50), 10, draws=400)
    assert edge["confirmed"] < 0.7 and edge["refuted"] < 0.7
    far = plan.assurance(_row(ratio=2.0, proc_sd_pct=1.0, pred_se_pct=0.1, predicted_df=50), 4, draws=400)
    assert far["refuted"] > 0.95
    dosed = _row(ratio=1.1, proc_sd_pct=5.0, pred_se_pct=9.0)  # a new dose run shrinks the prediction's se
    both = plan.with_dose(dosed)
    assert (plan.assurance(dosed, both["k"], dose=both["dose"], draws=400)["confirmed"]
            > plan.assurance(dosed, both["k"], draws=400)["confirmed"])


def test_the_offload_pilot_gave_its_held_out_confirmation_little_chance():
    """The plan of 2026-11-27 (2) read "6 processes would read refuted" from the 3-process offload pilot on qwen3-14b
    (profiles/2026-11-27_h100_verdicts_offload, ratio 0.74); the 6-process run on another H100
    (profiles/2026-11-27_h100_verdicts_planned) read confirmed at 0.88. Over the pilot's own uncertainty a 6-process run
    reads confirmed under 5% of the time: the held-out run moved further than the pilot's within-run intervals allow
    (a between-run component the plan does not model, said in plan.py). The plan's reading at 6 was never near
    certain either (refuted well under 90%)."""
    import json
    import os
    root = os.path.join(os.path.dirname(__file__), "..", "profiles")

    def sm(folder):
        with open(os.path.join(root, folder, "offload_q14", "verdicts.json")) as f:
            return json.load(f)["comparisons"][0]["savings_model"]
    pilot, held = sm("2026-11-27_h100_verdicts_offload"), sm("2026-11-27_h100_verdicts_planned")
    assert (pilot["verdict"], held["verdict"]) == ("inconclusive", "confirmed")
    assert (pilot["measured_n_units"], held["measured_n_units"]) == (3, 6)
    row = {"comparison": "offload", "verdict": "inconclusive", "family_size": 2, **pilot}
    a = plan.assurance(row, 6, draws=1000)
    assert a["confirmed"] < 0.05 and a["refuted"] < 0.9
