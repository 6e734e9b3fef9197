"""The set-up shared by the one-off tools that run one arm of a planned comparison without the engine
(`equiv_bf16`: FSDP2 against one process; `trace_classes`: a traced step's time by kernel class): `python -m
workbench.ab`'s flags parsed and resolved once (the shape, precision, seed, protocol counts), this rank's process
group under torchrun (none without it: one process), the planned comparisons and a runner to build and step them."""
from __future__ import annotations

import dataclasses
import os
import sys

from workbench.errors import WorkbenchError


@dataclasses.dataclass
class Probe:
    own: object
    """The tool's own flags (argparse namespace)."""
    args: object
    """The resolved `ABConfig` (`python -m workbench.ab`'s flags)."""
    device: object
    ctx: object
    """This rank's `DistContext` under torchrun; None in one process."""
    comps: list
    runner: object

    @property
    def rank(self) -> int:
        return 0 if self.ctx is None else self.ctx.rank

    @property
    def world(self) -> int:
        return 1 if self.ctx is None else self.ctx.world

    @property
    def is_main(self) -> bool:
        return self.ctx is None or self.ctx.is_main

    def progress(self, msg: str) -> None:
        if self.is_main:
            print(msg, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.ctx is not None:
            self.ctx.close()


def setup(own_parser, argv) -> Probe:
    """Parse `argv` (the tool's flags, then `python -m workbench.ab`'s), initialise the process group when launched
    by torchrun, resolve the config for the device and plan the comparisons. Bad input: WorkbenchError (one line)."""
    from workbench.ab import preflight
    from workbench.ab.cli import CPU_DEFAULTS, GPU_DEFAULTS, parse_args
    from workbench.ab.distributed.context import init, launched

    own, rest = own_parser.parse_known_args(argv)
    a = parse_args(rest)
    if a.trace != "none" or a.processes > 1 or a.sweep or a.aa:
        raise WorkbenchError("--trace, --processes, --sweep and --aa belong to python -m workbench.ab, not to "
                             f"{own_parser.prog}")
    preflight.check_early(a)
    ctx = init(a.device) if launched() else None
    try:
        if ctx is None:
            from workbench.step.models import resolve_device
            device = resolve_device(a.device)
        else:
            device = ctx.device
        a = a.resolved(device, (GPU_DEFAULTS if device.type == "cuda" else CPU_DEFAULTS)["_run"])
        preflight.check_run(a, device, note=None)
        from workbench.ab.planner import plan
        comps = plan(a, device)
        if ctx is None:
            from workbench.ab.runner import Runner
            runner = Runner(a, device, None)
        else:
            from workbench.ab.distributed.rank_runner import DistRunner
            runner = DistRunner(a, device, None, ctx)
    except BaseException:
        if ctx is not None:
            ctx.close()
        raise
    return Probe(own=own, args=a, device=device, ctx=ctx, comps=comps, runner=runner)


def baseline_spec(cmp):
    """The comparison's baseline `ArmSpec` (NVTX / profiler ranges on: the traced and checked step is the timed one)."""
    return next(s for s in cmp.arms if s.label == cmp.baseline)


def ran_attention(runner, model, cmp) -> str:
    """The attention implementation the comparison runs (an optimization's backend, else the model's), as
    `Runner.phase_build` finds it: what the fp32 reference's options depend on."""
    from workbench import opts as optimizations
    from workbench.opts.protocol import hook as opt_hook

    ran = model.config._attn_implementation
    opts_o = runner.options(cmp)
    for opt in dict.fromkeys(x for s in cmp.arms for x in s.arms):
        fn = opt_hook(optimizations.module(opt), "attention_backend")
        if fn is not None:
            ran = fn(model, runner.device, opts_o.get(opt, {}))
    return ran


def write_json(path: str | None, obj: dict) -> None:
    """Rank 0: `obj` to `path` (atomically; its folder made) and as the last stdout line."""
    from workbench.cli import emit_json
    from workbench.measure.results import atomic_write_json

    if path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        atomic_write_json(path, obj)
    emit_json(obj)


def run_rank_main(main) -> int:
    """`workbench.cli.run_main` for a tool that may run under torchrun: a WorkbenchError (bad input, the same on
    every rank) is said once, by rank 0; every rank exits 2. After CUDA was used, the process ends without the
    interpreter's teardown (as `python -m workbench.ab` does: a traced process once hung there)."""
    quiet = os.environ.get("RANK", "0").strip() not in ("", "0")
    try:
        rc = main() or 0
    except WorkbenchError as e:
        if not quiet:
            print(f"error: {e}", file=sys.stderr)
        rc = 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        rc = 130
    if "torch" in sys.modules:
        import torch
        if torch.cuda.is_initialized():
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(rc)
    return rc
