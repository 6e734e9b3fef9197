"""Time inside collectives, split into transfer and waiting for the slowest rank, from per-rank traces.

    # W = ranks, r = one rank, k = the k-th collective of one kind on a rank

The method (a pure function of event tables, `collective_waits`):

1. Collectives are the kernels whose name contains `nccl` (FSDP2 under torchrun on GPUs:
   `ncclDevKernel_AllGather_RING_LL`, `ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL`, ...), from each rank's
   events DataFrame (`workbench.traces.events`; one per rank, times in ns on one clock, see below).
2. Matching: a collective is one op that every rank issues in the same order (FSDP2 issues the same all-gathers and
   reduce-scatters, in the same order, on every rank). Kernels are grouped by their kind (AllGather, ReduceScatter,
   AllReduce, Broadcast, ...; the algorithm / protocol suffix is ignored) and the k-th kernel of a kind on rank r is
   matched with the k-th kernel of that kind on every other rank. A kind whose count differs between ranks is not
   matched past the shortest rank's count (reported in `unmatched`).
3. Per matched collective k and rank r: the kernel cannot finish before the last rank's kernel has started, and a
   ring / tree kernel spins from its own start until its peers arrive. So
       wait_r     = max_r' start_r' - start_r      (>= 0; 0 on the last rank to arrive)
       transfer_r = (end_r - start_r) - wait_r     (the kernel's time once every rank is in it)
   clipped so that 0 <= wait_r <= duration_r. The last rank to arrive is the one the others waited for.
4. Aggregation (`wait_by_layer`): per rank, layer and pass (the `wb/Lxx/{fwd,recompute,bwd}` range the
   collective was launched from: FSDP2 prefetches, so layer k+1's all-gather is usually launched inside layer k's
   range), summed and divided by the traced steps: ms per step.

Clock: the traces of one host share its clock (torch.profiler/kineto converts GPU timestamps to the host clock; a
Chrome trace's `ts` is relative to its `baseTimeNanoseconds`, so `absolute_events` adds it back before ranks are
compared). Across hosts the clocks differ by their NTP offset (tens of µs to ms): the estimate then needs an offset
per host (e.g. from the skew of a barrier), which is not applied here: the workbench runs on one host.

Limits: a skew that comes from the host launching late (a CPU-bound rank) counts as waiting on the other ranks,
which is what it costs them. On CPU (gloo) collectives run on host threads and leave no kernels: the estimate is
empty there, and the tests use synthetic events.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

COLLECTIVE_RE = re.compile(r"nccl", re.IGNORECASE)
_KINDS = ("AllGather", "ReduceScatter", "AllReduce", "Broadcast", "ReduceScatterV", "AllToAll", "SendRecv", "Reduce",
          "Send", "Recv")
_KIND_RE = re.compile("(" + "|".join(sorted(_KINDS, key=len, reverse=True)) + ")", re.IGNORECASE)

WAIT_COLUMNS = ["rank", "kind", "seq", "name", "layer", "pass", "start_ns", "end_ns", "dur_ns", "wait_ns",
                "transfer_ns", "last_rank"]


def collective_kind(name: str) -> str:
    """`ncclDevKernel_AllGather_RING_LL` -> "AllGather"; a name with no known kind is its own kind."""
    m = _KIND_RE.search(name or "")
    return m.group(1) if m else (name or "")


def collectives(events: pd.DataFrame) -> pd.DataFrame:
    """The collective kernels of one rank's events, in start order, with their kind and their order in that kind."""
    if events is None or not len(events):
        return pd.DataFrame(columns=["kind", "seq", "name", "layer", "pass", "start_ns", "end_ns"])
    k = events[(events["kind"] == "kernel") & events["name"].astype(str).str.contains(COLLECTIVE_RE)].copy()
    k = k.sort_values(["start_ns", "end_ns"], kind="stable")
    k["kind"] = [collective_kind(n) for n in k["name"].astype(str)]
    k["seq"] = k.groupby("kind").cumcount()
    return k[["kind", "seq", "name", "layer", "pass", "start_ns", "end_ns"]].reset_index(drop=True)


