"""Trace parsers and analyses: a real CPU torch.profiler trace of the harness, synthetic GPU traces (Chrome JSON
and an Nsight Systems SQLite with the REFERENCE §4 schema), and any real `tests/fixtures/*.sqlite` capture."""
import glob
import gzip
import json
import os
import sqlite3

import pandas as pd
import pytest

from workbench.traces import (COLUMNS, copy_compute_overlap, diff_arms, from_nsys_sqlite, from_torch_trace,
                              host_syncs_per_step, layer_ranges, load_events, parse_range_name,
                              save_events, sync_counts)

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")


def test_parse_range_name():
    assert parse_range_name("wb/L07/fwd") == ("L07", "fwd", None)
    assert parse_range_name("wb/L07/recompute") == ("L07", "recompute", None)
    assert parse_range_name("wb/L12/bwd") == ("L12", "bwd", None)
    assert parse_range_name("wb/L07/attn/meta") == ("L07", None, "attn/meta")
    assert parse_range_name("wb/L03/reload") == ("L03", None, "reload")
    assert parse_range_name("wb/fwd") == (None, "fwd", None)
    assert parse_range_name("wb/step") == (None, None, None)
    assert parse_range_name("aten::mm") == (None, None, None)


# --- a real CPU trace of the harness ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cpu_trace(tmp_path_factory):
    from workbench.step.data import make_batches
    from workbench.step.harness import enable_checkpointing, train_steps
    from workbench.instrument import Ranges, instrument_layers
    from workbench.step.models import build_model
    from workbench.traces.capture import torch_profile

    model = build_model("tiny-qwen3", lora_rank=4)
    enable_checkpointing(model)
    instrument_layers(model)
    batches = make_batches("fixed:32", 128, 1, model.config.vocab_size)
    path = str(tmp_path_factory.mktemp("trace") / "arm.pt.trace.json.gz")

    def run(step_fn):
        train_steps(model, batches, steps=3, warmup=0, ranges=Ranges(nvtx=False, profiler=True), count_syncs=False,
                    on_step=lambda r: step_fn())
    torch_profile(run, path, device=model.device, warmup=1, steps=2)
    return path, model.config.num_hidden_layers


def test_torch_cpu_trace_has_per_layer_ranges(cpu_trace):
    path, L = cpu_trace
    with gzip.open(path, "rt") as f:
        assert "traceEvents" in json.load(f)
    ev = from_torch_trace(path)
    assert list(ev.columns) == COLUMNS
    assert set(ev["source"]) == {"torch"}
    r = ev[ev["kind"] == "range"]
    names = set(r["name"])
    assert {"wb/step", "wb/fwd", "wb/bwd", "wb/opt"} <= names
    for i in range(L):
        for what in ("fwd", "attn", "mlp", "bwd", "recompute"):
            assert f"wb/L{i:02d}/{what}" in names, what
    # 2 profiled (active) steps: each range once per step
    assert (r["name"] == "wb/step").sum() == 2
    lr = layer_ranges(ev)
    for i in range(L):
        rows = lr[lr["layer"] == f"L{i:02d}"]
        got = {(p, part) for p, part in zip(rows["pass"], rows["part"])}
        assert {("fwd", ""), ("bwd", ""), ("recompute", ""), ("fwd", "attn"), ("fwd", "mlp"),
                ("recompute", "attn"), ("recompute", "mlp")} <= got
        assert (rows["count"] == 2).all()
        assert (rows["median_ms"] > 0).all()
    # nesting: the attention range inside the recompute is attributed to the recompute of that layer
    attn = r[r["name"] == "wb/L00/attn"]
    assert set(attn["pass"]) == {"fwd", "recompute"}
    # the recompute of a layer happens inside its backward range
    bwd = r[r["name"] == "wb/L01/bwd"].iloc[0]
    rec = r[(r["name"] == "wb/L01/recompute") & (r["start_ns"] >= bwd["start_ns"])].iloc[0]
    assert rec["end_ns"] <= bwd["end_ns"]
    # a CPU trace has no GPU sync events: the witness reads zero
    assert sync_counts(ev).empty


def test_saved_events_roundtrip(cpu_trace, tmp_path):
    ev = from_torch_trace(cpu_trace[0])
    p = save_events(ev, str(tmp_path / "arm"))
    back = load_events(p)
    assert len(back) == len(ev)
    assert list(back["name"]) == list(ev["name"])


# --- a synthetic GPU Chrome trace (what torch.profiler writes on CUDA) -----------------------------------------

def _x(name, cat, ts_us, dur_us, **kw):
    e = {"ph": "X", "name": name, "cat": cat, "ts": ts_us, "dur": dur_us, "pid": 1, "tid": kw.pop("tid", 100)}
    if kw:
        e["args"] = kw
    return e


