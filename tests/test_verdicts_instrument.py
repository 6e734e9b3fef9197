"""Verdicts that do not blame the model for the instrument and carry the process component of the
measured saving: θ as a shift with its own interval, the traced-vs-timed precondition, models and
published forms in one Holm family, the measured saving at the unit of the claim, the input source and the model
revision on every row. Each check has its negative control."""
import json
import os

import numpy as np
import pandas as pd
import pytest

from synthetic_traces import packing_trace
from workbench.errors import WorkbenchError
from workbench.measure import replication, stats
from workbench.opts import packing_savings
from workbench.savings import calibration, common as savings, process_verdicts, verdicts, verdicts_cli
from workbench.traces.events import save_events


# --- θ: an exact model fed an inflated input --------------------------------------------------------------------

def _simulate(rng, *, inflation=1.92, layers=8, passes=2, s_true_ms=1.2, steps=4, reps=8, rep_sd_ms=0.4,
              step_sd_ms=0.05):
    """One run of an exact packing model: the true saving is (L·p - 1)·s; the tracer inflates s by `inflation` (the
    traced steps read s·inflation with noise); the timed reps measure the true saving with rep noise. Returns
    (model dict from the traced steps, measured dict as `stats.paired_difference` gives it)."""
    n = layers * passes - 1
    X = np.stack([rng.normal(s_true_ms * inflation, step_sd_ms, steps), np.zeros(steps)], axis=1)
    model = savings.predicted(lambda v: packing_savings.packing_saving(layers, max(v[0] + v[1], 0.0),
                                                                       arm="cached")["predicted_ms"], X)
    base = 500.0 + rng.normal(0, 2.0, reps)
    arm = base - n * s_true_ms + rng.normal(0, rep_sd_ms, reps)
    return model, stats.paired_difference(base, arm, list(range(reps)))


def test_an_exact_model_with_a_92_percent_inflated_input_is_refuted_as_traced_and_confirmed_with_the_right_theta():
    """Simulation: an exact model whose traced input is inflated 92% is refuted every time when its input
    is used as traced, and confirmed when θ (= 1 / 1.92, with its CI) multiplies the prediction. Negative control:
    a θ of 1 (a calibration that finds no inflation) leaves it refuted."""
    rng = np.random.default_rng(0)
    right = {"theta": 1 / 1.92, "ci95": [0.49, 0.55], "source": "dose-response (simulated)", "commit": "test"}
    none_found = {"theta": 1.0, "ci95": [0.95, 1.05], "source": "a calibration that finds none", "commit": "test"}
    got = {"traced": [], "right": [], "none_found": []}
    for _ in range(200):
        model, measured = _simulate(rng)
        got["traced"].append(verdicts.check("packing", model, measured, None)["verdict"])
        got["right"].append(verdicts.check("packing", model, measured, None, theta=right)["verdict"])
        got["none_found"].append(verdicts.check("packing", model, measured, None, theta=none_found)["verdict"])
    assert got["traced"].count("refuted") == 200
    assert got["none_found"].count("refuted") == 200
    assert got["right"].count("confirmed") >= 190 and "refuted" not in got["right"]


def test_theta_is_a_shift_with_its_own_interval_not_quadrature():
    """The calibrated ratio's CI is the 95% CI of measured / traced prediction divided end point by end point by θ's
    CI: with exact measured and predicted it is exactly [r / θ_hi, r / θ_lo]; p-values are Berger-Boos (the worse
    end of θ + 0.025), so a θ CI that crosses the band's edge cannot confirm."""
    th = {"theta": 0.5, "ci95": [0.45, 0.56]}
    v = verdicts.judge(20.0, 0.0, 10.0, 0.0, 9, theta=th)
    assert v["ratio"] == pytest.approx(1.0)
    assert v["ratio_ci90"] == pytest.approx([0.5 / 0.56, 0.5 / 0.45])
    assert v["verdict"] == "confirmed" and v["p_confirm"] == pytest.approx(stats.THETA_TAIL)
    wide = verdicts.judge(20.0, 0.0, 10.0, 0.0, 9, theta={"theta": 0.5, "ci95": [0.38, 0.66]})  # r in [0.76, 1.32]
    assert wide["verdict"] == "inconclusive" and wide["p_confirm"] == pytest.approx(1.0)
    # with noise: the log-scale 95% interval of the uncalibrated ratio over θ's ends, never sqrt(se^2 + se_θ^2)
    n = verdicts.judge(20.0, 0.4, 10.0, 0.3, 9, predicted_df=3, theta=th)
    u = stats.band_ratio_test(10.0, 0.3, 9, 20.0, 0.4, 3, alpha=0.025)[4]  # the 95% CI without θ
    assert n["ratio_ci90"] == pytest.approx([u[0] / 0.56, u[1] / 0.45])


