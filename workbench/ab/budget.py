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
reached (`stopped_by` says which). A comparison whose floor of reps takes longer than its share overruns it: the closing
line says by how much. The clock is injectable (`clock=`), so the arithmetic is tested without waiting.

Default: `DEFAULT_MIN` minutes for the main command (`--opt all`) on one GPU (`default_budget_min`), shown at the start;
`--budget-min 0` turns it off.
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
        self._cmp_t0 = self._timing_t0 = None
        self._timing_s = 0.0
        self.shares_s: list[float] = []
        """The timing share each comparison was given."""

    def elapsed_s(self) -> float:
        return self.clock() - self.t0

    def left_s(self) -> float:
        return self.total_s - self.elapsed_s()

    def begin_comparison(self) -> None:
        self._cmp_t0, self._timing_s = self.clock(), 0.0

    def timing_share_s(self) -> float:
        """The timing phase's share of what is left (called as the phase starts); never below 0."""
        now = self.clock()
        self._timing_t0 = now
        before = now - (self._cmp_t0 if self._cmp_t0 is not None else now)
        i = min(self.done, self.n - 1)
        done_arms = sum(self.arms[:self.done])
        per_arm = sum(self.other_s) / done_arms if self.other_s else 2 * before / self.arms[i]
        later = sum(self.arms[i + 1:])
        rest_here = max(per_arm * self.arms[i] - before, 0.0)
        share = max(0.0, (self.left_s() - rest_here - per_arm * later) * self.arms[i] / (self.arms[i] + later))
        self.shares_s.append(share)
        return share

    def end_timing(self) -> None:
        if self._timing_t0 is not None:
            self._timing_s = self.clock() - self._timing_t0
            self._timing_t0 = None

    def end_comparison(self) -> None:
        if self._cmp_t0 is not None:
            self.other_s.append(max(self.clock() - self._cmp_t0 - self._timing_s, 0.0))
        self.done += 1
        self._cmp_t0 = None

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

    def closing_line(self) -> str:
        used = self.elapsed_s()
        within = "within" if used <= self.total_s else "OVER"
        return (f"wall time {used / 60:.1f} min: {within} the {self.total_s / 60:g} min budget "
                f"(timing shares {', '.join(f'{s / 60:.1f}' for s in self.shares_s)} min)")
