"""Traces (events frames of `workbench.traces`): loading, diffs between arms, streams, and per-layer timelines."""
from __future__ import annotations

import os
import re
from collections.abc import Mapping

import pandas as pd

from workbench.measure import stats
from workbench.measure.results import safe_name
from workbench.analysis.loader import _empty, discover
from workbench.analysis.speedups import headline_runs


def _saved_events(path: str) -> str:
    """The file `load_trace` reads for `path`: a saved `.events.parquet` / `.events.csv.gz` beside a raw trace wins."""
    for suf in (".pt.trace.json.gz", ".pt.trace.json", ".sqlite"):
        if path.endswith(suf):
            for ev in (".events.parquet", ".events.csv.gz"):
                if os.path.exists(path[: -len(suf)] + ev):
                    return path[: -len(suf)] + ev
    return path


def load_trace(path: str) -> pd.DataFrame:
    """The events frame of a trace file; a saved `.events.parquet` / `.events.csv.gz` beside a raw trace wins."""
    from workbench.traces import load_events

    return load_events(_saved_events(path))


class ArmEvents(Mapping):
    """`arm_events`' answer, {(folder, comparison, arm): events frame}: a saved events file is read (`load_trace`)
    the first time its key is looked up, then kept (a notebook draws a few of the arms it lists); a raw trace is
    parsed at once. A file that cannot be read (a parquet file whose footer does not parse, a raw trace that does not
    parse) is not listed."""

    def __init__(self):
        self._paths: dict = {}
        self._frames: dict = {}

    def _add(self, key: tuple, path: str) -> None:
        try:
            import pyarrow.parquet as pq
        except ImportError:
            pq = None
        if pq is not None and path.endswith(".events.parquet"):
            pq.read_schema(path)  # raises on a file that is not parquet
        else:
            self._frames[key] = load_trace(path)
        self._paths[key] = path

    def __getitem__(self, key):
        if key not in self._frames:
            self._frames[key] = load_trace(self._paths[key])
        return self._frames[key]

    def __contains__(self, key) -> bool:  # without reading the file (Mapping's would)
        return key in self._paths

    def __iter__(self):
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)


def arm_events(profiles: str | None = None, **discover_kw) -> ArmEvents:
    """{(folder, comparison, arm): events frame} of the runs `discover` keeps (an `ArmEvents`: each read when first
    looked up): `traces/<comparison>/<arm>.events.parquet` (or .events.csv.gz, else the raw .pt.trace.json.gz /
    .sqlite, parsed); not those of a comparison its folder's VOID.json declares void."""
    out = ArmEvents()
    for r in discover(profiles, **discover_kw).to_dict("records"):
        tdir = os.path.join(r["path"], "traces")
        void = {safe_name(n) for n in r["void_comparisons"] or []}
        for comp in sorted(os.listdir(tdir)) if os.path.isdir(tdir) else []:
            if comp in void:
                continue
            for fn in sorted(os.listdir(os.path.join(tdir, comp))):
                m = re.match(r"^(.+?)\.(events\.parquet|events\.csv\.gz|pt\.trace\.json(\.gz)?|sqlite)$", fn)
                if m and (r["folder"], comp, m.group(1)) not in out:
                    try:
                        out._add((r["folder"], comp, m.group(1)), _saved_events(os.path.join(tdir, comp, fn)))
                    except Exception:  # noqa: BLE001 - an unreadable trace is skipped
                        continue
    return out


def trace_diffs(events: dict, comps: pd.DataFrame, top: int = 15) -> pd.DataFrame:
    """`workbench.traces.diff_arms` of baseline -> arm for every comparison row of `comps` whose two arms were traced
    (the `top` largest |delta_ms| per pair), with folder, comparison, baseline, arm."""
    from workbench.traces import diff_arms

    frames = []
    for c in comps.to_dict("records"):
        a, b = (c["folder"], c["name"], c["baseline"]), (c["folder"], c["name"], c["arm"])
        if a in events and b in events:
            d = diff_arms(events[a], events[b])
            d = d.reindex(d["delta_ms"].abs().sort_values(ascending=False).index).head(top)
            frames.append(d.assign(folder=c["folder"], comparison=c["name"], baseline=c["baseline"], arm=c["arm"]))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def step_windows(events: pd.DataFrame) -> pd.DataFrame:
    """The training steps of a trace: `wb/step` host ranges (else ProfilerStep#N), in order: step, start_ns, end_ns."""
    r = events.loc[(events["kind"] == "range") & events["stream"].isna(), ["name", "start_ns", "end_ns"]]
    s = r[r["name"] == "wb/step"]
    if s.empty:
        s = r[r["name"].astype(str).str.startswith("ProfilerStep#")]
    s = s.sort_values("start_ns")
    return pd.DataFrame({"step": range(len(s)), "start_ns": s["start_ns"].to_numpy(), "end_ns": s["end_ns"].to_numpy()})


