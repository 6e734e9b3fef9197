"""The step's typed config tree, resolved once: `DataConfig` (what batches a run packs) and `StepConfig` (what one
training step is), composed by `RunConfig` (here: `python -m workbench.run`) and `workbench.ab.ab_config.ABConfig`
(`python -m workbench.ab`). Each leaf has one name across the tree, so a config serialises flat (`flat` /
`from_flat`: meta.json's `args`, the nsys child's `--_config`) and reads back into the same tree.

    data = DataConfig(lengths="fixed:64", tokens=256, batches=2)
    data.source          # the parsed length source (`workbench.step.data.parse_lengths`: once per spec per process)
    step = StepConfig(model="tiny-qwen3").resolved(device)   # precision "auto" -> autocast / fp32-adapters, once
"""
from __future__ import annotations

import dataclasses
import functools

from workbench.errors import WorkbenchError
from workbench.step.length_data import DEFAULT_LENGTHS


@dataclasses.dataclass(kw_only=True, frozen=True)
class DataConfig:
    lengths: str | None = DEFAULT_LENGTHS
    """Document-length source as written (`workbench.step.length_data.lengths_help`; recorded in meta.json)."""
    tokens: int | None = None
    """Token budget of each packed batch (T); None: per --opt and device (`workbench.ab`)."""
    batches: int | None = None
    """Distinct packed batches every arm cycles through; None: per device (`workbench.ab`) or per step count
    (`workbench.run`)."""
    seed: int = 0
    """Seeds the document lengths and token ids (and, through `StepConfig`'s owner, weights and LoRA init)."""

    def __post_init__(self):
        for name in ("tokens", "batches"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or v <= 0):
                raise WorkbenchError(f"{name} must be a positive integer, got {v!r}")

    @functools.cached_property
    def source(self):
        """The parsed length source (`workbench.step.data.parse_lengths`: a `jsonl:` corpus is tokenized once per
        process, however many configs or comparisons ask)."""
        from workbench.step.data import parse_lengths
        return parse_lengths(self.lengths)

    def make_batches(self, tokens: int, vocab_size: int, *, batches: int | None = None, seed: int | None = None):
        """The packed CPU batches of a comparison of `tokens` tokens (`workbench.step.data.make_batches` over
        `source`); `batches` / `seed` override this config's (a run's own batch count, a rank's data seed)."""
        from workbench.step.data import make_batches
        return make_batches(self.source, tokens, batches if batches is not None else self.batches, vocab_size,
                            seed=self.seed if seed is None else seed)


@dataclasses.dataclass(kw_only=True, frozen=True)
class StepConfig:
    model: str | None = None
    """A preset name (`workbench.step.presets.PRESETS`) or a local Hugging Face checkpoint directory; None: the
    --opt's default for the device (`workbench.ab`)."""
    layers: int | None = None
    """Decoder layers (fit a large shape on one GPU); None keeps the published count (or the --opt's default)."""
    attn: str | None = None
    """Attention: an HF implementation (sdpa, eager, flex_attention, flash_attention_2, ...) or a workbench packing
    backend (`workbench.ab`); None: the family's default (sdpa; eager for GPT-OSS)."""
    experts: str | None = None
    """HF experts implementation of MoE models (eager, grouped_mm, batched_mm, the workbench's wb_*); None:
    transformers' default."""
    dtype: str = "auto"
    """auto | fp32 | bf16 | fp16: the base weights' dtype (auto: the precision's, `precision.model_dtype`)."""
    precision: str = "auto"
    """auto | autocast | bf16 | fp32-adapters (`workbench.step.precision_mode`); `resolved(device)` turns auto into the
    device's, once, and the resolved value is what every step is passed."""
    lora_rank: int = 16
    """LoRA rank r (alpha = 2r, dropout 0)."""
    lr: float = 1e-4
    """AdamW learning rate on the LoRA parameters."""
    checkpointing: bool = True
    """Non-reentrant gradient checkpointing of every decoder layer (the fine-tuning default; --no-checkpointing)."""

    def __post_init__(self):
        if not isinstance(self.lora_rank, int) or self.lora_rank <= 0:
            raise WorkbenchError(f"lora_rank must be a positive integer, got {self.lora_rank!r}")
        if self.layers is not None and (not isinstance(self.layers, int) or self.layers <= 0):
            raise WorkbenchError(f"layers must be a positive integer, got {self.layers!r}")
        if not self.lr > 0:
            raise WorkbenchError(f"lr must be positive, got {self.lr!r}")

    def resolved(self, device) -> "StepConfig":
        """This config on `device`: the precision resolved (`workbench.step.precision_mode.resolve`: the one place a run
        turns `auto` into autocast on CUDA and fp32-adapters elsewhere)."""
        from workbench.step import precision_mode as precision
        return dataclasses.replace(self, precision=precision.resolve(device, self.precision))


