"""The run: the output folder and its writer, NVML, signals, the comparison loop, the verdicts step and the final
JSON line. `main` is `python -m workbench.ab`'s entry point; under torchrun it hands over to
`workbench.ab.distributed`."""
from __future__ import annotations

import dataclasses
import os
import signal
import sys
import time
import traceback

import torch

from workbench.savings import verdicts
from workbench.ab.cli import CPU_DEFAULTS, GPU_DEFAULTS, parse_args
from workbench.ab.arm import _fresh, freeze_long_lived
from workbench.ab.planner import ArmSpec, Comparison
from workbench.ab.planner import plan
from workbench.ab.runner import DTYPES, Runner, _free, apply_arms, unsupported_reason
from workbench.cli import emit_json, progress
from workbench.errors import UnsupportedArm, WorkbenchError


class Terminated(BaseException):
    """SIGTERM, handled like Ctrl-C: the folder is kept and marked incomplete."""


def _verdicts(writer, summary: dict, failures: list) -> list:
    """The savings models' verdicts from this run's traces (`workbench.savings.verdicts`): printed, written into
    summary.json; an input check that fails is a failure of the run (loud)."""
    writer.flush()
    writer.write_summary({**summary, "complete": False, "status": "running"})
    try:
        rows = verdicts.annotate(writer.out_dir)
    except Exception as e:  # noqa: BLE001 - the timings stand; the verdicts are reported as failed
        failures.append(f"savings-model verdicts failed: {type(e).__name__}: {e}")
        progress(f"error: {failures[-1]}")
        return summary["comparisons"]
    from workbench.measure.results import load_run
    on_disk = load_run(writer.out_dir)[1]
    annotated = on_disk.get("comparisons", summary["comparisons"])
    summary["verdicts"] = on_disk.get("verdicts")
    for r in rows:
        progress(f"[{r['comparison']}] savings model {r['formula']}: predicted {verdicts.fmt_ms(r['predicted_ms'], r['predicted_ci95'])}, "
                 f"measured {verdicts.fmt_ms(r['measured_ms'], r['measured_ci95'])}: {r['verdict']}"
                 + (f" ({r['reason']})" if r.get("reason") else "")
                 + (f"; largest missing component {r['largest_missing']} {r['largest_missing_ms']:.2f} ms"
                    if r.get("verdict") == "refuted" and r.get("largest_missing") else ""))
        if r["verdict"] == "input check failed":
            failures.append(f"INPUT CHECK FAILED: {r['comparison']}: {r['reason']}")
            progress(f"error: {failures[-1]}")
    return annotated


# --- the nsys child ---------------------------------------------------------------------------------------------

def capture_child(args, device) -> int:
    """Under `nsys profile -c cudaProfilerApi`: run one arm's warmup, then its timed steps between
    torch.cuda.profiler.start() and stop()."""
    from workbench.step.data import to_device
    from workbench.step.harness import train_steps
    from workbench.instrument import Ranges

    arms, arm_options = capture_arms(args._capture)
    cmp = Comparison(opt=args.opt, model=args.step.model, layers=args.step.layers, tokens=args.data.tokens,
                     attn=args.step.attn, arms=[ArmSpec("capture", arms)], baseline="capture", optimized=None)
    r = Runner(args, device, writer=None)
    model = r.build(cmp)
    options = r.options(cmp)
    why = unsupported_reason(model, arms, device, options)
    if why:
        raise UnsupportedArm(why)
    for opt, kw in arm_options.items():
        options[opt] = {**options.get(opt, {}), **kw}
    cpu_batches = args.data.make_batches(args.data.tokens, model.config.vocab_size)
    handle = apply_arms(model, arms, options)
    try:
        batches = to_device(_fresh(cpu_batches), device, prepare=handle.prepare_batch)
        ranges = Ranges(nvtx=True, profiler=False)
        from workbench.step.harness import make_optimizer
        optim = make_optimizer(model, args.step.lr)
        step_precision = handle.precision(args.step.precision)
        if args.warmup:
            train_steps(model, batches, steps=args.warmup, optimizer=optim, ranges=ranges, count_syncs=False,
                        inputs_fn=handle.inputs_fn, precision=step_precision)
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        train_steps(model, batches, steps=args.steps, optimizer=optim, ranges=ranges, count_syncs=False,
                    inputs_fn=handle.inputs_fn, precision=step_precision)
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
    finally:
        handle.revert()
    return 0


