"""The A/B under torchrun: the model sharded with FSDP2 (`fully_shard`), one process per rank, rank 0 writing one
results folder that holds every rank's rows.

    torchrun --nproc-per-node 2 -m workbench.ab --opt all --trace torch --out runs/fsdp2   # 2 GPUs (nccl)
    torchrun --standalone --nproc-per-node 2 -m workbench.ab --opt packing --device cpu    # CPU (gloo): the tests

`python -m workbench.ab` without torchrun is untouched: this module takes over only when torchrun's environment
(WORLD_SIZE, RANK, LOCAL_RANK) is set (`launched()`).

What a distributed run does (`DistRunner`, a `workbench.ab.Runner`):
- Process group: nccl on CUDA (device cuda:LOCAL_RANK), gloo on the CPU (`--device cpu`, or no GPU); a second,
  gloo, group carries the workbench's own messages (step times, rows, status), so the traced NCCL stream holds only
  FSDP2's collectives. Timeout: $WORKBENCH_DIST_TIMEOUT_S (900 s).
- Model: built whole on every rank from the same seed (identical weights), LoRA applied, then `fully_shard` on
  every decoder layer and on the root, on a 1-D device mesh of all ranks. FSDP2 shards every parameter, frozen or
  not: mixed requires_grad inside one FSDP group is supported (the frozen base gets no gradient and no
  reduce-scatter; the LoRA gradients are reduce-scattered, averaged over ranks). On the CPU this works with gloo and
  `init_device_mesh("cpu", ...)` on torch 2.11 and 2.13 (checked on 2.13).
- Data: each rank its own packed batches: rank r draws them with seed `--seed + r * DATA_SEED_STRIDE` (rank 0's
  batches are the single-process run's). The global batch is the concatenation of the ranks' batches; its loss is
  the mean of the ranks' losses (what data-parallel gradient averaging optimizes).
- Timing: every rank runs the same protocol in lockstep (FSDP2's collectives force it). After each timed step the
  ranks exchange their step times: a synchronous data-parallel step costs the slowest rank's time, so the engine's
  samples (`step_ms`, the speedup and its CI, warmup settling) use the max across ranks per step (`dp_step_ms` rows),
  while each rank's own time is its `step_ms` row. Every decision that could differ between ranks (warmup settled,
  more reps) is therefore taken on identical numbers. `--budget-s` (a wall-clock decision per rank) is refused.
- Per rank: step time, syncs (the counted pass) and peak memory are rows with a `rank` column; summary.json holds
  them per rank per arm (`ranks`), and per comparison `distributed` (world size, backend, the FSDP2 vs
  single-process equivalence, the collective wait estimate of `workbench.dist_waits` when traced on GPUs).
- Traces (`--trace torch`): every rank writes its own files, `traces/<cmp>/<arm>.rank<R>.pt.trace.json.gz`
  (different files, never one file from two ranks); everything else in the folder is written by rank 0 alone.
  NVTX ranges are the same `wb/...` ranges on every rank (one process per rank: nsys shows them per process).
- Equivalence: besides the arms against their baseline (losses averaged over ranks, gradients gathered whole),
  in fp32 the sharded run's loss and LoRA gradients on the global batch are checked against a single-process run of
  the unsharded model over the same global batch (rank 0 computes it), within `equivalence.RTOL`.
- Failure: an error on any rank stops the run on every rank. The failing rank posts its error to the rendezvous
  store and leaves the process group (its peers' pending collectives fail at once, on gloo); rank 0 prints one line
  `failed: rank N: ...` and marks meta.json failed; the failing rank waits (60 s at most) for rank 0 to finish
  writing before it exits.

Test-only switches: $WORKBENCH_TEST_FAIL_RANK=N[:K] makes rank N raise at its K-th step (default 1st; the fp32
FSDP2 vs single-process check is a step); $WORKBENCH_TEST_DROP_BATCH_RANK=N
makes rank N drop its batch (loss x 0) in the FSDP2 vs single-process check (the negative control).
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import traceback

import torch

from workbench.ab.arm import _free
from workbench.ab.planner import ArmSpec
from workbench.ab.runner import DTYPES, Runner
from workbench.errors import WorkbenchError
from workbench.opts import unsupported_reason
from workbench.results import ENV_COLUMNS, RESULT_COLUMNS, RunWriter
from workbench.results import safe_name

FAIL_ENV = "WORKBENCH_TEST_FAIL_RANK"
DROP_ENV = "WORKBENCH_TEST_DROP_BATCH_RANK"
TIMEOUT_ENV = "WORKBENCH_DIST_TIMEOUT_S"
WATCH_PERIOD_S, WATCH_GRACE_S = 0.5, 3.0
"""Rank 0's watcher polls the store every WATCH_PERIOD_S for a peer's failure; when its main thread has not taken
it over within WATCH_GRACE_S (blocked in a collective the failed peer will never join), the watcher writes."""
DATA_SEED_STRIDE = 1_000_003
"""Rank r's batches come from seed `--seed + r * DATA_SEED_STRIDE`."""
SPEEDUP_BASIS = ("max across ranks per step: a synchronous data-parallel step lasts as long as its slowest rank; "
                 "pairs by (rep, step) as in a single-process run")
