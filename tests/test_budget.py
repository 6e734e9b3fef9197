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


def _comparison(b, clk, *, before, timing, after, reps, arms, floor_reps=MIN_REPS, warmup_reps=1):
    """One comparison on the fake clock: `before` s of build and equivalence, `timing` s of timing phase (`reps` reps
    and `warmup_reps` warm-up reps of `arms` arms), `after` s of counted pass and summary."""
    b.begin_comparison()
    clk.t += before
    b.timing_share_s()
    clk.t += timing
    b.end_timing(reps, arms, floor_reps, warmup_reps)
    clk.t += after
    b.end_comparison()
    return b.floors_line()


def test_floors_that_cannot_fit_are_said_once_after_the_first_comparison():
    clk = Clock()
    b = RunBudget(600, [2, 4, 4], clock=clk)
    # 5 passes (4 reps + the warm-up rep) of 2 arms in 100 s: 10 s an arm's rep; other phases 40 s over 2 arms: 20 s
    line = _comparison(b, clk, before=20, timing=100, after=20, reps=4, arms=2)
    need = 8 * (5 * 10 + 20)  # the 8 arms left at their floors: 560 s, against 600 - 140 = 460 s left
    assert b.arm_rep_s() == pytest.approx(10) and b.other_arm_s() == pytest.approx(20)
    assert b.floors_need_s() == pytest.approx(need)
    assert line == ("budget: the floors of the 2 comparisons left (4 reps and 1 warm-up rep each, at 10.0 s an arm's "
                    "rep and 20.0 s an arm's other phases as measured so far) need about 9.3 min, 7.7 min is left: "
                    "this run will end about 1.7 min over its 10 min budget (every comparison still runs)")
    assert b.floors_warning == line
    for _ in range(2):  # the rest at their floors, as said: no second warning, every comparison runs
        assert _comparison(b, clk, before=30, timing=200, after=50, reps=4, arms=4) is None
    assert b.done == 3 and b.elapsed_s() == pytest.approx(140 + need)
    assert b.closing_line() == ("wall time 11.7 min: OVER the 10 min budget by 1.7 min: 1.7 forced by the floors (the "
                                "run without the reps past them: 11.7 min), 0.0 by reps the shares added past the "
                                "floors (timing shares 1.3, 2.5, 1.7 min)")


def test_floors_that_fit_give_no_line():
    clk = Clock()
    b = RunBudget(1200, [2, 4, 4], clock=clk)
    assert _comparison(b, clk, before=20, timing=100, after=20, reps=4, arms=2) is None  # 560 s needed, 1060 left
    assert b.floors_need_s() == pytest.approx(560)
    assert _comparison(b, clk, before=30, timing=360, after=50, reps=8, arms=4) is None  # 9 passes: 4 past the floor
    assert b.added_s() == pytest.approx(360 * 4 / 9)
    assert _comparison(b, clk, before=30, timing=200, after=50, reps=4, arms=4) is None
    assert b.floors_warning is None and "within the 20 min budget" in b.closing_line()


def test_an_overrun_is_split_into_the_floors_and_the_reps_past_them():
    clk = Clock()
    b = RunBudget(300, [2, 2], clock=clk)
    _comparison(b, clk, before=10, timing=90, after=20, reps=8, arms=2)  # 9 passes: 40 s on the 4 past the floor
    _comparison(b, clk, before=10, timing=210, after=20, reps=4, arms=2)  # 360 s in all: 60 s over
    assert b.closing_line().startswith("wall time 6.0 min: OVER the 5 min budget by 1.0 min: 0.3 forced by the floors "
                                       "(the run without the reps past them: 5.3 min), 0.7 by reps the shares added "
                                       "past the floors")


def test_no_warning_before_a_timing_phase_was_measured():
    clk = Clock()
    b = RunBudget(10, [2, 2], clock=clk)
    b.begin_comparison()
    clk.t += 100  # a comparison that never reached its timing phase (its baseline failed)
    b.end_comparison()
    assert b.floors_need_s() is None and b.floors_line() is None
    assert "not known until the first comparison ends" in b.unknown_line("NVIDIA H200")


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
    # the timed reps warm up at the fewest steps (every batch twice); the configured cap stays for the discarded rep
    assert p.rep_warmup_max == p.warmup_steps() == min(p.warmup_max, 2 * 2) and p.warmup_max == r.protocol().warmup_max


def test_budget_min_is_checked():
    from workbench.ab.cli import parse_args
    from workbench.errors import WorkbenchError
    with pytest.raises(WorkbenchError, match="budget-min"):
        parse_args(["--budget-min", "-1"])


def test_a_run_whose_floors_cannot_fit_says_so_once_and_runs_every_comparison(capsys, tmp_path, fakes):
    from tests.test_ab import FAST, _last_json, _run
    rc, lines, err = _run(capsys, ["--opt", "all", *FAST, "--reps", "1", "--aa", "--model", "tiny-qwen3",
                                   "--budget-min", "0.0001", "--out", str(tmp_path)])
    assert rc == 0, err
    summary = _last_json(lines)
    n = len(summary["comparisons"])
    assert n > 2 and all(c["status"] == "ok" for c in summary["comparisons"])
    warned = [ln for ln in err.splitlines() if ln.startswith("budget: the floors of")]
    assert len(warned) == 1 and warned[0].startswith(f"budget: the floors of the {n - 1} comparisons left (2 reps each")
    # --reps 1 of 2 arms: the engine stops only at whole Williams cycles (2 reps), the floor it reports
    assert summary["budget"]["floors_warning"] in warned[0]
    assert "not known until the first comparison ends" in err
    closing = next(ln for ln in lines if ln.startswith("wall time"))
    assert "OVER the 0.0001 min budget" in closing and "0.0 by reps the shares added past the floors" in closing
