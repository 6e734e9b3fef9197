"""workbench.fidelity on CPU: one Trainer step and one harness step compute the same loss and LoRA gradients (and a
different batch does not), the rep-level ratio CI against a hand computation, the trace path, and the CLI."""
import json
import math
import subprocess
import sys

import pytest
import torch

from conftest import run_cli
from workbench import fidelity
from workbench.step.data import make_batches, to_device
from workbench.step.harness import enable_checkpointing
from workbench.step.models import build_model, lora_resetter


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    model = build_model("tiny-qwen3", lora_rank=4)
    enable_checkpointing(model)
    batches = make_batches("uniform:10:60", 128, 2, model.config.vocab_size, seed=0)
    reset = lora_resetter(model)
    return model, batches, to_device(batches, "cpu"), reset, str(tmp_path_factory.mktemp("trainer"))


def test_trainer_and_harness_agree(setup):
    model, cpu, dev, reset, out = setup
    e = fidelity.one_step_agreement(model, cpu[0], dev[0], lr=1e-4, cuda=False, seed=0, out_dir=out, reset=reset)
    assert e["equivalent"], e
    assert e["loss_rel_diff"] <= e["rtol"] and e["grad_max_rel_l2"] <= e["rtol"]
    assert e["dtype"] == "torch.float32"
    assert "mismatched_grads" not in e  # Trainer's hooks saw every LoRA gradient


def test_a_different_batch_is_not_equivalent(setup):
    """Negative control: Trainer fed batch 1 while the harness runs batch 0."""
    model, cpu, dev, reset, out = setup
    e = fidelity.one_step_agreement(model, cpu[0], dev[0], lr=1e-4, cuda=False, seed=0, out_dir=out, reset=reset,
                                    trainer_batch=cpu[1])
    assert not e["equivalent"]
    assert e["grad_max_rel_l2"] > e["rtol"]


def test_trainer_leaves_the_model_as_built(setup):
    """accelerate wraps forward; run_trainer puts it back, so the harness and the next Trainer see the same model."""
    model, cpu, _, reset, out = setup
    before = dict(model.__dict__)
    ms, loss = fidelity.run_trainer(model, cpu, steps=2, lr=1e-4, cuda=False, seed=0, out_dir=out)
    reset()
    assert len(ms) == 2 and torch.isfinite(loss)
    assert "forward" not in model.__dict__ and "_original_forward" not in model.__dict__
    assert model.__dict__.keys() == before.keys()


def _lora_autocast_states(model, run) -> list:
    """torch.is_autocast_enabled("cpu") at every call of one LoRA A module while `run()` runs."""
    seen = []
    mod = next(m for n, m in model.named_modules() if n.endswith("lora_A.default"))
    h = mod.register_forward_pre_hook(lambda m, a: seen.append(torch.is_autocast_enabled("cpu")))
    try:
        run()
    finally:
        h.remove()
    return seen


def test_every_trainer_autocasts_not_only_the_first(setup):
    """accelerate marks a model it prepared and never wraps it again; a mark left behind made every Trainer after the
    first run without autocast (fp32 adapters). With bf16=True on the CPU (autocast on the CPU), the second and third
    Trainers must autocast the adapters' forward and recompute as the first did."""
    model, cpu, _, reset, out = setup
    runs = [_lora_autocast_states(model, lambda: fidelity.run_trainer(model, cpu, steps=1, lr=1e-4, cuda=False,
                                                                        seed=0, out_dir=out, bf16=True))
            for _ in range(3)]
    reset()
    assert all(r and all(r) for r in runs), runs
    assert "_is_accelerate_prepared" not in model.__dict__


def test_a_left_mark_turns_autocast_off(setup):
    """Negative control: the mark accelerate leaves, set by hand, makes the Trainer skip its autocast wrapper."""
    model, cpu, _, reset, out = setup
    model._is_accelerate_prepared = True
    try:
        seen = _lora_autocast_states(model, lambda: _unmarked_trainer(model, cpu, out))
    finally:
        model.__dict__.pop("_is_accelerate_prepared", None)
        reset()
    assert seen and not any(seen), seen


def _unmarked_trainer(model, cpu, out):
    """One Trainer step with bf16=True that, unlike run_trainer, keeps the mark it finds (the old behaviour)."""
    import tempfile

    from transformers import TrainingArguments

    args = TrainingArguments(output_dir=tempfile.mkdtemp(dir=out), max_steps=1, per_device_train_batch_size=1,
                             bf16=True, use_cpu=True, report_to=[], save_strategy="no", remove_unused_columns=False,
                             disable_tqdm=True)
    saved = {k: model.__dict__[k] for k in ("forward", "_original_forward") if k in model.__dict__}
    try:
        fidelity._trainer_class()(model=model, args=args, train_dataset=fidelity.PackedDataset(cpu),
                                  data_collator=fidelity.collate_packed).train()
    finally:
        for k in ("forward", "_original_forward"):
            model.__dict__.pop(k, None)
        model.__dict__.update(saved)


