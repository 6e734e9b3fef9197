"""The one measurement engine: every timing the workbench reports comes from `measure()`.

    # nb = distinct batches of a comparison, cycled; a sample = one timed step of one arm

Protocol (a comparison = arms x reps over one fixed batch sequence, inside one process):
- One discarded warm-up rep first (`discard_reps`): every arm runs as in a rep, its steps timed and recorded
  (`Measurement.discarded`, rep -1) and never in a statistic. A process's first block runs slow (the H100 runs: the
  last warmup step of a process's first block 8.5% slower than the first timed step; rep 0 outside the t band in 15%
  of 8-rep runs).
- Each rep runs every arm once, in a carryover-balanced order (`arm_order`: a Williams design): over one cycle
  (n reps for an even number of arms n, 2n for an odd one) every arm takes every position equally often and comes
  right before every other arm equally often, so drift, running first, and what the previous arm leaves behind
  (caches, allocator, clocks) fall on every arm alike. (Rotating by one, the order before, is balanced only for 2
  arms: with 4, the baseline ran right before the compared arm in 75% of reps.)
- Per arm per rep, warmup runs until the step time settles on every distinct batch: at least `warmup_min` steps
  and two passes over the distinct batches, then until each batch's latest step is within `settle_pct` of that
  batch's previous step, `warmup_max` at most. The steps it took and whether it settled are recorded (`Warmup`).
- Then `steps` timed steps, batch `step mod nb`, with no dispatch mode, no profiler and no sync-debug mode
  (`assert_uninstrumented` checks before every timed step); NVTX ranges are the only instrument left on. The one
  exception is asked for by name, to measure an instrument's own effect (`Protocol.instrument`, the dose-response of
  `workbench.ab.dose`): `torch` runs each arm block (warmup and timed steps) inside torch.profiler, `nsys` opens the
  CUDA profiler range (`nsys profile -c cudaProfilerApi`) before the first rep and closes it after the last.
- With `target_ci_pct`, reps continue past `reps` until the speedup's 95% CI half-width is under it, `budget_s` is
  spent, or `max_reps` is reached; `stopped_by` says which. It stops only at a whole number of cycles of the order
  (`stop_every`: a Williams cycle when `reps` covers one, else an even R), never at an odd R.
Samples pair by (rep, step): every arm sees batch `step mod nb` at step `step` of every rep. Because each arm runs as
one block per rep, the pairs of one rep share that rep's block effects: the rep is the unit of independence, and
every CI is a t-interval over per-rep log ratios (`workbench.measure.stats.paired_speedup`), so more, shorter reps buy
precision, not more steps. That CI speaks for "within this run"; a claim about a rerun takes the process as the unit
(`workbench.measure.replication`). Every pair counts; steps beyond the outlier rule of `workbench.measure.stats` are listed as a
diagnostic, never dropped. `workbench.measure.power` simulates this protocol (rep and process effects, drift,
carryover) and checks its coverage.

Sync counts and traces come from separate passes (`workbench.ab`), never from these steps.
"""
from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import Callable, ContextManager, Protocol as _Protocol


from workbench.measure import stats
from workbench.measure.results import CALLBACK_COMPARISON
from workbench.errors import WorkbenchError


class InstrumentActive(WorkbenchError):
    """An instrument (dispatch mode, profiler, sync-debug mode) is on where a step is being timed."""


def active_instruments() -> list[str]:
    """The instruments switched on right now (empty in a clean timing pass)."""
    import torch  # here, not at module level: the analysis side (paired_comparison) runs without torch
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    on = []
    if _get_current_dispatch_mode_stack():
        on.append("dispatch mode: " + ", ".join(type(m).__name__ for m in _get_current_dispatch_mode_stack()))
    if torch._C._is_torch_function_mode_enabled():
        on.append("torch function mode")
    if torch._C._autograd._profiler_enabled():
        on.append("torch.profiler")
    if torch.cuda.is_available() and torch.cuda.is_initialized() and torch.cuda.get_sync_debug_mode() != 0:
        on.append("CUDA sync debug mode")
    return on


def assert_uninstrumented(allowed: str | None = None) -> None:
    """No instrument on; with `allowed` ("torch.profiler"), that one must be on and nothing else."""
    on = active_instruments()
    if allowed is not None:
        if allowed not in on:
            raise InstrumentActive(f"a timed step asked to run under {allowed} runs without it")
        on = [x for x in on if x != allowed]
    if on:
        raise InstrumentActive("a timed step would run with an instrument on (" + "; ".join(on) + ")")


