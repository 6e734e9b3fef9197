"""workbench.analysis against small run folders of the one results schema (written here), one real tiny CPU A/B run,
the committed H100 profiles, and synthetic trace events."""
from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest

from workbench import analysis as an, report as rp
from workbench.measure import results, stats

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROFILES = os.path.join(ROOT, "profiles")
ENGINE = os.path.join(PROFILES, "2026-11-23_h100_engine")


# --- run folders of the schema (workbench/measure/results.py) ---------------------------------------------------------------

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


def phase(rep, arm):
    """-1, 0 or +1: a deterministic rep effect per (rep, arm), so that the rep-level CIs have a spread."""
    return (rep + sum(map(ord, arm))) % 3 - 1


def write_run(d, comps, device="cuda", status="complete", planned=None, command="python -m workbench.ab --out X",
              reps=4):
    """A run folder: summary.json, meta.json and results.csv with `reps` reps x 2 steps per arm: step_ms = the
    arm's step_ms + step + jitter_ms x phase(rep, arm) (a comparison's `jitter_ms`, default 0.3)."""
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
        jit = c.get("jitter_ms", 0.3)
        for a in [c["baseline"], c["optimized"], *c["others"]]:
            for rep in range(reps):
                for step in (0, 1):
                    base = dict(run_id="r", comparison=c["name"], arm=a["arm"], rep=rep, batch=step, step=step,
                                opt=c["opt"], model=c["model"], layers=c["layers"], tokens=c["tokens"])
                    rows.append({**base, "metric": "step_ms", "value": a["step_ms"] + step + jit * phase(rep, a["arm"]),
                                 "unit": "ms"})
                    rows.append({**base, "metric": "warmup_step_ms", "value": 2 * a["step_ms"], "unit": "ms"})
                rows.append(dict(base, batch=None, step=None, metric="warmup_steps", value=3, unit="count"))
                rows.append(dict(base, batch=None, step=None, metric="warmup_settled", value=1, unit="bool"))
    pd.DataFrame(rows).to_csv(os.path.join(d, "results.csv"), index=False)


def reference(run_dir, comparison, base, other):
    """The speedup `comparisons` must report: stats.paired_speedup over the results.csv pairs, the rep as the unit."""
    df = pd.read_csv(results.results_file(run_dir))
    df = df[(df["comparison"] == comparison) & (df["metric"] == "step_ms")]
    b = df[df["arm"] == base].set_index(["rep", "step"])["value"]
    o = df[df["arm"] == other].set_index(["rep", "step"])["value"]
    keys = sorted(set(b.index) & set(o.index))
    return stats.paired_speedup([b[k] for k in keys], [o[k] for k in keys], [k[0] for k in keys])


@pytest.fixture
def folder(tmp_path):
    """A campaign folder: a complete GPU run (packing + an A/A + NVTX cost), a CPU run, a run cut off after one of
    two comparisons, a failed one, and a COMMAND.txt / commands.json naming their commands."""
    camp = tmp_path / "profiles" / "camp"
    aa = comparison("packing", arm("rebuild", 100.0, 16.0), arm("rebuild#2", 100.0, 16.0, vs(0.995, 0.98, 1.01)))
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


def test_runs_are_read_once_per_root_until_a_file_changes(folder, monkeypatch):
    from workbench.analysis import loader

    reads = []
    real = loader._read_runs
    monkeypatch.setattr(loader, "_read_runs", lambda root, dirs: reads.append(root) or real(root, dirs))
    loader._RUNS.clear()
    first = an.comparisons(folder)
    an.discover(folder), an.left_out(folder), an.syncs(folder), an.comparisons(folder)
    assert len(reads) == 1  # every table after the first takes the cached runs
    p = os.path.join(folder, "camp", "aa", "summary.json")
    s = json.load(open(p))
    s["comparisons"][0]["optimized"]["arm"] = "renamed#2"
    with open(p, "w") as f:
        json.dump(s, f)
    os.utime(p, ns=(os.stat(p).st_atime_ns, os.stat(p).st_mtime_ns + 10**9))  # a new stamp even on a coarse clock
    again = an.comparisons(folder)
    assert len(reads) == 2 and "renamed#2" in again["arm"].tolist() and "renamed#2" not in first["arm"].tolist()


def test_wb_profiles_env_is_the_default_root(folder, monkeypatch):
    monkeypatch.setenv("WB_PROFILES", folder)
    assert sorted(an.discover()["job"]) == ["aa", "gpu"]