_COMM_ERRORS = ("connection closed", "connection reset", "gloo", "nccl", "timed out", "timeout", "broken pipe",
                "peer", "process group", "processgroup")


class RankFailed(BaseException):
    """A rank failed: raised on every rank (its own error, or a peer's read from the store). A BaseException, so
    the per-arm handlers of `workbench.ab` / `workbench.engine` do not swallow it: ranks must not diverge."""

    def __init__(self, rank: int, msg: str, tb: str = "", own: bool = False):
        super().__init__(f"rank {rank}: {msg}")
        self.rank, self.msg, self.tb, self.own = rank, msg, tb, own


def launched() -> bool:
    """Under torchrun (or any launcher that sets WORLD_SIZE, RANK and LOCAL_RANK)."""
    return all(os.environ.get(k, "").strip() for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK"))


def _first_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}"


# --- the process group ----------------------------------------------------------------------------------------

class DistContext:
    """This rank's place in the run: rank, world size, device, the FSDP2 mesh, the control group and the store."""

    def __init__(self, rank: int, world: int, local_rank: int, device: torch.device, backend: str):
        self.rank, self.world, self.local_rank, self.device, self.backend = rank, world, local_rank, device, backend
        self.store = None
        self.control = None
        self.mesh = None
        self.aborted = False
        self.failed: RankFailed | None = None
        self._injected = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watcher = None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def describe(self) -> dict:
        return {"world_size": self.world, "rank": self.rank, "backend": self.backend, "device": str(self.device),
                "sharding": "FSDP2 fully_shard: every decoder layer, then the root; LoRA trained, base frozen",
                "data": f"rank r: seed + r * {DATA_SEED_STRIDE}", "speedup_basis": SPEEDUP_BASIS}

    # -- messages (the gloo control group) --------------------------------------------------------------------
    @contextlib.contextmanager
    def guard(self):
        """An error inside stops every rank: it is raised as `fail(e)` (a peer's failure when one was posted, e.g. a
        collective that failed because a peer left; else this rank's own, posted to the store). A `RankFailed` or a
        KeyboardInterrupt passes as it is."""
        try:
            yield
        except Exception as e:  # noqa: BLE001 - RankFailed and KeyboardInterrupt are BaseExceptions: not caught
            raise self.fail(e) from e

    def broadcast(self, obj):
        """Rank 0's `obj` on every rank."""
        import torch.distributed as dist

        box = [obj]
        with self.guard():
            dist.broadcast_object_list(box, src=0, group=self.control)
        return box[0]

    def gather(self, obj) -> list | None:
        """Every rank's `obj`, in rank order, on rank 0 (None elsewhere)."""
        import torch.distributed as dist

        out = [None] * self.world if self.is_main else None
        with self.guard():
            dist.gather_object(obj, out, dst=0, group=self.control)
        return out

    def all_max(self, x: float) -> float:
        import torch.distributed as dist

        t = torch.tensor([float(x)], dtype=torch.float64)
        with self.guard():
            dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.control)
        return float(t.item())

    def all_mean(self, x: float) -> float:
        import torch.distributed as dist

        t = torch.tensor([float(x)], dtype=torch.float64)
        with self.guard():
            dist.all_reduce(t, op=dist.ReduceOp.SUM, group=self.control)
        return float(t.item()) / self.world

    def on_main(self, fn, *args, **kwargs):
        """Run `fn` on rank 0 only; a WorkbenchError it raises is raised on every rank (one message)."""
        err = None
        if self.is_main:
            try:
                fn(*args, **kwargs)
            except WorkbenchError as e:
                err = str(e)
        err = self.broadcast(err)
        if err is not None:
            raise WorkbenchError(err)

    # -- failures ---------------------------------------------------------------------------------------------
    def maybe_inject(self) -> None:
        """Test only: $WORKBENCH_TEST_FAIL_RANK names the rank that raises at its first step."""
        spec = os.environ.get(FAIL_ENV, "").strip()
        if self._injected or not spec:
            return
        rank, _, at = spec.partition(":")
        if rank.strip() != str(self.rank):
            return
        self._calls = getattr(self, "_calls", 0) + 1
        if self._calls >= int(at or 1):
            self._injected = True
            raise RuntimeError(f"injected failure ({FAIL_ENV}={spec})")

    def peer_failure(self, wait_s: float = 0.0) -> RankFailed | None:
        """A failure another rank posted to the store (polled for `wait_s` seconds), or None."""
        if self.store is None:
            return None
        t_end = time.monotonic() + wait_s
        while True:
            for r in range(self.world):
                if r == self.rank:
                    continue
                key = f"wb/failed/{r}"
                try:
                    if self.store.check([key]):
                        d = json.loads(self.store.get(key).decode())
                        return RankFailed(r, d.get("msg", "failed"), d.get("traceback", ""))
                except Exception:  # noqa: BLE001 - the store gone too: nothing to read
                    return None
            if time.monotonic() >= t_end:
                return None
            time.sleep(0.2)

    def fail(self, exc: BaseException) -> RankFailed:
        """The RankFailed to raise for `exc` on this rank: a peer's failure when one was posted (a collective that
        failed because a peer left), else this rank's own, posted to the store. Leaves the process group, so peers
        blocked in a collective with this rank fail at once instead of waiting for the timeout."""
        if isinstance(exc, RankFailed):
            return exc
        with self._lock:  # on rank 0: the main thread takes the failure over (the watcher, holding it, exits)
            if self.failed is not None:
                return self.failed
            peer = self.peer_failure(0.0)
            if peer is None and any(s in str(exc).lower() for s in _COMM_ERRORS):
                peer = self.peer_failure(10.0)
            if peer is not None:
                self.failed = peer
            else:
                tb = "".join(traceback.format_exception(exc))
                self.failed = RankFailed(self.rank, _first_line(exc), tb, own=True)
                if self.store is not None:
                    with contextlib.suppress(Exception):
                        self.store.set(f"wb/failed/{self.rank}", json.dumps({"msg": self.failed.msg,
                                                                             "traceback": tb}))
                        self.store.add("wb/failures", 1)
        self.abort()
        return self.failed

    # -- rank 0's watcher -----------------------------------------------------------------------------------------
    def watch(self, writer) -> None:
        """Rank 0: a daemon thread that notices a peer's failure even while the main thread is blocked in a
        collective that will never complete (the failed peer alive but gone from it; NCCL kernels waiting for a dead
        peer). After WATCH_GRACE_S without the main thread taking over, it marks the folder failed, prints the one
        line, acknowledges and ends the process (exit status 1)."""
        if not self.is_main or self.store is None or self.world < 2:
            return

        def loop():
            while not self._stop.wait(WATCH_PERIOD_S):
                try:
                    if int(self.store.add("wb/failures", 0)) <= 0:
                        continue
                except Exception:  # noqa: BLE001 - the store gone: the launcher is ending the run
                    return
                peer = self.peer_failure(1.0)
                if peer is None:
                    continue
                t_end = time.monotonic() + WATCH_GRACE_S
                while time.monotonic() < t_end and self.failed is None and not self._stop.is_set():
                    time.sleep(0.1)
                if self._stop.is_set() or not self._lock.acquire(timeout=WATCH_GRACE_S) or self.failed is not None:
                    return
                self.failed = peer  # the lock stays held: the process ends here
                _emergency_write(writer, peer)
                with contextlib.suppress(Exception):
                    self.store.set("wb/ack", "1")
                sys.stderr.flush()
                os._exit(1)

        self._watcher = threading.Thread(target=loop, name="wb-rank-watcher", daemon=True)
        self._watcher.start()

    def abort(self) -> None:
        import torch.distributed as dist

        if self.aborted:
            return
        self.aborted = True
        with contextlib.suppress(Exception):
            if dist.is_initialized():
                dist.destroy_process_group()

    def close(self) -> None:
        """End of the run: rank 0 acknowledges a failure (the failing rank waits for that before it exits, so rank 0
        finishes writing first); the process group is destroyed."""
        self._stop.set()
        if self._watcher is not None and self._watcher is not threading.current_thread():
            self._watcher.join(timeout=10)  # not mid-call into the store when the process group goes
        if self.failed is not None and self.store is not None:
            with contextlib.suppress(Exception):
                if self.is_main:
                    self.store.set("wb/ack", "1")
                elif self.failed.own:
                    self.store.wait(["wb/ack"], _dt.timedelta(seconds=60))
        self.abort()