INSTRUMENTS = ("none", "torch", "nsys")
"""`Protocol.instrument`: what the timed steps run under (none: NVTX only)."""


def profiler_activities(device) -> tuple[list, dict]:
    """torch.profiler's activities and keyword arguments as the traced passes use them (`traces.capture`): CPU, plus
    CUDA with its sync events on a GPU."""
    import torch
    from torch.profiler import ProfilerActivity

    acts, kwargs = [ProfilerActivity.CPU], {}
    if torch.device(device).type == "cuda":
        acts.append(ProfilerActivity.CUDA)
        kwargs["experimental_config"] = torch.profiler._ExperimentalConfig(enable_cuda_sync_events=True)
    return acts, kwargs


@contextlib.contextmanager
def _run_instrument(instrument: str):
    """The context the reps run in: the CUDA profiler range (`nsys profile -c cudaProfilerApi`) for `nsys`."""
    if instrument != "nsys":
        yield
        return
    import torch

    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    try:
        yield
    finally:
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()


def _block_instrument(instrument: str):
    """The context an arm block runs in: torch.profiler for `torch` (events kept in memory, dropped), else none."""
    if instrument != "torch":
        return contextlib.nullcontext()
    import torch
    from torch.profiler import profile

    acts, kwargs = profiler_activities("cuda" if torch.cuda.is_available() else "cpu")
    return profile(activities=acts, record_shapes=False, with_stack=False, **kwargs)


@dataclasses.dataclass(frozen=True)
class Protocol:
    """The one description of a measurement protocol: what `measure()` runs, what `workbench.measure.power`
    simulates and what the regression gate (`workbench.compare.gate_stats`) calibrates against."""
    reps: int = 3
    """Repetitions (at least); each runs every arm once, in the order of `arm_order`."""
    steps: int = 4
    """Timed steps per arm per rep (batch = step mod nb)."""
    warmup_min: int = 2
    """Warmup steps at least (and at least one pass over the distinct batches, plus one)."""
    warmup_max: int = 12
    """Warmup steps at most, settled or not."""
    rep_warmup_max: int | None = None
    """Warmup steps at most in the timed reps (None: `warmup_max`); the discarded reps, which meet each arm's
    first-use transients, keep `warmup_max`. A run budget sets it to the fewest (`warmup_steps`): an arm whose steps
    vary more than `settle_pct` from one to the next never settles and would spend `warmup_max` steps every rep."""
    settle_pct: float = 2.0
    """Warmup ends when a step is within this % of the previous step on the same batch."""
    target_ci_pct: float | None = None
    """Add reps until the speedup's 95% CI half-width is under this % (None: exactly `reps`)."""
    budget_s: float | None = None
    """Stop adding reps when the comparison has run this long."""
    max_reps: int = 30
    """Reps at most when `target_ci_pct` or `budget_s` asks for more."""
    discard_reps: int = 1
    """Warm-up reps run first, timed, recorded (`Measurement.discarded`) and never in a statistic."""
    batches: int = 2
    """Distinct batches (step s uses batch s mod batches). `measure()` is handed the real count; this field is the
    design `workbench.measure.power` and the gate simulate."""
    arms: int = 2
    """Arms in the comparison (the first two are compared). `measure()` is handed the real arms; this field is the
    design `workbench.measure.power` and the gate simulate."""
    instrument: str = "none"
    """What the timed steps run under (`INSTRUMENTS`): none (NVTX only: every timing the workbench reports), or an
    instrument whose own effect is the measurement (torch: torch.profiler around each arm block; nsys: the CUDA
    profiler range around the reps)."""

    def __post_init__(self):
        if (self.reps < 1 or self.steps < 1 or self.warmup_min < 0 or self.warmup_max < self.warmup_min
                or (self.rep_warmup_max is not None and not self.warmup_min <= self.rep_warmup_max <= self.warmup_max)
                or self.discard_reps < 0 or self.batches < 1 or self.arms < 1 or self.instrument not in INSTRUMENTS):
            raise WorkbenchError(f"bad protocol: {self}")

    def warmup_steps(self, n_batches: int | None = None) -> int:
        """The fewest warmup steps per arm per rep: max(warmup_min, 2 x batches) when warmup_max allows (every batch
        once, then once more to compare), else warmup_max."""
        nb = self.batches if n_batches is None else n_batches
        return min(self.warmup_max, max(self.warmup_min, 2 * nb))

    def describe(self) -> dict:
        d = dataclasses.asdict(self)
        d["rule"] = (f"{self.discard_reps} warm-up rep(s) discarded; warmup: >= max(warmup_min, 2 nb) steps, until "
                     f"every batch's latest step is within {self.settle_pct}% of its previous step, "
                     f"<= {self.warmup_max}"
                     + (f" (<= {self.rep_warmup_max} in the timed reps)" if self.rep_warmup_max is not None else "")
                     + f"; arm order: Williams design (carryover-balanced), stopping under "
                     f"target_ci at whole cycles (never an odd R); "
                     f"pairs by (rep, step); unit of independence: the rep (t-interval on per-rep log ratios, "
                     f"verdict from {stats.MIN_UNITS} reps); every pair counts; outliers (listed, not dropped): "
                     f"|t - median(arm, batch)| > {stats.OUTLIER_K} x max(MAD, {stats.OUTLIER_FLOOR:.0%} of the median)")
        return d