def gpu_chrome_trace():
    ev = [
        _x("ProfilerStep#1", "user_annotation", 0, 1000),
        _x("wb/step", "user_annotation", 1, 998),
        _x("wb/fwd", "user_annotation", 2, 400),
        _x("wb/L00/fwd", "user_annotation", 10, 100),
        _x("wb/L00/attn", "user_annotation", 12, 60),
        _x("wb/L00/attn/meta", "user_annotation", 13, 20),
        _x("aten::item", "cpu_op", 14, 5),
        _x("cudaMemcpyAsync", "cuda_runtime", 15, 2, correlation=7),
        _x("cudaStreamSynchronize", "cuda_sync", 17, 3, stream=7),
        _x("cudaLaunchKernel", "cuda_runtime", 40, 1, correlation=8),
        _x("wb/L01/fwd", "user_annotation", 120, 100),
        _x("wb/L01/attn", "user_annotation", 122, 60),
        _x("wb/L01/attn/meta", "user_annotation", 123, 30),
        _x("cudaLaunchKernel", "cuda_runtime", 130, 1, correlation=9),
        _x("Memcpy DtoH (Device -> Pageable)", "gpu_memcpy", 16, 1, stream=7, correlation=7, bytes=8, tid=7),
        _x("gemm_kernel", "kernel", 41, 30, stream=7, correlation=8, tid=7),
        _x("gemm_kernel", "kernel", 131, 30, stream=7, correlation=9, tid=7),
        _x("wb/L00/fwd", "gpu_user_annotation", 40, 35, stream=7, tid=7),
    ]
    return {"traceEvents": ev + [{"ph": "M", "name": "process_name", "pid": 1}]}


def test_torch_gpu_trace_attribution_and_syncs(tmp_path):
    p = tmp_path / "t.json"
    p.write_text(json.dumps(gpu_chrome_trace()))
    ev = from_torch_trace(str(p))
    k = ev[ev["kind"] == "kernel"]
    assert list(k["layer"]) == ["L00", "L01"]
    assert set(k["pass"]) == {"fwd"}
    assert list(k["part"]) == ["attn", "attn/meta"]  # L01 launches inside its metadata build
    mc = ev[ev["kind"] == "memcpy"].iloc[0]
    assert (mc["name"], mc["bytes"], mc["layer"], mc["part"]) == ("DtoH", 8, "L00", "attn/meta")
    s = sync_counts(ev)
    assert s["count"].sum() == 2  # one cuda_sync + one DtoH copy, in one step
    assert host_syncs_per_step(ev) == 1
    # the GPU projection of ranges is preferred where present
    assert layer_ranges(ev, track="gpu")["layer"].tolist() == ["L00"]
    from workbench.opts.packing_savings import packing_builds
    b = packing_builds(ev)  # L00's build: [13, 33] us host range; the next launch (corr 9, at 130) starts at 131
    assert b["layer"].tolist() == ["L00", "L01"][:len(b)]


# --- a synthetic Nsight Systems SQLite export ------------------------------------------------------------------

SCHEMA = """
CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER,
  category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER,
  domainId INTEGER, uint64Value INTEGER, int64Value INTEGER, doubleValue REAL, uint32Value INTEGER,
  int32Value INTEGER, floatValue REAL, jsonTextId INTEGER, jsonText TEXT);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER,
  contextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER,
  shortName INTEGER NOT NULL, mangledName INTEGER, gridX INTEGER, blockX INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER,
  contextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, bytes INTEGER NOT NULL,
  copyKind INTEGER NOT NULL, srcKind INTEGER, dstKind INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER,
  contextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, syncType INTEGER NOT NULL,
  eventId INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER,
  globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER, callchainId INTEGER);
"""

MAIN, AUTOGRAD = 1001, 1002  # globalTids: autograd runs backward on its own thread


