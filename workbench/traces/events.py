"""Trace parsers: torch.profiler Chrome traces and Nsight Systems SQLite exports -> ONE events DataFrame.

Columns (`COLUMNS`), one row per event, times in ns:

    source    "torch" | "nsys"
    kind      "range" (NVTX / record_function, incl. ProfilerStep#N), "kernel", "memcpy", "sync", "runtime"
    name      range text, kernel name (normalised by `workbench.traces.names.kernel_name`, the same from both
              tools; memsets are kernels named "Memset"), memcpy kind ("HtoD", "DtoH", ...), sync kind, runtime
              API name
    start_ns, end_ns
    stream    CUDA stream of GPU-side events (kernels, memcpy, syncs, torch's gpu_user_annotation); NaN on the host
    layer     "L07" for events in (or named for) a decoder layer, else None
    pass      "fwd" | "recompute" | "bwd" | "opt" for events inside those ranges, else None
    part      what a `wb/Lxx/...` range measures below the layer: "attn", "mlp", "attn/meta", "reload", ... (None for
              the layer's own fwd/recompute/bwd range and for other events)
    bytes     memcpy size (NaN elsewhere)
    tid       host thread (torch tid / nsys globalTid); NaN for GPU-side events
    correlation  runtime call <-> the kernel / memcpy it launched (NaN where unknown)

Range names follow `wb/L07/fwd`, `wb/L07/attn/meta`, `wb/L07/bwd`, `wb/L07/recompute`, `wb/fwd`, `wb/bwd`,
`wb/opt`, `wb/step`. Host-side ranges nest per thread; an event inside `wb/L07/recompute` gets layer L07, pass
recompute. Kernels and copies inherit layer/pass/part from the runtime call that launched them (correlation id).
"""
from __future__ import annotations

import gzip
import json
import os
import re
import sqlite3

import numpy as np
import pandas as pd

from workbench.traces.names import MEMSET, kernel_name

COLUMNS = ["source", "kind", "name", "start_ns", "end_ns", "stream", "layer", "pass", "part", "bytes", "tid",
           "correlation"]

_LAYER_RE = re.compile(r"^wb/(L\d+)/(.+)$")
_LAYER_PASSES = {"fwd": "fwd", "recompute": "recompute", "bwd": "bwd"}
_TOP_PASSES = {"wb/fwd": "fwd", "wb/bwd": "bwd", "wb/opt": "opt"}

# CUPTI enums of the nsys SQLite export (copyKind: 1 HtoD, 2 DtoH, 8 DtoD; syncType 1-4)
MEMCPY_KINDS = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD", 9: "HtoH",
                10: "PtoP"}
NVTX_DOMAIN = "workbench"
"""The NVTX domain of the workbench's ranges (`workbench.instrument.ranges`); other domains are filtered out."""
RANGE_PREFIXES = ("wb/", "ProfilerStep#")
"""The ranges a torch.profiler trace keeps: the workbench's own (`wb/...`, the record_function twins of its NVTX
ranges) and torch's step markers. Other record_function ranges (`Optimizer.step#AdamW.step`, ...) have no NVTX
counterpart in an Nsight capture and are dropped, so both tools hold the same ranges."""
SYNC_TYPES = {0: "unknown", 1: "event_sync", 2: "stream_wait_event", 3: "stream_sync", 4: "context_sync"}


def parse_range_name(name: str) -> tuple[str | None, str | None, str | None]:
    """`wb/L07/fwd` -> ("L07", "fwd", None); `wb/L07/attn/meta` -> ("L07", None, "attn/meta");
    `wb/fwd` -> (None, "fwd", None); anything else -> (None, None, None)."""
    m = _LAYER_RE.match(name or "")
    if m:
        layer, rest = m.group(1), m.group(2)
        if rest in _LAYER_PASSES:
            return layer, _LAYER_PASSES[rest], None
        return layer, None, rest
    return None, _TOP_PASSES.get(name), None


def empty_events() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="object") for c in COLUMNS})


def _frame(rows: list[dict], source: str) -> pd.DataFrame:
    if not rows:
        df = empty_events()
        df["source"] = df["source"].astype(object)
        return df
    df = pd.DataFrame(rows)
    df["source"] = source
    for c in COLUMNS:
        if c not in df:
            df[c] = None
    df = df[COLUMNS]
    for c in ("start_ns", "end_ns"):
        df[c] = df[c].astype("int64")
    for c in ("stream", "bytes", "tid", "correlation"):
        df[c] = pd.to_numeric(df[c], errors="coerce").astype("float64")
    return attribute(df)


