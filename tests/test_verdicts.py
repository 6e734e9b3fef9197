"""The savings models' in-situ inputs, uncertainty and verdicts, on synthetic traces with known answers; each
model can be refuted (wrong L, c and g swapped), and the delta-method uncertainty matches a brute-force bootstrap."""
import numpy as np
import pytest

from synthetic_traces import offload_trace, packing_trace
from workbench import stats, verdicts


def _measured(mean, half):
    return {"mean": mean, "ci95": [mean - half, mean + half], "n_pairs": 12}


# --- packing -------------------------------------------------------------------------------------------------

def test_packing_builds_measure_idle_and_kernel_per_build():
    ev = packing_trace(layers=3, passes=2, steps=2, idle_us=5.0, kernel_us=2.0)
    b = verdicts.packing_builds(ev)
    assert len(b) == 12
    assert b["idle_ms"].to_numpy() * 1e3 == pytest.approx(np.full(12, 5.5))
    assert b["kernel_ms"].to_numpy() * 1e3 == pytest.approx(np.full(12, 2.0))


def test_packing_model_confirmed_with_the_right_L():
    ev = packing_trace(layers=4, passes=2, steps=3)
    m = verdicts.packing_model(ev, layers=4, checkpointing=True, arm="cached")
    s_ms = (5.5 + 2.0) / 1e3
    assert m["predicted_ms"] == pytest.approx(7 * s_ms)  # L*p - 1 builds removed
    v = verdicts.check("packing", m, _measured(7 * s_ms, 0.001), None)
    assert v["verdict"] == "confirmed"


def test_packing_wrong_L_fails_the_build_count_check():
    ev = packing_trace(layers=4, passes=2, steps=2)
    with pytest.raises(verdicts.InputCheckFailed, match="expected L\\*p"):
        verdicts.packing_model(ev, layers=8, checkpointing=True, arm="cached")


def test_packing_wrong_L_is_refuted_by_the_measurement():
    """With the count check bypassed (a trace of 8 layers, a model told 2), the prediction misses the saving."""
    true = verdicts.packing_model(packing_trace(layers=8, steps=3), layers=8, checkpointing=True, arm="cached")
    wrong = verdicts.packing_model(packing_trace(layers=2, steps=3), layers=2, checkpointing=True, arm="cached")
    measured = _measured(true["predicted_ms"], 0.05 * true["predicted_ms"])
    assert verdicts.check("packing", true, measured, None)["verdict"] == "confirmed"
    assert verdicts.check("packing", wrong, measured, None)["verdict"] == "refuted"


# --- offload -------------------------------------------------------------------------------------------------

C = [30.0, 10.0, 40.0, 10.0]
G = [50.0, 60.0, 20.0, 70.0]


def test_offload_inputs_are_the_copy_and_the_layer_kernels():
    lay = verdicts.offload_layers(offload_trace(C, G, steps=2))
    one = lay[lay["step"] == 0].set_index("layer")
    assert one["c_ms"].to_numpy() * 1e3 == pytest.approx(C)
    assert one["g_ms"].to_numpy() * 1e3 == pytest.approx(G)


def test_offload_model_and_c_g_swapped_is_refuted():
    true_ms = sum(min(C[i - 1], G[i]) for i in range(1, 4)) / 1e3  # 30 + 10 + 40 = 80 us
    m = verdicts.offload_model(offload_trace(C, G, steps=3))
    assert m["predicted_ms"] == pytest.approx(true_ms)
    swapped = verdicts.offload_model(offload_trace(G, C, steps=3))
    measured = _measured(true_ms, 0.05 * true_ms)
    assert verdicts.check("offload", m, measured, None)["verdict"] == "confirmed"
    assert swapped["predicted_ms"] != pytest.approx(true_ms)
    assert verdicts.check("offload", swapped, measured, None)["verdict"] == "refuted"


def test_offload_first_reload_hides_behind_the_work_queued_ahead_of_it():
    """h = the GPU work between the first reload's launch and its copy; the model adds min(c_(L-1), h), and keeps
    the published (L-1) form beside it."""
    published = sum(min(C[i - 1], G[i]) for i in range(1, 4)) / 1e3
    assert verdicts.first_reload_lead(offload_trace(C, G, steps=2))["lead_ms"].tolist() == [0.0, 0.0]
    for lead_us, first_us in [(25.0, 10.0), (4.0, 4.0)]:  # c_(L-1) = 10 us: h caps it, or c does
        ev = offload_trace(C, G, steps=3, lead_us=lead_us)
        assert verdicts.first_reload_lead(ev)["lead_ms"].to_numpy() * 1e3 == pytest.approx([lead_us + 0.5] * 3)
        m = verdicts.offload_model(ev)
        assert m["inputs"]["c_ms"]["value"] == pytest.approx([c / 1e3 for c in C])  # the lead does not leak into c
        assert m["published"]["predicted_ms"] == pytest.approx(published)
        assert m["predicted_ms"] == pytest.approx(published + min(C[-1], lead_us + 0.5) / 1e3)
        # judged against a saving of L reloads, the published form is refuted and the model is not
        v = verdicts.check("offload", m, _measured(m["predicted_ms"], 0.02 * m["predicted_ms"]), None)
        assert v["verdict"] == "confirmed"
        assert v["published"]["verdict"] == ("refuted" if first_us > 5 else "confirmed")