def test_comparisons_read_speedups_and_cis_back(folder):
    c = an.comparisons(folder)
    assert list(c.columns) == an.COMP_COLUMNS
    assert c.groupby("role").size().to_dict() == {"aa": 1, "nvtx": 1, "optimized": 1, "other": 1}
    r = c[c["arm"] == "cached"].iloc[0]
    assert (r["baseline"], r["baseline_ms"], r["arm_ms"]) == ("rebuild", 110.0, 100.0)  # the summary's medians
    # the speedup is recomputed from results.csv (every pair, the rep as the unit), not read from summary.json
    ref = reference(os.path.join(folder, "camp", "gpu"), "packing", "rebuild", "cached")
    assert r["speedup"] == pytest.approx(ref["speedup"]) and [r["ci95_lo"], r["ci95_hi"]] == pytest.approx(ref["ci95"])
    assert r["speedup"] == pytest.approx(110.5 / 100.5, rel=0.003) and r["summary_speedup"] == pytest.approx(1.1)
    assert (r["summary_ci95_lo"], r["summary_ci95_hi"]) == pytest.approx((1.08, 1.13))
    assert r["verdict"] == "faster" and r["n_pairs"] == 8 and r["n_units"] == 4 and r["ci_contains_1"] == False  # noqa: E712
    assert (r["baseline_mean_ms"], r["arm_mean_ms"]) == pytest.approx((110.5, 100.5), abs=0.2)  # the arms' means
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
    assert len(st) == 8 * (3 + 2 + 2)  # 4 reps x 2 steps x the arms of packing, A/A and nvtx:packing
    cached = st[(st["arm"] == "cached")]
    assert cached["step_ms"].tolist() == pytest.approx([100.0 + s + 0.3 * phase(r, "cached")
                                                        for r, s in zip(cached["rep"], cached["step"])])
    w = an.warmups(folder)
    assert len(w) == len(st) and (w["warmup_steps"] == 3).all() and (w["warmup_settled"] == 1).all()
    cut = an.steps(folder, include_incomplete_comparisons=True)
    assert set(cut["comparison"]) == {"packing", "nvtx:packing", "packing@layers=4"}


def test_sweep_recovers_the_slope_per_layer(tmp_path):
    noise = {4: 0.2, 8: -0.1, 16: 0.1, 28: -0.2}
    comps = [packing(f"packing@layers={L}", L, base_ms=50 + 3.5 * L + noise[L], cached_ms=50.5) for L in noise]
    write_run(str(tmp_path / "sweep"), comps)
    points, fit = an.sweep(an.comparisons(str(tmp_path)))
    pc = points[points["arm"] == "cached"]
    assert pc["x"].tolist() == [4, 8, 16, 28] and pc["stat"].eq("mean").all() and pc["saving_se_ms"].notna().all()
    f = fit.set_index("arm").loc["cached"]
    # each point's se rests on n_units - 1 < stats.MIN_WEIGHT_DF df: OLS with a robust se, no 1/se² weights
    assert (pc["n_units"] - 1 < stats.MIN_WEIGHT_DF).all()
    assert f["key"] == "layers" and f["n_points"] == 4 and f["xs"] == "4,8,16,28" and not f["weighted"]
    assert f["slope_ms_per_x"] == pytest.approx(3.5, abs=0.05) and f["intercept_ms"] == pytest.approx(-0.5, abs=0.5)
    assert f["slope_ci95_lo"] < f["slope_ms_per_x"] < f["slope_ci95_hi"] and f["r2"] > 0.99
    # the reference: stats.linear_fit with the same se and df
    ref = stats.linear_fit(pc["x"].tolist(), pc["saving_ms"].tolist(), se=pc["saving_se_ms"].tolist(),
                           df=(pc["n_units"] - 1).tolist())
    assert ref["robust"]
    assert f["slope_ms_per_x"] == pytest.approx(ref["slope"])
    assert f["slope_ci95_lo"] == pytest.approx(ref["slope_ci95"][0])
    assert an.sweep(an.comparisons(str(tmp_path)), stat="median")[0]["stat"].eq("median").all()
    assert an.sweep(an.comparisons(str(tmp_path / "none")))[1].empty