def test_theta_keeps_its_level_at_the_band_edge():
    """A model whose calibrated ratio sits exactly on the band's edge (0.8) with θ itself estimated (its 95% CI
    around a noisy estimate) is read confirmed at most ~5% of the time: the Berger-Boos test keeps its level. The
    same data with θ's CI ignored (the point θ as exact) confirm far more often: the interval is what protects."""
    rng = np.random.default_rng(1)
    hits, naive = 0, 0
    sims = 600
    for _ in range(sims):
        theta_hat = float(np.exp(rng.normal(np.log(0.5), 0.1)))
        th = {"theta": theta_hat, "ci95": [theta_hat * np.exp(-1.96 * 0.1), theta_hat * np.exp(1.96 * 0.1)]}
        m = 0.8 * 0.5 * 20.0 * float(np.exp(rng.normal(0, 0.02)))  # true ratio m / (p θ) = 0.8
        v = verdicts.judge(20.0, 0.0, m, 0.02 * m, 50, theta=th)
        hits += v["verdict"] == "confirmed"
        naive += verdicts.judge(20.0 * theta_hat, 0.0, m, 0.02 * m, 50)["verdict"] == "confirmed"
    assert hits / sims <= 0.06
    assert naive / sims > 0.2


def test_calibration_file_and_input_source(tmp_path):
    p = tmp_path / "cal.json"
    p.write_text(json.dumps({"packing": {"theta": 0.55, "ci95": [0.5, 0.61], "source": "dose-response RUN",
                                         "commit": "abc1234", "shape": {"model": "qwen3-14b", "layers": 8}},
                             "note": "free text is ignored"}))
    cal = calibration.read_calibration(str(p))
    assert set(cal) == {"packing"}
    assert calibration.theta_for(cal, "moe", {}) == (None, "traced")  # no entry: as traced, said so
    assert calibration.theta_for(cal, "packing", {"model": "qwen3-14b", "layers": 8})[1] == "dose-response"
    assert calibration.theta_for(cal, "packing", {"model": "qwen3-8b", "layers": 8})[1] == "calibrated"
    p.write_text(json.dumps({"packing": {"theta": 0.7, "ci95": [0.5, 0.61]}}))  # theta outside its own CI
    with pytest.raises(WorkbenchError, match="ci95"):
        calibration.read_calibration(str(p))
    assert calibration.read_calibration(None) == {}
    # an entry with no usable θ (Fieller's interval unbounded, or none): the model is used as traced, said why
    p.write_text(json.dumps({"moe": {"theta": None, "ci95": None, "decision": "inconclusive"},
                             "packing": {"theta": 0.5, "ci95": [0.2, float("inf")]}}))
    cal = calibration.read_calibration(str(p))
    assert calibration.theta_for(cal, "moe", {}) == (None, "traced") and set(cal[None]) == {"moe", "packing"}


# --- the precondition ------------------------------------------------------------------------------------------

def test_a_traced_step_40_percent_off_its_timed_step_fails_the_precondition():
    assert calibration.instrument_reason({"rebuild": (140.0, 100.0), "cached": (95.0, 90.0)}) is not None
    why = calibration.instrument_reason({"rebuild": (140.0, 100.0)})
    assert "140.0 ms" in why and "100.0 ms" in why and "+40.0%" in why
    assert calibration.instrument_reason({"rebuild": (114.0, 100.0), "cached": (88.0, 100.0)}) is None
    assert calibration.instrument_reason({"rebuild": (None, 100.0)}) is not None  # cannot check: no verdict


