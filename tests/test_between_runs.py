"""The between-run component of a measured saving (workbench/analysis/between_runs.py): runs of one shape
in different leases, a one-way ANOVA of their process means by run, pooled over shapes; and the plan's chance with it
(workbench/savings/plan.py `assurance(..., omega=)`)."""
from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

from workbench.analysis import between_runs as br
from workbench.errors import WorkbenchError
from workbench.savings import plan

ROOT = os.path.join(os.path.dirname(__file__), "..", "profiles")


def _runs(rng, n_runs=3, k=4, omega=0.0, tau=0.10, sd_ratio=1.0, mean_ms=20.0):
    """Entries as `collect` gives them: each run's level exp(N(0, omega)), its processes' log spread tau (the last
    run's times `sd_ratio`: machines that differ in their process SD)."""
    out = []
    for j in range(n_runs):
        level = rng.normal(0.0, omega)
        t = tau * (sd_ratio if j == n_runs - 1 else 1.0)
        out.append({"label": "packing m 4 L 16384 (cached vs rebuild)", "folder": f"r{j}", "machine": f"m{j}",
                    "savings_ms": list(mean_ms * np.exp(level + rng.normal(0.0, t, k)))})
    return out


def _reject_rate(rng, sims=400, shapes=4, **kw) -> tuple[float, list[float]]:
    hits, omegas = 0, []
    for _ in range(sims):
        pool = br.pooled([br.shape_component(_runs(rng, **kw)) for _ in range(shapes)])
        hits += pool["p"] < 0.05
        omegas.append(pool["omega"])
    return hits / sims, omegas


def test_without_a_between_run_component_the_test_keeps_its_level():
    """The negative control: runs that differ only by their processes' spread read p < 0.05 about 5% of the time,
    and the pooled omega sits near 0."""
    rate, omegas = _reject_rate(np.random.default_rng(1))
    assert 0.02 <= rate <= 0.09
    assert float(np.median(omegas)) < 0.03


def test_a_between_run_component_is_found_and_its_size_recovered():
    rate, omegas = _reject_rate(np.random.default_rng(2), omega=0.15)
    assert rate > 0.9
    assert 0.10 < float(np.median(omegas)) < 0.20


def test_machines_that_differ_in_their_process_sd_inflate_the_level():
    """What the module docstring states: the F test assumes one process SD per shape. With one run's SD 3x the
    others' and no between-run component, 4 shapes of 3 runs x 4 processes read p < 0.05 about twice as often as
    they should (11.5% of 400 sets): a pooled p near 0.05 is partly the spread's difference (measured here, not
    hidden); the committed packing and MoE readings (p 4e-6, 0.01) lie well past it."""
    rate, _ = _reject_rate(np.random.default_rng(3), sd_ratio=3.0)
    assert 0.08 < rate < 0.2


def test_a_shape_it_cannot_judge_says_why():
    one = [{"label": "x", "folder": "a", "machine": "m", "savings_ms": [5.0]},
           {"label": "x", "folder": "b", "machine": "m", "savings_ms": [6.0]}]
    assert "one process" in br.shape_component(one)["why"]
    neg = [{"label": "x", "folder": "a", "machine": "m", "savings_ms": [5.0, -1.0]},
           {"label": "x", "folder": "b", "machine": "m", "savings_ms": [6.0, 4.0]}]
    assert "saved nothing" in br.shape_component(neg)["why"]
    assert br.shape_component(one[:1]) is None
    assert br.pooled([br.shape_component(one)]) is None


def test_on_the_committed_profiles_every_run_of_a_shape_is_one_group():
    """packing qwen3-14b 4 L 16k ran four times (the untraced pilot, the traced process run, the 8- and the 21-process
    planned runs): 4 runs, 35 processes. The deliberately slowed replication run (WORKBENCH_INJECT_GEMMS) and the
    dose-response folders are not runs of an optimization's arms and stay out."""
    shapes = br.collect(ROOT)
    q14 = [runs for key, runs in shapes.items() if key[:3] == ("packing", "rebuild", "cached")
           and key[4:7] == ("qwen3-14b", "4", "16384")]
    assert len(q14) == 1 and len(q14[0]) == 4 and sum(len(r["savings_ms"]) for r in q14[0]) == 35
    folders = [r["folder"] for runs in shapes.values() for r in runs]
    assert not any("inject" in f or "dose" in f for f in folders)


