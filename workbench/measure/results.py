"""Run results on disk: `runs/<run_id>/` (or `--out`) holding results.csv, summary.json and meta.json.

The one schema every result of the project uses (A/B comparisons, sweeps, instrument costs):
- `results.csv`: long format, one row per number: run_id, comparison, arm, rep, batch, step, metric, value, unit,
  plus the environment columns (`ENV_COLUMNS`: opt, device, gpu_name, model, layers, tokens, attn, precision, versions, sha),
  so runs concatenate and compare. Timed steps are `step_ms` (and fwd/bwd/opt); warmup steps `warmup_step_ms`;
  the counted pass `instrumented_step_ms` and `syncs`; per comparison `speedup`, `speedup_ci95_lo/hi`.
- `summary.json`: the A/B JSON object (the CLI contract in the README: per comparison the arms, the speedup with
  `speedup_ci95` and `verdict`, equivalence, savings model). What was built is written, so no reader replays it:
  each comparison's `batches` ({tokens, documents, doc_lens}) and, per arm, the attention it ran
  (`attention_impl`, `attention_flops`) and its FLOPs per batch (`flops_per_batch`: {model, total},
  `workbench.step.flops.arm_batch_flops`). Runs before these fields: `older_run_note`.
- `VOID.json` (optional, written by hand after the run): the comparisons whose results are void, with the reason
  (`VOID_FILE`, read by `void_comparisons` only).
- `meta.json`: command, the project's git sha, package versions, device, driver, NVML clocks and power per arm,
  `args` (the run's config, flat; older names: `run_args`), the protocol and the equivalence criterion (fixed
  before the run), status
  ("running" | "complete" | "incomplete" | "failed").

Every write is atomic (temp file + os.replace): a Ctrl-C leaves the earlier files intact and the run marked
incomplete. `load_run(dir)` reads a run back for notebooks. The state is also a file named for it (`workbench.measure.markers`: RUNNING
with a heartbeat, INCOMPLETE, FAILED; none when complete), and a dead writer's folder reads as status "died".
"""
from __future__ import annotations

from workbench.errors import write_fault
from workbench.paths import REPO_ROOT
import csv
import datetime as _dt
import json
import math
import os
import platform
import random
import shlex
import subprocess
import sys

import pandas as pd

RESULT_COLUMNS = ["run_id", "comparison", "arm", "rep", "batch", "step", "metric", "value", "unit"]
ENV_COLUMNS = ["opt", "device", "gpu_name", "model", "layers", "tokens", "attn", "precision", "torch", "transformers", "git_sha"]

STEP_METRICS = {"step_ms": "ms", "fwd_ms": "ms", "bwd_ms": "ms", "opt_ms": "ms", "syncs": "count",
                "syncs_declared": "count", "cuda_sync_warnings": "count", "peak_mem_mib": "MiB", "tokens": "tokens",
                "loss": "nats"}
"""StepRecord fields written as rows, with their units."""

CALLBACK_COMPARISON = "trainer"
"""The comparison `workbench.callback.WorkbenchCallback` writes: a user's own training steps with NVTX ranges off (arm
`plain`) and on (`ranges`) in adjacent pairs, each step its own batch (`batch` = the step). The adjacent pair is its
rep, so readers pair it on the rep alone (`workbench.measure.engine.pair_keys`) and read it as an NVTX-cost
comparison, as the A/B's `nvtx:...` ones."""


def new_run_id(tag: str = "") -> str:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    suffix = f"{random.randrange(16**4):04x}"
    return f"{stamp}-{tag}-{suffix}" if tag else f"{stamp}-{suffix}"


