"""The headline's process-level claims: `analysis.process_claims` reads the committed held-out
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

from workbench.analysis import process_level as pc
from workbench.paths import REPO_ROOT
from workbench.report import headline

FOLDER = os.path.join(REPO_ROOT, "profiles", "2026-11-26_h100_replication")


@pytest.fixture(scope="module")
def claims():
    return pc.process_claims(os.path.join(REPO_ROOT, "profiles"))


G_FOLDER = os.path.join(REPO_ROOT, "profiles", "2026-11-26_h100_all_processes_g")
NEWEST = {"packing": os.path.join(G_FOLDER, "prospective_v4.json"), "offload": os.path.join(FOLDER, "prospective_v2.json"),
          "moe": os.path.join(REPO_ROOT, "profiles", "2026-11-26_h100_prospective2", "prospective_v3.json")}
"""Per comparison the newest committed revision of the held-out design (v2's offload and v3's moe held on a machine
they had not seen; v4 re-estimated packing after v2's interval missed machine G, and awaits its own check)."""


def test_claims_are_the_committed_designs_numbers(claims):
    assert set(claims["name"]) >= {"packing", "moe", "offload"}
    for name, path in NEWEST.items():
        with open(path, encoding="utf-8") as f:
            c = json.load(f)["comparisons"][name]
        r = claims[(claims["name"] == name) & (claims["pi_scope"].str.startswith(pc.ANOTHER))].iloc[0]
        p = c["prediction"]
        assert (r["speedup"], r["ci95_lo"], r["pi95_hi"], r["K"], r["machines"]) == \
            (p["speedup"], p["ci95"][0], p["pi95"][1], p["K"], p["J"])
        assert r["source"] == os.path.relpath(path, REPO_ROOT)
        assert r["gpu_minutes"] == c["estimate_gpu_minutes"] and r["model"] is not None and r["precision"] == "autocast"
    pk = claims[claims["name"] == "packing"].iloc[0]
    assert pk["K"] == 38 and pk["machines"] == 6 and pk["pi95_lo"] < pk["speedup"]


def test_a_folder_a_design_pools_keeps_its_other_comparisons(claims):
    """v4 pools machine G's processes for packing and v5 for `all`: the same folder's moe and offload estimates stay
    one-machine claims, and neither its packing nor its `all` estimate is listed again beside the design's."""
    src = os.path.relpath(os.path.join(G_FOLDER, "processes.json"), REPO_ROOT)
    g = claims[claims["source"] == src]
    assert set(g["name"]) == {"moe", "offload"}
    assert (g["machines"] == 1).all() and g["pi_scope"].str.startswith(pc.SAME).all() and (g["K"] == 2).all()
    rows = claims[claims["name"] == "all"]
    (everything,) = rows[rows["source"].str.endswith("prospective_v5.json")].itertuples()
    assert everything.machines == 2 and everything.K == 5
    # a held-out campaign of `all` (machine J, which v5 does not pool) is its own one-machine claim, listed after the
    # design's, so the headline's "a rerun" cell (the first match) stays the design's
    assert rows.iloc[0]["source"] == everything.source
    assert (rows.iloc[1:]["machines"] == 1).all()


def test_a_revised_design_supersedes_its_parent(tmp_path):
    """prospective_v2.json's comparison replaces prospective.json's (the parent's process folders are not listed
    again as same-machine claims); a comparison only the parent names keeps the parent's numbers."""
    camp = tmp_path / "profiles" / "camp"
    camp.mkdir(parents=True)
    pred = {"speedup": 1.05, "ci95": [1.0, 1.1], "pi95": [0.9, 1.2], "pi_df": 3, "K": 4, "R": [4], "J": 2,
            "omega": 0.01, "method": "m"}
    one = {"baseline": "b", "arm": "a", "folders": {"A": ["x/p00"]}, "prediction": pred, "gpu_minutes": 1.0}
    (camp / "prospective.json").write_text(json.dumps({"comparisons": {"packing": one, "moe": one}}))
    comps = pd.DataFrame(columns=["process_of", "name", "arm"])
    before = pc.process_claims(str(tmp_path / "profiles"), comps)
    assert sorted(before["speedup"]) == [1.05, 1.05]  # the negative control: the parent alone
    two = {**one, "folders": {"A": ["profiles/camp/x/p00"]}, "prediction": {**pred, "speedup": 1.07, "J": 3},
           "estimate_gpu_minutes": 2.0}
    del two["gpu_minutes"]
    (camp / "prospective_v2.json").write_text(json.dumps({"comparisons": {"packing": two}}))
    after = pc.process_claims(str(tmp_path / "profiles"), comps).set_index("name")
    assert after.loc["packing", "speedup"] == 1.07 and after.loc["packing", "machines"] == 3
    assert after.loc["packing", "gpu_minutes"] == 2.0 and after.loc["packing", "source"].endswith("prospective_v2.json")
    assert after.loc["moe", "speedup"] == 1.05 and len(after) == 2


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
    (camp / "processes.json").write_text(json.dumps({"processes": [{"wall_s": 60.0}, {"wall_s": 30.0}],
                                                     "estimates": [{**est, "wall_s": 12.0}]}))
    c = pc.process_claims(str(tmp_path / "profiles"), pd.DataFrame(columns=["process_of", "name", "arm"]))
    assert c.iloc[0]["gpu_minutes"] == 0.2  # the comparison's own 12 s, not the processes' 90
    assert math.isnan(r["omega_pct"]) if isinstance(r["omega_pct"], float) else r["omega_pct"] is None


def test_the_rerun_cell_sits_beside_its_own_comparison_only(claims):
    row = {"opt": "packing", "arm": "cached", "model": "qwen3-0.6b", "layers": 28, "tokens": 16384,
           "attn": "varlen", "precision": "autocast"}
    cell = headline.rerun_cell(claims, row)
    assert cell.startswith("1.099x [1.055, 1.145], 38 processes on 6 H100s x 4 reps: **faster**"), cell
    none = headline.NO_PROCESS_DATA
    assert headline.rerun_cell(claims, {**row, "layers": 8}) == none  # another shape
    assert headline.rerun_cell(claims, {**row, "arm": "precomputed"}) == none
    assert ", fp32-adapters" not in cell and ", autocast" in headline.rerun_cell(claims, {**row, "precision": "x"})
    nan_gpu = claims.assign(gpu_name=float("nan"))  # a claim whose shape was not found: no GPU name, no "nan"
    assert "nan" not in headline.rerun_cell(nan_gpu, row)
    # one process on another machine: packing's committed rule cannot fail a no-effect machine, so no interval
    other = headline.another_machine_cell(claims, row)
    assert other.startswith("no interval (its held-out rule fails a no-effect machine") and "PI [" not in other
    assert "machine means" in other and "over 6 machines" in other and "GPU min" in other
    assert headline.another_machine_cell(claims, {**row, "layers": 8}) == "-"


def test_a_dose_process_is_a_process_of_its_dose_run(tmp_path):
    """A dose-response's levels are not the optimization's arms: its run folders (DIR/<mode>/pNN) belong to the dose
    run as a --processes folder's belong to it, so notebook 01 leaves them out of its figures."""
    from workbench.analysis.loader import _process_of
    dose, procs, plain = tmp_path / "dose", tmp_path / "camp", tmp_path / "runs"
    for d in (dose / "none" / "p00", procs / "p00", plain / "r"):
        d.mkdir(parents=True)
    (dose / "dose_run.json").write_text("{}")
    (procs / "processes.json").write_text("{}")
    assert _process_of(str(dose / "none"), str(tmp_path)) == "dose"
    assert _process_of(str(procs), str(tmp_path)) == "camp"
    assert _process_of(str(plain), str(tmp_path)) is None  # the negative control: a plain run folder


def test_the_runs_of_a_designed_per_gpu_job_are_processes_of_its_folder(tmp_path):
    """studies/gpu_lease/per_gpu.sh writes design.json: the plain runs under JOB/g0/ (every shape of the design) are processes
    of JOB, as the committed mechanism campaigns' are (notebook 01 draws none of them as runs of their own)."""
    from workbench.analysis.loader import _process_of
    job, plain = tmp_path / "job", tmp_path / "runs"
    for d in (job / "g0" / "r0_o2k", plain / "r"):
        d.mkdir(parents=True)
    (job / "design.json").write_text('{"job": "studies/moe_two_term/moe_work.sh"}')
    assert _process_of(str(job / "g0"), str(tmp_path)) == "job"
    assert _process_of(str(plain), str(tmp_path)) is None  # the negative control: no design above it
    root = os.path.join(REPO_ROOT, "profiles")
    assert _process_of(os.path.join(root, "2026-11-27_h200x2_moe_work_b", "g1"), root) == "2026-11-27_h200x2_moe_work_b"


def test_a_designed_per_gpu_job_gives_its_estimate_over_processes():
    """`design_estimates`: a design.json folder's runs are its processes; per shape and arm, exp(mean log speedup)
    with a 95% t over them (the figures MoE's COMMAND.txt files and the README quote, which `--check` reads), and a
    shape with one process gives none; folders without design.json give none."""
    from workbench import analysis as an

    root = os.path.join(REPO_ROOT, "profiles")
    comps = an.comparisons(root, include_cpu=True, include_incomplete=True, include_void=True)
    d = pc.design_estimates(root, comps)
    assert set(d["process_of"]) == {"profiles/2026-11-27_h200x2_moe_probe", "profiles/2026-11-27_h200x2_moe_work_b",
                                    "profiles/2026-11-27_h200x4_moe_backward", "profiles/2026-11-27_h200x4_moe_q6l12k",
                                    "profiles/2026-11-28_h200x4_open_campaigns/gate_design3",  # the gate's A/A processes
                                    "profiles/2026-11-29_h200_gate_design4/gate"}
    row = d[(d["process_of"] == "profiles/2026-11-27_h200x4_moe_q6l12k") & (d["arm"] == "sort_split")].iloc[0]
    assert (row["K"], f"{row['speedup']:.3f}", f"{row['ci95_lo']:.3f}", f"{row['ci95_hi']:.3f}") == (
        8, "1.359", "1.323", "1.397")
    one = comps[comps["process_of"] == "profiles/2026-11-27_h200x4_moe_q6l12k"].head(1)
    assert pc.design_estimates(root, one).empty  # one process: no interval over processes
    assert pc.design_estimates(root, pd.DataFrame()).empty  # no runs at all
