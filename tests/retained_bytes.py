"""What one decoder layer keeps alive for the backward under an activations arm, counted: the MoE activation terms of
the memory estimate are held against this (tests/test_memory_estimate.py). Where tests/saved_bytes.py counts what
saved-tensor hooks see, this counts the storages still alive after the forward, whatever keeps them."""
import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class _Created(TorchDispatchMode):
    """Every storage an op returns while `on`, by address, as (weak reference, bytes)."""

    def __init__(self):
        super().__init__()
        self.on, self.made = False, {}

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.on:
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor) and t.device.type != "meta":
                    s = t.untyped_storage()
                    k = s.data_ptr()
                    if k not in self.made or self.made[k][0].expired():  # an address freed and reused
                        self.made[k] = (StorageWeakRef(s), s.nbytes())
        return out


def layer_retained_bytes(model, tokens: int) -> int:
    """Bytes of the storages created from the start of the forward through the first decoder layer (the embedding
    output, the rotary tables, the masks, everything the layer computes) that are still alive when the loss is
    computed, before the backward: what that layer holds for its backward under whatever activations arm is on
    (a checkpoint's inputs, a selective policy's saved outputs, every saved tensor). The layer's own output is left
    out (the next layer's input, charged to it), and so are the parameters. One bf16-autocast forward on the CPU of two
    documents of tokens/2."""
    from workbench.instrument.ranges import find_decoder_layers
    from workbench.step.data import batch_from_lengths
    from workbench.step.models import model_inputs

    layer = find_decoder_layers(model)[0]
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    mode, out_ptr = _Created(), []
    inputs = model_inputs(model, batch_from_lengths([tokens // 2, tokens // 2], 128))
    mode.on = True

    def after(_m, _a, out):
        mode.on = False
        out_ptr.append((out[0] if isinstance(out, tuple) else out).untyped_storage().data_ptr())
    post = layer.register_forward_hook(after)
    loss = None
    try:
        with mode, torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(**inputs).loss
            return sum(n for k, (ref, n) in mode.made.items()
                       if not ref.expired() and k not in params and k not in out_ptr)
    finally:
        post.remove()
        del loss
