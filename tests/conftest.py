import contextlib
import gc
import io
import os
import runpy
import signal
import subprocess
import sys
import warnings

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_NUM_THREADS", "1")  # (see torch.set_num_threads below)
# Before anything imports triton: triton.language's own helpers read it then, so the Triton kernel tests
# (tests/test_grouped_gemm.py) run in this process instead of a fresh pytest of their own. Only without a GPU: on a
# GPU the flex tests compile Triton kernels through inductor, which the interpreter cannot run (the H100 run of
# 2026-11-25, profiles/2026-11-25_h100_levers_path/pytest.out); test_grouped_gemm then runs its own interpreted pytest.
if not os.path.exists("/dev/nvidiactl"):
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
# The constants read off the registry at import (`workbench.opts.OPTS`, `workbench.ab.cli.OPT_NAMES`) are the real
# ones whatever test runs first: a test that sets $WORKBENCH_OPTS to fakes must not be the first to import them.
import workbench.ab.cli  # noqa: E402,F401
import workbench.opts  # noqa: E402,F401

# One intra-op thread, here and (through OMP_NUM_THREADS) in the processes the tests start: the tests' tensors are
# tiny, and a second OpenMP thread only spins: on 2 idle cores test_ab + test_levers_loop + test_precision took the
# same 18.5 s with 1 or 2 threads but 24 against 35 CPU seconds, and beside the background work (torchrun launches,
# notebook kernels: see pytest_collection_finish) or another process the spinning threads slow everything down.
torch.set_num_threads(1)
warnings.filterwarnings("ignore", category=FutureWarning)

TINY = ["tiny-llama", "tiny-qwen3", "tiny-qwen3-moe", "tiny-gpt-oss"]


@pytest.fixture(autouse=True)
def _reset_state():
    from workbench.instrument import state
    state.reset()
    yield
    state.reset()


def per_document_reference(model, batch):
    """Each document alone (positions from 0), through `model_inputs`; the token-weighted mean of their losses.

    A packed batch's loss must equal this when documents are isolated."""
    from workbench.step.data import batch_from_lengths
    from workbench.step.models import model_inputs
    total, n = 0.0, 0
    for doc in batch.documents():
        if doc.numel() == 1:  # no token to predict (its only label is -100)
            continue
        single = batch_from_lengths([doc.numel()], model.config.vocab_size)
        single.input_ids[0] = doc
        single.labels[0, 1:] = doc[1:]
        loss = model(**model_inputs(model, single)).loss
        total += loss.double() * (doc.numel() - 1)
        n += doc.numel() - 1
    return total / n


def run_cli(module: str, argv, cwd=None, env=None) -> subprocess.CompletedProcess:
    """`python -m <module> *argv` in this process: its stdout, stderr and exit status (SystemExit's code) as a
    CompletedProcess, without the seconds a fresh process spends importing torch. `cwd` and `env` (variables to set,
    None to unset) hold only while it runs. Each CLI keeps at least one true subprocess test: a fresh process is
    what catches an import-time bug."""
    out, err = io.StringIO(), io.StringIO()
    saved_argv, saved_cwd = sys.argv, os.getcwd()
    saved_env = {k: os.environ.get(k) for k in (env or {})}
    rc = 0
    try:
        for k, v in (env or {}).items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if cwd is not None:
            os.chdir(cwd)
        sys.argv = [module, *map(str, argv)]
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            # the module may be imported already (by the test): runpy then runs a fresh copy as __main__, as intended
            warnings.filterwarnings("ignore", "'.*' found in sys.modules", RuntimeWarning)
            try:
                runpy.run_module(module, run_name="__main__", alter_sys=True)
            except SystemExit as e:
                rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
                if isinstance(e.code, str):
                    print(e.code, file=sys.stderr)
    finally:
        sys.argv = saved_argv
        os.chdir(saved_cwd)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return subprocess.CompletedProcess([sys.executable, "-m", module, *map(str, argv)], rc, out.getvalue(),
                                       err.getvalue())


@pytest.fixture
def fakes(monkeypatch):
    """The fake optimizations (`fixtures.fake_opts`) registered for one test."""
    from fixtures import fake_opts
    fake_opts.install(monkeypatch)
    return fake_opts


PACKING_TRACE_ARGV = ["--opt", "packing", "--trace", "torch", "--device", "cpu", "--tokens", "128", "--steps", "1",
                      "--reps", "2", "--warmup", "0", "--warmup-max", "0"]


