"""Every family isolates packed documents: packed loss == token-weighted mean of per-document losses."""
import pytest
import torch

from workbench.step.data import batch_from_lengths
from workbench.step.models import build_model, model_inputs

from conftest import TINY, per_document_reference as _per_document_reference


@pytest.mark.parametrize("preset", TINY)
def test_packed_loss_is_weighted_mean_of_document_losses(preset):
    # longer than GPT-OSS's tiny sliding window (8), so the sliding layers are exercised too
    model = build_model(preset, layers=2, experts_implementation="eager").eval()
    batch = batch_from_lengths([13, 5, 21, 9], model.config.vocab_size, seed=1)
    with torch.no_grad():
        packed = model(**model_inputs(model, batch)).loss.double()
        ref = _per_document_reference(model, batch)
        torch.testing.assert_close(packed, ref, rtol=1e-5, atol=1e-6)
        # negative control: positions 0..T-1 (one long document) let documents see each other
        leaky = model(**dict(model_inputs(model, batch),
                             position_ids=torch.arange(batch.tokens).unsqueeze(0),
                             **({"attention_mask": None} if "gpt-oss" in preset else {}))).loss.double()
        assert (leaky - ref).abs() > 1e-4


def test_gpt_oss_without_the_workaround_leaks():
    """Why model_inputs builds GPT-OSS masks itself: its forward ignores position_ids for masking."""
    model = build_model("tiny-gpt-oss", layers=2).eval()
    batch = batch_from_lengths([13, 5, 21, 9], model.config.vocab_size, seed=1)
    with torch.no_grad():
        ref = _per_document_reference(model, batch)
        plain = model(input_ids=batch.input_ids, position_ids=batch.position_ids, labels=batch.labels,
                      use_cache=False).loss.double()
    assert (plain - ref).abs() > 1e-4