def capture_arms(spec: str) -> tuple[dict, dict]:
    """({opt: arm}, {opt: the arm's own options}) of a `--_capture` (`workbench.ab.passes.capture_spec`)."""
    import json
    if spec.startswith("{"):
        d = json.loads(spec)
        return dict(d["arms"]), dict(d.get("options") or {})
    return dict(kv.split("=", 1) for kv in spec.split(",")), {}


def closing_line(summary: dict, planned: int) -> str:
    """The one human line before the final JSON: how many comparisons ran, whether every arm was equivalent, and
    where the folder is (`complete: 4/4 comparisons, all arms equivalent -> runs/...`)."""
    cmps = summary.get("comparisons") or []
    ran = sum(c.get("status") == "ok" for c in cmps)
    stated = [f"{c.get('name')}: {arm}" for c in cmps if c.get("status") == "ok"
              for arm, df in (c.get("different_function") or {}).items() if df.get("passed")]
    from workbench.measure.numerics import accepted
    bad = [c.get("name") for c in cmps if c.get("status") == "ok" and not c.get("equivalent")
           and not (c.get("different_function") and all(map(accepted, (c.get("equivalence") or {}).values())))]
    equiv = "all arms equivalent" if ran and not bad else (f"NOT equivalent: {', '.join(bad)}" if bad else
                                                           "no arm compared")
    if stated and not bad:
        equiv = f"every other arm equivalent; different function (stated): {', '.join(stated)}"
    return f"{summary.get('status')}: {ran}/{planned} comparisons, {equiv} -> {summary.get('out')}"


def _install_sigterm():
    def handler(signum, frame):
        raise Terminated()
    try:
        return signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread (tests calling main() from a worker)
        return None


def main(argv=None, args=None) -> int:
    """`python -m workbench.ab`: `args` is `cli.parse_args(argv)` when the caller parsed it already (`__main__`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    a = parse_args(argv) if args is None else args
    # --- distributed: under torchrun, one process per rank, FSDP2 (workbench/ab/distributed/) ---
    from workbench.ab import distributed
    if distributed.launched():
        return distributed.main(a, argv, _main)
    # ---
    return _main(argv, a, None)


@dataclasses.dataclass
class _Run:
    """One run's state, passed from phase to phase (`_main`)."""
    argv: list
    a: object
    """The resolved `ABConfig`."""
    dctx: object
    device: object
    main_rank: bool
    run_id: str = ""
    out_dir: str = ""
    comps: list = dataclasses.field(default_factory=list)
    writer: object = None
    sampler: object = None
    runner: object = None
    levers: object = None
    summary: dict = dataclasses.field(default_factory=dict)
    status: str = "incomplete"
    reason: str | None = None
    rc: int = 1
    prog: str = "workbench.ab"
    """The module whose command meta.json records."""
    replan: object = None
    """comparisons, device -> comparisons: another entry point's arms over the plan's shape (`workbench.ab.dose`)."""
    runner_cls: object = None
    """The Runner class (None: `Runner`): another entry point's protocol (`workbench.ab.dose`)."""
    fault: object = None
    """The OSError that ended the run (a full disk), or None."""
    rep_verdict: bool = True
    """The run's claim rests on the rep, so a GPU run of fewer reps than a verdict needs is refused (`workbench.ab`);
    False where the unit is the process (`workbench.ab.dose`: its slope)."""
    budget: tuple | None = None
    """(minutes, whether it is the default, whether --reps was given) of the run budget (`workbench.ab.budget`);
    None: no run budget."""


def run_planned(argv, a, *, prog: str, replan, runner_cls=None, rep_verdict: bool = True) -> int:
    """The run of `python -m workbench.ab` on one device with the plan's comparisons replaced by `replan(comps,
    device)` and the runner by `runner_cls`: every phase, the folder and its files as `main` gives them (the dose
    arms of `workbench.ab.dose`)."""
    return _main(argv, a, None, _Run(argv=argv, a=None, dctx=None, device=None, main_rank=True, prog=prog,
                                     replan=replan, runner_cls=runner_cls, rep_verdict=rep_verdict))