# --- one Holm family for the models and their published forms ---------------------------------------------------

def test_the_published_form_joins_its_models_holm_family():
    """Alone, an offload model confirmed at p ~ 0.04 reads confirmed; with its published form (an undecided claim
    on the same saving) in the same family, Holm doubles its p and it reads inconclusive. Negative control: a
    decisive model stays confirmed beside the same published form."""
    from scipy import optimize
    se = optimize.brentq(lambda s: verdicts.judge(10.0, 0.0, 11.0, s, 9)["p_confirm"] - 0.04, 1e-3, 5.0)
    meas = {"mean": 11.0, "se": se, "df": 9, "ci95": None, "n_pairs": 20, "n_units": 10}
    model = {"predicted_ms": 10.0, "predicted_se_ms": 0.0, "n_steps": 4, "formula": "f"}
    assert verdicts.check("offload", model, meas, None)["verdict"] == "confirmed"
    pub = {"formula": "published", "predicted_ms": 7.0, "predicted_se_ms": 0.0}
    v = verdicts.check("offload", {**model, "published": pub}, meas, None)
    assert v["p_confirm"] == pytest.approx(0.04) and v["p_confirm_holm"] == pytest.approx(0.08)
    assert v["verdict"] == "inconclusive" and "not after Holm" in v["holm_note"]
    assert v["family_size"] == v["published"]["family_size"] == 2
    sure = verdicts.check("offload", {**model, "published": pub}, {**meas, "se": 0.05}, None)
    assert sure["verdict"] == "confirmed"


# --- the measured saving at the unit of the claim --------------------------------------------------------------

def test_process_saving_is_a_t_interval_over_processes():
    groups = [[10.0, 10.2, 9.8, 10.0], [12.0, 12.1, 11.9, 12.0], [11.0, 11.1, 10.9, 11.0]]
    r = replication.process_saving(groups)
    assert r["mean"] == pytest.approx(11.0) and r["df"] == 2 and r["n_units"] == 3
    assert r["population"] == replication.RERUN
    half = stats.t_quantile(0.975, 2) * 1.0 / np.sqrt(3)
    assert r["ci95"] == pytest.approx([11.0 - half, 11.0 + half])
    # the rep-level interval of the same numbers pooled is far narrower: it does not speak for a rerun
    flat = stats.paired_difference([g for gs in groups for g in gs], [0.0] * 12, [i for i in range(12)])
    assert flat["ci95"][1] - flat["ci95"][0] < (r["ci95"][1] - r["ci95"][0]) / 2
    one = replication.process_saving(groups[:1])
    assert one["population"] == replication.WITHIN and one["df"] == 3


def test_a_single_run_gets_the_process_component():
    within = {"mean": 20.0, "se": 0.5, "df": 7, "ci95": [18.8, 21.2], "n_units": 8}
    w = replication.with_process_component(within, replication.tau_ms(0.01, 300.0), 19, "X")
    assert w["tau_ms"] == pytest.approx(3.0) and w["se"] == pytest.approx(np.hypot(0.5, 3.0))
    assert w["population"] == "single run + tau from X" and w["ci95_within"] == [18.8, 21.2]
    assert w["ci95"][1] - w["ci95"][0] > 5 * (21.2 - 18.8)
    # the committed campaign holds a tau per headline comparison
    tau = calibration.read_tau(calibration.TAU_SOURCE)
    assert {"packing", "moe", "offload"} <= set(tau) and all(t["df"] >= 1 for t in tau.values())


def test_model_revision_is_stated_by_every_savings_model():
    for opt in ("packing", "moe", "offload"):
        r = savings.model_revision(opt)
        assert r["revision"] and r["revision"][:4] == "2026"
        assert r["commit"] is None or r["commit"] == "uncommitted" or len(r["commit"]) >= 7  # None: no git


# --- run folders: a single run and a --processes K folder ------------------------------------------------------

LAYERS, S_MS = 2, (5.5 + 2.0) / 1e3  # packing_trace's s per build: idle 5 + 0.5 launch latency, kernel 2 (us)


