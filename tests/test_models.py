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
