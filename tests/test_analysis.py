"""workbench.analysis against small synthetic folders and frames (and the committed H100 harness run), the campaign
runner's plan / skip / timeout bookkeeping, and the README results generator."""
from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest

from workbench import analysis as an
from workbench import campaign, readme_results

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROFILES = os.path.join(ROOT, "profiles")
HARNESS = os.path.join(PROFILES, "2026-11-22_h100_harness")


# --- synthetic folders ----------------------------------------------------------------------------------------------

def _arm(arm, step_ms, fwd_ms, bwd_ms, syncs, **kw):
    return {"arm": arm, "step_ms": step_ms, "step_ms_p20": step_ms * 0.99, "step_ms_p80": step_ms * 1.01, "n": 10,
            "fwd_ms": fwd_ms, "bwd_ms": bwd_ms, "syncs_per_step": syncs, "peak_mem_mib": kw.pop("mem", 1000.0),
            "tokens_per_s": 1.0, "loss": 5.0, "status": "ok", "equivalent": True, "bitwise": True, **kw}


def write_ab_run(d, device="cuda:0", gpu="NVIDIA H100 80GB HBM3"):
    os.makedirs(d, exist_ok=True)
    summary = {"run_id": "r1", "device": device, "comparisons": [
        {"opt": "packing", "model": "qwen3-14b", "layers": 8, "tokens": 16384, "attn": "sdpa",
         "baseline": _arm("rebuild", 114.3, 143.3, 105.8, 16.0, cuda_sync_warnings_per_step=16.0,
                          trace_syncs_per_step=16.0),
         "optimized": _arm("cached", 100.0, 100.0, 100.0, 1.0, cuda_sync_warnings_per_step=2.0,
                           trace_syncs_per_step=4.0, mem=1100.0),
         "others": [_arm("precomputed", 99.0, 99.0, 99.0, 0.0)], "speedup": 1.143, "equivalent": True,
         "status": "ok", "savings_model": {"formula": "(L-1)*s", "predicted_ms": 12.0, "measured_ms": 14.3,
                                           "inputs": {"L": 8}}},
    ]}
    with open(os.path.join(d, "summary.json"), "w") as f:
        json.dump(summary, f)
    meta = {"command": "python -m workbench.ab --opt packing --out X", "device": {"type": "cuda", "name": gpu},
            "versions": {"torch": "2.11.0+cu130", "transformers": "5.17.0"}}
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(meta, f)
    rows = []
    for arm, per_layer in (("rebuild", 2), ("cached", 0)):
        for step in (0, 1):
            rows.append(dict(run_id="r1", opt="packing", arm=arm, rep=0, step=step, metric="step_ms",
                             value=100.0 + step, unit="ms"))
            for layer in ("L00", "L01"):
                rows.append(dict(run_id="r1", opt="packing", arm=arm, rep=0, step=step,
                                 metric=f"syncs_by_layer_pass/{layer}/forward", value=per_layer, unit="count"))
            rows.append(dict(run_id="r1", opt="packing", arm=arm, rep=0, step=step,
                             metric="syncs_by_source/packing.py:99 (build_meta)", value=2 * per_layer or 1,
                             unit="count"))
    pd.DataFrame(rows).to_csv(os.path.join(d, "results.csv"), index=False)


def write_offload_bench(d):
    os.makedirs(d, exist_ok=True)
    rows = []
    for L, c, g in ((4, 1.0, 3.0), (8, 1.0, 3.0)):
        for arm, ms in (("sync_reload", 100.0 + 1.0 * (L - 1)), ("double_buffer", 100.0), ("no_offload", 99.0)):
            rows.append({"config": f"llama-3.1-8b:L{L}:T16384", "model": "llama-3.1-8b", "layers": L,
                         "tokens": 16384, "arm": arm, "status": "ok", "step_ms": ms, "fwd_ms": 10.0, "bwd_ms": ms - 10,
                         "peak_mem_mib": 2000.0 + (300 if arm == "double_buffer" else 0), "check_syncs": 0,
                         "check_cuda_sync_warnings": 0, "c_ms": c, "g_ms": g, "predicted_saving_ms": (L - 1) * c,
                         "measured_saving_ms": 1.0 * (L - 1), "overlap_efficiency": 1.0,
                         "device_name": "NVIDIA H100 80GB HBM3"})
    pd.DataFrame(rows).to_csv(os.path.join(d, "summary.csv"), index=False)
    pd.DataFrame([{"config": "llama-3.1-8b:L4:T16384", "layer": i, "reload_ms": 1.0, "compute_ms": 3.0}
                  for i in range(4)]).to_csv(os.path.join(d, "layers.csv"), index=False)
    with open(os.path.join(d, "summary.json"), "w") as f:
        json.dump({"bench": "offload", "command": "python -m workbench.bench.offload --out X",
                   "env": {"torch": "2.11.0+cu130", "transformers": "5.17.0", "device_name": "H100"}}, f)


