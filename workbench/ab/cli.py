"""The A/B runner's command line: argparse, its converters and the per-device defaults; no torch import, so
`python -m workbench.ab --help` answers at once. `DOC` is the help's description (the runner's whole story)."""
from __future__ import annotations

import argparse
import math
import sys

from workbench.cli import HelpFormatter, OneLineParser
from workbench.errors import WorkbenchError

from workbench.opts import registry
from workbench.ab.ab_config import ABConfig
from workbench.step.config import RunConfig
from workbench.step.precision_mode import CHOICES as PRECISION_CHOICES, HELP as PRECISION_HELP

DOC = sys.modules["workbench.ab"].__doc__.split("\n\nThe package, along")[0].replace(
    "(time: profiles/timings.json)", "({cpu_main_time})")
"""The help's description: the package's own docstring (`workbench/ab/__init__.py`, its one owner) less its floor plan,
with the CPU time read from TIMINGS at --help time."""

TIMINGS = "profiles/timings.json"
"""The one measured source of the times the help quotes (command, wall seconds, date, machine)."""


def measured_time(key: str = "cpu_main_command") -> str:
    """`364 s on <machine>, measured <date>` from TIMINGS; says where to look when the file is not here."""
    import json
    import os

    from workbench.paths import REPO_ROOT
    try:
        with open(os.path.join(REPO_ROOT, TIMINGS)) as f:
            t = json.load(f)[key]
        return f"{t['wall_s']:g} s on {t['machine'].split(':')[0].split(' (')[0]}, measured {t['date']}: {TIMINGS}"
    except (OSError, ValueError, KeyError):
        return f"its measured time: {TIMINGS} in the repository"


OPT_NAMES = registry.names()
"""The optimizations (`workbench.opts.registry`: read from their modules' SPEC, nothing imported)."""
OPT_CHOICES = (*OPT_NAMES, "all", "levers")
"""`all`: every optimization whose SPEC has no `in_all: False`, each alone, then together; `levers`: the lever
optimizations the traced baseline's breakdown names (`workbench.ab.levers`)."""
HF_ATTN = ("sdpa", "eager", "flex_attention", "flash_attention_2", "flash_attention_3")
ARMS_HELP = {o: registry.spec(o)["help"] for o in OPT_NAMES}

# default shapes: tiny presets on a CPU-only machine, real shapes (fewer layers where needed) on a GPU; each
# optimization's from its SPEC, `all` (every optimization together) here
CPU_DEFAULTS = {**{o: dict(registry.spec(o)["cpu"]) for o in OPT_NAMES}, "all": dict(model="tiny-qwen3-moe"),
                "levers": dict(model="tiny-qwen3-moe"),
                "_run": dict(tokens=256, batches=2, steps=1, warmup=1, warmup_max=2, reps=2, lengths="uniform:16:64")}
"""On a CPU the run is a functional check: syncs per step by layer and source, equivalence and FLOPs. Its timings
exercise the engine and are labelled "not a result" (`workbench.measure.stats.timing_on`); they give no speedup verdict. Its documents (16-64 tokens) are
shorter than half of any budget from 128 tokens up, so every batch packs several (4 or more at the 256 default):
the packed-metadata checks cross document boundaries (with the GPU's lognormal, median about 245 tokens, a 256-token
batch held one document)."""
GPU_DEFAULTS = {**{o: dict(registry.spec(o)["gpu"]) for o in OPT_NAMES},
                "all": dict(model="qwen3-30b-a3b", layers=8, tokens=8192),
                "levers": dict(model="llama-3.1-8b", layers=8, tokens=16384),
                "_run": dict(tokens=16384, batches=2, steps=2, warmup=2, warmup_max=8, reps=8,
                             lengths=RunConfig().data.lengths)}
"""GPU protocol: the rep is the unit of independence (arms run as blocks per rep), so more, shorter reps: 8 reps x 2
timed steps over 2 batches. `workbench power` finds this protocol's A/A false-verdict rate at 5% and its
coverage at 0.95 under the rep effects and drift measured on the H100."""

LR_MAX = 1.0
"""--lr at most: a LoRA AdamW learning rate above 1 moves every adapter weight by about its own scale a step."""

DTYPE_CHOICES = ("auto", "fp32", "bf16", "fp16")
"""--dtype: auto = bf16 on CUDA, fp32 on the CPU (workbench.step.models.default_dtype); `runner.DTYPES` maps them."""





# --- CLI ----------------------------------------------------------------------------------------------------

def _per_device(key: str) -> str:
    """`per device: CPU x, GPU y`: the run default the help shows where the flag's own default is None."""
    return f"per device: CPU {CPU_DEFAULTS['_run'][key]}, GPU {GPU_DEFAULTS['_run'][key]}"


