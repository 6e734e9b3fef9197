"""The whole run's time budget (`--budget-min`): how long each comparison's timing may add reps, and the time left.

    # n = comparisons planned, k = those still to run (this one included)

A run with a budget of B seconds gives each comparison's timing phase (`workbench.measure.engine`, its `budget_s`) a
share of what is left once the other phases are set aside, in proportion to its arms (a rep runs every arm once):

    timing_s = (B - elapsed - rest of this comparison's other phases - o * sum of the later comparisons' arms)
               * a_i / (sum of the arms of this and the later comparisons)

where o, the other phases' seconds per arm (building, equivalence, the counted pass, traces, the summary), is measured on
the comparisons done so far, and for the first comparison estimated as twice what its build and equivalence took (the
counted pass and summary after its timing cost about as much again) over its arms. The timing phase then runs `MIN_REPS` reps (the
verdict's floor, `stats.MIN_UNITS`) and adds reps while the share lasts, or until the `--target-ci` interval is
reached (`stopped_by` says which). A comparison whose floor of reps takes longer than its share overruns it.
Under a budget each timed rep warms an arm up at its fewest steps (every batch twice, `Protocol.rep_warmup_max`); the
discarded rep before them keeps the configured cap: an arm whose steps vary more than --settle-pct from one to the
next never settles, and would otherwise spend the whole cap in every rep.

The floors are known once a comparison has run: an arm's rep (its warm-up steps and timed steps) costs r seconds, the
timing phases' seconds over their rep passes times arms (the warm-up reps counted), and an arm's other phases o. After
each comparison, if the comparisons not yet begun cannot fit what is left at their floors,

    need = (sum of their arms) * ((floor reps + warm-up reps) * r + o)  >  B - elapsed,

(the floor reps: `MIN_REPS`, or --reps, as the engine runs them: `engine.floor_reps`),

one progress line says so (once; every comparison still runs), with `need` and how far over B the run will end. The
closing line splits an overrun into what the floors forced and what the reps past the floors added (each timing phase's
seconds pro rata to its rep passes). The clock is injectable (`clock=`), so the arithmetic is tested without waiting.

Default: `DEFAULT_MIN` minutes for the main command (`--opt all`) on one GPU (`default_budget_min`), shown at the start
with a line saying what the floors cost here is not known until the first comparison ends; `--budget-min 0` turns it
off.
"""
from __future__ import annotations

import time

DEFAULT_MIN = 12.0
"""The main command's budget on one GPU (an H100 / H200 runs `--opt all` at its default shapes in it)."""
MIN_REPS = 4
"""Reps at least under a run budget: `workbench.measure.stats.MIN_UNITS`, below which no verdict is given."""


def default_budget_min(args, device_type: str) -> float | None:
    """The budget a run gets without `--budget-min`: `DEFAULT_MIN` for `--opt all` on one GPU when no other stopping
    rule was asked for (--reps, --target-ci, --budget-s) and this is no child (--processes, nsys); else None."""
    if args.budget_min is not None:
        return args.budget_min or None  # 0: none
    if (device_type != "cuda" or args.opt != "all" or args.reps is not None or args.target_ci_pct is not None
            or args.budget_s is not None or args._process_unit or args._capture or args.sweep):
        return None
    return DEFAULT_MIN


