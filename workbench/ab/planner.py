"""args -> validated comparisons: which arms each comparison runs, in which order, under which name."""
from __future__ import annotations

import dataclasses

from workbench.opts import registry
from workbench import opts as optimizations
from workbench.opts.protocol import hook
from workbench.ab import preflight
from workbench.ab.cli import CPU_DEFAULTS, GPU_DEFAULTS, HF_ATTN
from workbench.ab.ab_config import parse_sweep
from workbench.errors import WorkbenchError


# --- plan ---------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class ArmSpec:
    label: str
    """Name in reports: the arm (or `a+b+c` for --opt all; `arm#2` for a repeated arm; `+nvtx` / `-nvtx`)."""
    arms: dict
    """{opt: arm} applied in this order."""
    ranges: bool = True
    """NVTX ranges on in its timed steps (off only in the NVTX-cost comparison)."""
    options: dict = dataclasses.field(default_factory=dict)
    """{opt: apply keyword arguments of this arm alone}, over the comparison's (`workbench.ab.dose`: {opt: {dose: u}})."""


@dataclasses.dataclass
class Comparison:
    opt: str
    model: str
    layers: int | None
    tokens: int
    attn: str | None
    arms: list[ArmSpec]
    baseline: str
    optimized: str | None
    explicit_arms: bool = False
    excluded: dict = dataclasses.field(default_factory=dict)
    """{opt: why} for --opt all: optimizations left out because the model cannot run them."""
    name: str = ""
    """Its name in results: the opt, `opt@layers=8` in a sweep, `nvtx:opt` for the NVTX-cost comparison."""
    arm_choice: dict | None = None
    """A lever's `lever_arms` choice for this shape ({optimized, others, why, estimates_bytes}), None for the others."""

    def __post_init__(self):
        self.name = self.name or self.opt


def _modules(opt_names) -> dict:
    return {o: optimizations.module(o) for o in opt_names}


def _unique_labels(names: list[str]) -> list[str]:
    seen: dict = {}
    out = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        out.append(n if seen[n] == 1 else f"{n}#{seen[n]}")
    return out