def test_offload_c_checked_against_bytes_over_bandwidth():
    ev = offload_trace(C, G, steps=2)  # bytes = c_us * 1000: 1 GB/s gives c exactly
    assert verdicts.offload_model(ev, h2d_gb_per_s=1.0)["inputs"]["c_from_bandwidth_ms"]["value"] > 0
    with pytest.raises(verdicts.InputCheckFailed, match="bandwidth"):
        verdicts.offload_model(ev, h2d_gb_per_s=2.0)


def test_offload_uncertainty_from_the_spread_across_steps():
    m = verdicts.offload_model(offload_trace(C, G, steps=4, jitter_us=2.0))
    lo, hi = m["predicted_ci95"]
    assert lo < m["predicted_ms"] < hi and m["n_steps"] == 4


# --- verdict rule --------------------------------------------------------------------------------------------

def test_judge_overlap_or_ratio_band():
    assert verdicts.judge(10.0, [9.0, 11.0], 12.0, [10.5, 13.5])[0] == "confirmed"  # overlap
    assert verdicts.judge(10.0, [9.9, 10.1], 10.8, [10.7, 10.9])[0] == "confirmed"  # ratio 1.08
    v, r = verdicts.judge(10.0, [9.0, 11.0], 40.0, [38.0, 42.0])
    assert v == "refuted" and r == pytest.approx(4.0)


def test_refuted_model_names_the_largest_missing_component_and_a_corrected_model():
    import pandas as pd
    m = {"predicted_ms": 10.0, "predicted_ci95": [9.0, 11.0], "predicted_se_ms": 0.5, "formula": "f"}
    d = pd.DataFrame([dict(component="gemm", saved_ms=30.0), dict(component="sync_stall", saved_ms=10.0),
                      dict(component="glue", saved_ms=2.0), dict(component="launch_gap", saved_ms=0.0),
                      dict(component="step_ms", saved_ms=42.0), dict(component="residual_ms", saved_ms=-2.0)])
    v = verdicts.check("packing", m, _measured(40.0, 2.0), d)
    assert v["verdict"] == "refuted"
    assert v["largest_missing"]["component"] == "gemm"
    assert v["corrected"]["predicted_ms"] == pytest.approx(40.0)
    assert v["corrected"]["verdict"] == "confirmed"


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
    from workbench.levers import levers
    comps = [dict(component="gemm", ms=50.0, share=0.5), dict(component="launch_gap", ms=30.0, share=0.3),
             dict(component="sync_stall", ms=2.0, share=0.02), dict(component="norm_elementwise", ms=18.0, share=0.18)]
    lv = levers(comps)
    assert [x["component"] for x in lv] == ["launch_gap", "norm_elementwise"]  # sync_stall < 5%: left out
    assert "CUDA graphs" in lv[0]["lever"]
    dense = levers(comps, attention_flops="dense")
    assert dense[-1]["component"] == "attention (dense)" and "varlen" in dense[-1]["lever"]


def test_slice_gradients_lever_from_the_top_kernels():
    """Zero-fills and adds of whole tensors, many per step, are named first (with their counts and share of the
    step); a few fills and adds (an optimizer's, a loss's) are not."""
    from workbench.levers import levers, slice_gradients
    comps = [dict(component="gemm", ms=100.0, share=0.1), dict(component="norm_elementwise", ms=800.0, share=0.8),
             dict(component="step_ms", ms=1000.0, share=1.0)]
    top = [dict(name="void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<c10::BFloat16>>",
                cls="norm_elementwise", count=4080.0, ms=600.0),
           dict(name="void at::native::vectorized_elementwise_kernel<8, at::native::FillFunctor<c10::BFloat16>>",
                cls="norm_elementwise", count=4054.0, ms=150.0)]
    sg = slice_gradients(top, 1000.0)
    assert sg["fills"] == 4054 and sg["adds"] == 4080 and sg["share"] == pytest.approx(0.75)
    lv = levers(comps, top_kernels=top)
    assert lv[0]["component"] == "slice gradients (fill + add)" and "grouped_mm" in lv[0]["lever"]
    few = [dict(t, count=8.0) for t in top]
    assert slice_gradients(few, 1000.0) is None
    assert [x["component"] for x in levers(comps, top_kernels=few)] == ["norm_elementwise"]
