"""A training step that raises leaves no process-wide autograd or compiler state behind for the steps after it.

The runner carries on after an arm fails (`workbench.ab.runner`: one arm's failure must not stop the others), so every
later step of the process runs in whatever state the failed one left. Two such leftovers break a `--opt levers` run:

- torch.compile state. flex_attention that fails inside a compiled call (there: under the sync counter's dispatch
  mode, which flex could not run under) leaves torch._dynamo such that every later flex_attention call of the process
  fails with `Unsupported: Attempted to call function marked as skipped ... _safe_softmax` (dynamo tracing the HOP's
  dense fallback, `sdpa_dense`). Reproduced on the CPU with torch 2.13; `torch._dynamo.reset()` clears it. Every flex
  arm of the `path` comparison failed so.
- saved-tensors hooks. Non-reentrant checkpoint pushes its frame's hooks inside a generator; before pytorch PR
  184018 (2026-05; torch 2.11, the H100's, predates it; 2.13, the CPU's, has it) `checkpoint` did not close that
  generator when the checkpointed layer raised, so the hooks stayed pushed until the traceback holding the generator
  is freed (for an error in a reference cycle, as dynamo's are, at some later garbage collection, which then pops
  whatever is on top), and every tensor the next steps save outside a layer (the checkpoint input savers, the final
  norm, the LM head, the loss) went to the dead frame. Its recompute then fails: `CheckpointError ... different
  metadata` (saved: `[0]` cpu float32 + the hidden states, the input savers' tensors; the path's baseline failed so
  in its timed steps, after the two flex arms had failed inside a checkpointed layer in the same process).

`clean_after_failure()` around a step: on an exception it frees the finished frames of the traceback (a checkpoint's
generator closes now, popping its own hooks), pops any saved-tensors hooks the step left above the ones it started
with, and resets torch._dynamo (compiled functions recompile on their next call); the exception then propagates. A
step that succeeds is untouched.
"""
from __future__ import annotations

import contextlib
import traceback

import torch


def _top_hooks():
    return torch._C._autograd._top_saved_tensors_default_hooks(True)


def _pop_hooks_to(top, limit: int = 64) -> int:
    """Pop saved-tensors default hooks until `top` is the top again (or the stack is empty); the number popped."""
    n = 0
    while n < limit:
        cur = _top_hooks()
        if cur is None or cur == top:
            break
        torch._C._autograd._pop_saved_tensors_default_hooks()
        n += 1
    return n


@contextlib.contextmanager
def clean_after_failure():
    """Run a step; if it raises, undo what it left process-wide (see the module's doc), then re-raise."""
    top = _top_hooks()
    try:
        yield
    except BaseException as e:
        traceback.clear_frames(e.__traceback__)  # finished frames drop their locals: a checkpoint generator closes
        _pop_hooks_to(top)
        import torch._dynamo
        torch._dynamo.reset()
        raise
