"""Instruments (the 4-GPU job `studies/four_gpu/fourgpu.sh`) on the CPU: FSDP2 against one process at bf16
(`workbench.ab.distributed.equiv_bf16`: a run of the tests' one torchrun launch, 2 ranks, gloo, tiny preset;
`equivalence.judge_sharded` on constructed gradients, a perturbed one failing), the bandwidth of ranks copying at
once and the offload model's contention term (exact arithmetic), the projection rule of
`workbench.savings.straggler`, the per-class totals of a traced step and the rule that reads two of them
(`workbench.traces.class_totals`), and the analysis script."""
import json
import os

import pandas as pd
import pytest
import torch

from workbench.measure import equivalence
from workbench.savings import straggler

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["--opt", "packing", "--model", "tiny-llama", "--tokens", "64", "--batches", "1", "--device", "cpu",
        "--dtype", "bf16", "--precision", "autocast"]


# --- FSDP2 vs one process at bf16: a run of the session's torchrun launch ------------------------------------------

def early_start(tmp_path_factory, items):
    """At collection (conftest's pytest_collection_finish): the run joins the session's one torchrun launch
    (conftest.TorchrunSeries, beside tests/test_distributed.py's runs)."""
    if any("equiv_run" in item.fixturenames for item in items):
        from conftest import torchrun_series
        series = torchrun_series(tmp_path_factory)
        series.add("equiv_bf16", "workbench.ab.distributed.equiv_bf16",
                   [*TINY, "--json", series.root / "equiv_bf16" / "equiv.json"])
        return series


@pytest.fixture(scope="module")
def equiv_run(tmp_path_factory):
    from conftest import early
    series = early(__name__) or early_start(tmp_path_factory, [type("I", (), {"fixturenames": ["equiv_run"]})])
    r = series.result("equiv_bf16", timeout=300)
    return r["rcs"], series.root / "equiv_bf16" / "equiv.json", r["stdout"], r["stderr"] + r["logs"][-2000:]


def test_fsdp2_matches_one_process_at_bf16_and_its_negative_control_fails(equiv_run):
    rcs, out, stdout, stderr = equiv_run
    assert rcs == [0, 0], stderr[-3000:]
    with open(out) as f:
        res = json.load(f)
    assert json.loads(stdout.strip().splitlines()[-1]) == res  # the same JSON as the last stdout line
    assert res["world_size"] == 2 and res["backend"] == "gloo" and res["equivalent"] is True
    (c,) = res["comparisons"]
    assert c["arm"] == "rebuild" and c["precision"] == "autocast" and c["dtype"] == "torch.bfloat16"
    assert c["equivalent"] is True and c["tensors"] > 0 and not c["failing"]
    assert c["grad_max_rel_l2"] <= c["worst_tensors"][0]["tol"]
    # the tolerance comes from the run's own bf16 error, not a constant: bf16 moved the gradients from fp32
    assert c["grad_max_bf16_vs_fp32_rel_l2"] > 10 * equivalence.RTOL[torch.float32]
    # the negative control (rank 1's batch taken out of the sharded gradient) fails, and the check says it would
    # catch a dropped batch of either rank
    assert c["control_failed_as_it_must"] is True and c["negative_control"]["equivalent"] is False
    assert c["negative_control"]["failing_tensors"] > 0
    assert c["decisive"] is True and min(c["drop_batch_caught_by_tensors"]) > 0
    # ranks drew different batches
    assert len(set(c["per_rank_loss_one_process"])) == 2


# --- the criterion on constructed gradients -------------------------------------------------------------------------

def _res(loss, **grads):
    return {"loss": loss, "grads": {k: torch.tensor(v) for k, v in grads.items()}}


