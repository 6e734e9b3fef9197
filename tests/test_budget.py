"""The run budget (`--budget-min`): each comparison's timing share of what is left, on a fake clock (no waiting)."""
import types

import pytest

from workbench.ab.budget import DEFAULT_MIN, MIN_REPS, RunBudget, default_budget_min


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_shares_split_what_is_left_after_the_other_phases_by_arms():
    clk = Clock()
    b = RunBudget(600, [2, 3, 5], clock=clk)
    b.begin_comparison()
    clk.t += 30  # build + equivalence of the first comparison (2 arms)
    # its other phases estimated at 2 x 30 s over 2 arms: 30 s an arm; 30 s still to come here, 8 arms later
    assert b.timing_share_s() == pytest.approx((600 - 30 - 30 - 30 * 8) * 2 / 10)
    clk.t += 100  # its timing
    b.end_timing()
    clk.t += 20  # counted pass, summary
    b.end_comparison()
    assert b.other_s == [50]
    b.begin_comparison()
    clk.t += 10
    left = 600 - 160
    assert b.timing_share_s() == pytest.approx((left - (25 * 3 - 10) - 25 * 5) * 3 / 8)  # measured: 25 s an arm
    assert b.suffix() == f"{left / 60:.1f} min left of 10"


def test_share_never_negative_and_overrun_is_said():
    clk = Clock()
    b = RunBudget(60, [2, 2], clock=clk)
    b.begin_comparison()
    clk.t += 100
    assert b.timing_share_s() == 0.0
    b.end_timing()
    b.end_comparison()
    assert "over the 1 min budget" in b.suffix() and "OVER" in b.closing_line()


def _args(**kw):
    base = dict(budget_min=None, opt="all", reps=None, target_ci_pct=None, budget_s=None, _process_unit=False,
                _capture=False, sweep=None)
    return types.SimpleNamespace(**{**base, **kw})


def test_default_only_for_the_main_command_on_a_gpu():
    assert default_budget_min(_args(), "cuda") == DEFAULT_MIN
    assert default_budget_min(_args(), "cpu") is None
    assert default_budget_min(_args(opt="packing"), "cuda") is None
    assert default_budget_min(_args(reps=8), "cuda") is None
    assert default_budget_min(_args(_process_unit=True), "cuda") is None
    assert default_budget_min(_args(budget_min=0.0), "cuda") is None
    assert default_budget_min(_args(budget_min=3.0, opt="moe"), "cpu") == 3.0


def test_timing_protocol_takes_the_share_and_the_reps_floor():
    from workbench.ab.cli import parse_args
    from workbench.ab.runner import Runner
    import torch
    a = parse_args(["--device", "cpu", "--budget-min", "5"]).resolved(torch.device("cpu"), {
        "steps": 1, "warmup": 1, "warmup_max": 2, "reps": 2, "batches": 2, "lengths": "fixed:8"})
    r = Runner(a, torch.device("cpu"), writer=None)
    assert r.timing_protocol().budget_s is None  # no run budget: the protocol as configured
    clk = Clock()
    r.budget = RunBudget(300, [3], clock=clk)
    r.budget.reps_floor = MIN_REPS
    r.budget.begin_comparison()
    p = r.timing_protocol()
    assert p.reps == MIN_REPS and p.budget_s == pytest.approx(300) and p.max_reps >= MIN_REPS


def test_budget_min_is_checked():
    from workbench.ab.cli import parse_args
    from workbench.errors import WorkbenchError
    with pytest.raises(WorkbenchError, match="budget-min"):
        parse_args(["--budget-min", "-1"])