def test_collator_yields_the_harness_tensors(setup):
    _, cpu, _, _, _ = setup
    got = fidelity.collate_packed([cpu[0]])
    assert set(got) == {"input_ids", "position_ids", "labels"}
    for k in got:
        assert torch.equal(got[k], getattr(cpu[0], k))


def test_rep_ratio_ci_against_a_hand_computation():
    from scipy import stats
    a = [[10.0, 12.0], [11.0], [9.0, 9.5, 10.5]]
    b = [[10.0], [10.0, 10.0], [11.0]]
    d = [math.log((11.0) / 10.0), math.log(11.0 / 10.0), math.log(29.0 / 3 / 11.0)]
    m, sd = sum(d) / 3, (sum((x - sum(d) / 3) ** 2 for x in d) / 2) ** 0.5
    t = stats.t.ppf(0.975, 2)
    got = fidelity.rep_ratio_ci(a, b)
    assert got["ratio"] == pytest.approx(math.exp(m))
    assert got["ci95"] == pytest.approx([math.exp(m - t * sd / 3 ** 0.5), math.exp(m + t * sd / 3 ** 0.5)])
    assert fidelity.rep_ratio_ci([[1.0]], [[2.0]])["ci95"] is None  # one rep: no interval
    with pytest.raises(ValueError):
        fidelity.rep_ratio_ci([[1.0]], [[1.0], [1.0]])


def test_trace_breakdown_path_runs_on_cpu(setup, tmp_path):
    """The CUDA-only breakdown's code path, forced on the CPU (no kernels: components are zero, the windows exist)."""
    model, cpu, dev, reset, _ = setup
    b = fidelity.trace_breakdowns(model, cpu, dev, lr=1e-4, warmup=1, cuda=False, seed=0, out_dir=str(tmp_path),
                                  reset=reset)
    assert set(b) == {"trainer", "harness"}
    for who in b:
        assert b[who]["step_ms"] > 0, (who, b[who])


def _cli_argv(out) -> list:
    return [sys.executable, "-m", "workbench.fidelity", "--device", "cpu", "--tokens", "128", "--steps", "1",
            "--warmup", "0", "--reps", "2", "--out", str(out)]


def early_start(tmp_path_factory, items):
    """test_cli_last_line_json's process, started at collection (conftest's pytest_collection_finish)."""
    if any(item.name == "test_cli_last_line_json" for item in items):
        from conftest import Started
        started = Started(tmp_path_factory)
        started.out = tmp_path_factory.mktemp("fidelity_cli")
        started.start("cli", _cli_argv(started.out))
        return started


def test_cli_last_line_json(tmp_path):
    """The CLI end to end on the tiny preset (a short run: 2 reps of 1 step each; seconds on 2 cores)."""
    from conftest import early
    started = early(__name__)
    if started:
        tmp_path = started.out
        r = started.result("cli", timeout=120)
    else:
        r = subprocess.run(_cli_argv(tmp_path), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    for k in ("trainer_step_ms", "harness_step_ms", "ratio_ci95", "equivalent", "loss_rel_diff", "grad_max_rel_l2",
              "breakdown", "differences", "precision", "attn", "trainer"):
        assert k in res, k
    assert res["equivalent"] is True and res["breakdown"] is None and res["precision"] == "fp32-adapters"
    assert res["trainer"]["max_grad_norm"] == 1.0 and len(res["ratio_ci95"]) == 2
    assert json.load(open(tmp_path / "fidelity.json"))["trainer_step_ms"] == res["trainer_step_ms"]
    # a CPU ratio gives no ±3% verdict: labelled as the A/B runner labels CPU timings
    assert res["within_3pct"] is None and "not a result (CPU timing)" in r.stdout and "within ±" not in r.stdout


@pytest.mark.parametrize("argv,msg", [(["--model", "nope"], "unknown model preset"),
                                      (["--steps", "0"], "--steps must be positive"),
                                      (["--model", "tiny-gpt-oss"], "not supported"),
                                      (["--device", "tpu"], "invalid choice")])
def test_bad_input_one_line(argv, msg):
    r = run_cli("workbench.fidelity", argv)  # in-process; test_cli_last_line_json is the fresh process
    assert r.returncode == 2 and "Traceback" not in r.stderr
    err = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(err) == 1 and msg in err[0], r.stderr


def test_help():
    r = run_cli("workbench.fidelity", ["--help"])
    assert r.returncode == 0 and "transformers.Trainer" in r.stdout and "--reps" in r.stdout