class RunBudget:
    """The run's clock against its budget (the module docstring); `clock` returns seconds (time.monotonic)."""

    def __init__(self, total_s: float, arms: list[int], clock=time.monotonic):
        self.total_s, self.arms, self.clock = float(total_s), [max(int(a), 1) for a in arms], clock
        self.n = len(self.arms)
        self.t0 = clock()
        self.done = 0
        self.other_s: list[float] = []
        """Seconds each finished comparison spent outside its timing phase (in order: comparison k has arms[k])."""
        self.timing_s: list[float] = []
        """Seconds each finished comparison's timing phase ran (0: it had none)."""
        self.passes: list[tuple[int, int, int]] = []
        """(rep passes its timing ran, the warm-up reps included; the passes its floor asked for; arms timed) of each
        finished comparison ((0, 0, 0): no timing)."""
        self.floor: tuple[int, int] | None = None
        """(reps, warm-up reps) a timing phase runs at least, as the last one reported (`end_timing`)."""
        self.floors_warning: str | None = None
        """The line `floors_line` gave, once."""
        self._cmp_t0 = self._timing_t0 = None
        self._timing_s = 0.0
        self._passes = (0, 0, 0)
        self.shares_s: list[float] = []
        """The timing share each comparison was given."""

    def elapsed_s(self) -> float:
        return self.clock() - self.t0

    def left_s(self) -> float:
        return self.total_s - self.elapsed_s()

    def begin_comparison(self) -> None:
        self._cmp_t0, self._timing_s, self._passes = self.clock(), 0.0, (0, 0, 0)

    def timing_share_s(self) -> float:
        """The timing phase's share of what is left (called as the phase starts); never below 0."""
        now = self.clock()
        self._timing_t0 = now
        before = now - (self._cmp_t0 if self._cmp_t0 is not None else now)
        i = min(self.done, self.n - 1)
        per_arm = self.other_arm_s()
        if per_arm is None:
            per_arm = 2 * before / self.arms[i]
        later = sum(self.arms[i + 1:])
        rest_here = max(per_arm * self.arms[i] - before, 0.0)
        share = max(0.0, (self.left_s() - rest_here - per_arm * later) * self.arms[i] / (self.arms[i] + later))
        self.shares_s.append(share)
        return share

    def end_timing(self, reps: int = 0, arms: int = 0, floor_reps: int = 0, warmup_reps: int = 0) -> None:
        """The timing phase ended after `reps` reps (and `warmup_reps` warm-up reps before them) of `arms` arms; its
        floor was `floor_reps` reps."""
        if self._timing_t0 is not None:
            self._timing_s = self.clock() - self._timing_t0
            self._timing_t0 = None
            self._passes = (reps + warmup_reps, floor_reps + warmup_reps, arms)
            if floor_reps:
                self.floor = (floor_reps, warmup_reps)

    def end_comparison(self) -> None:
        if self._cmp_t0 is not None:
            self.other_s.append(max(self.clock() - self._cmp_t0 - self._timing_s, 0.0))
            self.timing_s.append(self._timing_s)
            self.passes.append(self._passes)
        self.done += 1
        self._cmp_t0 = None

    def other_arm_s(self) -> float | None:
        """Seconds an arm's other phases took on the comparisons done (None before the first)."""
        done_arms = sum(self.arms[:len(self.other_s)])
        return sum(self.other_s) / done_arms if self.other_s else None

    def arm_rep_s(self) -> float | None:
        """Seconds one arm's rep (its warm-up steps and timed steps) took on the comparisons done (None before a
        timing phase ended)."""
        runs = sum(p * a for p, _, a in self.passes)
        return sum(self.timing_s) / runs if runs else None

    def floors_need_s(self) -> float | None:
        """Seconds the comparisons not yet begun need at their floors (`floor` passes of every arm at `arm_rep_s`,
        and their other phases at `other_arm_s`); None while those costs are unknown."""
        rep_s, other_s = self.arm_rep_s(), self.other_arm_s()
        if rep_s is None or other_s is None or self.floor is None:
            return None
        return sum(self.arms[self.done:]) * (sum(self.floor) * rep_s + other_s)

    def floors_line(self) -> str | None:
        """Once, after a comparison ends: the line saying that the floors of the comparisons left cannot fit what is
        left of the budget, and by about how much the run will end over it (every comparison still runs)."""
        need = self.floors_need_s()
        if self.floors_warning is not None or need is None or self.done >= self.n:
            return None
        over = need - self.left_s()
        if over <= 0:
            return None
        k, (reps, warm) = self.n - self.done, self.floor
        self.floors_warning = (
            f"budget: the floors of the {k} comparison{'s' if k > 1 else ''} left ({reps} rep{'s' if reps != 1 else ''}"
            + (f" and {warm} warm-up rep{'s' if warm > 1 else ''}" if warm else "")
            + f" each, at {self.arm_rep_s():.1f} s an arm's rep and {self.other_arm_s():.1f} s an arm's other phases "
            f"as measured so far) need about {need / 60:.1f} min, {max(self.left_s(), 0.0) / 60:.1f} min is left: "
            f"this run will end about {over / 60:.1f} min over its {self.total_s / 60:g} min budget (every "
            f"comparison still runs)")
        return self.floors_warning

    def added_s(self) -> float:
        """Seconds the finished timing phases spent on reps past their floors (each phase's time pro rata to passes)."""
        return sum(t * (p - fp) / p for t, (p, fp, _) in zip(self.timing_s, self.passes) if p > fp)

    def suffix(self) -> str:
        """What progress lines end with: the time left of the budget (or how far over it)."""
        left = self.left_s()
        if left >= 0:
            return f"{left / 60:.1f} min left of {self.total_s / 60:g}"
        return f"{-left / 60:.1f} min over the {self.total_s / 60:g} min budget"

    def start_line(self, device_name: str | None, default: bool) -> str:
        return (f"budget: {self.total_s / 60:g} min for {self.n} comparisons" + (f" on {device_name}" if device_name
                                                                                  else "")
                + (" (the default for --opt all on one GPU; --budget-min M to change it, 0 for none)" if default else
                   " (--budget-min)")
                + f": each comparison's timing runs {MIN_REPS} reps at least, then adds reps while its share lasts")

    def unknown_line(self, device_name: str | None) -> str:
        """The start's second line: what the floors cost here is measured, not assumed."""
        return (f"budget: what the floors ({MIN_REPS} reps a comparison) cost" + (f" on {device_name}" if device_name
                                                                                 else "")
                + " is not known until the first comparison ends; a line then says if they cannot fit the budget")

    def closing_line(self) -> str:
        used = self.elapsed_s()
        shares = f"timing shares {', '.join(f'{s / 60:.1f}' for s in self.shares_s)} min"
        if used <= self.total_s:
            return f"wall time {used / 60:.1f} min: within the {self.total_s / 60:g} min budget ({shares})"
        over, added = used - self.total_s, self.added_s()
        return (f"wall time {used / 60:.1f} min: OVER the {self.total_s / 60:g} min budget by {over / 60:.1f} min: "
                f"{max(over - added, 0.0) / 60:.1f} forced by the floors (the run without the reps past them: "
                f"{(used - added) / 60:.1f} min), {min(added, over) / 60:.1f} by reps the shares added past the "
                f"floors ({shares})")