def collective_waits(events_by_rank: dict) -> tuple[pd.DataFrame, dict]:
    """(one row per rank per matched collective: `WAIT_COLUMNS`, {kind: unmatched count}) from {rank: events}.

    `events_by_rank` holds each rank's events on one clock (`absolute_events`). Times in ns."""
    per = {r: collectives(ev) for r, ev in events_by_rank.items()}
    rows, unmatched = [], {}
    kinds = sorted({k for c in per.values() for k in c["kind"].unique()})
    for kind in kinds:
        by_rank = {r: c[c["kind"] == kind].set_index("seq") for r, c in per.items()}
        counts = {r: len(c) for r, c in by_rank.items()}
        n = min(counts.values()) if counts else 0
        if len(set(counts.values())) > 1:
            unmatched[kind] = max(counts.values()) - n
        if n == 0:
            continue
        starts = np.stack([by_rank[r]["start_ns"].to_numpy()[:n] for r in sorted(by_rank)])  # (W, n)
        last = np.argmax(starts, axis=0)
        max_start = starts.max(axis=0)
        ranks = sorted(by_rank)
        for i, r in enumerate(ranks):
            c = by_rank[r].iloc[:n]
            st, en = c["start_ns"].to_numpy(), c["end_ns"].to_numpy()
            dur = np.maximum(en - st, 0)
            wait = np.clip(max_start - st, 0, dur)
            rows.append(pd.DataFrame({
                "rank": r, "kind": kind, "seq": np.arange(n), "name": c["name"].to_numpy(),
                "layer": c["layer"].to_numpy(), "pass": c["pass"].to_numpy(), "start_ns": st, "end_ns": en,
                "dur_ns": dur, "wait_ns": wait, "transfer_ns": dur - wait,
                "last_rank": [ranks[j] for j in last]}))
    if not rows:
        return pd.DataFrame(columns=WAIT_COLUMNS), unmatched
    return pd.concat(rows, ignore_index=True)[WAIT_COLUMNS], unmatched


EXPOSED_COLUMNS = ["rank", "step", "collectives", "wait_ms", "exposed_wait_ms", "exposed_collective_ms"]


