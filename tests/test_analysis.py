"""workbench.analysis against small run folders of the one results schema (written here), one real tiny CPU A/B run,
the committed H100 profiles, and synthetic trace events."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from workbench import analysis as an
from workbench import stats

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROFILES = os.path.join(ROOT, "profiles")
ENGINE = os.path.join(PROFILES, "2026-11-23_h100_engine")


# --- run folders of the schema (workbench/results.py) ---------------------------------------------------------------

def vs(speedup, lo, hi, n=8):
    return {"speedup": speedup, "ci95": [lo, hi], "n_pairs": n, "verdict": stats.verdict([lo, hi]), "outlier_pairs": 1}


def arm(name, ms, syncs=0.0, v=None, sources=None, counted=None, mean=None):
    a = {"arm": name, "step_ms": ms, "step_ms_p20": ms * 0.99, "step_ms_p80": ms * 1.01,
         "step_ms_mean": ms if mean is None else mean, "n": 8, "fwd_ms": ms * 0.3, "bwd_ms": ms * 0.6,
         "syncs_per_step": syncs, "instrumented_step_ms": counted or ms * 1.1, "instrument_cost_pct": 10.0,
         "sync_sources_per_step": sources or {}, "equivalent": True, "bitwise": False, "status": "ok"}
    if v:
        a["vs_baseline"] = v
    return a


def comparison(name, base, opt_arm, others=(), layers=8, status="ok"):
    v = opt_arm.get("vs_baseline") or {}
    return {"name": name, "opt": name.split("@")[0].removeprefix("nvtx:"), "model": "qwen3-0.6b", "layers": layers,
            "tokens": 16384, "attn": "varlen", "baseline": base, "optimized": opt_arm, "others": list(others),
            "speedup": v.get("speedup"), "speedup_ci95": v.get("ci95"), "verdict": v.get("verdict"),
            "n_pairs": v.get("n_pairs"), "equivalent": True, "status": status,
            "savings_model": {"formula": "(L-1)*s", "predicted_ms": 12.0, "measured_ms": 15.0, "inputs": {"L": layers}},
            "protocol": {"reps": 2, "stopped_by": "reps", "steps": 2, "batches": 2}}


def packing(name="packing", layers=8, base_ms=110.0, cached_ms=100.0, status="ok"):
    return comparison(name, arm("rebuild", base_ms, 16.0, sources={"packing.py:99 (build_meta)": 8.0,
                                                                   "packing.py:101 (build_meta)": 8.0}),
                      arm("cached", cached_ms, 1.0, vs(base_ms / cached_ms, base_ms / cached_ms - 0.02,
                                                       base_ms / cached_ms + 0.03)),
                      [arm("precomputed", cached_ms - 1, 0.0, vs(1.11, 1.09, 1.13))], layers=layers, status=status)


def write_run(d, comps, device="cuda", status="complete", planned=None, command="python -m workbench.ab --out X"):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "summary.json"), "w") as f:
        json.dump({"run_id": os.path.basename(d), "device": device, "comparisons": comps,
                   "complete": status == "complete", "status": status}, f)
    gpu = "NVIDIA H100 80GB HBM3" if device == "cuda" else None
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump({"status": status, "command": command, "versions": {"torch": "2.11.0", "transformers": "5.17.0"},
                   "device": {"type": device, "name": gpu or "x86_64", "gpu_name": gpu},
                   "comparisons": planned or [c["name"] for c in comps]}, f)
    rows = []
    for c in comps:
        for a in [c["baseline"], c["optimized"], *c["others"]]:
            for rep in (0, 1):
                for step in (0, 1):
                    base = dict(run_id="r", comparison=c["name"], arm=a["arm"], rep=rep, batch=step, step=step,
                                opt=c["opt"], model=c["model"], layers=c["layers"], tokens=c["tokens"])
                    rows.append({**base, "metric": "step_ms", "value": a["step_ms"] + step, "unit": "ms"})
                    rows.append({**base, "metric": "warmup_step_ms", "value": 2 * a["step_ms"], "unit": "ms"})
                rows.append(dict(base, batch=None, step=None, metric="warmup_steps", value=3, unit="count"))
                rows.append(dict(base, batch=None, step=None, metric="warmup_settled", value=1, unit="bool"))
    pd.DataFrame(rows).to_csv(os.path.join(d, "results.csv"), index=False)


@pytest.fixture
def folder(tmp_path):
    """A campaign folder: a complete GPU run (packing + an A/A + NVTX cost), a CPU run, a run cut off after one of
    two comparisons, a failed one, and a COMMAND.txt / commands.json naming their commands."""
    camp = tmp_path / "profiles" / "camp"
    aa = comparison("packing", arm("rebuild", 100.0, 16.0), arm("rebuild#2", 100.5, 16.0, vs(0.995, 0.98, 1.01)))
    nv = comparison("nvtx:packing", arm("rebuild-nvtx", 100.0, 16.0), arm("rebuild+nvtx", 101.0, 16.0,
                                                                         vs(0.99, 0.97, 1.005)))
    write_run(str(camp / "gpu"), [packing(), nv])
    write_run(str(camp / "aa"), [aa])
    write_run(str(camp / "cpu"), [packing(base_ms=30.0, cached_ms=25.0)], device="cpu")
    write_run(str(camp / "cut"), [packing("packing@layers=4", 4)], status="running",
              planned=["packing@layers=4", "packing@layers=8"])
    write_run(str(camp / "bad"), [packing(status="failed")], status="failed")
    (camp / "COMMAND.txt").write_text("device: NVIDIA H100 80GB HBM3, driver 1\ncommand: python -m workbench.campaign"
                                      " --out DIR\ngpu: python -m workbench.ab --opt packing --nvtx-cost\n"
                                      "aa: python -m workbench.ab --opt packing --aa\n"
                                      "note: cut was killed when the machine was given back\n")
    (camp / "commands.json").write_text(json.dumps({"jobs": [{"name": "cut", "command": "x", "status": "cut off"}]}))
    return str(tmp_path / "profiles")


def test_discover_keeps_complete_gpu_runs_and_says_what_it_left_out(folder):
    runs = an.discover(folder)
    assert sorted(runs["job"]) == ["aa", "gpu"] and list(runs.columns) == an.RUN_COLUMNS
    assert runs.set_index("job").loc["gpu", "command"] == "python -m workbench.ab --opt packing --nvtx-cost"
    assert runs.set_index("job").loc["gpu", "folder"] == os.path.join("profiles", "camp", "gpu")
    out = an.left_out(folder).set_index("job")
    assert sorted(out.index) == ["bad", "cpu", "cut"] and runs.attrs["left_out"]["job"].tolist() == out.index.tolist()
    assert out.loc["cpu", "reason"].startswith("CPU run")
    assert "meta.json status 'running'" in out.loc["cut", "reason"] and "campaign status 'cut off'" in out.loc["cut",
                                                                                                           "reason"]
    assert "killed when the machine was given back" in out.loc["cut", "reason"]
    assert out.loc["cut", "complete_comparisons"] == "packing@layers=4"
    assert out.loc["cut", "missing_comparisons"] == "packing@layers=8"
    assert "status 'failed'" in out.loc["bad", "reason"]
    assert "complete in summary.json: none" in out.loc["bad", "reason"]
    assert sorted(an.discover(folder, include_cpu=True)["job"]) == ["aa", "cpu", "gpu"]
    assert sorted(an.discover(folder, include_incomplete=True)["job"]) == ["aa", "bad", "cut", "gpu"]
    assert an.left_out(folder, include_cpu=True, include_incomplete=True).empty
    one = an.discover(os.path.join(folder, "camp", "gpu"))  # a root may be one run folder
    assert one["job"].tolist() == ["gpu"] and one["folder"].tolist() == ["gpu"]


def test_wb_profiles_env_is_the_default_root(folder, monkeypatch):
    monkeypatch.setenv("WB_PROFILES", folder)
    assert sorted(an.discover()["job"]) == ["aa", "gpu"]


def test_comparisons_read_speedups_and_cis_back(folder):
    c = an.comparisons(folder)
    assert list(c.columns) == an.COMP_COLUMNS
    assert c.groupby("role").size().to_dict() == {"aa": 1, "nvtx": 1, "optimized": 1, "other": 1}
    r = c[c["arm"] == "cached"].iloc[0]
    assert (r["baseline"], r["baseline_ms"], r["arm_ms"]) == ("rebuild", 110.0, 100.0)
    assert r["speedup"] == pytest.approx(1.1) and (r["ci95_lo"], r["ci95_hi"]) == pytest.approx((1.08, 1.13))
    assert r["verdict"] == "faster" and r["n_pairs"] == 8 and r["ci_contains_1"] == False  # noqa: E712
    assert (r["syncs_baseline"], r["syncs_arm"]) == (16.0, 1.0) and r["file"].endswith("camp/gpu/summary.json")
    aa = c[c["role"] == "aa"].iloc[0]
    assert aa["arm"] == "rebuild#2" and aa["ci_contains_1"] == True  # noqa: E712
    assert c[c["role"] == "nvtx"]["name"].tolist() == ["nvtx:packing"]
    # comparisons whose own status is ok, out of incomplete runs: only when asked (all, or by job name)
    assert set(an.comparisons(folder, include_incomplete_comparisons=True)["job"]) == {"aa", "gpu", "cut"}
    assert set(an.comparisons(folder, include_incomplete_comparisons=["cut"])["job"]) == {"aa", "gpu", "cut"}
    assert "cpu" in set(an.comparisons(folder, include_cpu=True)["job"])


def test_steps_and_warmups(folder):
    st = an.steps(folder)
    assert list(st.columns) == an.STEP_COLUMNS
    assert len(st) == 4 * (3 + 2 + 2)  # 2 reps x 2 steps x the arms of packing, A/A and nvtx:packing
    assert st[st["arm"] == "cached"]["step_ms"].tolist() == [100.0, 101.0, 100.0, 101.0]
    w = an.warmups(folder)
    assert len(w) == len(st) and (w["warmup_steps"] == 3).all() and (w["warmup_settled"] == 1).all()
    cut = an.steps(folder, include_incomplete_comparisons=True)
    assert set(cut["comparison"]) == {"packing", "nvtx:packing", "packing@layers=4"}


def test_sweep_recovers_the_slope_per_layer(tmp_path):
    noise = {4: 0.2, 8: -0.1, 16: 0.1, 28: -0.2}
    comps = [packing(f"packing@layers={L}", L, base_ms=50 + 3.5 * L + noise[L], cached_ms=50.5) for L in noise]
    write_run(str(tmp_path / "sweep"), comps)
    points, fit = an.sweep(an.comparisons(str(tmp_path)))
    assert points[points["arm"] == "cached"]["x"].tolist() == [4, 8, 16, 28]
    f = fit.set_index("arm").loc["cached"]
    assert f["key"] == "layers" and f["n_points"] == 4 and f["xs"] == "4,8,16,28"
    assert f["slope_ms_per_x"] == pytest.approx(3.5, abs=0.02) and f["intercept_ms"] == pytest.approx(-0.5, abs=0.3)
    assert f["slope_ci95_lo"] < 3.5 < f["slope_ci95_hi"] and f["slope_ci95_hi"] - f["slope_ci95_lo"] < 0.2
    assert f["r2"] > 0.999
    ref = stats.linear_fit([4, 8, 16, 28], [3.5 * L + noise[L] - 0.5 for L in noise])
    assert f["slope_ms_per_x"] == pytest.approx(ref["slope"])
    assert f["slope_ci95_lo"] == pytest.approx(ref["slope_ci95"][0])
    assert an.sweep(an.comparisons(str(tmp_path)), stat="mean")[0]["stat"].eq("mean").all()
    assert an.sweep(an.comparisons(str(tmp_path / "none")))[1].empty


def test_instrument_cost_counter_per_arm_and_nvtx(folder):
    cost = an.instrument_cost(folder)
    counter = cost[(cost["instrument"] == "sync counter") & cost["folder"].str.endswith("gpu")].set_index("arm")
    assert counter.loc["cached", "cost_pct"] == pytest.approx(10.0) and counter.loc["rebuild", "role"] == "baseline"
    nv = cost[cost["instrument"] == "nvtx ranges"].iloc[0]
    assert nv["arm"] == "rebuild" and (nv["off_ms"], nv["on_ms"]) == (100.0, 101.0)
    assert nv["cost_pct"] == pytest.approx(100 * (1 / 0.99 - 1)) and nv["verdict"].startswith("no detectable")
    assert not (cost["comparison"].str.startswith("nvtx:") & (cost["instrument"] == "sync counter")).any()


def test_syncs_with_top_sources(folder):
    s = an.syncs(folder, top=1)
    r = s[(s["comparison"] == "packing") & (s["arm"] == "rebuild") & s["folder"].str.endswith("gpu")]
    assert len(r) == 1 and r.iloc[0]["syncs_per_step"] == 16.0 and r.iloc[0]["source"] == "packing.py:101 (build_meta)"
    assert s[s["arm"] == "cached"]["source"].isna().all()  # an arm without sources keeps one row


def test_savings_minimal(folder):
    sv = an.savings(folder)
    assert sv["comparison"].tolist() == ["packing"] and sv.iloc[0]["measured_over_predicted"] == pytest.approx(1.25)


def test_claims_table_holds_reference_numbers():
    c = an.claims_table()
    assert list(c.columns) == an.CLAIM_COLUMNS
    step = c[c["scope"] == "step"].set_index(["opt", "model"])
    assert step.loc[("packing", "qwen3-14b"), "claimed_low_pct"] == 14.3
    assert step.loc[("offload", "8B"), "claimed_low_pct"] == 8.40
    assert (step.loc[("moe", "gpt-oss-20b"), "claimed_low_pct"], step.loc[("moe", "gpt-oss-20b"),
                                                                          "claimed_high_pct"]) == (10.0, 15.0)
    assert c[c["opt"] == "all"]["claimed_low_pct"].tolist() == [25.0]
    assert an.same_model("8B", "llama-3.1-8b") and not an.same_model("14B", "llama-3.1-8b")


def test_claims_vs_ours_gain_with_ci(folder):
    cvo = an.claims_vs_ours(an.comparisons(folder))
    step = cvo[(cvo["opt"] == "packing") & (cvo["scope"] == "step")].iloc[0]
    assert step["ours_pct"] == pytest.approx(10.0) and step["arm"] == "rebuild -> cached"
    assert (step["ours_ci95_lo_pct"], step["ours_ci95_hi_pct"]) == pytest.approx((8.0, 13.0))
    assert step["verdict"] == "faster" and step["n_pairs"] == 8
    assert cvo[(cvo["opt"] == "moe")]["note"].eq("no data").all()
    assert cvo[(cvo["opt"] == "packing") & (cvo["scope"] == "fwd")]["note"].iloc[0] == "not measured (scope fwd)"
    assert len(an.claims_figure(cvo).data) == 2


def test_figures_carry_cis(folder):
    c = an.comparisons(folder)
    fig = an.speedup_figure(c)
    assert all(t.error_x.array is not None for t in fig.data) and "95% CI" in fig.layout.title.text
    assert any("n=8 pairs" in h for t in fig.data for h in t.hovertext)
    assert len(an.steps_figure(an.steps(folder)).data) >= 3
    assert len(an.cost_figure(an.instrument_cost(folder)).data) == 2


def test_empty_root_gives_empty_frames_with_columns(tmp_path):
    assert an.discover(str(tmp_path)).empty and an.left_out(str(tmp_path)).empty
    assert list(an.comparisons(str(tmp_path)).columns) == an.COMP_COLUMNS
    for f in (an.steps, an.warmups, an.instrument_cost, an.syncs, an.savings):
        assert f(str(tmp_path)).empty
    assert an.arm_events(str(tmp_path)) == {} and an.discover(str(tmp_path / "missing")).empty


# --- one real tiny CPU run of the engine ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("cpu") / "ab_packing"
    cmd = [sys.executable, "-m", "workbench.ab", "--opt", "packing", "--device", "cpu", "--tokens", "128", "--steps",
           "1", "--reps", "2", "--warmup", "0", "--warmup-max", "0", "--out", str(out)]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1"))
    assert r.returncode == 0 and os.path.exists(out / "summary.json"), r.stderr[-2000:]
    return str(out)


def test_a_real_cpu_run_is_left_out_by_default_and_read_when_asked(cpu_run):
    assert an.discover(cpu_run).empty
    assert an.left_out(cpu_run)["reason"].iloc[0].startswith("CPU run (device cpu)")
    c = an.comparisons(cpu_run, include_cpu=True).set_index("arm")
    with open(os.path.join(cpu_run, "summary.json")) as f:
        s = json.load(f)["comparisons"][0]
    assert list(c.index) == ["cached", "precomputed"] and c.loc["cached", "role"] == "optimized"
    assert c.loc["cached", "speedup"] == s["speedup"] and [c.loc["cached", "ci95_lo"], c.loc["cached", "ci95_hi"]] \
        == s["speedup_ci95"] and c.loc["cached", "n_pairs"] == 2
    assert c.loc["cached", "baseline_ms"] == s["baseline"]["step_ms"]
    st = an.steps(cpu_run, include_cpu=True)
    assert len(st) == 3 * 2 and set(st["arm"]) == {"rebuild", "cached", "precomputed"}
    sy = an.syncs(cpu_run, include_cpu=True).drop_duplicates("arm").set_index("arm")["syncs_per_step"]
    assert sy["rebuild"] > sy["cached"] >= sy["precomputed"]
    cost = an.instrument_cost(cpu_run, include_cpu=True)
    assert cost["on_ms"].notna().all() and (cost["instrument"] == "sync counter").all()


# --- the committed H100 profiles -----------------------------------------------------------------------------------

def test_committed_profiles_runs_and_what_is_left_out():
    runs = an.discover(PROFILES)
    assert {"ab_all", "ab_aa", "packing_sweep", "nvtx_cost_all"} <= set(runs["job"])
    assert runs.set_index("job").loc["ab_all", "command"] == "python -m workbench.ab --opt all"  # from COMMAND.txt
    assert (runs["gpu_name"] == "NVIDIA H100 80GB HBM3").all()
    out = an.left_out(PROFILES).set_index("job")
    assert {"nvtx_cost", "offload_tokens"} <= set(out.index)
    assert "'running'" in out.loc["nvtx_cost", "reason"] and out.loc["nvtx_cost", "missing_comparisons"] == "nvtx:all"
    assert "'incomplete'" in out.loc["offload_tokens", "reason"]
    c = an.comparisons(PROFILES, include_incomplete_comparisons=an.KEEP_FROM_INCOMPLETE)
    assert set(c[c["job"] == "nvtx_cost"]["name"]) == {"nvtx:packing", "nvtx:offload", "nvtx:moe"}
    assert "offload_tokens" not in set(c["job"])
    with open(os.path.join(ENGINE, "ab_all", "summary.json")) as f:
        s = {x["name"]: x for x in json.load(f)["comparisons"]}
    for name in ("packing", "offload", "moe", "all"):
        r = c[(c["job"] == "ab_all") & (c["name"] == name) & (c["role"] == "optimized")].iloc[0]
        assert r["speedup"] == s[name]["speedup"] and [r["ci95_lo"], r["ci95_hi"]] == s[name]["speedup_ci95"]
    aa = c[c["role"] == "aa"].iloc[0]
    assert aa["ci_contains_1"] == True  # noqa: E712
    points, fit = an.sweep(c)
    eng = fit[fit["folder"].str.contains("h100_engine")]
    assert set(eng["arm"]) == {"cached", "precomputed"} and (eng["n_points"] == 4).all()


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
    assert tl["end_ms"].max() <= 100.0  # one step only
    meta = tl[tl["category"] == "metadata build"]
    assert meta["dur_ms"].tolist() == pytest.approx([1.0, 2.0]) and meta["start_ms"].tolist() == pytest.approx([2, 21])
    only0 = an.layer_timeline(_events(), layers=["L00"])
    assert set(only0.loc[only0["lane"].str.startswith("host"), "layer"]) == {"L00"}
    assert {t.name for t in an.timeline_figure(tl).data} >= {"metadata build", "reload", "sync"}
    assert an.layer_timeline(pd.DataFrame()).empty


def test_layer_timeline_merges_back_to_back_kernels():
    ev = _events()
    ms = 1_000_000
    extra = ev[ev["kind"] == "kernel"].iloc[[0, 0, 0]].copy()
    extra["start_ns"] = [15 * ms, 15 * ms + 10_000, 18 * ms]  # 0 and 0.01 ms gaps merge; 2.99 ms does not
    extra["end_ns"] = [15 * ms + 10_000, 16 * ms, 19 * ms]
    ev = pd.concat([ev, extra], ignore_index=True)
    s7 = an.layer_timeline(ev).query("lane == 'stream 7 (compute)' and layer == 'L00'")
    assert s7["name"].tolist() == ["3 kernels", "gemm"] and s7["dur_ms"].tolist() == pytest.approx([11.0, 1.0])
    assert len(an.layer_timeline(ev, merge_gap_ms=None).query("lane == 'stream 7 (compute)'")) == 5


def test_meta_builds_per_layer():
    mb = an.meta_builds(_events()).set_index("layer")
    assert mb.loc["L00", "builds_per_step"] == 1 and mb.loc["L01", "median_ms"] == pytest.approx(2.0)


def test_arm_events_and_trace_diffs(folder):
    from workbench.traces import save_events
    d = os.path.join(folder, "camp", "gpu", "traces", "packing")
    os.makedirs(d)
    save_events(_events(), os.path.join(d, "rebuild"))
    save_events(_events().iloc[:3], os.path.join(d, "cached"))
    ev = an.arm_events(folder)
    gpu = os.path.join("profiles", "camp", "gpu")
    assert sorted(ev) == [(gpu, "packing", "cached"), (gpu, "packing", "rebuild")]
    assert len(an.load_trace(os.path.join(d, "rebuild.events.parquet"))) == len(_events())
    diffs = an.trace_diffs(ev, an.comparisons(folder))
    assert set(zip(diffs["baseline"], diffs["arm"])) == {("rebuild", "cached")} and "delta_ms" in diffs


def test_witness_ops_reads_the_campaign_json(tmp_path):
    (tmp_path / "witness_ops").mkdir()
    (tmp_path / "witness_ops" / "witness.json").write_text(json.dumps(
        [{"op": "item", "counter": 1, "cpu_only": 0, "cuda_debug_warnings": 1}]))
    ops = an.witness_ops(str(tmp_path))
    assert ops["op"].tolist() == ["item"] and ops["agree"].all()


# --- savings-model verdicts, decompositions, breakdowns, L sweeps (the schema of workbench.verdicts) -----------------

BUSY = ("gemm", "attention", "glue", "copy", "norm_elementwise", "optimizer", "other")
IDLE = ("exposed_copy", "sync_stall", "launch_gap")


def with_verdict(c, predicted, pci, measured, mci, verdict="confirmed", n=12, missing=None, corrected=None,
                 traced=True):
    """`c` (a comparison dict) annotated as `workbench.verdicts` writes it: savings_model with a verdict, and for a
    traced run the decomposition and each arm's breakdown."""
    sm = {"formula": "(L*p - b) * s,  s = GPU idle per build + build kernel time", "predicted_ms": predicted,
          "predicted_se_ms": 1.0, "predicted_ci95": pci, "n_steps": 4, "measured_ms": measured, "measured_ci95": mci,
          "measured_n_pairs": n, "ratio": measured / predicted if predicted else None, "verdict": verdict,
          "inputs": {"L": {"value": c["layers"], "source": "the comparison's layer count"},
                     "s_ms": {"value": 0.5, "source": "s_idle_ms + s_kernel_ms"},
                     "c_ms": {"value": [1.0, 2.0], "source": "trace"}},
          "terms": {"builds removed x idle per build": predicted}}
    if missing:
        sm["largest_missing"] = {"component": missing[0], "saved_ms": missing[1]}
    if corrected:
        sm["corrected"] = {"formula": sm["formula"] + f" + saved {missing[0]}", "predicted_ms": corrected[0],
                           "predicted_ci95": corrected[1], "ratio": measured / corrected[0], "verdict": corrected[2]}
    if not traced:
        sm = {"formula": sm["formula"], "predicted_ms": None, "measured_ms": measured, "measured_ci95": mci,
              "measured_n_pairs": n, "verdict": "no trace", "reason": "the model's inputs come from traces: run with "
                                                                       "--trace torch or nsys"}
    c = dict(c, savings_model=sm)
    if traced:
        base, arm_ = c["baseline"]["arm"], c["optimized"]["arm"]
        comps = {k: 10.0 + i for i, k in enumerate(BUSY + IDLE)}
        saved = {"glue": 3.0, "sync_stall": 5.0, "launch_gap": 1.0}
        c["decomposition"] = [{"component": k, "group": "busy" if k in BUSY else "idle", "baseline_ms": v,
                               "arm_ms": v - saved.get(k, 0.0), "saved_ms": saved.get(k, 0.0)}
                              for k, v in comps.items()]
        step = sum(comps.values())
        c["decomposition"] += [{"component": "step_ms", "group": "total", "baseline_ms": step, "arm_ms": step - 9.0,
                                "saved_ms": 9.0},
                               {"component": "residual_ms", "group": "total", "baseline_ms": None, "arm_ms": None,
                                "saved_ms": measured - 9.0}]
        c["breakdown"] = {a: {"components": [{"component": k, "group": "busy" if k in BUSY else "idle",
                                              "ms": v - (saved.get(k, 0.0) if a == arm_ else 0.0),
                                              "share": v / step} for k, v in comps.items()],
                              "top_kernels": [{"name": "sm90_xmma_gemm", "cls": "gemm", "count": 56.0, "ms": 30.0,
                                               "share": 0.4},
                                              {"name": "flash_fwd", "cls": "attention", "count": 28.0, "ms": 11.0,
                                               "share": 0.15}],
                              "levers": []} for a in (base, arm_)}
    return c


