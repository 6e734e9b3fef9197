"""The dose slope with the machine as its unit (workbench/savings/dose_fit.py `machine_component`): the packing
dose's 21 processes ran on five H100s whose slopes differ, so the untraced prediction's se is taken over machines
(untraced.MODEL_REVISION 2026-11-27 (6)); an analysis written before it keeps the process se."""
from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

from workbench.measure import replication
from workbench.savings import dose_fit as dose, untraced

ROOT = os.path.join(os.path.dirname(__file__), "..", "profiles")
FOLDERS = ("2026-11-26_h100_dose/packing", "2026-11-27_h100_dose_pack_more/dose_pack13",
           "2026-11-27_h100_dose_pack_more/dose_pack7")


def _points(rng, slopes_by_machine, noise_ms=2.0):
    pts, machines = [], []
    for m, slopes in slopes_by_machine.items():
        for s in slopes:
            pts.append([(u, 900.0 - s * u + rng.normal(0, noise_ms)) for u in (0, 4, 8, 11, 15) for _ in range(2)])
            machines.append(m)
    return pts, machines


def test_machines_that_differ_widen_the_slopes_se_and_alike_ones_leave_it():
    rng = np.random.default_rng(0)
    differ = {"a": [0.95] * 6, "b": [1.30] * 6, "c": [1.12] * 6}
    pts, ms = _points(rng, differ, noise_ms=0.5)
    mc = dose.machine_component(pts, ms)
    sl = replication.dose_slope(pts)
    assert mc["J"] == 3 and mc["p"] < 0.001 and mc["slope_se"] > 2 * sl["slope_se"] and mc["df"] < 5
    alike, ms2 = _points(rng, {"a": [1.1] * 6, "b": [1.1] * 6, "c": [1.1] * 6}, noise_ms=0.5)
    mc2 = dose.machine_component(alike, ms2)
    assert mc2["p"] > 0.01 and (mc2["slope_se"] is None or mc2["omega_ms"] < 0.05)
    assert dose.machine_component(pts[:6], ms[:6]) is None  # one machine: nothing to say


def test_the_committed_packing_dose_differs_by_machine():
    """The three committed folders (8 + 6 + 7 untimed processes; machines C and D unnamed in the first folder's
    records count as one `unknown`, D named by its merge): five groups, F's p about 0.01, the se over machines
    about 1.8x the se over processes."""
    pts, ms = [], []
    for f in FOLDERS:
        d = os.path.join(ROOT, f)
        with open(os.path.join(d, dose.RUN_FILE)) as fh:
            run = json.load(fh)
        for p in run["processes"]:
            if p.get("rc") == 0 and p["folder"].startswith("none/"):
                pts.append(dose.process_points(os.path.join(d, p["folder"])))
                ms.append(dose.machine_of(d, p))
    mc = dose.machine_component(pts, ms)
    assert (mc["J"], mc["K"]) == (5, 21) and mc["p"] < 0.05
    assert mc["slope_se"] == pytest.approx(0.080, abs=0.005)


def _dose_file(tmp_path, name, machines):
    none = {"slope_ms": 1.133, "slope_se": 0.0443, "df": 20, "K": 21, "linear": True}
    if machines is not None:
        none["machines"] = machines
    d = tmp_path / name
    d.mkdir()
    (d / untraced.DOSE_FILE).write_text(json.dumps({"opt": "packing", "unit": "builds", "modes": {"none": none}}))
    return str(d)


def test_read_dose_takes_the_machine_se_where_the_analysis_has_one_and_the_process_se_otherwise(tmp_path):
    mc = {"J": 5, "K": 21, "p": 0.013, "slope_se": 0.0801, "df": 3.58, "omega_ms": 0.146}
    got = untraced.read_dose([_dose_file(tmp_path, "m", mc)])["packing"]
    assert (got["slope_se_ms"], got["df"], got["se_units"], got["se_unit_kind"]) == (0.0801, 3.58, 5, "machines")
    old = untraced.read_dose([_dose_file(tmp_path, "p", None)])["packing"]  # an analysis before the revision
    assert (old["slope_se_ms"], old["df"], old["se_units"], old["se_unit_kind"]) == (0.0443, 20, 21, "processes")
    alike = untraced.read_dose([_dose_file(tmp_path, "a", {**mc, "slope_se": None})])["packing"]
    assert alike["slope_se_ms"] == 0.0443  # machines alike (omega 0): the process se stands


def test_the_machine_figure_draws_each_machines_slopes_and_nothing_without_machines():
    """notebook 02's figure: one trace of dots per machine, the process count and the two bands; a dose on one
    machine (no machine block) draws nothing (the control)."""
    from workbench.report.dose_figure import machine_figure
    with open(os.path.join(ROOT, "2026-11-27_h100_same_machine", "pooled6", "dose_analysis.json")) as f:
        a = json.load(f)
    fig = machine_figure(a)
    per = a["modes"]["none"]["machines"]["per_machine"]
    assert len(fig.data) == len(per) == 6 and sum(len(t.y) for t in fig.data) == 31
    assert len(fig.layout.shapes) == 3  # the mean, its CI over processes, its CI over machines
    with open(os.path.join(ROOT, "2026-11-27_h100_same_machine", "dose_same", "dose_analysis.json")) as f:
        assert machine_figure(json.load(f)) is None


def test_a_new_machines_dose_slope_lies_in_the_machine_aware_interval_and_not_the_processes_only_one():
    """The held-out check of 2026-11-27 (7): the packing dose's five machines (21 processes) predict the mean slope of
    10 processes on a sixth; machine U (new, its 10 processes run after the five-machine analysis was committed)
    measured 0.891 ms. The machine-aware interval holds it; the same processes pooled as one machine (no machine
    component, the control) give an interval that misses it. And n = 1 is `machine_prediction`'s own one-process
    interval."""
    with open(os.path.join(ROOT, "2026-11-27_h100_dose_pack_more", "pooled_machines", "dose_analysis.json")) as f:
        per = json.load(f)["modes"]["none"]["machines"]["per_machine"]
    with open(os.path.join(ROOT, "2026-11-27_h100_same_machine", "dose_same", "dose_analysis.json")) as f:
        u = json.load(f)["modes"]["none"]["per_process"]
    mean_u = float(np.mean(u))
    aware = dose.new_machine_interval(per, len(u))
    pooled = dose.new_machine_interval({"all": [x for v in per.values() for x in v]}, len(u))
    assert len(per) == 5 and len(u) == 10 and mean_u == pytest.approx(0.891, abs=5e-4)
    assert aware["pi95"][0] < mean_u < aware["pi95"][1]
    assert not pooled["pi95"][0] < mean_u < pooled["pi95"][1]
    one = replication.machine_prediction([[[x] for x in v] for v in per.values()])
    assert dose.new_machine_interval(per, 1)["pi95"][1] == pytest.approx(math.log(one["pi95"][1]))
