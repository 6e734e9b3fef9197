"""Run the A/B campaign: every measurement the README reports, each a configuration of the one engine
(`python -m workbench.ab`), each in its own bounded subprocess.

    python -m workbench.campaign --out DIR                      # every job (on a GPU; --suite to pick)
    python -m workbench.campaign --out DIR --suite ab           # ab | sweeps | nsys | witness | all, a job's name,
                                                                # or a comma list
    python -m workbench.campaign --out DIR --dry-run            # print the commands, run nothing
    python -m workbench.campaign --out DIR --smoke --suite ab   # tiny CPU versions (checks the plumbing)

Jobs (each writes into its own folder of DIR):

    ab_all           python -m workbench.ab --opt all --out DIR/ab_all
                     (the four comparisons at their GPU defaults)
    ab_aa            python -m workbench.ab --opt packing --aa --reps 6 --out DIR/ab_aa      (the noise floor)
    nvtx_cost        python -m workbench.ab --opt all --nvtx-cost only --out DIR/nvtx_cost
                     (the one instrument left on in timed steps: each comparison's baseline, NVTX ranges off / on)
    packing_sweep    python -m workbench.ab --opt packing --sweep layers=4,8,16,28 --out DIR/packing_sweep
    offload_tokens   python -m workbench.ab --opt offload --arms sync_reload,double_buffer,no_offload
                         --sweep tokens=16384,32768 --out DIR/offload_tokens   (offload at 8 layers, 16k and 32k)
    ab_torch         python -m workbench.ab --opt all --trace torch --reps 1 --out DIR/ab_torch
                     (torch.profiler passes of every arm: the savings models' inputs; its timings are a smaller
                     sample of the same engine)
    ab_packing_nsys  python -m workbench.ab --opt packing --trace nsys --reps 1 --out DIR/...
    ab_offload_nsys  python -m workbench.ab --opt offload --trace nsys --reps 1 --out DIR/...
    ab_moe_nsys      python -m workbench.ab --opt moe --trace nsys --reps 1 --out DIR/...
                     (one Nsight Systems capture per arm of each optimization, real shapes; suite `nsys`)
    ab_witness       python -m workbench.ab --opt all --cross-check --reps 1 --out DIR/ab_witness
                     (the three sync witnesses: CUDA's sync debug mode runs in the counted pass only; suite
                     `witness`)
    witness_ops      python -m workbench.bench.witness  (its last stdout line -> DIR/witness_ops/witness.json)
    suite `verdicts` (the savings models' checks; every job with --trace torch):
    ab_traced        --opt all --only packing,offload,moe          (each optimization alone, every arm traced)
    offload_sweep    --opt offload --arms sync_reload,double_buffer --sweep layers=1,2,3,4 --reps 2
    packing_sweep_l1 --opt packing --sweep layers=1,2,4,8 --reps 2
    packing_sweep_llama   the same on llama-3.2-1b;  offload_sweep_qwen3   the offload sweep on qwen3-8b
    all_traced       --opt all --only all                          (the three together, traced)
    offload_first_reload, offload_first_reload_qwen3   the offload model's first-reload term: L=1,2, 8 reps
    suite `repeat`:  repeat_a  --opt all --headline;  repeat_b  the same with --trace torch   (the headline comparisons twice, in
                     separate processes: analysis.repeats gives each difference's z and the mean z²)
    suite `fidelity`: fidelity_llama, fidelity_moe   python -m workbench.fidelity on llama-3.1-8b (8 layers, 16k) and
                     qwen3-30b-a3b (8 layers, 8k): the harness against a real transformers.Trainer step

Each job runs with a wall-clock limit (`--timeout-s`, default 570 s; ab_all's is AB_ALL_TIMEOUT_S: on a device
whose commands stop at 10 minutes, run the campaign detached and poll it: profiles/README.md, "Adding a run");
its stdout + stderr go to DIR/logs/<job>.log. DIR/commands.json records, rewritten after every job, the exact
command, folder, status (ok / failed / timeout / skipped), exit code, wall time and the reason of a skip (an nsys
job without CUDA or nsys). `--smoke` passes tiny CPU flags to the A/B runs. Exit status 0 when every job that ran
succeeded; the last stdout line is the commands.json object.
"""
from __future__ import annotations

