"""workbench.measure.engine (the one measurement loop) and the equivalence criterion's chunked fp32 reference.

End-to-end probes run `python -m workbench.ab` in-process with the fake opt modules (tests/fixtures/fake_opts.py),
whose packing arms call `fake_opts.PROBES` inside every step; `measure()` itself is driven by scripted sessions
(no model) with known step times."""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import random
import time
import types

import pytest
import torch

from workbench import ab
from workbench.measure import engine, equivalence, stats
from workbench.cli import run_main
from workbench.measure.engine import Protocol
from workbench.errors import WorkbenchError

FAST = ["--tokens", "64", "--warmup", "0", "--warmup-max", "0", "--device", "cpu"]


def _digest(batch) -> str:
    return hashlib.sha1(batch.input_ids.cpu().numpy().tobytes()).hexdigest()[:12]


class _Phases:
    """Which pass of `workbench.ab` is running: `measure` (timed steps; `warmup` inside it) or outside it (the
    equivalence steps before, the counted pass after). Wraps `engine.measure` and `engine._warmup`, and counts
    each arm's sessions during timing (its rep)."""

    def __init__(self, monkeypatch, fakes):
        self.phase = "equivalence"
        self.arm_rep: dict = {}
        self.current = None
        self.applied_in_measure: list = []
        real_measure, real_warmup = engine.measure, engine._warmup

        def measure(arms, open_session, *a, **kw):
            self.phase = "timed"
            n0 = len(fakes.APPLIED)

            @contextlib.contextmanager
            def counting(label):
                self.arm_rep[label] = self.arm_rep.get(label, -1) + 1
                self.current = (label, self.arm_rep[label])
                with open_session(label) as s:
                    yield s
            try:
                return real_measure(arms, counting, *a, **kw)
            finally:
                self.applied_in_measure = list(fakes.APPLIED[n0:])
                self.phase = "counted"

        def warmup(*a, **kw):
            before, self.phase = self.phase, "warmup"
            try:
                return real_warmup(*a, **kw)
            finally:
                self.phase = before

        monkeypatch.setattr(engine, "measure", measure)
        monkeypatch.setattr(engine, "_warmup", warmup)


def _ab(capsys, argv):
    rc = run_main(ab.main, argv)
    out, err = capsys.readouterr()
    return rc, out, err


# --- end to end: what a timed step sees ---------------------------------------------------------------------