def test_verdicts_read_back_every_field(tmp_path):
    ok = with_verdict(packing(), 9.5, [8.0, 11.0], 10.0, [9.0, 11.5])
    bad = with_verdict(comparison("offload", arm("sync_reload", 1400.0), arm("double_buffer", 1380.0,
                                                                             v=vs(1.014, 1.012, 1.016))),
                       5.0, [4.5, 5.5], 20.0, [18.0, 22.0], verdict="refuted", missing=("exposed_copy", 14.0),
                       corrected=(19.0, [18.5, 19.5], "confirmed"))
    untraced = with_verdict(packing("packing@layers=4", 4), None, None, 3.0, [2.0, 4.0], traced=False)
    write_run(str(tmp_path / "p" / "run"), [ok, bad, untraced, packing("packing@layers=8", 8)])
    v = an.verdicts(str(tmp_path / "p"))
    assert list(v.columns) == an.VERDICT_COLUMNS
    assert v["comparison"].tolist() == ["packing", "offload", "packing@layers=4"]  # no verdict: no row
    r = v.set_index("comparison").loc["packing"]
    assert (r["predicted_ms"], r["predicted_ci95_lo"], r["predicted_ci95_hi"]) == (9.5, 8.0, 11.0)
    assert (r["measured_ms"], r["measured_ci95_lo"], r["measured_ci95_hi"], r["n_pairs"]) == (10.0, 9.0, 11.5, 12)
    assert r["verdict"] == "confirmed" and r["ratio"] == pytest.approx(10 / 9.5) and r["attn"] == "varlen"
    assert json.loads(r["inputs"])["L"] == {"value": 8, "source": "the comparison's layer count"}
    b = v.set_index("comparison").loc["offload"]
    assert (b["verdict"], b["largest_missing"], b["largest_missing_ms"]) == ("refuted", "exposed_copy", 14.0)
    assert (b["corrected_ms"], b["corrected_ci95_lo"], b["corrected_verdict"]) == (19.0, 18.5, "confirmed")
    u = v.set_index("comparison").loc["packing@layers=4"]
    assert u["verdict"] == "no trace" and pd.isna(u["predicted_ms"]) and "--trace torch" in u["reason"]


