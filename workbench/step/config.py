"""RunConfig: what one training run is. Frozen; every field has a default and a docstring; validated once."""
from __future__ import annotations

import dataclasses

from workbench.errors import WorkbenchError


@dataclasses.dataclass(frozen=True)
class RunConfig:
    model: str = "tiny-llama"
    """A preset name (see workbench.step.models.PRESETS) or a local Hugging Face checkpoint directory."""
    layers: int | None = None
    """Override the decoder layer count (fit a large shape on one GPU); None keeps the published count."""
    tokens: int = 1024
    """Token budget of each packed batch (T)."""
    lengths: str = "lognormal:5.5:0.8:16"
    """Document-length source: fixed:N, uniform:LO:HI, lognormal:MU:SIGMA[:MIN], json:PATH, jsonl:PATH:TOKDIR
    (see `workbench.step.data.check_lengths`)."""
    steps: int = 5
    """Timed steps (after warmup)."""
    warmup: int = 2
    """Steps dropped before timing (allocator warm-up, cuBLAS heuristics, Triton compiles)."""
    attn: str | None = None
    """HF attention implementation (sdpa, eager, flex_attention, flash_attention_2, flash_attention_3, or a name
    registered in transformers' AttentionInterface; see `workbench.step.models.check_attn`); None picks the family's
    default (sdpa; eager for GPT-OSS)."""
    experts: str | None = None
    """HF experts implementation for MoE models (eager, grouped_mm, batched_mm, a name registered in transformers'
    ExpertsInterface, or the workbench's wb_*; see `workbench.step.models.check_experts`); None keeps transformers'
    default (grouped_mm)."""
    device: str = "auto"
    """auto (cuda when available), cpu or cuda."""
    seed: int = 0
    """Seeds weights, LoRA init and data."""
    lora_rank: int = 16
    """LoRA rank r (alpha = 2r, dropout 0)."""
    checkpointing: bool = True
    """Non-reentrant gradient checkpointing of every decoder layer (the fine-tuning default)."""
    lr: float = 1e-4
    """AdamW learning rate on the LoRA parameters."""
    ranges: bool = True
    """Emit NVTX / record_function ranges (free when no profiler listens, but can be switched off)."""
    count_syncs: bool = True
    """Count device-to-host syncs with the dispatch-level counter during the steps."""
    cross_check_syncs: bool = False
    """On CUDA, also count torch.cuda sync-debug-mode warnings (the second witness)."""

    def __post_init__(self):
        for name in ("tokens", "steps", "lora_rank"):
            v = getattr(self, name)
            if not isinstance(v, int) or v <= 0:
                raise WorkbenchError(f"{name} must be a positive integer, got {v!r}")
        if self.layers is not None and (not isinstance(self.layers, int) or self.layers <= 0):
            raise WorkbenchError(f"layers must be a positive integer, got {self.layers!r}")
        if not isinstance(self.warmup, int) or self.warmup < 0:
            raise WorkbenchError(f"warmup must be a non-negative integer, got {self.warmup!r}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise WorkbenchError(f"device must be auto, cpu or cuda, got {self.device!r}")
        if not self.lr > 0:
            raise WorkbenchError(f"lr must be positive, got {self.lr!r}")