def write_moe_bench(d):
    os.makedirs(d, exist_ok=True)
    rows = [{"model": "gpt-oss-20b", "layers": 4, "tokens": 8192, "arm": "eager", "step_ms": 130.0,
             "fwd_ms": 50.0, "bwd_ms": 80.0, "syncs_per_step": 900, "cuda_sync_warnings": 900,
             "syncs_L00_forward": 100, "peak_mem_mib": 1.0, "equivalent": True},
            {"model": "gpt-oss-20b", "layers": 4, "tokens": 8192, "arm": "sort_bincount", "step_ms": 115.0,
             "fwd_ms": 40.0, "bwd_ms": 75.0, "syncs_per_step": 24, "cuda_sync_warnings": 24, "syncs_L00_forward": 3,
             "peak_mem_mib": 1.0, "equivalent": True, "predicted_saving_ms": 12.0, "measured_saving_ms": 15.0,
             "savings_formula": "syncs_removed*stall_ms + launches_removed*launch_ms"},
            {"model": "gpt-oss-20b", "layers": 4, "tokens": 8192, "arm": "grouped", "step_ms": 110.0,
             "fwd_ms": 38.0, "bwd_ms": 72.0, "syncs_per_step": 0, "cuda_sync_warnings": 0, "syncs_L00_forward": 0,
             "peak_mem_mib": 1.0, "equivalent": True, "predicted_saving_ms": 14.0, "measured_saving_ms": 20.0}]
    pd.DataFrame(rows).to_csv(os.path.join(d, "moe_arms.csv"), index=False)
    with open(os.path.join(d, "moe_summary.json"), "w") as f:
        json.dump({"command": "python -m workbench.bench.moe --out X", "env": {"device": {"name": "H100"}}}, f)


def write_packing_bench(d):
    """The shape of workbench.bench.packing's summary.json: records in the JSON, no summary CSV."""
    os.makedirs(d, exist_ok=True)
    arms = [{"model": "qwen3-0.6b", "layers": 28, "tokens": 16384, "backend": be, "arm": arm, "step_ms": ms,
             "fwd_ms": ms / 3, "bwd_ms": 2 * ms / 3, "syncs_per_step": syncs, "peak_mem_mib": 100.0,
             "equivalent": True}
            for be in ("varlen", "sdpa") for arm, ms, syncs in (("rebuild", 110.0, 168), ("cached", 100.0, 3),
                                                               ("precomputed", 99.0, 0))]
    savings = [{"model": "qwen3-0.6b", "layers": 28, "tokens": 16384, "backend": be, "arm": arm, "s_ms": 0.2,
                "predicted_ms": pred, "measured_ms": meas, "formula": "(L*p - b)*s"}
               for be in ("varlen", "sdpa")
               for arm, pred, meas in (("cached", 11.0, 10.0), ("precomputed", 11.2, 11.0))]
    sweep = [{"model": "qwen3-0.6b", "backend": "varlen", "layers": L, "rebuild_ms": 10.0 * L + 0.4 * L,
              "cached_ms": 10.0 * L + 0.4, "saving_ms": 0.4 * (L - 1)} for L in (4, 8, 16, 28)]
    fits = [{"model": "qwen3-0.6b", "backend": "varlen", "layers": [4, 8, 16, 28], "slope_ms_per_layer": 0.4,
             "predicted_slope_ms_per_layer": 0.5}]
    with open(os.path.join(d, "summary.json"), "w") as f:
        json.dump({"run_id": "p", "env": {"device_name": "NVIDIA H100 80GB HBM3", "torch": "2.11.0+cu130"},
                   "command": "python -m workbench.bench.packing --out X", "arms": arms, "savings": savings,
                   "skipped": [], "sweep": sweep, "sweep_fits": fits}, f)
    pd.DataFrame([{"run_id": "p", "section": "arms", "model": "qwen3-0.6b", "metric": "step_ms", "value": 1.0}]
                 ).to_csv(os.path.join(d, "results.csv"), index=False)
    child = os.path.join(d, "flex-qwen3-0.6b")  # the flex child's own output, merged into the parent's
    os.makedirs(child)
    with open(os.path.join(child, "summary.json"), "w") as f:
        json.dump({"command": "python -m workbench.bench.packing --flex-only", "arms": arms[:2]}, f)


@pytest.fixture()
def folder(tmp_path):
    write_ab_run(str(tmp_path / "ab_all"))
    write_offload_bench(str(tmp_path / "offload"))
    write_moe_bench(str(tmp_path / "moe"))
    write_packing_bench(str(tmp_path / "run7"))  # folder name is not the suite's: found by its command
    return str(tmp_path)


# --- discovery and comparisons ----------------------------------------------------------------------------------

def test_discover_kinds_and_commands(folder):
    runs = an.discover(folder).set_index("rel_path")
    assert runs.loc["ab_all", "kind"] == "ab" and runs.loc["ab_all", "suite"] == "packing"
    assert runs.loc["ab_all", "command"].startswith("python -m workbench.ab")
    assert runs.loc["offload", "kind"] == "bench" and runs.loc["offload", "suite"] == "offload"
    assert runs.loc["moe", "kind"] == "bench" and runs.loc["moe", "suite"] == "moe"
    assert runs.loc["moe", "command"] == "python -m workbench.bench.moe --out X"
    assert runs.loc["run7", "kind"] == "bench" and runs.loc["run7", "suite"] == "packing"
    assert runs.loc["run7", "torch"] == "2.11.0+cu130"
    assert not runs.index.str.contains("flex").any()
    assert an.discover(os.path.join(folder, "missing")).empty


def test_pct_gain_is_the_articles_throughput_gain():
    assert an.pct_gain(114.3, 100.0) == pytest.approx(14.3)
    assert np.isnan(an.pct_gain(None, 100.0)) and np.isnan(an.pct_gain(1.0, 0.0))


def test_ab_comparisons_and_arms(folder):
    c = an.ab_comparisons(folder)
    assert len(c) == 1
    r = c.iloc[0]
    assert (r["baseline"], r["optimized"]) == ("rebuild", "cached")
    assert r["step_gain_pct"] == pytest.approx(14.3)
    assert r["fwd_gain_pct"] == pytest.approx(43.3)
    assert r["bwd_gain_pct"] == pytest.approx(5.8)
    assert r["extra_mem_mib"] == pytest.approx(100.0)
    assert r["gpu_name"] == "NVIDIA H100 80GB HBM3"
    assert r["source"] == os.path.join(os.path.basename(folder), "ab_all", "summary.json")
    arms = an.ab_arms(folder)
    assert list(arms["arm"]) == ["rebuild", "cached", "precomputed"]
    assert list(arms["role"]) == ["baseline", "optimized", "other"]