def make_nsys_sqlite(path):
    """One step of a 2-layer model with offload reloads: L01 backward reloads L00's input on a copy stream
    (stream 20) while L01's backward kernels run on stream 7; a `.item()` in L00's forward syncs the host."""
    con = sqlite3.connect(path)
    con.executescript(SCHEMA)
    strings = {}

    def sid(s):
        if s not in strings:
            strings[s] = len(strings) + 1
            con.execute("INSERT INTO StringIds VALUES (?, ?)", (strings[s], s))
        return strings[s]

    def nvtx(name, start, end, tid=MAIN, registered=True):
        # the nvtx package registers strings (textId); torch.cuda.nvtx writes `text`
        con.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, textId, domainId) "
                    "VALUES (?, ?, 59, ?, ?, ?, 1)",
                    (start, end, None if registered else name, tid, sid(name) if registered else None))

    corr = [0]

    def launch(name, t, k_start, k_end, stream=7, tid=MAIN):
        corr[0] += 1
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, globalTid, correlationId, nameId) "
                    "VALUES (?, ?, ?, ?, ?)", (t, t + 5, tid, corr[0], sid("cudaLaunchKernel_v7000")))
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, streamId, correlationId, "
                    "mangledName, demangledName, shortName) VALUES (?, ?, 0, ?, ?, ?, ?, ?)",
                    (k_start, k_end, stream, corr[0], sid(f"_Z{len(name)}{name}v"), sid(name + "()"), sid(name)))

    def memcpy(kind, t, start, end, nbytes, stream, tid=MAIN):
        corr[0] += 1
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, globalTid, correlationId, nameId) "
                    "VALUES (?, ?, ?, ?, ?)", (t, t + 5, tid, corr[0], sid("cudaMemcpyAsync_v3020")))
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, streamId, correlationId, bytes, "
                    "copyKind, srcKind, dstKind) VALUES (?, ?, 0, ?, ?, ?, ?, 0, 0)",
                    (start, end, stream, corr[0], nbytes, kind))

    def sync(sync_type, t, start, end, tid=MAIN):
        corr[0] += 1
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, globalTid, correlationId, nameId) "
                    "VALUES (?, ?, ?, ?, ?)", (t, end, tid, corr[0], sid("cudaStreamSynchronize_v3020")))
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (start, end, streamId, correlationId, "
                    "syncType) VALUES (?, ?, 7, ?, ?)", (start, end, corr[0], sync_type))

    nvtx("wb/step", 0, 10_000)
    nvtx("wb/fwd", 10, 4_000, registered=False)
    nvtx("wb/L00/fwd", 100, 1_000)
    nvtx("wb/L00/attn", 110, 600)
    nvtx("wb/L00/attn/meta", 120, 300)
    memcpy(2, 130, 200, 210, 8, 7)  # DtoH of the .item()
    sync(3, 139, 140, 290)  # the host waits for the copy
    launch("flash_fwd", 400, 450, 550)
    nvtx("wb/L01/fwd", 1_100, 2_000)
    launch("flash_fwd", 1_200, 1_250, 1_350)
    nvtx("wb/bwd", 4_000, 9_000)
    nvtx("wb/L01/bwd", 4_100, 6_000, tid=AUTOGRAD)
    nvtx("wb/L01/reload", 4_150, 4_400, tid=AUTOGRAD)
    memcpy(1, 4_160, 4_500, 4_900, 1 << 20, 20, tid=AUTOGRAD)  # HtoD reload on the copy stream
    launch("gemm_bwd", 4_450, 4_600, 5_000, tid=AUTOGRAD)  # overlaps the copy for 300 ns
    nvtx("wb/L00/bwd", 6_000, 8_500, tid=AUTOGRAD)
    nvtx("wb/L00/reload", 6_050, 6_250, tid=AUTOGRAD)
    memcpy(1, 6_060, 6_300, 6_700, 1 << 20, 20, tid=AUTOGRAD)  # not overlapped
    launch("gemm_bwd", 6_800, 6_800, 7_200, tid=AUTOGRAD)
    sync(2, 6_690, 6_700, 6_710, tid=AUTOGRAD)  # stream-wait-event: orders streams, does not block the host
    nvtx("wb/opt", 9_000, 9_900)
    con.commit()
    con.close()
    return path


def test_nsys_sqlite_synthetic(tmp_path):
    ev = from_nsys_sqlite(make_nsys_sqlite(str(tmp_path / "x.sqlite")))
    assert list(ev.columns) == COLUMNS
    assert set(ev["source"]) == {"nsys"}
    r = ev[ev["kind"] == "range"]
    assert "wb/fwd" in set(r["name"])  # `text` (torch.cuda.nvtx) as well as registered strings
    assert r.set_index("name").loc["wb/L01/reload", "part"] == "reload"
    k = ev[ev["kind"] == "kernel"]
    assert list(zip(k["name"], k["layer"], k["pass"])) == [
        ("flash_fwd", "L00", "fwd"), ("flash_fwd", "L01", "fwd"), ("gemm_bwd", "L01", "bwd"),
        ("gemm_bwd", "L00", "bwd")]
    h2d = ev[(ev["kind"] == "memcpy") & (ev["name"] == "HtoD")]
    assert list(h2d["layer"]) == ["L01", "L00"] and (h2d["bytes"] == 1 << 20).all()
    assert set(ev[ev["kind"] == "sync"]["name"]) == {"stream_sync", "stream_wait_event"}

    ov = copy_compute_overlap(ev, copy_kinds=("HtoD",)).set_index("layer")
    assert ov.loc["L01", "copy_ms"] == pytest.approx(400e-6)
    assert ov.loc["L01", "overlap_ms"] == pytest.approx(300e-6)
    assert ov.loc["L00", "overlap_ms"] == 0

    assert host_syncs_per_step(ev) == 1  # the stream-wait-event does not block the host
    sc = sync_counts(ev)
    assert sc.set_index(["name", "layer", "pass"]).loc[("stream_sync", "L00", "fwd"), "count"] == 1
    assert sc.set_index(["name", "layer", "pass"]).loc[("DtoH", "L00", "fwd"), "count"] == 1

    from workbench.opts.offload_savings import offload_layers
    off = offload_layers(ev).set_index("layer")
    # c is the copy itself (not the host time of queueing it)
    assert off.loc["L01", "c_ms"] == pytest.approx(400e-6)