def atomic_write_text(path: str, text: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:  # a full disk, a Ctrl-C: the earlier file stands and no temporary file is left
        _remove_quietly(tmp)
        raise


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


def file_record(path: str) -> dict:
    """{bytes, sha256} of a file: what summary.json's `integrity` holds for results.csv. Of a `.gz` file, those of
    its content (a committed folder's results.csv.gz is checked against the record of the results.csv it holds)."""
    import gzip
    import hashlib
    h, n = hashlib.sha256(), 0
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
            n += len(chunk)
    return {"bytes": n, "sha256": h.hexdigest()}


def results_file(run_dir: str) -> str:
    """A run folder's results.csv, or the gzip copy the repository keeps of a committed one (results.csv.gz) where
    only that is there (`pandas.read_csv` reads either)."""
    plain = os.path.join(run_dir, "results.csv")
    return plain + ".gz" if not os.path.exists(plain) and os.path.exists(plain + ".gz") else plain


def has_results(run_dir: str) -> bool:
    """Whether a folder holds results.csv (or its committed gzip copy)."""
    return os.path.isfile(results_file(run_dir))


def atomic_write_json(path: str, obj) -> None:
    atomic_write_text(path, json.dumps(_jsonable(obj), indent=2, allow_nan=False, default=str) + "\n")


def _jsonable(o):
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {str(k): _jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_jsonable(v) for v in o]
    if hasattr(o, "item") and not isinstance(o, (str, bytes)):
        try:
            return _jsonable(o.item())
        except (ValueError, TypeError):
            return str(o)
    return o


PROJECT_ROOT = REPO_ROOT


def git_sha(cwd: str | None = None) -> str | None:
    """The project's HEAD sha (with "-dirty" when tracked files changed); None when the package is not inside its
    own checkout (installed elsewhere, or inside another repository: that repository's sha is not ours)."""
    if cwd is None and os.environ.get("WORKBENCH_GIT_SHA"):  # a copy of the tree without .git (the GPU machine)
        return os.environ["WORKBENCH_GIT_SHA"]
    cwd = cwd or PROJECT_ROOT
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=cwd, capture_output=True, text=True,
                             timeout=10).stdout.strip()
        if not top or os.path.realpath(top) != os.path.realpath(cwd) \
                or not os.path.isdir(os.path.join(top, "workbench")):
            return None
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True,
                             timeout=10).stdout.strip()
        if not sha:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def versions() -> dict:
    """Versions of Python and the packages the numbers depend on (None where not installed)."""
    from importlib import metadata
    out = {"python": platform.python_version()}
    for pkg in ("torch", "transformers", "peft", "triton", "numpy", "nvidia-ml-py", "nvtx", "flash-attn"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    try:
        import torch
        out["cuda"] = torch.version.cuda
        out["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    except Exception:  # pragma: no cover
        pass
    return out


def comparison_arms(c: dict) -> dict:
    """{arm name: its dict} of one summary.json comparison: the baseline, the optimized arm and any others."""
    return {a["arm"]: a for a in [c.get("baseline"), c.get("optimized"), *(c.get("others") or [])] if a}


def cpu_model() -> str | None:
    """The host CPU's model name (/proc/cpuinfo), else platform.processor(): a covariate for machine effects."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def sync_roundtrip_us(device, n: int = 200) -> float | None:
    """Median wall time of one device-to-host round trip (a one-element `.item()` after a tiny kernel), in us, over
    `n` after 20 warm ones; None off CUDA. Measured once at process start, outside every timed step: the host-side
    covariate of a sync-heavy comparison's machine effect (packing's rebuild arm costs 635-771 ms a step
    across H100s whose cached arm costs 600-636 ms)."""
    import statistics
    import time

    import torch
    d = torch.device(device)
    if d.type != "cuda":
        return None
    x = torch.zeros(1, device=d)
    out = []
    for i in range(20 + n):
        t = time.perf_counter()
        (x + 1).item()
        if i >= 20:
            out.append((time.perf_counter() - t) * 1e6)
    return round(statistics.median(out), 2)


def device_info(device) -> dict:
    """Device name (and capability, driver, memory on CUDA), the host's CPU model and kernel, and on CUDA one
    device-to-host round trip's median time (`sync_roundtrip_us`)."""
    import torch
    d = torch.device(device)
    info = {"type": d.type, "name": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(),
            "cpu_model": cpu_model(), "kernel": platform.release()}
    if d.type == "cuda":
        p = torch.cuda.get_device_properties(d)
        info.update(name=p.name, capability=f"{p.major}.{p.minor}", total_mem_mib=p.total_memory / 2**20)
        from workbench.instrument import NvmlSampler
        info.update(NvmlSampler(device_index=d.index or 0).device_info())
        info["sync_roundtrip_us"] = sync_roundtrip_us(d)
    return info


VOID_FILE = "VOID.json"
"""A run folder's declaration, written by hand after the run, that some of its comparisons' results are void (a bug
found later): `{"comparisons": {NAME: reason, ...}, "found_by": ..., "commit": ...}`, NAME "*" for every comparison.
Read by `void_comparisons` only; every reader of run folders leaves a void comparison out and says why."""
VOID_KEYS = ("comparisons", "found_by", "commit")

RUN_FILES = ("results.csv", "summary.json", "meta.json", "errors.log", "traces", "RUNNING", "INCOMPLETE", "FAILED",
             VOID_FILE)
"""What a run writes into its folder (and VOID.json, which a new run's results are not): `--force` removes exactly
these before a new run."""
BESIDE_FILES = ("summary.verdicts.json",)
"""What an analysis asked to write (`--write`) puts beside a run's own files: stale once the run is replaced."""
UNVERIFIED = "unverified (written before integrity records)"
"""A run folder whose summary.json records no size and hash of results.csv (written before they were kept)."""


def own_files(path: str) -> set[str] | None:
    """The names in `path` a workbench run may replace under --force: its meta.json's `files` (else RUN_FILES) and
    BESIDE_FILES; None when `path` holds no meta.json (no workbench run wrote it)."""
    try:
        with open(os.path.join(path, "meta.json")) as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict):
        return None
    return set(meta.get("files") or RUN_FILES) | set(RUN_FILES) | set(BESIDE_FILES)