def test_bench_comparisons_pick_baseline_and_optimized(folder):
    b = an.bench_comparisons(folder)
    off = b[b["opt"] == "offload"].sort_values("layers")
    assert list(off["layers"]) == [4, 8]
    assert list(off["baseline"].unique()) == ["sync_reload"] and list(off["optimized"].unique()) == ["double_buffer"]
    assert off.iloc[1]["step_gain_pct"] == pytest.approx(7.0)
    assert off.iloc[0]["extra_mem_mib"] == pytest.approx(300.0)
    moe = b[b["opt"] == "moe"].iloc[0]
    assert (moe["baseline"], moe["optimized"]) == ("eager", "sort_bincount")
    assert moe["predicted_ms"] == 12.0 and moe["measured_ms"] == 15.0  # from the optimized arm's row
    frames = an.bench_frames(folder, "moe")
    assert "summary" in frames and "formula" in frames["summary"]  # moe_arms.csv read as summary, aliases applied


def test_packing_bench_json_records(folder):
    frames = an.bench_frames(folder, "packing")
    assert {"summary", "savings", "sweep", "sweep_fits", "results_long"} <= set(frames)
    c = an.bench_comparisons(folder, "packing").set_index("attn")
    assert set(c.index) == {"varlen", "sdpa"} and (c["optimized"] == "cached").all()
    assert c.loc["varlen", "step_gain_pct"] == pytest.approx(10.0)
    assert c.loc["varlen", "predicted_ms"] == 11.0 and c.loc["varlen", "measured_ms"] == 10.0  # from "savings"
    sv = an.savings_table(folder)
    assert set(sv[(sv["opt"] == "packing") & (sv["from"] == "bench")]["arm"]) == {
        "cached (varlen)", "precomputed (varlen)", "cached (sdpa)", "precomputed (sdpa)"}
    sweep, fit = an.bench_sweep(folder, "packing")
    assert sweep["layers"].tolist() == [4, 8, 16, 28] and set(sweep["group"]) == {"packing qwen3-0.6b varlen"}
    f = fit.iloc[0]
    assert f["slope_ms_per_layer"] == pytest.approx(0.4) and f["implied_zero_layer"] == pytest.approx(1.0)
    assert f["predicted_slope_ms_per_layer"] == 0.5 and f["slope_error_pct"] == pytest.approx(-20.0)
    w = an.three_witnesses(folder)
    assert set(w[(w["opt"] == "packing") & (w["run"] == "run7")]["model"]) == {"qwen3-0.6b (varlen)",
                                                                                "qwen3-0.6b (sdpa)"}


def test_claims_table_holds_reference_numbers():
    t = an.claims_table()
    got = {(r.opt, r.scope, r.model): r.claimed_low_pct for r in t.itertuples()}
    assert got[("packing", "step", "qwen3-14b")] == 14.3
    assert got[("packing", "fwd", "qwen3-14b")] == 43.3
    assert got[("packing", "bwd", "qwen3-14b")] == 5.8
    assert got[("offload", "step", "8B")] == 8.40
    assert got[("offload", "step", "32B")] == 4.61
    assert got[("moe", "hotspot_fwd", "gpt-oss-20b")] == 23.0
    moe = t[(t["opt"] == "moe") & (t["scope"] == "step")].iloc[0]
    assert (moe["claimed_low_pct"], moe["claimed_high_pct"]) == (10.0, 15.0)


def test_claims_vs_ours_matches_same_model_and_says_no_data(folder):
    cvo = an.claims_vs_ours(folder)
    step = cvo[(cvo["opt"] == "packing") & (cvo["scope"] == "step")]
    assert len(step) == 1 and step.iloc[0]["same_model"] and step.iloc[0]["ours_pct"] == pytest.approx(14.3)
    off8 = cvo[(cvo["opt"] == "offload") & (cvo["model"] == "8B")]
    assert off8["same_model"].all() and set(off8["ours_model"]) == {"llama-3.1-8b"}
    off32 = cvo[(cvo["opt"] == "offload") & (cvo["model"] == "32B")]
    assert not off32["same_model"].any() and off32["ours_pct"].notna().all()  # other sizes shown, marked
    allrow = cvo[cvo["opt"] == "all"]
    assert allrow["note"].tolist() == ["no data"] and allrow["ours_pct"].isna().all()
    assert an.same_model("8B", "qwen3-8b") and not an.same_model("qwen3-14b", "qwen3-8b")


def test_savings_table_predicted_vs_measured(folder):
    sv = an.savings_table(folder)
    ab = sv[sv["from"] == "ab"].iloc[0]
    assert ab["error_ms"] == pytest.approx(2.3) and ab["measured_over_predicted"] == pytest.approx(14.3 / 12.0)
    off = sv[sv["opt"] == "offload"]
    assert len(off) == 2 and set(off["arm"]) == {"double_buffer"}  # config-level numbers kept once per config
    assert (off["measured_over_predicted"] == 1.0).all()
    moe = sv[sv["opt"] == "moe"].set_index("arm")
    assert set(moe.index) == {"sort_bincount", "grouped"} and moe.loc["grouped", "predicted_ms"] == 14.0
    fig = an.savings_figure(sv)
    assert len(fig.data) >= 2


# --- L sweep ---------------------------------------------------------------------------------------------------------

def test_linear_fit_exact_and_degenerate():
    f = an.linear_fit([1, 2, 4, 8], [0, 2, 6, 14])
    assert f["slope"] == pytest.approx(2.0) and f["intercept"] == pytest.approx(-2.0)
    assert f["r2"] == pytest.approx(1.0) and f["rmse"] == pytest.approx(0.0, abs=1e-9) and f["n"] == 4
    assert np.isnan(an.linear_fit([3, 3], [1, 2])["slope"]) and np.isnan(an.linear_fit([1], [1])["slope"])


