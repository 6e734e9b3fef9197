"""The four-GPU study's prospective file (studies/four_gpu/analyze_fourgpu.py) against the rules it computes."""
import json

from workbench.savings import straggler


def test_prospective_file_holds_the_committed_projections_and_rules():
    from studies.four_gpu import analyze_fourgpu as mod

    with open(mod.PROSPECTIVE) as f:
        committed = json.load(f)
    now = mod.prospective()
    assert {k: v for k, v in committed.items() if k != "rule_commit"} == \
        {k: v for k, v in json.loads(json.dumps(now)).items() if k != "rule_commit"}
    proj = {p["comparison"]: p for p in committed["projections"]}
    assert round(proj["packing"]["saving_ms"], 1) == 35.9 and [round(x, 1) for x in proj["moe"]["ci95"]] == [73.2, 168.5]
    assert round(proj["offload"]["saving_ms"], 1) == -0.8
    assert committed["projection_rule"] == straggler.PROJECTION_RULE


# --- issue 41 after the 4-GPU run: the empty comparison, the offload Function under FSDP2, the op counts ------------