def test_instrument_cost_counter_per_arm_and_nvtx(folder):
    cost = an.instrument_cost(folder)
    counter = cost[(cost["instrument"] == "sync counter") & cost["folder"].str.endswith("gpu")].set_index("arm")
    assert counter.loc["cached", "cost_pct"] == pytest.approx(10.0) and counter.loc["rebuild", "role"] == "baseline"
    nv = cost[cost["instrument"] == "nvtx ranges"].iloc[0]
    assert nv["arm"] == "rebuild" and (nv["off_ms"], nv["on_ms"]) == pytest.approx((100.5, 101.5), abs=0.2)  # means
    ref = reference(os.path.join(folder, "camp", "gpu"), "nvtx:packing", "rebuild-nvtx", "rebuild+nvtx")
    assert nv["cost_pct"] == pytest.approx(100 * (1 / ref["speedup"] - 1)) and nv["verdict"] == ref["verdict"]
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
    ref = reference(os.path.join(folder, "camp", "gpu"), "packing", "rebuild", "cached")
    assert step["ours_pct"] == pytest.approx(100 * (ref["speedup"] - 1)) and step["arm"] == "rebuild -> cached"
    assert (step["ours_ci95_lo_pct"], step["ours_ci95_hi_pct"]) == pytest.approx([100 * (x - 1) for x in ref["ci95"]])
    assert step["verdict"] == "faster" and step["n_pairs"] == 8
    assert cvo[(cvo["opt"] == "moe")]["note"].eq("no data").all()
    assert cvo[(cvo["opt"] == "packing") & (cvo["scope"] == "fwd")]["note"].iloc[0] == "not measured (scope fwd)"
    assert step["comparable"] and pd.isna(step["why_not_comparable"])
    fig = rp.claims_figure(cvo)
    assert "ours (95% CI)" in {t.name for t in fig.data} and fig.layout.xaxis.title.text != "gain_pct"
    two = an.claims_vs_ours(an.comparisons(folder).assign(ranks=2))  # a 2-GPU step is not the claim's step
    ours = two[two["ours_pct"].notna()]
    assert len(ours) and not ours["comparable"].any() and ours["why_not_comparable"].str.contains("2-GPU").all()
    names = {t.name for t in rp.claims_figure(two).data}
    assert "ours (95% CI)" not in names and any(str(n).startswith("ours, not comparable") for n in names)


def test_figures_carry_cis(folder):
    c = an.comparisons(folder)
    fig = rp.speedup_figure(c)
    assert all(t.error_x.array is not None for t in fig.data) and "95% CI" in fig.layout.title.text
    assert any("n=8 pairs" in h for t in fig.data for h in t.hovertext)
    assert len(rp.steps_figure(an.steps(folder)).data) >= 3
    assert len(rp.cost_figure(an.instrument_cost(folder)).data) == 2


def test_empty_root_gives_empty_frames_with_columns(tmp_path):
    assert an.discover(str(tmp_path)).empty and an.left_out(str(tmp_path)).empty
    assert list(an.comparisons(str(tmp_path)).columns) == an.COMP_COLUMNS
    for f in (an.steps, an.warmups, an.instrument_cost, an.syncs, an.savings):
        assert f(str(tmp_path)).empty
    assert an.arm_events(str(tmp_path)) == {} and an.discover(str(tmp_path / "missing")).empty


# --- one real tiny CPU run of the engine ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cpu_run(packing_trace_run):
    """conftest's shared tiny CPU run of packing (3 arms, 2 reps; its torch trace unused here)."""
    return str(packing_trace_run[0])