def test_l_sweep_fit_recovers_s_and_the_minus_one():
    s_ms, rows = 0.5, []
    for L in (4, 8, 16, 28):
        base = 10.0 * L + 2 * s_ms * L  # rebuild: one build per layer, forward + recompute
        rows += [{"bench": "packing", "model": "qwen3-0.6b", "tokens": 16384, "layers": L, "arm": "rebuild",
                  "step_ms": base, "s_ms": s_ms},
                 {"bench": "packing", "model": "qwen3-0.6b", "tokens": 16384, "layers": L, "arm": "cached",
                  "step_ms": base - 2 * s_ms * (L - 1), "s_ms": s_ms}]
    summary = pd.DataFrame(rows)
    sweep = an.l_sweep(summary)
    assert list(sweep["layers"]) == [4, 8, 16, 28]
    assert sweep["saving_ms"].tolist() == pytest.approx([2 * s_ms * (L - 1) for L in (4, 8, 16, 28)])
    pred = an.predicted_slopes(summary)
    assert pred == {"packing qwen3-0.6b 16384": pytest.approx(1.0)}
    fits = an.l_sweep_fit(sweep, predicted_slope_ms=pred)
    fit = fits.iloc[0]
    assert fit["slope_ms_per_layer"] == pytest.approx(1.0) and fit["intercept_ms"] == pytest.approx(-1.0)
    assert fit["r2"] == pytest.approx(1.0) and fit["implied_zero_layer"] == pytest.approx(1.0)
    assert fit["slope_error_pct"] == pytest.approx(0.0, abs=1e-9)
    assert len(an.l_sweep_figure(sweep, fits).data) == 2
    assert an.l_sweep(pd.DataFrame()).empty and an.l_sweep_fit(an.l_sweep(pd.DataFrame())).empty


def test_l_sweep_from_ab_comparisons():
    comps = pd.DataFrame([{"opt": "packing", "model": "qwen3-0.6b", "tokens": 16384, "baseline": "rebuild",
                           "optimized": "cached", "layers": L, "baseline_step_ms": 100.0 + 3 * L + dx,
                           "optimized_step_ms": 100.0 + 3 + dx} for L, dx in ((2, 0), (4, 0), (4, 2), (8, 0))])
    sweep = an.l_sweep_comparisons(comps)
    assert sweep["layers"].tolist() == [2, 4, 8] and sweep["saving_ms"].tolist() == pytest.approx([3.0, 9.0, 21.0])
    fit = an.l_sweep_fit(sweep).iloc[0]
    assert fit["slope_ms_per_layer"] == pytest.approx(3.0) and fit["implied_zero_layer"] == pytest.approx(1.0)
    assert an.l_sweep_comparisons(pd.DataFrame()).empty


def test_l_sweep_from_a_bench_folder(folder):
    sweep = an.l_sweep(an.bench_frames(folder, "offload")["summary"])
    assert list(sweep["saving_ms"]) == pytest.approx([3.0, 7.0])
    fit = an.l_sweep_fit(sweep).iloc[0]
    assert fit["slope_ms_per_layer"] == pytest.approx(1.0) and fit["implied_zero_layer"] == pytest.approx(1.0)


# --- syncs -----------------------------------------------------------------------------------------------------------

def test_sync_attribution_by_layer_and_source(folder):
    attr = an.syncs_attribution(folder)
    by_layer = an.syncs_by_layer(attr)
    ab = by_layer[by_layer["run"] == "ab_all"].set_index(["arm", "layer"])
    assert ab.loc[("rebuild", "L00"), "forward"] == 2 and ab.loc[("rebuild", "L01"), "total"] == 2
    assert ab.loc[("cached", "L00"), "total"] == 0
    moe = by_layer[by_layer["opt"] == "moe"].set_index("arm")
    assert moe.loc["eager", "forward"] == 100 and moe.loc["sort_bincount", "forward"] == 3
    src = an.syncs_by_source(attr)
    assert src[(src["arm"] == "rebuild")]["syncs_per_step"].tolist() == [4.0]
    assert len(an.syncs_figure(by_layer).data) >= 2


def test_three_witnesses_agree_or_explain(folder):
    w = an.three_witnesses(folder)
    ab = w[w["run"] == "ab_all"].set_index("arm")
    assert ab.loc["rebuild", "agree"] is True or ab.loc["rebuild", "agree"] == True  # noqa: E712
    assert ab.loc["cached", "agree"] == False  # noqa: E712
    assert "debug mode - counter = +1.0" in ab.loc["cached", "note"]
    assert "trace - counter = +3.0" in ab.loc["cached", "note"]
    assert ab.loc["precomputed", "agree"] is None and "one witness only" in ab.loc["precomputed", "note"]
    off = w[w["opt"] == "offload"]
    assert set(off["scope"]) == {"check"} and off["agree"].all()
    moe = w[w["opt"] == "moe"].set_index("arm")
    assert moe.loc["eager", "scope"] == "step" and moe.loc["eager", "cuda_debug_syncs_per_step"] == 900


# --- traces ----------------------------------------------------------------------------------------------------------

