"""Where a training step's time goes, from a trace (torch.profiler or Nsight Systems: the same events frame).

    # W = one step's window; busy = some kernel runs; idle = no kernel runs

Per step, the window W starts at the `wb/step` host range and ends when the last GPU work launched inside that
range ends (the host runs ahead of the GPU, so the range alone would cut the step's tail). Every instant of W is
charged to exactly one component:

    busy (a kernel runs on some stream), charged to the highest class running, in CLASS_ORDER:
        gemm              GEMM kernels (cuBLAS / CUTLASS / nvjet / xmma / our Triton grouped GEMM)
        attention         attention kernels (flash / fmha / memory-efficient / sdpa), softmax inside `wb/Lxx/attn`
        glue              packed-metadata builds (`wb/Lxx/attn/meta`) and MoE routing / permute kernels
                          (sort, histogram, bincount, top-k, nonzero, scan, index, gather / scatter)
        copy              device copies done by kernels (cat, copy_, dtype casts), DtoD memcpy and memsets
        norm_elementwise  norms, activations, reductions, the loss, other pointwise kernels
        optimizer         every kernel inside `wb/opt`
        other             the rest
    idle (no kernel runs):
        exposed_copy      a host<->device copy runs and no kernel does (the copy is not hidden)
        sync_stall        nothing runs, and the gap ends a blocking readback: a host-blocking call (a sync record,
                          `cuda*Synchronize`, or the runtime call of a <= 1 MiB DtoH readback) returns inside it.
                          The GPU drained while the host waited, and idles until the host launches again.
        launch_gap        nothing runs otherwise: the GPU waits for the host to launch (launch-bound)

    step_ms = sum(busy classes) + exposed_copy + sync_stall + launch_gap        (exact: the components partition W)

Kernel classes come from `workbench.traces.classify`: the kernel's name, normalised the same way for both tools
(`workbench.traces.names`), the range it was launched in (layer / pass / part, through the correlation id) and
`wb/opt`. Per layer and pass:
busy time goes to the layer / pass of the kernel charged, a gap to that of the GPU work that ends it (a launch gap
waits for that work) or, for a sync stall, of the readback that caused it.

`compare(baseline, arm)` gives each component's mean per step in both arms and the saving (baseline - arm);
the step-time difference is the sum of the savings, and against a measured (uninstrumented) difference the
residual is stated.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from workbench.traces.classify import COPY_RECORDS, kernel_class  # noqa: F401  (kernel_class: re-exported)
from workbench.traces.names import kernel_name

BUSY = ("gemm", "attention", "glue", "copy", "norm_elementwise", "optimizer", "other")
IDLE = ("exposed_copy", "sync_stall", "launch_gap")
COMPONENTS = BUSY + IDLE
CLASS_ORDER = BUSY
"""Priority when kernels of two classes overlap in time (on different streams): the first one running is charged."""

READBACK_MAX_BYTES = 1 << 20
"""DtoH copies up to this size are value readbacks (`.item()`, `.tolist()`, nonzero's size); larger ones bulk."""

_BLOCKING_RUNTIME = re.compile(r"Synchronize", re.I)


# --- interval helpers (int64 ns, half-open) --------------------------------------------------------------------

def _union(iv: np.ndarray) -> np.ndarray:
    if len(iv) == 0:
        return np.zeros((0, 2), dtype=np.int64)
    iv = iv[np.argsort(iv[:, 0], kind="stable")]
    starts, ends = iv[:, 0], np.maximum.accumulate(iv[:, 1])
    new = np.ones(len(iv), dtype=bool)
    new[1:] = starts[1:] > ends[:-1]
    idx = np.flatnonzero(new)
    out_s = starts[idx]
    out_e = np.append(ends[idx[1:] - 1], ends[-1])
    return np.stack([out_s, out_e], axis=1)


def union_with_prefix(iv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The merged union of intervals (n, 2) and its prefix lengths (n + 1), for `covered_ns`."""
    u = _union(np.asarray(iv, dtype=np.int64).reshape(-1, 2))
    return u, np.concatenate([[0], np.cumsum(u[:, 1] - u[:, 0])])


def covered_ns(union: np.ndarray, prefix: np.ndarray, lo: int, hi: int) -> int:
    """Length of a merged union inside [lo, hi], with `prefix` = cumulative lengths of its intervals."""
    if hi <= lo or not len(union):
        return 0
    i = int(np.searchsorted(union[:, 1], lo, "right"))
    j = int(np.searchsorted(union[:, 0], hi, "left"))
    if j <= i:
        return 0
    tot = int(prefix[j] - prefix[i])
    tot -= max(0, lo - int(union[i, 0]))
    tot -= max(0, int(union[j - 1, 1]) - hi)
    return max(tot, 0)


def _length(u: np.ndarray) -> int:
    return int((u[:, 1] - u[:, 0]).sum()) if len(u) else 0


def _subtract(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Union `a` minus union `b` (both merged and sorted)."""
    if len(a) == 0 or len(b) == 0:
        return a
    out = []
    j = 0
    for s, e in a:
        cur = s
        while j < len(b) and b[j, 1] <= cur:
            j += 1
        k = j
        while k < len(b) and b[k, 0] < e:
            if b[k, 0] > cur:
                out.append((cur, b[k, 0]))
            cur = max(cur, b[k, 1])
            if cur >= e:
                break
            k += 1
        if cur < e:
            out.append((cur, e))
    return np.array(out, dtype=np.int64).reshape(-1, 2)


def _clip(iv: np.ndarray, lo: int, hi: int) -> np.ndarray:
    if len(iv) == 0:
        return iv.reshape(0, 2)
    c = np.stack([np.maximum(iv[:, 0], lo), np.minimum(iv[:, 1], hi)], axis=1)
    return c[c[:, 1] > c[:, 0]]


# --- steps ---------------------------------------------------------------------------------------------------

def step_windows(events: pd.DataFrame) -> pd.DataFrame:
    """One row per `wb/step` host range: step (0-based), host_start_ns, host_end_ns, start_ns, end_ns.

    end_ns = the later of the range's end and the end of the last GPU event launched by a runtime call that
    started inside the range (matched by correlation id)."""
    r = events[(events["kind"] == "range") & events["stream"].isna() & (events["name"] == "wb/step")]
    r = r.sort_values("start_ns")
    if r.empty:
        return pd.DataFrame(columns=["step", "host_start_ns", "host_end_ns", "start_ns", "end_ns"])
    rt = events[events["kind"] == "runtime"]
    gpu = events[events["kind"].isin(("kernel", "memcpy")) & events["correlation"].notna()]
    end_by_corr = gpu.groupby("correlation")["end_ns"].max()
    rt = rt[rt["correlation"].isin(end_by_corr.index)]
    rt_start = rt["start_ns"].to_numpy()
    rt_gpu_end = end_by_corr.reindex(rt["correlation"]).to_numpy()
    order = np.argsort(rt_start, kind="stable")
    rt_start, rt_gpu_end = rt_start[order], rt_gpu_end[order]
    rows = []
    for i, (s, e) in enumerate(zip(r["start_ns"].to_numpy(), r["end_ns"].to_numpy())):
        lo, hi = np.searchsorted(rt_start, s, "left"), np.searchsorted(rt_start, e, "right")
        gpu_end = int(np.nanmax(rt_gpu_end[lo:hi])) if hi > lo else int(e)
        rows.append(dict(step=i, host_start_ns=int(s), host_end_ns=int(e), start_ns=int(s), end_ns=max(int(e), gpu_end)))
    return pd.DataFrame(rows)


def _gpu(events: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(kernels incl. DtoD copies, host<->device copies) with a `cls` column on the kernels."""
    k = events[(events["kind"] == "kernel") | ((events["kind"] == "memcpy") & events["name"].isin(COPY_RECORDS))]
    k = k.copy()
    k["name"] = k["name"].map(kernel_name)  # events saved before the normaliser hold a tool's own spelling
    k["cls"] = [kernel_class(n, p, q) for n, p, q in zip(k["name"], k["part"], k["pass"])]
    c = events[(events["kind"] == "memcpy") & ~events["name"].isin(COPY_RECORDS)]
    return k, c


def _blocking_ends(events: pd.DataFrame) -> np.ndarray:
    """Times at which a host-blocking call returned: sync records (not stream waits), `*Synchronize` runtime calls,
    and the runtime calls of small DtoH readbacks."""
    ends = []
    s = events[(events["kind"] == "sync") & ~events["name"].astype(str).str.contains("wait", case=False)]
    ends.append(s["end_ns"].to_numpy())
    rt = events[events["kind"] == "runtime"]
    ends.append(rt.loc[rt["name"].astype(str).str.contains(_BLOCKING_RUNTIME), "end_ns"].to_numpy())
    rb = events[(events["kind"] == "memcpy") & (events["name"] == "DtoH") & (events["bytes"].fillna(0) <= READBACK_MAX_BYTES)]
    if len(rb) and rt["correlation"].notna().any():
        ends.append(rt.loc[rt["correlation"].isin(rb["correlation"].dropna()), "end_ns"].to_numpy())
    return np.sort(np.concatenate([np.asarray(e, dtype=np.int64) for e in ends]))


def breakdown(events: pd.DataFrame, by_layer: bool = False) -> pd.DataFrame:
    """The components of every step: columns step, component, group ("busy" / "idle"), ms (and layer, pass with
    `by_layer`; "" where no layer / pass applies). Per step the rows sum to the window (`step_ms` rows give it)."""
    win = step_windows(events)
    kern, copies = _gpu(events)
    k_iv = kern[["start_ns", "end_ns"]].to_numpy(dtype=np.int64)
    k_cls = kern["cls"].to_numpy()
    k_lp = list(zip(kern["layer"].fillna(""), kern["pass"].fillna("")))
    c_iv = copies[["start_ns", "end_ns"]].to_numpy(dtype=np.int64)
    c_lp = list(zip(copies["layer"].fillna(""), copies["pass"].fillna("")))
    blocking = _blocking_ends(events)
    rows = []
    for w in win.itertuples():
        lo, hi = w.start_ns, w.end_ns
        in_k = np.flatnonzero((k_iv[:, 1] > lo) & (k_iv[:, 0] < hi)) if len(k_iv) else np.array([], int)
        in_c = np.flatnonzero((c_iv[:, 1] > lo) & (c_iv[:, 0] < hi)) if len(c_iv) else np.array([], int)
        covered = np.zeros((0, 2), dtype=np.int64)
        acc: dict = {}

        def add(comp, layer, pass_, ns):
            if ns:
                key = (comp, layer, pass_) if by_layer else (comp, "", "")
                acc[key] = acc.get(key, 0) + ns
        for cls in CLASS_ORDER:
            idx = in_k[k_cls[in_k] == cls]
            if not len(idx):
                continue
            if by_layer:
                groups: dict = {}
                for i in idx:
                    groups.setdefault(k_lp[i], []).append(i)
                for lp, ii in groups.items():
                    add(cls, *lp, _length(_subtract(_union(_clip(k_iv[ii], lo, hi)), covered)))
            else:
                add(cls, "", "", _length(_subtract(_union(_clip(k_iv[idx], lo, hi)), covered)))
            covered = _union(np.concatenate([covered, _clip(k_iv[idx], lo, hi)]))
        # exposed copies: copy time under no kernel
        if len(in_c):
            if by_layer:
                groups = {}
                for i in in_c:
                    groups.setdefault(c_lp[i], []).append(i)
                for lp, ii in groups.items():
                    add("exposed_copy", *lp, _length(_subtract(_union(_clip(c_iv[ii], lo, hi)), covered)))
            else:
                add("exposed_copy", "", "", _length(_subtract(_union(_clip(c_iv[in_c], lo, hi)), covered)))
        all_busy = _union(np.concatenate([covered, _clip(c_iv[in_c], lo, hi) if len(in_c) else covered[:0]]))
        gaps = _subtract(np.array([[lo, hi]], dtype=np.int64), all_busy)
        if len(gaps):
            gpu_iv = np.concatenate([k_iv[in_k], c_iv[in_c]]) if len(in_c) else k_iv[in_k]
            gpu_lp = [k_lp[i] for i in in_k] + [c_lp[i] for i in in_c]
            by_start = np.argsort(gpu_iv[:, 0], kind="stable") if len(gpu_iv) else np.array([], int)
            by_end = np.argsort(gpu_iv[:, 1], kind="stable") if len(gpu_iv) else np.array([], int)
            starts_sorted = gpu_iv[by_start, 0] if len(gpu_iv) else np.array([], np.int64)
            ends_sorted = gpu_iv[by_end, 1] if len(gpu_iv) else np.array([], np.int64)
            for g0, g1 in gaps:
                a, b = np.searchsorted(blocking, g0, "left"), np.searchsorted(blocking, g1, "right")
                stall = b > a
                lp = ("", "")
                if by_layer and len(gpu_iv):
                    if stall:  # the readback that ended just before the gap
                        j = np.searchsorted(ends_sorted, g0, "right") - 1
                        lp = gpu_lp[by_end[j]] if j >= 0 else ("", "")
                    else:  # the work the GPU waited for
                        j = np.searchsorted(starts_sorted, g1, "left")
                        lp = gpu_lp[by_start[j]] if j < len(starts_sorted) else ("", "")
                add("sync_stall" if stall else "launch_gap", *lp, int(g1 - g0))
        for (comp, layer, pass_), ns in acc.items():
            row = dict(step=w.step, component=comp, group="busy" if comp in BUSY else "idle", ms=ns / 1e6)
            if by_layer:
                row.update(layer=layer, **{"pass": pass_})
            rows.append(row)
        rows.append(dict(step=w.step, component="step_ms", group="total", ms=(hi - lo) / 1e6,
                         **({"layer": "", "pass": ""} if by_layer else {})))
    cols = ["step", "component", "group", "ms"] + (["layer", "pass"] if by_layer else [])
    return pd.DataFrame(rows, columns=cols)


def per_step(events: pd.DataFrame) -> pd.DataFrame:
    """Steps x components (ms), zeros filled, with `step_ms` and `residual_ms` = step_ms - sum(components)."""
    b = breakdown(events)
    if b.empty:
        return pd.DataFrame(columns=[*COMPONENTS, "step_ms", "residual_ms"])
    t = b.pivot_table(index="step", columns="component", values="ms", aggfunc="sum").reindex(
        columns=[*COMPONENTS, "step_ms"]).fillna(0.0)
    t["residual_ms"] = t["step_ms"] - t[list(COMPONENTS)].sum(axis=1)
    return t


def summary(events: pd.DataFrame) -> pd.DataFrame:
    """Mean ms per step of each component (and step_ms), with its share of the step: component, group, ms, share."""
    t = per_step(events)
    if t.empty:
        return pd.DataFrame(columns=["component", "group", "ms", "share"])
    m = t.mean()
    step = float(m["step_ms"])
    rows = [dict(component=c, group="busy" if c in BUSY else "idle", ms=float(m[c]),
                 share=float(m[c]) / step if step else float("nan")) for c in COMPONENTS]
    rows.append(dict(component="step_ms", group="total", ms=step, share=1.0))
    rows.append(dict(component="residual_ms", group="total", ms=float(m["residual_ms"]),
                     share=float(m["residual_ms"]) / step if step else float("nan")))
    return pd.DataFrame(rows)


def compare(baseline: pd.DataFrame, arm: pd.DataFrame, measured_ms: float | None = None) -> pd.DataFrame:
    """Each component's mean ms per step in the baseline and the arm, and the saving (baseline - arm).

    The `step_ms` row's saving is the traced step-time difference; it equals the sum of the component savings.
    With `measured_ms` (the engine's uninstrumented saving), a `residual_ms` row gives measured - traced: what the
    profiler's own cost and run-to-run noise leave unexplained."""
    a, b = per_step(baseline), per_step(arm)
    rows = []
    for c in [*COMPONENTS, "step_ms"]:
        ma = float(a[c].mean()) if len(a) else float("nan")
        mb = float(b[c].mean()) if len(b) else float("nan")
        rows.append(dict(component=c, group="busy" if c in BUSY else ("idle" if c in IDLE else "total"),
                         baseline_ms=ma, arm_ms=mb, saved_ms=ma - mb))
    out = pd.DataFrame(rows)
    if measured_ms is not None:
        traced = float(out.loc[out["component"] == "step_ms", "saved_ms"].iloc[0])
        out = pd.concat([out, pd.DataFrame([dict(component="residual_ms", group="total", baseline_ms=float("nan"),
                                                 arm_ms=float("nan"), saved_ms=float(measured_ms) - traced)])],
                        ignore_index=True)
    out.attrs["steps"] = {"baseline": len(a), "arm": len(b)}
    return out


def top_kernels(events: pd.DataFrame, n: int = 10) -> pd.DataFrame:
    """The `n` kernels (by name) with the most GPU time per step: name, cls, count, ms (per step), share of busy."""
    k, _ = _gpu(events)
    steps = max(len(step_windows(events)), 1)
    if k.empty:
        return pd.DataFrame(columns=["name", "cls", "count", "ms", "share"])
    k = k.assign(dur_ms=(k["end_ns"] - k["start_ns"]) / 1e6)
    g = k.groupby(["name", "cls"])["dur_ms"].agg(count="count", ms="sum").reset_index()
    g[["count", "ms"]] = g[["count", "ms"]] / steps
    g["share"] = g["ms"] / g["ms"].sum()
    return g.sort_values("ms", ascending=False).head(n).reset_index(drop=True)
