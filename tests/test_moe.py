"""MoE arms: same outputs and gradients as transformers' eager experts loop, exact syncs per MoE layer and pass,
LoRA on the fused expert parameters, range errors, apply/revert, and the routing savings model.

    # N = tokens, k = experts per token, E = experts, H = hidden
"""
import pytest
import torch

from workbench.errors import UnsupportedArm, WorkbenchError
from workbench.opts import moe

TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.bfloat16: dict(atol=3e-2, rtol=3e-2)}
FAMILY_SYNCS_PER_EXPERT = {"tiny-gpt-oss": 7, "tiny-qwen3-moe": 5}


# --- helpers (also used by test_grouped_gemm.py) ---------------------------------------------------------------

def experts_module(preset: str, dtype: torch.dtype, num_experts: int = 8, seed: int = 0, hidden: int | None = None,
                   inter: int | None = None):
    """A standalone HF experts module of a tiny preset, random weights (scaled so GPT-OSS's clamp engages)."""
    from workbench.step.models import family_of, load_config

    config = load_config(preset, experts_implementation="eager")
    if family_of(config) == "gpt_oss":
        from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts as cls
        config.num_local_experts = num_experts
    else:
        from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeExperts as cls
        config.num_experts = num_experts
    if hidden is not None:
        config.hidden_size = hidden
    if inter is not None:
        config.intermediate_size = config.moe_intermediate_size = inter
    mod = cls(config)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in mod.named_parameters():
            fan_in = p.shape[-2 if mod.is_transposed else -1]
            scale = 0.1 if name.endswith("bias") else 0.5 if "gate_up" in name else fan_in ** -0.5
            p.copy_(torch.randn(p.shape, generator=g) * scale)
    return mod.to(dtype)


def routing(kind: str, N: int, E: int, k: int, seed: int = 0):
    """(top_k_index (N,k), top_k_weights (N,k)) for a routing kind; ids distinct per token, as a top-k router's."""
    g = torch.Generator().manual_seed(seed)
    if kind == "random_with_empty":  # the last two experts get no token
        pool = max(k, E - 2)
        idx = torch.stack([torch.randperm(pool, generator=g)[:k] for _ in range(N)])
    elif kind == "all_on_one":
        idx = torch.full((N, k), E // 2, dtype=torch.long) + torch.arange(k)  # with k=1: every token on one expert
    elif kind == "random":
        idx = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(N)])
    else:
        raise ValueError(kind)
    wts = torch.softmax(torch.randn(N, k, generator=g), dim=-1)
    return idx, wts


def run_experts(mod, arm: str, idx, wts, seed: int = 0, gemm: str = "auto") -> dict:
    """Output and gradients (hidden, routing weights, every parameter) of one arm on one routing."""
    g = torch.Generator().manual_seed(seed + 100)
    dtype = next(mod.parameters()).dtype
    N = idx.shape[0]
    H = mod.gate_up_proj.shape[1] if mod.is_transposed else mod.gate_up_proj.shape[2]
    hidden = torch.randn(N, H, generator=g).to(dtype).requires_grad_()
    weights = wts.to(dtype).requires_grad_()
    grad_out = torch.randn(N, H, generator=g).to(dtype)
    mod.zero_grad(set_to_none=True)
    if arm == "eager":
        mod.config._experts_implementation = "eager"
        out = mod(hidden, idx, weights)
    elif arm in ("sort_bincount", "sort_split"):
        out = moe.sort_bincount_experts_forward(mod, hidden, idx, weights, split=arm == "sort_split")
    else:
        out = moe.grouped_experts_forward(mod, hidden, idx, weights, gemm=gemm)
    out.backward(grad_out)
    res = {"out": out.detach(), "d_hidden": hidden.grad, "d_weights": weights.grad}
    res.update({f"d_{n}": p.grad for n, p in mod.named_parameters()})
    return res


def _assert_same(out: dict, ref: dict, dtype, what: str):
    for name in ref:
        r, o = ref[name].float(), out[name].float()
        # tolerance relative to the tensor's scale (weight gradients sum many rounded products)
        atol = TOL[dtype]["atol"] * max(1.0, r.abs().max().item())
        torch.testing.assert_close(o, r, atol=atol, rtol=TOL[dtype]["rtol"], msg=lambda m: f"{what} {name}: {m}")


