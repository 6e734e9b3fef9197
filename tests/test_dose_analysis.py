"""The dose-response analysis on synthetic data with a known slope, c and theta: the slope over processes, Fieller's
theta, the profiler x dose interaction, the linearity check and the decision rule (`workbench.savings.dose_fit`).

    # u = units of the fix, K = processes, R = reps, c = the traced input per unit (ms)
"""

import os

import numpy as np
import pytest

from workbench.measure import replication, stats
from workbench.savings import dose_fit as dose

LEVELS = (0, 4, 8, 11, 15)


def _points(slope, *, K=4, R=6, base=1000.0, quad=0.0, tau=0.5, sigma=0.4, seed=0):
    """Per process: (u, step_ms) per level and rep, step = base - slope u - quad u² + process + rep + noise."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(K):
        p = rng.normal(0, tau)
        pts = []
        for _ in range(R):
            r = rng.normal(0, sigma)
            pts += [(u, base + p + r - slope * u - quad * u * u + rng.normal(0, sigma)) for u in LEVELS]
        out.append(pts)
    return out


C = {"value_ms": 1.2, "se_ms": 0.02, "df": 9, "tracer": "torch"}


def test_the_slope_over_processes_covers_the_true_saving_per_unit():
    hits = 0
    for seed in range(200):
        r = replication.dose_slope(_points(0.9, K=3, seed=seed))
        assert r["K"] == 3 and r["df"] == 2
        hits += r["slope_ci95"][0] <= 0.9 <= r["slope_ci95"][1]
    assert 0.90 <= hits / 200 <= 0.99  # 95% nominal, over processes (K - 1 df)


def test_a_curved_response_is_flagged_and_a_straight_one_is_not():
    straight = replication.dose_slope(_points(0.9, K=4, seed=1))
    bent = replication.dose_slope(_points(0.6, K=4, quad=0.03, seed=1))  # saves more per unit at high doses
    assert straight["linear"] is True
    assert bent["linear"] is False and bent["quad"] < 0 and bent["bend"] > 0.3


def test_fieller_matches_the_delta_method_when_the_denominator_is_sharp_and_opens_when_it_is_not():
    f = stats.fieller_ratio(0.9, 0.01, 5, 1.2, 1e-6, 5)
    half = stats.t_quantile(0.975, 5) * 0.01 / 1.2
    assert f["bounded"] and f["ratio"] == pytest.approx(0.75)
    assert f["ci95"] == pytest.approx([0.75 - half, 0.75 + half], rel=1e-4)
    wide = stats.fieller_ratio(0.9, 0.01, 5, 1.2, 0.6, 5)  # c's own CI reaches 0: no bounded ratio
    assert not wide["bounded"] and wide["ci95"] is None
    skew = stats.fieller_ratio(0.9, 0.01, 5, 1.2, 0.2, 5)  # Fieller's interval is asymmetric about the ratio
    assert skew["ci95"][1] - 0.75 > 0.75 - skew["ci95"][0]


def test_theta_recovers_a_known_instrument_factor():
    r = dose.estimate({"none": _points(0.9, K=4, seed=2)}, C)
    th = r["modes"]["none"]["theta"]
    assert th["ci95"][0] < 0.75 < th["ci95"][1]
    assert r["decision"]["decision"] == dose.INCONCLUSIVE  # below the band, but no profiler mode to tell why


def test_the_profiler_inflating_the_slope_reads_instrument_inflation():
    r = dose.estimate({"none": _points(0.6, seed=3), "torch": _points(1.1, seed=4)}, C)
    assert r["modes"]["torch"]["interaction"]["ci95"][0] > 0
    assert r["decision"]["decision"] == dose.INFLATION


def test_slopes_alike_with_and_without_the_profiler_and_below_c_read_rival_explanation():
    r = dose.estimate({"none": _points(0.6, sigma=0.1, seed=5), "torch": _points(0.6, sigma=0.1, seed=6)}, C)
    assert r["decision"]["decision"] == dose.RIVAL
    # the negative control: the same slopes judged against the nsys mode the traced c did not come from
    r2 = dose.estimate({"none": _points(0.6, seed=5), "nsys": _points(1.1, seed=6)}, C)
    assert r2["decision"]["decision"] == dose.INCONCLUSIVE


def test_a_slope_that_matches_c_reads_fine_whatever_the_profiler_does():
    r = dose.estimate({"none": _points(1.2, seed=7), "torch": _points(1.6, seed=8)}, C)
    assert r["decision"]["decision"] == dose.FINE


@pytest.mark.parametrize("theta, inter, want", [
    ([0.9, 1.1], None, dose.FINE), ([0.5, 0.7], [0.1, 0.3], dose.INFLATION), ([0.5, 0.7], [-0.05, 0.05], dose.RIVAL),
    ([0.5, 0.7], [-0.5, 0.05], dose.INCONCLUSIVE), ([0.5, 0.7], [-0.3, -0.1], dose.INCONCLUSIVE),
    ([1.3, 1.6], [0.1, 0.3], dose.INCONCLUSIVE), (None, [0.1, 0.3], dose.INCONCLUSIVE)])
def test_the_decision_rule_as_fixed(theta, inter, want):
    assert dose.decide(theta, inter, 1.0)[0] == want
    assert dose.decide(theta, inter, 1.0)[1]  # and says why


def test_the_figure_draws_each_mode_and_the_traced_prediction():
    pytest.importorskip("plotly")
    from workbench.report.dose_figure import dose_figure, saving_points

    pts = {"none": _points(0.6, seed=5), "torch": _points(1.1, seed=6)}
    a = {"opt": "packing", "unit": "builds avoided per step", "units": list(LEVELS), "c": C,
         **dose.estimate(pts, C)}
    for mode, m in a["modes"].items():
        m["points"] = pts[mode]
    fig = dose_figure(a)
    names = [t.name for t in fig.data if t.name]
    assert any("untimed" in n for n in names) and any("torch.profiler" in n for n in names)
    assert any(n.startswith("traced prediction c = 1.2") for n in names)
    sv = saving_points(pts["none"][:1])
    assert sv[0] == (0, 0.0) and sv[-1][0] == 15 and sv[-1][1] == pytest.approx(0.6 * 15, abs=2)


def test_fine_needs_theta_inside_the_band_not_a_wide_ci_that_reaches_it():
    """The revised rule (after profiles/2026-11-26_h100_dose): a CI that merely overlaps the band is no "fine"."""
    from workbench.savings import dose_fit as dose

    assert dose.decide((0.9, 1.1), (-0.01, 0.01), 1.0)[0] == dose.FINE
    assert dose.decide((0.03, 4.3), (-0.7, 1.4), 1.1)[0] == dose.INCONCLUSIVE  # the first H100 run's packing theta
    assert dose.decide((0.7, 1.1), None, 1.0)[0] == dose.INCONCLUSIVE


def test_c_over_the_traced_processes_shows_their_spread_beside_the_rule():
    """Beside the rule's c (one process, its interval over its own steps): the traced processes' c, their mean and
    t-interval over processes, and theta from it. Three processes that disagree (MoE's 61, 75, 40 ms per layer) give
    an interval far wider than one process's sharp one; one process gives nothing to pool."""
    slope = dose.replication.dose_slope(_points(0.6))
    one = {"value_ms": 60.95, "se_ms": 1.0, "df": 9}
    assert dose.c_over_processes({"none/p00": one}, slope) is None
    per = {"none/p00": one, "none/p01": {"value_ms": 75.25}, "torch/p00": {"value_ms": 39.70}}
    cp = dose.c_over_processes(per, slope)
    t = stats.t_interval([60.95, 75.25, 39.70])
    assert cp["K"] == 3 and cp["value_ms"] == pytest.approx(t["mean"]) and cp["ci95"] == pytest.approx(t["ci"])
    assert cp["ci95"][1] - cp["ci95"][0] > 40 * 2 * 1.0  # the processes' spread, not one process's steps
    want = stats.fieller_ratio(slope["slope_ms"], slope["slope_se"], slope["df"], t["mean"], t["se"], t["df"])
    assert cp["theta"]["ratio"] == pytest.approx(want["ratio"]) and cp["theta"]["ci95"] == pytest.approx(want["ci95"])
    assert "not the rule" in cp["reading"]


def test_a_folder_keeps_its_written_analysis_and_refuses_one_without_its_traces(tmp_path):
    """`load_analysis` reads DIR/dose_analysis.json (a committed dose folder keeps it, not the per-process traces)
    and analyses the folder only without it; `dose_fit DIR` refuses to rewrite it where a traced process's traces are
    gone (its c would be lost), and runs where they are there (the control)."""
    import json
    import shutil
    from workbench.cli import run_main
    from workbench.savings import dose_fit

    d = tmp_path / "dose"
    shutil.copytree(os.path.join(os.path.dirname(__file__), "data", "dose_tiny"), d)
    fresh = json.loads(json.dumps(dose_fit.analyse(str(d)), default=dose_fit._plain))
    assert dose_fit.load_analysis(str(d))["opt"] == fresh["opt"]  # no file: analysed
    (d / dose_fit.OUT_FILE).write_text(json.dumps({**fresh, "opt": "written"}))
    assert dose_fit.load_analysis(str(d))["opt"] == "written"  # the file wins
    run = json.loads((d / dose_fit.RUN_FILE).read_text())
    (d / dose_fit.RUN_FILE).write_text(json.dumps({**run, "traced": "none/p00"}))
    assert run_main(dose_fit.main, [str(d)]) == 2  # none/p00 has no traces/ folder here
    assert json.loads((d / dose_fit.OUT_FILE).read_text())["opt"] == "written"  # left as it was
    (d / "none" / "p00" / "traces").mkdir()
    assert dose_fit.missing_traces(str(d)) == []