def test_nsys_sqlite_missing_tables(tmp_path):
    p = str(tmp_path / "empty.sqlite")
    con = sqlite3.connect(p)
    con.executescript("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);")
    con.close()
    ev = from_nsys_sqlite(p)
    assert ev.empty and list(ev.columns) == COLUMNS


def test_diff_arms(tmp_path):
    a = from_nsys_sqlite(make_nsys_sqlite(str(tmp_path / "a.sqlite")))
    b = a[~((a["kind"] == "sync") | (a["name"] == "wb/L00/attn/meta"))]
    d = diff_arms(a, b).set_index(["kind", "name"])
    assert d.loc[("sync", "stream_sync"), "delta_count"] == -1
    assert d.loc[("range", "wb/L00/attn/meta"), "delta_ms"] == pytest.approx(-180e-6)
    assert d.loc[("kernel", "gemm_bwd"), "delta_count"] == 0


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(FIXTURES, "*.sqlite"))) or [None])
def test_nsys_sqlite_real_capture(path):
    """A real capture recorded on the GPU (tests/fixtures/*.sqlite) parses into ranges, kernels and syncs."""
    if path is None:
        pytest.skip("no real Nsight Systems capture in tests/fixtures/*.sqlite yet (recorded on the H100)")
    ev = from_nsys_sqlite(path)
    assert list(ev.columns) == COLUMNS
    kinds = set(ev["kind"])
    assert {"range", "kernel", "runtime"} <= kinds
    r = ev[ev["kind"] == "range"]
    assert r["name"].str.match(r"^wb/L\d+/fwd$").any()
    assert not layer_ranges(ev).empty
    k = ev[ev["kind"] == "kernel"]
    assert k["layer"].notna().any()  # kernels attributed to layers through correlation ids
    assert isinstance(sync_counts(ev), pd.DataFrame)


def test_real_h100_capture_readbacks_match_the_counter(tmp_path):
    """Third witness on a real H100 capture (`python -m workbench.ab --opt packing --trace nsys --layers 4
    --tokens 4096`, rebuild arm, committed as a fixture): the small DtoH copies per step, less the harness's loss
    read, equal what the dispatch counter counts for that arm: 3 syncs per metadata build x 4 layers x 2 passes
    (forward + recompute) = 24 (the counter's exact count is tested in tests/test_packing.py)."""
    from workbench.traces import from_nsys_sqlite
    from workbench.traces.analysis import HARNESS_READBACKS_PER_STEP, readbacks_per_step
    path = os.path.join(FIXTURES, "nsys_h100_packing_rebuild.sqlite")
    if not os.path.exists(path):
        pytest.skip("fixture missing")
    ev = from_nsys_sqlite(path)
    assert readbacks_per_step(ev) - HARNESS_READBACKS_PER_STEP == 3 * 4 * 2


def test_first_steps_keeps_one_step_and_its_per_step_counts():
    """Committed event tables are trimmed to one step: the per-step witnesses of the trimmed frame are those of
    the first step (here: step 0 has 2 readbacks, step 1 has 5 - the trim must not average them)."""
    from workbench.traces.analysis import first_steps, readbacks_per_step, steps_in
    rows = []
    for step, (t0, n_reads) in enumerate([(0, 2), (1000, 5), (2000, 1)]):
        rows.append(dict(source="torch", kind="range", name="wb/step", start_ns=t0, end_ns=t0 + 900, stream=None))
        for i in range(n_reads):
            rows.append(dict(source="torch", kind="memcpy", name="Memcpy DtoH", start_ns=t0 + 10 + i,
                             end_ns=t0 + 11 + i, stream=7, bytes=4))
        rows.append(dict(source="torch", kind="kernel", name="gemm", start_ns=t0 + 950, end_ns=t0 + 990, stream=7))
    ev = pd.DataFrame(rows).reindex(columns=COLUMNS)
    one = first_steps(ev, 1)
    assert steps_in(one) == 1 and readbacks_per_step(one) == 2
    assert (one["name"] == "gemm").sum() == 1  # the step's GPU tail, after its host range ended, is kept
    assert len(first_steps(ev, 3)) == len(ev) and steps_in(first_steps(ev, 2)) == 2
    with pytest.raises(ValueError):
        first_steps(ev, 0)