def test_timed_steps_run_with_no_instrument_and_the_counted_pass_with_one(capsys, tmp_path, monkeypatch, fakes):
    """Every timed step (inside the forward pass, where a dispatch mode would act) sees no instrument; the counted
    pass's steps see the sync counter's dispatch mode. Catches an instrument (the counter, a profiler, a
    sync-debug mode) left on during timing; the counted half proves the probe can see one."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    ph = _Phases(monkeypatch, fakes)
    seen = []
    fakes.PROBES.append(lambda opt, arm, batch: seen.append(
        (ph.phase, arm, engine.active_instruments(), len(_get_current_dispatch_mode_stack()))))
    rc, out, err = _ab(capsys, ["--opt", "packing", *FAST, "--steps", "2", "--batches", "2", "--reps", "2",
                                "--warmup", "1", "--warmup-max", "3", "--out", str(tmp_path)])
    assert rc == 0, err
    timed = [s for s in seen if s[0] == "timed"]
    counted = [s for s in seen if s[0] == "counted"]
    assert len(timed) == 3 * 2 * 2  # arms x reps x steps
    assert len(counted) == 3 * 2  # arms x one step per batch
    assert any(s[0] == "warmup" for s in seen) and any(s[0] == "equivalence" for s in seen)
    for phase, arm, instruments, modes in timed:
        assert instruments == [] and modes == 0, (arm, instruments)
    for phase, arm, instruments, modes in counted:
        assert modes >= 1 and any(i.startswith("dispatch mode") for i in instruments), (arm, instruments)


def test_counted_and_timed_passes_use_the_same_batches(capsys, tmp_path, monkeypatch, fakes):
    """The sync counts describe the batches that were timed, and every arm is timed on the same batch sequence
    in every rep (what pairs by (rep, step) assume). Catches a counted pass on other (e.g. re-drawn) batches, an
    arm given other batches, or a sequence that differs between reps or arms."""
    ph = _Phases(monkeypatch, fakes)
    calls = []
    fakes.PROBES.append(lambda opt, arm, batch: calls.append((ph.phase, ph.current, arm, _digest(batch))))
    rc, out, err = _ab(capsys, ["--opt", "packing", *FAST, "--steps", "3", "--batches", "2", "--reps", "2",
                                "--lengths", "uniform:4:24", "--out", str(tmp_path)])
    assert rc == 0, err
    timed = [c for c in calls if c[0] == "timed"]
    counted = [c for c in calls if c[0] == "counted"]
    assert len({d for *_, d in counted}) == 2  # two distinct batches, told apart by the digest
    assert {d for *_, d in timed} == {d for *_, d in counted}
    per_session: dict = {}
    for _, (label, rep), arm, d in timed:
        assert label == arm
        per_session.setdefault((arm, rep), []).append(d)
    seqs = set(map(tuple, per_session.values()))
    assert len(per_session) == 3 * 2 and len(seqs) == 1, per_session  # every arm, every rep: one sequence
    (seq,) = seqs
    assert len(seq) == 3 and seq[0] == seq[2] != seq[1]  # batch = step mod nb: b0 b1 b0
    per_arm_counted: dict = {}
    for _, _, arm, d in counted:
        per_arm_counted.setdefault(arm, []).append(d)
    assert all(v == list(seq[:2]) for v in per_arm_counted.values())  # one step per batch, in order
    # and the equivalence steps ran on the first timed batch
    assert {d for p, *_, d in calls if p == "equivalence"} == {seq[0]}


# --- arm order ----------------------------------------------------------------------------------------------

def test_arm_order_williams_rows():
    """3 arms: the rotation's 3 rows, then the same reversed (a cycle of 6); 4 arms: 0 1 3 2 plus r."""
    assert [engine.arm_order(["A", "B", "C"], r) for r in range(7)] == \
        [["A", "B", "C"], ["B", "C", "A"], ["C", "A", "B"], ["C", "B", "A"], ["A", "C", "B"], ["B", "A", "C"],
         ["A", "B", "C"]]
    assert [engine.arm_order(list("ABCD"), r) for r in range(2)] == [list("ABDC"), list("BCAD")]
    assert [engine.arm_order(["A", "B"], r) for r in range(3)] == [["A", "B"], ["B", "A"], ["A", "B"]]


def test_arm_order_rotates_end_to_end(capsys, tmp_path, monkeypatch, fakes):
    """The applies during timing (equivalence and counted applies excluded) follow the Williams rows A B C, B C A,
    C A B (no discarded rep on a CPU). Catches a fixed order (drift and first-arm costs would then fall on one arm)."""
    ph = _Phases(monkeypatch, fakes)
    rc, out, err = _ab(capsys, ["--opt", "packing", *FAST, "--steps", "1", "--batches", "1", "--reps", "3",
                                "--out", str(tmp_path)])
    assert rc == 0, err
    A, B, C = (("packing", a) for a in ("rebuild", "cached", "precomputed"))
    assert ph.applied_in_measure == [A, B, C, B, C, A, C, A, B]
    assert fakes.APPLIED == [A, B, C] + ph.applied_in_measure + [A, B, C]  # equivalence, timing, counted pass


# --- measure() with scripted sessions ---------------------------------------------------------------------------

class Script:
    """Sessions whose step times come from `times(arm, rep, k, index)` (k: the step's number within the session:
    warmup steps first). Records every session and step; `clock` (if given) advances by each step's time."""

    def __init__(self, times, clock=None, fail=None):
        self.times, self.clock, self.fail = times, clock, fail or {}
        self.sessions: list = []
        self.steps: list = []
        self.rep: dict = {}

    def open(self, arm):
        rep = self.rep[arm] = self.rep.get(arm, -1) + 1
        self.sessions.append((arm, rep))
        script = self

        class S:
            k = 0

            def step(self, index, step):
                if (arm, rep) in script.fail and self.k == script.fail[(arm, rep)]:
                    raise RuntimeError(f"{arm} broke")
                ms = script.times(arm, rep, self.k, index)
                script.steps.append((arm, rep, self.k, index, step, ms))
                self.k += 1
                if script.clock is not None:
                    script.clock.t += ms / 1e3
                return types.SimpleNamespace(step_ms=ms, fwd_ms=ms / 3, bwd_ms=ms / 2, opt_ms=ms / 6,
                                             peak_mem_mib=float("nan"), loss=1.0, tokens=64)
        return contextlib.nullcontext(S())