def test_the_committed_estimate_is_what_the_module_computes(tmp_path):
    """profiles/between_runs.json is written by `python -m workbench.analysis.between_runs` (readme_results runs it):
    reading the profiles again gives the same pooled omega."""
    with open(os.path.join(ROOT, br.OUT_FILE)) as f:
        doc = json.load(f)
    comps, pool = br.estimate(ROOT)
    assert pool["omega"] == pytest.approx(doc["pooled"]["omega"])
    assert set(doc["by_opt"]) >= {"packing", "moe", "offload"}


def _row(ratio=1.0, proc_sd_pct=1.0, k=8, pred_se_pct=0.5):
    p, m = 100.0, 100.0 * ratio
    return {"comparison": "packing", "verdict": "inconclusive", "input_source": "untraced", "measured_ms": m,
            "measured_se_ms": m * proc_sd_pct / 100 / math.sqrt(k), "measured_n_units": k, "predicted_ms": p,
            "predicted_se_ms": p * pred_se_pct / 100, "predicted_df": 20, "family_size": 1}


def test_a_between_run_component_lowers_a_sharp_pilots_chance_and_zero_changes_nothing():
    row = _row()
    sharp = plan.assurance(row, 8, draws=400)
    assert sharp["confirmed"] > 0.95
    assert plan.assurance(row, 8, draws=400, omega=0.0) == sharp  # the committed figures stay as they were
    wide = plan.assurance(row, 8, draws=400, omega=0.15)
    assert wide["confirmed"] < 0.8 and wide["refuted"] > 0.0


def test_a_traced_predictions_between_run_component_lowers_its_chance_and_an_untraced_row_ignores_it():
    """`omega_pred`: a traced row's prediction is re-read on the new run's machine, so its level moves too. At 0 the
    stream, and so every committed figure, is as before; at 15% a sharp traced pilot confirms less often; an untraced
    row (its prediction the dose's) is not moved by it (the control)."""
    traced = {**_row(pred_se_pct=0.3), "input_source": "traced", "predicted_df": 7}
    sharp = plan.assurance(traced, 8, draws=400)
    assert sharp["confirmed"] > 0.95
    assert plan.assurance(traced, 8, draws=400, omega_pred=0.0) == sharp
    assert plan.assurance(traced, 8, draws=400, omega_pred=0.15)["confirmed"] < 0.8
    untraced = _row()
    assert plan.assurance(untraced, 8, draws=400, omega_pred=0.15) == plan.assurance(untraced, 8, draws=400)
    text = plan.table([traced], {"packing": 0.0001}, {"packing": 0.15})
    assert "its traced prediction's 15.0%" in text and "its traced prediction's" not in plan.table([untraced], {"packing": 0.0001}, {"packing": 0.15})


def test_read_between_runs_reads_the_file_once_and_refuses_a_bad_one(tmp_path):
    assert plan.read_between_runs(str(tmp_path / "absent.json")) == {"omega": {}, "df": {}, "shapes": {},
                                                                    "omega_pred": {}, "df_pred": {}}
    good = tmp_path / "b.json"
    good.write_text(json.dumps({"by_opt": {"packing": {"omega": 0.1, "df": 12}},
                                "shapes": [{"label": "packing m 4 L 8 (cached vs rebuild)", "omega": 0.2, "df": [3, 9]},
                                           {"label": "moe m 4 L 8 (a vs b)", "why": "one process"}]}))
    assert plan.read_between_runs(str(good)) == {"omega": {"packing": 0.1}, "df": {"packing": 12.0},
                                                 "shapes": {"packing m 4 L 8": (0.2, 3, None, None)},
                                                 "omega_pred": {}, "df_pred": {}}
    bad = tmp_path / "c.json"
    bad.write_text("{not json")
    with pytest.raises(WorkbenchError, match="not a between-runs file"):
        plan.read_between_runs(str(bad))


def test_the_plan_prints_the_chance_with_and_without_it(tmp_path, capsys):
    text = plan.table([_row(ratio=1.0, proc_sd_pct=10.0, k=3)], {"packing": 0.1})
    assert "with a rerun's between-run component (omega 10.0% for packing)" in text
    assert "between-run" not in plan.table([_row(ratio=1.0, proc_sd_pct=10.0, k=3)], {})


