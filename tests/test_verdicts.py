"""The savings models' in-situ inputs, uncertainty and verdicts, on synthetic traces with known answers; each
model can be refuted (wrong L, c and g swapped), and the delta-method uncertainty matches a brute-force bootstrap."""
import numpy as np
import pytest

from synthetic_traces import offload_trace, packing_trace
from workbench.savings import common as savings, verdicts
from workbench.measure import stats
from workbench.opts import offload_savings, packing_savings


def _measured(mean, half, reps=12):
    """A measured saving as `stats.paired_difference` gives it: 95% CI half width `half` over `reps` reps."""
    from scipy import stats as sps
    se = half / float(sps.t.ppf(0.975, reps - 1))
    return {"mean": mean, "ci95": [mean - half, mean + half], "se": se, "df": reps - 1, "n_pairs": 4 * reps,
            "n_units": reps}


# --- packing -------------------------------------------------------------------------------------------------

def test_packing_builds_measure_idle_and_kernel_per_build():
    ev = packing_trace(layers=3, passes=2, steps=2, idle_us=5.0, kernel_us=2.0)
    b = packing_savings.packing_builds(ev)
    assert len(b) == 12
    assert b["idle_ms"].to_numpy() * 1e3 == pytest.approx(np.full(12, 5.5))
    assert b["kernel_ms"].to_numpy() * 1e3 == pytest.approx(np.full(12, 2.0))


def test_packing_model_confirmed_with_the_right_L():
    ev = packing_trace(layers=4, passes=2, steps=3)
    m = packing_savings.packing_model(ev, layers=4, checkpointing=True, arm="cached")
    s_ms = (5.5 + 2.0) / 1e3
    assert m["predicted_ms"] == pytest.approx(7 * s_ms)  # L*p - 1 builds removed
    v = verdicts.check("packing", m, _measured(7 * s_ms, 0.001), None)
    assert v["verdict"] == "confirmed"


def test_packing_wrong_L_fails_the_build_count_check():
    ev = packing_trace(layers=4, passes=2, steps=2)
    with pytest.raises(savings.InputCheckFailed, match="expected L\\*p"):
        packing_savings.packing_model(ev, layers=8, checkpointing=True, arm="cached")


def test_packing_wrong_L_is_refuted_by_the_measurement():
    """With the count check bypassed (a trace of 8 layers, a model told 2), the prediction misses the saving."""
    true = packing_savings.packing_model(packing_trace(layers=8, steps=3), layers=8, checkpointing=True, arm="cached")
    wrong = packing_savings.packing_model(packing_trace(layers=2, steps=3), layers=2, checkpointing=True, arm="cached")
    measured = _measured(true["predicted_ms"], 0.05 * true["predicted_ms"])
    assert verdicts.check("packing", true, measured, None)["verdict"] == "confirmed"
    assert verdicts.check("packing", wrong, measured, None)["verdict"] == "refuted"


# --- offload -------------------------------------------------------------------------------------------------

C = [30.0, 10.0, 40.0, 10.0]
G = [50.0, 60.0, 20.0, 70.0]


def test_offload_inputs_are_the_copy_and_the_layer_kernels():
    lay = offload_savings.offload_layers(offload_trace(C, G, steps=2))
    one = lay[lay["step"] == 0].set_index("layer")
    assert one["c_ms"].to_numpy() * 1e3 == pytest.approx(C)
    assert one["g_ms"].to_numpy() * 1e3 == pytest.approx(G)


def test_offload_model_and_c_g_swapped_is_refuted():
    true_ms = sum(min(C[i - 1], G[i]) for i in range(1, 4)) / 1e3  # 30 + 10 + 40 = 80 us
    m = offload_savings.offload_model(offload_trace(C, G, steps=3))
    assert m["predicted_ms"] == pytest.approx(true_ms)
    swapped = offload_savings.offload_model(offload_trace(G, C, steps=3))
    measured = _measured(true_ms, 0.05 * true_ms)
    assert verdicts.check("offload", m, measured, None)["verdict"] == "confirmed"
    assert swapped["predicted_ms"] != pytest.approx(true_ms)
    assert verdicts.check("offload", swapped, measured, None)["verdict"] == "refuted"