def _emergency_write(writer, peer: RankFailed) -> None:
    """The watcher's end of a run: rows so far, meta.json and summary.json marked failed, the one line."""
    from workbench.results import atomic_write_json

    reason = f"rank {peer.rank}: {peer.msg}"
    with contextlib.suppress(Exception):
        with open(writer.path("errors.log"), "a") as f:
            f.write(f"--- rank {peer.rank} failed\n{peer.tb or peer.msg}\n")
    with contextlib.suppress(Exception):
        writer.finish("failed", reason=reason, failures=[f"failed: {reason}"])
    with contextlib.suppress(Exception):
        p = os.path.join(writer.out_dir, "summary.json")
        summary = {}
        if os.path.exists(p):
            with open(p) as f:
                summary = json.load(f)
        summary.update(complete=False, status="failed", failures=[f"failed: {reason}"])
        atomic_write_json(p, summary)
    print(f"failed: {reason} (traceback in {os.path.join(writer.out_dir, 'errors.log')}); results so far are in "
          f"{writer.out_dir}", file=sys.stderr, flush=True)


def init(device_arg: str = "auto") -> DistContext:
    """Initialise the process group from torchrun's environment: nccl on cuda:LOCAL_RANK, gloo on the CPU."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ["LOCAL_RANK"])
    cuda = device_arg == "cuda" or (device_arg == "auto" and torch.cuda.is_available())
    if cuda:
        if not torch.cuda.is_available():
            raise WorkbenchError("--device cuda asked for, but torch sees no CUDA device")
        if local >= torch.cuda.device_count():
            raise WorkbenchError(f"LOCAL_RANK {local} but torch sees {torch.cuda.device_count()} GPU(s): start "
                                 "torchrun with --nproc-per-node at most the GPU count")
        device, backend = torch.device("cuda", local), "nccl"
        torch.cuda.set_device(device)
    else:
        device, backend = torch.device("cpu"), "gloo"
    timeout = _dt.timedelta(seconds=float(os.environ.get(TIMEOUT_ENV) or 900))
    kw = {"device_id": device} if cuda else {}
    dist.init_process_group(backend, timeout=timeout, **kw)
    ctx = DistContext(rank, world, local, device, backend)
    with contextlib.suppress(Exception):
        ctx.store = dist.distributed_c10d._get_default_store()
    ctx.control = dist.new_group(backend="gloo", timeout=timeout)
    ctx.mesh = init_device_mesh(device.type, (world,))
    return ctx


def shard(model, mesh):
    """FSDP2: `fully_shard` on every decoder layer, then on the root (the peft model). Returns the model."""
    from torch.distributed.fsdp import fully_shard

    from workbench.instrument.ranges import find_decoder_layers

    for layer in find_decoder_layers(model):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def full(t):
    """A DTensor gathered whole (every rank gets it); a plain tensor as it is."""
    if t is None:
        return None
    return t.full_tensor() if hasattr(t, "full_tensor") else t


# --- results ---------------------------------------------------------------------------------------------------

class RankWriter(RunWriter):
    """Rank 0: the run folder, with a `rank` column in results.csv. Other ranks: rows kept in memory (gathered to
    rank 0 after every comparison), errors.log in a scratch folder (gathered too), nothing written to the run
    folder but their own trace files (`traces/<cmp>/<arm>.rank<R>...`)."""

    COLUMNS = RESULT_COLUMNS + ["rank"] + ENV_COLUMNS

    def __init__(self, out_dir, run_id, *, rank: int, **kw):
        self.rank = rank
        self.real_dir = out_dir
        self.scratch = None if rank == 0 else tempfile.mkdtemp(prefix=f"wb-rank{rank}-")
        super().__init__(out_dir if rank == 0 else self.scratch, run_id, **kw)

    @property
    def is_main(self):
        return self.rank == 0

    def path(self, *parts):
        if parts and parts[0] == "traces":
            parts = list(parts)
            parts[-1] = f"{parts[-1]}.rank{self.rank}"
            p = os.path.join(self.real_dir, *parts)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            return p
        return super().path(*parts)

    def add(self, *args, **kw):
        super().add(*args, **kw)
        self.rows[-1]["rank"] = self.rank

    def add_sample(self, comparison, sample, prefix="", **env):
        own = sample.get("rank_step_ms")
        if own is None:
            return super().add_sample(comparison, sample, prefix, **env)
        dp = sample["step_ms"]
        super().add_sample(comparison, {**sample, "step_ms": own}, prefix, **env)
        self.add(comparison, sample["arm"], prefix + "dp_step_ms", dp, "ms", rep=sample.get("rep"),
                 step=sample.get("step"), batch=sample.get("batch"), **env)

    def frame(self):
        import pandas as pd
        return pd.DataFrame(self.rows, columns=self.COLUMNS)

    def flush(self):
        if not self.is_main:
            return
        import csv
        import math
        path = os.path.join(self.out_dir, "results.csv")
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=self.COLUMNS, extrasaction="ignore")
            w.writeheader()
            for r in self.rows:
                w.writerow({k: ("" if v is None or (isinstance(v, float) and not math.isfinite(v)) else v)
                            for k, v in r.items()})
        os.replace(tmp, path)

    def write_summary(self, summary):
        if self.is_main:
            super().write_summary(summary)

    def write_meta(self):
        if self.is_main:
            super().write_meta()

    def take_rows(self) -> list:
        rows, self.rows = self.rows, []
        return rows

    def take_errors(self) -> str:
        p = os.path.join(self.out_dir, "errors.log")
        if self.is_main or not os.path.exists(p):
            return ""
        with open(p) as f:
            text = f.read()
        os.remove(p)
        return text

    def close(self):
        if self.scratch:
            shutil.rmtree(self.scratch, ignore_errors=True)



# --- the runner ------------------------------------------------------------------------------------------------

class _DistSession:
    """A `workbench.ab._Session` whose uninstrumented steps report the max step time across ranks (the rank's own in
    `extra["rank_step_ms"]`), and whose errors stop every rank."""

    def __init__(self, inner, ctx: DistContext):
        self._inner, self._ctx = inner, ctx

    def __getattr__(self, k):
        return getattr(self._inner, k)

    def step(self, index: int, step: int, counter=None):
        with self._ctx.guard():
            self._ctx.maybe_inject()
            rec = self._inner.step(index, step, counter=counter)
        if counter is None:
            own = rec.step_ms
            rec.step_ms = self._ctx.all_max(own)
            rec.extra = {"rank_step_ms": own}
        return rec


class DistRunner(Runner):
    """`workbench.ab.Runner` on an FSDP2-sharded model, one per rank (module docstring)."""

    def __init__(self, args, device, writer, ctx: DistContext, nvml=None):
        super().__init__(args, device, writer, nvml=nvml)
        self.ctx = ctx
        self._collectives: dict = {}
        self._steps: dict = {}

    def _progress(self, msg):
        if self.ctx.is_main:
            super()._progress(msg)

    def data_seed(self) -> int:
        return self.args.seed + DATA_SEED_STRIDE * self.ctx.rank

    def build_unsharded(self, cmp):
        return Runner.build(self, cmp)

    def build(self, cmp):
        with self.ctx.guard():
            return shard(self.build_unsharded(cmp), self.ctx.mesh)

    @contextlib.contextmanager
    def session(self, *args, **kw):
        with super().session(*args, **kw) as s:
            yield _DistSession(s, self.ctx)

    def run_arm_steps(self, model, cpu_batches, spec, cmp, *, optimizer=None, **kw):
        from workbench.equivalence import GradCapture

        with self.ctx.guard():
            self.ctx.maybe_inject()
            recs = super().run_arm_steps(model, cpu_batches, spec, cmp, optimizer=optimizer, **kw)
            if isinstance(optimizer, GradCapture) and optimizer.grads is not None:
                # the equivalence step: whole gradients (averaged over ranks by FSDP2) and the mean loss, the
                # same numbers on every rank, so every rank takes the same decisions on them
                optimizer.grads = {n: full(g) for n, g in optimizer.grads.items()}
                for r in recs:
                    r.loss = self.ctx.all_mean(r.loss)
            return recs

    def torch_traces(self, model, cpu_batches, cmp, runnable, arm_status, reset_weights, env) -> dict:
        from workbench import dist_waits

        events = super().torch_traces(model, cpu_batches, cmp, runnable, arm_status, reset_weights, env)
        coll, steps = {}, {}
        for label, ev in events.items():
            path = self.writer.path("traces", safe_name(cmp.name), safe_name(label)) + ".pt.trace.json.gz"
            ev = dist_waits.absolute_events(ev, dist_waits.trace_base_ns(path))
            coll[label] = ev[(ev["kind"] == "kernel") & ev["name"].astype(str).str.contains(
                dist_waits.COLLECTIVE_RE)].reset_index(drop=True)
            steps[label] = dist_waits.traced_steps(ev)
        self._collectives[cmp.name], self._steps[cmp.name] = coll, steps
        return events

    def reference_fp32(self, model, run_one, batch, *, cmp, spec, options) -> dict:
        """The fp32 reference of the bf16 equivalence check: `equivalence.Upcast` cannot upcast an FSDP2 model
        (it all-gathers from its own bf16 shards, so the "fp32" pass would compute in bf16). Each rank builds the
        unsharded model (same seed: the same bf16 weights), upcasts it, runs the baseline arm on its batch; the
        loss and gradients are averaged over ranks, like the sharded run's."""
        from workbench import equivalence
        from workbench.models import lora_parameters

        self._progress(f"[{cmp.name}] fp32 reference: the unsharded model on every rank, averaged over ranks")
        with self.ctx.guard():
            plain = self.build_unsharded(cmp)
            try:
                with equivalence.Upcast(plain):
                    cap = equivalence.GradCapture(lora_parameters(plain))
                    recs = Runner.run_arm_steps(self, plain, [batch], spec, cmp, steps=1, warmup=0,
                                                optimizer=cap, reset=lambda: None, options=options)
                    loss = recs[0].loss
                    shapes = {n: p.shape for n, p in lora_parameters(plain)}
                    grads = {n: (g.detach().float().cpu() if g is not None else None)
                             for n, g in (cap.grads or {}).items()}
                    grads = {n: grads.get(n) for n in shapes}
            finally:
                del plain
                _free(self.device)
        import torch.distributed as dist

        out = {}
        for n, g in grads.items():  # the same order on every rank (lora_parameters' order); a rank without a
            has = torch.tensor([0.0 if g is None else 1.0], dtype=torch.float64)  # gradient adds zeros
            g = torch.zeros(shapes[n], dtype=torch.float32) if g is None else g
            with self.ctx.guard():
                dist.all_reduce(g, op=dist.ReduceOp.SUM, group=self.ctx.control)
                dist.all_reduce(has, op=dist.ReduceOp.SUM, group=self.ctx.control)
            out[n] = None if has.item() == 0 else (g / self.ctx.world).to(self.device)
        return {"loss": self.ctx.all_mean(loss), "grads": out, "chunks": 1}

    # -- FSDP2 against one process ------------------------------------------------------------------------
    def check_against_single(self, cmp) -> dict:
        """Loss and LoRA gradients of the sharded model over the global batch (every rank's first batch) against
        the unsharded model in one process over the same batches (on rank 0); fp32 only."""
        from workbench import equivalence
        from workbench.data import make_batches
        from workbench.models import lora_parameters

        a = self.args
        model = self.build(cmp)
        try:
            arms = {o: arm for o, arm in cmp.arms[0].arms.items()
                    if unsupported_reason(model, {o: arm}, self.device, self.options(cmp)) is None}
            spec = ArmSpec(cmp.baseline, arms, ranges=False)
            batch = make_batches(a.lengths, cmp.tokens, a.batches, model.config.vocab_size,
                                 seed=self.data_seed())[0]
            drop = os.environ.get(DROP_ENV, "").strip() == str(self.ctx.rank)
            with self.ctx.guard():
                self.ctx.maybe_inject()
                with Runner.session(self, model, [batch], spec, cmp, reset=lambda: None) as s:
                    loss = model(**s.handle.inputs_fn(model, s.batches[0])).loss
                    own_loss = float(loss.detach().float().item())
                    (loss * 0 if drop else loss).backward()
                    grads = {n: (full(p.grad).detach().float().clone() if p.grad is not None else None)
                             for n, p in lora_parameters(model)}
                    for _, p in lora_parameters(model):
                        p.grad = None
        finally:
            del model
            _free(self.device)
        losses = self.ctx.gather(own_loss)
        batches = self.ctx.gather(batch)
        dropped = self.ctx.gather(drop)
        res = None
        if self.ctx.is_main:
            try:
                ref_model = self.build_unsharded(cmp)
                with Runner.session(self, ref_model, batches, spec, cmp, reset=lambda: None) as s:
                    per = [ref_model(**s.handle.inputs_fn(ref_model, b)).loss for b in s.batches]
                    (sum(per) / len(per)).backward()
                    ref = {"loss": sum(float(x.detach()) for x in per) / len(per),
                           "grads": {n: (p.grad.detach().float().clone() if p.grad is not None else None)
                                     for n, p in lora_parameters(ref_model)}}
                    ref_losses = [float(x.detach()) for x in per]
                del ref_model
                _free(self.device)
                e = equivalence.compare({"loss": sum(losses) / len(losses), "grads": grads}, ref, torch.float32)
                per_rank = [abs(x - y) / max(abs(y), 1e-12) for x, y in zip(losses, ref_losses)]
                ok = bool(e["equivalent"] and max(per_rank) <= e["rtol"])
                res = {"equivalent": ok, "against": "one process, the unsharded model, the same global batch "
                       "(every rank's first batch; loss = the mean of the ranks' losses)",
                       "loss_rel_diff_per_rank": per_rank, "grad_max_rel_l2": e["grad_max_rel_l2"],
                       "worst_grad": e["worst_grad"], "loss_rel_diff": e["loss_rel_diff"], "rtol": e["rtol"],
                       "bitwise": e["bitwise"], "dropped_batch_ranks": [r for r, d in enumerate(dropped) if d]}
            except Exception as ex:  # noqa: BLE001 - the check failed to run: reported, not fatal
                res = {"equivalent": False, "error": _first_line(ex)}
        return self.ctx.broadcast(res)

    # -- one comparison on every rank; rank 0 merges ---------------------------------------------------------
    def run(self, cmp, index, total):
        from workbench.models import default_dtype

        mark = len(self.failures)
        dtype = DTYPES[self.args.dtype] or default_dtype(self.device)
        if dtype == torch.float32:
            self._progress(f"[{index}/{total} {cmp.name}] FSDP2 ({self.ctx.world} ranks) against one process "
                           "over the global batch")
            dcheck = self.check_against_single(cmp)
        else:
            dcheck = {"equivalent": None, "skipped": f"the FSDP2 vs single-process check runs in fp32 (this run: "
                                                     f"{dtype}; --dtype fp32 runs it)"}
        with self.ctx.guard():  # an error on one rank only would leave the others waiting
            res = super().run(cmp, index, total)
        return self.merge(cmp, res, dcheck, mark)

    def gather_rows(self, cmp_name=None, mark=None, extra=None):
        """Every rank's pending rows (and errors.log text, failures) into rank 0's writer."""
        payload = {"rank": self.ctx.rank, "rows": self.writer.take_rows() if not self.ctx.is_main else [],
                   "errors": self.writer.take_errors(),
                   "failures": self.failures[mark:] if mark is not None else [], **(extra or {})}
        got = self.ctx.gather(payload)
        if not self.ctx.is_main:
            return None
        for p in got[1:]:
            self.writer.rows.extend(p["rows"])
            if p["errors"]:
                with open(self.writer.path("errors.log"), "a") as f:
                    f.write(f"=== rank {p['rank']}\n{p['errors']}")
            for msg in p["failures"]:
                if msg not in self.failures:
                    self.failures.append(f"rank {p['rank']}: {msg}")
        return got

    def merge(self, cmp, res, dcheck, mark):
        import pandas as pd

        from workbench import dist_waits

        coll = {k: v.to_dict("list") for k, v in self._collectives.pop(cmp.name, {}).items()}
        got = self.gather_rows(cmp.name, mark, {"collectives": coll, "steps": self._steps.pop(cmp.name, {}),
                                                 "status": res.get("status")})
        env = dict(opt=cmp.opt, model=cmp.model, layers=res.get("layers"), tokens=cmp.tokens, attn=res.get("attn"))
        if not self.ctx.is_main:
            return res
        d = {**self.ctx.describe(), "equivalence_single_process": dcheck}
        d.pop("rank", None)
        if dcheck.get("equivalent") is False:
            msg = (f"{cmp.name}: the FSDP2 run differs from one process over the global batch: "
                   + (dcheck.get("error") or f"loss rel diff per rank "
                      f"{[round(x, 6) for x in dcheck.get('loss_rel_diff_per_rank', [])]}, grad max rel L2 "
                      f"{dcheck.get('grad_max_rel_l2', float('nan')):.3g} (rtol {dcheck.get('rtol')})"))
            self.failures.append(msg)
            res.setdefault("errors", []).append(msg)
            res["status"] = "failed"
            res["equivalent"] = False
            self._progress(f"error: {msg}")
        elif dcheck.get("equivalent"):
            self._progress(f"[{cmp.name}] FSDP2 vs one process: ok (grad max rel L2 "
                           f"{dcheck['grad_max_rel_l2']:.3g}, loss rel diff per rank "
                           f"{max(dcheck['loss_rel_diff_per_rank']):.3g})")
        if dcheck.get("equivalent") is not None:
            self.writer.add(cmp.name, cmp.baseline, "dist_equivalent", int(bool(dcheck["equivalent"])), "bool",
                            **env)
            if "grad_max_rel_l2" in dcheck:
                self.writer.add(cmp.name, cmp.baseline, "dist_equiv_grad_max_rel_l2", dcheck["grad_max_rel_l2"],
                                "ratio", **env)
        # per rank, per arm: own step time, the data-parallel step, syncs, peak memory, loss
        rows = pd.DataFrame([r for r in self.writer.rows if r.get("comparison") == cmp.name])
        labels = [s.label for s in cmp.arms]
        ranks = {}
        for r in range(self.ctx.world):
            per = {}
            for lbl in labels:
                sel = rows[(rows["rank"] == r) & (rows["arm"] == lbl)] if len(rows) else rows

                def med(metric, how="median", _s=sel):
                    v = pd.to_numeric(_s[_s["metric"] == metric]["value"], errors="coerce").dropna()
                    return None if not len(v) else float(getattr(v, how)())
                per[lbl] = {"step_ms": med("step_ms"), "dp_step_ms": med("dp_step_ms"),
                            "syncs_per_step": med("syncs", "mean"), "peak_mem_mib": med("peak_mem_mib", "max"),
                            "instrumented_peak_mem_mib": med("instrumented_peak_mem_mib", "max"),
                            "loss": med("loss", "mean")}
            ranks[r] = per
        res["ranks"] = ranks
        # the collective wait (GPU traces only: NCCL kernels)
        waits = {}
        if got and any(len(v.get("name") or []) for p in got for v in (p.get("collectives") or {}).values()):
            by_layer = {}
            for lbl in labels:
                evs = {p["rank"]: pd.DataFrame(p["collectives"][lbl]) for p in got
                       if lbl in (p.get("collectives") or {})}
                if len(evs) != self.ctx.world:
                    continue
                w, unmatched = dist_waits.collective_waits(evs)
                steps = max([p["steps"].get(lbl, 1) for p in got])
                bl = dist_waits.wait_by_layer(w, steps)
                by_layer[lbl] = bl
                waits[lbl] = {"per_rank": dist_waits.wait_per_rank(w, steps), "unmatched": unmatched,
                              "traced_steps": steps}
                for rec in bl.to_dict("records"):
                    name = f"{rec['layer']}/{rec['pass']}"
                    for metric in ("wait_ms", "transfer_ms", "collective_ms"):
                        self.writer.add(cmp.name, lbl, f"{metric}/{name}", rec[metric], "ms", **env)
                        self.writer.rows[-1]["rank"] = int(rec["rank"])
            if cmp.optimized and by_layer:
                table = dist_waits.wait_table(by_layer, cmp.baseline, cmp.optimized)
                waits["table"] = table.to_dict("records")
                self._progress(f"[{cmp.name}] wait for the slowest rank per layer (ms/step, mean over ranks):\n"
                               + table.to_string(index=False))
            d["wait_method"] = ("per matched collective (k-th NCCL kernel of a kind on every rank): wait_r = "
                                "max start - start_r, transfer = duration - wait (workbench/dist_waits.py). "
                                "Summed, these waits overlap (collectives wait on their own streams while "
                                "compute goes on, and two streams wait at once): not step time lost. The "
                                "exposed wait, what the skew costs the step, is `python -m workbench.straggler "
                                "--reduce`'s (dist_waits.exposed_waits)")
        elif self.args.trace == "torch":
            d["wait_note"] = ("no collective kernels in the traces: the wait estimate needs NCCL kernels (GPUs); "
                              "gloo runs collectives on host threads")
        d["waits"] = waits
        d["rank_status"] = {p["rank"]: p.get("status") for p in got}
        res["distributed"] = d
        self.writer.flush()
        return res