# --- equivalence of the experts functions ------------------------------------------------------------------------

CASES = [("random_with_empty", 2), ("all_on_one", 1), ("random", 1), ("random", 6)]  # k=6=E: every expert


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("preset", ["tiny-gpt-oss", "tiny-qwen3-moe"])
def test_arms_match_eager_outputs_and_gradients(preset, dtype):
    E = 6
    mod = experts_module(preset, dtype, num_experts=E)
    for kind, k in CASES:
        idx, wts = routing(kind, N=24, E=E, k=k, seed=k)
        ref = run_experts(mod, "eager", idx, wts, seed=k)
        for arm, gemm in [("sort_bincount", "auto"), ("sort_split", "auto"), ("grouped", "auto"), ("grouped", "dense")]:
            out = run_experts(mod, arm, idx, wts, seed=k, gemm=gemm)
            _assert_same(out, ref, dtype, f"{preset} {kind} k={k} {arm}/{gemm}")


def test_grouped_auto_picks_torch_grouped_mm_on_cpu_and_dense_for_float64():
    x = torch.randn(8, 16)
    w = torch.randn(2, 16, 32)
    assert moe.resolve_gemm("auto", x, w) == "torch"
    assert moe.resolve_gemm("auto", x.double(), w.double()) == "dense"
    assert moe.resolve_gemm("auto", torch.randn(8, 3), torch.randn(2, 3, 32)) == "dense"  # 12-byte rows
    with pytest.raises(WorkbenchError):
        moe.resolve_gemm("cutlass", x, w)


def test_float64_runs_through_the_dense_fallback():
    mod = experts_module("tiny-qwen3-moe", torch.float64, num_experts=4)
    idx, wts = routing("random_with_empty", N=10, E=4, k=2)
    ref = run_experts(mod, "eager", idx, wts)
    out = run_experts(mod, "grouped", idx, wts)
    for name in ref:
        torch.testing.assert_close(out[name], ref[name])


@pytest.mark.parametrize("arm", ["sort_bincount", "grouped"])
@pytest.mark.parametrize("bad", [8, -1, 100])
def test_out_of_range_router_ids_raise_workbench_error(arm, bad):
    mod = experts_module("tiny-gpt-oss", torch.float32, num_experts=8)
    idx, wts = routing("random", N=6, E=8, k=2)
    idx[3, 1] = bad
    fn = moe.sort_bincount_experts_forward if arm == "sort_bincount" else moe.grouped_experts_forward
    with pytest.raises(WorkbenchError, match=r"outside \[0, 8\)"):
        fn(mod, torch.randn(6, 64), idx, wts)


# --- whole models: LoRA on experts, syncs per layer and pass -------------------------------------------------------

def _model_and_batch(preset, experts_implementation="eager"):
    from workbench.step.data import make_batches
    from workbench.step.models import build_model

    model = build_model(preset, experts_implementation=experts_implementation, layers=2)
    batch = make_batches("uniform:3:40", 96, 1, model.config.vocab_size, seed=3)[0]
    return model, batch


def _loss_and_grads(model, batch):
    from workbench.step.models import lora_parameters, model_inputs

    model.zero_grad(set_to_none=True)
    loss = model(**model_inputs(model, batch)).loss
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in lora_parameters(model)}


@pytest.mark.parametrize("preset", ["tiny-gpt-oss", "tiny-qwen3-moe"])
def test_lora_on_experts_trains_identically_under_every_arm(preset):
    from workbench.opts import apply

    model, batch = _model_and_batch(preset)
    expert_lora = [n for n, _ in model.named_parameters() if "experts" in n and "lora_" in n]
    assert expert_lora, "peft target_parameters put no LoRA on the fused expert parameters"
    ref_loss, ref_grads = _loss_and_grads(model, batch)
    assert all(ref_grads[n].abs().sum() > 0 for n in expert_lora)
    for arm, opts in [("sort_bincount", {}), ("grouped", {}), ("grouped", {"gemm": "dense"})]:
        handle = apply(model, "moe", arm, **opts)
        loss, grads = _loss_and_grads(model, batch)
        handle.revert()
        torch.testing.assert_close(loss, ref_loss, **TOL[torch.float32])
        assert grads.keys() == ref_grads.keys()
        for n in ref_grads:
            torch.testing.assert_close(grads[n], ref_grads[n], atol=1e-6, rtol=1e-4, msg=f"{arm} {opts} {n}")