def plan(args, device) -> list[Comparison]:
    """The comparisons to run, validated (unknown opt / model / arm raise WorkbenchError)."""
    from workbench.step.models import load_config

    optimizations.load_all()  # what the optimizations register on import (wb_* experts names) is there to check

    defaults = GPU_DEFAULTS if device.type == "cuda" else CPU_DEFAULTS
    if args.opt == "levers":
        return _lever_plan(args, defaults, device)
    opt_list = list(registry.in_all_names()) + ["all"] if args.opt == "all" else [args.opt]
    if args.arms and args.opt == "all":
        raise WorkbenchError(f"--arms needs a single --opt ({', '.join(optimizations.OPTS)}); use --aa for an A/A "
                             "of all")
    if args.step.attn is not None and args.step.attn not in HF_ATTN:
        backends = set(_attention_backends())
        if args.step.attn not in backends:
            raise WorkbenchError(f"unknown attention backend {args.step.attn!r}; choose from "
                                 f"{', '.join(sorted(set(HF_ATTN) | backends))}")
    sweep = parse_sweep(args.sweep)
    comps = []
    for opt in opt_list:
        d = defaults[opt]
        model = args.step.model or d["model"]
        layers = args.step.layers if args.step.layers is not None else d.get("layers")
        tokens = args.data.tokens or d.get("tokens") or defaults["_run"]["tokens"]
        preflight.check_shape(args, opt, model)  # the family, --layers and --lora-rank against the model's own
        hf_attn = args.step.attn if (args.step.attn is None or args.step.attn in HF_ATTN) else None
        cfg = load_config(model, layers, hf_attn, args.step.experts)  # unknown preset / bad checkpoint / experts -> error
        if opt == "all":
            mods = _modules(registry.in_all_names())
            names = ["baseline", "optimized"] if not args.aa else ["baseline", "baseline"]
            specs = [{o: (m.BASELINE if which == "baseline" else m.OPTIMIZED) for o, m in mods.items()}
                     for which in names]
            for o, m in mods.items():  # each optimization's floor / anchor arms in place of its optimized one
                for variant in () if args.aa else _all_variants(o):
                    if variant in m.ARMS:
                        specs.append({**specs[1], o: variant})
            labels = _unique_labels(["+".join(a.values()) for a in specs])
            arms = [ArmSpec(lbl, a) for lbl, a in zip(labels, specs)]
        else:
            mod = optimizations.module(opt)
            if args.arms:
                names = [a.strip() for a in args.arms.split(",") if a.strip()]
                bad = [a for a in names if a not in mod.ARMS]
                if bad:
                    raise WorkbenchError(f"unknown arm {bad[0]!r} for --opt {opt}; arms: {', '.join(mod.ARMS)}")
                if len(names) < 2:
                    raise WorkbenchError("--arms needs at least two arms (the first is the baseline)")
            elif args.aa:
                names = [mod.BASELINE, mod.BASELINE]
            else:
                names = [mod.BASELINE, mod.OPTIMIZED] + [a for a in mod.ARMS if a not in (mod.BASELINE, mod.OPTIMIZED)
                                                         and a not in hook(mod, "OPT_IN_ARMS")]
            labels = _unique_labels(names)
            arms = [ArmSpec(lbl, {opt: a}) for lbl, a in zip(labels, names)]
        if args.headline and not args.arms:
            arms = arms[:2]  # the baseline and the optimized arm: the comparison the headline reports
        base = Comparison(opt=opt, model=model, layers=layers, tokens=tokens, attn=args.step.attn, arms=arms,
                          baseline=arms[0].label, optimized=arms[1].label if len(arms) > 1 else None,
                          explicit_arms=bool(args.arms))
        variants = [base]
        if sweep:
            key, values = sweep
            variants = [dataclasses.replace(base, arms=[dataclasses.replace(s) for s in base.arms],
                                            excluded={}, name=f"{opt}@{key}={v}", **{key: v}) for v in values]
        preflight.check_model(args, device, cfg, variants)  # --experts on a dense model; the memory lower bound
        for t in dict.fromkeys(c.tokens for c in variants):  # the token budgets this comparison will pack
            _check_lengths(args, t, cfg.vocab_size)
        for c in variants:
            if args.nvtx_cost != "only":
                comps.append(c)
            if args.nvtx_cost in ("add", "only"):
                b = c.arms[0]
                comps.append(dataclasses.replace(
                    c, name=f"nvtx:{c.name}", arms=[ArmSpec(f"{b.label}-nvtx", dict(b.arms), ranges=False),
                                                    ArmSpec(f"{b.label}+nvtx", dict(b.arms), ranges=True)],
                    baseline=f"{b.label}-nvtx", optimized=f"{b.label}+nvtx", excluded={}))
    if args.only:
        names = [n.strip() for n in args.only.split(",") if n.strip()]
        bad = [n for n in names if n not in [c.name for c in comps]]
        if bad:
            raise WorkbenchError(f"--only {bad[0]!r} names no comparison of this run; its comparisons: "
                                 f"{', '.join(c.name for c in comps)}")
        comps = [c for c in comps if c.name in names]
    _check_backend_installed(args, comps)
    return comps


def _check_backend_installed(args, comps) -> None:
    """--attn naming a workbench backend (not one of transformers' `HF_ATTN`) needs an optimization in every
    comparison that installs it (a module whose BACKENDS names it: packing): without one the model would run its own
    attention (sdpa's dense T x T mask) under that name. Refused in one line, naming the ones that install it."""
    name = args.step.attn
    if name is None or name in HF_ATTN:
        return
    installers = [o for o in registry.names() if name in hook(optimizations.module(o), "BACKENDS")]
    as_arm = [o for o in registry.names() if name in optimizations.module(o).ARMS]  # attention's varlen / flex arms
    for c in comps:
        own = [o for o in as_arm if any(o in s.arms for s in c.arms)]
        if own and not any(o in installers for s in c.arms for o in s.arms):
            raise WorkbenchError(f"--attn {name} does not apply to --opt {own[0]}: its arms choose the attention "
                                 f"kernel (time its {name} arm with --arms)")
        if not any(o in installers for s in c.arms for o in s.arms):
            raise WorkbenchError(
                f"--attn {name} is a workbench attention backend that only --opt {' / '.join(installers)} installs "
                f"(in --opt all: --only {','.join(installers)},all); comparison {c.name} would run the model's own "
                f"attention under its name: use an HF implementation ({', '.join(HF_ATTN)})"
                + "".join(f", or --opt {o} (its {name} arm)" for o in as_arm))


