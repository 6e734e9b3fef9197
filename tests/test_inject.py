"""The gate's deliberate slowdown: nothing unless asked, exactly N extra matmuls when asked."""
import pytest
import torch

from workbench.step import inject


def test_unset_runs_nothing(monkeypatch):
    monkeypatch.delenv(inject.ENV, raising=False)
    assert inject.spec() is None
    assert inject.extra_gemms(torch.device("cpu")) == 0


def test_counts_the_flops_it_adds(monkeypatch):
    calls = []
    real_mm = torch.mm
    monkeypatch.setattr(torch, "mm", lambda a, b: calls.append(a.shape) or real_mm(a, b))
    assert inject.extra_gemms(torch.device("cpu"), "3:16") == 2 * 3 * 16 ** 3
    assert calls == [(16, 16)] * 3


@pytest.mark.parametrize("bad", ["3", "a:b", "0:16", "3:-1", "1:2:3"])
def test_malformed_is_one_clear_error(bad):
    with pytest.raises(ValueError, match="N:SIZE"):
        inject.spec(bad)


def test_train_step_runs_it_inside_the_step(monkeypatch):
    from workbench.step import harness, models
    from workbench.step.data import make_batches
    seen = []
    monkeypatch.setattr(inject, "extra_gemms", lambda device: seen.append(device.type) or 0)
    model = models.build_model("tiny-qwen3", device="cpu")
    batch = make_batches("fixed:16", tokens=64, n_batches=1, vocab_size=model.config.vocab_size)[0]
    harness.train_step(model, batch, harness.make_optimizer(model))
    assert seen == ["cpu"]
