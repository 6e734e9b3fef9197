"""In-situ cost of a packed-metadata build: the GPU idle time each `wb/Lxx/attn/meta` range causes in a trace.

Back-to-back builds on an idle device (`workbench.bench.packing.measure_s_ms`) time only the build itself. In a
training step a build's syncs also drain the GPU queue: the device runs dry while the host waits, and stays idle
until the host has launched new work after the build. That stall is what removing the build saves, so `s` for
`workbench.savings.packing_saving` is measured here from a torch.profiler Chrome trace of a real step.

Definition, per `wb/Lxx/attn/meta` host range [a, b] (cat "user_annotation"):

    next kernel   the kernel launched by the first launch runtime call (cudaLaunchKernel, cudaLaunchKernelExC,
                  cuLaunchKernel(Ex), ...) whose host start is >= b, matched to its kernel by the "correlation"
                  arg (or, where that is missing, by the "ac2g" flow events); its GPU start is k
    window        [a, k]: from the build's start until the GPU receives the first post-build kernel
    gpu_busy_ms   length of the union of all GPU kernels / memcpys / memsets (every stream) clipped to the window:
                  work queued before the build that drains inside it, and the build's own kernels and copies
    gpu_idle_ms   (k - a) - gpu_busy_ms: the time inside the window during which the GPU had nothing to run

s_stall_ms is the mean gpu_idle_ms over the builds (the saving of removing n builds is a sum, so the mean is its
estimator); the median is reported beside it. Builds with no later kernel in the trace get gpu_idle_ms None. A
trace without GPU events (a CPU run) gives rows with gpu_idle_ms None and s_stall_ms NaN, plus `why`.

The pass of each build is guessed from its nesting on the same host thread: inside `wb/Lxx/recompute` ->
"recompute", inside `wb/Lxx/fwd` -> "fwd"; failing those, inside `wb/bwd` -> "recompute", `wb/fwd` -> "fwd";
else None. Times in the trace are microseconds; everything returned is in ms.
"""
from __future__ import annotations

import bisect
import gzip
import json
import math
import os
import re
import statistics

META_RE = re.compile(r"^wb/(L\d+)/attn/meta$")
_PASS_RE = re.compile(r"^wb/(L\d+)/(fwd|recompute)$")
_LAUNCH_PREFIXES = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchCooperativeKernel", "cudaGraphLaunch",
                    "cuGraphLaunch")
_GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
_RUNTIME_CATS = ("cuda_runtime", "cuda_driver", "runtime")


def _load(path_or_events) -> list[dict]:
    if isinstance(path_or_events, (str, os.PathLike)):
        p = os.fspath(path_or_events)
        opener = gzip.open if p.endswith(".gz") else open
        with opener(p, "rt") as f:
            path_or_events = json.load(f)
    if isinstance(path_or_events, dict):
        return path_or_events.get("traceEvents", [])
    return list(path_or_events)


def _is_launch(name: str) -> bool:
    return name.startswith(_LAUNCH_PREFIXES)


def _merge(iv: list[tuple[float, float]]) -> tuple[list[float], list[float], list[float]]:
    """Union of intervals -> (starts, ends, prefix sums of lengths) for window queries."""
    iv = sorted(iv)
    starts, ends = [], []
    for s, e in iv:
        if starts and s <= ends[-1]:
            ends[-1] = max(ends[-1], e)
        else:
            starts.append(s)
            ends.append(e)
    pre = [0.0]
    for s, e in zip(starts, ends):
        pre.append(pre[-1] + (e - s))
    return starts, ends, pre


def _covered(merged, a: float, b: float) -> float:
    """Length of the union intersected with [a, b]."""
    starts, ends, pre = merged
    if b <= a or not starts:
        return 0.0
    i = bisect.bisect_right(ends, a)  # first interval ending after a
    j = bisect.bisect_left(starts, b)  # intervals [i, j) start before b
    if i >= j:
        return 0.0
    total = pre[j] - pre[i]
    total -= max(0.0, a - starts[i])  # clip the first at a
    total -= max(0.0, ends[j - 1] - b)  # clip the last at b
    return max(0.0, total)


def _nan_stats(xs: list[float]) -> tuple[float, float]:
    return (statistics.median(xs), statistics.fmean(xs)) if xs else (math.nan, math.nan)


