"""The held-out analysis of the revised design (studies/heldout_replication/analyze_heldout_v2.py) on the committed
folders."""
import json
import math
import os
import shutil
import numpy as np
from workbench.paths import REPO_ROOT
import pytest
from scipy import stats
from workbench.cli import run_main
from workbench.measure import replication as rp
from workbench.measure import replication_spread as rs

# --- the committed design (prospective_v2.json) and its analysis (studies/heldout_replication/analyze_heldout_v2.py) ------------------------

ROOT = REPO_ROOT
HELDOUT_C = os.path.join(ROOT, "profiles", "2026-11-26_h100_heldout")
DESIGN = os.path.join(ROOT, "profiles", "2026-11-26_h100_replication", "prospective_v2.json")


def _analysis():
    from studies.heldout_replication import analyze_heldout_v2
    return analyze_heldout_v2


def test_the_design_holds_machine_c_in_its_estimate_and_states_its_run():
    with open(DESIGN, encoding="utf-8") as f:
        d = json.load(f)
    uuid_c = open(os.path.join(HELDOUT_C, "gpu.csv")).read().splitlines()[1].split(",")[-1].strip()
    assert uuid_c in d["machines"].values() and len(d["machines"]) == 3
    pk = d["comparisons"]["packing"]
    assert pk["model"] == "spread" and sorted(pk["folders"]) == ["A", "B", "C"]
    assert [len(v) for v in pk["folders"].values()] == pk["prediction"]["n_per_machine"] == [12, 8, 6]
    assert d["comparisons"]["moe"]["model"] == "pooled" and d["comparisons"]["offload"]["model"] == "spread"
    assert d["run"]["gpu_minutes"] == {"packing": 5.0, "moe": 5.8, "offload": 4.4, "total": 15.2}
    lo, hi = pk["prediction"]["pi95"]
    assert lo < pk["prediction"]["speedup"] < hi and "rule_commit" in d


def test_the_analysis_refuses_machine_c_and_judges_a_new_one(tmp_path, capsys):
    an = _analysis()
    out = tmp_path / "a.json"
    assert run_main(an.main, [HELDOUT_C, "--design", DESIGN, "--out", str(out)]) == 2
    assert "machine C" in capsys.readouterr().err and not out.exists()  # C is in v2's estimate: refused
    camp = tmp_path / "camp"
    shutil.copytree(os.path.join(HELDOUT_C, "packing"), camp / "packing")
    assert run_main(an.main, [str(camp), "--design", DESIGN, "--out", str(out)]) == 2  # no gpu.csv: refused
    (camp / "gpu.csv").write_text("name, uuid\nNVIDIA H200, GPU-dddddddd-0000\n")
    assert run_main(an.main, [str(camp), "--design", DESIGN, "--out", str(out)]) == 2  # another GPU model: refused
    assert "same GPU model" in capsys.readouterr().err and not out.exists()
    (camp / "gpu.csv").write_text("name, uuid\nNVIDIA H100 80GB HBM3, GPU-dddddddd-0000\n")
    assert run_main(an.main, [str(camp), "--design", DESIGN, "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    pk = res["heldout"]["packing"]
    with open(DESIGN, encoding="utf-8") as f:
        d = json.load(f)["comparisons"]["packing"]
    means = [math.log(x) for x in pk["heldout_speedups"]]
    assert pk["ok"] == rs.spread_check(d["prediction"], means, d["heldout_plan"]["null"])["ok"]
    assert pk["ran"] == 6 and pk["same_R_as_estimate"] and "not judged" in res["heldout"]["moe"]["verdict"]