def _run(path, rng, *, saving_ms, traced_off=1.0, reps=6):
    """A traced packing run folder (rebuild traced, L = 2, checkpointing): timed steps with the given saving; the
    rebuild arm's timed step is the trace's own step, divided by `traced_off` (1.4: the trace 40% longer)."""
    os.makedirs(path, exist_ok=True)
    ev = packing_trace(LAYERS, passes=2, steps=3)
    d = os.path.join(path, "traces", "packing")
    os.makedirs(d, exist_ok=True)
    save_events(ev, os.path.join(d, "rebuild"))
    w = ev[ev["name"] == "wb/step"]
    base_ms = float(((w["end_ns"] - w["start_ns"]) / 1e6).mean()) / traced_off
    rows = []
    for rep in range(reps):
        for arm, mean in (("rebuild", base_ms), ("cached", base_ms - saving_ms)):
            for s in range(2):
                rows.append(dict(run_id="syn", comparison="packing", arm=arm, rep=rep, batch=0, step=s,
                                 metric="step_ms", value=mean + rng.normal(0, 1e-4), unit="ms"))
    pd.DataFrame(rows).to_csv(os.path.join(path, "results.csv"), index=False)
    summary = {"comparisons": [{"name": "packing", "opt": "packing", "model": "qwen3-0.6b", "layers": LAYERS,
                                "tokens": 1024, "baseline": {"arm": "rebuild", "step_ms_mean": base_ms},
                                "optimized": {"arm": "cached", "step_ms_mean": base_ms - saving_ms}}]}
    meta = {"status": "complete", "device": {"type": "cuda"}, "args": {"checkpointing": True, "warmup": 0,
                                                                        "batches": 1}}
    for name, obj in (("summary.json", summary), ("meta.json", meta)):
        with open(os.path.join(path, name), "w") as f:
            json.dump(obj, f)
    return path


def _tau_file(tmp_path, tau=0.001):
    p = tmp_path / "analysis.json"
    p.write_text(json.dumps({"comparisons": [{"comparison": "packing", "all_processes": {"tau": tau, "K": 10}}]}))
    return str(p)


def test_a_single_run_row_says_its_unit_source_and_revision(tmp_path):
    rng = np.random.default_rng(2)
    d = _run(str(tmp_path / "run"), rng, saving_ms=3 * S_MS)
    inputs = verdicts.Inputs(None, _tau_file(tmp_path))
    [r] = verdicts.annotate(d, inputs)
    assert r["verdict"] == "confirmed" and r["input_source"] == "traced" and r["theta"] is None
    assert r["measured_population"].startswith("single run + tau from ")
    assert r["tau_ms"] == pytest.approx(0.001 * (r["timed_step_ms"]["rebuild"] - 3 * S_MS), rel=1e-6)
    assert r["model_revision"] == packing_savings.MODEL_REVISION
    [n] = verdicts.annotate(d, verdicts.Inputs(None, "none"))
    assert n["measured_population"].startswith(replication.WITHIN) and n["tau_ms"] is None


def test_a_trace_40_percent_off_reads_no_verdict_instrument(tmp_path):
    """The same run with the rebuild arm's timed step 40% shorter than its traced one: no verdict, both numbers
    given, no p-values; the prediction and the measurement are still shown."""
    rng = np.random.default_rng(3)
    d = _run(str(tmp_path / "run"), rng, saving_ms=3 * S_MS, traced_off=1.4)
    [r] = verdicts.annotate(d, verdicts.Inputs(None, "none"))
    assert r["verdict"] == calibration.NO_VERDICT_INSTRUMENT
    assert "+40.0%" in r["reason"] and r["p_confirm"] is None
    assert r["predicted_ms"] == pytest.approx(3 * S_MS) and r["measured_ms"] == pytest.approx(3 * S_MS, rel=0.01)


