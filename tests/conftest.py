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