def meta_stall_ms(trace_path_or_events) -> dict:
    """Per-build GPU stall of the `wb/Lxx/attn/meta` ranges of a torch.profiler Chrome trace (see the module doc).

    `trace_path_or_events`: a `.json` / `.json.gz` path, a loaded trace dict, or its list of `traceEvents`.
    Returns {"rows": [{layer, pass, start_ms, host_ms, window_ms, gpu_busy_ms, gpu_idle_ms, next_kernel}, ...]
    (in time order), "n", "n_measured", "s_stall_ms" (mean gpu_idle_ms), "median_gpu_idle_ms",
    "mean_gpu_idle_ms", "median_host_ms", "by_pass": {pass: {"n", "median_gpu_idle_ms", "mean_gpu_idle_ms"}},
    "gpu_events", "why" (None, or why s_stall_ms is NaN)}.
    """
    events = _load(trace_path_or_events)
    metas, passes, gpu, launches = [], [], [], []
    kernel_by_corr: dict = {}
    flow_s, flow_f = {}, {}
    for e in events:
        ph = e.get("ph")
        if ph in ("s", "f"):
            if e.get("cat") == "ac2g" or e.get("name") == "ac2g":
                (flow_s if ph == "s" else flow_f)[(e.get("pid"), e.get("tid"), float(e.get("ts", 0)))] = e.get("id")
            continue
        if ph != "X":
            continue
        cat, name = e.get("cat", ""), e.get("name", "")
        ts = float(e.get("ts", 0.0))
        end = ts + float(e.get("dur", 0.0))
        args = e.get("args") or {}
        if cat == "user_annotation":
            m = META_RE.match(name)
            if m:
                metas.append((ts, end, m.group(1), (e.get("pid"), e.get("tid"))))
            elif _PASS_RE.match(name) or name in ("wb/fwd", "wb/bwd"):
                passes.append((ts, end, name, (e.get("pid"), e.get("tid"))))
        elif cat in _GPU_CATS:
            gpu.append((ts, end))
            if cat == "kernel":
                corr = args.get("correlation")
                key = ("c", corr) if corr is not None else ("pos", e.get("pid"), e.get("tid"), ts)
                kernel_by_corr.setdefault(key, (ts, name))
        elif cat in _RUNTIME_CATS and _is_launch(name):
            launches.append((ts, args.get("correlation"), (e.get("pid"), e.get("tid"), ts)))
    # kernels without a correlation arg: reach them through the flow events (s at the launch, f at the kernel)
    flow_kernel = {}
    for k, v in list(kernel_by_corr.items()):
        if k[0] == "pos":
            fid = flow_f.get(k[1:])
            if fid is not None:
                flow_kernel[fid] = v
    launches.sort(key=lambda x: x[0])
    launch_ts = [x[0] for x in launches]
    merged = _merge(gpu)

    def next_kernel(t: float):
        i = bisect.bisect_left(launch_ts, t)
        while i < len(launches):
            _, corr, pos = launches[i]
            k = kernel_by_corr.get(("c", corr)) if corr is not None else None
            if k is None:
                fid = flow_s.get(pos)
                if fid is not None:
                    k = kernel_by_corr.get(("c", fid)) or flow_kernel.get(fid)
            if k is not None:
                return k
            i += 1
        return None

    def pass_of(a: float, b: float, tid) -> str | None:
        best, best_rank = None, 9
        for s, e, name, t in passes:
            if t != tid or s > a or e < b:
                continue
            rank = 0 if "/L" in name else 1  # a layer range beats wb/fwd / wb/bwd
            if rank < best_rank:
                best, best_rank = name, rank
        if best is None:
            return None
        if best == "wb/bwd" or best.endswith("/recompute"):
            return "recompute"
        return "fwd"

    rows = []
    for a, b, layer, tid in sorted(metas):
        row = {"layer": layer, "pass": pass_of(a, b, tid), "start_ms": a / 1e3, "host_ms": (b - a) / 1e3,
               "window_ms": None, "gpu_busy_ms": None, "gpu_idle_ms": None, "next_kernel": None}
        k = next_kernel(b) if gpu else None
        if k is not None and k[0] >= a:
            busy = _covered(merged, a, k[0])
            row.update(window_ms=(k[0] - a) / 1e3, gpu_busy_ms=busy / 1e3,
                       gpu_idle_ms=max(0.0, (k[0] - a) - busy) / 1e3, next_kernel=k[1])
        rows.append(row)
    idle = [r["gpu_idle_ms"] for r in rows if r["gpu_idle_ms"] is not None]
    med, mean = _nan_stats(idle)
    by_pass = {}
    for p in sorted({str(r["pass"]) for r in rows}):
        xs = [r["gpu_idle_ms"] for r in rows if str(r["pass"]) == p and r["gpu_idle_ms"] is not None]
        pm, pmean = _nan_stats(xs)
        by_pass[p] = {"n": len(xs), "median_gpu_idle_ms": pm, "mean_gpu_idle_ms": pmean}
    why = None
    if not rows:
        why = "no wb/Lxx/attn/meta ranges in the trace"
    elif not gpu:
        why = "no GPU kernels in the trace (CPU run?)"
    elif not idle:
        why = "no kernel launched after any meta range"
    return {"rows": rows, "n": len(rows), "n_measured": len(idle), "s_stall_ms": mean, "median_gpu_idle_ms": med,
            "mean_gpu_idle_ms": mean, "median_host_ms": _nan_stats([r["host_ms"] for r in rows])[0],
            "by_pass": by_pass, "gpu_events": len(gpu), "why": why}
