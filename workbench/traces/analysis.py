"""Analyses of an events DataFrame (see `workbench.traces.events`): each returns a DataFrame or a small dict.

    # L = decoder layers

- `layer_ranges`: per-layer range durations (layer, pass, part) -> count, total_ms, mean_ms, median_ms
- `copy_compute_overlap`: per layer, how much of the copy time is hidden under compute on another stream
- `sync_counts`: host-blocking syncs by kind (the third sync witness), per step when steps are marked
- `diff_arms`: counts and durations per range / kernel name, arm A vs arm B
(The savings models' in-situ inputs are in `workbench.savings.verdicts`; the step decomposition in `decompose`.)
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from workbench.traces.decompose import _union

HOST_BLOCKING_SYNCS = ("event_sync", "stream_sync", "context_sync")
"""Sync kinds that block the host (stream_wait_event only orders two streams)."""


def _ms(df: pd.DataFrame) -> pd.Series:
    return (df["end_ns"] - df["start_ns"]) / 1e6


def ranges(events: pd.DataFrame, track: str = "auto") -> pd.DataFrame:
    """Range events on the host (`track="host"`), their GPU projections (`"gpu"`: torch's gpu_user_annotation), or
    `"auto"`: GPU projections where the trace has them, else host ranges."""
    r = events[events["kind"] == "range"]
    gpu = r[r["stream"].notna()]
    if track == "gpu" or (track == "auto" and len(gpu)):
        return gpu
    return r[r["stream"].isna()]


def steps_in(events: pd.DataFrame) -> int:
    """Number of training steps in the trace: `wb/step` ranges (else ProfilerStep#N ranges, else 1)."""
    r = ranges(events, "host")
    n = int((r["name"] == "wb/step").sum())
    if n == 0:
        n = int(r["name"].str.startswith("ProfilerStep#").sum())
    return max(n, 1)


def first_steps(events: pd.DataFrame, n: int = 1) -> pd.DataFrame:
    """The events of the first `n` training steps of a trace: those starting between the first `wb/step` range's
    start and the start of step n+1 (the harness synchronizes after every step, so a step's kernels and copies end
    before the next begins); with n or fewer steps in the trace, all of it. For committing small event tables."""
    if n <= 0:
        raise ValueError(f"n must be positive, got {n}")
    r = ranges(events, "host")
    starts = sorted(r.loc[r["name"] == "wb/step", "start_ns"].tolist())
    if len(starts) <= n:
        return events
    keep = (events["start_ns"] >= starts[0]) & (events["start_ns"] < starts[n])
    return events[keep].reset_index(drop=True)


def layer_ranges(events: pd.DataFrame, track: str = "auto") -> pd.DataFrame:
    """Durations of `wb/Lxx/...` ranges grouped by layer, pass and part (part "" = the layer's own range)."""
    r = ranges(events, track)
    r = r[r["layer"].notna() & r["name"].str.startswith("wb/L")].copy()
    cols = ["layer", "pass", "part", "count", "total_ms", "mean_ms", "median_ms"]
    if r.empty:
        return pd.DataFrame(columns=cols)
    r["dur_ms"] = _ms(r)
    r["part"] = r["part"].fillna("")
    r["pass"] = r["pass"].fillna("")
    g = r.groupby(["layer", "pass", "part"], sort=True)["dur_ms"]
    out = g.agg(count="count", total_ms="sum", mean_ms="mean", median_ms="median").reset_index()
    return out[cols]


def _intersection_ns(a: np.ndarray, b: np.ndarray) -> int:
    a, b = _union(a), _union(b)
    i = j = 0
    tot = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i, 0], b[j, 0]), min(a[i, 1], b[j, 1])
        if hi > lo:
            tot += hi - lo
        if a[i, 1] < b[j, 1]:
            i += 1
        else:
            j += 1
    return int(tot)


def copy_compute_overlap(events: pd.DataFrame, copy_kinds=("HtoD", "DtoH")) -> pd.DataFrame:
    """Per layer: copy time (memcpy of `copy_kinds` attributed to the layer), the kernel time on other streams
    during those copies, and the hidden fraction `overlap_frac = overlap_ms / copy_ms` (1 = fully hidden)."""
    cols = ["layer", "copy_ms", "copy_bytes", "overlap_ms", "overlap_frac"]
    mc = events[(events["kind"] == "memcpy") & events["name"].isin(copy_kinds)]
    kernels = events.loc[events["kind"] == "kernel", ["stream", "start_ns", "end_ns"]]  # not every column's copy
    if mc.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    for layer, g in mc.groupby(mc["layer"].fillna("model")):
        copy_iv = g[["start_ns", "end_ns"]].to_numpy()
        other = kernels[~kernels["stream"].isin(g["stream"].unique())]
        ov = _intersection_ns(copy_iv, other[["start_ns", "end_ns"]].to_numpy()) / 1e6
        u = _union(copy_iv)
        copy_ms = float((u[:, 1] - u[:, 0]).sum()) / 1e6
        rows.append(dict(layer=layer, copy_ms=copy_ms, copy_bytes=float(g["bytes"].sum()), overlap_ms=ov,
                         overlap_frac=ov / copy_ms if copy_ms > 0 else float("nan")))
    return pd.DataFrame(rows, columns=cols)