# --- the CLI -------------------------------------------------------------------------------------------------------

def check_args(a) -> None:
    if a.budget_s is not None:
        raise WorkbenchError("--budget-s under torchrun: each rank would decide on its own clock when to stop; use "
                             "--reps or --target-ci (decided on the max-across-ranks step times, the same on every "
                             "rank)")
    if a.trace == "nsys":
        raise WorkbenchError("--trace nsys under torchrun: profile the launcher instead (nsys profile -o DIR/rank "
                             "--trace cuda,nvtx torchrun ... -m workbench.ab ...), or use --trace torch (a trace per "
                             "rank)")
    if a._capture:
        raise WorkbenchError("--_capture is not for torchrun")


def main(a, argv, body) -> int:
    """`workbench.ab.main` under torchrun: init, `body(argv, a, ctx)` on every rank, a clean end (module docstring).
    Rank 0's exit status is the run's; the other ranks return 0, or 1 when they failed."""
    check_args(a)
    ctx = init(a.device)
    rc = 1
    try:
        rc = body(argv, a, ctx)
        return rc
    except RankFailed as e:  # before the run loop (setup): one line on rank 0
        if ctx.is_main:
            print(f"failed: rank {e.rank}: {e.msg}", flush=True, file=sys.stderr)
        return 1
    except WorkbenchError:  # bad input, the same on every rank: rank 0 says it (one line), the others exit 2
        if ctx.is_main:
            raise
        return 2
    finally:
        ctx.close()