def test_the_verdicts_cli_reads_the_committed_file_by_default_and_none_leaves_it_out(tmp_path, capsys):
    """`workbench verdicts ... --plan` on the committed 8-process packing run: its plan's chance is printed
    over the pilot's uncertainty (54% confirmed, the figure the plan of 2026-11-27 (5) committed) and again with
    packing's between-run component from profiles/between_runs.json; `--between-runs none` prints only the first; a
    malformed file is refused in one line, before any folder is judged or written."""
    import shutil

    from workbench.savings import verdicts_cli
    run = shutil.copytree(os.path.join(ROOT, "2026-11-27_h100_verdicts_planned", "packing_q14l4"), tmp_path / "p")
    dose = os.path.join(ROOT, "2026-11-26_h100_dose", "packing")
    assert verdicts_cli.main([str(run), "--dose", dose, "--plan"]) == 0
    out = capsys.readouterr().out
    assert "confirmed 54%, refuted 1%, neither 45%" in out and "with a rerun's between-run component" in out
    assert verdicts_cli.main([str(run), "--dose", dose, "--plan", "--between-runs", "none"]) == 0
    out = capsys.readouterr().out
    assert "confirmed 54%" in out and "between-run" not in out
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2")
    assert verdicts_cli.main([str(run), "--dose", dose, "--between-runs", str(tmp_path / "absent.json")]) == 2
    assert "no such file" in capsys.readouterr().err
    before = os.stat(run / "verdicts.json").st_mtime_ns
    assert verdicts_cli.main([str(run), "--dose", dose, "--plan", "--between-runs", str(bad)]) == 2
    captured = capsys.readouterr()
    assert "not a between-runs file" in captured.err and captured.out == ""  # refused before anything ran
    assert os.stat(run / "verdicts.json").st_mtime_ns == before


def _pack21_row():
    from workbench.savings import verdicts
    folder = os.path.join(ROOT, "2026-11-27_h100_verdicts_pack21", "packing_q14l4")
    with open(os.path.join(folder, "verdicts.json")) as f:
        return verdicts.rows(json.load(f), folder)[0]


def test_across_runs_with_no_omega_is_the_verdict_itself_and_a_large_one_undecides_it():
    """workbench/savings/across_runs.py on the committed packing qwen3-14b 4 L verdict (confirmed, 0.93 [0.86, 1.02]):
    omega 0 gives back the verdict's own interval and reading (the control); omega 22.7% (packing's pooled) widens it
    past the band: inconclusive for a rerun on another machine. A row measured over one run's reps has no such
    reading."""
    from workbench.savings import across_runs
    row = _pack21_row()
    assert row["verdict"] == "confirmed"
    same = across_runs.reading(row, 0.0, None)
    assert same["verdict"] == "confirmed" and same["ratio_ci90"] == pytest.approx(row["ratio_ci90"])
    wide = across_runs.reading(row, 0.227, 12)
    assert wide["verdict"] == "inconclusive" and wide["ratio_ci90"][0] < 0.8 < 1.25 < wide["ratio_ci90"][1]
    assert across_runs.reading({**row, "measured_population": "within this run"}, 0.2, 12) is None
    text = "\n".join(across_runs.lines([row], {"omega": {"packing": 0.227}, "df": {"packing": 12},
                                               "shapes": {"packing qwen3-14b 4 L 16384": (0.095, 3, None, None)}}))
    assert "confirmed on its run" in text and "this shape's own omega (9.5%, 3 df" in text
    assert across_runs.lines([row], {}) == []


def test_folder_savings_agrees_with_the_process_level_verdict():
    """`folder_savings` (any --processes folder, e.g. a job's output before it is committed) against a second source:
    the committed packing verdict's measured saving is the mean of the same 21 process means (7.41 ms)."""
    got = br.folder_savings(os.path.join(ROOT, "2026-11-27_h100_verdicts_pack21", "packing_q14l4"))["packing"]
    assert len(got) == 21 and sum(got) / 21 == pytest.approx(_pack21_row()["measured_ms"], rel=1e-9)