def exposed_waits(events_by_rank: dict, waits: pd.DataFrame, steps: int = 1) -> pd.DataFrame:
    """Per rank and traced step: the wait that costs step time (`EXPOSED_COLUMNS`, ms).

    `wait_ms` sums every collective's wait (`collective_waits`). That sum is not time lost: a collective waits on
    its own stream (FSDP2: all-gathers and reduce-scatters have theirs) while the compute stream goes on, and
    collectives of two streams wait at the same time. `exposed_wait_ms` is the part that leaves the GPU with nothing
    else to do: the union of the rank's wait intervals [start, start + wait] less the union of its other GPU work
    (every non-collective kernel and copy, any stream). `exposed_collective_ms` likewise for whole collectives
    (wait + transfer). Steps: the k-th collective of a kind belongs to step k // (count of that kind / steps)
    (FSDP2 issues the same collectives every step)."""
    from workbench.traces import decompose

    if waits is None or not len(waits):
        return pd.DataFrame(columns=EXPOSED_COLUMNS)
    n_steps = max(int(steps), 1)
    rows = []
    for r, w in waits.groupby("rank"):
        ev = events_by_rank[r]
        gpu = ev[ev["kind"].isin(("kernel", "memcpy", "memset"))]
        other = gpu[~gpu["name"].astype(str).str.contains(COLLECTIVE_RE)]
        busy, prefix = decompose.union_with_prefix(other[["start_ns", "end_ns"]].to_numpy(dtype=np.int64))
        per_kind = w.groupby("kind")["seq"].transform("size")
        step = np.minimum(w["seq"] // np.maximum(per_kind // n_steps, 1), n_steps - 1)

        def exposed(iv):
            u = decompose._union(iv)
            return sum((b - a) - decompose.covered_ns(busy, prefix, int(a), int(b)) for a, b in u) / 1e6

        for k in range(n_steps):
            ws = w[step == k]
            st = ws["start_ns"].to_numpy(dtype=np.int64)
            rows.append({"rank": int(r), "step": k, "collectives": len(ws), "wait_ms": float(ws["wait_ns"].sum()) / 1e6,
                         "exposed_wait_ms": exposed(np.stack([st, st + ws["wait_ns"].to_numpy(dtype=np.int64)], 1)),
                         "exposed_collective_ms": exposed(np.stack([st, ws["end_ns"].to_numpy(dtype=np.int64)], 1))})
    return pd.DataFrame(rows, columns=EXPOSED_COLUMNS)


def wait_by_layer(waits: pd.DataFrame, steps: int = 1) -> pd.DataFrame:
    """Per rank, layer and pass: collective, wait and transfer time in ms per step, and the collectives per step.
    Collectives outside a layer get layer "-" (the root module's all-gather, the optimizer's)."""
    cols = ["rank", "layer", "pass", "collectives", "collective_ms", "wait_ms", "transfer_ms"]
    if waits is None or not len(waits):
        return pd.DataFrame(columns=cols)
    w = waits.assign(layer=waits["layer"].fillna("-"), **{"pass": waits["pass"].fillna("-")})
    g = w.groupby(["rank", "layer", "pass"], dropna=False).agg(
        collectives=("seq", "size"), collective_ns=("dur_ns", "sum"), wait_ns=("wait_ns", "sum"),
        transfer_ns=("transfer_ns", "sum")).reset_index()
    s = max(int(steps), 1)
    out = pd.DataFrame({"rank": g["rank"], "layer": g["layer"], "pass": g["pass"],
                        "collectives": g["collectives"] / s, "collective_ms": g["collective_ns"] / 1e6 / s,
                        "wait_ms": g["wait_ns"] / 1e6 / s, "transfer_ms": g["transfer_ns"] / 1e6 / s})
    return out[cols].sort_values(["rank", "layer", "pass"]).reset_index(drop=True)


def wait_per_rank(waits: pd.DataFrame, steps: int = 1) -> dict:
    """{rank: {"collective_ms", "wait_ms", "transfer_ms", "collectives"} per step}, and who was waited for
    (`last_to_arrive`: how often each rank was the last into a collective)."""
    out = {}
    if waits is None or not len(waits):
        return out
    s = max(int(steps), 1)
    for r, g in waits.groupby("rank"):
        out[int(r)] = {"collectives": len(g) / s, "collective_ms": float(g["dur_ns"].sum()) / 1e6 / s,
                       "wait_ms": float(g["wait_ns"].sum()) / 1e6 / s,
                       "transfer_ms": float(g["transfer_ns"].sum()) / 1e6 / s,
                       "last_to_arrive": int((waits.drop_duplicates(["kind", "seq"])["last_rank"] == r).sum())}
    return out


def wait_table(by_layer: dict, baseline: str, optimized: str) -> pd.DataFrame:
    """The wait per layer and pass, baseline against optimized arm: {arm: `wait_by_layer` frame} -> one row per
    (layer, pass) with each arm's wait (ms per step, the mean over ranks) and the max over ranks."""
    frames = []
    for arm in (baseline, optimized):
        f = by_layer.get(arm)
        if f is None or not len(f):
            continue
        g = f.groupby(["layer", "pass"]).agg(wait_ms=("wait_ms", "mean"), wait_ms_max=("wait_ms", "max"),
                                            transfer_ms=("transfer_ms", "mean")).reset_index()
        g.columns = ["layer", "pass"] + [f"{arm}:{c}" for c in g.columns[2:]]
        frames.append(g.set_index(["layer", "pass"]))
    if not frames:
        return pd.DataFrame(columns=["layer", "pass"])
    return pd.concat(frames, axis=1).reset_index().sort_values(["layer", "pass"]).reset_index(drop=True)


def plot_wait_per_layer(table: pd.DataFrame, baseline: str, optimized: str, ax=None):
    """The notebook figure: wait per layer (fwd / recompute / bwd summed), baseline against optimized arm."""
    import matplotlib.pyplot as plt

    ax = ax or plt.gca()
    if table is None or not len(table):
        ax.text(0.5, 0.5, "no collective kernels in the traces", ha="center", va="center", transform=ax.transAxes)
        return ax
    per_layer = table.groupby("layer")[[c for c in table.columns if c.endswith(":wait_ms")]].sum()
    x = np.arange(len(per_layer))
    for i, arm in enumerate((baseline, optimized)):
        col = f"{arm}:wait_ms"
        if col in per_layer:
            ax.bar(x + (i - 0.5) * 0.4, per_layer[col], width=0.4, label=arm)
    ax.set_xticks(x, per_layer.index, rotation=90)
    ax.set_ylabel("wait for the slowest rank (ms / step, mean over ranks)")
    ax.legend()
    return ax


def trace_base_ns(path: str) -> int:
    """`baseTimeNanoseconds` of a torch.profiler Chrome trace (0 when absent): its `ts` values are relative to it."""
    from workbench.traces.events import load_chrome_trace

    try:
        return int(load_chrome_trace(path).get("baseTimeNanoseconds") or 0)
    except (OSError, ValueError):
        return 0


def absolute_events(events: pd.DataFrame, base_ns: int) -> pd.DataFrame:
    """Events on the host's absolute clock (for comparing ranks): start/end shifted by the trace's base time."""
    if not base_ns or events is None or not len(events):
        return events
    return events.assign(start_ns=events["start_ns"] + int(base_ns), end_ns=events["end_ns"] + int(base_ns))


def traced_steps(events: pd.DataFrame) -> int:
    """Traced steps in one rank's events: `wb/step` ranges (host side), at least 1."""
    if events is None or not len(events):
        return 1
    n = int(((events["kind"] == "range") & (events["name"] == "wb/step") & events["stream"].isna()).sum())
    return max(n, 1)
