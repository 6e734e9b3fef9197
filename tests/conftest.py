import os
import warnings

import pytest
import torch

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
warnings.filterwarnings("ignore", category=FutureWarning)

TINY = ["tiny-llama", "tiny-qwen3", "tiny-qwen3-moe", "tiny-gpt-oss"]


@pytest.fixture(autouse=True)
def _reset_state():
    from workbench.instrument import state
    state.reset()
    yield
    state.reset()


def per_document_reference(model, batch):
    """Each document alone (positions from 0), through `model_inputs`; the token-weighted mean of their losses.

    A packed batch's loss must equal this when documents are isolated."""
    from workbench.data import batch_from_lengths
    from workbench.models import model_inputs
    total, n = 0.0, 0
    for doc in batch.documents():
        if doc.numel() == 1:  # no token to predict (its only label is -100)
            continue
        single = batch_from_lengths([doc.numel()], model.config.vocab_size)
        single.input_ids[0] = doc
        single.labels[0, 1:] = doc[1:]
        loss = model(**model_inputs(model, single)).loss
        total += loss.double() * (doc.numel() - 1)
        n += doc.numel() - 1
    return total / n