def test_the_cli_refuses_a_missing_or_empty_folder_in_one_line_and_no_write_leaves_the_file(tmp_path, capsys):
    from workbench.cli import run_main
    assert run_main(br.main, [str(tmp_path / "absent")]) == 2
    assert capsys.readouterr().err.startswith("error: ")
    assert run_main(br.main, [str(tmp_path)]) == 2  # a folder with no --processes run
    assert "no shape has two --processes K runs" in capsys.readouterr().err
    path = os.path.join(ROOT, br.OUT_FILE)
    before = os.stat(path).st_mtime_ns
    assert run_main(br.main, [ROOT, "--no-write"]) == 0
    out = capsys.readouterr().out
    assert "every shape, pooled: omega" in out and "written:" not in out
    assert os.stat(path).st_mtime_ns == before


def test_a_traced_rows_prediction_gets_its_own_between_run_component_and_an_untraced_row_does_not():
    """The offload qwen3-14b verdict (traced, confirmed 0.88 [0.82, 0.94]): with the measured omega at 0 and the traced
    prediction's at 4.1% (offload's pooled, profiles/between_runs.json) the interval widens past the band's edge;
    the packing row (untraced: a dose-fed prediction carries its machines in its se already) ignores a prediction
    omega (the control)."""
    from workbench.savings import across_runs, verdicts
    folder = os.path.join(ROOT, "2026-11-27_h100_verdicts_planned", "offload_q14")
    with open(os.path.join(folder, "verdicts.json")) as f:
        off = verdicts.rows(json.load(f), folder)[0]
    assert off["input_source"] == "traced" and off["verdict"] == "confirmed"
    base = across_runs.reading(off, 0.0, None)
    wide = across_runs.reading(off, 0.0, None, 0.041, 1.0)
    assert base["ratio_ci90"] == pytest.approx(off["ratio_ci90"])
    assert wide["ratio_ci90"][0] < base["ratio_ci90"][0] and wide["ratio_ci90"][1] > base["ratio_ci90"][1]
    pack = _pack21_row()
    assert across_runs.reading(pack, 0.0, None, 0.5, 1.0)["ratio_ci90"] == pytest.approx(pack["ratio_ci90"])
    with open(os.path.join(ROOT, br.OUT_FILE)) as f:
        doc = json.load(f)
    assert doc["by_opt"]["offload"]["prediction"]["omega"] == pytest.approx(0.041, abs=0.002)


def test_folder_savings_reads_a_plain_run_as_one_process():
    """A `--processes 1` run writes its folder in place (no processes.json): one process, the same saving as the
    campaign reads for that process folder (the second source)."""
    p00 = os.path.join(ROOT, "2026-11-27_h100_verdicts_pack21", "packing_q14l4", "p00")
    campaign = br.folder_savings(os.path.join(ROOT, "2026-11-27_h100_verdicts_pack21", "packing_q14l4"))["packing"]
    assert br.folder_savings(p00) == {"packing": [campaign[0]]}


def test_a_merged_folder_is_not_counted_beside_its_campaigns():
    """studies/moe_two_term/moe_same_host.sh commits each GPU's campaigns and their processes_merge union side by side
    (profiles/2026-11-27_h200x2_moe_same_host): the campaigns are the runs, 4 of 2 processes per shape, not 5 runs
    of 16 processes (the union's 8 again)."""
    shapes = br.collect(ROOT)
    h200 = [runs for key, runs in shapes.items() if key[0] == "moe" and key[3] == "NVIDIA H200"]
    assert len(h200) == 2
    for runs in h200:
        assert len(runs) == 4 and sum(len(r["savings_ms"]) for r in runs) == 8
        assert not any(r["folder"].endswith(("moe_l8_4k", "moe_q30_l4")) for r in runs)


def test_a_process_copied_by_a_merge_is_left_out_once_and_said():
    """The loader counts a process once, where it ran: the same run_id below profiles/ twice (a merge copied it in)
    leaves the merged copy out, with its reason, and keeps the campaign's own folder."""
    from workbench.analysis import loader

    recs = {r["folder"]: r for r in loader._scan(ROOT)}
    copy = recs["profiles/2026-11-27_h200x2_moe_same_host/moe_q30_l4/p04"]
    assert "a copy of profiles/2026-11-27_h200x2_moe_same_host/g1/moe_q30_l4_1/p00" in copy["incomplete_reason"]
    assert recs["profiles/2026-11-27_h200x2_moe_same_host/g1/moe_q30_l4_1/p00"]["incomplete_reason"] is None
    ids = [r["run_id"] for r in recs.values() if r["incomplete_reason"] is None and r["run_id"]]
    assert len(ids) == len(set(ids))