def sync_counts(events: pd.DataFrame, per_step: bool = True) -> pd.DataFrame:
    """Host-visible syncs by kind, by layer and pass: `sync` events (CUPTI synchronization records / torch's
    cuda_sync) plus DtoH copies (each blocking readback is one). `per_step` divides counts by `steps_in`."""
    cols = ["kind", "name", "layer", "pass", "count", "total_ms"]
    s = events[(events["kind"] == "sync") | ((events["kind"] == "memcpy") & (events["name"] == "DtoH"))].copy()
    if s.empty:
        return pd.DataFrame(columns=cols)
    s["dur_ms"] = _ms(s)
    s["layer"] = s["layer"].fillna("model")
    s["pass"] = s["pass"].fillna("")
    out = s.groupby(["kind", "name", "layer", "pass"])["dur_ms"].agg(count="count", total_ms="sum").reset_index()
    if per_step:
        n = steps_in(events)
        out["count"] = out["count"] / n
        out["total_ms"] = out["total_ms"] / n
    return out[cols]


HARNESS_READBACKS_PER_STEP = 1
"""Device-to-host reads the harness makes per step outside the counted region: the loss, read for logging."""

READBACK_MAX_BYTES = 1 << 20
"""DtoH copies up to this size count as value readbacks; larger ones are bulk transfers (offloaded activations,
which are asynchronous copies to pinned memory, not syncs)."""


def host_syncs_per_step(events: pd.DataFrame) -> float:
    """Host-blocking sync events per step (CUPTI synchronization records / torch cuda_sync events)."""
    s = events[(events["kind"] == "sync") & ~events["name"].isin(["stream_wait_event"])]
    # torch's cuda_sync names ("Stream Sync", "Event Sync", "Context Sync"); nsys's are mapped in SYNC_TYPES
    s = s[~s["name"].str.contains("Wait", case=False)]
    return len(s) / steps_in(events)


def readbacks_per_step(events: pd.DataFrame) -> float:
    """Small device-to-host copies per step: one per value read back (`.item()`, `.tolist()`, `nonzero`'s size).

    The trace's sync witness. On the H100 (nsys 2025.3, torch 2.11) the `.item()`-style syncs left no CUPTI
    synchronization record, but each left exactly one DtoH memcpy: rebuild / cached / precomputed gave 25 / 4 / 1
    per step against the counter's 24 / 3 / 0 plus the harness's loss read. Subtract HARNESS_READBACKS_PER_STEP
    to compare with the counter."""
    m = events[(events["kind"] == "memcpy") & events["name"].astype(str).str.contains("DtoH")]
    if "bytes" in m:
        m = m[m["bytes"].fillna(0) <= READBACK_MAX_BYTES]
    return len(m) / steps_in(events)


def diff_arms(a: pd.DataFrame, b: pd.DataFrame, kinds=("range", "kernel", "memcpy", "sync")) -> pd.DataFrame:
    """Per (kind, name): count and total ms per step in arm A and B, and B - A. Sorted by |delta_ms|."""
    def agg(ev):  # totals over the trace; divided by its steps below
        ev = ev[ev["kind"].isin(kinds)].copy()
        if ev.empty:
            return pd.DataFrame(columns=["kind", "name", "count", "total_ms"])
        ev["dur_ms"] = _ms(ev)
        g = ev.groupby(["kind", "name"])["dur_ms"].agg(count="count", total_ms="sum").reset_index()
        return g
    n_a, n_b = steps_in(a), steps_in(b)
    ga, gb = agg(a), agg(b)
    ga[["count", "total_ms"]] = ga[["count", "total_ms"]] / n_a
    gb[["count", "total_ms"]] = gb[["count", "total_ms"]] / n_b
    m = ga.merge(gb, on=["kind", "name"], how="outer", suffixes=("_a", "_b")).fillna(
        {"count_a": 0, "count_b": 0, "total_ms_a": 0.0, "total_ms_b": 0.0})
    m["delta_count"] = m["count_b"] - m["count_a"]
    m["delta_ms"] = m["total_ms_b"] - m["total_ms_a"]
    m.attrs["steps"] = {"a": n_a, "b": n_b}
    return m.reindex(m["delta_ms"].abs().sort_values(ascending=False).index).reset_index(drop=True)


def launches_per_step(events: pd.DataFrame) -> float:
    """Kernel launches per step (GPU kernels in the trace / steps)."""
    return float((events["kind"] == "kernel").sum()) / steps_in(events)