def safe_name(label: str) -> str:
    """A comparison or arm label as a file or folder name (`traces/<comparison>/<arm>.*`): letters, digits and
    `-_.+` kept, anything else `_`."""
    return "".join(c if c.isalnum() or c in "-_.+" else "_" for c in label)


def check_out_dir(path: str, force: bool = False, given: bool = True) -> None:
    """Refuse an output folder that would lose or mix results: an existing file, a folder that is not empty (unless
    `force`), or a place that cannot be written. Raises WorkbenchError (one line); creates nothing. `given`: the
    user named it (--out); else it is the default runs/<run_id>, and the line says so (and to give --out)."""
    from workbench.errors import WorkbenchError

    what = f"--out {path}" if given else f"the default output folder {path} (no --out given)"
    other = "name another folder" if given else "give --out DIR to write elsewhere"
    if os.path.exists(path) and not os.path.isdir(path):
        raise WorkbenchError(f"{what} is an existing file; " + ("name a new folder" if given else other))
    if os.path.isdir(path):
        from workbench.measure import markers
        live = markers.holder(path)
        if live is not None:  # one writer per folder, --force or not
            raise WorkbenchError(f"{what} is being written by a live run: {markers.describe_writer(live)}; wait for "
                                 f"it to end or {other}")
        present = os.listdir(path)
        own = own_files(path) if present else set()
        if present and not force:
            raise WorkbenchError(f"{what} is not empty" + (" (an earlier run's results)" if own is not None else "")
                                 + "; name a new folder" + (", or add --force to replace that run's files"
                                                            if own is not None else ""))
        foreign = sorted(set(present) - (own or set()))
        if foreign:
            raise WorkbenchError(f"{what} holds files no workbench run wrote ({', '.join(foreign[:3])}"
                                 + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
                                 + "); --force replaces only a run's own files: name another folder")
        if not os.access(path, os.W_OK | os.X_OK):
            raise WorkbenchError(f"{what} cannot be written (permissions); {other}")
        return
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
        raise WorkbenchError(f"{what} cannot be created ({parent} is not a writable folder); {other}")
    import tempfile
    try:  # permission bits can say yes where the file system says no (/proc, a read-only mount): try it
        os.rmdir(tempfile.mkdtemp(prefix=".wb-out-check-", dir=parent))
    except OSError as e:
        raise WorkbenchError(f"{what} cannot be created in {parent} ({e.strerror}); {other}") from None


