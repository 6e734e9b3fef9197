"""Presets reproduce the published parameter counts (built on the meta device: no memory, no time)."""
import pytest
import torch

from workbench.errors import WorkbenchError
from workbench.step.models import PRESETS, build_model, load_config

# published totals (billions), base model without LoRA
PUBLISHED_B = {"llama-3.2-1b": 1.236, "llama-3.1-8b": 8.030, "qwen3-0.6b": 0.596, "qwen3-8b": 8.191,
               "qwen3-14b": 14.768, "qwen3-32b": 32.762, "qwen3-30b-a3b": 30.532, "gpt-oss-20b": 20.914}


@pytest.mark.parametrize("preset", sorted(PUBLISHED_B))
def test_preset_parameter_counts(preset):
    from transformers import AutoModelForCausalLM
    cfg = load_config(preset)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    n = sum(p.numel() for p in model.parameters()) / 1e9
    assert n == pytest.approx(PUBLISHED_B[preset], rel=0.01)


def test_layer_override_keeps_the_layer_pattern():
    cfg = load_config("gpt-oss-20b", layers=4)
    assert cfg.num_hidden_layers == 4
    assert cfg.layer_types == ["sliding_attention", "full_attention"] * 2
    assert cfg.use_cache is False


def test_lora_trains_only_adapters_and_experts_get_lora():
    model = build_model("tiny-gpt-oss")
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert any("experts" in n for n in trainable)
    assert any("q_proj" in n for n in trainable)


def test_seeded_init_is_deterministic():
    a = build_model("tiny-llama", seed=3)
    b = build_model("tiny-llama", seed=3)
    c = build_model("tiny-llama", seed=4)
    pa, pb, pc = (dict(m.named_parameters()) for m in (a, b, c))
    assert all(torch.equal(pa[k], pb[k]) for k in pa)
    assert not all(torch.equal(pa[k], pc[k]) for k in pa)


def test_local_checkpoint_directory(tmp_path):
    src = build_model("tiny-qwen3", lora=False)
    src.save_pretrained(tmp_path / "ckpt")
    m = build_model(str(tmp_path / "ckpt"), layers=1)
    assert m.config.num_hidden_layers == 1


@pytest.mark.parametrize("name, msg", [("no-such-preset", "unknown model preset"),
                                       ("/no/such/dir", "checkpoint directory not found")])
def test_bad_model_names(name, msg):
    with pytest.raises(WorkbenchError, match=msg):
        load_config(name)


def test_every_preset_has_a_family():
    assert {p.family for p in PRESETS.values()} == {"llama", "qwen3", "qwen3_moe", "gpt_oss"}


DRIFT = ("past_key_values", "is_gradient_checkpointing")
"""Deprecations transformers announced that our own code once triggered."""


def _drift_warnings(fn) -> list[str]:
    import warnings
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")  # pyproject ignores FutureWarning / DeprecationWarning in tests: not here
        fn()
    return [str(x.message) for x in w if any(d in str(x.message) for d in DRIFT)]


def test_no_deprecated_transformers_call_in_a_build_and_a_packed_step():
    """A GPT-OSS build (peft wraps it) and a forward + backward of a packed batch (our packed masks through
    create_causal_mask): no deprecation of DRIFT. The negative control: the old keyword call does warn."""
    from transformers.masking_utils import create_causal_mask

    from workbench.step.data import batch_from_lengths
    from workbench.step.models import model_inputs

    def step():
        m = build_model("tiny-gpt-oss", layers=2)
        b = batch_from_lengths([5, 7], m.config.vocab_size)
        m(**model_inputs(m, b)).loss.backward()
    assert _drift_warnings(step) == []
    cfg = load_config("tiny-gpt-oss")
    probe = torch.empty((1, 4, 1))
    old = _drift_warnings(lambda: create_causal_mask(config=cfg, inputs_embeds=probe, attention_mask=None,
                                                     past_key_values=None, position_ids=torch.arange(4)[None]))
    assert old and "past_key_values" in old[0]


def test_the_supported_transformers_range_is_the_tested_one():
    """pyproject names the transformers the suite runs against (the one installed here), not a range it never saw."""
    import os
    import re

    import transformers
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "pyproject.toml")) as f:
        req = re.search(r'"transformers([^"]*)"', f.read()).group(1)
    lo, hi = re.fullmatch(r">=([\d.]+),<([\d.]+)", req).groups()
    v = tuple(int(x) for x in transformers.__version__.split(".")[:2])
    assert tuple(int(x) for x in lo.split(".")[:2]) == v  # the lower end is the tested version
    assert tuple(int(x) for x in hi.split(".")[:2]) == (v[0], v[1] + 1)  # and nothing past its minor release