def _main(argv, a, dctx, run: _Run | None = None) -> int:
    """The run, phase by phase; `dctx` is this rank's `workbench.ab.distributed.DistContext` under torchrun, else
    None: the config resolved and checked (`_resolve`), the plan and the folder (`_plan`, `_open`), the comparisons
    (`_comparisons`: each one `Runner.run`, itself build, runnable arms, equivalence, timing, counted pass, traces and
    summary), the savings models judged from the traces (`_judge`), the summary written (`_finish`)."""
    from workbench.step.models import resolve_device

    device = dctx.device if dctx is not None else resolve_device(a.device)
    r = run or _Run(argv=argv, a=None, dctx=dctx, device=device, main_rank=dctx is None or dctx.is_main)
    r.device = device
    if dctx is None and r.runner_cls is None and r.replan is None:  # the plain A/B (not a dose, not under torchrun)
        from workbench.ab.budget import default_budget_min
        minutes = default_budget_min(a, device.type)
        r.budget = (minutes, a.budget_min is None, a.reps is not None) if minutes else None
    r.a = _resolve(a, device, r.main_rank, rep_verdict=r.rep_verdict)
    if r.a._capture:
        if r.a.step.model is None or r.a.data.tokens is None:
            raise WorkbenchError("--_capture needs --model and --tokens")
        return capture_child(r.a, device)
    _plan(r)
    freeze_long_lived()  # before the folder exists: a Ctrl-C during it still exits at once, leaving nothing
    _open(r)
    t0 = time.perf_counter()
    old_term = _install_sigterm()
    try:
        if r.sampler is not None:
            r.sampler.__enter__()
        _comparisons(r)
        _judge(r)
        r.status = "complete" if not r.runner.failures else "failed"
        r.rc = 0 if r.status == "complete" else 1
    except BaseException as e:  # noqa: BLE001 - Ctrl-C, SIGTERM, a rank's failure, a crash: `_stopped` says which
        if not _stopped(r, e):
            raise
    finally:
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
        _finish(r, time.perf_counter() - t0)
    return _exit(r)


# -- the config resolved for the device and checked: nothing built, nothing written ----------------------------------
def _resolve(a, device, main_rank: bool, rep_verdict: bool = True):
    """`rep_verdict`: see `_Run.rep_verdict`."""
    from workbench.ab import preflight

    a = a.resolved(device, (GPU_DEFAULTS if device.type == "cuda" else CPU_DEFAULTS)["_run"])  # meta.json's args
    preflight.check_run(a, device, note=progress if main_rank else None,  # dtype, attention, protocol: no model yet
                        rep_verdict=rep_verdict)
    if a.trace == "nsys" and not a._capture:
        if device.type != "cuda":
            raise WorkbenchError("--trace nsys needs a CUDA device (use --trace torch on a CPU)")
        from workbench.traces.capture import require_nsys
        require_nsys()
    return a


# -- the plan and its folder: every bad name fails here, before anything is written ----------------------------------
def _plan(r: _Run) -> None:
    from workbench.measure.results import check_out_dir, new_run_id

    a, dctx = r.a, r.dctx
    r.run_id = new_run_id(f"{a.opt}-{r.device.type}" + (f"-x{dctx.world}" if dctx is not None else ""))
    r.out_dir = a.out or os.path.join("runs", r.run_id)
    if dctx is not None:  # one run id and folder for every rank; rank 0 checks the folder
        r.run_id, r.out_dir = dctx.broadcast((r.run_id, r.out_dir))
        dctx.on_main(check_out_dir, r.out_dir, force=a.force, given=a.out is not None)
    else:
        check_out_dir(r.out_dir, force=a.force, given=a.out is not None)
    r.comps = plan(a, r.device)
    if r.replan is not None:
        r.comps = r.replan(r.comps, r.device)