STREAM_COLUMNS = ["stream", "role", "lane", "kernels", "kernel_ms", "memcpy", "memcpy_ms", "memcpy_bytes"]


def stream_roles(events: pd.DataFrame) -> pd.DataFrame:
    """Per GPU stream: kernels and copies (count, ms, bytes) and its role: "copy" when copies take more of its time
    than kernels (the offload reload stream), else "compute"."""
    cols = [c for c in ("stream", "kind", "start_ns", "end_ns", "bytes") if c in events]  # only these rows' copies
    g = events.loc[events["stream"].notna() & events["kind"].isin(["kernel", "memcpy"]), cols].copy()
    if g.empty:
        return _empty(STREAM_COLUMNS)
    g["dur_ms"] = (g["end_ns"] - g["start_ns"]) / 1e6
    rows = []
    for s, x in g.groupby("stream"):
        k, m = x[x["kind"] == "kernel"], x[x["kind"] == "memcpy"]
        role = "copy" if m["dur_ms"].sum() > k["dur_ms"].sum() else "compute"
        rows.append({"stream": int(s), "role": role, "lane": f"stream {int(s)} ({role})", "kernels": len(k),
                     "kernel_ms": float(k["dur_ms"].sum()), "memcpy": len(m), "memcpy_ms": float(m["dur_ms"].sum()),
                     "memcpy_bytes": float(pd.to_numeric(m["bytes"], errors="coerce").sum())})
    return pd.DataFrame(rows, columns=STREAM_COLUMNS)


TIMELINE_COLUMNS = ["lane", "category", "name", "layer", "pass", "part", "start_ms", "end_ms", "dur_ms"]


PASS_CATEGORIES = {"fwd": "forward", "recompute": "recompute", "bwd": "backward", "opt": "optimizer"}
TIMELINE_CATEGORIES = (*PASS_CATEGORIES.values(), "metadata build", "reload", "layer part", "memcpy", "host sync",
                       "other kernel")
"""What a timeline bar is, one colour each (`workbench.report.palette.TIMELINE`): a pass (its host range and the
kernels launched inside it; the lane tells which), a metadata build, a reload, another part of a layer (attention,
MLP, routing: the name in the hover), a copy (its direction in the hover), a host sync, a kernel outside every pass."""


def _category(kind, name, pass_, part) -> str:
    if kind == "range":
        if part in ("attn/meta", "meta"):
            return "metadata build"
        if part == "reload":
            return "reload"
        return "layer part" if part else PASS_CATEGORIES.get(pass_, "layer part")
    if kind == "memcpy":
        return "memcpy"
    if kind == "kernel":
        return PASS_CATEGORIES.get(pass_, "other kernel")
    return "host sync" if kind == "sync" else "other kernel"


def _merge_kernels(tl: pd.DataFrame, gap_ms: float | None) -> pd.DataFrame:
    """Back-to-back kernels of one lane, category and layer (gaps <= `gap_ms`) merged into one bar "N kernels"."""
    k = tl["category"].isin([*PASS_CATEGORIES.values(), "other kernel"]) & ~tl["name"].astype(str).str.startswith("wb/") \
        & tl["lane"].astype(str).str.startswith("stream")  # kernels: on a stream, not a (projected) range
    if gap_ms is None or not k.any():
        return tl
    out, cur = [], None
    for r in tl[k].sort_values(["lane", "start_ms"], kind="stable").to_dict("records"):
        if cur is not None and (r["lane"], r["category"], r["layer"]) == (cur["lane"], cur["category"], cur["layer"]) \
                and r["start_ms"] - cur["end_ms"] <= gap_ms:
            cur["end_ms"], cur["_n"] = max(cur["end_ms"], r["end_ms"]), cur["_n"] + 1
            continue
        out += [cur] if cur is not None else []
        cur = {**r, "_n": 1}
    for r in out + [cur]:
        r["name"] = f"{r['_n']} kernels" if r["_n"] > 1 else r["name"]
        r["dur_ms"] = r["end_ms"] - r["start_ms"]
    merged = pd.DataFrame(out + [cur]).drop(columns="_n")
    return pd.concat([tl[~k], merged], ignore_index=True).sort_values("start_ms", kind="stable").reset_index(drop=True)