def clear_run_files(path: str) -> None:
    """Remove an earlier run's files (RUN_FILES, its meta.json's `files`, BESIDE_FILES) from `path` (for --force),
    RUNNING left to the lock (`markers.acquire`); anything else stays."""
    import shutil

    names = (own_files(path) or set(RUN_FILES) | set(BESIDE_FILES)) - {"RUNNING"}
    for name in sorted(names):
        if os.path.basename(name) != name or name in ("", ".", ".."):
            continue
        p = os.path.join(path, name)
        if os.path.isdir(p):
            shutil.rmtree(p)
        elif os.path.exists(p):
            os.remove(p)


class RunWriter:
    """Collects rows and writes the run folder; every `flush()` rewrites results.csv atomically. The folder's lock
    (RUNNING, `markers.acquire`) is taken before anything else is written (a live writer's folder raises
    `markers.LockHeld`); `replace`: an earlier run's own files are removed once the lock is held (--force)."""

    def __init__(self, out_dir: str, run_id: str, *, argv: list[str] | None = None, env: dict | None = None,
                 extra_meta: dict | None = None, replace: bool = False):
        self.out_dir = out_dir
        self.run_id = run_id
        from workbench.errors import WorkbenchError
        from workbench.measure import markers
        try:
            lock = markers.acquire(out_dir, run_id, note=lambda ln: print(ln, file=sys.stderr, flush=True))
        except markers.LockHeld as e:
            raise WorkbenchError(str(e)) from None
        try:
            if replace:
                clear_run_files(out_dir)
            self.heartbeat = markers.Heartbeat(out_dir, record=lock)  # RUNNING first: a folder is never unmarked
            self._open(run_id, argv, env, extra_meta)
        except OSError as e:  # a full disk before the run began: the cause in the marker file, the lock released
            try:
                markers.finish(out_dir, "failed", getattr(self, "heartbeat", None), reason=write_fault(e))
            except OSError:
                pass
            raise

    def _open(self, run_id, argv, env, extra_meta) -> None:
        self._summary: dict | None = None
        self._flushed_rows = -1
        self.env = {c: None for c in ENV_COLUMNS}
        self.env.update(env or {})
        self.rows: list[dict] = []
        self.meta = {
            "run_id": run_id, "status": "running",
            "command": " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv)),
            "cwd": os.getcwd(), "git_sha": git_sha(), "versions": versions(), "host": platform.node(),
            "started": _dt.datetime.now().isoformat(timespec="seconds"), "ended": None,
        }
        from workbench.instrument.ranges import nvtx_backend
        self.meta["instrument"] = {"nvtx_backend": nvtx_backend()}  # what the timed steps' NVTX ranges went through
        self.meta.update(extra_meta or {})
        from workbench.step import inject
        if inject.spec() is not None:  # a deliberately slowed run (the gate's check): the analysis leaves it out
            self.meta["injected"] = f"{inject.ENV}={os.environ[inject.ENV]}"
        self.env.setdefault("git_sha", self.meta["git_sha"])
        if self.env.get("git_sha") is None:
            self.env["git_sha"] = self.meta["git_sha"]
        for k in ("torch", "transformers"):
            if self.env.get(k) is None:
                self.env[k] = self.meta["versions"].get(k)
        self.write_meta()

    # -- paths ----------------------------------------------------------------------------------------------
    def path(self, *parts: str) -> str:
        p = os.path.join(self.out_dir, *parts)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        return p

    # -- rows ----------------------------------------------------------------------------------------------
    def add(self, comparison: str, arm: str | None, metric: str, value, unit: str, rep=None, step=None, batch=None,
            **env) -> None:
        row = {"run_id": self.run_id, "comparison": comparison, "arm": arm, "rep": rep, "batch": batch, "step": step,
               "metric": metric, "value": value, "unit": unit}
        e = dict(self.env)
        e.update(env)
        row.update({c: e.get(c) for c in ENV_COLUMNS})
        self.rows.append(row)

    def add_sample(self, comparison: str, sample: dict, prefix: str = "", **env) -> None:
        """One row per step metric of an engine sample (or a StepRecord as a dict); `prefix` names the pass
        (`instrumented_` for the counted pass)."""
        for metric, unit in STEP_METRICS.items():
            v = sample.get(metric)
            if v is None:
                continue
            name = metric if metric in ("syncs", "syncs_declared", "cuda_sync_warnings") else prefix + metric
            self.add(comparison, sample["arm"], name, v, unit, rep=sample.get("rep"), step=sample.get("step"),
                     batch=sample.get("batch"), **env)

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows, columns=RESULT_COLUMNS + ENV_COLUMNS)

    def flush(self) -> None:
        path = os.path.join(self.out_dir, "results.csv")
        tmp = f"{path}.tmp{os.getpid()}"
        try:
            with open(tmp, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=RESULT_COLUMNS + ENV_COLUMNS)
                w.writeheader()
                for r in self.rows:
                    w.writerow({k: ("" if v is None or (isinstance(v, float) and not math.isfinite(v)) else v)
                                for k, v in r.items()})
            os.replace(tmp, path)
        except BaseException:  # a full disk, a Ctrl-C: the earlier results.csv stands, no temporary file left
            _remove_quietly(tmp)
            raise
        self._flushed_rows = len(self.rows)

    # -- json ----------------------------------------------------------------------------------------------
    def write_summary(self, summary: dict) -> None:
        """summary.json with `integrity`: the size and sha256 of results.csv, flushed first, so every reader can
        tell a folder whose results.csv was edited or cut after the run (`verify`)."""
        self.flush()
        self._summary = summary
        atomic_write_json(os.path.join(self.out_dir, "summary.json"),
                          {**summary, "integrity": {"results.csv": file_record(os.path.join(self.out_dir,
                                                                                            "results.csv"))}})

    def write_meta(self) -> None:
        atomic_write_json(os.path.join(self.out_dir, "meta.json"), self.meta)

    def finish(self, status: str, **extra) -> None:
        """Flush rows and mark the run `status` (complete / incomplete / failed)."""
        self.meta.update(extra)
        self.meta["status"] = status
        self.meta["ended"] = _dt.datetime.now().isoformat(timespec="seconds")
        self.meta["files"] = sorted(n for n in RUN_FILES if n != VOID_FILE)  # what --force may replace later
        if self._summary is not None and len(self.rows) != self._flushed_rows:
            self.write_summary(self._summary)  # rows added since: results.csv and its record rewritten together
        elif self._summary is None:
            self.flush()
        self.write_meta()
        from workbench.measure import markers
        markers.finish(self.out_dir, status, self.heartbeat, failures=extra.get("failures") or (),
                       reason=extra.get("reason"))