def test_offload_first_reload_hides_behind_the_work_queued_ahead_of_it():
    """h = the GPU work between the first reload's launch and its copy; the model adds min(c_(L-1), h), and keeps
    the published (L-1) form beside it."""
    c = C[:-1] + [40.0]  # a last reload as long as the third: the first-reload term is half the published form
    published = sum(min(c[i - 1], G[i]) for i in range(1, 4)) / 1e3
    assert offload_savings.first_reload_lead(offload_trace(c, G, steps=2))["lead_ms"].tolist() == [0.0, 0.0]
    for lead_us, first_us in [(45.0, 40.0), (4.0, 4.0)]:  # c_(L-1) = 40 us: h caps it, or c does
        ev = offload_trace(c, G, steps=3, lead_us=lead_us)
        assert offload_savings.first_reload_lead(ev)["lead_ms"].to_numpy() * 1e3 == pytest.approx([lead_us + 0.5] * 3)
        m = offload_savings.offload_model(ev)
        assert m["inputs"]["c_ms"]["value"] == pytest.approx([x / 1e3 for x in c])  # the lead does not leak into c
        assert m["published"]["predicted_ms"] == pytest.approx(published)
        assert m["predicted_ms"] == pytest.approx(published + min(c[-1], lead_us + 0.5) / 1e3)
        # judged against a saving that includes the first reload, the published form is refuted when that term is
        # large (1.5x) and confirmed when it is small (1.06x, inside [0.8, 1.25]); the model is confirmed either way
        v = verdicts.check("offload", m, _measured(m["predicted_ms"], 0.02 * m["predicted_ms"]), None)
        assert v["verdict"] == "confirmed"
        assert v["published"]["verdict"] == ("refuted" if first_us > 5 else "confirmed")


def test_offload_c_checked_against_bytes_over_bandwidth():
    ev = offload_trace(C, G, steps=2)  # bytes = c_us * 1000: 1 GB/s gives c exactly
    assert offload_savings.offload_model(ev, h2d_gb_per_s=1.0)["inputs"]["c_from_bandwidth_ms"]["value"] > 0
    with pytest.raises(savings.InputCheckFailed, match="bandwidth"):
        offload_savings.offload_model(ev, h2d_gb_per_s=2.0)


def test_offload_uncertainty_from_the_spread_across_steps():
    m = offload_savings.offload_model(offload_trace(C, G, steps=4, jitter_us=2.0))
    lo, hi = m["predicted_ci95"]
    assert lo < m["predicted_ms"] < hi and m["n_steps"] == 4


# --- verdict rule ---------------------------------------------------------------------------------------------

def test_a_model_30_percent_off_with_tight_data_is_refuted():
    v = verdicts.judge(10.0, 0.1, 13.0, 0.2, 9, predicted_df=3)
    assert v["verdict"] == "refuted" and v["ratio"] == pytest.approx(1.3)
    assert v["ratio_ci90"][0] > verdicts.BAND[1] and v["p_refute"] <= 0.05


def test_a_right_model_with_tight_data_is_confirmed():
    v = verdicts.judge(10.0, 0.1, 10.2, 0.2, 9, predicted_df=3)
    assert v["verdict"] == "confirmed"
    lo, hi = v["ratio_ci90"]
    assert verdicts.BAND[0] < lo < 1.02 < hi < verdicts.BAND[1] and v["p_confirm"] <= 0.05


def test_wide_data_is_inconclusive_with_its_ci_only():
    """No "about N more reps would decide": no sequential rule backs one, so an inconclusive verdict carries its CI
    and nothing else."""
    v = verdicts.judge(10.0, 0.1, 10.2, 3.0, 2, predicted_df=3)
    assert v["verdict"] == "inconclusive"
    lo, hi = v["ratio_ci90"]
    assert lo < verdicts.BAND[0] and hi > verdicts.BAND[1]
    assert not {"reps_to_decide", "would_read", "decide_note"} & set(v)


def test_the_issues_example_does_not_read_confirmed():
    """Packing on an 8B dense model: predicted 28.6 [18.4, 38.9] ms (4 traced steps), measured 18.3 [14.1, 25.4] ms
    (3 reps): measured / predicted 0.64, which the old rule (CIs overlap) printed as confirmed."""
    from scipy import stats as sps
    se_p = (38.9 - 18.4) / 2 / float(sps.t.ppf(0.975, 3))
    se_m = (25.4 - 14.1) / 2 / float(sps.t.ppf(0.975, 2))
    v = verdicts.judge(28.6, se_p, 18.3, se_m, 2, predicted_df=3)
    assert v["verdict"] != "confirmed" and v["ratio"] == pytest.approx(0.64, abs=0.005)
    assert v["ratio_ci90"][0] < verdicts.BAND[0] < v["ratio_ci90"][1] < verdicts.BAND[1]