from workbench.paths import REPO_ROOT
import argparse
import dataclasses
import datetime as _dt
import importlib.util
import os
import shlex
import signal
import subprocess
import sys
import time

from workbench.errors import WorkbenchError
from workbench.opts import registry as opt_registry

DEFAULT_TIMEOUT_S = 570
AB_ALL_TIMEOUT_S = 1500
"""The limit of the long jobs (ab_all, nvtx_cost, the sweeps): four comparisons at real shapes take 11-12 minutes on
an H100; the 570 s default cut offload_tokens short in its 32k comparison."""
NSYS_JOBS = [f"ab_{o}_nsys" for o in opt_registry.in_all_names()]
"""One Nsight Systems capture per optimization that `--opt all` runs."""
SWEEP_JOBS = ["packing_sweep", "offload_tokens"]
VERDICT_JOBS = ["ab_traced", "offload_sweep", "packing_sweep_l1", "packing_sweep_llama", "offload_sweep_qwen3",
                "all_traced", "offload_first_reload", "offload_first_reload_qwen3"]
"""The savings-model verdicts: torch traces of every single-optimization comparison, and L sweeps from L=1 on two
models per optimization, each traced (in the order they run: the most needed first)."""
REPEAT_JOBS = ["repeat_a", "repeat_b"]
"""The headline comparisons (`--opt all`, the GPU defaults) twice, in separate processes: do the CIs of two runs agree
as often as they claim? `analysis.repeats` gives the z of each difference and their mean z² (1 when honest). The
second run also traces every arm after its timings (the traces never touch a timed step), so that the same run feeds
the savings-model verdicts."""
FIDELITY_JOBS = ["fidelity_llama", "fidelity_moe"]
"""The harness against a real `transformers.Trainer` step (bf16=True) on the issue's two shapes."""
JOBS = ["ab_all", "ab_aa", "nvtx_cost", *SWEEP_JOBS, "ab_torch", *NSYS_JOBS, "ab_witness", "witness_ops",
        *VERDICT_JOBS, *REPEAT_JOBS, *FIDELITY_JOBS]
SUITES = {"ab": ["ab_all", "ab_aa"], "sweeps": ["nvtx_cost", *SWEEP_JOBS], "nsys": NSYS_JOBS, "witness": ["ab_witness", "witness_ops"],
          "verdicts": VERDICT_JOBS, "repeat": REPEAT_JOBS, "fidelity": FIDELITY_JOBS,
          "all": JOBS, **{j: [j] for j in JOBS}}