def test_a_processes_folder_is_judged_with_the_process_as_the_unit(tmp_path, capsys):
    rng = np.random.default_rng(4)
    top = tmp_path / "procs"
    procs = []
    for k, saving in enumerate([1.0, 1.05, 0.95]):  # the processes' savings differ: tau, not sigma, dominates
        _run(str(top / f"p{k:02d}"), rng, saving_ms=saving * 3 * S_MS)
        procs.append({"folder": f"p{k:02d}", "seed": k, "rc": 0})
    (top / "processes.json").write_text(json.dumps({"processes": procs}))
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps({"packing": {"theta": 1.0, "ci95": [0.97, 1.03], "source": "dose-response X",
                                           "commit": "abc"}}))
    assert verdicts_cli.main([str(top), "--calibration", str(cal)]) == 0
    assert not (top / process_verdicts.OUT_FILE).exists()  # without --write nothing is written
    capsys.readouterr()
    assert verdicts_cli.main([str(top), "--calibration", str(cal), "--write"]) == 0
    out = capsys.readouterr().out
    assert "3 processes" in out and "calibrated x1.00" in out
    doc = json.loads((top / process_verdicts.OUT_FILE).read_text())
    sm = doc["comparisons"][0]["savings_model"]
    assert sm["measured_population"] == replication.RERUN and sm["measured_df"] == 2
    assert sm["measured_ms"] == pytest.approx(3 * S_MS, rel=0.01) and sm["predicted_df"] == 2
    assert sm["input_source"] == "calibrated" and sm["theta_source"] == "dose-response X"
    assert sm["verdict"] == "confirmed"
    # each process keeps its own (single-run) verdict in its folder
    p0 = json.loads((top / "p00" / verdicts_cli.WRITE_FILE).read_text())["comparisons"][0]["savings_model"]
    assert p0["measured_population"] != replication.RERUN
    # negative control: one process's trace 40% off its timed step takes the whole comparison's verdict
    _run(str(top / "p01"), rng, saving_ms=3 * S_MS, traced_off=1.4)
    [r] = process_verdicts.annotate(str(top), verdicts.Inputs(None, "none"))
    assert r["verdict"] == calibration.NO_VERDICT_INSTRUMENT and r["reason"].startswith("p01: ")


def test_the_cli_refuses_a_bad_calibration_file_in_one_line(tmp_path, capsys):
    bad = tmp_path / "cal.json"
    bad.write_text("{not json")
    assert verdicts_cli.main([str(tmp_path), "--calibration", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --calibration") and err.count("\n") == 1


def test_tau_source_missing(tmp_path, monkeypatch):
    """An installed copy without profiles/: the default campaign is absent, no tau (each row says so); a named file
    that cannot be read is a one-line error."""
    monkeypatch.setattr(calibration, "_ROOT", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    assert calibration.read_tau(calibration.TAU_SOURCE) == {}
    with pytest.raises(WorkbenchError, match="--tau-from"):
        calibration.read_tau(str(tmp_path / "nope.json"))


def test_a_void_comparison_is_not_judged_and_says_why(tmp_path, capsys):
    """A comparison the folder's VOID.json declares void gets the verdict "void" with its reason, and no model verdict;
    the same folder without the file is judged (the negative control); a malformed file is one error line, exit 2."""
    rng = np.random.default_rng(5)
    run = tmp_path / "run"
    _run(str(run), rng, saving_ms=3 * S_MS)
    assert verdicts_cli.main([str(run), "--tau-from", "none"]) == 0
    assert "void" not in capsys.readouterr().out  # judged: the control
    (run / "VOID.json").write_text(json.dumps({"comparisons": {"packing": "the step measured was not the training "
                                                               "step"}, "found_by": "a test", "commit": "abc"}))
    assert verdicts_cli.main([str(run), "--tau-from", "none", "--write"]) == 0
    out = capsys.readouterr().out
    assert "void" in out
    [c] = json.loads((run / verdicts_cli.WRITE_FILE).read_text())["comparisons"]
    assert c["savings_model"]["verdict"] == "void" and "not the training step" in c["savings_model"]["reason"]
    assert "ratio" not in c["savings_model"] and "predicted_ms" not in c["savings_model"]
    (run / "VOID.json").write_text("{not json")
    assert verdicts_cli.main([str(run), "--tau-from", "none"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "VOID.json" in err[0]