def attribute(df: pd.DataFrame) -> pd.DataFrame:
    """Fill layer / pass / part: by name for `wb/...` ranges, by nesting for host events on the same thread,
    and through the correlation id for GPU events. Returns the frame sorted by start."""
    df = df.sort_values(["start_ns", "end_ns"], ascending=[True, False], kind="stable").reset_index(drop=True)
    def col(c):  # None where missing (pandas may hold NaN)
        return np.array([None if pd.isna(v) else v for v in df[c].to_numpy(dtype=object)], dtype=object)
    layer, pass_, part = col("layer"), col("pass"), col("part")
    kinds = df["kind"].to_numpy()
    names = df["name"].to_numpy()
    starts, ends = df["start_ns"].to_numpy(), df["end_ns"].to_numpy()
    host = df["stream"].isna().to_numpy() & df["tid"].notna().to_numpy()
    tids = df["tid"].to_numpy()
    stacks: dict = {}
    for i in np.flatnonzero(host):
        st = stacks.setdefault(tids[i], [])
        while st and st[-1][0] <= starts[i]:
            st.pop()
        ctx_layer, ctx_pass, ctx_part = (st[-1][1:] if st else (None, None, None))
        if kinds[i] == "range":
            own_layer, own_pass, own_part = parse_range_name(names[i])
            layer[i] = own_layer or ctx_layer
            pass_[i] = own_pass or ctx_pass
            part[i] = own_part if own_part is not None else (ctx_part if own_layer is None else None)
            st.append((ends[i], layer[i], pass_[i], part[i]))
        else:
            layer[i] = layer[i] if layer[i] is not None else ctx_layer
            pass_[i] = pass_[i] if pass_[i] is not None else ctx_pass
            part[i] = part[i] if part[i] is not None else ctx_part
    # GPU events inherit from the runtime call that launched them
    corr = df["correlation"].to_numpy()
    rt = np.flatnonzero((kinds == "runtime") & ~np.isnan(corr.astype(float)))
    by_corr = {corr[i]: i for i in rt}
    for i in np.flatnonzero(~host & ~np.isnan(corr.astype(float))):
        j = by_corr.get(corr[i])
        if j is not None and kinds[i] != "runtime":
            layer[i], pass_[i], part[i] = layer[j], pass_[j], part[j]
    df["layer"], df["pass"], df["part"] = layer, pass_, part
    return df


# --- torch.profiler Chrome trace -------------------------------------------------------------------------------

_TORCH_KINDS = {"user_annotation": "range", "gpu_user_annotation": "range", "kernel": "kernel",
                "gpu_memcpy": "memcpy", "gpu_memset": "kernel", "cuda_runtime": "runtime", "cuda_driver": "runtime",
                "cuda_sync": "sync"}


def _memcpy_kind(name: str) -> str:
    m = re.search(r"(HtoD|DtoH|DtoD|HtoH|PtoP)", name or "")
    return m.group(1) if m else (name or "memcpy")


def load_chrome_trace(path: str) -> dict:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def from_torch_trace(path_or_trace) -> pd.DataFrame:
    """Parse a torch.profiler Chrome trace (`.json` or `.json.gz`, or the loaded dict) into events.

    Host ranges come from `user_annotation` (record_function: the workbench's `wb/...` and `ProfilerStep#N`, see
    RANGE_PREFIXES), GPU-side ranges from `gpu_user_annotation` (with a stream), kernels (`kernel_name`), memsets
    (kernels named "Memset"), memcpy (name = HtoD/DtoH/..., bytes), `cuda_sync` (with
    `enable_cuda_sync_events=True`) and runtime calls (with correlation ids).
    """
    trace = load_chrome_trace(path_or_trace) if isinstance(path_or_trace, (str, os.PathLike)) else path_or_trace
    rows = []
    for e in trace.get("traceEvents", []):
        if e.get("ph") != "X":
            continue
        cat, name = e.get("cat", ""), e.get("name", "")
        kind = _TORCH_KINDS.get(cat)
        if kind is None and name.startswith("ProfilerStep#"):
            kind = "range"
        if kind is None or (kind == "range" and not name.startswith(RANGE_PREFIXES)):
            continue
        args = e.get("args") or {}
        start = int(round(float(e["ts"]) * 1e3))
        end = start + int(round(float(e.get("dur", 0)) * 1e3))
        gpu = cat in ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation")
        row = dict(kind=kind, name=name, start_ns=start, end_ns=end,
                   stream=args.get("stream", e.get("tid")) if gpu else None,
                   tid=None if gpu else e.get("tid"), correlation=args.get("correlation"), layer=None, part=None,
                   bytes=args.get("bytes") if cat == "gpu_memcpy" else None)
        row["pass"] = None
        if kind == "memcpy":
            row["name"] = _memcpy_kind(name)
        elif kind == "kernel":
            row["name"] = MEMSET if cat == "gpu_memset" else kernel_name(name)
        if kind == "range" and gpu:  # GPU projection of a range: name-derived attribution only
            row["layer"], row["pass"], row["part"] = parse_range_name(name)
        if isinstance(row["tid"], str):  # torch writes some tids as strings
            try:
                row["tid"] = int(row["tid"])
            except ValueError:
                row["tid"] = abs(hash(row["tid"])) % (2**31)
        rows.append(row)
    return _frame(rows, "torch")


