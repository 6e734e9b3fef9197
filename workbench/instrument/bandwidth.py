"""Pinned host<->device copy bandwidth of this machine: the second source of the offload model's reload time c, and,
with several ranks copying at once, the contention for the host's links that data-parallel offload meets.

    torchrun --standalone --nproc-per-node 4 -m workbench.instrument.bandwidth --ranks 1,2,4 --json OUT.json

One rank (`pinned_copy_gb_per_s`): the reload c of a layer is read from the trace (its host-to-device copy);
`bytes / pinned_h2d_gb_per_s` must agree with it (`workbench.savings.common.check_inputs`). Measured once per run, in
a separate pass, with CUDA events around `reps` copies of `nbytes` from page-locked memory (the offload arms' host
buffers are page-locked).

N ranks at once (`concurrent_copy_gb_per_s`, the entry above): for each n in --ranks, ranks 0..n-1 copy at the same
time (every rank starts after a barrier, then runs `reps` back-to-back copies of `nbytes` from its own pinned buffer
to its own GPU, cuda:LOCAL_RANK; the other ranks wait), host-to-device, then device-to-host. Per rank: the whole
loop's bytes / its time (CUDA events around the loop: the copies of different ranks overlap for all but the barrier's
skew, small against the loop) and the median single copy. B(n) = the mean over the n ranks of the loop figure: the
per-rank bandwidth the offload model's contention term reads (`workbench.savings.straggler.offload_contention`).
Pinned buffers are allocated by each rank where the OS puts them (no NUMA binding; a launcher with one does better).
On a CPU it runs host-to-host copies timed with the wall clock: the orchestration, not a result.
"""
from __future__ import annotations

import os
import statistics
import sys
import time

import torch

DIRECTIONS = ("h2d", "d2h")


def pinned_copy_gb_per_s(device, nbytes: int = 256 << 20, reps: int = 5) -> dict:
    """{"h2d_gb_per_s", "d2h_gb_per_s", "nbytes", "reps"} (medians over `reps` copies, 1 GB = 1e9 bytes);
    {} on a device without CUDA."""
    device = torch.device(device)
    if device.type != "cuda":
        return {}
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(nbytes, dtype=torch.uint8, device=device)
    out = {"nbytes": int(nbytes), "reps": int(reps)}
    for name, dst, src in (("h2d_gb_per_s", dev, host), ("d2h_gb_per_s", host, dev)):
        dst.copy_(src, non_blocking=True)  # warm
        torch.cuda.synchronize(device)
        ms = []
        for _ in range(reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            dst.copy_(src, non_blocking=True)
            b.record()
            b.synchronize()
            ms.append(a.elapsed_time(b))
        out[name] = nbytes / (statistics.median(ms) / 1e3) / 1e9
    del host, dev
    torch.cuda.empty_cache()
    return out


def _copy_loop(dst, src, reps: int, cuda: bool) -> tuple[float, list[float]]:
    """(the whole loop's ms, each copy's ms) of `reps` back-to-back copies src -> dst."""
    if not cuda:
        ms = []
        t0 = time.perf_counter()
        for _ in range(reps):
            t = time.perf_counter()
            dst.copy_(src)
            ms.append((time.perf_counter() - t) * 1e3)
        return (time.perf_counter() - t0) * 1e3, ms
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(reps + 1)]
    ev[0].record()
    for i in range(reps):
        dst.copy_(src, non_blocking=True)
        ev[i + 1].record()
    ev[-1].synchronize()
    return ev[0].elapsed_time(ev[-1]), [ev[i].elapsed_time(ev[i + 1]) for i in range(reps)]


def summarize(per_rank: list[dict], nbytes: int, reps: int) -> dict:
    """Per-rank GB/s of n ranks copying at once, from each copying rank's {"loop_ms", "copy_ms": [...]}: the loop
    figure `gb_per_s` = nbytes * reps / loop time (1 GB = 1e9 bytes), `median_copy_gb_per_s`; over ranks the mean
    (B(n)), min and the aggregate (their sum)."""
    gbs = [nbytes * reps / (r["loop_ms"] / 1e3) / 1e9 for r in per_rank]
    med = [nbytes / (statistics.median(r["copy_ms"]) / 1e3) / 1e9 for r in per_rank]
    return {"ranks": len(per_rank), "per_rank_gb_per_s": gbs, "per_rank_median_copy_gb_per_s": med,
            "mean_gb_per_s": sum(gbs) / len(gbs), "min_gb_per_s": min(gbs), "aggregate_gb_per_s": sum(gbs)}


