"""The budget replay (studies/practitioner_recipe/replay_budget.py) on the committed 8-minute main run: it reproduces
the run's wall time, and the floors line comes where the measured-so-far costs first show the overrun."""
import os

import pytest

from workbench.paths import PROFILES_DIR
from studies.practitioner_recipe import replay_budget

RUN = os.path.join(PROFILES_DIR, "2026-11-28_h200x4_open_campaigns", "main_budget_8min")


@pytest.mark.skipif(not os.path.exists(os.path.join(RUN, "main", "summary.json")), reason="the committed run is not in this tree")
def test_the_replay_reproduces_the_8_minute_run(capsys):
    summary, cmps = replay_budget.reconstruct(RUN)
    assert [c["name"] for c in cmps] == ["packing", "offload", "moe", "all"]
    total = sum(c["before_s"] + c["timing_s"] + c["after_s"] for c in cmps)
    assert total == pytest.approx(sum(c["wall_s"] for c in summary["comparisons"]))
    replay_budget.replay(cmps, 8)
    out = capsys.readouterr().out.splitlines()
    warned = [i for i, ln in enumerate(out) if "budget: the floors of" in ln]
    assert len(warned) == 1 and out[warned[0] - 1].startswith("moe ")  # said after the third comparison
    assert out[-1].startswith("wall time 10.9 min: OVER the 8 min budget by 2.9 min: 2.9 forced by the floors")
