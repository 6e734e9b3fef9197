"""The optimization contract as code: what a module of `workbench/opts/` (or one named in $WORKBENCH_OPTS) must and
may define, and what its SPEC holds. Torch-free: `workbench.opts.registry` reads the SPEC schema from here.

    Optimization   the 5 required members (a `typing.Protocol`): ARMS, BASELINE, OPTIMIZED, unsupported, apply
    HOOKS          the optional members, each with its default and who reads it; read them through `hook(mod, name)`
    Spec           the SPEC dict literal (a `TypedDict`: 5 required keys, 4 optional)
    problems(mod)  what a module gets wrong (empty: it conforms); `workbench.opts.module` refuses a module with any

`tests/test_opt_protocol.py` checks every registered optimization against it.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, get_type_hints, runtime_checkable

if TYPE_CHECKING:
    from workbench.opts import Handle


@runtime_checkable
class Optimization(Protocol):
    """An optimization module. Every arm computes the baseline's function (the runner checks it on every run), unless
    the module states DIFFERENT_FUNCTION (`HOOKS`)."""

    ARMS: tuple[str, ...]
    """Every arm, baseline first."""
    BASELINE: str
    """The faithful baseline arm (what users run today)."""
    OPTIMIZED: str
    """The optimized arm (the headline compares it with BASELINE)."""

    def unsupported(self, arm: str, model, device, **options) -> str | None:
        """Why this device / model cannot run `arm` (None: it can). Takes whichever `options` (the module's
        `comparison_options`) it names."""

    def apply(self, model, arm: str, **options) -> Handle:
        """Change the model in place for `arm` (transformers' extension points where they exist); the returned
        handle's `revert()` undoes it. Takes whichever `options` it names."""


REQUIRED = ("ARMS", "BASELINE", "OPTIMIZED", "unsupported", "apply")


@dataclasses.dataclass(frozen=True)
class Hook:
    name: str
    default: Any
    """What `hook(mod, name)` gives for a module that does not define it."""
    signature: str
    """Its type, or how it is called."""
    doc: str
    """What it means, and who reads it."""


HOOKS = {h.name: h for h in (
    Hook("comparison_options", None, "(cmp, device, state: dict) -> dict",
         "its apply / unsupported keyword arguments for one comparison; `state` is a dict per comparison the module "
         "may keep things in (offload: one pinned host pool). Read by `workbench.ab.runner` (packing: the --attn "
         "backend; moe: the tokens per batch)."),
    Hook("reference_options", None, "(options: dict, ran_attn: str, device) -> dict",
         "its options for the fp32 equivalence reference pass (packing: the sdpa backend, where varlen takes only "
         "fp16 / bf16). Read by `workbench.ab.runner`."),
    Hook("attention_backend", None, "(model, device, options: dict) -> str",
         "the attention backend its arms run (reported as the comparison's `attn`). Read by `workbench.ab.runner`."),
    Hook("lever_baseline", None, "(args, device) -> str",
         "the arm a lever starts from in `--opt levers`, the recipe the run times (precision: the run's "
         "--precision); default BASELINE. Read by `workbench.ab.planner.lever_baseline`."),
    Hook("BACKENDS", (), "tuple[str, ...]",
         "the attention backends it registers (AttentionInterface), which --attn may name besides HF's. Read by "
         "`workbench.ab.planner`."),
    Hook("OPT_IN_ARMS", (), "tuple[str, ...]",
         "arms of ARMS run only when --arms names them, never by default (moe: hf_batched_mm). Read by "
         "`workbench.ab.planner`."),
    Hook("LEVER_ANCHOR", None, "str | None",
         "an arm of ARMS a user would pick instead of the lever, timed beside its pair in `--opt levers` on a GPU "
         "(expert_lora: grouped_mm). Read by `workbench.ab.planner`."),
    Hook("lever_arms", None, "(args, device, config, tokens: int, layers: int | None, compiled: bool = False, "
         "folded_experts: bool | None = None) -> dict",
         "{'optimized': arm, 'others': [arm, ...], 'why': str, ...}: the arm `--opt levers` switches the lever to at "
         "this shape, in place of OPTIMIZED, and the other arms timed beside it (activations: the fastest arm whose "
         "memory estimate fits the device; `compiled`: at a path point whose layers are regionally compiled). Read by "
         "`workbench.ab.planner` and `workbench.ab.levers`."),
    Hook("OFF_PATH_ARMS", {}, "dict[str, str]",
         "{arm of ARMS: why the levers' path never takes it} (compile: regional_cudagraphs), listed beside the levers "
         "the path leaves out. Read by `workbench.ab.levers` (summary.json's `levers.arms_off_path`) and "
         "`workbench.ab.lever_path.path_notes`."),
    Hook("PATH_LAST", False, "bool",
         "the levers' path switches this lever on after every other (activations: which arm fits depends on the "
         "levers before it). Read by `workbench.ab.levers.path_comparison`."),
    Hook("lever_prediction", None,
         "(breakdown: dict | None, config, tokens: int, checkpointing: bool, device_name: str | None) -> dict",
         "{component, component_ms, predicted_ms, named, basis, saved_fraction}: a lever whose saving the breakdown "
         "cannot hold apart predicts it so, in place of its SPEC `lever` component's ms x SAVED_FRACTION "
         "(lora_fusion: counted HBM bytes over the device's bandwidth; `named` decides whether it runs on a GPU). "
         "Read by `workbench.ab.levers.predict`."),
    Hook("ATTENTION_FLOPS", {}, "dict[str, str]",
         "{arm: attention FLOP count (`workbench.step.flops.ATTENTION_MODES`)} for arms that change which query-key "
         "pairs attention computes (attention: dense -> block_diagonal). Read by `workbench.ab.lever_path`."),
    Hook("SAVED_FRACTION", 1.0, "float in (0, 1]",
         "the fraction of its lever component (SPEC `lever`) the optimized arm removes: the lever's predicted "
         "saving. Read by `workbench.ab.levers`."),
    Hook("NUMERICS_CHANGE", None, "str | None",
         "a sentence saying how its arms other than BASELINE change the numerics (precision: bf16 adapters): such "
         "arms are judged against an fp32 reference, not bitwise. Read by `workbench.measure.numerics`."),
    Hook("DIFFERENT_FUNCTION", None, "dict | None",
         "{'why': a sentence, 'off': {option: value}}: its arms other than BASELINE compute a different function BY "
         "DESIGN (moe_balance: another routing), stated before any run; `apply(model, arm, **off)` runs the same code "
         "path with the change switched off, which must compute BASELINE's function. Such an arm is judged by "
         "`workbench.measure.numerics.judge_different` (the off path equivalent to BASELINE under the normal "
         "criterion; the arm's loss and LoRA gradients finite and non-zero), never by equivalence. Read by "
         "`workbench.ab.runner`, `workbench.ab.levers` (the path leaves such a lever out) and `workbench.api` "
         "(refused unless allow_different_function=True)."),
    Hook("path_conflict", None, "(arms: dict[str, str], device_type: str) -> str | None",
         "why this lever's arm in `arms` ({opt: arm}, one point of the levers' path) cannot run beside the other "
         "levers' arms there (compile: regional compile refuses the varlen attention arm; liger: its RoPE breaks "
         "regional compile's fullgraph layer); None where it can. Read by "
         "`workbench.ab.levers` before the path runs: the path declines an anchor that conflicts, and leaves out a "
         "lever that conflicts at its own arm."),
    Hook("TRANSFORMERS_DEFAULT", None, "str | None",
         "the arm that is what transformers does today (moe: hf_grouped_mm, its grouped_mm experts; offload: "
         "no_offload, plain checkpointing); None: BASELINE. A recommendation names only an arm decided faster than it. "
         "Read by `workbench.ab.recommend`."),
    Hook("REFERENCE_ARMS", (), "tuple[str, ...]",
         "arms that are references, not levers (offload: none, no checkpointing: the memory reference): never "
         "recommended. Read by `workbench.ab.recommend`."),
    Hook("SLOWER_THAN_DEFAULT", {}, "dict[str, str]",
         "{arm: the measurement that found it slower than TRANSFORMERS_DEFAULT}: `apply_optimizations` applies such an "
         "arm only when asked, with one warning line a process. Read by `workbench.api`."),
    Hook("DOSE", None, "dict | None",
         "{'arm': an arm of ARMS whose apply takes `dose=u` (u units of the fix, 0 = BASELINE's function and syncs, "
         "dose_units = the arm's), 'unit': what one unit is}: a dose-response. Read by `workbench.ab.dose`."),
    Hook("dose_units", None, "(layers: int, checkpointing: bool) -> int",
         "the most units a dose takes (packing: L*p - 1 builds avoided; moe: L layers). Read by `workbench.ab.dose`."),
)}
"""The optional members, by name."""


def hook(mod, name: str):
    """Optional member `name` of optimization module `mod` (`HOOKS`), or its declared default. An undeclared name is
    a KeyError: every hook the workbench reads is declared here."""
    return getattr(mod, name, HOOKS[name].default)


class _SpecRequired(TypedDict):
    order: int
    """Where it stands among the optimizations (tables, --opt all)."""
    help: str
    """Its arms, baseline first, for `--help`."""
    cpu: dict
    """Default shape on a CPU (model, and layers / tokens where they differ from the run's)."""
    gpu: dict
    """Default shape on a GPU."""
    all_variants: tuple
    """Arms that replace its optimized arm in extra arms of `--opt all` (floor, anchor); may be ()."""


class Spec(_SpecRequired, total=False):
    """A module's `SPEC`: a dict literal, read with `ast` by `workbench.opts.registry` (never executed: `--help` imports
    no optimization)."""

    savings: str
    """The dotted path of its torch-free savings-model module (`workbench.savings.contract` states its contract);
    absent: not modelled."""
    apply_order: int
    """Where `workbench.apply_optimizations` applies it (reverted in reverse); default `order`."""
    lever: str
    """The `workbench.traces.lever_advice` component it addresses (one of `levers.LEVER_COMPONENTS`): a lever optimization,
    run by `--opt levers`."""
    in_all: bool
    """Part of `--opt all` (default True; the levers say False)."""
    families: tuple
    """The model families it applies to (`workbench.step.presets` names); absent: every family. A single `--opt` on
    another family is refused before a model is built (`workbench.ab.preflight`)."""


SPEC_TYPES = get_type_hints(Spec)
"""{key: the Python type its value must have}, in the order above."""
SPEC_REQUIRED = tuple(k for k in SPEC_TYPES if k in Spec.__required_keys__)


def spec_problems(spec: dict) -> list[str]:
    """What a SPEC gets wrong: missing required keys, unknown keys, values of another type."""
    out = [f"SPEC lacks {k}" for k in SPEC_REQUIRED if k not in spec]
    out += [f"SPEC key {k!r} is none of {', '.join(SPEC_TYPES)}" for k in spec if k not in SPEC_TYPES]
    out += [f"SPEC {k} is a {type(v).__name__}, not a {SPEC_TYPES[k].__name__}" for k, v in spec.items()
            if k in SPEC_TYPES and not (isinstance(v, SPEC_TYPES[k]) and not (SPEC_TYPES[k] is int
                                                                               and isinstance(v, bool)))]
    return out


def problems(mod) -> list[str]:
    """What optimization module `mod` gets wrong against the contract (empty: it conforms)."""
    missing = [m for m in REQUIRED if not hasattr(mod, m)]
    if missing:
        return [f"lacks {', '.join(missing)}"]
    out = []
    arms = mod.ARMS
    if not (isinstance(arms, tuple) and len(arms) >= 2 and all(isinstance(a, str) for a in arms)):
        out.append(f"ARMS is not a tuple of at least two arm names: {arms!r}")
        return out
    if len(set(arms)) != len(arms):
        out.append(f"ARMS names an arm twice: {arms!r}")
    if mod.BASELINE != arms[0]:
        out.append(f"BASELINE {mod.BASELINE!r} is not the first arm of ARMS")
    if mod.OPTIMIZED not in arms or mod.OPTIMIZED == mod.BASELINE:
        out.append(f"OPTIMIZED {mod.OPTIMIZED!r} is no arm of ARMS other than BASELINE")
    out += [f"{m} is not callable" for m in ("unsupported", "apply") if not callable(getattr(mod, m))]
    for name in ("comparison_options", "reference_options", "attention_backend", "lever_baseline",
                 "lever_prediction"):
        if hasattr(mod, name) and not callable(getattr(mod, name)):
            out.append(f"{name} is not callable")
    for name in ("BACKENDS", "OPT_IN_ARMS"):
        v = hook(mod, name)
        if not (isinstance(v, tuple) and all(isinstance(x, str) for x in v)):
            out.append(f"{name} is not a tuple of names: {v!r}")
    for name in ("REFERENCE_ARMS",):
        v = hook(mod, name)
        if not (isinstance(v, tuple) and all(isinstance(x, str) and x in arms for x in v)):
            out.append(f"{name} is not a tuple of arms of ARMS: {v!r}")
    td = hook(mod, "TRANSFORMERS_DEFAULT")
    if td is not None and td not in arms:
        out.append(f"TRANSFORMERS_DEFAULT {td!r} is no arm of ARMS")
    off = hook(mod, "OFF_PATH_ARMS")
    if not (isinstance(off, dict) and all(a in arms and a != mod.OPTIMIZED and isinstance(w, str) and w
                                          for a, w in off.items())):
        out.append(f"OFF_PATH_ARMS is not {{arm of ARMS other than OPTIMIZED: a sentence}}: {off!r}")
    slower = hook(mod, "SLOWER_THAN_DEFAULT")
    if not (isinstance(slower, dict) and all(a in arms and isinstance(w, str) and w for a, w in slower.items())):
        out.append(f"SLOWER_THAN_DEFAULT is not {{arm of ARMS: a sentence}}: {slower!r}")
    stray = [a for a in hook(mod, "OPT_IN_ARMS") if a not in arms or a in (mod.BASELINE, mod.OPTIMIZED)]
    if stray:
        out.append(f"OPT_IN_ARMS {stray!r} are not further arms of ARMS")
    anchor = hook(mod, "LEVER_ANCHOR")
    if anchor is not None and anchor not in arms:
        out.append(f"LEVER_ANCHOR {anchor!r} is no arm of ARMS")
    fl = hook(mod, "ATTENTION_FLOPS")
    from workbench.step.flops import ATTENTION_MODES  # (torch-free)
    if not isinstance(fl, dict) or any(a not in arms or m not in ATTENTION_MODES for a, m in fl.items()):
        out.append(f"ATTENTION_FLOPS is not {{arm of ARMS: one of {ATTENTION_MODES}}}: {fl!r}")
    frac = hook(mod, "SAVED_FRACTION")
    if isinstance(frac, bool) or not isinstance(frac, (int, float)) or not 0 < frac <= 1:
        out.append(f"SAVED_FRACTION is not a number in (0, 1]: {frac!r}")
    dose = hook(mod, "DOSE")
    if dose is not None and not (isinstance(dose, dict) and dose.get("arm") in arms
                                 and isinstance(dose.get("unit"), str) and callable(hook(mod, "dose_units"))):
        out.append(f"DOSE is not {{'arm': an arm of ARMS, 'unit': str}} with a callable dose_units: {dose!r}")
    nc = hook(mod, "NUMERICS_CHANGE")
    if nc is not None and not (isinstance(nc, str) and nc):
        out.append(f"NUMERICS_CHANGE is not a sentence: {nc!r}")
    df = hook(mod, "DIFFERENT_FUNCTION")
    if df is not None and not (isinstance(df, dict) and set(df) == {"why", "off"} and isinstance(df["why"], str)
                               and df["why"] and isinstance(df["off"], dict) and df["off"]
                               and all(isinstance(k, str) for k in df["off"])):
        out.append(f"DIFFERENT_FUNCTION is not {{'why': a sentence, 'off': {{option: value, ...}}}}: {df!r}")
    if df is not None and nc is not None:
        out.append("states both NUMERICS_CHANGE and DIFFERENT_FUNCTION: an arm is judged by one of them")
    return out