def _measure(script, arms, nb, p, **kw):
    warmups = []
    m = engine.measure(arms, script.open, nb, p, on_warmup=warmups.append, **kw)
    assert m.warmups == warmups
    return m


def test_warmup_stops_when_every_batch_is_within_settle_pct_of_its_previous_step():
    # batches 0 and 1 alternate (100, 90, 50, 49, 50.4, 49.1, ...): step 4 (batch 0) is 0.8% from step 2, but batch 1
    # (step 3: 49 against 90) has not settled; step 5 (batch 1) is 0.2% from step 3: both settled after 6 steps
    w_times = [100.0, 90.0, 50.0, 49.0, 50.4, 49.1, 50.0, 49.0]
    s = Script(lambda arm, rep, k, i: w_times[k] if k < len(w_times) else 10.0)
    m = _measure(s, ["A"], 2, Protocol(discard_reps=0, reps=1, steps=2, warmup_min=0, warmup_max=8, settle_pct=2.0))
    (w,) = m.warmups
    assert (w.steps, w.settled) == (6, True) and w.step_ms == w_times[:6]
    # the timed steps come after the warmup, batch = step mod nb, from step 0
    assert [(k, i, st) for arm, rep, k, i, st, ms in s.steps][6:] == [(6, 0, 0), (7, 1, 1)]
    assert [x["step_ms"] for x in m.samples] == [w_times[6], w_times[7]]


def test_warmup_rechecks_every_batch_not_only_the_last_step():
    """Batch 0 settles at once, batch 1 keeps getting 10% faster: the warmup must not call it settled (the rule
    before compared only the last step with its batch's previous one, so a settled batch 0 ended the warmup while
    batch 1 was still moving)."""
    def t(arm, rep, k, i):
        return 50.0 if i == 0 else 100.0 * 0.9 ** k
    m = _measure(Script(t), ["A"], 2, Protocol(discard_reps=0, reps=1, steps=1, warmup_min=0, warmup_max=9))
    assert (m.warmups[0].steps, m.warmups[0].settled) == (9, False)
    # and once batch 1 stops moving, it settles
    m = _measure(Script(lambda arm, rep, k, i: 50.0 if i == 0 else (100.0 * 0.9 ** k if k < 5 else 40.0)), ["A"], 2,
                 Protocol(discard_reps=0, reps=1, steps=1, warmup_min=0, warmup_max=12))
    assert m.warmups[0].settled and m.warmups[0].steps == 8


@pytest.mark.parametrize("nb", [1, 2, 3])
def test_warmup_runs_at_least_two_passes_over_every_batch(nb):
    """Constant step times settle at once, yet warmup takes 2 nb steps (every batch once, then every batch compared
    with its previous step). Catches a warmup that stops before it has re-checked every batch."""
    s = Script(lambda arm, rep, k, i: 10.0)
    m = _measure(s, ["A"], nb, Protocol(discard_reps=0, reps=1, steps=1, warmup_min=0, warmup_max=10))
    (w,) = m.warmups
    assert (w.steps, w.settled) == (2 * nb, True)
    # warmup_min above that wins
    m = _measure(Script(lambda arm, rep, k, i: 10.0), ["A"], nb, Protocol(discard_reps=0, reps=1, steps=1, warmup_min=6,
                                                                          warmup_max=10))
    assert (m.warmups[0].steps, m.warmups[0].settled) == (6, True)


def test_warmup_stops_at_warmup_max_when_it_never_settles():
    s = Script(lambda arm, rep, k, i: 100.0 * 1.1 ** k)  # every step 10% slower than the last
    m = _measure(s, ["A", "B"], 2, Protocol(discard_reps=0, reps=2, steps=1, warmup_min=0, warmup_max=7))
    assert len(m.warmups) == 4
    assert all(w.steps == 7 and w.settled is False for w in m.warmups)
    assert [(w.arm, w.rep) for w in m.warmups] == [("A", 0), ("B", 0), ("B", 1), ("A", 1)]
    # no warmup at all when warmup_max is 0
    m = _measure(Script(lambda *a: 10.0), ["A"], 2, Protocol(discard_reps=0, reps=1, steps=1, warmup_min=0, warmup_max=0))
    assert (m.warmups[0].steps, m.warmups[0].settled) == (0, False)



