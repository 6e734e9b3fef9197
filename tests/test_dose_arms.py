"""Dose arms (`apply(..., dose=u)`): u = 0 is the baseline and u = max the optimized arm (same function, same syncs),
and the syncs per step fall linearly in u, c per unit, counted exactly (`workbench.ab.dose` times them).

    # L = layers, p = passes that build (forward, recompute), c = syncs per unit, u = units of the fix
"""
import pytest
import torch

from workbench.step.data import batch_from_lengths
from workbench.step.harness import enable_checkpointing
from workbench.instrument import SyncCounter, instrument_layers, state
from workbench.step.models import build_model, model_inputs
from workbench.errors import WorkbenchError
from workbench.opts import moe, packing

L = 4
LENS = [13, 5, 21, 9, 30]


def _model(preset, layers=L, checkpointing=True):
    model = build_model(preset, layers=layers)
    if checkpointing:
        enable_checkpointing(model)
    instrument_layers(model)
    return model


def _step(model, handle, batch):
    """One forward + backward from the model's initial weights under the sync counter: (loss, grads, counter)."""
    with SyncCounter(device_type="cpu") as c:
        with state.phase(state.FORWARD):
            loss = model(**(handle.inputs_fn or model_inputs)(model, batch)).loss
        with state.phase(state.BACKWARD):
            loss.backward()
    grads = [p.grad.detach().clone() for _, p in sorted(model.named_parameters()) if p.requires_grad]
    model.zero_grad(set_to_none=True)
    return loss.detach(), grads, c


def _same(a, b):
    assert torch.equal(a[0], b[0]) and len(a[1]) == len(b[1]) > 0
    assert all(torch.equal(x, y) for x, y in zip(a[1], b[1]))


def _run(model, opt_mod, arm, batch, **kw):
    h = opt_mod.apply(model, arm, **kw)
    try:
        return _step(model, h, batch)
    finally:
        h.revert()


@pytest.mark.parametrize("checkpointing", [True, False])
def test_packing_dose_is_linear_in_builds_avoided_with_exact_ends(checkpointing):
    model = _model("tiny-qwen3", checkpointing=checkpointing)
    batch = batch_from_lengths(LENS, 78, seed=1)
    c = packing.SYNCS_PER_BUILD["varlen"]
    p = 2 if checkpointing else 1
    top = packing.dose_units(L, checkpointing)
    assert top == L * p - 1
    base, opt = _run(model, packing, "rebuild", batch), _run(model, packing, "cached", batch)
    for u in range(top + 1):
        got = _run(model, packing, "cached", batch, dose=u)
        assert got[2].total == c * (L * p - u), (u, got[2].by("layer", "pass_"))  # slope c per unit, exact
        _same(got, base)  # every dose computes the baseline's function (bitwise: same kernels)
    assert _run(model, packing, "cached", batch, dose=0)[2].by("layer", "pass_") == base[2].by("layer", "pass_")
    assert _run(model, packing, "cached", batch, dose=top)[2].by("layer", "pass_") == opt[2].by("layer", "pass_")
    if checkpointing:  # u = 2j: layers 1..j reuse the first layer's build in both passes (L - j builds per pass)
        by = _run(model, packing, "cached", batch, dose=2)[2].by("layer", "pass_")
        assert by == {(f"L{i:02d}", ps): c for i in (0, 2, 3) for ps in ("forward", "recompute")}


def test_packing_dose_refuses_what_it_cannot_do():
    model = _model("tiny-qwen3")
    with pytest.raises(WorkbenchError, match="dose"):
        packing.apply(model, "rebuild", dose=1)
    with pytest.raises(WorkbenchError, match="0..7"):
        packing.apply(model, "cached", dose=8)


def test_moe_dose_switches_the_first_layers_with_exact_ends():
    model = _model("tiny-gpt-oss")
    batch = batch_from_lengths(LENS, 78, seed=1)
    base, opt = _run(model, moe, "eager", batch), _run(model, moe, "sort_bincount", batch)
    per_layer = {}
    for j in range(L + 1):
        got = _run(model, moe, "sort_bincount", batch, dose=j)
        by = got[2].by("layer")
        for i in range(L):  # layer i runs sort_bincount iff i < j: its syncs are the optimized arm's, else eager's
            ref = opt if i < j else base
            assert by.get(f"L{i:02d}", 0) == ref[2].by("layer").get(f"L{i:02d}", 0), (j, i)
        per_layer[j] = got[2].total
        torch.testing.assert_close(got[0], base[0], rtol=1e-5, atol=1e-6)  # the sum over k runs in another order
        for x, y in zip(got[1], base[1]):
            torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-6)
    assert per_layer[0] == base[2].total and per_layer[L] == opt[2].total
    steps = [per_layer[j] - per_layer[j + 1] for j in range(L)]  # the syncs unit j removes: 7*E_hit per pass
    assert all(s > 0 for s in steps)
    assert len(set(steps)) == 1, steps  # every tiny layer hits every expert: exactly linear, slope c per unit
    with pytest.raises(WorkbenchError, match="dose"):
        moe.apply(model, "eager", dose=1)