_PACKING_TRACE: dict = {}


def packing_trace_paths(tmp_path_factory):
    """(out, ready) of the shared packing trace run, fixed at first ask (collection may ask, to wait on it from a
    background process): `out` is alone in its parent; `ready` (elsewhere) is written once the run succeeded."""
    if not _PACKING_TRACE:
        _PACKING_TRACE["out"] = tmp_path_factory.mktemp("packing_trace") / "ab_packing"
        _PACKING_TRACE["ready"] = tmp_path_factory.mktemp("packing_trace_ready") / "ready"
    return _PACKING_TRACE["out"], _PACKING_TRACE["ready"]


@pytest.fixture(scope="session")
def packing_trace_run(tmp_path_factory):
    """One tiny CPU A/B of packing (3 arms, 2 reps of one timed step) with a torch trace, made once and shared by the
    tests that only read its outputs: (folder, CompletedProcess of `python -m workbench.ab PACKING_TRACE_ARGV`).
    The folder is alone in its parent (a root with one result folder)."""
    out, ready = packing_trace_paths(tmp_path_factory)
    r = run_cli("workbench.ab", [*PACKING_TRACE_ARGV, "--out", str(out)])
    assert r.returncode == 0 and (out / "summary.json").exists(), r.stderr[-3000:]
    ready.write_text("ok\n")
    return out, r


# --- subprocess work started at collection, consumed later by its tests ---------------------------------------------

_EARLY: dict = {}
"""test module name -> what its `early_start(tmp_path_factory, items)` returned (its own fixtures pick it up)."""


def pytest_collection_finish(session):
    """A test module may define `early_start(tmp_path_factory, items)` (items: its selected tests): subprocess work
    (torchrun launches, notebook executions, the fresh-process CLI runs) that its tests wait on later. It starts
    here, at collection, at a lower priority (`lower_priority`: the later its result is read, the lower), so that it
    runs on the core the in-process tests leave idle instead of being waited for where the tests run. What it
    returns (or None) has a `stop()`, called at the end of the session; its tests fall back to starting the work
    themselves when it returned None. Under pytest-xdist (`-n`) nothing starts here: every worker collects every
    test, so each would start every module's work; the workers themselves use the cores. (A worker is told by its
    config, not by $PYTEST_XDIST_WORKER: a pytest a test starts inherits that variable without being a worker.)"""
    if hasattr(session.config, "workerinput"):
        return
    selected: dict = {}
    for item in session.items:
        mod = getattr(item, "module", None)
        if mod is not None and hasattr(mod, "early_start"):
            selected.setdefault(mod, []).append(item)
    for mod, items in selected.items():
        _EARLY[mod.__name__] = mod.early_start(session.config._tmp_path_factory, items)
    if "series" in _SERIES:  # the torchrun runs those modules asked for, in one launch
        _SERIES["series"].start(lower_priority(10))


def start_torchrun(module_args: list, logs: str, extra_env=None, preexec_fn=None) -> subprocess.Popen:
    """`python -m torch.distributed.run --standalone --nproc-per-node 2 *module_args` from the checkout on gloo over
    loopback, one thread per rank, the workbench's rank timeout at 120 s, no torchrun variables (nor the injected
    failure / dropped batch) inherited from this process; stdout and stderr go to files in `logs` (launches run side
    by side, and a full pipe nobody reads yet would stall one)."""
    from workbench.ab import distributed
    env = {k: v for k, v in os.environ.items()
           if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", distributed.FAIL_ENV,
                        distributed.DROP_ENV)}
    env.update(OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", PYTHONWARNINGS="ignore",
               **{distributed.TIMEOUT_ENV: "120"}, **(extra_env or {}))
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # loopback: no dependence on how the host name resolves
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", *module_args]
    os.makedirs(logs, exist_ok=True)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(logs, "stdout"), "w") as o, open(os.path.join(logs, "stderr"), "w") as e:
        return subprocess.Popen(cmd, cwd=root, env=env, stdout=o, stderr=e, text=True, preexec_fn=preexec_fn)


_SERIES: dict = {}


