"""The step decomposition: an exact partition of every step, on synthetic events with known answers and on the
committed H100 Nsight fixture."""
import os

import numpy as np
import pytest

from synthetic_traces import EXPECTED_ONE_STEP, one_step
from workbench.traces import decompose, from_nsys_sqlite

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "nsys_h100_packing_rebuild.sqlite")


def test_known_components_of_one_step():
    t = decompose.per_step(one_step())
    assert len(t) == 1
    row = t.iloc[0]
    assert row["step_ms"] == pytest.approx(0.100)
    for comp, us in EXPECTED_ONE_STEP.items():
        assert row[comp] * 1e3 == pytest.approx(us, abs=1e-9), comp
    assert row["residual_ms"] == pytest.approx(0.0, abs=1e-12)


def test_overlap_is_charged_to_the_higher_class():
    b = decompose.summary(one_step()).set_index("component")["ms"]
    # the elementwise kernel ran 15 us but 5 of them under the GEMM
    assert b["norm_elementwise"] * 1e3 == pytest.approx(10.0)
    assert b["gemm"] * 1e3 == pytest.approx(20.0)


def test_stall_needs_a_blocking_return_in_the_gap():
    """Negative control: without the synchronize call, the same gap is a launch gap."""
    ev = one_step()
    ev = ev[~((ev["kind"] == "runtime") & (ev["name"] == "cudaStreamSynchronize"))]
    row = decompose.per_step(ev).iloc[0]
    assert row["sync_stall"] == 0.0
    assert row["launch_gap"] * 1e3 == pytest.approx(45.0)


def test_compare_sums_to_the_step_difference_and_states_the_residual():
    a = one_step()
    b = a[~((a["kind"] == "kernel") & (a["name"] == "flash_fwd_kernel"))]  # the arm without the attention kernel
    d = decompose.compare(a, b, measured_ms=0.02).set_index("component")["saved_ms"]
    parts = d[list(decompose.COMPONENTS)].sum()
    assert parts == pytest.approx(d["step_ms"])
    assert d["attention"] * 1e3 == pytest.approx(15.0)
    # the window is the same: [60, 100) is now one gap, which the synchronize's return at 61 makes a stall
    assert d["sync_stall"] * 1e3 == pytest.approx(-25.0)
    assert d["launch_gap"] * 1e3 == pytest.approx(10.0)
    assert d["residual_ms"] == pytest.approx(0.02 - d["step_ms"])


def test_kernel_classes():
    c = decompose.kernel_class
    assert c("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT") == "gemm"
    assert c("flash_fwd_kernel") == "attention"
    assert c("DeviceRadixSortOnesweepKernel") == "glue"
    assert c("vectorized_elementwise_kernel", part="attn/meta") == "glue"
    assert c("CatArrayBatchedCopy") == "copy"
    assert c("vectorized_elementwise_kernel") == "norm_elementwise"
    assert c("multi_tensor_apply_kernel", pass_="opt") == "optimizer"
    assert c("some_custom_kernel") == "other"


def test_fixture_partition_is_exact_per_step():
    ev = from_nsys_sqlite(FIXTURE)
    t = decompose.per_step(ev)
    assert len(t) == 2
    assert np.allclose(t["residual_ms"], 0.0, atol=1e-9)
    busy = t[list(decompose.BUSY)].sum(axis=1)
    # busy = the union of all kernels in the window, computed independently
    win = decompose.step_windows(ev)
    k, _ = decompose._gpu(ev)
    for w, b in zip(win.itertuples(), busy):
        iv = decompose._clip(k[["start_ns", "end_ns"]].to_numpy(dtype=np.int64), w.start_ns, w.end_ns)
        assert decompose._length(decompose._union(iv)) / 1e6 == pytest.approx(b)
    by_layer = decompose.breakdown(ev, by_layer=True)
    comps = by_layer[by_layer["component"] != "step_ms"].groupby("step")["ms"].sum()
    assert np.allclose(comps.to_numpy(), t["step_ms"].to_numpy(), rtol=2e-3)  # per-layer groups may overlap a little


def test_fixture_domain_filter_drops_cub_ranges():
    ev = from_nsys_sqlite(FIXTURE)
    r = ev[ev["kind"] == "range"]
    assert not r["name"].str.startswith("cub::").any()
    assert (r["name"] == "wb/L00/attn/meta").sum() == 4


def test_top_kernels_per_step():
    top = decompose.top_kernels(from_nsys_sqlite(FIXTURE), 5)
    assert len(top) == 5 and top["ms"].is_monotonic_decreasing