def test_rep_warmup_max_caps_the_timed_reps_and_leaves_the_discarded_rep_its_warmup_max():
    """An arm that never settles (every step 10% off the last) warms up `warmup_max` steps in the discarded rep and
    `rep_warmup_max` in each timed rep; without it (the negative control) every rep spends `warmup_max`."""
    s = Script(lambda arm, rep, k, i: 100.0 * 1.1 ** k)
    p = Protocol(discard_reps=1, reps=2, steps=1, warmup_min=0, warmup_max=8)
    assert p.warmup_steps() == 4  # 2 batches, each twice
    m = _measure(s, ["A", "B"], 2, dataclasses.replace(p, rep_warmup_max=p.warmup_steps()))
    assert sorted((w.rep, w.steps) for w in m.warmups) == [(-1, 8), (-1, 8), (0, 4), (0, 4), (1, 4), (1, 4)]
    assert not any(w.settled for w in m.warmups)
    m = _measure(Script(lambda arm, rep, k, i: 100.0 * 1.1 ** k), ["A", "B"], 2, p)
    assert {w.steps for w in m.warmups} == {8}
    with pytest.raises(WorkbenchError, match="bad protocol"):
        Protocol(warmup_min=2, warmup_max=8, rep_warmup_max=9)

def test_an_outlier_step_is_listed_and_never_dropped_from_the_estimate():
    """One 5x step of the optimized arm: listed (sample["outlier"], `outlier_steps`), and still in the estimate: every
    pair counts. Catches an engine that drops steps it does not like (dropping the slow ones biased every A/A)."""
    rng = random.Random(1)
    noise = {(a, r, k): 1 + rng.uniform(-0.005, 0.005) for a in "AB" for r in range(4) for k in range(4)}

    def times(arm, rep, k, i):
        base = 10.0 if arm == "A" else 8.0
        return base * noise[(arm, rep, k)] * (5.0 if (arm, rep, k) == ("B", 1, 2) else 1.0)
    s = Script(times)
    m = _measure(s, ["A", "B"], 1, Protocol(discard_reps=0, reps=4, steps=4, warmup_min=0, warmup_max=0))
    c = engine.paired_comparison(m.samples, "A", "B")
    flagged = [(x["arm"], x["rep"], x["step"]) for x in m.samples if x["outlier"]]
    assert flagged == [("B", 1, 2)]
    assert c["outlier_pairs"] == 1 and [(o["arm"], o["rep"], o["step"]) for o in c["outlier_steps"]] == flagged
    assert c["n_pairs"] == 16 and c["n_units"] == 4
    b, o, reps = engine.pairs(m.samples, "A", "B")
    ref = stats.paired_speedup(b, o, reps)
    assert c["speedup"] == ref["speedup"] and c["ci95"] == ref["ci95"]
    assert c["speedup"] < 1.2  # the 5x step pulls rep 1's ratio down: it is in the estimate
    assert len(b) == 16 and max(o) > 30


def test_target_ci_stops_when_the_noise_is_small_and_max_reps_when_unreachable():
    rng = random.Random(0)
    quiet = Script(lambda arm, rep, k, i: (10.0 if arm == "A" else 9.0) * (1 + rng.uniform(-0.001, 0.001)))
    m = _measure(quiet, ["A", "B"], 2, Protocol(discard_reps=0, reps=2, steps=4, warmup_min=0, warmup_max=0, target_ci_pct=2.0))
    assert (m.stopped_by, m.reps) == ("target_ci", 2)
    rng2 = random.Random(0)
    loud = Script(lambda arm, rep, k, i: 10.0 * (1 + rng2.uniform(-0.5, 0.5)))
    m = _measure(loud, ["A", "B"], 2, Protocol(discard_reps=0, reps=2, steps=2, warmup_min=0, warmup_max=0, target_ci_pct=0.01,
                                               max_reps=5))
    assert (m.stopped_by, m.reps) == ("max_reps", 4)  # max_reps 5, but never an odd R
    assert len(m.step_ms("A")) == len(m.step_ms("B")) == 4 * 2
    # without a target (nor a budget), exactly `reps`
    m = _measure(Script(lambda *a: 10.0), ["A", "B"], 1, Protocol(discard_reps=0, reps=3, steps=1, warmup_min=0, warmup_max=0))
    assert (m.stopped_by, m.reps) == ("reps", 3)