class Session(_Protocol):
    def step(self, index: int, step: int):
        """Run one training step on batch `index`; returns a StepRecord (harness) with step_ms etc."""


@dataclasses.dataclass
class Warmup:
    arm: str
    rep: int
    steps: int
    settled: bool
    step_ms: list


@dataclasses.dataclass
class Measurement:
    samples: list[dict]
    """One dict per timed step: arm, rep, batch, step, step_ms, fwd_ms, bwd_ms, opt_ms, peak_mem_mib, loss, tokens,
    t_start_s, t_end_s (wall clock, for NVML windows)."""
    warmups: list[Warmup]
    windows: list[tuple]
    """(arm, rep, t_start_s, t_end_s) of every timed block."""
    failed: dict
    """arm -> the exception that stopped it (its later reps are skipped)."""
    reps: int
    stopped_by: str
    """reps | target_ci | budget | max_reps | failed"""
    protocol: Protocol
    n_batches: int
    discarded: list = dataclasses.field(default_factory=list)
    """The warm-up reps' timed steps (dicts like `samples`, rep -1, `discarded` True): recorded, never in a
    statistic."""

    def step_ms(self, arm: str) -> list[float]:
        return [s["step_ms"] for s in self.samples if s["arm"] == arm]


def williams_cycle(n_arms: int) -> int:
    """Reps in one cycle of the Williams design: n for an even number of arms, 2n for an odd one (1 for 1 arm)."""
    return 1 if n_arms <= 1 else (n_arms if n_arms % 2 == 0 else 2 * n_arms)


def arm_order(arms: list[str], rep: int) -> list[str]:
    """The order of rep `rep`: a Williams design. Row 0 is 0, 1, n-1, 2, n-2, ...; row r adds r mod n to every
    entry; for an odd n the next n rows are the first n reversed. Over one cycle (`williams_cycle`) every arm takes
    every position equally often and comes right before every other arm equally often (first-order carryover
    balanced). With 2 arms: A B, B A (as the rotation before)."""
    n = len(arms)
    if n <= 1:
        return list(arms)
    first, lo, hi = [0], 1, n - 1
    while len(first) < n:
        first.append(lo)
        lo += 1
        if len(first) < n:
            first.append(hi)
            hi -= 1
    r = rep % williams_cycle(n)
    row = [(x + r % n) % n for x in first]
    if r >= n:
        row = row[::-1]
    return [arms[i] for i in row]


def stop_every(protocol: Protocol, n_arms: int) -> int:
    """The granularity at which added reps may stop (`target_ci_pct`, `budget_s`, `max_reps`): a whole Williams
    cycle when `reps` covers one, else 2 (an even R)."""
    c = williams_cycle(n_arms)
    return c if c <= protocol.reps and c % 2 == 0 else 2


