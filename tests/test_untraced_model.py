"""The untraced form of the sync-driven models (workbench.savings.untraced, `--dose`): the untimed dose slope per
unit times the judged shape's exact count, no trace read."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from test_verdicts_instrument import LAYERS, S_MS, _run
from workbench.errors import WorkbenchError
from workbench.measure import stats
from workbench.opts import moe_savings, packing_savings
from workbench.savings import calibration, process_verdicts, untraced, verdicts, verdicts_cli


def _dose(path, *, opt="packing", slope_ms=S_MS, se_ms=S_MS / 100, K=8, syncs_per_unit=None):
    os.makedirs(path, exist_ok=True)
    none = {"slope_ms": slope_ms, "slope_se": se_ms, "df": K - 1, "K": K, "linear": True}
    if syncs_per_unit is not None:
        none["syncs_removed_per_unit"] = syncs_per_unit
    with open(os.path.join(path, untraced.DOSE_FILE), "w") as f:
        json.dump({"opt": opt, "unit": "builds avoided", "commit": "abc1234", "modes": {"none": none}}, f)
    return str(path)


def test_the_untraced_packing_model_is_builds_removed_times_the_untimed_slope(tmp_path):
    """L = 2 with checkpointing, cached: 2*2 - 1 = 3 builds removed; the prediction is 3 x slope, its se 3 x the
    slope's, df K - 1; no θ, no trace read."""
    entry = untraced.read_dose([_dose(tmp_path / "dose", slope_ms=0.004, se_ms=0.0002, K=6)])["packing"]
    c = {"name": "packing", "layers": 2, "baseline": {"arm": "rebuild"}, "optimized": {"arm": "cached"}}
    m = untraced.model(packing_savings, entry, c, {"args": {"checkpointing": True}}, arm="cached")
    assert m["predicted_ms"] == pytest.approx(0.012) and m["predicted_se_ms"] == pytest.approx(0.0006)
    assert m["predicted_df"] == 5 and m["inputs"]["n"]["value"] == 3
    t = stats.t_quantile(0.975, 5)
    assert m["predicted_ci95"] == pytest.approx([0.012 - t * 0.0006, 0.012 + t * 0.0006])
    # without checkpointing one pass: 2 - 1 = 1 build removed
    m1 = untraced.model(packing_savings, entry, c, {"args": {"checkpointing": False}}, arm="cached")
    assert m1["inputs"]["n"]["value"] == 1


def test_the_untraced_moe_model_counts_syncs_and_carries_the_saving_per_sync(tmp_path):
    """MoE's dose unit is a layer switched (448 syncs removed per layer at the dose shape): u = slope / 448 per
    sync, times the judged comparison's counted syncs removed."""
    entry = untraced.read_dose([_dose(tmp_path / "d", opt="moe", slope_ms=34.54, se_ms=3.1, K=10,
                                      syncs_per_unit=448.0)])["moe"]
    c = {"name": "moe", "baseline": {"arm": "eager", "syncs_per_step": 3602.0},
         "optimized": {"arm": "sort_bincount", "syncs_per_step": 18.0}}
    m = untraced.model(moe_savings, entry, c, {}, arm="sort_bincount")
    assert m["predicted_ms"] == pytest.approx(3584 * 34.54 / 448)
    assert m["predicted_se_ms"] / m["predicted_ms"] == pytest.approx(3.1 / 34.54)
    with pytest.raises(WorkbenchError, match="syncs_per_step"):
        untraced.model(moe_savings, entry, {"name": "moe", "baseline": {"arm": "eager"},
                                            "optimized": {"arm": "sort_bincount"}}, {}, arm="sort_bincount")


def test_read_dose_refuses_a_folder_without_an_untimed_slope_in_one_line(tmp_path):
    with pytest.raises(WorkbenchError, match="cannot read dose_analysis.json"):
        untraced.read_dose([str(tmp_path)])
    _dose(tmp_path / "a", se_ms=None)
    with pytest.raises(WorkbenchError, match="no untimed slope"):
        untraced.read_dose([str(tmp_path / "a")])
    with pytest.raises(WorkbenchError, match="no untraced form"):
        untraced.read_dose([_dose(tmp_path / "off", opt="offload")])
    with pytest.raises(WorkbenchError, match="a second dose folder"):
        untraced.read_dose([_dose(tmp_path / "b"), _dose(tmp_path / "c")])


def test_a_trace_40_percent_off_does_not_block_the_untraced_verdict_and_the_right_slope_confirms(tmp_path):
    """The run whose trace is 40% longer than its timed step reads "no verdict: instrument" as traced; untraced it
    is judged (it reads no trace): the true saving per build confirms, a slope twice too large is refuted (the
    negative control)."""
    rng = np.random.default_rng(7)
    d = _run(str(tmp_path / "run"), rng, saving_ms=3 * S_MS, traced_off=1.4)
    [t] = verdicts.annotate(d, verdicts.Inputs(None, "none"))
    assert t["verdict"] == calibration.NO_VERDICT_INSTRUMENT
    good = _dose(tmp_path / "good", slope_ms=S_MS, se_ms=S_MS / 200)
    [r] = verdicts.annotate(d, verdicts.Inputs(None, "none", [good]))
    assert r["input_source"] == untraced.INPUT_SOURCE and r["theta"] is None
    assert r["predicted_ms"] == pytest.approx(3 * S_MS) and r["verdict"] == "confirmed"
    assert r["model_revision"] == untraced.MODEL_REVISION and r["dose_dir"] == good
    bad = _dose(tmp_path / "bad", slope_ms=2 * S_MS, se_ms=S_MS / 200)
    [b] = verdicts.annotate(d, verdicts.Inputs(None, "none", [bad]))
    assert b["verdict"] == "refuted" and b["ratio"] == pytest.approx(0.5, rel=0.02)