def verify(run_dir: str, summary: dict, state: str | None = None) -> str:
    """"verified", UNVERIFIED (no record: an older folder), or "unverified (...)" for a folder its writer did not
    finish (running, died): whether results.csv is the file summary.json's `integrity` records. Raises EditedRun
    (one line) when it is not."""
    rec = ((summary or {}).get("integrity") or {}).get("results.csv")
    if not rec:
        return UNVERIFIED
    if state in ("running", "died"):  # rows flushed after the last summary: no finished record to check
        return f"unverified (its writer did not finish: {state})"
    path = results_file(run_dir)
    have = file_record(path) if os.path.isfile(path) else {"bytes": 0, "sha256": ""}
    if have != {k: rec.get(k) for k in ("bytes", "sha256")}:
        from workbench.errors import EditedRun
        raise EditedRun(f"{run_dir}: results.csv was edited after the run ({have['bytes']} bytes, sha256 "
                        f"{have['sha256'][:12] or '-'}; summary.json records {rec.get('bytes')} bytes, "
                        f"{str(rec.get('sha256'))[:12]}): its numbers are not the run's; read the run's own copy")
    return "verified"


def load_run(run_dir: str) -> tuple[pd.DataFrame, dict, dict]:
    """(results DataFrame, summary dict or {}, meta dict) of a run folder; meta's `integrity` says whether
    results.csv was checked against summary.json's record (`verify`: an edited one raises EditedRun)."""

    def j(name):
        p = os.path.join(run_dir, name)
        if not os.path.exists(p):
            return {}
        with open(p) as f:
            return json.load(f)
    meta = j("meta.json")
    from workbench.measure import markers
    state, why = markers.state(run_dir, meta)
    summary = j("summary.json")
    integrity = verify(run_dir, summary, state)
    df = pd.read_csv(results_file(run_dir))
    if meta and state != meta.get("status"):  # a dead writer's "running" (or a marker the JSON lacks) is what shows
        meta = {**meta, "status": state, **({"reason": why} if why and not meta.get("reason") else {})}
    meta = {**meta, "integrity": integrity} if meta else meta
    return df, summary, meta