"""--suite name -> jobs, in run order (every job's own name is a suite too)."""
AB_ARGS = {"ab_all": ["--opt", "all"],
           "nvtx_cost": ["--opt", "all", "--nvtx-cost", "only"],
           "ab_aa": ["--opt", "packing", "--aa", "--reps", "6"],
           "packing_sweep": ["--opt", "packing", "--sweep", "layers=4,8,16,28"],
           "offload_tokens": ["--opt", "offload", "--arms", "sync_reload,double_buffer,no_offload",
                              "--sweep", "tokens=16384,32768"],
           "ab_torch": ["--opt", "all", "--trace", "torch", "--reps", "1"],
           **{n: ["--opt", n[len("ab_"):-len("_nsys")], "--trace", "nsys", "--reps", "1"] for n in NSYS_JOBS},
           "ab_witness": ["--opt", "all", "--cross-check", "--reps", "1"],
           "ab_traced": ["--opt", "all", "--trace", "torch", "--only", ",".join(opt_registry.in_all_names())],
           "offload_sweep": ["--opt", "offload", "--arms", "sync_reload,double_buffer", "--sweep", "layers=1,2,3,4",
                             "--trace", "torch", "--reps", "2"],
           "packing_sweep_l1": ["--opt", "packing", "--sweep", "layers=1,2,4,8", "--trace", "torch", "--reps", "2"],
           "packing_sweep_llama": ["--opt", "packing", "--model", "llama-3.2-1b", "--sweep", "layers=1,2,4,8",
                                   "--trace", "torch", "--reps", "2"],
           "offload_sweep_qwen3": ["--opt", "offload", "--model", "qwen3-8b", "--arms", "sync_reload,double_buffer",
                                   "--sweep", "layers=1,2,3,4", "--trace", "torch", "--reps", "2"],
           "all_traced": ["--opt", "all", "--trace", "torch", "--only", "all"],
           "repeat_a": ["--opt", "all", "--headline"],
           "repeat_b": ["--opt", "all", "--headline", "--trace", "torch"],
           # the first reload's term (added after the sweeps above): L=1 and 2, where the published (L-1) form and
           # the model with min(c_(L-1), h) differ most, with 8 reps (32 pairs) to resolve one reload (~2.4 ms)
           "offload_first_reload": ["--opt", "offload", "--arms", "sync_reload,double_buffer", "--sweep", "layers=1,2",
                                    "--trace", "torch", "--reps", "8"],
           "offload_first_reload_qwen3": ["--opt", "offload", "--model", "qwen3-8b", "--arms",
                                          "sync_reload,double_buffer", "--sweep", "layers=1,2", "--trace", "torch",
                                          "--reps", "8"]}
"""Each A/B job's flags (the engine's GPU defaults otherwise: 2 batches, 2 timed steps, settled warmup, 8 reps)."""
FIDELITY_ARGS = {"fidelity_llama": ["--model", "llama-3.1-8b", "--layers", "8", "--tokens", "16384"],
                 "fidelity_moe": ["--model", "qwen3-30b-a3b", "--layers", "8", "--tokens", "8192"]}
"""`python -m workbench.fidelity` flags of each fidelity job (its last stdout line -> fidelity.json)."""

AB_SMOKE = ["--device", "cpu", "--tokens", "128", "--steps", "1", "--warmup", "0", "--warmup-max", "0"]
"""Tiny flags of the A/B jobs under --smoke (tiny presets are the CPU default)."""


@dataclasses.dataclass
class Job:
    name: str
    """Job name; also the name of its folder in DIR."""
    module: str
    """The Python module it runs (`python -m MODULE`)."""
    args: list
    """Arguments after the module."""
    out: str
    """Its output folder."""
    needs: str | None = None
    """"cuda" / "cuda+nsys" for a job that needs a GPU (and Nsight Systems)."""
    stdout_json: str | None = None
    """File name in `out` that receives the job's last stdout line (a JSON document), for modules without --out."""
    min_timeout_s: float = 0.0
    """The job's wall-clock limit is at least this (ab_all: AB_ALL_TIMEOUT_S)."""

    @property
    def argv(self) -> list:
        return [sys.executable, "-m", self.module, *self.args]

    @property
    def command(self) -> str:
        """The command as a person would type it (python, not the interpreter's path)."""
        return " ".join(shlex.quote(a) for a in ["python", "-m", self.module, *self.args])