def _expert_hits(model):
    """E_hit per layer, from the router outputs (forward hooks; counted after the sync counter closes)."""
    from workbench.instrument.ranges import find_decoder_layers
    hits = {}
    for i, layer in enumerate(find_decoder_layers(model)):
        router = getattr(layer.mlp, "router", None) or layer.mlp.gate

        def hook(mod, inp, out, i=i):
            hits[f"L{i:02d}"] = out[-1].detach().clone()
        router.register_forward_hook(hook)
    return hits


@pytest.mark.parametrize("preset", ["tiny-gpt-oss", "tiny-qwen3-moe"])
def test_syncs_per_moe_layer_and_pass(preset):
    """eager 1 + c*E_hit (c = 7 GPT-OSS, 5 Qwen3-MoE), sort_bincount 1, grouped and transformers' grouped_mm /
    batched_mm 0; in forward and in the recompute."""
    from workbench.step.harness import enable_checkpointing
    from workbench.instrument import SyncCounter, instrument_layers, state
    from workbench.step.models import model_inputs
    from workbench.opts import apply

    model, batch = _model_and_batch(preset)
    enable_checkpointing(model)
    instrument_layers(model)
    hits = _expert_hits(model)
    per_expert = FAMILY_SYNCS_PER_EXPERT[preset]
    for arm in [a for a in moe.ARMS if moe.unsupported(a, model, "cpu") is None]:  # liger_experts: a GPU's
        handle = apply(model, "moe", arm)
        with SyncCounter(device_type="cpu") as c:
            with state.phase(state.FORWARD):
                loss = model(**model_inputs(model, batch)).loss
            fwd_hits = {layer: int(torch.unique(t).numel()) for layer, t in hits.items()}
            with state.phase(state.BACKWARD):
                loss.backward()
        handle.revert()
        by = c.by("layer", "pass_")
        assert len(fwd_hits) == 2
        for layer, e_hit in fwd_hits.items():
            # transformers' own grouped_mm / batched_mm are sync-free as well (sort + histc + cumsum on the device)
            want = {"eager": 1 + per_expert * e_hit, "sort_bincount": 1, "sort_split": 1, "grouped": 0, "hf_grouped_mm": 0,
                    "hf_batched_mm": 0}[arm]
            assert by.get((layer, "forward"), 0) == want, (arm, layer, by)
            assert by.get((layer, "recompute"), 0) == want, (arm, layer, by)
            assert by.get((layer, "backward"), 0) == 0, (arm, layer, by)


# --- apply / revert / unsupported ------------------------------------------------------------------------------

def test_apply_switches_and_revert_restores_the_experts_implementation():
    from workbench.step.models import base_model_of
    from workbench.opts import apply

    model, _ = _model_and_batch("tiny-qwen3-moe", experts_implementation=None)
    base = base_model_of(model)
    before = base.config._experts_implementation
    h = apply(model, "moe", "grouped", gemm="dense")
    assert base.config._experts_implementation == "wb_grouped_dense" == h.info["experts_implementation"]
    h.revert()
    assert base.config._experts_implementation == before
    with pytest.raises(WorkbenchError):
        apply(model, "moe", "grouped", gemm="cutlass")
    with pytest.raises(WorkbenchError):
        apply(model, "moe", "sort_bincount", gemm="torch")
    with pytest.raises(WorkbenchError):
        apply(model, "moe", "fastest")


def test_non_moe_model_is_unsupported():
    from workbench.step.models import build_model

    model = build_model("tiny-llama", layers=1, lora=False)
    assert moe.unsupported("grouped", model, "cpu") is not None
    with pytest.raises(UnsupportedArm):
        moe.apply(model, "grouped")


# --- the savings model -----------------------------------------------------------------------------------------