def flat(cfg) -> dict:
    """A config tree as one flat dict of its leaves (nested `DataConfig` / `StepConfig` fields inlined; their names
    are unique across the tree)."""
    out = {}
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        out.update(flat(v) if dataclasses.is_dataclass(v) else {f.name: v})
    return out


def leaf_names(cls) -> tuple[str, ...]:
    """The flat names of a config class's leaves (`flat`'s keys)."""
    out = []
    for f in dataclasses.fields(cls):
        sub = _nested_class(cls, f)
        out += leaf_names(sub) if sub is not None else [f.name]
    return tuple(out)


def _nested_class(cls, f):
    """The config class of field `f` when it is a subtree (DataConfig, StepConfig), else None."""
    name = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")
    return {"DataConfig": DataConfig, "StepConfig": StepConfig}.get(name)


def from_flat(cls, d: dict):
    """`cls` (RunConfig, ABConfig) from a flat dict of leaves (`flat`); unknown keys raise WorkbenchError."""
    known = set(leaf_names(cls))
    unknown = sorted(set(d) - known)
    if unknown:
        raise WorkbenchError(f"unknown config keys: {', '.join(unknown)}")
    kw = {}
    for f in dataclasses.fields(cls):
        sub = _nested_class(cls, f)
        if sub is None:
            if f.name in d:
                kw[f.name] = d[f.name]
            continue
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else sub()
        kw[f.name] = dataclasses.replace(default, **{k: d[k] for k in leaf_names(sub) if k in d})
    return cls(**kw)


def _run_data() -> DataConfig:
    return DataConfig(tokens=1024)


def _run_step() -> StepConfig:
    return StepConfig(model="tiny-llama")


@dataclasses.dataclass(kw_only=True, frozen=True)
class RunConfig:
    """One training run of `python -m workbench.run`: its data and step, and how the run itself goes."""
    data: DataConfig = dataclasses.field(default_factory=_run_data)
    """The packed batches (tokens 1024 by default; batches None: min(steps + warmup, 4))."""
    step: StepConfig = dataclasses.field(default_factory=_run_step)
    """The step (model tiny-llama by default)."""
    steps: int = 5
    """Timed steps (after warmup)."""
    warmup: int = 2
    """Steps dropped before timing (allocator warm-up, cuBLAS heuristics, Triton compiles)."""
    device: str = "auto"
    """auto (cuda when available), cpu or cuda."""
    ranges: bool = True
    """Emit NVTX / record_function ranges (free when no profiler listens, but can be switched off)."""
    count_syncs: bool = True
    """Count device-to-host syncs with the dispatch-level counter during the steps."""
    cross_check: bool = False
    """On CUDA, also count torch.cuda sync-debug-mode warnings (the second witness)."""

    def __post_init__(self):
        for name, v in (("tokens", self.data.tokens), ("steps", self.steps)):
            if not isinstance(v, int) or v <= 0:
                raise WorkbenchError(f"{name} must be a positive integer, got {v!r}")
        if not isinstance(self.warmup, int) or self.warmup < 0:
            raise WorkbenchError(f"warmup must be a non-negative integer, got {self.warmup!r}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise WorkbenchError(f"device must be auto, cpu or cuda, got {self.device!r}")