def _events():
    from workbench.traces import COLUMNS
    ms = 1_000_000
    rows = [
        dict(kind="range", name="wb/step", start_ns=0, end_ns=100 * ms, tid=1),
        dict(kind="range", name="wb/L00/fwd", start_ns=1 * ms, end_ns=20 * ms, tid=1, layer="L00", **{"pass": "fwd"}),
        dict(kind="range", name="wb/L00/attn/meta", start_ns=2 * ms, end_ns=3 * ms, tid=1, layer="L00",
             part="attn/meta", **{"pass": "fwd"}),
        dict(kind="range", name="wb/L01/fwd", start_ns=20 * ms, end_ns=40 * ms, tid=1, layer="L01", **{"pass": "fwd"}),
        dict(kind="range", name="wb/L01/attn/meta", start_ns=21 * ms, end_ns=23 * ms, tid=1, layer="L01",
             part="attn/meta", **{"pass": "fwd"}),
        dict(kind="range", name="wb/L00/reload", start_ns=50 * ms, end_ns=60 * ms, tid=1, layer="L00", part="reload",
             **{"pass": "bwd"}),
        dict(kind="kernel", name="gemm", start_ns=5 * ms, end_ns=15 * ms, stream=7, layer="L00", **{"pass": "fwd"}),
        dict(kind="kernel", name="gemm", start_ns=52 * ms, end_ns=58 * ms, stream=7, layer="L01", **{"pass": "bwd"}),
        dict(kind="memcpy", name="HtoD", start_ns=50 * ms, end_ns=60 * ms, stream=13, bytes=1e6, layer="L00",
             **{"pass": "bwd"}),
        dict(kind="sync", name="stream_sync", start_ns=3 * ms, end_ns=4 * ms, tid=1, layer="L00", **{"pass": "fwd"}),
        dict(kind="range", name="wb/L00/fwd", start_ns=200 * ms, end_ns=210 * ms, tid=1, layer="L00",
             **{"pass": "fwd"}),  # outside the step: dropped
    ]
    df = pd.DataFrame(rows)
    df["source"] = "nsys"
    for c in COLUMNS:
        if c not in df:
            df[c] = None
    return df[COLUMNS]


def test_stream_roles_copy_vs_compute():
    r = an.stream_roles(_events()).set_index("stream")
    assert r.loc[7, "role"] == "compute" and r.loc[13, "role"] == "copy"
    assert r.loc[13, "memcpy_bytes"] == 1e6 and r.loc[7, "kernel_ms"] == pytest.approx(16.0)


def test_layer_timeline_lanes_and_categories():
    tl = an.layer_timeline(_events())
    assert set(tl["lane"]) == {"host", "host meta / reload", "host syncs", "stream 7 (compute)", "stream 13 (copy)"}
    assert set(tl.loc[tl["lane"] == "host meta / reload", "category"]) == {"metadata build", "reload"}
    assert (tl["category"] == "metadata build").sum() == 2 and (tl["category"] == "reload").sum() == 1
    assert tl["end_ms"].max() <= 100.0  # one step only
    meta = tl[tl["category"] == "metadata build"]
    assert meta["dur_ms"].tolist() == pytest.approx([1.0, 2.0]) and meta["start_ms"].tolist() == pytest.approx([2, 21])
    only0 = an.layer_timeline(_events(), layers=["L00"])
    assert set(only0.loc[only0["lane"].str.startswith("host"), "layer"]) == {"L00"}
    fig = an.timeline_figure(tl)
    assert {t.name for t in fig.data} >= {"metadata build", "reload", "sync"}
    assert an.layer_timeline(pd.DataFrame()).empty


def test_layer_timeline_merges_back_to_back_kernels():
    ev = _events()
    ms = 1_000_000
    extra = ev[ev["kind"] == "kernel"].iloc[[0, 0, 0]].copy()
    extra["start_ns"] = [15 * ms, 15 * ms + 10_000, 18 * ms]  # 0 and 0.01 ms gaps merge; 2.99 ms does not
    extra["end_ns"] = [15 * ms + 10_000, 16 * ms, 19 * ms]
    ev = pd.concat([ev, extra], ignore_index=True)
    tl = an.layer_timeline(ev)
    s7 = tl[(tl["lane"] == "stream 7 (compute)") & (tl["layer"] == "L00")]
    assert s7["name"].tolist() == ["3 kernels", "gemm"]
    assert s7["dur_ms"].tolist() == pytest.approx([11.0, 1.0])
    assert len(an.layer_timeline(ev, merge_gap_ms=None).query("lane == 'stream 7 (compute)'")) == 5


def test_meta_builds_per_layer():
    mb = an.meta_builds(_events()).set_index("layer")
    assert mb.loc["L00", "builds_per_step"] == 1 and mb.loc["L01", "median_ms"] == pytest.approx(2.0)


def test_trace_files_and_load(tmp_path):
    from workbench.traces import save_events
    d = tmp_path / "run" / "traces" / "packing"
    d.mkdir(parents=True)
    save_events(_events(), str(d / "rebuild"))
    (d / "rebuild.nsys-rep").write_bytes(b"x")
    tf = an.trace_files(str(tmp_path))
    assert set(tf["format"]) == {"events", "nsys"} and set(tf["run"]) == {"run"} and set(tf["opt"]) == {"packing"}
    assert tf["has_events"].all()
    ev = an.load_trace(str(d / "rebuild.nsys-rep"))  # the saved events next to it
    assert len(ev) == len(_events())
    evs = an.arm_events(str(tmp_path))
    assert list(evs) == [("run", "packing", "rebuild")]


# --- committed H100 harness run ----------------------------------------------------------------------------------

def test_committed_harness_run_is_discovered_with_its_command():
    runs = an.discover(PROFILES)
    h = runs[runs["rel_path"] == "2026-11-22_h100_harness"].iloc[0]
    assert h["kind"] == "overhead"
    assert h["command"].startswith("python -m workbench.bench.overhead --model qwen3-0.6b --tokens 16384")
    assert h["device_name"] == "NVIDIA H100 80GB HBM3"
    assert (h["torch"], h["transformers"]) == ("2.11.0+cu130", "5.17.0")
    assert an.parse_probe(os.path.join(HARNESS, "probe.txt"))["driver"] == "580.159.04"


