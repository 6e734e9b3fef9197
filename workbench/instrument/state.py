"""Where the training step is now: the pass (forward / backward / recompute) and the layer.

One process-wide record (not thread-local: autograd runs backward on its own thread on CUDA), written by
the harness (pass) and by the layer wrappers (layer), read by the sync counter to attribute each sync.
"""
from __future__ import annotations

import contextlib

FORWARD = "forward"
BACKWARD = "backward"
RECOMPUTE = "recompute"
OPTIMIZER = "optimizer"
OUTSIDE = "outside"

pass_name: str = OUTSIDE
"""The harness's phase: forward, backward, optimizer, or outside a step."""

layer_stack: list[str] = []
"""Layer labels ("L07") of decoder layers whose forward (or recompute) is running, innermost last."""

bwd_layer: str | None = None
"""The layer whose backward is running (set by the output-grad hooks), or None."""


def current_pass() -> str:
    """forward / backward / recompute / optimizer / outside: a forward inside backward is a recompute."""
    if pass_name == BACKWARD and layer_stack:
        return RECOMPUTE
    return pass_name


def current_layer() -> str:
    """The innermost running layer, else the layer in backward, else "model" (embeddings, masks, loss)."""
    if layer_stack:
        return layer_stack[-1]
    if pass_name == BACKWARD and bwd_layer is not None:
        return bwd_layer
    return "model"


@contextlib.contextmanager
def phase(name: str):
    """Mark the harness phase for the duration of the block."""
    global pass_name, bwd_layer
    prev = pass_name
    pass_name = name
    try:
        yield
    finally:
        pass_name = prev
        bwd_layer = None


def reset() -> None:
    global pass_name, bwd_layer
    pass_name = OUTSIDE
    bwd_layer = None
    layer_stack.clear()