def test_budget_stops_adding_reps(monkeypatch):
    """A fake clock advanced by the scripted step times: 2 arms x 2 steps x 10 ms = 40 ms per rep against a
    budget of 100 ms. Catches a budget that is ignored (max_reps) or overrun by a rep it could foresee."""
    clock = types.SimpleNamespace(t=1000.0)
    monkeypatch.setattr(engine, "time", types.SimpleNamespace(perf_counter=lambda: clock.t, time=time.time))
    rng = random.Random(0)
    s = Script(lambda arm, rep, k, i: 10.0 * (1 + rng.uniform(-0.3, 0.3) * 0.01), clock=clock)
    p = Protocol(discard_reps=0, reps=1, steps=2, warmup_min=0, warmup_max=0, target_ci_pct=1e-6, budget_s=0.1, max_reps=30)
    t0 = clock.t
    m = _measure(s, ["A", "B"], 2, p)
    assert m.stopped_by == "budget"
    assert 1 <= m.reps < 30
    assert clock.t - t0 <= 0.1 + 1e-9  # the next rep would have run past it
    assert clock.t - t0 + 0.04 > 0.1  # and stopping earlier would have left a whole rep of budget unused


def test_a_failing_arm_is_recorded_and_skipped_in_later_reps():
    s = Script(lambda arm, rep, k, i: 10.0, fail={("C", 0): 1})  # C fails at its second step of rep 0
    m = _measure(s, ["A", "B", "C"], 1, Protocol(discard_reps=0, reps=3, steps=2, warmup_min=0, warmup_max=0))
    assert list(m.failed) == ["C"] and "C broke" in str(m.failed["C"])
    assert [x for x in s.sessions if x[0] == "C"] == [("C", 0)]  # never opened again
    assert m.stopped_by == "reps" and m.reps == 3
    assert len(m.step_ms("A")) == len(m.step_ms("B")) == 6 and len(m.step_ms("C")) == 1
    # the optimized arm failing stops the comparison
    s = Script(lambda arm, rep, k, i: 10.0, fail={("B", 0): 0})
    m = _measure(s, ["A", "B"], 1, Protocol(discard_reps=0, reps=3, steps=2, warmup_min=0, warmup_max=0))
    assert m.stopped_by == "failed" and m.reps == 1 and list(m.failed) == ["B"]


def test_keyboard_interrupt_and_an_instrument_propagate():
    def ctrl_c(arm, rep, k, i):
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        _measure(Script(ctrl_c), ["A", "B"], 1, Protocol(discard_reps=0, reps=1, steps=1, warmup_min=0, warmup_max=0))
    from torch.utils._python_dispatch import TorchDispatchMode

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))
    with Mode(), pytest.raises(engine.InstrumentActive, match="dispatch mode: Mode"):
        _measure(Script(lambda *a: 10.0), ["A", "B"], 1, Protocol(discard_reps=0, reps=1, steps=1, warmup_min=0, warmup_max=0))
    assert engine.active_instruments() == []


def test_aa_sessions_with_rep_effects_ci_contains_one_at_the_nominal_rate():
    """Scripted A/A sessions with a block effect per arm per rep (the shared effect that makes the rep the unit):
    the 95% CI contains 1 in about 95% of 200 seeded runs (binomial 3 SE: >= 0.904). The same runs analysed with
    pairs as the unit (the retired rule) cover far less: the negative control. The 10% case proves the same setup
    detects a real difference."""
    contains = contains_iid = 0
    for seed in range(200):
        rng = random.Random(seed)
        block = {}

        def t(arm, rep, k, i, rng=rng, block=block):
            if (arm, rep) not in block:
                block[(arm, rep)] = rng.gauss(0, 0.01)
            return 10.0 * (1 + block[(arm, rep)] + rng.gauss(0, 0.002))
        m = _measure(Script(t), ["A", "A#2"], 2, Protocol(discard_reps=0, reps=5, steps=4, warmup_min=0, warmup_max=0))
        c = engine.paired_comparison(m.samples, "A", "A#2")
        assert c["n_pairs"] == 20 and c["n_units"] == 5
        contains += c["ci95"][0] < 1 < c["ci95"][1]
        b, o, _ = engine.pairs(m.samples, "A", "A#2")
        iid = stats.paired_speedup(b, o)  # every pair its own unit: wrong here
        contains_iid += iid["ci95"][0] < 1 < iid["ci95"][1]
    assert contains >= 181, contains
    assert contains_iid < 160, contains_iid
    # a real difference: 10% slower from the same noise is "slower"
    rng = random.Random(3)
    ab_ = Script(lambda arm, rep, k, i: rng.gauss(10.0, 0.2) * (1.1 if arm == "B" else 1.0))
    m = _measure(ab_, ["A", "B"], 2, Protocol(discard_reps=0, reps=4, steps=4, warmup_min=0, warmup_max=0))
    c = engine.paired_comparison(m.samples, "A", "B")
    assert c["ci95"][1] < 1 and c["verdict"] == "slower"


