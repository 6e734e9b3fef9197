"""ABConfig: one A/B run's whole configuration, a typed tree: the batches (`DataConfig`) and the step (`StepConfig`) it
shares with `workbench.run`'s `RunConfig`, and the protocol and output around them. The CLI builds it
(`cli.parse_args`), it is checked once (`__post_init__`), resolved for the device once (`resolved`: the precision,
the per-device defaults), and it travels as is: to the runner, into meta.json's `args` and to each nsys child as one
flat JSON argument (`as_dict` / `from_json`), so no flag is rebuilt by hand. Leaf names are the CLI's destinations
(`--warmup-max` is `warmup_max`; `--no-checkpointing` sets `step.checkpointing`, `--target-ci` `target_ci_pct`);
`None` means "per device or per --opt"."""
from __future__ import annotations

import dataclasses
import json

from workbench.step.config import DataConfig, StepConfig, flat, from_flat, leaf_names
from workbench.errors import WorkbenchError

MAX_REPS = 30
"""Reps at most under --target-ci / --budget-s, by default (giving another without either is refused)."""

SWEEPABLE = ("layers", "tokens")
"""What --sweep may vary."""


@dataclasses.dataclass(kw_only=True, frozen=True)
class ABConfig:
    data: DataConfig = dataclasses.field(default_factory=lambda: DataConfig(lengths=None))
    """The packed batches: --lengths (None: per device; on a CPU short documents, several per batch, so the functional
    check crosses document boundaries; on a GPU the synthetic lognormal), --tokens (None: per --opt and device),
    --batches (None: per device), --seed."""
    step: StepConfig = dataclasses.field(default_factory=StepConfig)
    """The step: --model / --layers (None: the --opt's default), --attn, --experts, --dtype, --precision (resolved
    for the device by `resolved`), --lora-rank, --lr, --no-checkpointing."""
    opt: str = "all"
    """The optimization to compare (all: each on its own, then all together)."""
    steps: int | None = None
    """Timed steps per arm per rep; None: per device."""
    warmup: int | None = None
    """Warmup steps per arm per rep, at least; None: per device."""
    warmup_max: int | None = None
    """Warmup steps at most; None: per device."""
    settle_pct: float = 2.0
    """Warmup ends when a step is within this % of the previous step on the same batch."""
    reps: int | None = None
    """Repetitions, at least (each runs every arm, order rotated); None: per device."""
    target_ci_pct: float | None = None
    """--target-ci: add reps until the speedup's 95% CI half-width is under this %."""
    budget_s: float | None = None
    """Stop adding reps once a comparison has run this many seconds."""
    budget_min: float | None = None
    """--budget-min: the whole run's budget in minutes (`workbench.ab.budget`): each comparison's timing adds reps
    while its share lasts; 0: none; None: the default (12 min for --opt all on one GPU, `budget.default_budget_min`)."""
    max_reps: int = MAX_REPS
    """Reps at most under target_ci_pct / budget_s / budget_min."""
    processes: int = 1
    """Independent processes of this same run (`workbench.ab.processes`): > 1 gives the process-level estimate, its CI
    and a prediction interval for a rerun."""
    process_seeds: str = "each"
    """each | same: the --processes children's seeds, --seed + k (each its own weights, LoRA and data) or all --seed
    (the same model and batches: only the process differs)."""
    sweep: str | None = None
    """One comparison per value: layers=4,8,16 or tokens=8192,16384."""
    nvtx_cost: str = "off"
    """off | add | only: the NVTX ranges' cost, the baseline arm with ranges off against on."""
    only: str | None = None
    """Run only these comparisons of the plan (comma-separated names)."""
    headline: bool = False
    """Each comparison's baseline and optimized arm only."""
    device: str = "auto"
    """auto | cpu | cuda."""
    trace: str = "none"
    """none | torch | nsys: separate profiled passes per arm."""
    out: str | None = None
    """Output folder, new or empty; None: runs/<run_id>."""
    force: bool = False
    """Let `out` name a folder holding an earlier run (its run files are replaced)."""
    memory_limit_gib: float | None = None
    """The memory a step may use, in GiB (None: the device's; `workbench.ab.preflight` and the activations lever's
    choice read it)."""
    arms: str | None = None
    """Comma-separated arms of one --opt, baseline first."""
    aa: bool = False
    """A/A: the baseline against itself."""
    cross_check: bool = False
    """On CUDA the counted pass also counts sync-debug-mode warnings."""
    _capture: str | None = None
    """The nsys child only: the arms it captures (opt=arm,...)."""
    _process_unit: bool = False
    """A `--processes` child only: the process, not the rep, is the unit of its claim (no reps-for-a-verdict floor)."""
    _config: str | None = None
    """The nsys child only: the parent's config as JSON (consumed by the CLI)."""

    def __post_init__(self):
        """The checks that involve more than one field (each field's own is the CLI's converter)."""
        if self.sweep:
            parse_sweep(self.sweep)
            key = self.sweep.partition("=")[0]
            if getattr(self.data if key == "tokens" else self.step, key) is not None:
                raise WorkbenchError(f"--sweep {key}=... and --{key} both set; keep one")
        if self.sweep:
            vals = parse_sweep(self.sweep)[1]
            dup = sorted({v for v in vals if vals.count(v) > 1})
            if dup:  # two comparisons of one name whose rows could not be told apart
                raise WorkbenchError(f"--sweep {self.sweep} names {', '.join(map(str, dup))} twice; give each value "
                                     "once")
        if self.headline and self.arms:
            raise WorkbenchError("--headline picks each comparison's baseline and optimized arm itself, and --arms "
                                 "names arms; keep one (--arms BASELINE,ARM without --headline to compare a floor arm)")
        if self.out is not None and not self.out.strip():
            raise WorkbenchError("--out is empty; name a folder (or leave --out out for runs/<run_id>)")
        if self.aa and self.arms:
            raise WorkbenchError("--aa and --arms both set; for an A/A of one arm use --arms ARM,ARM")
        names = [a.strip() for a in (self.arms or "").split(",") if a.strip()]
        if len(set(names)) not in (len(names), 1):  # ARM,ARM is the A/A; a repeat among other arms is a slip
            dup = next(a for a in names if names.count(a) > 1)
            raise WorkbenchError(f"--arms names {dup} twice; give each arm once (an A/A repeats one arm alone: "
                                 f"--arms {dup},{dup})")
        if self.data.seed < 0:
            raise WorkbenchError(f"--seed must be >= 0, got {self.data.seed}")
        if self.budget_min is not None and (self.budget_min < 0 or self.budget_min != self.budget_min):
            raise WorkbenchError(f"--budget-min must be >= 0 (0: no budget), got {self.budget_min}")
        if self.target_ci_pct is None and self.budget_s is None and not self.budget_min and self.max_reps != MAX_REPS:
            raise WorkbenchError("--max-reps applies with --target-ci, --budget-s or --budget-min")
        if self.reps is not None and self.max_reps < self.reps and (self.target_ci_pct or self.budget_s):
            raise WorkbenchError(f"--max-reps {self.max_reps} is below --reps {self.reps} (the reps at least); "
                                 "raise --max-reps or lower --reps")
        if self.warmup is not None and self.warmup_max is not None and self.warmup_max < self.warmup:
            raise WorkbenchError(f"--warmup-max {self.warmup_max} is below --warmup {self.warmup} (the warmup at "
                                 "least); raise --warmup-max or lower --warmup")

    def as_dict(self) -> dict:
        """The config flat (`workbench.step.config.flat`): meta.json's `args`, the nsys child's `--_config`."""
        return flat(self)

    @classmethod
    def from_flat(cls, d: dict) -> "ABConfig":
        """From a flat dict of leaves (`as_dict`, the CLI's namespace)."""
        return from_flat(cls, d)

    @classmethod
    def from_json(cls, text: str) -> "ABConfig":
        try:
            return cls.from_flat(json.loads(text))
        except WorkbenchError as e:
            raise WorkbenchError(f"--_config: {e}") from None

    def resolved(self, device, run_defaults: dict) -> "ABConfig":
        """The config the run uses on `device`: the precision resolved (`StepConfig.resolved`, once), the per-device
        run defaults filled in."""
        fill = {k: run_defaults[k] for k in ("steps", "warmup", "warmup_max", "reps") if getattr(self, k) is None}
        data_fill = {k: run_defaults[k] for k in ("batches", "lengths") if getattr(self.data, k) is None}
        data = dataclasses.replace(self.data, **data_fill) if data_fill else self.data
        return dataclasses.replace(self, data=data, step=self.step.resolved(device), **fill)


FIELDS = leaf_names(ABConfig)
"""The config's leaves, flat: one per CLI flag (`cli.parse_args` routes each flag's value to its place)."""


def parse_sweep(spec: str | None) -> tuple[str, list[int]] | None:
    """`layers=4,8,16` -> ("layers", [4, 8, 16]); WorkbenchError on anything else."""
    if not spec:
        return None
    key, _, vals = spec.partition("=")
    if key not in SWEEPABLE or not vals:
        raise WorkbenchError(f"bad --sweep {spec!r}: use {'|'.join(SWEEPABLE)}=N,N,... (e.g. layers=4,8,16,28)")
    try:
        out = [int(v) for v in vals.split(",") if v.strip()]
    except ValueError:
        raise WorkbenchError(f"bad --sweep {spec!r}: values must be integers") from None
    if not out or any(v <= 0 for v in out):
        raise WorkbenchError(f"bad --sweep {spec!r}: values must be positive integers")
    return key, out