def test_committed_overhead_table_matches_the_json():
    with open(os.path.join(HARNESS, "overhead.json")) as f:
        raw = json.load(f)
    ov = an.overhead_table(HARNESS).set_index("variant")
    assert list(ov.index) == [r["variant"] for r in raw["rows"]]
    for r in raw["rows"]:
        assert ov.loc[r["variant"], "overhead_pct"] == r["overhead_pct"]
        assert ov.loc[r["variant"], "n"] == r["n"]
    samples = an.overhead_samples(HARNESS)
    assert len(samples) == sum(len(v) for v in raw["samples_ms"].values())
    assert samples[samples["variant"] == "off"]["step_ms"].median() == pytest.approx(ov.loc["off", "step_ms"])


def test_empty_folder_gives_empty_frames_with_columns(tmp_path):
    for fn, cols in ((an.ab_comparisons, an.AB_COMPARISON_COLUMNS), (an.savings_table, an.SAVINGS_COLUMNS),
                     (an.three_witnesses, an.WITNESS_COLUMNS), (an.overhead_table, an.OVERHEAD_COLUMNS),
                     (an.syncs_attribution, an.SYNC_COLUMNS), (an.trace_files, an.TRACE_COLUMNS)):
        df = fn(str(tmp_path))
        assert df.empty and list(df.columns) == cols, fn.__name__
    assert an.claims_vs_ours(str(tmp_path))["note"].eq("no data").all()


# --- campaign ----------------------------------------------------------------------------------------------------