def test_routing_savings_model_is_the_sum_of_its_parts():
    from workbench.opts.moe_savings import moe_saving

    r = moe_saving(syncs_removed=1000, drain_stall_per_sync_ms=0.02, launch_gap_removed_ms=15.0, gemm_removed_ms=-3.0)
    assert r["predicted_ms"] == pytest.approx(1000 * 0.02 + 15.0 - 3.0)
    assert set(r["terms"]) == {"syncs removed x drain stall per sync", "launch gaps removed", "GEMM kernel time removed"}
    assert "drain_stall" in r["formula"]


def test_hf_batched_mm_bytes_match_the_allocation_seen_on_the_h100():
    """transformers' batched_mm gathers a (H x 2I) bf16 weight per routed row: gpt-oss-20b at 8192 tokens, top-4,
    H = I = 2880 -> 8192*4*2880*5760*2 bytes = 1012 GiB, the allocation it asked for on the H100."""
    from workbench.step.models import load_config
    from workbench.opts.moe import batched_mm_bytes

    cfg = load_config("gpt-oss-20b", 4)
    cfg.dtype = "bfloat16"
    assert batched_mm_bytes(cfg, 8192) == 8192 * 4 * 2880 * 5760 * 2
    assert round(batched_mm_bytes(cfg, 8192) / 2**30) == 1012


def test_hf_grouped_mm_is_an_arm_and_batched_mm_is_opt_in():
    from workbench.opts import moe

    assert "hf_grouped_mm" in moe.ARMS and moe.IMPL_NAMES["hf_grouped_mm"] == "grouped_mm"
    assert "hf_batched_mm" in moe.OPT_IN_ARMS