# -- the folder opened: meta.json, the writer, NVML, the runner ------------------------------------------------------
def _open(r: _Run) -> None:
    from workbench.instrument import NvmlSampler
    from workbench.measure.equivalence import describe
    from workbench.measure.results import RunWriter, device_info
    from workbench.step import precision_mode as _prec

    a, dctx, device = r.a, r.dctx, r.device
    replace = bool(a.force and r.main_rank)  # the writer takes the folder's lock, then removes the earlier run's files
    dinfo = device_info(device)
    dtype = _prec.criterion_dtype(a.step.precision, DTYPES[a.step.dtype]
                                  or _prec.model_dtype(a.step.precision, device))
    runner_cls = r.runner_cls or Runner
    protocol = runner_cls(a, device, None).protocol()
    meta = {"device": dinfo, "args": {k: v for k, v in a.as_dict().items() if k not in ("_capture", "_config")},
            "protocol": protocol.describe(), "equivalence_criterion": describe(dtype),
            "comparisons": [c.name for c in r.comps]}
    if a.data.lengths is not None and a.data.source.provenance() is not None:  # file: / data: lengths: their source
        meta["lengths_source"] = a.data.source.provenance()
    wenv = dict(device=device.type, gpu_name=dinfo.get("name") if device.type == "cuda" else None,
                precision=a.step.precision)
    from workbench import interrupts
    interrupts.raise_from_now_on()  # a Ctrl-C from here on marks the folder incomplete
    if dctx is not None:
        from workbench.ab.distributed import RankWriter
        r.writer = RankWriter(r.out_dir, r.run_id, rank=dctx.rank, env=wenv, extra_meta={
            **meta, "distributed": {k: v for k, v in dctx.describe().items() if k != "rank"}},
            argv=["torchrun", f"--nproc-per-node={dctx.world}", "-m", "workbench.ab", *r.argv], replace=replace)
        dctx.watch(r.writer)  # rank 0: a peer's failure marks the folder failed even while this thread waits
    else:
        r.writer = RunWriter(r.out_dir, r.run_id, argv=["python", "-m", r.prog, *r.argv], env=wenv,
                             extra_meta=meta, replace=replace)
    writer = r.writer
    try:  # a Ctrl-C before the comparison loop's own handler: the folder is marked, not left RUNNING
        if r.main_rank:
            progress(f"run {r.run_id} on {device}" + (f" x {dctx.world} ranks (FSDP2, {dctx.backend})" if dctx else "")
                     + f" -> {r.out_dir}")
        if a.trace != "none" and device.type == "cuda":  # the offload model's second source of c (bytes / bandwidth)
            from workbench.instrument.bandwidth import pinned_copy_gb_per_s
            writer.meta["pinned_copy"] = pinned_copy_gb_per_s(device)
            writer.write_meta()
        r.sampler = NvmlSampler(device_index=(device.index or 0), period_s=0.25) if device.type == "cuda" else None
        if dctx is not None:
            from workbench.ab.distributed import DistRunner
            r.runner = DistRunner(a, device, writer, dctx, nvml=r.sampler)
        else:
            r.runner = runner_cls(a, device, writer, nvml=r.sampler)
        r.runner.device_name = dinfo.get("name") if device.type == "cuda" else None
        r.summary = {"run_id": r.run_id, "device": str(device), "comparisons": []}
    except KeyboardInterrupt:  # the runner's construction included: a Ctrl-C under load once landed there
        writer.finish("incomplete", reason="interrupted (Ctrl-C)")
        raise