def _epilog() -> str:
    from workbench.step import length_data
    from workbench.step.presets import PRESETS

    arms = "\n".join(f"  {o:8s} {h}" for o, h in ARMS_HELP.items())
    cpu, gpu = CPU_DEFAULTS, GPU_DEFAULTS
    shapes = "\n".join(f"  {o:8s} CPU {cpu[o]['model']}; GPU {gpu[o]['model']}"
                       + (f" {gpu[o]['layers']} layers" if gpu[o].get("layers") else "")
                       + f", {gpu[o].get('tokens', gpu['_run']['tokens'])} tokens" for o in OPT_CHOICES)
    return (f"arms (baseline first):\n{arms}\n\ndefault shapes per --opt:\n{shapes}\n\n"
            f"run defaults per device: CPU {cpu['_run']}; GPU {gpu['_run']}\n\n"
            f"presets: {', '.join(PRESETS)}; or --model DIR, a local Hugging Face checkpoint\n\n"
            "--lengths: " + length_data.lengths_help())


def _lengths(spec: str) -> str:
    from workbench.step.data import lengths_arg  # parsed once per process: the run reuses this parse
    return lengths_arg(spec)


def _positive(kind):
    def conv(s):
        try:
            v = kind(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {s!r}") from None
        if not v > 0:
            raise argparse.ArgumentTypeError(f"must be positive, got {s}")
        return v
    return conv


def finite_positive(at_most: float | None = None, why: str = ""):
    """A positive, finite float, at most `at_most` (`why` says why that bound) where given: --lr inf or 1e308 is
    refused here, before anything runs."""
    def conv(s):
        v = _positive(float)(s)
        if not math.isfinite(v):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {s}")
        if at_most is not None and v > at_most:
            raise argparse.ArgumentTypeError(f"must be at most {at_most:g}{why}, got {s}")
        return v
    return conv


def _non_negative(s):
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {s!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {s}")
    return v


def build_parser() -> argparse.ArgumentParser:
    """The A/B command line; every default is `ABConfig`'s own."""
    d = ABConfig()  # every default is the config's own
    dd, ds = d.data, d.step
    p = OneLineParser(prog="python -m workbench.ab", description=DOC.replace("{cpu_main_time}", measured_time()), formatter_class=HelpFormatter,
                epilog=_epilog())
    p.add_argument("--opt", default=d.opt, choices=OPT_CHOICES, help="the optimization to compare (all: each, then "
                   "all three together, with two more MoE arms on top of the other two fixes: grouped, the floor, and "
                   "hf_grouped_mm, transformers' own grouped_mm as the anchor; optimizations whose SPEC says in_all: False are left "
                   "out); levers: the lever optimizations a traced baseline names, one comparison each, then their "
                   "cumulative path (workbench/ab/levers.py)")
    p.add_argument("--model", default=None, help="preset or local HF checkpoint dir (per --opt and "
                   "device: the list below)")
    p.add_argument("--layers", type=_positive(int), default=None, help="override the layer count, at most the model's own "
                   "(--force stacks more); default: per --opt (the list below), else the model's own")
    p.add_argument("--tokens", type=_positive(int), default=None, help="packed tokens per batch (per --opt and device: "
                   f"CPU {CPU_DEFAULTS['_run']['tokens']}, GPU as the list below)")
    p.add_argument("--attn", default=None, help="attention: HF's (sdpa, eager, flex_attention, flash_attention_2) or "
                   "a workbench packing backend (varlen, sdpa, eager, flex: only where --opt packing runs); "
                   "default: the family's")
    p.add_argument("--experts", default=None, help="HF experts implementation of MoE models (eager, grouped_mm, "
                   "batched_mm); default: transformers'")
    p.add_argument("--lengths", type=_lengths, default=dd.lengths, help="document lengths (forms below; "
                   f"{_per_device('lengths')})")
    p.add_argument("--batches", type=_positive(int), default=None, help="distinct packed batches every arm cycles "
                   f"through ({_per_device('batches')})")
    p.add_argument("--steps", type=_positive(int), default=None, help="timed steps per arm per rep "
                   f"({_per_device('steps')})")
    p.add_argument("--warmup", type=_non_negative, default=None, help="warmup steps per arm per rep, at least "
                   f"(also at least one pass over the batches + 1; {_per_device('warmup')})")
    p.add_argument("--warmup-max", type=_non_negative, default=None, help="warmup steps at most "
                   f"({_per_device('warmup_max')})")
    p.add_argument("--settle-pct", type=finite_positive(), default=d.settle_pct, help="warmup ends when a step is within this "
                   "%% of the previous step on the same batch")
    p.add_argument("--reps", type=_positive(int), default=None, help="repetitions, at least; each runs every arm, "
                   f"order rotated ({_per_device('reps')})")
    p.add_argument("--target-ci", dest="target_ci_pct", type=finite_positive(), default=None, metavar="PCT", help="add reps until the "
                   "speedup's 95%% CI half-width is under PCT %%")
    p.add_argument("--budget-s", type=finite_positive(), default=None, metavar="S", help="stop adding reps once a "
                   "comparison has run S seconds")
    p.add_argument("--budget-min", type=float, default=None, metavar="M", help="the whole run's budget in minutes: "
                   "each comparison's timing runs 4 reps, then adds reps while its share of what is left lasts (or "
                   "until --target-ci); progress lines show the time left (workbench/ab/budget.py). Default: 12 for "
                   "--opt all on one GPU without --reps/--target-ci/--budget-s, else none; 0: none")
    p.add_argument("--max-reps", type=_positive(int), default=d.max_reps, help="reps at most under --target-ci/--budget-s/"
                   "--budget-min")
    p.add_argument("--sweep", default=None, metavar="KEY=N,N,...", help="one comparison per value: layers=4,8,16,28 "
                   "or tokens=8192,16384")
    p.add_argument("--nvtx-cost", nargs="?", const="add", default=d.nvtx_cost, choices=("off", "add", "only"),
                   help="the cost of NVTX ranges, the one instrument left on in timed steps: per comparison, its "
                   "baseline arm with ranges off against on; `add` (the flag alone) runs it after each comparison, "
                   "`only` runs it instead")
    p.add_argument("--only", default=None, metavar="NAME,...", help="run only these comparisons of the plan (e.g. "
                   "--opt all --only all: the three together; --nvtx-cost only --only nvtx:all)")
    p.add_argument("--headline", action=argparse.BooleanOptionalAction, default=False, help="each comparison's baseline and optimized arm only (the "
                   "floor, limit and anchor arms are skipped): the headline comparisons, in half the time")
    p.add_argument("--device", default=d.device, choices=("auto", "cpu", "cuda"),
                   help="auto: cuda when torch sees a GPU, else cpu")
    p.add_argument("--trace", default=d.trace, choices=("none", "torch", "nsys"),
                   help="separate profiled passes per arm (never inside the timed steps)")
    p.add_argument("--processes", type=_positive(int), default=d.processes, metavar="K", help="run the whole command "
                   "as K independent processes (seeds --seed .. --seed+K-1, each its own model build and discarded "
                   "warm-up rep, into OUT/p00 ..): the estimate, its CI over processes and a 95%% prediction "
                   "interval for a rerun (workbench/ab/processes.py)")
    p.add_argument("--process-seeds", default=d.process_seeds, choices=("each", "same"), help="with --processes: "
                   "each: child k seeds weights, LoRA and data with --seed + k (a population of models and batches); "
                   "same: every child uses --seed (one model and its batches, rebuilt in each process: only the "
                   "process varies, as when a user reruns the same job)")
    p.add_argument("--out", default=None, help="output folder, new or empty (default: "
                   "runs/<run_id>)")
    p.add_argument("--force", action="store_true", help="let --out name a folder that holds an earlier run: its run "
                   "files are replaced; and run a shape whose memory lower bound exceeds the device (refused "
                   "otherwise, before anything is built)")
    p.add_argument("--memory-limit-gib", type=float, default=None, help="the memory a step may use, in GiB (default: "
                   "the device's: GPU memory, or host RAM on a CPU); the preflight refuses a shape or an arm whose "
                   "memory estimate exceeds it, and --opt levers picks the activations arm that fits it")
    p.add_argument("--arms", default=None, help="comma-separated arms of one --opt, baseline first "
                   "(repeat one for an A/A: --arms rebuild,rebuild)")
    p.add_argument("--aa", action=argparse.BooleanOptionalAction, default=False, help="A/A: the baseline against itself (the noise floor; its CI "
                   "should contain 1)")
    p.add_argument("--dtype", default=ds.dtype, choices=DTYPE_CHOICES, help="auto: bf16 on CUDA, fp32 on a CPU; bf16 "
                   "on a CPU reproduces the GPU's rounding")
    p.add_argument("--precision", default=ds.precision, choices=PRECISION_CHOICES, help=PRECISION_HELP)
    p.add_argument("--seed", type=int, default=dd.seed, help="seeds weights, LoRA and data")
    p.add_argument("--lora-rank", type=_positive(int), default=ds.lora_rank, help="LoRA rank r of every adapter")
    p.add_argument("--lr", type=finite_positive(LR_MAX, f" (an AdamW step that large diverges)"), default=ds.lr, help="AdamW learning rate of the LoRA parameters")
    p.add_argument("--checkpointing", action=argparse.BooleanOptionalAction, default=True,
                   help="--no-checkpointing keeps all activations (no recompute)")
    p.add_argument("--cross-check", action=argparse.BooleanOptionalAction, default=False, help="on CUDA, the counted pass also counts sync-debug-mode "
                   "warnings (the second witness)")
    p.add_argument("--_capture", default=None, help=argparse.SUPPRESS)
    p.add_argument("--_process_unit", action="store_true", help=argparse.SUPPRESS)  # a --processes child
    p.add_argument("--_config", default=None, help=argparse.SUPPRESS)  # the nsys child: the parent's config, JSON
    return p


def parse_args(argv=None) -> ABConfig:
    """The command line as an `ABConfig` (the nsys child: the parent's, from `--_config`)."""
    ns = build_parser().parse_args(argv)
    if ns._config:  # the nsys child: the parent's whole config
        return ABConfig.from_json(ns._config)
    from workbench.step.length_files import with_model_tokenizer
    ns.lengths = with_model_tokenizer(ns.lengths, ns.model)  # a file: text column takes the model's tokenizer
    return ABConfig.from_flat(vars(ns))  # the checks that involve several flags run here, once (ABConfig.__post_init__)