def test_samples_pair_by_rep_and_step():
    s = Script(lambda arm, rep, k, i: 10.0 + rep + (0.5 if arm == "B" else 0.0) + k / 10)
    m = _measure(s, ["A", "B"], 2, Protocol(discard_reps=0, reps=2, steps=3, warmup_min=0, warmup_max=0))
    assert [(x["rep"], x["step"], x["batch"]) for x in m.samples if x["arm"] == "A"] == \
        [(0, 0, 0), (0, 1, 1), (0, 2, 0), (1, 0, 0), (1, 1, 1), (1, 2, 0)]
    b, o, reps = engine.pairs(m.samples, "A", "B")
    assert [y - x for x, y in zip(b, o)] == pytest.approx([0.5] * 6)
    assert reps == [0, 0, 0, 1, 1, 1]
    with pytest.raises(ValueError, match="ambiguous"):  # on the rep alone, an A/B's steps would collide
        engine.pairs(m.samples, "A", "B", ("rep",))


def test_the_callback_comparison_pairs_on_the_rep_alone():
    from workbench.measure.results import CALLBACK_COMPARISON
    assert engine.pair_keys(CALLBACK_COMPARISON) == ("rep",)
    assert engine.pair_keys("packing") == engine.pair_keys("nvtx:packing") == engine.PAIRED_ON == ("rep", "step")
    adjacent = [dict(arm=a, rep=r, step=2 * r + (a == "B"), batch=2 * r + (a == "B"), step_ms=10.0 + (a == "B"))
                for r in range(3) for a in ("A", "B")]  # a pair = two adjacent steps, different batches
    assert engine.pairs(adjacent, "A", "B") == ([], [], [])  # the A/B's pairing finds none: the control
    assert engine.pairs(adjacent, "A", "B", ("rep",)) == ([10.0] * 3, [11.0] * 3, [0, 1, 2])


def _rotate_by_one(arms, rep):
    """The order before the Williams design: the negative control of the balance test."""
    k = rep % len(arms)
    return arms[k:] + arms[:k]


def _balance(order, arms, reps):
    """(position counts {arm: [count per position]}, adjacency counts {(a, b): times a came right before b})."""
    pos = {a: [0] * len(arms) for a in arms}
    adj: dict = {}
    for r in range(reps):
        o = order(arms, r)
        assert sorted(o) == sorted(arms)
        for i, a in enumerate(o):
            pos[a][i] += 1
        for a, b in zip(o, o[1:]):
            adj[(a, b)] = adj.get((a, b), 0) + 1
    return pos, adj


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6])
def test_arm_order_is_a_williams_design_balanced_for_position_and_carryover(n):
    """Over one cycle (n reps, 2n for odd n) every arm takes every position equally often and comes right before
    every other arm equally often. The rotation by one (the order before) fails the carryover half for n >= 3: with
    4 arms the baseline runs right before the compared arm in 3 of 4 reps."""
    arms = [chr(65 + i) for i in range(n)]
    cyc = engine.williams_cycle(n)
    assert cyc == (n if n % 2 == 0 else 2 * n)
    pos, adj = _balance(engine.arm_order, arms, cyc)
    assert all(len(set(c)) == 1 for c in pos.values()), pos
    assert len(adj) == n * (n - 1) and len(set(adj.values())) == 1, adj
    if n >= 3:
        _, old = _balance(_rotate_by_one, arms, cyc)
        assert len(set(old.get((a, b), 0) for a in arms for b in arms if a != b)) > 1
    if n == 4:
        _, old = _balance(_rotate_by_one, arms, 4)
        assert old[("A", "B")] == 3  # the offload headline's 75%
    assert engine.arm_order(["A", "B"], 0) == ["A", "B"] and engine.arm_order(["A", "B"], 1) == ["B", "A"]