# -- the comparisons, one `Runner.run` each ------------------------------------------------------------------------
def _comparisons(r: _Run) -> None:
    from workbench.report import tables as report

    a, runner, writer, summary = r.a, r.runner, r.writer, r.summary
    comps = r.comps
    if a.opt == "levers":  # the traced baseline picks the levers that run (workbench.ab.levers)
        if r.dctx is not None:
            raise WorkbenchError("--opt levers runs on one device (not under torchrun)")
        from workbench.ab import levers as lever_run
        r.levers = lever_run.select(runner, comps)
        comps = r.comps = r.levers.comparisons  # the closing line counts what the selection (and --only) kept
        summary["levers"] = writer.meta["levers"] = r.levers.describe()
        writer.meta["comparisons"] = [c.name for c in comps]
        writer.write_meta()
    if r.budget is not None:
        from workbench.ab.budget import MIN_REPS, RunBudget
        minutes, default, reps_given = r.budget
        runner.budget = RunBudget(minutes * 60, [len(c.arms) for c in comps])
        runner.budget.reps_floor = None if reps_given else MIN_REPS
        progress(runner.budget.start_line(getattr(runner, "device_name", None), default))
        if len(comps) > 1:
            progress(runner.budget.unknown_line(getattr(runner, "device_name", None)))
        writer.meta["budget"] = {"minutes": minutes, "default": default, "reps_floor": runner.budget.reps_floor}
        writer.write_meta()
    for i, cmp in enumerate(comps, 1):
        if runner.budget is not None:
            runner.budget.begin_comparison()
        if r.levers is not None and cmp.name == lever_run.PATH:  # without the levers that made the step slower
            cmp = lever_run.prune_path(r.levers, summary["comparisons"], cmp, r.device.type)
            summary["levers"] = writer.meta["levers"] = r.levers.describe()
            writer.write_meta()
            if cmp is None:
                continue
        t0 = time.perf_counter()  # the comparison's own wall time (build to last timed step): its GPU minutes
        try:
            res = runner.run(cmp, i, len(comps))
        except torch.OutOfMemoryError as e:
            msg = f"{cmp.name}: out of memory while building or checking: {str(e).splitlines()[0][:200]}"
            runner.failures.append(msg)
            progress(f"error: {msg}")
            res = {"name": cmp.name, "opt": cmp.opt, "model": cmp.model, "status": "failed", "errors": [msg],
                   "equivalent": False}
            _free(r.device)
        except WorkbenchError as e:
            msg = f"{cmp.name}: {e}"
            runner.failures.append(msg)
            progress(f"error: {msg}")
            res = {"name": cmp.name, "opt": cmp.opt, "model": cmp.model, "status": "failed", "errors": [msg],
                   "equivalent": False}
        res["wall_s"] = round(time.perf_counter() - t0, 1)
        if runner.budget is not None:
            runner.budget.end_comparison()
            if (line := runner.budget.floors_line()) is not None:
                runner._progress(line)
        summary["comparisons"].append(res)
        writer.write_summary({**summary, "complete": False, "status": "running"})
        if res.get("baseline") is not None and r.main_rank:
            print(report.comparison_table(res), flush=True)
            print(flush=True)
    if r.dctx is not None:
        runner.gather_rows()  # rows of a comparison that stopped early on every rank


# -- the savings models judged from this run's traces; the levers' predictions against their savings ---------------
def _judge(r: _Run) -> None:
    summary = r.summary
    if r.a.trace != "none" and summary["comparisons"] and r.dctx is None:  # the savings models: one device
        summary["comparisons"] = _verdicts(r.writer, summary, r.runner.failures)
    if r.levers is not None:  # each lever's predicted saving against its measured one
        from workbench.ab import levers as lever_run
        summary["comparisons"] = lever_run.annotate(r.writer, summary, r.levers, r.device.type)
        print(lever_run.table(summary), flush=True)
        print(flush=True)


def _stopped(r: _Run, e: BaseException) -> bool:
    """How the run stopped early (status, reason, exit code) for an interruption, a rank's failure or a crash; False
    for anything else (re-raised)."""
    from workbench.ab.distributed import RankFailed

    failures = r.runner.failures
    if isinstance(e, KeyboardInterrupt):
        r.reason, r.rc = "interrupted (Ctrl-C)", 130
    elif isinstance(e, Terminated):
        r.reason, r.rc = "terminated (SIGTERM)", 143
    elif isinstance(e, OSError):  # a full disk, a folder gone: the cause in one line and in the marker file
        from workbench.errors import write_fault
        r.status, r.reason, r.rc = "failed", write_fault(e), 1
        failures.append(f"failed: {r.reason}")
        r.fault = e
    elif isinstance(e, RankFailed):  # distributed: a rank failed (its own error, or a peer's from the store)
        r.status, r.reason, r.rc = "failed", f"rank {e.rank}: {e.msg}", 1
        failures.append(f"failed: {r.reason}")
        with open(r.writer.path("errors.log"), "a") as f:
            f.write(f"--- rank {e.rank} failed\n{e.tb or e.msg}\n")
    elif isinstance(e, Exception):  # a crash: one line here, the traceback in errors.log
        r.status, r.reason, r.rc = "failed", f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}", 1
        failures.append(f"crashed: {r.reason}")
        try:
            with open(r.writer.path("errors.log"), "a") as f:
                f.write(f"--- crashed\n{''.join(traceback.format_exception(e))}\n")
        except OSError:  # the marker file still names the cause
            pass
    else:
        return False
    return True