def test_decomposition_breakdown_and_top_kernels(tmp_path):
    write_run(str(tmp_path / "p" / "run"), [with_verdict(packing(), 9.5, [8.0, 11.0], 10.0, [9.0, 11.5])])
    d = an.decomposition(str(tmp_path / "p"))
    assert list(d.columns) == an.DECOMPOSITION_COLUMNS and len(d) == len(BUSY + IDLE) + 2
    s = d.set_index("component")["saved_ms"]
    assert (s["sync_stall"], s["step_ms"], s["residual_ms"]) == (5.0, 9.0, 1.0)
    assert set(d["baseline"]) == {"rebuild"} and set(d["arm"]) == {"cached"}
    bd = an.breakdown(str(tmp_path / "p"))
    assert list(bd.columns) == an.BREAKDOWN_COLUMNS and set(bd["arm"]) == {"rebuild", "cached"}
    assert set(bd["component"]) == set(BUSY + IDLE)
    assert bd.set_index(["arm", "component"]).loc[("rebuild", "glue"), "ms"] - \
        bd.set_index(["arm", "component"]).loc[("cached", "glue"), "ms"] == pytest.approx(3.0)
    assert dict(zip(bd["arm"], bd["role"])) == {"rebuild": "baseline", "cached": "optimized"}
    tk = an.top_kernels(str(tmp_path / "p"))
    assert list(tk.columns) == an.TOP_KERNEL_COLUMNS and tk["rank"].tolist() == [1, 2, 1, 2]
    assert tk.iloc[0]["name"] == "sm90_xmma_gemm" and tk.iloc[0]["cls"] == "gemm"
    fig = an.breakdown_figure(bd)
    assert fig.layout.barmode == "stack" and {t.name for t in fig.data} >= {"gemm", "sync_stall (idle)"}
    for f in (an.verdicts, an.decomposition, an.breakdown, an.top_kernels, an.sweep_points, an.sweep_fits):
        assert f(str(tmp_path / "empty")).empty  # no run: an empty frame with its columns