class _SliceGradients(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts select_backward calls whose output has a whole fused expert weight's numel (one zero-fill each)."""

    def __init__(self, numels):
        super().__init__()
        self.numels, self.n = set(numels), 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket is torch.ops.aten.select_backward and out.numel() in self.numels:
            self.n += 1
        return out


@pytest.mark.parametrize("preset", ["tiny-gpt-oss", "tiny-qwen3-moe"])
def test_per_expert_loops_build_whole_weight_gradients_slice_by_slice(preset):
    """The cost the H100 breakdown shows as zero-fills + adds (workbench.traces.lever_advice.slice_gradients): a per-expert loop
    over a LoRA-adapted fused expert weight back-propagates each w[e] through a zero tensor of the whole weight,
    E_hit per weight per layer; indexing every expert at once (grouped, transformers' grouped_mm) builds none."""
    from workbench.step.models import LORA_TARGET_EXPERT_PARAMETERS, model_inputs
    from workbench.opts import apply

    model, batch = _model_and_batch(preset)
    hits = _expert_hits(model)
    weights = [p for n, p in model.named_parameters() if p.dim() == 3 and "experts" in n and "lora_" not in n]
    per_layer = len(LORA_TARGET_EXPERT_PARAMETERS)
    assert len(weights) == 2 * per_layer  # 2 layers
    for arm in ("eager", "sort_bincount", "grouped", "hf_grouped_mm"):
        handle = apply(model, "moe", arm)
        model.zero_grad(set_to_none=True)
        loss = model(**model_inputs(model, batch)).loss
        e_hit = sum(int(torch.unique(t).numel()) for t in hits.values())
        with _SliceGradients(p.numel() for p in weights) as sg:
            loss.backward()
        handle.revert()
        want = per_layer * e_hit if arm in ("eager", "sort_bincount") else 0
        assert sg.n == want, (arm, sg.n, want)


class _RowGradients(torch.utils._python_dispatch.TorchDispatchMode):
    """Elements of the (N,H)- or (S,H)-sized tensors each op writes in a backward (the row gradients)."""

    def __init__(self, sizes):
        super().__init__()
        self.sizes, self.ops = set(sizes), {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor) and out.numel() in self.sizes:
            name = func.overloadpacket.__name__
            self.ops[name] = self.ops.get(name, 0) + out.numel()
        return out


@pytest.mark.parametrize("preset", ["tiny-gpt-oss", "tiny-qwen3-moe"])
def test_row_gradients_per_arm_are_what_the_backward_term_counts(preset):
    """Backward term (studies.moe_two_term.moe_two_term): eager zero-fills an (N,H) gradient per expert hit
    (index backward), sort_bincount an (S,H) one per expert hit (slice_backward), sort_split none (one cat of
    (S,H)); sort_split's output and gradients are bitwise sort_bincount's."""
    from studies.moe_two_term.moe_two_term import row_gradient_elements

    E, N, k = 6, 24, 2
    mod = experts_module(preset, torch.float32, num_experts=E)
    idx, wts = routing("random", N=N, E=E, k=k, seed=1)
    H = mod.gate_up_proj.shape[1] if mod.is_transposed else mod.gate_up_proj.shape[2]
    e_hit = int(torch.unique(idx).numel())
    hidden = torch.randn(N, H, requires_grad=True)
    written = {}
    for arm in ("eager", "sort_bincount", "sort_split"):
        hidden.grad = None
        w = wts.clone().requires_grad_()
        if arm == "eager":
            mod.config._experts_implementation = "eager"
            out = mod(hidden, idx, w)
        else:
            out = moe.sort_bincount_experts_forward(mod, hidden, idx, w, split=arm == "sort_split")
        with _RowGradients({N * H, N * k * H}) as rg:
            out.sum().backward()
        zeroed = {"eager": "new_zeros", "sort_bincount": "slice_backward", "sort_split": "cat"}[arm]
        written[arm] = (out.detach(), hidden.grad.clone())
        assert rg.ops.get(zeroed, 0) == row_gradient_elements(arm, layers=1, tokens=N, top_k=k, experts_hit=e_hit,
                                                              hidden=H), (arm, rg.ops)
        assert "slice_backward" not in rg.ops or arm == "sort_bincount", (arm, rg.ops)
    for a, b in zip(written["sort_split"], written["sort_bincount"]):
        assert torch.equal(a, b)


# ---: Liger's fused MoE arm (refusals on a CPU) and forced-balanced routing --------------------------------

def test_liger_experts_refusals(monkeypatch):
    import importlib.util as iu
    from workbench.opts import moe
    from workbench.step.models import build_model
    qm = build_model("tiny-qwen3-moe", device="cpu")
    assert "no CPU path" in moe.unsupported("liger_experts", qm, "cpu")
    gm = build_model("tiny-gpt-oss", device="cpu")
    assert "custom" in moe.unsupported("liger_experts", gm, "cpu")
    real = iu.find_spec
    monkeypatch.setattr(moe.importlib.util, "find_spec", lambda n, *a: None if n == "liger_kernel" else real(n, *a))
    assert moe.unsupported("liger_experts", qm, "cpu") == moe._NO_LIGER
    assert "liger_experts" in moe.OPT_IN_ARMS  # never in the default arms
    with pytest.raises(UnsupportedArm):
        moe.apply(qm, "liger_experts")


def test_balanced_routing_even_counts_and_revert():
    from workbench import opts
    from workbench.opts import moe_balance
    from workbench.step import harness
    from workbench.step.data import make_batches
    from workbench.step.models import build_model
    m = build_model("tiny-qwen3-moe", device="cpu")
    b = make_batches("uniform:16:64", 128, 1, 256, seed=0)[0]
    mods = moe_balance.experts_modules(m)
    assert len(mods) == 2
    seen = []

    def spy():
        return [x.register_forward_pre_hook(lambda mod, a, k: seen.append(a[1].clone()), with_kwargs=True)
                for x in mods]
    opt = harness.make_optimizer(m, lr=0.0)
    hooks = spy()
    routed = harness.train_step(m, b, opt).loss
    counts = torch.bincount(seen[0].flatten(), minlength=8)
    assert counts.max() - counts.min() > 1  # negative control: the router's own top-k is uneven here
    for x in hooks:
        x.remove()
    h = opts.apply(m, "moe_balance", "balanced")
    hooks, seen[:] = spy(), []
    balanced = harness.train_step(m, b, opt).loss
    counts = torch.bincount(seen[0].flatten(), minlength=8)
    assert counts.max() - counts.min() <= 1 and counts.sum() == seen[0].numel()
    assert (seen[0].sort(dim=-1).values.diff(dim=-1) > 0).all()  # no token gets one expert twice
    assert balanced != routed  # a different function, stated as one
    assert moe_balance.DIFFERENT_FUNCTION["why"] and not hasattr(moe_balance, "NUMERICS_CHANGE")
    for x in hooks:
        x.remove()
    h.revert()
    assert harness.train_step(m, b, opt).loss == routed
