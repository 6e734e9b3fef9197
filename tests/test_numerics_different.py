"""Arms that compute a different function by design (forced-balanced routing, `opts/moe_balance.py`):
stated in the module's DIFFERENT_FUNCTION before any run, judged by `workbench.measure.numerics.judge_different`
((a) the arm's own code path with the change off is equivalent to the baseline, (b) its loss and LoRA gradients are
finite and non-zero), reported as "different function (stated)", and the run completes. Negative controls: a broken
off switch fails (a), a NaN loss fails (b), an undeclared routing change fails the normal check."""
import json
import types

import pytest
import torch

from workbench.cli import run_main

FAST = ["--tokens", "64", "--batches", "1", "--steps", "1", "--warmup", "0", "--warmup-max", "0", "--reps", "2",
        "--device", "cpu"]


# --- the judgement's parts --------------------------------------------------------------------------------------

def _step(loss, **grads):
    return {"loss": loss, "grads": {n: (None if v is None else torch.tensor(v, dtype=torch.float32))
                                    for n, v in grads.items()}}


OFF_OK = {"equivalent": True, "bitwise": True, "loss_abs_diff": 0.0, "grad_max_rel_l2": 0.0}


def test_judge_different_passes_and_each_check_can_fail():
    from workbench.measure import numerics
    base = _step(2.0, a=[0.0, 0.0], b=[1.0, 2.0], c=None)
    ok = numerics.judge_different(_step(2.5, a=[0.1, 0.0], b=[3.0, -1.0], c=None), base, OFF_OK, "why")
    assert ok["equivalent"] is False and ok["different_function"]["passed"] is True  # never called equivalent
    assert numerics.accepted(ok) and ok["grad_max_rel_l2"] > 0  # the difference the change makes is reported
    assert "different function (stated): why" in numerics.different_line(ok["different_function"])
    # (a) the change switched off differs from the baseline: the plumbing is wrong
    off_bad = {**OFF_OK, "equivalent": False, "bitwise": False, "loss_abs_diff": 0.3, "grad_max_rel_l2": 0.5}
    e = numerics.judge_different(_step(2.5, a=[0.1, 0.0], b=[3.0, -1.0], c=None), base, off_bad, "why")
    assert not numerics.accepted(e) and "change off it differs" in e["different_function"]["problems"][0]
    assert "DIFFERS from the baseline" in numerics.different_line(e["different_function"])
    # (b) a NaN / inf loss, a NaN gradient, a gradient path cut (zero where the baseline's is not), a missing one
    for bad, what in ((_step(float("nan"), a=[0.1, 0.0], b=[3.0, -1.0], c=None), "loss nan"),
                      (_step(float("inf"), a=[0.1, 0.0], b=[3.0, -1.0], c=None), "loss inf"),
                      (_step(2.5, a=[0.1, 0.0], b=[float("nan"), 1.0], c=None), "gradient b not finite"),
                      (_step(2.5, a=[0.1, 0.0], b=[0.0, 0.0], c=None), "gradient b zero"),
                      (_step(2.5, a=[0.1, 0.0], b=None, c=None), "gradient b missing"),
                      (_step(2.5, a=[0.1, 0.0], b=[1.0, 2.0, 3.0], c=None), "gradient b missing or of another shape")):
        e = numerics.judge_different(bad, base, OFF_OK, "why")
        assert not numerics.accepted(e) and any(what in p for p in e["different_function"]["problems"]), (what, e)
    assert numerics.judge_different(_step(float("nan"), b=[1.0, 1.0]), _step(2.0, b=[1.0, 1.0]), OFF_OK,
                                    "w")["different_function"]["loss_finite"] is False


def test_the_contract_states_it_and_checks_its_form():
    from workbench.opts import moe_balance, protocol
    assert protocol.problems(moe_balance) == []
    assert moe_balance.DIFFERENT_FUNCTION["off"] == {"balance": False}
    for bad in ({"why": "", "off": {"x": 1}}, {"why": "w", "off": {}}, {"why": "w"}, "a sentence"):
        mod = types.SimpleNamespace(**{k: getattr(moe_balance, k) for k in protocol.REQUIRED},
                                    DIFFERENT_FUNCTION=bad)
        assert any("DIFFERENT_FUNCTION is not" in p for p in protocol.problems(mod)), bad
    both = types.SimpleNamespace(**{k: getattr(moe_balance, k) for k in protocol.REQUIRED},
                                 DIFFERENT_FUNCTION=moe_balance.DIFFERENT_FUNCTION, NUMERICS_CHANGE="bf16")
    assert any("both" in p for p in protocol.problems(both))