def _sweep(layers, saving, ci_half=1.0, name="packing", predicted=None):
    out = []
    for L in layers:
        c = packing(f"{name}@layers={L}", L)
        m = saving(L)
        p = m if predicted is None else predicted(L)
        out.append(with_verdict(c, p, [p - 1, p + 1], m, [m - ci_half, m + ci_half], traced=predicted is not None))
    return out


def test_sweep_fits_and_the_l_minus_1_test(tmp_path):
    s = 2.5
    noise = {1: 0.1, 2: -0.2, 4: 0.15, 8: -0.05}
    write_run(str(tmp_path / "p" / "lm1"), _sweep(noise, lambda L: s * (L - 1) + noise[L]))
    write_run(str(tmp_path / "p" / "lin"), _sweep(noise, lambda L: s * L + 4 + noise[L]))  # 6.5 ms at L=1
    pts = an.sweep_points(str(tmp_path / "p"))
    assert list(pts.columns) == an.SWEEP_POINT_COLUMNS and len(pts) == 8
    assert (pts["measured_from"] == "summary.json savings_model").all()
    f = an.sweep_fits(points=pts).set_index("folder")
    a, b = f.loc[os.path.join("p", "lm1")], f.loc[os.path.join("p", "lin")]
    ref = stats.linear_fit([1, 2, 4, 8], [s * (L - 1) + noise[L] for L in noise], at=1)
    assert a["slope_ms"] == pytest.approx(ref["slope"]) and a["slope_ci95_lo"] == pytest.approx(ref["slope_ci95"][0])
    assert a["intercept_ci95_hi"] == pytest.approx(ref["intercept_ci95"][1])
    assert (a["at1_ms"], a["at1_ci95_lo"], a["at1_ci95_hi"]) == pytest.approx((ref["at"]["y"], *ref["at"]["ci95"]))
    assert a["at1_zero"] and a["l1_zero"] and a["l_minus_1"] == "confirmed"
    assert "fit at L=1" in a["l_minus_1_by"] and "measured at L=1" in a["l_minus_1_by"]
    assert not b["at1_zero"] and not b["l1_zero"] and b["l_minus_1"] == "refuted"
    assert b["at1_ms"] == pytest.approx(6.5, abs=0.3)
    # the fit says zero, but the L = 1 point's own CI excludes 0: refuted, and it says which test decided
    write_run(str(tmp_path / "q" / "pt"), _sweep([1, 2, 4, 8], lambda L: {1: 0.8, 2: 2.0, 4: 7.5, 8: 17.5}[L],
                                                  ci_half=0.3))
    c = an.sweep_fits(str(tmp_path / "q")).iloc[0]
    assert c["at1_zero"] and not c["l1_zero"] and c["l_minus_1"] == "refuted"
    assert "measured at L=1: 0.8 ms [0.5, 1.1] excludes 0" in c["l_minus_1_by"]
    # the workbench's own model at L = 1: its prediction there, against the fit and the point
    assert pd.isna(a["model_at1_ms"]) and a["model_at1"] is None  # untraced: no prediction
    write_run(str(tmp_path / "m" / "on"), _sweep(noise, lambda L: s * L + noise[L], predicted=lambda L: s * L))
    write_run(str(tmp_path / "m" / "off"), _sweep(noise, lambda L: s * L + noise[L], predicted=lambda L: s * L + 3))
    both = an.sweep_fits(str(tmp_path / "m")).set_index("folder")
    assert both.loc[os.path.join("m", "on"), "model_at1"] == "confirmed"
    m = both.loc[os.path.join("m", "off")]
    assert m["model_at1_ms"] == pytest.approx(5.5) and m["model_at1"] == "refuted"
    assert "fit at L=1 excludes 5.5 ms" in m["model_at1_by"] and "measured at L=1 excludes 5.5 ms" in m["model_at1_by"]
    # two points: no CI, untested
    write_run(str(tmp_path / "r" / "two"), _sweep([4, 8], lambda L: 2.0 * L))
    assert an.sweep_fits(str(tmp_path / "r")).iloc[0]["l_minus_1"] == "untested"
    fig = an.sweep_fit_figure(pts, an.sweep_fits(points=pts))
    assert any(t.error_y.array is not None for t in fig.data)


def test_sweep_points_of_runs_before_the_verdicts_come_from_results_csv():
    pts = an.sweep_points(PROFILES)
    eng = pts[pts["folder"] == os.path.join("profiles", "2026-11-23_h100_engine", "packing_sweep")]
    assert eng["x"].tolist() == [4, 8, 16, 28]
    assert (eng["measured_from"] == "results.csv (paired difference)").all()
    assert (eng["measured_ci95_lo"] < eng["measured_ms"]).all() and (eng["measured_ms"] < eng["measured_ci95_hi"]).all()


def test_repeats_marks_the_run_that_disagrees(tmp_path):
    write_run(str(tmp_path / "p" / "a"), [packing()])
    write_run(str(tmp_path / "p" / "b"), [packing(base_ms=110.0, cached_ms=109.5)])  # same comparison, ~1.005x
    c = an.comparisons(str(tmp_path / "p"))
    r = an.repeats(c[c["arm"] == "cached"]).set_index("folder")
    assert (r["runs"] == 2).all() and r["chosen"].sum() == 1
    assert r.loc[os.path.join("p", "b"), "chosen"]  # equal pairs: the later folder
    assert not r.loc[os.path.join("p", "a"), "agrees"]