def test_a_negative_saving_is_judged_on_the_linear_form():
    v = verdicts.judge(10.0, 0.1, -1.0, 0.5, 2, predicted_df=3)
    assert v["form"] == "linear" and v["verdict"] == "refuted"
    near = verdicts.judge(10.0, 0.1, -1.0, 20.0, 2, predicted_df=3)
    assert near["form"] == "linear" and near["verdict"] == "inconclusive"


def test_holm_turns_a_borderline_verdict_inconclusive_in_a_family_of_three():
    """Alone, a model confirmed at p ~ 0.04 reads confirmed; beside two undecided ones in its run's family, Holm
    multiplies its p by 3 and it reads inconclusive. A decisive one stays confirmed."""
    from scipy import optimize
    se = optimize.brentq(lambda s: verdicts.judge(10.0, 0.0, 11.0, s, 9)["p_confirm"] - 0.04, 1e-3, 5.0)
    border = verdicts.judge(10.0, 0.0, 11.0, se, 9)
    assert border["verdict"] == "confirmed" and border["p_confirm"] == pytest.approx(0.04)
    fam = [dict(border), verdicts.judge(10.0, 0.0, 10.0, 5.0, 2),
           verdicts.judge(10.0, 0.0, 12.0, 6.0, 2)]
    verdicts.holm_family(fam)
    assert fam[0]["verdict"] == "inconclusive" and fam[0]["p_confirm_holm"] == pytest.approx(0.12)
    assert fam[0]["p_confirm"] == pytest.approx(0.04)  # the raw p is kept
    sure = [verdicts.judge(10.0, 0.0, 10.0, 0.05, 9), *fam[1:]]
    assert verdicts.holm_family(sure)[0]["verdict"] == "confirmed"


def test_annotate_applies_holm_per_family_of_the_run_folder():
    assert verdicts.family_of("packing") == verdicts.family_of("moe") == ""
    assert verdicts.family_of("offload@layers=1") == verdicts.family_of("offload@layers=4") == "offload"


def test_refuted_model_names_the_largest_missing_component_and_an_exploratory_corrected_model():
    import pandas as pd
    m = {"predicted_ms": 10.0, "predicted_ci95": [9.0, 11.0], "predicted_se_ms": 0.3, "formula": "f", "n_steps": 4}
    d = pd.DataFrame([dict(component="gemm", saved_ms=30.0), dict(component="sync_stall", saved_ms=10.0),
                      dict(component="glue", saved_ms=2.0), dict(component="launch_gap", saved_ms=0.0),
                      dict(component="step_ms", saved_ms=42.0), dict(component="residual_ms", saved_ms=-2.0)])
    v = verdicts.check("packing", m, _measured(40.0, 2.0), d)
    assert v["verdict"] == "refuted"
    assert v["largest_missing"]["component"] == "gemm"
    corr = v["corrected"]
    assert corr["predicted_ms"] == pytest.approx(40.0)
    # it fits the data (its CI lies inside the band), yet it was chosen after the fact: never "confirmed"
    assert corr["raw_verdict"] == "confirmed" and corr["verdict"] == "exploratory: consistent"
    assert corr["exploratory"] is True and "confirmed" not in corr["verdict"]
    assert verdicts.exploratory("refuted") == "exploratory: refuted"


# --- uncertainty ---------------------------------------------------------------------------------------------

def test_delta_method_matches_a_brute_force_bootstrap():
    rng = np.random.default_rng(0)
    n = 400
    X = np.stack([rng.normal(3.0, 0.5, n), rng.normal(2.0, 0.3, n), rng.normal(5.0, 1.0, n)], axis=1)

    def f(v):
        return v[0] * v[1] + min(v[2], 10.0) - v[1] ** 2

    d = stats.delta_method(f, X)
    boot = [f(X[rng.integers(0, n, n)].mean(axis=0)) for _ in range(4000)]
    assert d["se"] == pytest.approx(float(np.std(boot, ddof=1)), rel=0.1)
    assert d["estimate"] == pytest.approx(f(X.mean(axis=0)))


def test_paired_difference_ci_contains_the_true_mean_difference():
    rng = np.random.default_rng(1)
    b = rng.normal(100, 2, 24)
    o = b - 3 + rng.normal(0, 0.5, 24)
    d = stats.paired_difference(b, o)
    assert d["ci95"][0] < 3 < d["ci95"][1]
    assert d["n_pairs"] == 24


