"""workbench.step.step_guard through harness.train_step: a step that raises leaves nothing behind for the next step of the
process (the `path` comparison of the H100 levers run failed so). Each test fails without the guard: a failed flex
call poisons torch._dynamo for every later flex call; a checkpoint frame whose hooks stay pushed after its layer raised
(torch's non-reentrant checkpoint where it does not close its generator on an error) takes the next steps' tensors."""
import contextlib
import gc
import types

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from workbench.measure import equivalence
from workbench.step.data import batch_from_lengths
from workbench.step.harness import enable_checkpointing, train_step
from workbench.instrument import instrument_layers
from workbench.step.models import build_model, lora_parameters
from workbench.step.step_guard import _top_hooks

LENS = [13, 5, 21, 9]


class _NoHigherOrderOps(TorchDispatchMode):
    """A dispatch mode without higher-order-op support, as the sync counter's was: flex_attention raises under it."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class _FlexStep(torch.nn.Module):
    """loss = w * sum(flex_attention(q, q, q)); flex forward only (the CPU has no flex backward)."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(()))

    def forward(self, q, block_mask, under_mode):
        from torch.nn.attention.flex_attention import flex_attention
        with torch.no_grad(), (_NoHigherOrderOps() if under_mode else contextlib.nullcontext()):
            out = flex_attention(q, q, q, block_mask=block_mask)
        return types.SimpleNamespace(loss=self.w * out.float().sum())


def test_a_failed_flex_call_does_not_break_the_next_steps_flex():
    from torch.nn.attention.flex_attention import create_block_mask
    torch._dynamo.reset()  # start from no compiled flex: earlier tests' entries make dynamo's recompile check crash
    T = 128
    bm = create_block_mask(lambda b, h, q, k: q >= k, 1, 1, T, T, device="cpu")
    q = torch.randn(1, 2, T, 16, generator=torch.Generator().manual_seed(0))
    model = _FlexStep()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    batch = types.SimpleNamespace(tokens=T)

    def step(under_mode):
        return train_step(model, batch, opt, inputs_fn=lambda m, b: dict(q=q, block_mask=bm, under_mode=under_mode))

    ref = step(False).loss
    with pytest.raises(NotImplementedError, match="flex_attention"):
        step(True)
    assert step(False).loss == ref  # without the guard: Unsupported ... _safe_softmax, every later flex call


def _stale_pack(t):
    return None  # a checkpoint frame keeps a holder, not the tensor


def _stale_unpack(_):
    raise RuntimeError("unpacked by a stale checkpoint frame")


def _leaky_checkpoint(fn, *args, **kwargs):
    """torch 2.11's non-reentrant checkpoint when the layer raises: the frame's hooks, pushed inside a generator that
    nothing closes, stay pushed while the traceback holds this frame."""
    def frame_hooks():
        with torch.autograd.graph.saved_tensors_hooks(_stale_pack, _stale_unpack):
            yield
    gen = frame_hooks()
    next(gen)
    raise RuntimeError("the layer failed")  # `gen` stays suspended, referenced from this frame


def test_a_layer_that_raised_inside_checkpoint_leaves_no_hooks_for_the_next_step():
    model = build_model("tiny-llama", layers=2)
    instrument_layers(model)
    batch = batch_from_lengths(LENS, model.config.vocab_size, seed=0)
    top = _top_hooks()

    def step():
        cap = equivalence.GradCapture(lora_parameters(model))
        rec = train_step(model, batch, cap)
        return rec.loss, cap.grads

    enable_checkpointing(model)
    ref_loss, ref_grads = step()
    enable_checkpointing(model, _leaky_checkpoint)
    # the error kept alive (as a reference cycle keeps dynamo's errors in the runner): without the guard its
    # traceback holds the checkpoint generator, whose hooks stay pushed and take the next step's saved tensors
    with pytest.raises(RuntimeError, match="the layer failed") as failed:
        step()
    assert _top_hooks() == top
    gc.collect()
    assert _top_hooks() == top  # nothing left to pop a second time
    enable_checkpointing(model)
    loss, grads = step()
    del failed
    assert loss == ref_loss and grads.keys() == ref_grads.keys()
    assert all(torch.equal(grads[n], ref_grads[n]) for n in grads)