PROCESSES_FILE = "processes.json"
"""A `--processes K` folder's record of its processes (`workbench.ab.processes` writes it)."""
DESIGN_FILE = "design.json"
"""A folder of plain runs that are processes of one designed experiment (a per-GPU job: studies/gpu_lease/per_gpu.sh writes
it, {"job", "note"}): each run below it is one process of that campaign (`analysis.loader` `process_of`), not a run
of its own in the speedup figures."""


def process_dirs(folder: str) -> list[str]:
    """The process folders of a `--processes K` folder that ran to the end (`PROCESSES_FILE`: rc 0, and a
    summary.json), in the record's order; [] when the folder has no record."""
    path = os.path.join(folder, PROCESSES_FILE)
    if not os.path.isfile(path):
        return []
    with open(path, encoding="utf-8") as f:
        procs = json.load(f).get("processes") or []
    dirs = [os.path.join(folder, p.get("folder") or "") for p in procs if p.get("rc", 0) == 0]
    return [d for d in dirs if os.path.isfile(os.path.join(d, "summary.json"))]


def nvtx_backend_of(meta: dict) -> str | None:
    """The NVTX backend a run's ranges went through: meta.json's `instrument.nvtx_backend`; for a run before that
    field, inferred from `versions.nvtx` and the device ("nvtx" with the package, else "torch.cuda.nvtx" on CUDA,
    else "off"); None where neither is recorded."""
    rec = (meta.get("instrument") or {}).get("nvtx_backend")
    if rec is not None:
        return rec
    ver = meta.get("versions") or {}
    if "nvtx" not in ver:
        return None
    if ver["nvtx"]:
        return "nvtx"
    return "torch.cuda.nvtx" if (meta.get("device") or {}).get("type") == "cuda" else "off"