def plan(out: str, suite: str = "all", smoke: bool = False) -> list[Job]:
    """The jobs of `suite` (a name of SUITES or a comma list), writing under `out`."""
    names: list[str] = []
    for s in [x.strip() for x in suite.split(",") if x.strip()]:
        if s not in SUITES:
            raise WorkbenchError(f"unknown suite {s!r}; choose from {', '.join(SUITES)}")
        names += [n for n in SUITES[s] if n not in names]
    jobs = []
    for n in names:
        d = os.path.join(out, n)
        if n == "witness_ops":
            jobs.append(Job(n, "workbench.bench.witness", [], d, needs="cuda", stdout_json="witness.json"))
            continue
        if n in FIDELITY_JOBS:
            args = ["--device", "cpu"] if smoke else list(FIDELITY_ARGS[n])
            jobs.append(Job(n, "workbench.fidelity", args + ["--out", d], d, needs=None if smoke else "cuda",
                            stdout_json="fidelity.json"))
            continue
        args = list(AB_ARGS[n])
        if smoke:
            if "--model" in args:  # the CPU defaults' tiny presets
                k = args.index("--model")
                args = args[:k] + args[k + 2:]
            args = args + AB_SMOKE
            if "--reps" in args:
                args[args.index("--reps") + 1] = "1"
            else:
                args += ["--reps", "1"]
            if "--sweep" in args:
                k = args.index("--sweep")
                args[k + 1] = {"layers": "layers=1,2", "tokens": "tokens=64,128"}[args[k + 1].split("=")[0]]
                if args[k + 1].startswith("tokens"):
                    args = [x for i_, x in enumerate(args) if not (x == "--tokens" or (i_ > 0 and args[i_ - 1]
                                                                                       == "--tokens"))]
        jobs.append(Job(n, "workbench.ab", args + ["--out", d], d,
                        needs="cuda+nsys" if n in NSYS_JOBS else None,
                        min_timeout_s=AB_ALL_TIMEOUT_S if n in ("ab_all", "nvtx_cost", *SWEEP_JOBS, *VERDICT_JOBS,
                                                                *REPEAT_JOBS)
                        else 0.0))
    return jobs


def skip_reason(job: Job) -> str | None:
    """Why `job` cannot run here (None: it can): a module that does not exist yet, or no CUDA / nsys."""
    try:
        spec = importlib.util.find_spec(job.module)
    except (ImportError, ValueError) as e:
        spec, err = None, f": {e}"
    else:
        err = ""
    if spec is None:
        return f"module {job.module} does not exist yet{err}"
    if job.needs in ("cuda", "cuda+nsys"):
        what = "--trace nsys" if job.needs == "cuda+nsys" else job.module
        if "--device" in job.args and job.args[job.args.index("--device") + 1] == "cpu":
            return f"{what} needs a CUDA device (this is a --smoke run on the CPU)"
        try:
            import torch
            cuda = torch.cuda.is_available()
        except Exception:  # noqa: BLE001
            cuda = False
        if not cuda:
            return f"{what} needs a CUDA device"
    if job.needs == "cuda+nsys":
        from workbench.traces.capture import nsys_path
        if nsys_path() is None:
            return "--trace nsys needs Nsight Systems (nsys on PATH or in $NSYS)"
    return None


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    except (ProcessLookupError, PermissionError):
        pass


def run_job(job: Job, log_path: str, timeout_s: float) -> dict:
    """Run one job in its own process group with a wall-clock limit; its output goes to `log_path`."""
    os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
    t0 = time.perf_counter()
    started = _dt.datetime.now().isoformat(timespec="seconds")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    root = REPO_ROOT
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    with open(log_path, "w") as log:
        log.write(f"$ {job.command}\n")
        log.flush()
        proc = subprocess.Popen(job.argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout_s)
            status = "ok" if rc == 0 else "failed"
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            rc, status = proc.returncode, "timeout"
        except KeyboardInterrupt:
            _kill_group(proc)
            raise
    if job.stdout_json and status == "ok":
        _save_last_json(log_path, os.path.join(job.out, job.stdout_json))
    return {"status": status, "rc": rc, "started": started, "wall_s": round(time.perf_counter() - t0, 2),
            "timeout_s": timeout_s, "tail": _tail(log_path)}


def _save_last_json(log_path: str, dest: str) -> None:
    """Write the last line of the log that parses as JSON to `dest`."""
    import json
    with open(log_path, errors="replace") as f:
        lines = [ln.strip() for ln in f if ln.strip()]
    for ln in reversed(lines):
        try:
            doc = json.loads(ln)
        except ValueError:
            continue
        os.makedirs(os.path.dirname(os.path.abspath(dest)), exist_ok=True)
        with open(dest, "w") as f:
            json.dump(doc, f, indent=1)
        return