def test_judge_sharded_tolerance_is_the_factor_times_the_bf16_error():
    # fp32 (3, 4): norm 5; one process bf16 (3, 4.5): 0.1 from fp32 -> tolerance 1.5 * 0.1 + 1e-4 = 0.1501
    one32, one = _res(2.0, w=[3.0, 4.0]), _res(2.0, w=[3.0, 4.5])
    n1 = (3.0 ** 2 + 4.5 ** 2) ** 0.5
    inside = _res(2.0, w=[3.0, 4.5 + 0.1500 * n1])
    outside = _res(2.0, w=[3.0, 4.5 + 0.1502 * n1])  # the perturbed gradient: just beyond
    ok = equivalence.judge_sharded(inside, one, one32)
    assert ok["equivalent"] is True
    assert ok["worst_tensors"][0]["tol"] == pytest.approx(1.5 * 0.1 + 1e-4)
    assert ok["grad_max_rel_l2"] == pytest.approx(0.1500, rel=1e-5)
    bad = equivalence.judge_sharded(outside, one, one32)
    assert bad["equivalent"] is False and bad["failing"] == ["w"] and bad["n_failing"] == 1
    # the loss alone can fail it too
    assert equivalence.judge_sharded(_res(2.1, w=[3.0, 4.5]), one, one32)["equivalent"] is False
    # a gradient missing on one side is a mismatch, never a pass
    assert equivalence.judge_sharded({"loss": 2.0, "grads": {"w": None}}, one, one32)["equivalent"] is False


def test_judge_sharded_drop_power_is_exact():
    one32, one = _res(1.0, w=[3.0, 4.0]), _res(1.0, w=[3.0, 4.0])  # no bf16 error: tolerance = the 1e-4 floor
    # two batches: ||g_0|| = 1, ||g_1|| = 6; ||G|| = 5: dropping batch r moves G by ||g_r|| / (2 * 5)
    r = equivalence.judge_sharded(one, one, one32, {"w": [1.0, 6.0]})
    assert r["equivalent"] is True and r["decisive"] is True and r["drop_batch_caught_by_tensors"] == [1, 1]
    # a batch whose gradient is below the tolerance could be dropped unseen: not decisive
    r = equivalence.judge_sharded(one, one, one32, {"w": [5 * 2 * 0.5e-4, 6.0]})
    assert r["decisive"] is False and r["drop_batch_caught_by_tensors"] == [0, 1]


# --- bandwidth of ranks copying at once, and the contention term ---------------------------------------------------

def test_bandwidth_summary_is_exact_and_b_of_n_reads_it():
    from workbench.instrument import bandwidth
    s = bandwidth.summarize([{"loop_ms": 1000.0, "copy_ms": [400.0, 600.0, 500.0]},
                             {"loop_ms": 2000.0, "copy_ms": [1000.0, 1000.0, 1000.0]}], nbytes=10 ** 9, reps=3)
    assert s["per_rank_gb_per_s"] == pytest.approx([3.0, 1.5])
    assert s["per_rank_median_copy_gb_per_s"] == pytest.approx([2.0, 1.0])
    assert s["mean_gb_per_s"] == pytest.approx(2.25) and s["min_gb_per_s"] == 1.5
    assert s["aggregate_gb_per_s"] == pytest.approx(4.5)
    m = {"directions": {"h2d": {"2": s}}}
    assert bandwidth.per_rank_gb_per_s(m, 2) == pytest.approx(2.25)
    with pytest.raises(KeyError, match="4 concurrent"):
        bandwidth.per_rank_gb_per_s(m, 4)


