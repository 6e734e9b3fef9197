"""The headline's process-level claims (issue 37, item 8): `analysis.process_claims` reads the committed held-out
design (`profiles/2026-11-26_h100_replication/prospective.json`) as the one owner of the numbers, and that file is
what `prospective.py` computes from the committed processes (nothing edited by hand); a plain `--processes` campaign
gives a same-machine interval; the headline's "a rerun" cell sits only beside the comparison at its shape."""
import json
import math
import os
import runpy
import shutil

import pandas as pd
import pytest

from workbench.analysis import processes as pc
from workbench.paths import REPO_ROOT
from workbench.report import headline

FOLDER = os.path.join(REPO_ROOT, "profiles", "2026-11-26_h100_replication")


@pytest.fixture(scope="module")
def claims():
    return pc.process_claims(os.path.join(REPO_ROOT, "profiles"))


def test_claims_are_the_committed_designs_numbers(claims):
    with open(os.path.join(FOLDER, "prospective.json"), encoding="utf-8") as f:
        design = json.load(f)["comparisons"]
    assert set(claims["name"]) >= {"packing", "moe", "offload"}
    for name, c in design.items():
        r = claims[claims["name"] == name].iloc[0]
        p = c["prediction"]
        assert (r["speedup"], r["ci95_lo"], r["pi95_hi"], r["K"], r["machines"]) == \
            (p["speedup"], p["ci95"][0], p["pi95"][1], p["K"], p["J"])
        assert r["gpu_minutes"] == c["gpu_minutes"] and r["model"] is not None and r["precision"] == "autocast"
    pk = claims[claims["name"] == "packing"].iloc[0]
    assert pk["K"] == 20 and pk["machines"] == 2 and pk["pi95_lo"] < 1 < pk["speedup"]  # 2 machines: a wide PI


def test_the_committed_design_is_what_its_script_computes(tmp_path):
    """prospective.json was written by prospective.py from the committed processes: rerun it on a copy."""
    work = tmp_path / "rep"
    shutil.copytree(FOLDER, work, ignore=shutil.ignore_patterns("*.log"))
    os.remove(work / "prospective.json")
    runpy.run_path(str(work / "prospective.py"), run_name="__main__")
    new = json.loads((work / "prospective.json").read_text())
    old = json.loads(open(os.path.join(FOLDER, "prospective.json"), encoding="utf-8").read())
    assert new == old
    new["comparisons"]["packing"]["prediction"]["pi95"][0] += 0.01  # the negative control: an edit shows
    assert new != old


def test_a_plain_processes_campaign_gives_a_same_machine_interval(tmp_path):
    camp = tmp_path / "profiles" / "camp"
    camp.mkdir(parents=True)
    est = {"comparison": "packing", "baseline": "rebuild", "arm": "cached", "speedup": 1.05, "ci95": [1.04, 1.06],
           "pi95": [1.02, 1.08], "K": 4, "R": [4, 4, 4, 4], "df": 3, "sigma": 0.01, "tau": 0.002}
    (camp / "processes.json").write_text(json.dumps({"processes": [{"wall_s": 60.0}, {"wall_s": 30.0}],
                                                     "estimates": [est, {**est, "arm": "x", "pi95": None}]}))
    c = pc.process_claims(str(tmp_path / "profiles"), pd.DataFrame(columns=["process_of", "name", "arm"]))
    assert len(c) == 1  # an estimate with no interval is no claim
    r = c.iloc[0]
    assert r["pi_scope"].startswith(pc.SAME) and r["machines"] == 1 and r["gpu_minutes"] == 1.5
    assert math.isnan(r["omega_pct"]) if isinstance(r["omega_pct"], float) else r["omega_pct"] is None


def test_the_rerun_cell_sits_beside_its_own_comparison_only(claims):
    row = {"opt": "packing", "arm": "cached", "model": "qwen3-0.6b", "layers": 28, "tokens": 16384,
           "attn": "varlen", "precision": "autocast"}
    cell = headline.rerun_cell(claims, row)
    assert cell.startswith("20 x 4, ") and "PI [" in cell and "another machine" in cell and "min" in cell
    assert headline.rerun_cell(claims, {**row, "layers": 8}) == "- (single runs only)"  # another shape
    assert headline.rerun_cell(claims, {**row, "arm": "precomputed"}) == "- (single runs only)"
    assert "(fp32-adapters)" not in cell and "(autocast)" in headline.rerun_cell(claims, {**row, "precision": "x"})