def _tail(path: str, n: int = 3) -> str:
    try:
        with open(path, errors="replace") as f:
            lines = [ln.rstrip() for ln in f if ln.strip()]
        return " | ".join(lines[-n:])[-600:]
    except OSError:
        return ""


def _record(job: Job, out: str, **extra) -> dict:
    return {"name": job.name, "module": job.module, "command": job.command, "argv": job.args,
            "out": os.path.relpath(job.out, out), "log": os.path.join("logs", f"{job.name}.log"), **extra}


def _header(out: str, argv: list, smoke: bool) -> dict:
    from workbench.measure.results import git_sha, versions
    return {"campaign": " ".join(shlex.quote(a) for a in ["python", "-m", "workbench.campaign", *argv]),
            "out": os.path.abspath(out), "smoke": smoke, "git_sha": git_sha(), "versions": versions(),
            "started": _dt.datetime.now().isoformat(timespec="seconds"), "jobs": []}


def run(jobs: list[Job], out: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, argv=None, smoke: bool = False,
        runner=run_job) -> dict:
    """Run `jobs` in order, writing DIR/commands.json after each; returns its contents."""
    from workbench.measure.results import atomic_write_json

    os.makedirs(out, exist_ok=True)
    doc = _header(out, list(argv or []), smoke)
    path = os.path.join(out, "commands.json")
    for job in jobs:
        why = skip_reason(job)
        if why:
            print(f"[campaign] skip {job.name}: {why}", file=sys.stderr, flush=True)
            doc["jobs"].append(_record(job, out, status="skipped", reason=why))
            atomic_write_json(path, doc)
            continue
        print(f"[campaign] {job.name}: {job.command}  (limit {max(timeout_s, job.min_timeout_s):.0f} s)",
              file=sys.stderr, flush=True)
        doc["jobs"].append(_record(job, out, status="running"))
        atomic_write_json(path, doc)
        res = runner(job, os.path.join(out, "logs", f"{job.name}.log"), max(timeout_s, job.min_timeout_s))
        doc["jobs"][-1].update(res)
        print(f"[campaign] {job.name}: {res['status']} (exit {res['rc']}, {res['wall_s']:.0f} s)", file=sys.stderr,
              flush=True)
        atomic_write_json(path, doc)
    doc["ended"] = _dt.datetime.now().isoformat(timespec="seconds")
    atomic_write_json(path, doc)
    return doc


def main(argv=None) -> int:
    from workbench.cli import emit_json

    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(allow_abbrev=False, prog="python -m workbench.campaign", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="campaign folder (one subfolder per job, commands.json, logs/)")
    p.add_argument("--suite", default="all", help=f"{' | '.join(SUITES)}, or a comma list (default all)")
    p.add_argument("--smoke", action="store_true", help="tiny CPU versions: --smoke to bench modules, tiny A/B flags")
    p.add_argument("--dry-run", action="store_true", help="print the commands (and why a job would be skipped)")
    p.add_argument("--timeout-s", type=float, default=DEFAULT_TIMEOUT_S, help="wall-clock limit per job (s)")
    a = p.parse_args(argv)
    if a.timeout_s <= 0:
        raise WorkbenchError("--timeout-s must be positive")
    jobs = plan(a.out, a.suite, a.smoke)
    if a.dry_run:
        for j in jobs:
            why = skip_reason(j)
            print(j.command + (f"    # skipped: {why}" if why else ""))
        return 0
    doc = run(jobs, a.out, timeout_s=a.timeout_s, argv=argv, smoke=a.smoke)
    for j in doc["jobs"]:
        extra = f"exit {j.get('rc')}, {j.get('wall_s', 0):.0f} s" if j["status"] != "skipped" else j.get("reason")
        print(f"{j['name']:<16} {j['status']:<8} {extra}    {j['command']}")
    emit_json(doc)
    return 0 if all(j["status"] in ("ok", "skipped") for j in doc["jobs"]) else 1


if __name__ == "__main__":
    from workbench.cli import run_main
    sys.exit(run_main(main))  # a bad --suite: one line, exit 2
