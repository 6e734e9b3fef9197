"""The profiled passes, separate from the timed steps: torch.profiler in this process, nsys in a child per arm
(`capture_child`, under `nsys profile -c cudaProfilerApi`)."""
from __future__ import annotations

from workbench.ab.arm import _free
from workbench.cli import progress
from workbench.measure.results import safe_name


def torch_traces(runner, model, cpu_batches, cmp, runnable, arm_status, reset_weights, env) -> dict:
    """A torch.profiler pass of every runnable arm (warmup + steps), its events saved beside the trace; {arm: events}."""
    from workbench.traces import from_torch_trace, layer_ranges, save_events
    from workbench.traces.capture import torch_profile

    a = runner.args
    events = {}
    for spec in runnable:
        if arm_status[spec.label]["status"] != "ok":
            continue
        reset_weights()
        stem = runner.writer.path("traces", safe_name(cmp.name), safe_name(spec.label))
        path = stem + ".pt.trace.json.gz"
        runner._progress(f"[{cmp.name}] torch.profiler pass of {spec.label} -> {path}")

        def run_steps(step_fn, _spec=spec):
            runner.run_arm_steps(model, cpu_batches, _spec, cmp, steps=a.warmup + a.steps, warmup=0,
                                 on_step=lambda r: step_fn(), reset=reset_weights)
        try:
            torch_profile(run_steps, path, device=runner.device, warmup=a.warmup, steps=a.steps)
            ev = from_torch_trace(path)
            save_events(ev, stem)
            for r in layer_ranges(ev).to_dict("records"):
                name = "/".join(x for x in (r["layer"], r["pass"], r["part"]) if x)
                runner.writer.add(cmp.name, spec.label, f"trace_range_median_ms/{name}", r["median_ms"], "ms", **env)
            events[spec.label] = ev
        except Exception as e:  # noqa: BLE001 - a trace failure is reported, the timings stand
            msg = f"{cmp.name} arm {spec.label}: torch trace failed: {type(e).__name__}: {e}"
            runner.failures.append(msg)
            progress(f"error: {msg}")
        finally:
            _free(runner.device)
    runner.writer.flush()
    return events


def child_config(args, cmp, spec, out: str) -> dict:
    """The nsys child's whole configuration: this run's `ABConfig` (nothing rebuilt flag by flag, none dropped),
    with the comparison's shape, this arm, no trace and its own folder."""
    return {**args.as_dict(), **dict(opt=cmp.opt, model=cmp.model, layers=cmp.layers, tokens=cmp.tokens,
                                       attn=cmp.attn, device="cuda", trace="none", out=out, sweep=None, only=None,
                                       arms=None, aa=False, nvtx_cost="off", _config=None,
                                       _capture=capture_spec(spec))}


def capture_spec(spec) -> str:
    """The nsys child's `--_capture`: `opt=arm,...`, or JSON {"arms", "options"} when the arm has options of its own
    (a dose); `workbench.ab.session.capture_arms` reads either."""
    import json
    if spec.options:
        return json.dumps({"arms": spec.arms, "options": spec.options}, sort_keys=True)
    return ",".join(f"{o}={arm}" for o, arm in spec.arms.items())


def child_argv(args, cmp, spec, out: str) -> list[str]:
    """`python -m workbench.ab` arguments of the nsys child: its `child_config` as one JSON argument."""
    import json
    return ["--_config", json.dumps(child_config(args, cmp, spec, out), sort_keys=True)]


def nsys_traces(runner, cmp, runnable, arm_status) -> dict:
    """An nsys capture of every runnable arm, each in a child process (`capture_child`) built from the run's config;
    {arm: events}."""
    from workbench.traces import from_nsys_sqlite, save_events
    from workbench.traces.capture import require_nsys, run_nsys

    a = runner.args
    nsys = require_nsys()
    events = {}
    for spec in runnable:
        if arm_status[spec.label]["status"] != "ok":
            continue
        stem = runner.writer.path("traces", safe_name(cmp.name), safe_name(spec.label))
        child = child_argv(a, cmp, spec, stem + ".child")
        runner._progress(f"[{cmp.name}] nsys capture of {spec.label} -> {stem}.nsys-rep")
        try:
            sqlite = run_nsys(nsys, stem, child, stem + ".nsys.log")
            ev = from_nsys_sqlite(sqlite)
            save_events(ev, stem)
            events[spec.label] = ev
        except Exception as e:  # noqa: BLE001
            msg = f"{cmp.name} arm {spec.label}: nsys capture failed: {e}"
            runner.failures.append(msg)
            progress(f"error: {msg}")
    return events
