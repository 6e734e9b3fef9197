"""Every check that needs no model, run before a model is built or a folder written: one WorkbenchError line
(rc 2) instead of a failure half a minute in, after a folder was made.

- `check_early(args)` (`python -m workbench.ab`, before torch is imported: a mistake answers in well under a
  second): `check_shape` for every comparison whose model is known without the device.
- `check_shape(args, opt, model)` (also the planner's, once the device picked the default model): the model's own
  shape (`workbench.step.presets.own_shape`, torch-free) against the flags: an optimization for other model
  families, --layers beyond the model's own count (unless --force), a LoRA rank above the hidden size.

- `check_run(args, device)` (the session, once the per-device defaults are filled in): the dtype on this device,
  the attention implementation's availability on this device, and protocols that can never give a verdict.
- `check_model(args, device, config, comparisons)` (the planner, once per model config, before the document
  lengths are drawn): --experts on a dense model, and the memory lower bound (`workbench.step.memory_estimate`) against
  the device's memory (GPU memory, or host RAM on a CPU), unless --force.

The token budget against the document lengths and a writable, new --out are checked by the planner
(`planner._check_lengths`) and `results.check_out_dir`, also before anything is written."""
from __future__ import annotations

from workbench.errors import WorkbenchError

FLASH_ATTN = {"flash_attention_2": "is_flash_attn_2_available", "flash_attention_3": "is_flash_attn_3_available"}
"""HF attention implementations that need a CUDA device and a package: the transformers check of each."""


def check_shape(args, opt: str, model: str) -> None:
    """The flags against `model`'s own shape, for comparison `opt` (an optimization, `all` or `levers`); a model
    whose shape cannot be read here passes (`load_config` refuses it with its own line)."""
    from workbench.ab.ab_config import parse_sweep
    from workbench.opts import registry
    from workbench.step.presets import PRESETS, own_shape

    shape = own_shape(model)
    if shape is None:
        return
    fams = registry.families(opt) if opt == args.opt and opt in registry.names() else None
    if fams and shape["family"] not in fams:  # --opt all leaves such an optimization out, and says so
        fitting = [n for n, p in PRESETS.items() if p.family in fams]
        raise WorkbenchError(f"--opt {opt} applies to {', '.join(fams)} models; {model} is a {shape['family']} model: "
                             f"pick one of {', '.join(fitting)} (or leave --model out)")
    sweep = parse_sweep(args.sweep)
    layers = [args.step.layers] if args.step.layers is not None else (sweep[1] if sweep and sweep[0] == "layers" else [])
    over = [n for n in layers if n > shape["layers"]]
    if over and not args.force:
        raise WorkbenchError(f"--layers {max(over)}: {model} has {shape['layers']} layers; give at most "
                             f"{shape['layers']}, or add --force to stack more (its layer pattern repeated, the added "
                             "layers with random weights)")
    if args.step.lora_rank > shape["hidden"]:
        raise WorkbenchError(f"--lora-rank {args.step.lora_rank} is above {model}'s hidden size {shape['hidden']} (a LoRA "
                             f"adapter's rank is at most its layer's width); give at most {shape['hidden']}")


def check_early(args) -> None:
    """`check_shape` for each comparison whose model is known before the device is (--model, or --device cpu /
    cuda with the per-device default); torch-free, so `python -m workbench.ab` refuses these before importing it."""
    from workbench.ab.cli import CPU_DEFAULTS, GPU_DEFAULTS
    from workbench.opts import registry

    if args._config or args._capture:
        return
    defaults = {"cpu": CPU_DEFAULTS, "cuda": GPU_DEFAULTS}.get(args.device)
    for opt in [*registry.in_all_names(), "all"] if args.opt == "all" else [args.opt]:
        model = args.step.model or (defaults[opt]["model"] if defaults and opt in defaults else None)
        if model:
            check_shape(args, opt, model)


