"""studies/heldout_replication/analyze_protocol.py: issue 37's pre-registered protocol test (packing standalone vs inside `--opt all` on one
machine), on synthetic `--processes` folders with a known difference, its negative control (no difference), and its
refusals."""
import json
import math
import os

import numpy as np
from workbench.paths import REPO_ROOT
import pytest

from tests.synthetic_runs import GPU, write_run
from workbench.cli import run_main

ROOT = REPO_ROOT


def _tool():
    from studies.heldout_replication import analyze_protocol
    return analyze_protocol


def _campaign(path, slowdowns, seed, uuid="GPU-aaaa"):
    rng = np.random.default_rng(seed)
    procs = []
    for i, s in enumerate(slowdowns):
        write_run(str(path / f"p{i:02d}"), rng=rng, reps=3, slowdown=s, device={**GPU, "uuid": uuid})
        procs.append({"folder": f"p{i:02d}", "rc": 0})
    (path / "processes.json").write_text(json.dumps({"command": "x", "processes": procs}))
    return str(path)


def test_a_protocol_difference_is_found_and_its_absence_is_not(tmp_path):
    tool = _tool()
    inside = _campaign(tmp_path / "all", [1 / 1.17, 1 / 1.18, 1 / 1.165, 1 / 1.175], 1)
    standalone = _campaign(tmp_path / "alone", [1 / 1.08, 1 / 1.09, 1 / 1.085, 1 / 1.07], 2)
    same = _campaign(tmp_path / "same", [1 / 1.168, 1 / 1.182, 1 / 1.17, 1 / 1.174], 3)
    out = tmp_path / "r.json"
    assert run_main(tool.main, ["--standalone", standalone, "--inside", inside, "--out", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["verdict"] == "protocol effect" and r["ci95_log"][1] < 0 and r["n"] == [4, 4]
    assert r["inside_speedup"] == pytest.approx(1.1725, rel=0.01)
    assert run_main(tool.main, ["--standalone", same, "--inside", inside, "--out", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["verdict"].startswith("no protocol effect shown") and r["ci95_log"][0] < 0 < r["ci95_log"][1]
    assert math.isfinite(r["df"])


def test_two_machines_are_refused_and_one_process_a_side_is_not_judged(tmp_path, capsys):
    tool = _tool()
    inside = _campaign(tmp_path / "all", [0.86, 0.85], 1)
    other = _campaign(tmp_path / "other", [0.92, 0.93], 2, uuid="GPU-bbbb")
    assert run_main(tool.main, ["--standalone", other, "--inside", inside]) == 2
    assert "needs one machine" in capsys.readouterr().err
    one = _campaign(tmp_path / "one", [0.92], 3)
    assert run_main(tool.main, ["--standalone", one, "--inside", inside]) == 0
    assert capsys.readouterr().out.startswith("not judged: 1 standalone")