def floor_reps(protocol: Protocol, n_arms: int) -> int:
    """Reps `measure` runs at least when `target_ci_pct` or `budget_s` may stop it: `reps`, rounded up to a whole
    `stop_every`, at most `max_reps`."""
    every = stop_every(protocol, n_arms)
    return min(-(-protocol.reps // every) * every, max(protocol.max_reps, protocol.reps))


def _warmup(session: Session, nb: int, p: Protocol, arm: str, rep: int) -> Warmup:
    """Warm up until every distinct batch has settled: the latest step on each of the nb batches within
    settle_pct of that batch's previous step (so at least 2 nb steps), warmup_min steps at least, warmup_max at
    most (rep_warmup_max in a timed rep, rep >= 0, when set)."""
    times: list[float] = []
    need = max(p.warmup_min, 2 * nb)
    cap = p.warmup_max if rep < 0 or p.rep_warmup_max is None else p.rep_warmup_max
    settled = False
    i = 0
    while i < cap:
        rec = session.step(i % nb, i)
        times.append(rec.step_ms)
        i += 1
        if i >= need:
            ok = True
            for j in range(1, nb + 1):  # the last nb steps: one per batch, each against its batch's previous
                prev = times[-j - nb]
                ok = ok and prev > 0 and abs(times[-j] - prev) <= p.settle_pct / 100 * prev
            if ok:
                settled = True
                break
    return Warmup(arm=arm, rep=rep, steps=i, settled=settled, step_ms=times)


def measure(arms: list[str], open_session: Callable[[str], ContextManager[Session]], n_batches: int,
            protocol: Protocol, *, baseline: str | None = None, optimized: str | None = None,
            on_sample: Callable[[dict], None] | None = None, on_warmup: Callable[[Warmup], None] | None = None,
            on_rep: Callable[[int, dict | None], None] | None = None) -> Measurement:
    """Time `arms` under `protocol`. `open_session(arm)` is a context manager that applies the arm (and reverts it on
    exit) and yields an object with `step(batch_index, step) -> StepRecord`. The `discard_reps` warm-up reps run
    first (rep -1: their warmups reach `on_warmup`, their steps go to `Measurement.discarded`, never to `on_sample`
    or a statistic). A failing arm is recorded in `failed` and left out of later reps; KeyboardInterrupt
    propagates."""
    p = protocol
    baseline = baseline or arms[0]
    optimized = optimized or (arms[1] if len(arms) > 1 else None)
    samples: list[dict] = []
    discarded: list[dict] = []
    warmups: list[Warmup] = []
    windows: list[tuple] = []
    failed: dict = {}
    every = stop_every(p, len(arms))

    def run_rep(rep: int, order: list[str], sink: list, on_step) -> None:
        for arm in order:
            if arm in failed:
                continue
            try:
                with open_session(arm) as session, _block_instrument(p.instrument):
                    w = _warmup(session, n_batches, p, arm, rep)
                    warmups.append(w)
                    if on_warmup is not None:
                        on_warmup(w)
                    w0 = time.time()
                    for s in range(p.steps):
                        assert_uninstrumented("torch.profiler" if p.instrument == "torch" else None)
                        ts = time.time()
                        rec = session.step(s % n_batches, s)
                        sample = {"arm": arm, "rep": rep, "batch": s % n_batches, "step": s,
                                  "step_ms": rec.step_ms, "fwd_ms": rec.fwd_ms, "bwd_ms": rec.bwd_ms,
                                  "opt_ms": rec.opt_ms, "peak_mem_mib": rec.peak_mem_mib, "loss": rec.loss,
                                  "tokens": rec.tokens, "t_start_s": ts, "t_end_s": time.time()}
                        sample.update(getattr(rec, "extra", None) or {})  # e.g. rank_step_ms (distributed)
                        if rep < 0:
                            sample["discarded"] = True
                        sink.append(sample)
                        if on_step is not None:
                            on_step(sample)
                    if rep >= 0:
                        windows.append((arm, rep, w0, time.time()))
            except (KeyboardInterrupt, InstrumentActive):
                raise
            except Exception as e:  # noqa: BLE001 - one arm's failure must not stop the others
                failed[arm] = e

    t0 = time.perf_counter()
    with _run_instrument(p.instrument):  # nsys: every rep inside the capture range
        for _ in range(p.discard_reps):
            run_rep(-1, arm_order(arms, 0)[::-1], discarded, None)
        rep = 0
        stopped_by = "reps"
        last_rep_s = 0.0
        while True:
            t_rep = time.perf_counter()
            run_rep(rep, arm_order(arms, rep), samples, on_sample)
            rep += 1
            last_rep_s = time.perf_counter() - t_rep
            elapsed = time.perf_counter() - t0
            if baseline in failed or (optimized is not None and optimized in failed) or len(failed) == len(arms):
                stopped_by = "failed"
                if on_rep is not None:
                    on_rep(rep, None)
                break
            cmp = None
            if optimized is not None:
                cmp = paired_comparison(samples, baseline, optimized)
            if on_rep is not None:
                on_rep(rep, cmp)
            if rep < p.reps:
                continue
            if p.target_ci_pct is None and p.budget_s is None:
                stopped_by = "reps"
                break
            if rep % every and rep < p.max_reps:  # added reps stop at whole cycles of the order: never an odd R
                continue
            if p.target_ci_pct is not None and cmp is not None and cmp["half_width_pct"] is not None \
                    and cmp["half_width_pct"] <= p.target_ci_pct:
                stopped_by = "target_ci"
                break
            if p.budget_s is not None and elapsed + every * last_rep_s > p.budget_s:
                stopped_by = "budget"
                break
            if rep + every > p.max_reps:
                stopped_by = "max_reps"
                break
    return Measurement(samples=samples, warmups=warmups, windows=windows, failed=failed, reps=rep,
                       stopped_by=stopped_by, protocol=p, n_batches=n_batches, discarded=discarded)


def flag_outliers(samples: list[dict]) -> None:
    """Mark each sample `outlier` (True/False) by the rule of `workbench.measure.stats` within its (arm, batch) cell."""
    cells: dict = {}
    for s in samples:
        cells.setdefault((s["arm"], s["batch"]), []).append(s)
    for cell in cells.values():
        mask = stats.outlier_mask([s["step_ms"] for s in cell])
        for s, m in zip(cell, mask):
            s["outlier"] = bool(m)


PAIRED_ON = ("rep", "step")
"""What pairs two arms' samples in an A/B: the same step (so the same batch) of the same rep."""


def pair_keys(comparison: str) -> tuple[str, ...]:
    """The sample fields that pair a comparison's arms: `PAIRED_ON`, or the rep alone for the callback's comparison
    (`results.CALLBACK_COMPARISON`: its pair is two adjacent steps of a user's run, different batches)."""
    return ("rep",) if comparison == CALLBACK_COMPARISON else PAIRED_ON


def pairs(samples: list[dict], baseline: str, other: str, on: tuple[str, ...] = PAIRED_ON) -> tuple[list, list, list]:
    """(baseline step_ms, other step_ms, rep) paired by the fields `on` (rep first), every pair (outliers included).
    Two samples of one arm under one key raise ValueError (a pairing that would drop one)."""
    b, o = {}, {}
    for s in samples:
        side = b if s["arm"] == baseline else o if s["arm"] == other else None
        if side is None:
            continue
        k = tuple(s[f] for f in on)
        if k in side:
            raise ValueError(f"arm {s['arm']!r} has two samples at {dict(zip(on, k))}: pairing on {on} is ambiguous")
        side[k] = s
    keys = sorted(set(b) & set(o))
    return [b[k]["step_ms"] for k in keys], [o[k]["step_ms"] for k in keys], [k[0] for k in keys]


def paired_comparison(samples: list[dict], baseline: str, other: str, on: tuple[str, ...] = PAIRED_ON) -> dict:
    """The speedup of `other` over `baseline` with its 95% CI and verdict (`workbench.measure.stats.paired_speedup`, the
    rep as the unit), from every pair (`pairs` on the fields `on`). Outliers (`flag_outliers`) are listed as a
    diagnostic (`outlier_steps`: arm, rep, step, batch, step_ms), never dropped; `variance_components` are the two
    arms' rep / batch / step SDs."""
    flag_outliers(samples)
    b, o, reps = pairs(samples, baseline, other, on)
    res = stats.paired_speedup(b, o, reps)
    flagged = [s for s in samples if s["arm"] in (baseline, other) and s.get("outlier")]
    res["outlier_pairs"] = len({(s["rep"], s["step"]) for s in flagged})
    res["outlier_steps"] = [{k: s[k] for k in ("arm", "rep", "step", "batch", "step_ms")} for s in flagged]
    res["variance_components"] = stats.variance_components([s for s in samples if s["arm"] in (baseline, other)])
    return res