def test_bandwidth_entry_runs_on_one_cpu_rank(tmp_path, monkeypatch):
    from workbench.instrument import bandwidth
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    out = tmp_path / "bw.json"
    assert bandwidth.main(["--ranks", "1", "--mib", "1", "--reps", "2", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert set(res["directions"]) == {"h2d", "d2h"} and res["directions"]["h2d"]["1"]["ranks"] == 1
    assert res["timing"].endswith("not a result") and res["world"] == 1
    from workbench.errors import WorkbenchError
    with pytest.raises(WorkbenchError, match="more than the 1 process"):
        bandwidth.main(["--ranks", "1,2"])


def test_contention_term_exact_in_both_regimes():
    from workbench.opts.offload_savings import contention_term
    # compute-bound (c < g): the saving is about every c; halving the bandwidth doubles c: min(4, h=5) + 4 + 4 = 12
    # against min(2, 5) + 2 + 2 = 6
    t = contention_term([2.0, 2.0, 2.0], [10.0, 10.0, 10.0], 5.0, 50.0, 25.0)
    assert t["c_scale"] == 2.0 and t["saving_ms_at_b1"] == 6.0 and t["saving_ms_at_bn"] == 12.0
    assert t["term_ms"] == 6.0
    # reload-bound (c > g): min(c, g) = g either way; only the lead term min(c_{L-1}, h) = h stays too
    t = contention_term([20.0, 20.0, 20.0], [10.0, 10.0, 10.0], 5.0, 50.0, 25.0)
    assert t["term_ms"] == 0.0 and t["saving_ms_at_b1"] == 25.0
    # no contention, no term
    assert contention_term([2.0, 3.0], [10.0, 10.0], 1.0, 40.0, 40.0)["term_ms"] == 0.0
    with pytest.raises(ValueError):
        contention_term([2.0], [1.0], 1.0, 0.0, 1.0)


# --- projections at N ranks and the rule that judges them ----------------------------------------------------------

def test_projection_with_a_term_adds_it_and_takes_it_out_of_two_ranks():
    s1, s2 = {"mean": 10.0, "se": 1.0}, {"mean": 16.0, "se": 1.0}
    k = straggler.E_MAX_NORMAL[4] / straggler.E_MAX_NORMAL[2]
    (p,) = straggler.projection(s1, s2, (4,), term={2: 2.0, 4: 5.0})
    assert p["saving_ms"] == pytest.approx(10 + 5 + (16 - 10 - 2) * k)
    (q,) = straggler.projection(s1, s2, (4,))
    assert p["ci95"][1] - p["ci95"][0] == pytest.approx(q["ci95"][1] - q["ci95"][0])  # shifted, not widened
    assert q["saving_ms"] == pytest.approx(10 + 6 * k)  # without a term: as before
    (r,) = straggler.projection(s1, s2, (2,), term={2: 2.0})
    assert r["saving_ms"] == pytest.approx(16.0)  # two ranks reproduce the measurement, term or not


def test_projection_rule():
    j = straggler.judge_projection
    assert j([73.2, 168.5], 120.0, [100.0, 140.0]) == "confirmed"
    assert j([73.2, 168.5], 60.0, [40.0, 70.0]) == "refuted"           # disjoint
    assert j([73.2, 168.5], 60.0, [40.0, 80.0]) == "inconclusive"      # overlaps, point outside
    assert j([-4.8, 3.2], 3.0, [-50.0, 56.0]) == "confirmed"           # a wide CI confirms only a point inside
    assert j([-4.8, 3.2], 5.0, None) == "inconclusive"                 # one rep: no CI
    assert j(None, 5.0, [1.0, 9.0]) == "inconclusive"


def test_measured_at_ranks_process_is_the_unit_from_two_processes(monkeypatch):
    vals = {"p00": {"mean": 10.0, "se": 1.0, "df": 2, "ci95": [5.7, 14.3], "n_units": 3},
            "p01": {"mean": 14.0, "se": 1.0, "df": 2, "ci95": [9.7, 18.3], "n_units": 3}}
    monkeypatch.setattr(straggler, "_saving", lambda d, *a: vals[d])
    m = straggler.measured_at_ranks(["p00", "p01"], "moe", "eager", "sort_bincount")
    assert m["unit"] == "process" and m["processes"] == 2 and m["mean"] == 12.0
    assert m["se"] == pytest.approx(2.0) and m["ci95"] == pytest.approx([12 - 12.7062047 * 2, 12 + 12.7062047 * 2])
    one = straggler.measured_at_ranks(["p00"], "moe", "eager", "sort_bincount")
    assert one["unit"].startswith("rep") and one["ci95"] == [5.7, 14.3]


# --- per-class totals of a traced step, two read class by class ----------------------------------------------------

def _events(fill_ns):
    from workbench.traces.events import COLUMNS
    rows = [dict(kind="range", name="wb/step", start_ns=0, end_ns=100 + 3 * fill_ns, stream=None),
            dict(kind="kernel", name="nvjet_sm90_gemm", start_ns=0, end_ns=100, stream=7.0)]
    for i in range(3):  # three fills of a whole-weight gradient, back to back
        rows.append(dict(kind="kernel", name="vectorized_elementwise_kernel<FillFunctor<BFloat16>>",
                         start_ns=100 + i * fill_ns, end_ns=100 + (i + 1) * fill_ns, stream=7.0))
    rows.append(dict(kind="kernel", name="ncclDevKernel_AllGather_RING_LL", start_ns=0, end_ns=50, stream=22.0))
    return pd.DataFrame([{**dict.fromkeys(COLUMNS), "source": "torch", **r} for r in rows], columns=COLUMNS)


def test_class_totals_and_explain_name_the_class_and_kernel():
    from workbench.traces import class_totals as ct
    one, two = ct.class_totals(_events(1_000_000)), ct.class_totals(_events(200_000))
    assert one["steps"] == 1 and one["step_ms"] == pytest.approx(3.0001)
    assert one["components_ms"]["norm_elementwise"] == pytest.approx(3.0)
    assert one["kernel_count"]["collective"] == 1 and one["kernel_ms"]["collective"] == pytest.approx(5e-5)
    e = ct.explain(one, two, straggler.SAME_WORK_TOL)
    assert e["reproduced"] is True and e["decrease_ms"] == pytest.approx(2.4)
    (top,) = e["explained_by"]
    assert top["component"] == "norm_elementwise" and top["share_of_decrease"] == pytest.approx(1.0)
    assert "FillFunctor" in top["kernels"][0]["name"] and top["kernels"][0]["one_count"] == 3
    assert sum(r["decrease_ms"] for r in e["components"] if r["component"] != "step_ms") == pytest.approx(2.4)
    # the same step twice: nothing to explain
    same = ct.explain(one, one, straggler.SAME_WORK_TOL)
    assert same["reproduced"] is False and same["explained_by"] == []


def test_trace_classes_runs_in_one_cpu_process(tmp_path, monkeypatch):
    from workbench.ab.distributed import trace_classes
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    out = tmp_path / "one.json"
    assert trace_classes.main(["--opt", "packing", "--model", "tiny-llama", "--tokens", "64", "--device", "cpu",
                               "--batches", "1", "--warmup", "0", "--steps", "1", "--json", str(out),
                               "--trace-dir", str(tmp_path / "tr")]) == 0
    res = json.loads(out.read_text())
    (c,) = res["comparisons"]
    assert c["arm"] == "rebuild" and c["world_size"] == 1 and len(c["step_ms"]) == 1
    assert c["classes"]["steps"] == 1 and c["traced_step_ms"] > 0
    assert os.listdir(tmp_path / "tr") == []  # the trace read and deleted


def test_judge_sharded_with_no_tensor_compared_is_not_equivalent_and_says_why():
    one32, one = _res(2.0, w=[3.0, 4.0], v=[1.0, 1.0]), _res(2.0, w=[3.0, 4.5], v=[1.0, 1.0])
    r = equivalence.judge_sharded({"loss": 2.0, "grads": {"w": None, "v": None}}, one, one32)
    assert r["equivalent"] is False and r["tensors"] == 0 and r["grad_max_rel_l2"] is None
    assert r["n_mismatched"] == 2 and r["mismatched_why"] == {"missing in sharded": {"count": 2, "names": ["w", "v"]}}
    assert "no LoRA gradient tensor compared: 2 mismatched" in r["why_not_compared"]
    from workbench.ab.distributed.equiv_bf16 import summary_line
    line = summary_line({**r, "name": "all", "precision": "autocast", "negative_control": None,
                         "control_failed_as_it_must": None})
    assert "NOT equivalent: no LoRA gradient tensor compared" in line
    # the negative control: the same gradients present compare, pass, and print with every number
    ok = equivalence.judge_sharded(one, one, one32)
    assert ok["equivalent"] is True and "why_not_compared" not in ok and ok["tensors"] == 2
    assert "grad max rel L2 0" in summary_line({**ok, "name": "all", "precision": "autocast",
                                                "negative_control": None, "control_failed_as_it_must": None})
    # a name only the sharded run has is a mismatch too
    extra = {"loss": 2.0, "grads": {**one["grads"], "u": torch.ones(2)}}
    assert equivalence.judge_sharded(extra, one, one32)["equivalent"] is False


E, K, N = 4, 3, 5


class _ExpertLayer(torch.nn.Module):
    """A decoder layer's shape of the bug: a frozen 3-D expert weight plus a trainable 3-D delta (LoRA folded),
    indexed once per expert as transformers' eager experts do."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(E, K, N), requires_grad=False)
        self.delta = torch.nn.Parameter(torch.zeros(E, K, N))

    def forward(self, x, scale=1.0):
        folded = self.w + self.delta
        return sum(x @ folded[e] for e in range(E))[:, :K] * scale


def _fsdp_step(form):
    """One step through two `_ExpertLayer`s under FSDP2 (one rank, gloo, in this process), each layer checkpointed
    by the offload arm's Offloader called in transformers' `form` ("5.17": partial(layer.__call__), "5.23":
    partial(forward, layer)); returns (the delta gradients, the backward's op counts)."""
    import functools

    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from workbench.ab.distributed.backward_ops import profile_step
    from workbench.opts.offload import Offloader

    torch.manual_seed(0)
    layers = torch.nn.ModuleList([_ExpertLayer(), _ExpertLayer()])
    mesh = init_device_mesh("cpu", (1,))
    for layer in layers:
        fully_shard(layer, mesh=mesh)
    off = Offloader(layers, n_buffers=1, device="cpu")
    x = torch.randn(2, K)

    def checkpointed(layer):  # 5.23: the layer's own forward checkpoints itself, inside the module's hooks
        return lambda h, **kw: off(functools.partial(type(layer).forward, layer, **kw), h)

    def step():
        h = x
        for layer in layers:
            if form == "5.17":
                h = off(functools.partial(torch.nn.Module.__call__.__get__(layer), scale=2.0), h)
            else:
                layer.forward = checkpointed(layer)
                h = layer(h, scale=2.0)
                del layer.forward
        h.sum().backward()
    counts = profile_step(step)
    grads = [None if l.delta.grad is None else l.delta.grad.full_tensor() for l in layers]
    return grads, counts


@pytest.fixture
def one_rank_group():
    import torch.distributed as dist
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_offload_under_fsdp2_computes_the_lora_gradients_in_either_transformers_form(one_rank_group, monkeypatch):
    from workbench.ab.distributed.backward_ops import select_backward
    from workbench.opts import offload

    new, new_ops = _fsdp_step("5.23")
    old, old_ops = _fsdp_step("5.17")
    assert all(g is not None for g in new) and all(torch.equal(a, b) for a, b in zip(new, old))
    # the whole-weight gradient of each per-expert index: E zero fills of (E, K, N) and E - 1 adds, per layer
    assert select_backward(old_ops) == select_backward(new_ops) == {f"[{E}, {K}, {N}]": {"zero_": 2 * E,
                                                                                          "add_": 2 * (E - 1)}}
    # the negative control: the checkpoint as it was before the fix (FSDP2's hooks inside the Function) loses every
    # LoRA gradient, and with it the whole-weight fill + add work: the 2-rank `all` step of the 4-GPU run
    monkeypatch.setattr(offload, "_runs_module_hooks", lambda fn: False)
    lost, lost_ops = _fsdp_step("5.17")
    assert lost == [None, None] and select_backward(lost_ops) == {}


def test_backward_ops_counts_the_eager_experts_whole_weight_gradient_exactly():
    # tiny-qwen3-moe, the `all` baseline arm (rebuild+sync_reload+eager), one process: 2 layers x 8 experts, all hit
    # by 256 tokens x top-2: per expert weight shape 16 zero fills of the whole (8, ., .) gradient and 14 adds
    from workbench.ab.distributed import backward_ops
    from workbench.ab.distributed.probe import setup

    p = setup(backward_ops.build_parser(), ["--opt", "all", "--only", "all", "--device", "cpu", "--dtype", "bf16",
                                            "--precision", "autocast"])
    (r,) = [backward_ops.one(p, c) for c in p.comps]
    from workbench import opts
    from workbench.opts import registry
    baselines = "+".join(opts.module(o).BASELINE for o in registry.in_all_names())  # rebuild+sync_reload+eager, ...
    assert r["model"] == "tiny-qwen3-moe" and r["arm"] == baselines
    assert r["select_backward"] == {"[8, 64, 32]": {"zero_": 16, "add_": 14}, "[8, 64, 64]": {"zero_": 16, "add_": 14}}
    assert r["lora_grads"] == r["lora_grads_present"] == 24