def test_a_real_cpu_run_is_left_out_by_default_and_read_when_asked(cpu_run):
    assert an.discover(cpu_run).empty
    assert an.left_out(cpu_run)["reason"].iloc[0].startswith("CPU run (device cpu)")
    c = an.comparisons(cpu_run, include_cpu=True).set_index("arm")
    with open(os.path.join(cpu_run, "summary.json")) as f:
        s = json.load(f)["comparisons"][0]
    assert list(c.index) == ["cached", "precomputed"] and c.loc["cached", "role"] == "optimized"
    ref = reference(cpu_run, s["name"], "rebuild", "cached")
    assert c.loc["cached", "speedup"] == pytest.approx(ref["speedup"]) and c.loc["cached", "n_pairs"] == 2
    # a CPU timing is no result, read back as the runner wrote it (`stats.timing_on`): no CI, no verdict
    assert c.loc["cached", "n_units"] == 2 and c.loc["cached", "verdict"] == stats.NOT_A_RESULT
    assert pd.isna(c.loc["cached", "ci95_lo"]) and c.loc["cached", "summary_verdict"] == stats.NOT_A_RESULT
    assert c.loc["cached", "summary_speedup"] == s["optimized"]["vs_baseline"]["speedup"]
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
    assert set(runs["gpu_name"]) == {"NVIDIA H100 80GB HBM3", "NVIDIA H200"}  # the H200 folder: issue 20's re-run
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
        ref = reference(os.path.join(ENGINE, "ab_all"), name, s[name]["baseline"]["arm"], s[name]["optimized"]["arm"])
        assert r["speedup"] == pytest.approx(ref["speedup"]) and [r["ci95_lo"], r["ci95_hi"]] == pytest.approx(ref["ci95"])
        assert r["summary_speedup"] == s[name]["speedup"]  # the old engine's figure, kept beside it
        assert r["n_units"] == 3 and r["verdict"] == "no verdict (n=3 reps < 4)"
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
    assert {t.name for t in rp.timeline_figure(tl).data} >= {"metadata build", "reload", "host sync", "memcpy"}
    assert set(tl["category"]) <= set(an.TIMELINE_CATEGORIES)  # each one coloured by report.palette.TIMELINE
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


def test_arm_events_reads_a_saved_file_when_first_looked_up(folder, monkeypatch):
    from workbench.analysis import timelines
    from workbench.traces import save_events
    d = os.path.join(folder, "camp", "gpu", "traces", "packing")
    os.makedirs(d)
    save_events(_events(), os.path.join(d, "rebuild"))
    save_events(_events().iloc[:3], os.path.join(d, "cached"))
    with open(os.path.join(d, "broken.events.parquet"), "w") as f:
        f.write("not parquet")
    read = []
    real = timelines.load_trace
    monkeypatch.setattr(timelines, "load_trace", lambda p: read.append(os.path.basename(p)) or real(p))
    ev = an.arm_events(folder)
    gpu = os.path.join("profiles", "camp", "gpu")
    assert sorted(ev) == [(gpu, "packing", "cached"), (gpu, "packing", "rebuild")] and len(ev) == 2  # broken: out
    assert (gpu, "packing", "rebuild") in ev and (gpu, "packing", "broken") not in ev and read == []
    assert len(ev[(gpu, "packing", "cached")]) == 3 and len(ev[(gpu, "packing", "cached")]) == 3
    assert read == ["cached.events.parquet"]


def test_witness_ops_reads_the_campaign_json(tmp_path):
    (tmp_path / "witness_ops").mkdir()
    (tmp_path / "witness_ops" / "witness.json").write_text(json.dumps(
        [{"op": "item", "counter": 1, "cpu_only": 0, "cuda_debug_warnings": 1}]))
    ops = an.witness_ops(str(tmp_path))
    assert ops["op"].tolist() == ["item"] and ops["agree"].all()


# --- savings-model verdicts, decompositions, breakdowns, L sweeps (the schema of workbench.savings.verdicts) -----------------

BUSY = ("gemm", "attention", "glue", "copy", "norm_elementwise", "optimizer", "other")
IDLE = ("exposed_copy", "sync_stall", "launch_gap")