def test_campaign_plan_and_dry_run(tmp_path, capsys):
    jobs = campaign.plan(str(tmp_path), "all")
    assert [j.name for j in jobs] == ["packing", "offload", "moe", "ab_all", "ab_packing_nsys", "ab_offload_nsys",
                                      "ab_moe_nsys", "ab_witness", "witness_ops"]
    cmds = {j.name: j.command for j in jobs}
    assert cmds["packing"] == f"python -m workbench.bench.packing --out {tmp_path}/packing"
    assert cmds["ab_all"] == ("python -m workbench.ab --opt all --trace torch --steps 3 --warmup 2 --reps 3 "
                              f"--out {tmp_path}/ab_all")
    for opt in ("packing", "offload", "moe"):
        assert cmds[f"ab_{opt}_nsys"] == (f"python -m workbench.ab --opt {opt} --trace nsys --steps 2 --warmup 1 "
                                          f"--reps 1 --out {tmp_path}/ab_{opt}_nsys")
    limits = {j.name: j.min_timeout_s for j in jobs}
    assert limits["ab_all"] == campaign.AB_ALL_TIMEOUT_S and limits["packing"] == 0
    smoke = {j.name: j for j in campaign.plan(str(tmp_path), "ab,offload", smoke=True)}
    assert "--smoke" in smoke["offload"].args and "--tokens" in smoke["ab_all"].args
    assert "needs a CUDA device" in campaign.skip_reason(smoke["ab_packing_nsys"])
    with pytest.raises(SystemExit):
        campaign.plan(str(tmp_path), "nope")
    assert campaign.main(["--out", str(tmp_path), "--suite", "ab", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "python -m workbench.ab --opt all --trace torch" in out
    assert not os.path.exists(tmp_path / "commands.json")


def test_campaign_records_skips_failures_and_timeouts(tmp_path):
    jobs = [campaign.Job("missing", "workbench.bench.does_not_exist", ["--out", str(tmp_path / "missing")],
                         str(tmp_path / "missing")),
            campaign.Job("fine", "platform", [], str(tmp_path / "fine")),
            campaign.Job("slow", "timeit", ["-n", "1", "import time; time.sleep(30)"], str(tmp_path / "slow"))]
    doc = campaign.run(jobs, str(tmp_path), timeout_s=3, argv=["--out", str(tmp_path)])
    st = {j["name"]: j for j in doc["jobs"]}
    assert st["missing"]["status"] == "skipped" and "does not exist yet" in st["missing"]["reason"]
    assert st["fine"]["status"] == "ok" and st["fine"]["rc"] == 0
    assert st["slow"]["status"] == "timeout" and st["slow"]["wall_s"] < 30
    with open(tmp_path / "commands.json") as f:
        disk = json.load(f)
    assert [j["status"] for j in disk["jobs"]] == ["skipped", "ok", "timeout"]
    assert disk["jobs"][1]["command"] == "python -m platform" and disk["jobs"][1]["out"] == "fine"
    assert os.path.exists(tmp_path / "logs" / "fine.log")
    assert open(tmp_path / "logs" / "fine.log").read().startswith("$ python -m platform")


def test_campaign_saves_a_jobs_json_stdout(tmp_path):
    log = tmp_path / "w.log"
    log.write_text('noise\n[{"op": "item", "counter": 1, "cpu_only": 0, "cuda_debug_warnings": 1}]\n')
    campaign._save_last_json(str(log), str(tmp_path / "witness_ops" / "witness.json"))
    ops = an.witness_ops(str(tmp_path))
    assert ops["op"].tolist() == ["item"] and ops["agree"].all()


# --- README results ----------------------------------------------------------------------------------------------

def test_readme_results_from_committed_profiles():
    md = readme_results.results_markdown(PROFILES)
    assert "profiles/2026-11-22_h100_harness/overhead.json" in md
    assert "python -m workbench.bench.overhead --model qwen3-0.6b --tokens 16384 --reps 5 --steps 4" in md
    assert "+0.26%" in md and "NVIDIA H100 80GB HBM3" in md and "torch 2.11.0+cu130" in md


def test_readme_results_gpu_rows_only_and_named_files(tmp_path):
    prof = tmp_path / "profiles"
    write_ab_run(str(prof / "gpu_run"))
    write_ab_run(str(prof / "cpu_run"), device="cpu", gpu="x86_64")
    write_packing_bench(str(prof / "packing_gpu"))
    md = readme_results.results_markdown(str(prof), repo=str(tmp_path))
    assert "profiles/gpu_run/summary.json" in md and "profiles/cpu_run/summary.json" not in md
    assert "| packing | qwen3-0.6b L28 T16384 varlen | NVIDIA H100 80GB HBM3 | rebuild -> cached |" in md
    assert "cached (sdpa)" in md and "profiles/packing_gpu/summary.json" in md  # savings rows of the bench
    assert "`profiles/packing_gpu/`: `python -m workbench.bench.packing --out X`" in md
    assert "+14.3%" in md and "+43.3%" in md
    assert "No GPU overhead run" in md
    assert "profiles/cpu_run/summary.json" in readme_results.results_markdown(str(prof), include_cpu=True,
                                                                              repo=str(tmp_path))


def test_readme_render_replaces_only_the_blocks(tmp_path):
    text = "# t\n\nbefore\n<!-- results -->\nold\n<!-- /results -->\nafter\n<!-- viewing -->\nx\n<!-- /viewing -->\n"
    out = readme_results.render(text, PROFILES)
    assert out.startswith("# t\n\nbefore\n<!-- results -->\n") and "\nold\n" not in out and "\nafter\n" in out
    assert "Perfetto" in out and "Nsight Systems" in out and "HolisticTraceAnalysis" in out and "jupyter lab" in out
    assert readme_results.render(out, PROFILES) == out  # idempotent
    with pytest.raises(ValueError):
        readme_results.replace_block("no markers", readme_results.RESULTS_MARKERS, "x")
    p = tmp_path / "README.md"
    p.write_text(text)
    assert readme_results.main(["--readme", str(p), "--profiles", PROFILES, "--check"]) == 1
    assert readme_results.main(["--readme", str(p), "--profiles", PROFILES]) == 0
    assert readme_results.main(["--readme", str(p), "--profiles", PROFILES, "--check"]) == 0
    (tmp_path / "R2.md").write_text("nothing")
    assert readme_results.main(["--readme", str(tmp_path / "R2.md"), "--profiles", PROFILES]) == 2


def test_count_syncs_live_attributes_packing_rebuilds_to_every_layer_and_pass():
    attr = an.count_syncs_live("packing", tokens=128)
    by_layer = an.syncs_by_layer(attr).set_index(["arm", "layer"])
    total = by_layer.groupby("arm")["total"].sum()
    assert total["rebuild"] > total["cached"] > total["precomputed"] == 0
    L = attr.loc[attr["arm"] == "rebuild", "layer"].dropna().nunique()
    assert L >= 2
    for layer in ("L00", "L01"):  # rebuild: a build in the forward and again in the recompute of every layer
        assert by_layer.loc[("rebuild", layer), "forward"] > 0 and by_layer.loc[("rebuild", layer), "recompute"] > 0
    src = an.syncs_by_source(attr)
    assert src[src["arm"] == "rebuild"]["syncs_per_step"].sum() == total["rebuild"]


# --- folders as the GPU runs come back: COMMAND.txt, logs of workbench.run, long results only ------------------------

def test_command_txt_parsing(tmp_path):
    p = tmp_path / "COMMAND.txt"
    p.write_text("device: NVIDIA H100 80GB HBM3, driver 580.159.04; torch 2.11.0+cu130, transformers 5.17.0, "
                 "peft 0.21.0\n"
                 "command: source .gpu/env.sh; python -m workbench.bench.moe --out $OUT/moe --budget-s 300\n"
                 "note: the 300 s budget allowed 1 rep.\n"
                 "a.log / b.json:   python -m workbench.run --model x\n"
                 "free text continues the note.\n")
    c = an.parse_command_txt(str(p))
    assert c["command"] == "source .gpu/env.sh; python -m workbench.bench.moe --out $OUT/moe --budget-s 300"
    assert (c["device_name"], c["driver"], c["torch"], c["transformers"]) == (
        "NVIDIA H100 80GB HBM3", "580.159.04", "2.11.0+cu130", "5.17.0")
    assert c["files"] == {"a.log": "python -m workbench.run --model x", "b.json": "python -m workbench.run --model x"}
    assert c["note"] == "the 300 s budget allowed 1 rep. free text continues the note."


def test_committed_harness_logs_witnesses():
    logs = an.run_logs(HARNESS).set_index("log")
    assert logs.loc["run_qwen3.log", "counter_syncs_per_step"] == logs.loc["run_qwen3.log", "cuda_debug_syncs_per_step"]
    g = logs.loc["run_gptoss_eager.log"]
    assert (g["model"], g["layers"], g["counter_syncs_per_step"], g["cuda_debug_syncs_per_step"]) == (
        "gpt-oss-20b", 4, 1802.0, 1804.0)
    assert g["command"].startswith("python -m workbench.run --model gpt-oss-20b")
    ops = an.witness_ops(HARNESS)
    assert len(ops) >= 16 and ops["agree"].all() and ops.set_index("op").loc["bincount", "counter"] == 2
    attr = an.run_log_attribution(HARNESS)
    eager = an.syncs_by_layer(attr[attr["arm"] == "run_gptoss_eager"]).set_index("layer")
    assert eager.loc["L00", "forward"] == 225 and eager.loc["L00", "recompute"] == 225
    assert eager.loc["L00", "total"] == 450
    w = an.three_witnesses(HARNESS).set_index("arm")
    assert w.loc["run_qwen3", "agree"] == True and w.loc["run_gptoss_eager", "agree"] == False  # noqa: E712


def test_run_log_with_debug_mode_sources_side_by_side(tmp_path):
    (tmp_path / "COMMAND.txt").write_text("r.log: python -m workbench.run --cross-check\n"
                                          "The 2 extra warnings are a host-to-device copy.\n")
    (tmp_path / "r.log").write_text(
        "syncs per layer and pass (last step)\nlayer  forward  recompute  backward  optimizer  total\n"
        "  L00        3          3         0          0      6\n"
        "model        1          0         0          0      1\n\n"
        "source lines that sync (last step)\nsyncs  source\n    6  m.py:10 (forward)\n    1  k.py:5 (f)\n\n"
        "witnesses differ: counter 7, CUDA sync debug mode 9; debug-mode warnings by source line:\n"
        "warnings  source\n     6  m.py:10\n     1  k.py:5\n     2  k.py:9\n"
        '{"model": "m", "layers": 1, "tokens": 8, "device": "cuda:0", "steps": [{"step_ms": 1.0, "syncs": 7, '
        '"cuda_sync_warnings": 9}], "syncs_by_layer": {"L00": 6, "": 1}}\n')
    attr = an.run_log_attribution(str(tmp_path))
    side = an.sources_side_by_side(attr).set_index("source")
    assert side.loc["m.py:10", "counter"] == 6 and not side.loc["m.py:10", "differs"]
    assert side.loc["k.py:9", "cuda debug mode"] == 2 and side.loc["k.py:9", "differs"]
    w = an.three_witnesses(str(tmp_path)).iloc[0]
    assert w["agree"] == False and "host-to-device" in w["note"] and "recorded: The 2 extra" in w["note"]  # noqa: E712


def test_packing_folder_with_long_results_only(tmp_path):
    d = tmp_path / "2026-11-22_h100_packing"
    d.mkdir()
    (d / "COMMAND.txt").write_text("device: NVIDIA H100 80GB HBM3, driver 1; torch 2.11.0+cu130, transformers 5.17.0\n"
                                   "command: python -m workbench.bench.packing --out $OUT/packing\n")
    env = dict(run_id="packing-1", torch="2.11.0+cu130", transformers="5.17.0", device_name="NVIDIA H100 80GB HBM3")
    rows = []
    for arm, ms, syncs in (("rebuild", 110.0, 168), ("cached", 100.0, 3), ("precomputed", 99.0, 0)):
        for rep, dx in ((0, -1.0), (0, 0.0), (1, 1.0)):
            for metric, v in (("step_ms", ms + dx), ("fwd_ms", ms / 3), ("bwd_ms", 2 * ms / 3), ("peak_mem_mib", 1.0),
                              ("loss", 5.0)):
                rows.append(dict(env, section="arms", model="qwen3-0.6b", layers=28, tokens=16384, backend="varlen",
                                 arm=arm, rep=rep, step=0, metric=metric, value=v, unit="ms"))
        rows.append(dict(env, section="arms", model="qwen3-0.6b", layers=28, tokens=16384, backend="varlen", arm=arm,
                         rep=-1, step=-1, metric="syncs_per_step", value=syncs, unit="syncs"))
    rows.append(dict(env, section="s", model="qwen3-0.6b", layers=28, tokens=16384, backend="varlen", arm="rebuild",
                     rep=-1, step=-1, metric="s_ms", value=0.25, unit="ms"))
    for L in (4, 8):
        for arm, ms in (("rebuild", 10.0 * L + 0.5 * L), ("cached", 10.0 * L + 0.5)):
            rows.append(dict(env, section="sweep", model="qwen3-0.6b", layers=L, tokens=16384, backend="varlen",
                             arm=arm, rep=0, step=0, metric="step_ms", value=ms, unit="ms"))
    pd.DataFrame(rows).to_csv(d / "results.csv", index=False)
    runs = an.discover(str(tmp_path))
    assert runs[["kind", "suite"]].values.tolist() == [["bench", "packing"]]
    assert runs["command"].iloc[0] == "python -m workbench.bench.packing --out $OUT/packing"
    s = an.bench_frames(str(tmp_path), "packing")["summary"].set_index("arm")
    assert s.loc["rebuild", "step_ms"] == 110.0 and s.loc["rebuild", "syncs_per_step"] == 168
    assert (s.loc["rebuild", "step_ms_p20"], s.loc["rebuild", "step_ms_p80"]) == (109.0, 111.0)
    c = an.bench_comparisons(str(tmp_path)).iloc[0]
    assert c["gpu_name"] == "NVIDIA H100 80GB HBM3" and c["measured_ms"] == pytest.approx(10.0)
    from workbench.savings import packing_saving
    assert c["predicted_ms"] == pytest.approx(packing_saving(28, 0.25, arm="cached")["predicted_ms"])
    sweep, fit = an.bench_sweep(str(tmp_path), "packing")
    assert sweep["saving_ms"].tolist() == pytest.approx([1.5, 3.5])
    assert fit.iloc[0]["slope_ms_per_layer"] == pytest.approx(0.5)
    assert fit.iloc[0]["predicted_slope_ms_per_layer"] == 0.5
    md = readme_results.results_markdown(str(tmp_path), repo=str(tmp_path))
    assert "2026-11-22_h100_packing/results.csv" in md and "L sweep" in md
    assert "| packing | per batch +14.3% | qwen3-0.6b (varlen) L28 T16384: +10.0%" in md
    ours = an.ours_table(str(tmp_path)).set_index("scope")
    assert ours.loc["syncs", "ours_extra"] == "syncs/step 168 -> 3"
    assert ours.loc["mask_ms", "ours_extra"].startswith("s = 0.250 ms")
    pred = packing_saving(28, 0.25, arm="cached")["predicted_ms"]
    assert ours.loc["model", "ours_pct"] == pytest.approx(100 * pred / (110.0 - pred))