def test_one_warmup_rep_is_discarded_timed_recorded_and_never_in_the_statistics():
    """rep -1 runs every arm (its own warmup and timed steps) before rep 0; its steps land in `discarded` with
    rep -1 and never in `samples` or the speedup: a 3x slow first rep of the optimized arm leaves the estimate at
    the true 1.25x."""
    def t(arm, rep, k, i):
        base = 10.0 if arm == "A" else 8.0
        return base * (3.0 if rep == 0 and arm == "B" else 1.0)  # Script's rep 0 is the discarded rep here
    s = Script(t)
    m = _measure(s, ["A", "B"], 2, Protocol(reps=4, steps=2, warmup_min=0, warmup_max=0))
    assert m.protocol.discard_reps == 1 and m.reps == 4
    assert sorted((x["arm"], x["rep"]) for x in m.discarded) == [("A", -1)] * 2 + [("B", -1)] * 2
    assert all(x["discarded"] for x in m.discarded) and max(x["step_ms"] for x in m.discarded) == 24.0
    assert {x["rep"] for x in m.samples} == {0, 1, 2, 3} and not any(x.get("discarded") for x in m.samples)
    assert sorted({(w.arm, w.rep) for w in m.warmups})[:2] == [("A", -1), ("A", 0)]
    c = engine.paired_comparison(m.samples, "A", "B")
    assert c["speedup"] == pytest.approx(1.25) and c["n_units"] == 4
    # the negative control: without the discard the slow rep is in the estimate
    m0 = _measure(Script(t), ["A", "B"], 2, Protocol(discard_reps=0, reps=4, steps=2, warmup_min=0, warmup_max=0))
    assert engine.paired_comparison(m0.samples, "A", "B")["speedup"] < 1.1


def test_target_ci_stops_at_an_even_r_and_whole_williams_cycles():
    """The CI is already tight after 3 reps, yet the engine runs a 4th (never an odd R); with 4 arms and reps >= 4 it
    stops at whole cycles of 4."""
    quiet = Script(lambda arm, rep, k, i: (10.0 if arm == "A" else 9.0) * (1 + 0.001 * ((rep * 7 + k) % 3)))
    m = _measure(quiet, ["A", "B"], 1, Protocol(discard_reps=0, reps=3, steps=2, warmup_min=0, warmup_max=0,
                                                target_ci_pct=5.0))
    assert (m.stopped_by, m.reps) == ("target_ci", 4)
    rng = random.Random(1)
    loud = Script(lambda arm, rep, k, i: 10.0 * (1 + rng.uniform(-0.3, 0.3)))
    m = _measure(loud, list("ABCD"), 1, Protocol(discard_reps=0, reps=4, steps=1, warmup_min=0, warmup_max=0,
                                                 target_ci_pct=0.01, max_reps=11))
    assert (m.stopped_by, m.reps) == ("max_reps", 8)
    assert engine.stop_every(Protocol(reps=4), 4) == 4 and engine.stop_every(Protocol(reps=3), 3) == 2


def test_floor_reps_is_what_a_spent_budget_runs():
    """With its budget spent at once (budget_s=0) the engine runs exactly `floor_reps` reps: 1 rep of 2 arms runs 2
    (whole cycles), 4 reps of 3 or 4 arms run 4, 3 reps of 4 arms run 4; max_reps caps it."""
    flat = Script(lambda arm, rep, k, i: 10.0)
    for reps, arms, max_reps, want in [(1, 2, 30, 2), (4, 3, 30, 4), (4, 4, 30, 4), (3, 4, 30, 4), (5, 4, 6, 6),
                                       (2, 3, 30, 2)]:
        p = Protocol(discard_reps=0, reps=reps, steps=1, warmup_min=0, warmup_max=0, budget_s=0.0, max_reps=max_reps)
        m = _measure(flat, list("ABCD")[:arms], 1, p)
        assert engine.floor_reps(p, arms) == m.reps == want, (reps, arms)