# --- Nsight Systems SQLite export --------------------------------------------------------------------------------

def _tables(con) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}


def _columns(con, table: str) -> set[str]:
    return {r[1] for r in con.execute(f"PRAGMA table_info({table})")}


def from_nsys_sqlite(path: str) -> pd.DataFrame:
    """Parse an `nsys export --type sqlite` file (NVTX_EVENTS, CUPTI_ACTIVITY_KIND_KERNEL / MEMCPY / SYNCHRONIZATION / RUNTIME; times in ns) into events.

    NVTX push/pop and start/end ranges (eventType 59, 60; text from `text` or the registered string `textId`) of
    the workbench's NVTX domain only (the default domain where the capture registered none; other libraries'
    domains, e.g. CUB's, are dropped), CUPTI kernels (`mangledName`, else `demangledName`, else `shortName`,
    through `kernel_name`: the name a torch trace gives the same kernel), memsets (kernels named "Memset", as in
    torch traces), memcpy (copyKind -> HtoD/DtoH/..., bytes), synchronization (syncType) and runtime calls
    (nameId). Tables a capture lacks are skipped.
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(path)
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        t = _tables(con)
        rows: list[dict] = []
        strings = "StringIds" in t

        def name_of(col):
            return f"(SELECT value FROM StringIds s WHERE s.id = {col})" if strings else "NULL"

        if "NVTX_EVENTS" in t:
            cols = _columns(con, "NVTX_EVENTS")
            text = "COALESCE(n.text, " + name_of("n.textId") + ")" if "textId" in cols else "n.text"
            dom = "n.domainId" if "domainId" in cols else "0"
            # NVTX domains: only the workbench's own ranges count: its `workbench` domain, or, in a capture without
            # one (ranges through torch.cuda.nvtx), the default domain. Other libraries' domains are dropped (CUB's
            # `CCCL` ranges nest inside wb/Lxx/attn/meta and would otherwise count as builds).
            domains = {d: t for d, t in con.execute(f"SELECT {dom}, n.text FROM NVTX_EVENTS n WHERE n.eventType = 75")}
            own = {d for d, t in domains.items() if t == NVTX_DOMAIN}
            q = (f"SELECT n.start, n.end, {text}, n.globalTid, {dom} FROM NVTX_EVENTS n "
                 "WHERE n.eventType IN (59, 60) AND n.end IS NOT NULL")
            for s, e, name, tid, d in con.execute(q):
                if (d in own if own else d not in domains) and (name or "").startswith(RANGE_PREFIXES):
                    rows.append(dict(kind="range", name=name, start_ns=s, end_ns=e, tid=tid))
        string = dict(con.execute("SELECT id, value FROM StringIds")) if strings else {}
        if "CUPTI_ACTIVITY_KIND_KERNEL" in t:
            # the name kineto demangles (mangledName, through the same __cxa_demangle), else Nsight's demangling,
            # else the short name (an export without either): `kernel_name` normalises each to one form
            cols = _columns(con, "CUPTI_ACTIVITY_KIND_KERNEL")
            fields = [f"k.{c}" for c in ("mangledName", "demangledName", "shortName") if c in cols]
            q = (f"SELECT k.start, k.end, k.streamId, k.correlationId, {', '.join(fields)} "
                 "FROM CUPTI_ACTIVITY_KIND_KERNEL k")
            for s, e, stream, corr, *ids in con.execute(q):
                name = next((string[i] for i in ids if i is not None and string.get(i)), "")
                rows.append(dict(kind="kernel", name=kernel_name(name), start_ns=s, end_ns=e, stream=stream,
                                 correlation=corr))
        if "CUPTI_ACTIVITY_KIND_MEMSET" in t:  # torch lists memsets as kernels ("Memset (Device)"): so do we
            cols = _columns(con, "CUPTI_ACTIVITY_KIND_MEMSET")
            corr = "m.correlationId" if "correlationId" in cols else "NULL"
            q = f"SELECT m.start, m.end, m.streamId, {corr} FROM CUPTI_ACTIVITY_KIND_MEMSET m"
            for s, e, stream, c in con.execute(q):
                rows.append(dict(kind="kernel", name=MEMSET, start_ns=s, end_ns=e, stream=stream, correlation=c))
        if "CUPTI_ACTIVITY_KIND_MEMCPY" in t:
            cols = _columns(con, "CUPTI_ACTIVITY_KIND_MEMCPY")
            corr = "m.correlationId" if "correlationId" in cols else "NULL"
            q = f"SELECT m.start, m.end, m.copyKind, m.bytes, m.streamId, {corr} FROM CUPTI_ACTIVITY_KIND_MEMCPY m"
            for s, e, ck, nbytes, stream, c in con.execute(q):
                rows.append(dict(kind="memcpy", name=MEMCPY_KINDS.get(ck, f"copyKind{ck}"), start_ns=s, end_ns=e,
                                 bytes=nbytes, stream=stream, correlation=c))
        if "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION" in t:
            cols = _columns(con, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")
            corr = "y.correlationId" if "correlationId" in cols else "NULL"
            q = f"SELECT y.start, y.end, y.syncType, y.streamId, {corr} FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION y"
            for s, e, st, stream, c in con.execute(q):
                rows.append(dict(kind="sync", name=SYNC_TYPES.get(st, f"syncType{st}"), start_ns=s, end_ns=e,
                                 stream=stream, correlation=c))
        if "CUPTI_ACTIVITY_KIND_RUNTIME" in t:
            q = (f"SELECT r.start, r.end, {name_of('r.nameId')}, r.globalTid, r.correlationId "
                 "FROM CUPTI_ACTIVITY_KIND_RUNTIME r")
            for s, e, name, tid, c in con.execute(q):
                rows.append(dict(kind="runtime", name=name or "", start_ns=s, end_ns=e, tid=tid, correlation=c))
    finally:
        con.close()
    for r in rows:
        r.setdefault("layer", None)
        r.setdefault("pass", None)
        r.setdefault("part", None)
    return _frame(rows, "nsys")


def load_events(path: str) -> pd.DataFrame:
    """Events of a trace file, by extension: `.json[.gz]` (torch), `.sqlite` (nsys), `.parquet` / `.csv[.gz]`
    (saved events)."""
    if path.endswith((".json", ".json.gz")):
        return from_torch_trace(path)
    if path.endswith(".sqlite"):
        return from_nsys_sqlite(path)
    if path.endswith(".parquet"):
        return pd.read_parquet(path)
    if path.endswith((".csv", ".csv.gz")):
        return pd.read_csv(path)
    raise ValueError(f"unknown trace file type: {path}")


EVENTS_EXTS = (".events.parquet", ".events.csv.gz")
"""What `save_events` writes, in the order a reader prefers them."""


def events_path(run_dir: str, comparison: str, arm: str) -> str | None:
    """The saved events of one traced arm of a run folder (`traces/<comparison>/<arm>` + `EVENTS_EXTS`; a rank's
    file under torchrun is the arm `<arm>.rank<R>`), None when the run kept none."""
    from workbench.measure.results import safe_name

    stem = os.path.join(run_dir, "traces", safe_name(comparison), safe_name(arm))
    return next((stem + ext for ext in EVENTS_EXTS if os.path.exists(stem + ext)), None)


def save_events(df: pd.DataFrame, path_stem: str) -> str:
    """Write events next to their trace (parquet when pyarrow is installed, else csv.gz); returns the path."""
    try:
        import pyarrow  # noqa: F401
        path = path_stem + ".events.parquet"
        tmp = path + ".tmp"
        df.to_parquet(tmp, index=False, compression="zstd", compression_level=15)  # about half of snappy's size
    except ImportError:
        path = path_stem + ".events.csv.gz"
        tmp = path + ".tmp"
        df.to_csv(tmp, index=False, compression="gzip")
    os.replace(tmp, path)
    return path