def _check_lengths(args, tokens: int, vocab_size: int) -> None:
    """One packed batch of `tokens` from --lengths, built before anything else (a document longer than the token
    budget fails here, with one line, not after the model is built and a folder written)."""
    args.data.make_batches(tokens, vocab_size, batches=1)


def _all_variants(opt: str) -> tuple:
    """The arms that replace `opt`'s optimized arm in extra arms of --opt all (its SPEC; none for an unlisted one)."""
    from workbench.opts import registry as opt_registry
    try:
        return tuple(opt_registry.spec(opt)["all_variants"])
    except WorkbenchError:
        return ()


def _attention_backends() -> tuple:
    """The attention backends the optimizations register (a module's BACKENDS): what --attn may name besides HF's."""
    return tuple(b for o in registry.names() for b in hook(optimizations.module(o), "BACKENDS"))


def _lever_plan(args, defaults, device) -> list[Comparison]:
    """--opt levers: one comparison (baseline, optimized) per registered lever optimization, every one on the shape
    of `levers` (so on the same batches); `workbench.ab.levers.select` keeps those that apply and adds the path."""
    from workbench.step.models import load_config

    for flag, v in (("--arms", args.arms), ("--aa", args.aa), ("--sweep", args.sweep)):
        if v:
            raise WorkbenchError(f"{flag} does not apply to --opt levers (one comparison per lever, then the path)")
    names = registry.levers()
    if not names:
        raise WorkbenchError("--opt levers: no lever optimization is registered (a SPEC with a `lever` key: "
                             "workbench/opts/registry.py)")
    d = defaults["levers"]
    model = args.step.model or d["model"]
    layers = args.step.layers if args.step.layers is not None else d.get("layers")
    tokens = args.data.tokens or d.get("tokens") or defaults["_run"]["tokens"]
    preflight.check_shape(args, "levers", model)
    cfg = load_config(model, layers, args.step.attn if args.step.attn in HF_ATTN else None, args.step.experts)
    _check_lengths(args, tokens, cfg.vocab_size)
    comps = []
    for opt in names:
        mod = optimizations.module(opt)
        base = lever_baseline(mod, args, device)
        if base == mod.OPTIMIZED:  # the run's recipe already is the lever's optimized arm (--precision bf16)
            continue
        best, others, note = mod.OPTIMIZED, [], None
        choose = hook(mod, "lever_arms")  # the arm that fits this shape (the activations lever), and the others
        if choose is not None:
            pick = choose(args, device, cfg, tokens, layers)
            best, others, note = pick["optimized"], pick["others"], pick
            if best == base:
                continue
        arms = [ArmSpec(base, {opt: base}), ArmSpec(best, {opt: best})] + [ArmSpec(a, {opt: a}) for a in others]
        anchor = hook(mod, "LEVER_ANCHOR")  # the arm a user would pick instead, timed beside (GPU only)
        if anchor and device.type == "cuda" and anchor not in [a.label for a in arms]:
            arms.append(ArmSpec(anchor, {opt: anchor}))
        comps.append(Comparison(opt=opt, model=model, layers=layers, tokens=tokens, attn=args.step.attn, arms=arms,
                                baseline=base, optimized=best, arm_choice=note))
    preflight.check_model(args, device, cfg, comps)  # every arm's memory estimate against the device, before a run
    _check_backend_installed(args, comps)
    return comps


def lever_baseline(mod, args, device) -> str:
    """The arm a lever starts from in `--opt levers`: the module's `lever_baseline(args, device)` (the realistic
    recipe the run times: precision's is the run's --precision, autocast on a GPU) or its BASELINE."""
    fn = hook(mod, "lever_baseline")
    return fn(args, device) if fn is not None else mod.BASELINE