# --- equivalence: the chunked fp32 reference is the same function ----------------------------------------------

def _multi_doc_batch(vocab, tokens=96, seed=0):
    from workbench.step.data import make_batches
    (b,) = make_batches("uniform:5:30", tokens, 1, vocab, seed=seed)
    assert len(b.doc_lens) >= 4
    return b


def test_split_by_documents_keeps_every_token_in_order():
    from workbench.step.data import batch_from_lengths
    b = batch_from_lengths([7, 3, 12, 1, 9, 5], 100, seed=1)
    for parts in range(1, 8):
        chunks = equivalence.split_by_documents(b, parts)
        assert 1 <= len(chunks) <= min(parts, 6)
        for field in ("input_ids", "position_ids", "labels"):
            assert torch.equal(torch.cat([getattr(c, field) for c in chunks], dim=1), getattr(b, field)), field
        assert [n for c in chunks for n in c.doc_lens] == b.doc_lens
        assert sum(equivalence.targets(c) for c in chunks) == equivalence.targets(b)
        assert all(c.position_ids[0, 0] == 0 for c in chunks)  # cuts fall on document boundaries


def test_combined_chunks_equal_the_whole_batch_and_a_wrong_weight_fails():
    """The chunked fp32 reference (`reference_fp32` after an out-of-memory error) is the same function as the
    whole batch: loss and every LoRA gradient within the fp32 criterion. Catches token weights that are wrong
    (here: equal weights) or chunks that are not isolated documents."""
    from workbench.step.harness import train_step
    from workbench.step.models import build_model, lora_parameters

    torch.manual_seed(0)
    model = build_model("tiny-llama", dtype=torch.float32, seed=0)
    batch = _multi_doc_batch(model.config.vocab_size)

    def run_one(b):
        cap = equivalence.GradCapture(lora_parameters(model))
        rec = train_step(model, b, cap)
        return {"loss": rec.loss, "grads": cap.grads}

    whole = run_one(batch)
    chunks = equivalence.split_by_documents(batch, 3)
    assert len(chunks) == 3 and len({equivalence.targets(c) for c in chunks}) > 1
    res = [run_one(c) for c in chunks]
    n = [equivalence.targets(c) for c in chunks]
    combined = equivalence.combine(res, [k / sum(n) for k in n])
    e = equivalence.compare(combined, whole, torch.float32)
    assert e["equivalent"], e
    assert e["grad_max_rel_l2"] < 1e-5
    wrong = equivalence.combine(res, [1 / len(res)] * len(res))
    assert not equivalence.compare(wrong, whole, torch.float32)["equivalent"]

    # reference_fp32 does exactly this after an out-of-memory error on the whole batch
    calls = []

    def oom_on_whole(b):
        calls.append(b.tokens)
        if b.tokens == batch.tokens:
            raise torch.OutOfMemoryError("fake")
        return run_one(b)
    ref = equivalence.reference_fp32(model, oom_on_whole, batch)
    assert ref["chunks"] == 2 and calls[0] == batch.tokens and sum(calls[1:]) == batch.tokens
    assert equivalence.compare(ref, whole, torch.float32)["equivalent"]


def test_compare_is_relative_l2_per_tensor():
    """A small gradient 10.7% off in relative L2 fails in bf16 (rtol 2e-2), although every elementwise difference
    is tiny in absolute terms (an absolute tolerance would hide it); 1% off passes."""
    g = torch.Generator().manual_seed(0)
    big = torch.randn(256, generator=g)
    small = 1e-3 * torch.randn(256, generator=g)
    ref = {"loss": 3.0, "grads": {"big": big, "small": small}}
    off = {"loss": 3.0, "grads": {"big": big.clone(), "small": small * 1.107}}
    e = equivalence.compare(off, ref, torch.bfloat16)
    assert e["rtol"] == equivalence.RTOL[torch.bfloat16] == 2e-2
    assert e["grad_max_rel_l2"] == pytest.approx(0.107, rel=1e-3)
    assert e["grad_max_abs_diff"] < 1e-3  # small in absolute terms
    assert not e["equivalent"] and e["worst_grad"] == "small"
    ok = equivalence.compare({"loss": 3.0, "grads": {"big": big.clone(), "small": small * 1.01}}, ref, torch.bfloat16)
    assert ok["equivalent"]