def concurrent_copy_gb_per_s(device, *, rank: int = 0, world: int = 1, ranks=(1,), nbytes: int = 256 << 20,
                             reps: int = 20, barrier=lambda: None, gather=lambda x: [x]) -> dict | None:
    """For each n in `ranks` (at most `world`): ranks 0..n-1 copy at once (module docstring), host-to-device, then
    device-to-host. `barrier()` and `gather(obj)` (every rank's obj in rank order on rank 0, None elsewhere) are the
    process group's. Returns, on rank 0, {"directions": {dir: {str(n): summarize(...)}}, "nbytes", "reps", ...};
    None on the other ranks."""
    device = torch.device(device)
    cuda = device.type == "cuda"
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=cuda)
    dev = torch.empty(nbytes, dtype=torch.uint8, device=device)
    out = {d: {} for d in DIRECTIONS}
    for n in ranks:
        if n > world:
            continue
        for d in DIRECTIONS:
            dst, src = (dev, host) if d == "h2d" else (host, dev)
            mine = None
            barrier()
            if rank < n:
                _copy_loop(dst, src, 1, cuda)  # warm
            barrier()
            if rank < n:
                loop_ms, copy_ms = _copy_loop(dst, src, reps, cuda)
                mine = {"rank": rank, "loop_ms": loop_ms, "copy_ms": copy_ms}
            got = gather(mine)
            if got is not None:
                out[d][str(n)] = summarize([g for g in got if g is not None], nbytes, reps)
    del host, dev
    if cuda:
        torch.cuda.empty_cache()
    if rank != 0:
        return None
    return {"directions": out, "nbytes": int(nbytes), "reps": int(reps), "world": int(world),
            "timing": "CUDA events around each rank's copy loop" if cuda else "wall clock, host-to-host: not a result",
            "unit": "GB/s per rank (1e9 bytes / s)"}


def per_rank_gb_per_s(measured: dict, n: int, direction: str = "h2d") -> float:
    """B(n): the mean per-rank bandwidth with n ranks copying at once, from `concurrent_copy_gb_per_s`'s result."""
    try:
        return float(measured["directions"][direction][str(n)]["mean_gb_per_s"])
    except KeyError:
        raise KeyError(f"no {direction} bandwidth measured at {n} concurrent ranks") from None


def main(argv=None) -> int:
    """The torchrun entry (module docstring): rank 0 writes the JSON and prints it as the last stdout line."""
    import torch.distributed as dist

    from workbench.cli import emit_json, parser
    from workbench.errors import WorkbenchError

    p = parser("workbench.instrument.bandwidth", __doc__)
    p.add_argument("--ranks", default="1,2,4", help="concurrent rank counts, each at most the world size")
    p.add_argument("--mib", type=int, default=256, help="MiB per copy")
    p.add_argument("--reps", type=int, default=20, help="back-to-back copies per rank per measurement")
    p.add_argument("--json", default=None, help="write the result here (rank 0)")
    a = p.parse_args(argv)
    try:
        ranks = [int(x) for x in a.ranks.split(",") if x.strip()]
    except ValueError:
        raise WorkbenchError(f"--ranks {a.ranks!r}: comma-separated integers (1,2,4)") from None
    if not ranks or min(ranks) < 1 or a.mib < 1 or a.reps < 1:
        raise WorkbenchError("--ranks, --mib and --reps must be positive")
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if max(ranks) > world:
        raise WorkbenchError(f"--ranks {a.ranks}: more than the {world} process(es) launched (torchrun "
                             f"--nproc-per-node {max(ranks)})")
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    group = world > 1
    if group:
        dist.init_process_group("gloo")

    def gather(obj):
        if not group:
            return [obj]
        box = [None] * world if rank == 0 else None
        dist.gather_object(obj, box, dst=0)
        return box

    try:
        res = concurrent_copy_gb_per_s(device, rank=rank, world=world, ranks=ranks, nbytes=a.mib << 20, reps=a.reps,
                                       barrier=dist.barrier if group else (lambda: None), gather=gather)
    finally:
        if group:
            dist.destroy_process_group()
    if rank == 0:
        res.update(device=torch.cuda.get_device_name(device) if cuda else "cpu",
                   command=f"torchrun --nproc-per-node {world} -m workbench.instrument.bandwidth "
                           + " ".join(argv if argv is not None else sys.argv[1:]))
        if a.json:  # instrument/ sits below measure/: its own atomic write
            import json
            os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
            with open(a.json + ".tmp", "w") as f:
                json.dump(res, f, indent=2)
            os.replace(a.json + ".tmp", a.json)
        for n, s in res["directions"]["h2d"].items():
            print(f"h2d, {n} rank(s) at once: {s['mean_gb_per_s']:.1f} GB/s per rank (min {s['min_gb_per_s']:.1f}, "
                  f"aggregate {s['aggregate_gb_per_s']:.1f})", file=sys.stderr)
        emit_json(res)
    return 0


if __name__ == "__main__":
    from workbench.cli import run_main
    raise SystemExit(run_main(main))
