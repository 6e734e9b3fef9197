"""The held-out checks of the revised designs: `analysis.heldout_checks` reads every committed
`analysis_vN.json` as written (nothing recomputed), says which design is still the comparison's claim, and the results
page lists them."""
import json
import os

from workbench.analysis import heldout as ho
from workbench.measure.machine_label import machine_label
from workbench.paths import REPO_ROOT

PROFILES = os.path.join(REPO_ROOT, "profiles")


def test_the_committed_checks_are_read_as_written():
    df = ho.heldout_checks(PROFILES)
    assert len(df) >= 15
    for r in df.to_dict("records"):
        with open(os.path.join(REPO_ROOT, r["source"]), encoding="utf-8") as f:
            h = json.load(f)["heldout"][r["name"]]
        assert (r["M"], r["speedup"], r["pi95_lo"], r["inside"]) == (h["ran"], h["heldout_speedup"], h["pi95"][0],
                                                                    h["inside"])
        assert r["verdict"] == ("holds" if h["verdict"] == "holds" else "fails")
    # machine J (its UUID read from the run folder): v5's `all` held at M = 4 and is the claim; v2's MoE interval
    # failed there and is superseded by v3
    with open(os.path.join(PROFILES, "2026-11-26_h100_prospective5", "analysis_v5.json"), encoding="utf-8") as f:
        machine_j = machine_label(json.load(f)["machine"])
    j = df[df["machine"] == machine_j].set_index(["name", "design"])
    row = j.loc[("all", "profiles/2026-11-26_h100_prospective4/prospective_v5.json")]
    assert row["claim"] and row["verdict"] == "holds" and row["M"] == 4
    old = j.loc[("moe", "profiles/2026-11-26_h100_replication/prospective_v2.json")]
    assert not old["claim"] and old["verdict"] == "fails"


def _design(path, names):
    pred = {"speedup": 1.05, "ci95": [1.0, 1.1], "pi95": [0.9, 1.2], "K": 4, "R": [4], "J": 2, "omega": 0.01,
            "method": "m"}
    c = {"baseline": "b", "arm": "a", "folders": {"A": ["x/p00"]}, "prediction": pred}
    path.write_text(json.dumps({"comparisons": {n: c for n in names}}))


def _check(ok, ran=4, **kw):
    return {"ran": ran, "planned_M": 4, "heldout_speedup": 1.1, "shift_pct": 2.0, "pi95": [0.9, 1.2], "inside": 1.0,
            "inside_null_q05": 0.5, "ok": ok, "verdict": "holds" if ok else "FAILS", **kw}


def test_a_superseded_design_and_a_failed_check_are_said(tmp_path):
    camp = tmp_path / "profiles" / "camp"
    camp.mkdir(parents=True)
    _design(camp / "prospective.json", ["packing", "moe"])
    _design(camp / "prospective_v2.json", ["packing"])
    run = tmp_path / "profiles" / "run"
    run.mkdir()
    (run / "analysis_v1.json").write_text(json.dumps({
        "design": "profiles/camp/prospective.json", "machine": "GPU-aaaaaaaa-0000-cd",
        "heldout": {"packing": _check(False, variance_ratio=7.7, f_interval=[0.07, 5.9]),
                    "moe": _check(True, heldout_sd_log=0.01, max_sd_log=0.05),
                    "offload": _check(True, ran=0)}}))
    df = ho.heldout_checks(str(tmp_path / "profiles")).set_index("name")
    assert sorted(df.index) == ["moe", "packing"]  # a comparison that did not run is no check
    assert not df.loc["packing", "claim"] and df.loc["packing", "verdict"] == "fails"  # v2 supersedes packing's v1
    assert df.loc["moe", "claim"] and df.loc["moe", "verdict"] == "holds"  # v1 is still moe's claim
    assert df.loc["packing", "spread"].startswith("variance ratio 7.70")
    assert df.loc["moe", "spread"] == "SD of the means 1.00% (passes <= 5.00%)"
    assert df.loc["moe", "machine"] == machine_label("GPU-aaaaaaaa") == "ma80b"  # the label, never the UUID


def test_the_results_page_lists_them():
    with open(os.path.join(PROFILES, "RESULTS.md"), encoding="utf-8") as f:
        page = f.read()
    assert "Held-out checks of the revised designs" in page
    assert "2026-11-26_h100_prospective5/analysis_v5.json" in page