def layer_timeline(events: pd.DataFrame, step: int = 0, layers=None, max_rows: int = 20000,
                   merge_gap_ms: float | None = 0.05) -> pd.DataFrame:
    """Rows to draw one traced step per layer (`TIMELINE_COLUMNS`, ms from the step's start): lanes "host"
    (wb/Lxx/fwd|recompute|bwd), "host parts", "host meta / reload", "host syncs", one per GPU stream by role.
    `layers` (e.g. ["L00"]) keeps those layers; kernels merged per `merge_gap_ms` (None keeps each)."""
    if events is None or events.empty:
        return _empty(TIMELINE_COLUMNS)
    win = step_windows(events)
    ev = events[[c for c in ("kind", "name", "start_ns", "end_ns", "stream", "layer", "pass", "part") if c in events]]
    if len(win):
        w = win.iloc[min(step, len(win) - 1)]
        t0 = int(w["start_ns"])
        ev = ev[(ev["end_ns"] >= t0) & (ev["start_ns"] <= int(w["end_ns"]))]
    else:
        t0 = int(ev["start_ns"].min())
    ev = ev[ev["kind"].isin(["range", "kernel", "memcpy", "sync"])]
    ev = ev[~((ev["kind"] == "range") & ev["stream"].isna()) | ev["name"].astype(str).str.match(r"^wb/L\d+/")]
    if layers is not None:
        ev = ev[ev["layer"].isin(list(layers)) | (ev["layer"].isna() & ev["stream"].notna())]
    roles = stream_roles(events).set_index("stream")["lane"].to_dict() if events["stream"].notna().any() else {}
    rows = []
    for r in ev.head(max_rows).to_dict("records"):
        st = r["stream"]
        layer, pass_, part = (None if (v is None or v != v) else v for v in (r["layer"], r["pass"], r["part"]))
        cat = _category(r["kind"], r["name"], pass_, part)
        if st is not None and st == st:
            lane = roles.get(int(st), f"stream {int(st)}")
        elif r["kind"] == "sync":
            lane = "host syncs"
        else:
            lane = ("host meta / reload" if cat in ("metadata build", "reload") else "host parts") if part else "host"
        rows.append({"lane": lane, "category": cat, "name": r["name"], "layer": layer, "pass": pass_, "part": part,
                     "start_ms": (r["start_ns"] - t0) / 1e6, "end_ms": (r["end_ns"] - t0) / 1e6,
                     "dur_ms": (r["end_ns"] - r["start_ns"]) / 1e6})
    if not rows:
        return _empty(TIMELINE_COLUMNS)
    return _merge_kernels(pd.DataFrame(rows, columns=TIMELINE_COLUMNS), merge_gap_ms)


def meta_builds(events: pd.DataFrame) -> pd.DataFrame:
    """Packed-metadata builds (`wb/Lxx/attn/meta` ranges, GPU projections where traced) per layer and pass:
    builds_per_step, total_ms_per_step, median_ms (`stats.quantile`)."""
    from workbench.traces.analysis import ranges, steps_in

    cols = ["layer", "pass", "builds_per_step", "total_ms_per_step", "median_ms"]
    r = ranges(events, "auto")
    r = r[r["part"].isin(["attn/meta", "meta"])].copy() if len(r) else r
    if r.empty:
        return _empty(cols)
    n = steps_in(events)
    r["dur_ms"] = (r["end_ns"] - r["start_ns"]) / 1e6
    r["pass"] = r["pass"].fillna("")
    rows = [{"layer": la, "pass": p, "builds_per_step": len(g) / n, "total_ms_per_step": g["dur_ms"].sum() / n,
             "median_ms": stats.quantile(g["dur_ms"], 0.5)} for (la, p), g in r.groupby(["layer", "pass"])]
    return pd.DataFrame(rows, columns=cols)


def timeline_pairs(events: dict, comps: pd.DataFrame) -> list[tuple]:
    """One (folder, comparison, baseline, optimized arm) per optimization whose two arms' trace events were kept:
    the headline's run where it kept them, else the latest folder that did (sweep points left out)."""
    d = comps[(comps["role"] == "optimized") & ~comps["name"].astype(str).str.contains("@")]
    chosen = headline_runs(comps)
    out = []
    for name, g in d.groupby("name", sort=False):
        have = [r for r in g.to_dict("records")
                if (r["folder"], name, r["baseline"]) in events and (r["folder"], name, r["arm"]) in events]
        if have:
            best = sorted(have, key=lambda r: ((r["folder"], name) in chosen, r["folder"]))[-1]
            out.append((best["folder"], name, best["baseline"], best["arm"]))
    return out


def pair_timeline(events: dict, pair: tuple, layers=("L00", "L01")) -> pd.DataFrame:
    """`layer_timeline` of a pair's baseline and optimized arm in one frame, each lane prefixed by its arm (drawn as
    one figure: the two arms one above the other, on one time axis from each step's start)."""
    folder, name, base, arm = pair
    frames = []
    for a in (base, arm):
        tl = layer_timeline(events[(folder, name, a)], step=0, layers=list(layers) if layers else None)
        if len(tl):
            frames.append(tl.assign(lane=f"{a} · " + tl["lane"].astype(str)))
    return pd.concat(frames, ignore_index=True) if frames else _empty(TIMELINE_COLUMNS)