def torchrun_series(tmp_path_factory) -> "TorchrunSeries":
    """The session's one torchrun launch: modules' `early_start` add their runs; pytest_collection_finish starts it.
    A module that asks once that launch has started (its fixture's fallback when nothing started at collection, as
    under pytest-xdist, where tests/test_distributed.py and tests/test_fourgpu.py may share a worker) gets a launch
    of its own; the started one runs on to its end."""
    if "series" in _SERIES and _SERIES["series"].proc is not None:
        _SERIES.setdefault("started", []).append(_SERIES.pop("series"))
    if "series" not in _SERIES:
        _SERIES["series"] = TorchrunSeries(tmp_path_factory.mktemp("torchrun_series"))
    return _SERIES["series"]


class TorchrunSeries:
    """Runs of `python -m MODULE *argv` on 2 ranks, one after another in ONE `start_torchrun` launch
    (tests/fixtures/torchrun_series.py): the launcher and its ranks start and import torch and the workbench once
    instead of once per run (tests/test_distributed.py's good / drop / fail runs and tests/test_fourgpu.py's bf16
    check: ~74 CPU s in four launches, ~22 in one, on 2 cores). `add` returns the run's name for `result`; a run in
    which a rank may end its process (`last=True`: an injected failure) goes after every other."""

    def __init__(self, root):
        self.root, self.runs, self.proc = root, {}, None

    def add(self, name: str, module: str, argv: list, env=None, last: bool = False) -> str:
        assert self.proc is None and name not in self.runs, name
        assert not (last and any(r["last"] for r in self.runs.values())), "one last run"
        from workbench.ab import distributed
        env = {distributed.FAIL_ENV: None, distributed.DROP_ENV: None, **(env or {})}
        self.runs[name] = {"module": module, "argv": [str(a) for a in argv], "env": env,
                           "logs": str(self.root / name), "last": last}
        return name

    def start(self, preexec_fn=None) -> None:
        if self.proc is not None:
            return
        import json
        runs = sorted(self.runs.values(), key=lambda r: r["last"])
        (self.root / "runs.json").write_text(json.dumps(runs))
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "torchrun_series.py")
        self.proc = start_torchrun([script, str(self.root / "runs.json")], str(self.root / "launch"),
                                   preexec_fn=preexec_fn)

    def result(self, name: str, timeout: float = 600) -> dict:
        """Once the run is done: {"rcs": each rank's exit status (None: its process ended inside the run),
        "launch_rc": the launch's exit status (None while later runs go on), "stdout", "stderr": rank 0's then rank
        1's, "logs": the launch's own stdout and stderr}."""
        import time
        self.start()
        logs, t_end = self.root / name, time.monotonic() + timeout
        done = [logs / f"rank{r}.rc" for r in (0, 1)]
        last = self.runs[name]["last"]  # its status is the launch's: wait for the launch's end
        while (last or not all(p.exists() for p in done)) and self.proc.poll() is None:
            if time.monotonic() > t_end:
                self.stop()
                raise TimeoutError(f"torchrun series: {name} still running after {timeout} s")
            time.sleep(0.2)
        launch = "".join((self.root / "launch" / f).read_text() for f in ("stdout", "stderr"))

        def read(p):
            return p.read_text() if p.exists() else ""
        return {"rcs": [int(read(p)) if p.exists() else None for p in done], "launch_rc": self.proc.poll(),
                "stdout": "".join(read(logs / f"rank{r}.stdout") for r in (0, 1)),
                "stderr": "".join(read(logs / f"rank{r}.stderr") for r in (0, 1)), "logs": launch}

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def default_signals() -> None:
    """SIGINT and SIGTERM back to their defaults in a child: a shell that starts the tests in the background (`cmd &`
    in a script, nohup) hands SIGINT down ignored, and Python then installs no KeyboardInterrupt handler, so the
    Ctrl-C tests' signal would be lost and their runs go on to the end (found running .ci/run under nohup)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def lower_priority(nice: int = 10):
    """A preexec_fn for the processes started at collection: `nice` added, so that they take the CPU the test
    process leaves (the second core, or both while it waits on one of them) instead of slowing it down; the sooner
    a test reads a process's result, the smaller its `nice` should be (the processes it starts inherit it). The
    child's SIGINT / SIGTERM are the defaults (`default_signals`)."""
    def setup():
        default_signals()
        if nice:
            os.nice(nice)
    return setup


