"""Every check that needs no model, run before a model is built or a folder written: one WorkbenchError line
(rc 2) instead of a failure half a minute in, after a folder was made.

- `check_run(args, device)` (the session, once the per-device defaults are filled in): the dtype on this device,
  the attention implementation's availability on this device, and protocols that can never give a verdict.
- `check_model(args, device, config, comparisons)` (the planner, once per model config, before the document
  lengths are drawn): --experts on a dense model, and the memory lower bound (`workbench.step.memory_estimate`) against
  the device's memory (GPU memory, or host RAM on a CPU), unless --force.

The token budget against the document lengths and a writable, new --out are checked by the planner
(`planner._check_lengths`) and `results.check_out_dir`, also before anything is written."""
from __future__ import annotations

import os

from workbench.errors import WorkbenchError

FLASH_ATTN = {"flash_attention_2": "is_flash_attn_2_available", "flash_attention_3": "is_flash_attn_3_available"}
"""HF attention implementations that need a CUDA device and a package: the transformers check of each."""


def check_run(args, device, note=None) -> None:
    """The flags against the device (`args` resolved: reps etc. filled in). `note(msg)` hears what is allowed but
    worth saying (a GPU protocol that measures but gives no verdict, for traces or sync counts)."""
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
    if cuda and args.reps < MIN_UNITS and args.target_ci_pct is None and args.budget_s is None:
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
    limit, where = me.device_bytes(device)
    if not limit:
        return
    b = me.DTYPE_BYTES.get(args.step.dtype) or (2 if device.type == "cuda" else 4)
    shards = int(os.environ.get("WORLD_SIZE", "1") or 1)  # under torchrun, FSDP2 shards the weights over the ranks
    for c in comparisons:
        est = me.estimate(config, c.tokens, layers=c.layers, dtype_bytes=b, checkpointing=args.step.checkpointing,
                          eager_attention=(c.attn == "eager"), weight_shards=shards)
        if est.total_bytes > limit:
            raise WorkbenchError(
                f"{c.name}: {c.model} at {c.tokens} tokens needs at least {est.total_bytes / me.GIB:.1f} GiB "
                f"({est.describe()}), more than this device's {limit / me.GIB:.1f} GiB of {where}; lower --tokens "
                "or --layers, or add --force to try anyway")