def test_off_switch_runs_the_hooks_and_hands_the_routers_ids_back():
    from workbench import opts
    from workbench.opts import moe_balance
    from workbench.step import harness
    from workbench.step.data import make_batches
    from workbench.step.models import build_model
    m = build_model("tiny-qwen3-moe", device="cpu")
    b = make_batches("uniform:16:64", 128, 1, 128, seed=0)[0]
    opt = harness.make_optimizer(m, lr=0.0)
    routed = harness.train_step(m, b, opt).loss
    h = opts.apply(m, "moe_balance", "balanced", balance=False)
    assert h.info == {"experts_modules": 2, "balance": False}
    assert all(x._forward_pre_hooks for x in moe_balance.experts_modules(m))  # the same code path, change off
    assert harness.train_step(m, b, opt).loss == routed
    h.revert()
    h = opts.apply(m, "moe_balance", "balanced")
    assert harness.train_step(m, b, opt).loss != routed  # negative control: the change on
    h.revert()


# --- in the runner -----------------------------------------------------------------------------------------------

def test_balanced_run_completes_as_a_stated_different_function(capsys, tmp_path):
    from workbench import ab
    rc = run_main(ab.main, ["--opt", "moe_balance", *FAST, "--out", str(tmp_path / "run")])
    out, err = capsys.readouterr()
    s = json.loads(out.strip().splitlines()[-1])
    assert rc == 0, err[-3000:]
    c = s["comparisons"][0]
    assert c["status"] == "ok" and c["errors"] == [] and s["failures"] == []
    assert c["equivalent"] is False and c["optimized"]["equivalent"] is False  # not called equivalent
    df = c["different_function"]["balanced"]
    assert df["passed"] and df["off_path_equivalent"] and df["off_path"]["bitwise"] is True
    assert c["optimized"]["different_function"] == df and c["numerics_change"] == {}
    assert "different fn (stated)" in out
    assert "balanced: different function (stated): moe_balance: balanced sends" in out
    assert "complete: 1/1 comparisons, every other arm equivalent; different function (stated): moe_balance: balanced" \
        in out
    assert "equivalence balanced (change off): ok (bitwise True" in err
    import pandas as pd
    df_rows = pd.read_csv(tmp_path / "run" / "results.csv")
    got = df_rows[df_rows.metric == "different_function_passed"]
    assert list(got.arm) == ["balanced"] and list(got.value) == [1]


class _Writer:
    """The runner's writer, in memory (the equivalence phase alone)."""

    def __init__(self, tmp_path):
        self.rows, self.tmp = [], tmp_path

    def add(self, *a, **k):
        self.rows.append(a)

    def add_sample(self, *a, **k):
        pass

    def flush(self):
        pass

    def path(self, *parts):
        return str(self.tmp.joinpath(*parts))


def _judged(tmp_path):
    """The moe_balance comparison's build, runnable-arms, equivalence and summary phases (no timing): its
    `balanced` judgement and the runner's failures."""
    from workbench.ab.cli import CPU_DEFAULTS, parse_args
    from workbench.ab.planner import plan
    from workbench.ab.runner import Runner
    dev = torch.device("cpu")
    a = parse_args(["--opt", "moe_balance", *FAST]).resolved(dev, CPU_DEFAULTS["_run"])
    r = Runner(a, dev, _Writer(tmp_path))
    c = r.phase_build(plan(a, dev)[0], 1, 1)
    r.phase_runnable_arms(c)
    r.phase_equivalence(c)
    r.phase_summary(c)
    return c.equiv["balanced"], r.failures


def test_a_broken_off_switch_fails_check_a(monkeypatch, tmp_path):
    from workbench.opts import moe_balance
    real = moe_balance.apply
    monkeypatch.setattr(moe_balance, "apply", lambda model, arm, balance=True, **kw: real(model, arm, **kw))
    e, failures = _judged(tmp_path)
    assert e["different_function"]["off_path_equivalent"] is False and not e["different_function"]["passed"]
    assert any("arm balanced: different function (stated)" in f and "DIFFERS from the baseline" in f
               for f in failures), failures


def test_a_nan_loss_fails_check_b(monkeypatch, tmp_path):
    from workbench.opts import moe_balance
    real = moe_balance.apply

    def nan_when_balanced(model, arm, balance=True, **kw):
        h = real(model, arm, balance=balance, **kw)
        if arm == "balanced" and balance:
            hooks = [x.register_forward_hook(lambda mod, args, out: out * float("nan"))
                     for x in moe_balance.experts_modules(model)]
            h.undo += [x.remove for x in hooks]
        return h
    monkeypatch.setattr(moe_balance, "apply", nan_when_balanced)
    e, failures = _judged(tmp_path)
    df = e["different_function"]
    assert df["off_path_equivalent"] is True and df["loss_finite"] is False and not df["passed"]
    assert any("FAILED: loss nan" in f for f in failures), failures


def test_an_undeclared_routing_change_fails_the_normal_check(monkeypatch, tmp_path):
    from workbench.opts import moe_balance
    monkeypatch.delattr(moe_balance, "DIFFERENT_FUNCTION")
    e, failures = _judged(tmp_path)
    assert "different_function" not in e and e["equivalent"] is False
    assert any("arm balanced is not equivalent to routed" in f for f in failures), failures