class Started:
    """Commands started at collection by a module's `early_start`, each its own process with stdout and stderr in
    files (not pipes: nobody reads them until its test runs): `result(name)` waits and gives a CompletedProcess."""

    def __init__(self, tmp_path_factory):
        self.logs = tmp_path_factory.mktemp("started")
        self.procs: dict = {}

    def start(self, name: str, argv: list, nice: int = 5, **popen):
        with open(self.logs / f"{name}.out", "w") as o, open(self.logs / f"{name}.err", "w") as e:
            self.procs[name] = (argv, subprocess.Popen(argv, stdout=o, stderr=e, text=True,
                                                       preexec_fn=lower_priority(nice), **popen))

    def result(self, name: str, timeout: float) -> subprocess.CompletedProcess:
        argv, p = self.procs[name]
        try:
            p.wait(timeout=timeout)  # as subprocess.run's timeout: TimeoutExpired after killing it
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            raise
        return subprocess.CompletedProcess(argv, p.returncode, (self.logs / f"{name}.out").read_text(),
                                           (self.logs / f"{name}.err").read_text())

    def stop(self):
        for _, p in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()


class Driven:
    """Subprocess tests that must talk to their process while it runs (send SIGINT / SIGTERM on a progress line),
    started at collection: each `start(name, fn, *args)` runs `fn(self, *args)` in a thread of this process (it
    mostly waits on its pipe, so it takes little from the tests); `fn` starts its processes with `self.popen`
    (lowered priority, killed at `stop()`). `result(name, timeout)` joins and gives what `fn` returned (or raises
    what it raised)."""

    def __init__(self, nice: int = 5):
        self.nice, self.threads, self.procs, self.dirs = nice, {}, [], {}

    def popen(self, argv, **kw) -> subprocess.Popen:
        p = subprocess.Popen(argv, preexec_fn=lower_priority(self.nice), **kw)
        self.procs.append(p)
        return p

    def start(self, name: str, fn, *args):
        import threading
        box: dict = {}

        def run():
            try:
                box["value"] = fn(self, *args)
            except BaseException as e:  # handed to the test that reads it
                box["error"] = e
        t = threading.Thread(target=run, name=f"driven-{name}", daemon=True)
        self.threads[name] = (t, box)
        t.start()

    def result(self, name: str, timeout: float):
        t, box = self.threads[name]
        t.join(timeout)
        if t.is_alive():
            self.stop()
            raise TimeoutError(f"{name}: still running after {timeout} s")
        if "error" in box:
            raise box["error"]
        return box["value"]

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()


class Direct:
    """`Driven`'s interface without a thread: what a test uses when nothing was started at collection."""

    def popen(self, argv, **kw) -> subprocess.Popen:
        return subprocess.Popen(argv, preexec_fn=default_signals, **kw)


def early(module_name: str):
    """What `early_start` of that module started at collection (None when it was not)."""
    return _EARLY.get(module_name)


def pytest_sessionfinish(session):
    for started in _EARLY.values():
        if started is not None:
            started.stop()
    _EARLY.clear()
    for series in [_SERIES.pop("series", None), *_SERIES.pop("started", [])]:
        if series is not None:
            series.stop()


def pytest_unconfigure(config):
    gc.unfreeze()  # the interpreter's exit frees what was frozen (nanobind, in triton, reports leaks otherwise)


# What an in-process `workbench.ab` run imports on first use (pandas, scipy, sympy and dynamo through torch, peft),
# imported here so that the freeze below covers it: otherwise the first such test of a file walks it at every
# collection (`ab.arm._free`, ~0.15 s each).
import pandas  # noqa: E402,F401
import peft  # noqa: E402,F401
import scipy.stats  # noqa: E402,F401
import sympy  # noqa: E402,F401
import torch._dynamo  # noqa: E402,F401

# Everything imported so far (torch, transformers) is long-lived: the collector need not walk it again.
gc.freeze()


@pytest.fixture(autouse=True)
def _freeze_long_lived():
    """Before each test: collect the garbage of the tests before, then freeze what survives (the modules imported
    since, lazily or at collection: transformers' model classes, dynamo, pandas, ...; module and session fixtures).
    A full collection walks only what is not frozen: `workbench.ab` collects at every arm (`ab.arm._free`), and with
    the suite's later imports unfrozen each collection cost ~0.15 s, over half of the end-to-end tests' time. What
    a test creates stays unfrozen for its own collections (a test may check that the collector frees something)."""
    gc.collect()
    gc.freeze()
    yield