# -- the summary: NVML per arm, summary.json and meta.json's final state -------------------------------------------
def _finish(r: _Run, wall_s: float) -> None:
    from workbench.measure.results import comparison_arms
    sampler, summary, runner = r.sampler, r.summary, r.runner
    if sampler is not None:
        sampler.__exit__(None, None, None)
    nvml = {"summary": sampler.summary(), "samples": sampler.samples[-2000:]} if sampler is not None else {}
    if sampler is not None:  # clocks and power over each arm's timed steps (drift, throttling, a noisy neighbour)
        nvml["per_arm"] = {
            c.get("name"): {a["arm"]: {k: a.get(k) for k in ("sm_clock_mhz_median", "power_w_median",
                                                             "nvml_samples")}
                            for a in comparison_arms(c).values()}
            for c in summary["comparisons"]}
    summary["out"] = r.out_dir
    summary["wall_s"] = wall_s
    budget = getattr(r.runner, "budget", None)
    if budget is not None:
        summary["budget"] = {"minutes": budget.total_s / 60, "wall_min": budget.elapsed_s() / 60,
                             "within": budget.elapsed_s() <= budget.total_s,
                             "timing_shares_min": [x / 60 for x in budget.shares_s],
                             "past_floors_min": budget.added_s() / 60, "floors_warning": budget.floors_warning}
    summary["failures"] = runner.failures
    summary["complete"] = r.status == "complete"
    summary["status"] = r.status
    try:
        r.writer.write_summary(summary)
        r.writer.finish(r.status, nvml=nvml, failures=runner.failures, **({"reason": r.reason} if r.reason else {}))
    except OSError as e:  # the run's last writes failed (a full disk): the cause in the marker file, said once
        from workbench.measure import markers
        from workbench.errors import write_fault
        if r.fault is None:
            r.status, r.reason, r.rc, r.fault = "failed", write_fault(e), 1, e
            runner.failures.append(f"failed: {r.reason}")
        summary.update(complete=False, status="failed")
        try:
            markers.finish(r.out_dir, "failed", r.writer.heartbeat, reason=r.reason)
        except OSError:
            pass
    if r.dctx is not None:
        r.writer.close()


def _print_recommendation(r: _Run) -> None:
    """The closing sentences after the closing line (`workbench.ab.recommend`): what each optimization saved and the
    configuration that won here; never fatal (the run's results are written already)."""
    from workbench.ab import recommend
    try:
        dev = (getattr(getattr(r, "writer", None), "meta", None) or {}).get("device") or {}
        device_type = str(r.summary.get("device") or "").split(":")[0]
        out = recommend.lines(r.out_dir, r.summary, device_type,
                              dev.get("name") if isinstance(dev, dict) and device_type == "cuda" else None)
    except Exception as e:  # noqa: BLE001 - a reading of written results: say it failed, keep the exit status
        out = [f"recommendation: not computed ({type(e).__name__}: {e})"]
    budget = getattr(r.runner, "budget", None)
    if budget is not None:
        out.append(budget.closing_line())
    for line in out:
        print(line, flush=True)


def _exit(r: _Run) -> int:
    """The final JSON line (rank 0) and the exit code."""
    if not r.main_rank:
        return r.rc
    print(closing_line(r.summary, len(r.comps)), flush=True)
    _print_recommendation(r)
    emit_json(r.summary)
    if r.status == "incomplete":
        progress(f"{r.reason}: results so far are in {r.out_dir} (meta.json status incomplete)")
        return r.rc
    if r.fault is not None:
        progress(f"failed: {r.reason}; the results written before it are in {r.out_dir}")
        return r.rc
    if r.reason:
        progress(f"failed: {r.reason} (traceback in {os.path.join(r.out_dir, 'errors.log')}); results so far are in "
                 f"{r.out_dir}")
        return r.rc
    if r.runner.failures:
        for f in r.runner.failures:
            progress(f"FAILED: {f}")
        return 1
    return 0