def with_verdict(c, predicted, pci, measured, mci, verdict="confirmed", n=12, missing=None, corrected=None,
                 traced=True):
    """`c` (a comparison dict) annotated as `workbench.savings.verdicts` writes it: savings_model with a verdict, and for a
    traced run the decomposition and each arm's breakdown."""
    sm = {"formula": "(L*p - b) * s,  s = GPU idle per build + build kernel time", "predicted_ms": predicted,
          "predicted_se_ms": 1.0, "predicted_ci95": pci, "n_steps": 4, "measured_ms": measured, "measured_ci95": mci,
          "measured_n_pairs": n, "measured_n_units": n // 4, "ratio": measured / predicted if predicted else None,
          "ratio_ci90": [0.95 * measured / predicted, 1.05 * measured / predicted] if predicted else None,
          "bias_rel": 0.01, "p_confirm": 0.01, "p_confirm_holm": 0.02, "p_refute": 0.99, "p_refute_holm": 0.99,
          "verdict": verdict,
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
    fig = rp.breakdown_figure(bd)
    assert fig.layout.barmode == "stack" and {t.name for t in fig.data} >= {"gemm", "sync_stall (idle)"}
    for f in (an.verdicts, an.decomposition, an.breakdown, an.top_kernels, an.sweep_points, an.sweep_fits):
        assert f(str(tmp_path / "empty")).empty  # no run: an empty frame with its columns


def _sweep(layers, saving, jitter_ms=0.05, name="packing", predicted=None):
    """One sweep point per L whose timed steps save `saving(L)` ms (results.csv), with rep effects of `jitter_ms`;
    traced (a prediction `predicted(L)`) or not."""
    out = []
    for L in layers:
        m = saving(L)
        c = dict(packing(f"{name}@layers={L}", L, base_ms=100.0 + m, cached_ms=100.0), jitter_ms=jitter_ms)
        p = m if predicted is None else predicted(L)
        out.append(with_verdict(c, p, [p - 1, p + 1], m, [m - 1, m + 1], traced=predicted is not None))
    return out


def test_sweep_fits_and_the_l_minus_1_test(tmp_path):
    s = 2.5
    noise = {1: 0.1, 2: -0.2, 4: 0.15, 8: -0.05}
    write_run(str(tmp_path / "p" / "lm1"), _sweep(noise, lambda L: s * (L - 1) + noise[L]))
    write_run(str(tmp_path / "p" / "lin"), _sweep(noise, lambda L: s * L + 4 + noise[L]))  # 6.5 ms at L=1
    pts = an.sweep_points(str(tmp_path / "p"))
    assert list(pts.columns) == an.SWEEP_POINT_COLUMNS and len(pts) == 8
    assert pts["measured_from"].str.startswith("results.csv").all() and (pts["n_units"] == 4).all()
    f = an.sweep_fits(points=pts).set_index("folder")
    a, b = f.loc[os.path.join("p", "lm1")], f.loc[os.path.join("p", "lin")]
    # 4-rep points (3 df < stats.MIN_WEIGHT_DF): OLS with a robust se (the reference: stats.linear_fit, se and df)
    pa = pts[pts["folder"] == os.path.join("p", "lm1")]
    kw = dict(se=pa["measured_se_ms"].tolist(), df=pa["measured_df"].tolist(), at=1)
    ref = stats.linear_fit(pa["x"].tolist(), pa["measured_ms"].tolist(), **kw)
    ref90 = stats.linear_fit(pa["x"].tolist(), pa["measured_ms"].tolist(), confidence=0.90, **kw)
    assert not a["weighted"] and ref["robust"] and a["slope_ms"] == pytest.approx(ref["slope"])
    assert a["slope_ci95_lo"] == pytest.approx(ref["slope_ci95"][0])
    assert (a["at1_ms"], a["at1_ci95_lo"], a["at1_ci95_hi"]) == pytest.approx((ref["at"]["y"], *ref["at"]["ci95"]))
    assert (a["at1_ci90_lo"], a["at1_ci90_hi"]) == pytest.approx(ref90["at"]["ci95"])
    # equivalence within half of one layer's saving: the 90% CI at L = 1 inside ±slope/2
    assert a["margin_ms"] == pytest.approx(abs(a["slope_ms"]) / 2) and a["l_minus_1"] == "confirmed"
    assert -a["margin_ms"] < a["at1_ci90_lo"] and a["at1_ci90_hi"] < a["margin_ms"]
    assert "fit at L=1" in a["l_minus_1_by"] and "measured at L=1" in a["l_minus_1_by"]
    assert b["l_minus_1"] == "refuted" and b["at1_ms"] == pytest.approx(6.5, abs=0.3)
    assert b["at1_ci90_lo"] > b["margin_ms"]
    # a wide CI at L = 1 that contains 0 is not "(L-1) holds": ~2 ms per layer, rep effects of 20 ms
    write_run(str(tmp_path / "w" / "wide"), _sweep([1, 2, 4, 8], lambda L: 2.0 * (L - 1), jitter_ms=20.0))
    w = an.sweep_fits(str(tmp_path / "w")).iloc[0]
    assert w["at1_ci95_lo"] < 0 < w["at1_ci95_hi"] and w["at1_ci95_hi"] - w["at1_ci95_lo"] > 10
    assert w["l_minus_1"] == "inconclusive"
    # the workbench's own model at L = 1: its prediction there, by the same rule
    assert pd.isna(a["model_at1_ms"]) and a["model_at1"] is None  # untraced: no prediction
    write_run(str(tmp_path / "m" / "on"), _sweep(noise, lambda L: s * L + noise[L], predicted=lambda L: s * L))
    write_run(str(tmp_path / "m" / "off"), _sweep(noise, lambda L: s * L + noise[L], predicted=lambda L: s * L + 3))
    both = an.sweep_fits(str(tmp_path / "m")).set_index("folder")
    assert both.loc[os.path.join("m", "on"), "model_at1"] == "confirmed"
    m = both.loc[os.path.join("m", "off")]
    assert m["model_at1_ms"] == pytest.approx(5.5) and m["model_at1"] == "refuted"
    assert "against 5.5 ±" in m["model_at1_by"] and "entirely outside" in m["model_at1_by"]
    # two points: no CI, untested
    write_run(str(tmp_path / "r" / "two"), _sweep([4, 8], lambda L: 2.0 * L))
    assert an.sweep_fits(str(tmp_path / "r")).iloc[0]["l_minus_1"] == "untested"
    fig = rp.sweep_fit_figure(pts, an.sweep_fits(points=pts))
    assert any(t.error_y.array is not None for t in fig.data)


def test_equivalence_three_outcomes():
    assert an.equivalence([-28.0, 23.0], 0.0, 1.0) == "inconclusive"  # the issue's [-28, 23] ms for ~2 ms/layer
    assert an.equivalence([-0.5, 0.6], 0.0, 1.0) == "confirmed"
    assert an.equivalence([1.2, 3.0], 0.0, 1.0) == "refuted"
    assert an.equivalence(None, 0.0, 1.0) == "untested"


def test_sweep_points_come_from_results_csv_at_the_rep_level():
    from workbench.measure import engine
    pts = an.sweep_points(PROFILES)
    eng = pts[pts["folder"] == os.path.join("profiles", "2026-11-23_h100_engine", "packing_sweep")]
    assert eng["x"].tolist() == [4, 8, 16, 28] and (eng["n_units"] == 3).all()
    assert eng["measured_from"].str.startswith("results.csv").all()
    assert (eng["measured_ci95_lo"] < eng["measured_ms"]).all() and (eng["measured_ms"] < eng["measured_ci95_hi"]).all()
    smp = an.step_samples(os.path.join(ENGINE, "packing_sweep"))["packing@layers=8"]
    ref = stats.paired_difference(*engine.pairs(smp, "rebuild", "cached"))
    r = eng[eng["x"] == 8].iloc[0]
    assert (r["measured_ms"], r["measured_se_ms"], r["measured_df"]) == pytest.approx((ref["mean"], ref["se"], 2))


def test_runs_of_marks_the_run_that_disagrees(tmp_path):
    write_run(str(tmp_path / "p" / "a"), [packing()])
    write_run(str(tmp_path / "p" / "b"), [packing(base_ms=110.0, cached_ms=109.5)])  # same comparison, ~1.005x
    c = an.comparisons(str(tmp_path / "p"))
    r = an.runs_of(c[c["arm"] == "cached"]).set_index("folder")
    assert (r["runs"] == 2).all() and r["chosen"].sum() == 1
    assert r.loc[os.path.join("p", "b"), "chosen"]  # equal pairs: the later folder
    assert not r.loc[os.path.join("p", "a"), "agrees"]


def test_a_run_on_another_gpu_model_is_not_tested_against_the_chosen_one(tmp_path):
    """The same two runs as above, the first on an H200: another step, not a rerun, so it is marked `same_gpu`
    False and not counted as disagreeing (above, on the same GPU, it disagrees: the negative control)."""
    write_run(str(tmp_path / "p" / "a"), [packing()])
    write_run(str(tmp_path / "p" / "b"), [packing(base_ms=110.0, cached_ms=109.5)])
    meta = tmp_path / "p" / "a" / "meta.json"
    m = json.loads(meta.read_text())
    m["device"]["gpu_name"] = "NVIDIA H200"
    meta.write_text(json.dumps(m))
    c = an.comparisons(str(tmp_path / "p"))
    r = an.runs_of(c[c["arm"] == "cached"]).set_index("folder")
    a = r.loc[os.path.join("p", "a")]
    assert not a["same_gpu"] and a["agrees"] and r.loc[os.path.join("p", "b"), "same_gpu"]


def test_repeats_z_and_mean_z2(tmp_path):
    """Two runs of the same comparison (one of them as a sweep point at the same shape): z of the log difference
    over the two log CIs' se (half width / t with reps - 1 df), and the mean z² over comparisons."""
    from scipy import stats as sps
    write_run(str(tmp_path / "p" / "repeat_a"), [packing()])
    write_run(str(tmp_path / "p" / "repeat_b"), [dict(packing("packing@layers=8", base_ms=111.0), jitter_ms=0.6)])
    c = an.comparisons(str(tmp_path / "p"))
    z = an.repeats(c)
    assert list(z.columns) == an.REPEAT_COLUMNS and len(z) == 2  # cached and precomputed
    r = z.set_index("arm").loc["cached"]
    a, b = (c[(c["folder"] == os.path.join("p", f)) & (c["arm"] == "cached")].iloc[0] for f in ("repeat_a", "repeat_b"))
    se = lambda x: (np.log(x["ci95_hi"]) - np.log(x["ci95_lo"])) / 2 / sps.t.ppf(0.975, 3)  # noqa: E731
    want = (np.log(a["speedup"]) - np.log(b["speedup"])) / np.sqrt(se(a) ** 2 + se(b) ** 2)
    assert r["z"] == pytest.approx(want) and r["z"] < 0  # the second run saves more
    assert z.attrs["n"] == 2 and z.attrs["mean_z2"] == pytest.approx(float((z["z"] ** 2).mean()))
    # "agree" is a test (replication.runs_agree), not CI overlap; tau by REML over the runs' per-rep log ratios
    assert 0 <= r["p"] <= 1
    assert bool(r["agree"]) == (r["p"] >= 0.05) and z.attrs["n_disagree"] == int((z["p"] < 0.05).sum())
    g = z.attrs["groups"]
    assert list(g.columns) == an.REPEAT_GROUP_COLUMNS and len(g) == 2 and (g["K"] == 2).all()
    assert (g["tau_null_q95_pct"] > 0).all() and (g["sigma_pct"] > 0).all()
    # not a clean repeat: another commit (or fewer than 4 reps) leaves the pair out
    other = c.copy()
    other.loc[other["folder"] == os.path.join("p", "repeat_b"), "git_sha"] = "another-sha"
    assert an.repeats(other).empty
    mixed = c.copy()  # another NVTX backend (the nvtx package deleted mid-campaign) is not a clean repeat
    mixed.loc[mixed["folder"] == os.path.join("p", "repeat_b"), "nvtx_backend"] = "torch.cuda.nvtx"
    assert an.repeats(mixed).empty
    tuned = c.copy()  # a WorkbenchCallback run whose model ran other optimizations steps another step
    tuned.loc[tuned["folder"] == os.path.join("p", "repeat_b"), "optimizations"] = "packing=cached"
    assert an.repeats(tuned).empty
    few = c.copy()
    few.loc[few["folder"] == os.path.join("p", "repeat_b"), "n_units"] = 3
    assert an.repeats(few).empty
    # the old figures of summary.json: the pair-bootstrap CI's se with the normal quantile
    old = an.repeats(c, "summary").set_index("arm").loc["cached"]
    se_old = lambda lo, hi: (np.log(hi) - np.log(lo)) / 2 / 1.96  # noqa: E731
    want_old = (np.log(1.1) - np.log(1.11)) / np.sqrt(se_old(1.08, 1.13) ** 2 + se_old(1.09, 1.14) ** 2)
    assert old["z"] == pytest.approx(want_old, rel=1e-3)
    assert an.repeats(c[c["folder"] == os.path.join("p", "repeat_a")]).empty


def test_default_lengths_agrees_with_the_run_config_and_a_headline_keeps_only_runs_of_it():
    import pandas as pd
    from workbench.step import config
    from workbench.analysis import constants, default_lengths
    from workbench.ab.cli import GPU_DEFAULTS
    assert constants.DEFAULT_LENGTHS == config.DataConfig().lengths == config.RunConfig().data.lengths \
        == GPU_DEFAULTS["_run"]["lengths"]  # the committed runs are GPU runs: ab's per-device default there
    df = pd.DataFrame({"lengths": [constants.DEFAULT_LENGTHS, "data:chat", None], "x": [1, 2, 3]})
    assert default_lengths(df)["x"].tolist() == [1, 3]  # an unrecorded distribution is the default