def environment(meta: dict) -> dict:
    """One run's environment, flat, from its meta.json: every package of `versions` (by its name: "nvtx", "torch",
    "cuda", ...; None where not installed), `nvtx_backend` (`nvtx_backend_of`), `git_sha`, `gpu` (the device's name),
    `gpu_uuid`, `precision`. A key the meta does not record is absent (not None: "not installed" is a value)."""
    out = dict(meta.get("versions") or {})
    dev = meta.get("device") or {}
    for key, val in (("nvtx_backend", nvtx_backend_of(meta)), ("gpu", dev.get("gpu_name") or dev.get("name")),
                     ("gpu_uuid", dev.get("uuid")), ("precision", (meta.get("args") or {}).get("precision"))):
        if val is not None:
            out[key] = val
    if "git_sha" in meta:
        out["git_sha"] = meta["git_sha"]
    return out


def _name_span(names: list[str]) -> str:
    """Process names as runs: ["p00", "p01", "p03"] -> "p00-p01, p03" (same prefix, consecutive numbers)."""
    import re

    parts, run = [], []
    for n in names:
        m = re.fullmatch(r"(.*?)(\d+)", n)
        prev = re.fullmatch(r"(.*?)(\d+)", run[-1]) if run else None
        if m and prev and m.group(1) == prev.group(1) and int(m.group(2)) == int(prev.group(2)) + 1:
            run.append(n)
            continue
        if run:
            parts.append(run[0] if len(run) == 1 else f"{run[0]}-{run[-1]}")
        run = [n]
    if run:
        parts.append(run[0] if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return ", ".join(parts)


def environment_diff(run_dirs: list[str], names: list[str] | None = None) -> dict:
    """Did the processes of one record (a `--processes K` folder, a dose folder) run in one environment? Compares
    each run folder's `environment` (meta.json: every package version, the NVTX backend, git sha, GPU name and UUID,
    precision) over the keys every folder records. Returns {"mixed": bool, "processes": n, "differ": {key: [{"value",
    "processes": [names]}, ...] in order of first appearance}, "unread": [names without a readable meta.json],
    "line": "mixed environment: nvtx 0.2.17 in p00-p01, none in p02-p05; ..." or None}. `names`: how each folder is
    called in the line (default its basename)."""
    names = list(names) if names is not None else [os.path.basename(os.path.normpath(d)) for d in run_dirs]
    envs, unread = {}, []
    for d, n in zip(run_dirs, names):
        meta = _json_or_empty(os.path.join(d, "meta.json"))
        if meta:
            envs[n] = environment(meta)
        else:
            unread.append(n)
    keys = set.intersection(*(set(e) for e in envs.values())) if envs else set()
    order = list(dict.fromkeys(k for e in envs.values() for k in e))
    differ = {}
    for k in (k for k in order if k in keys):
        groups: dict = {}
        for n, e in envs.items():
            groups.setdefault(json.dumps(e[k], sort_keys=True, default=str), []).append(n)
        if len(groups) > 1:
            differ[k] = [{"value": json.loads(v), "processes": ns} for v, ns in groups.items()]
    line = None
    if differ:
        line = "mixed environment: " + "; ".join(
            f"{k} " + ", ".join(f"{'none' if g['value'] is None else g['value']} in {_name_span(g['processes'])}"
                                for g in gs) for k, gs in differ.items())
    return {"mixed": bool(differ), "processes": len(envs), "differ": differ, "unread": unread, "line": line}


def void_comparisons(run_dir: str, names=None) -> dict:
    """{comparison: {"void_reason", "void_found_by", "void_commit"}} of the comparisons the run folder's `VOID_FILE`
    declares void ({} without the file): a name, or every one of `names` (the run's comparisons; None: those its
    summary.json and meta.json name) for "*". Raises WorkbenchError, one line naming the file, when it is not JSON,
    lacks or adds a key of `VOID_KEYS`, has an empty or non-string reason, or names a comparison the run does not
    hold."""
    from workbench.errors import WorkbenchError

    path = os.path.join(run_dir, VOID_FILE)
    if not os.path.exists(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise WorkbenchError(f"{path}: not readable JSON ({e})") from None
    if not isinstance(doc, dict) or set(doc) != set(VOID_KEYS):
        got = sorted(doc) if isinstance(doc, dict) else type(doc).__name__
        raise WorkbenchError(f"{path}: needs exactly the keys {list(VOID_KEYS)}, has {got}")
    comps = doc["comparisons"]
    if not isinstance(comps, dict) or not comps:
        raise WorkbenchError(f"{path}: 'comparisons' must map comparison names (or \"*\") to reasons")
    for k in ("found_by", "commit"):
        if not isinstance(doc[k], str) or not doc[k].strip():
            raise WorkbenchError(f"{path}: '{k}' must be a non-empty string")
    for name, why in comps.items():
        if not isinstance(why, str) or not why.strip():
            raise WorkbenchError(f"{path}: the reason of {name!r} must be a non-empty string")
    if names is None:
        summary, meta = (_json_or_empty(os.path.join(run_dir, f)) for f in ("summary.json", "meta.json"))
        names = [c.get("name") or c.get("opt") for c in summary.get("comparisons", [])]
        names += list(meta.get("comparisons", []))
    names = [n for n in dict.fromkeys(names) if isinstance(n, str)]
    unknown = [n for n in comps if n != "*" and n not in names]
    if unknown:
        raise WorkbenchError(f"{path}: names {', '.join(map(repr, unknown))}, which the run does not hold "
                             f"(it holds: {', '.join(names) or 'none'})")
    def info(why: str) -> dict:
        return {"void_reason": why.strip(), "void_found_by": doc["found_by"], "void_commit": doc["commit"]}
    out = {n: info(comps["*"]) for n in names if "*" in comps}
    out.update({n: info(why) for n, why in comps.items() if n != "*"})
    return out


def _json_or_empty(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


_NOTED: set = set()


def older_run_note(run_dir: str, what: str) -> str:
    """`what` (an older run folder's missing field and what the reader does instead) as one line on stderr, once per
    process for every folder it applies to (the first one named); returned for the reader's `note` column, so a table
    says it on every row it affects."""
    import sys

    if what not in _NOTED:
        _NOTED.add(what)
        print(f"note: {what} (e.g. {run_dir}; said once for every such run folder)", file=sys.stderr)
    return what


RENAMED_ARGS = {"no_checkpointing": ("checkpointing", lambda v: not v), "target_ci": ("target_ci_pct", lambda v: v)}
"""meta.json `args` keys of runs made before the config tree (`workbench.step.config`), with the leaf each became."""


def run_args(meta: dict) -> dict:
    """meta.json's `args` (the run's flat config) in today's leaf names: an older run's `no_checkpointing` read as
    `checkpointing`, its `target_ci` as `target_ci_pct` (`RENAMED_ARGS`); `checkpointing` True where neither is
    recorded (the default)."""
    args = dict((meta or {}).get("args") or {})
    for old, (new, conv) in RENAMED_ARGS.items():
        if old in args:
            v = args.pop(old)
            args.setdefault(new, conv(v))
    args.setdefault("checkpointing", True)
    return args


def engine_step_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The timed-step rows the engine's statistics used, as `step_ms` rows (rep and step set).

    A single-process run: its `step_ms` rows. A distributed run (a `rank` column with `dp_step_ms` rows): a
    synchronous data-parallel step lasts as long as its slowest rank, so the engine paired the `dp_step_ms` samples
    (the max across ranks per step, written once per rank): rank 0's copy, renamed `step_ms`. Each rank's own
    `step_ms` rows stay in the file for per-rank tables."""
    timed = df[df["rep"].notna() & df["step"].notna()] if "step" in df else df[df["rep"].notna()]
    if "rank" in timed and (timed["metric"] == "dp_step_ms").any():
        rank = pd.to_numeric(timed["rank"], errors="coerce")
        dp = timed[(timed["metric"] == "dp_step_ms") & (rank == rank[timed["metric"] == "dp_step_ms"].min())]
        return dp.assign(metric="step_ms")
    return timed[timed["metric"] == "step_ms"]