def test_linear_fit_value_at_one():
    x = [1, 2, 4, 8]
    y = [0.0, 2.0, 6.0, 14.0]  # 2 * (L - 1)
    f = stats.linear_fit(x, y, at=1)
    assert f["at"]["y"] == pytest.approx(0.0, abs=1e-9)
    assert f["slope"] == pytest.approx(2.0)


def test_levers_rank_the_non_matrix_components():
    from workbench.traces.lever_advice import levers
    comps = [dict(component="gemm", ms=50.0, share=0.5), dict(component="launch_gap", ms=30.0, share=0.3),
             dict(component="sync_stall", ms=2.0, share=0.02), dict(component="norm_elementwise", ms=18.0, share=0.18)]
    lv = levers(comps)
    assert [x["component"] for x in lv] == ["launch_gap", "norm_elementwise"]  # sync_stall < 5%: left out
    assert "CUDA graphs" in lv[0]["lever"]
    dense = levers(comps, attention_flops="dense")
    assert dense[-1]["component"] == "attention (dense)" and "varlen" in dense[-1]["lever"]


def _fill_add_kernels(adds, add_ms, fills, fill_ms):
    """`decompose.top_kernels` rows of whole-tensor adds and zero-fills (the slice-gradient pattern's kernels)."""
    return [dict(name="void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<c10::BFloat16>>",
                 cls="norm_elementwise", count=adds, ms=add_ms),
            dict(name="void at::native::vectorized_elementwise_kernel<8, at::native::FillFunctor<c10::BFloat16>>",
                 cls="norm_elementwise", count=fills, ms=fill_ms)]


def test_slice_gradients_lever_from_the_top_kernels():
    """Zero-fills and adds of whole tensors, many per step, are named first (with their counts and share of the
    step); a few fills and adds (an optimizer's, a loss's) are not."""
    from workbench.traces.lever_advice import levers, slice_gradients
    comps = [dict(component="gemm", ms=100.0, share=0.1), dict(component="norm_elementwise", ms=800.0, share=0.8),
             dict(component="step_ms", ms=1000.0, share=1.0)]
    top = _fill_add_kernels(adds=4080.0, add_ms=600.0, fills=4054.0, fill_ms=150.0)
    sg = slice_gradients(top, 1000.0, experts=128)
    assert sg["fills"] == 4054 and sg["adds"] == 4080 and sg["share"] == pytest.approx(0.75)
    lv = levers(comps, top_kernels=top, experts=128)
    assert lv[0]["component"] == "slice gradients (fill + add)" and "grouped_mm" in lv[0]["lever"]
    few = [dict(t, count=8.0) for t in top]
    assert slice_gradients(few, 1000.0, experts=128) is None
    assert [x["component"] for x in levers(comps, top_kernels=few, experts=128)] == ["norm_elementwise"]


def test_a_dense_models_fills_and_adds_are_no_per_expert_loop():
    """The H100 llama-3.1-8b breakdowns of 2026-11-27 (32 layers: 259 fills and 1211 adds a step, 6% of it) named the
    per-expert pattern on a model without experts. Now only a model with experts gets it, and only from as many fills
    a step as one layer has experts; the same kernels on a MoE model of 64 experts are still named (the control)."""
    from workbench.traces.lever_advice import experts_of, levers, slice_gradients
    comps = [dict(component="gemm", ms=500.0, share=0.3), dict(component="norm_elementwise", ms=340.0, share=0.21),
             dict(component="step_ms", ms=1640.0, share=1.0)]
    top = _fill_add_kernels(adds=1211.0, add_ms=81.0, fills=259.0, fill_ms=25.0)
    assert experts_of("llama-3.1-8b", 32) is None and experts_of("no-such-model") is None
    assert experts_of("qwen3-30b-a3b", 4) == 128 and experts_of("gpt-oss-20b", 4) == 32
    assert slice_gradients(top, 1640.0) is None
    assert slice_gradients(top, 1640.0, experts=experts_of("llama-3.1-8b")) is None
    assert [x["component"] for x in levers(comps, top_kernels=top)] == ["norm_elementwise"]
    assert slice_gradients(top, 1640.0, experts=64)["fills"] == 259
    assert slice_gradients(top, 1640.0, experts=512) is None  # fewer fills than one layer's experts