def test_a_processes_folder_untraced_keeps_the_slope_uncertainty(tmp_path, capsys):
    """At the process level the prediction's se is the dose slope's (relative), not the processes' spread (which is
    0 for an exact count); the CLI's --dose prints the input source and writes the dose folder in verdicts.json."""
    rng = np.random.default_rng(8)
    top = tmp_path / "procs"
    procs = []
    for k in range(3):
        _run(str(top / f"p{k:02d}"), rng, saving_ms=3 * S_MS)
        procs.append({"folder": f"p{k:02d}", "seed": k, "rc": 0})
    (top / "processes.json").write_text(json.dumps({"processes": procs}))
    dose = _dose(tmp_path / "dose", slope_ms=S_MS, se_ms=S_MS / 20, K=5)
    assert verdicts_cli.main([str(top), "--dose", dose, "--tau-from", "none", "--write"]) == 0
    assert "untraced" in capsys.readouterr().out
    doc = json.loads((top / process_verdicts.OUT_FILE).read_text())
    assert doc["dose"] == [dose]
    sm = doc["comparisons"][0]["savings_model"]
    assert sm["input_source"] == "untraced" and sm["predicted_df"] == 4
    assert sm["predicted_se_ms"] == pytest.approx(3 * S_MS / 20) and sm["measured_df"] == 2
    assert verdicts_cli.main([str(top), "--dose", str(tmp_path / "nowhere")]) == 2
    assert "cannot read dose_analysis.json" in capsys.readouterr().err


def _machine_dose(path, machines, *, se_proc=S_MS / 50, se_machine=S_MS / 10, K=8):
    """A dose analysis whose processes ran on `machines` that differ: its machine-level se beside the process se."""
    os.makedirs(path, exist_ok=True)
    per = {m: [S_MS] * (K // len(machines)) for m in machines}
    none = {"slope_ms": S_MS, "slope_se": se_proc, "df": K - 1, "K": K, "linear": True,
            "machines": {"J": len(machines), "K": K, "p": 0.01, "slope_se": se_machine, "df": len(machines) - 1,
                         "per_machine": per}}
    with open(os.path.join(path, untraced.DOSE_FILE), "w") as f:
        json.dump({"opt": "packing", "unit": "builds avoided", "commit": "abc1234", "modes": {"none": none}}, f)
    return str(path)


def _procs_on(top, gpus, rng):
    procs = []
    for k, g in enumerate(gpus):
        d = _run(str(top / f"p{k:02d}"), rng, saving_ms=3 * S_MS)
        meta = json.load(open(os.path.join(d, "meta.json")))
        meta["device"]["uuid"] = f"{g}-0000-0000-0000-000000000000"
        json.dump(meta, open(os.path.join(d, "meta.json"), "w"))
        procs.append({"folder": f"p{k:02d}", "seed": k, "rc": 0})
    (top / "processes.json").write_text(json.dumps({"processes": procs}))
    return str(top)


@pytest.mark.parametrize("gpus, same", [(["GPU-aaaaaaaa", "GPU-bbbbbbbb"] * 2, True),   # the same-host design
                                        (["GPU-aaaaaaaa"] * 4, False),                    # one of the dose's machines
                                        (["GPU-aaaaaaaa", "GPU-cccccccc"] * 2, False)])   # another machine among them
def test_a_verdict_on_exactly_the_doses_machines_takes_the_process_se(tmp_path, gpus, same):
    """Revision (7): where a --processes verdict ran on exactly the machines its dose's slope differs over, u's se
    is the process one (those GPUs are the claim's own); on a subset, or with another machine, the machine se stands
    (the controls). 3 builds removed a step, so the prediction's se is 3 x the slope's."""
    dose = _machine_dose(tmp_path / "dose", ["GPU-aaaaaaaa", "GPU-bbbbbbbb"])
    top = _procs_on(tmp_path / "procs", gpus, np.random.default_rng(3))
    assert verdicts_cli.main([top, "--dose", dose, "--tau-from", "none", "--write"]) == 0
    sm = json.load(open(os.path.join(top, process_verdicts.OUT_FILE)))["comparisons"][0]["savings_model"]
    if same:
        assert sm["predicted_se_ms"] == pytest.approx(3 * S_MS / 50) and sm["predicted_df"] == 7
        assert sm["dose_se_unit_kind"].startswith("processes") and "revision (7)" in sm["inputs"]["u_ms"]["source"]
        assert sm["inputs"]["u_ms"]["se"] == pytest.approx(S_MS / 50)
    else:
        assert sm["predicted_se_ms"] == pytest.approx(3 * S_MS / 10) and sm["predicted_df"] == 1
        assert sm["dose_se_unit_kind"] == "machines"
