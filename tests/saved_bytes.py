"""What one decoder layer saves for its backward, counted: the tests of the memory estimate hold it against this."""
import torch


def layer_saved_bytes(model, tokens: int) -> int:
    """Bytes the first decoder layer of `model` saves for its backward in one bf16-autocast forward of two documents
    of tokens/2 (saved_tensors_hooks; unique storages, parameters left out)."""
    from workbench.instrument.ranges import find_decoder_layers
    from workbench.step.data import batch_from_lengths
    from workbench.step.models import model_inputs

    layer = find_decoder_layers(model)[0]
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen, on = {}, [False]

    def pack(t):
        if on[0] and t.untyped_storage().data_ptr() not in params:
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t
    pre = layer.register_forward_pre_hook(lambda *a: on.__setitem__(0, True))
    post = layer.register_forward_hook(lambda *a: on.__setitem__(0, False))
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), torch.autocast("cpu", dtype=torch.bfloat16):
            model(**model_inputs(model, batch_from_lengths([tokens // 2, tokens // 2], 128))).loss
    finally:
        pre.remove()
        post.remove()
    return sum(seen.values())
