"""The model presets and the names the CLIs offer: data only (no torch import), so `--help` answers at once.
`workbench.step.models` builds from them."""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Preset:
    family: str
    """llama | qwen3 | qwen3_moe | gpt_oss"""
    config: dict
    """Keyword arguments of the family's config class."""


_LLAMA3_ROPE_1B = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
                   "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
_LLAMA3_ROPE_8B = dict(_LLAMA3_ROPE_1B, factor=8.0)
_QWEN3_ROPE = {"rope_type": "default", "rope_theta": 1000000.0}
_GPT_OSS_ROPE = {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                 "truncate": False, "original_max_position_embeddings": 4096}


def _qwen3(layers, hidden, inter, heads, kv, vocab=151936, tied=False):
    return Preset("qwen3", dict(num_hidden_layers=layers, hidden_size=hidden, intermediate_size=inter,
                                num_attention_heads=heads, num_key_value_heads=kv, head_dim=128, vocab_size=vocab,
                                tie_word_embeddings=tied, rope_parameters=_QWEN3_ROPE, max_position_embeddings=163840,
                                rms_norm_eps=1e-6))


PRESETS: dict[str, Preset] = {
    "llama-3.2-1b": Preset("llama", dict(num_hidden_layers=16, hidden_size=2048, intermediate_size=8192,
                                         num_attention_heads=32, num_key_value_heads=8, head_dim=64,
                                         vocab_size=128256, tie_word_embeddings=True, rope_parameters=_LLAMA3_ROPE_1B,
                                         max_position_embeddings=131072, rms_norm_eps=1e-5)),
    "llama-3.1-8b": Preset("llama", dict(num_hidden_layers=32, hidden_size=4096, intermediate_size=14336,
                                         num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                                         vocab_size=128256, tie_word_embeddings=False, rope_parameters=_LLAMA3_ROPE_8B,
                                         max_position_embeddings=131072, rms_norm_eps=1e-5)),
    "qwen3-0.6b": _qwen3(28, 1024, 3072, 16, 8, tied=True),
    "qwen3-8b": _qwen3(36, 4096, 12288, 32, 8),
    "qwen3-14b": _qwen3(40, 5120, 17408, 40, 8),
    "qwen3-32b": _qwen3(64, 5120, 25600, 64, 8),
    "qwen3-30b-a3b": Preset("qwen3_moe", dict(num_hidden_layers=48, hidden_size=2048, intermediate_size=6144,
                                              moe_intermediate_size=768, num_attention_heads=32, num_key_value_heads=4,
                                              head_dim=128, vocab_size=151936, num_experts=128, num_experts_per_tok=8,
                                              norm_topk_prob=True, rope_parameters=_QWEN3_ROPE,
                                              max_position_embeddings=163840, rms_norm_eps=1e-6,
                                              tie_word_embeddings=False)),
    "gpt-oss-20b": Preset("gpt_oss", dict(num_hidden_layers=24, hidden_size=2880, intermediate_size=2880,
                                          num_attention_heads=64, num_key_value_heads=8, head_dim=64,
                                          vocab_size=201088, num_local_experts=32, num_experts_per_tok=4,
                                          sliding_window=128, attention_bias=True, rope_parameters=_GPT_OSS_ROPE,
                                          max_position_embeddings=131072, rms_norm_eps=1e-5)),
    # tiny CPU presets: same classes and code paths, small enough for a test to run in seconds
    "tiny-llama": Preset("llama", dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                                       num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=256,
                                       rope_parameters=dict(_LLAMA3_ROPE_1B), max_position_embeddings=16384)),
    "tiny-qwen3": Preset("qwen3", dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                                       num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=256,
                                       rope_parameters=_QWEN3_ROPE, max_position_embeddings=16384)),
    "tiny-qwen3-moe": Preset("qwen3_moe", dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                                               moe_intermediate_size=32, num_attention_heads=4, num_key_value_heads=2,
                                               head_dim=16, vocab_size=256, num_experts=8, num_experts_per_tok=2,
                                               norm_topk_prob=True, rope_parameters=_QWEN3_ROPE,
                                               max_position_embeddings=16384)),
    "tiny-gpt-oss": Preset("gpt_oss", dict(num_hidden_layers=2, hidden_size=64, intermediate_size=64,
                                           num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=256,
                                           num_local_experts=8, num_experts_per_tok=2, sliding_window=8,
                                           attention_bias=True, rope_parameters=dict(_GPT_OSS_ROPE),
                                           max_position_embeddings=131072)),
}

FAMILY_DEFAULT_ATTN = {"llama": "sdpa", "qwen3": "sdpa", "qwen3_moe": "sdpa", "gpt_oss": "eager"}
MOE_FAMILIES = ("qwen3_moe", "gpt_oss")
LORA_TARGET_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
LORA_TARGET_EXPERT_PARAMETERS = ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]

_MODEL_TYPES = {"llama": "llama", "qwen3": "qwen3", "qwen3_moe": "qwen3_moe", "gpt_oss": "gpt_oss"}

ATTN_CHOICES = ("sdpa", "eager", "flex_attention", "flash_attention_2", "flash_attention_3")
"""HF attention implementations always accepted; `attn_choices()` adds the names registered in AttentionInterface."""
EXPERTS_CHOICES = ("eager", "grouped_mm", "batched_mm")
"""HF experts implementations always accepted; `experts_choices()` adds ExpertsInterface's and the workbench's."""
WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin")
"""Weight files of a checkpoint directory (sharded ones included)."""


def own_shape(model: str) -> dict | None:
    """{"family", "layers", "hidden"} of a preset, or of a local checkpoint's config.json (read as JSON: no torch,
    no transformers), None when it cannot be read here (`workbench.step.models.load_config` says why, later)."""
    import json
    import os

    if model in PRESETS:
        p = PRESETS[model]
        return {"family": p.family, "layers": p.config["num_hidden_layers"], "hidden": p.config["hidden_size"]}
    try:
        with open(os.path.join(model, "config.json"), encoding="utf-8") as f:
            raw = json.load(f)
    except (OSError, ValueError):
        return None
    fam = {mt: f for f, mt in _MODEL_TYPES.items()}.get(raw.get("model_type")) if isinstance(raw, dict) else None
    if fam is None or not isinstance(raw.get("num_hidden_layers"), int) or not isinstance(raw.get("hidden_size"), int):
        return None
    return {"family": fam, "layers": raw["num_hidden_layers"], "hidden": raw["hidden_size"]}