def check_run(args, device, note=None, rep_verdict: bool = True) -> None:
    """The flags against the device (`args` resolved: reps etc. filled in). `note(msg)` hears what is allowed but
    worth saying (a GPU protocol that measures but gives no verdict, for traces or sync counts). The reps check
    applies where the rep is the claim's unit (`rep_verdict`) and not to an nsys capture's child (`_capture`: its
    parent was checked; the child times the capture's steps only)."""
    cuda = device.type == "cuda"
    if args.step.dtype == "fp16" and not cuda:
        raise WorkbenchError("--dtype fp16 needs a CUDA device (on a CPU use fp32, or bf16 for the GPU's rounding)")
    if args.step.attn in FLASH_ATTN:
        if not cuda:
            raise WorkbenchError(f"--attn {args.step.attn} needs a CUDA device; on a CPU use sdpa, eager or "
                                 "flex_attention (or a packing backend: varlen, sdpa, eager, flex)")
        import transformers.utils as tu
        if not getattr(tu, FLASH_ATTN[args.step.attn], lambda: False)():
            raise WorkbenchError(f"--attn {args.step.attn}: its package is not installed here; install it or use sdpa")
    from workbench.measure.stats import MIN_UNITS
    if (cuda and rep_verdict and not args._capture and not args._process_unit and args.reps < MIN_UNITS and args.target_ci_pct is None
            and args.budget_s is None):
        other = [f for f, on in (("--trace", args.trace != "none"), ("--cross-check", args.cross_check),
                                 ("--nvtx-cost", args.nvtx_cost != "off")) if on]
        if not other:
            raise WorkbenchError(f"--reps {args.reps} on a GPU can never give a verdict (the rep is the unit: "
                                 f"{MIN_UNITS} reps at least); use --reps {MIN_UNITS} or more, or --target-ci, or "
                                 "add --trace / --cross-check for a run of traces or sync counts alone")
        if note is not None:
            note(f"note: --reps {args.reps} gives no speedup verdict (the rep is the unit: {MIN_UNITS} reps at "
                 f"least); the run measures ({', '.join(other)}), but each comparison reports `no verdict`")


def check_model(args, device, config, comparisons) -> None:
    """One model config and the comparisons that build it (their layers and tokens): refuses --experts on a dense
    model, and a shape whose memory lower bound exceeds the device unless --force."""
    from workbench.step.models import family_of
    from workbench.step.presets import MOE_FAMILIES

    family = family_of(config)
    if args.step.experts is not None and family not in MOE_FAMILIES and (args.opt != "all"
                                                                          or args.step.model is not None):
        raise WorkbenchError(f"--experts {args.step.experts} applies to MoE models ({', '.join(MOE_FAMILIES)}); "
                             f"{comparisons[0].model} is a dense {family} model: leave --experts out or pick a MoE "
                             "model")
    if args.force:
        return
    from workbench.step import memory_estimate as me
    limit, where = (me.device_bytes(device) if args.memory_limit_gib is None
                    else me.device_bytes(device, args.memory_limit_gib))
    if not limit:
        return
    for c in comparisons:
        for arm, spec_arms in _activation_points(args, c):
            est = me.estimate_for(args, device, config, c.tokens, c.layers, activations=spec_arms["activations"],
                                  compiled=spec_arms["compiled"], attn=c.attn, folded_experts=spec_arms["folded"])
            if est.total_bytes > limit:
                what = f"{c.name}: {c.model} at {c.tokens} tokens" + (f", arm {arm}," if arm else "")
                raise WorkbenchError(
                    f"{what} needs at least {est.total_bytes / me.GIB:.1f} GiB ({est.describe()}) with activations "
                    f"{spec_arms['activations']}, more than this device's {limit / me.GIB:.1f} GiB of {where}; lower --tokens or "
                    "--layers, keep checkpointing on, or add --force to try anyway")


def _activation_points(args, c) -> list:
    """[(arm label or None, {"activations": arm, "compiled": bool, "folded": bool})] of a comparison: each arm's
    activations arm (its own where it sets the activations lever, else the run's --checkpointing), whether it compiles
    the layers, and whether a MoE model's experts read peft's folded weight there (every expert_lora arm but `split`,
    every moe arm; without those levers, the run's --experts); one entry per distinct triple, the arm named only where the
    comparison's arms differ in them."""
    from workbench.step import memory_estimate as me

    base = "full" if args.step.checkpointing else "none"
    folded = me.folded_experts_of(args.step.experts)
    seen: dict = {}
    for spec in getattr(c, "arms", None) or []:
        key = (spec.arms.get("activations", base), spec.arms.get("compile", "eager") != "eager",
               (spec.arms["expert_lora"] != "split" if "expert_lora" in spec.arms else
                folded or "moe" in spec.arms))
        seen.setdefault(key, spec.label)
    if not seen:
        seen[(base, False, folded)] = None
    named = len(seen) > 1
    return [(label if named else None, {"activations": a, "compiled": comp, "folded": f})
            for (a, comp, f), label in seen.items()]
