"""This rank's place in a torchrun run (`DistContext`: process group, control group, store, failure handling and
the watcher), its set-up (`init`) and FSDP2 helpers (`shard`, `full`)."""
from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import sys
import threading
import time
import traceback

import torch

from workbench.errors import WorkbenchError


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
    the per-arm handlers of `workbench.ab` / `workbench.measure.engine` do not swallow it: ranks must not diverge."""

    def __init__(self, rank: int, msg: str, tb: str = "", own: bool = False):
        super().__init__(f"rank {rank}: {msg}")
        self.rank, self.msg, self.tb, self.own = rank, msg, tb, own


def launched() -> bool:
    """Under torchrun (or any launcher that sets WORLD_SIZE, RANK and LOCAL_RANK)."""
    return all(os.environ.get(k, "").strip() for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK"))


def _first_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}"


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
    from workbench.measure.results import atomic_write_json

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
