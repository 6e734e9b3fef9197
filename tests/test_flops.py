"""workbench.step.flops: hand-checked small cases; the analytic count against torch's FlopCounterMode on the tiny presets.

FlopCounterMode counts matmul-type aten ops (mm, addmm, bmm, baddbmm, the CUDA sdpa kernels). Two ops these CPU runs
use are not in its registry, so the tests register formulas for them (`_CUSTOM`):
- `_scaled_dot_product_flash_attention_for_cpu` (+ backward), what HF's sdpa path runs on the CPU: torch's own sdpa
  formulas, full T^2 (the kernel gets the dense (1, 1, T, T) packed mask and computes every block; its backward
  recomputes QK^T, 5 score-sized matmuls, as its CUDA siblings do);
- `_grouped_mm`, transformers' default experts implementation: 2 * rows * K * N.

On the pinned versions (torch 2.13, transformers 5.23, peft 0.21) the analytic total agrees exactly with the counter for
every preset below (tiny-llama sdpa and eager, tiny-qwen3-moe grouped_mm and eager experts, tiny-gpt-oss eager
attention): no residual. Getting there needed three details that a naive 6*N*T-style count misses, each modelled in
workbench/step/flops.py: layer 0's q/k/v get no input gradient (the frozen embedding output does not require grad), torch's
checkpoint early stop skips the last GEMM of a dense-MLP layer in the recompute, and peft folds the expert LoRA into
the expert stack twice per forward (its parametrization registration check, then the use) and then needs the stack's
weight gradient. The tolerance (1%) leaves room for those details to shift across supported versions.
"""
from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

from workbench.step import flops
from workbench.step.data import batch_from_lengths
from workbench.step.harness import enable_checkpointing
from workbench.step.models import base_model_of, build_model, load_config, model_inputs

aten = torch.ops.aten
DOCS = [5, 11, 16]  # T = 32; 11 and 16 exceed tiny-gpt-oss's sliding window (8)


def _flash_cpu(q, k, v, *args, out_shape=None, attn_mask=None, **kwargs):
    _MASKS.append(attn_mask)
    return sdpa_flop_count(q, k, v)


def _flash_cpu_backward(grad_out, q, k, v, *args, out_shape=None, **kwargs):
    return sdpa_backward_flop_count(grad_out, q, k, v)


def _grouped_mm(a, b, *args, out_shape=None, **kwargs):
    if len(a) == 2 and len(b) == 3:  # (rows, K) x (E, K, N), rows split by offsets
        return 2 * a[0] * a[1] * b[2]
    if len(a) == 2 and len(b) == 2:  # (M, rows) x (rows, N) -> (E, M, N), the weight gradient
        return 2 * a[0] * a[1] * b[1]
    raise AssertionError(f"grouped_mm shapes not covered by the test formula: {a} x {b}")


_MASKS: list = []
_CUSTOM = {aten._scaled_dot_product_flash_attention_for_cpu: _flash_cpu,
           aten._scaled_dot_product_flash_attention_for_cpu_backward: _flash_cpu_backward,
           aten._grouped_mm: _grouped_mm}


def _counted(model, doc_lens) -> int:
    batch = batch_from_lengths(doc_lens, base_model_of(model).config.vocab_size)
    with FlopCounterMode(display=False, custom_mapping=_CUSTOM) as fc:
        model(**model_inputs(model, batch)).loss.backward()
    return fc.get_total_flops()


# --- by hand ------------------------------------------------------------------------------------------------------

def test_peak_tflops_lookups():
    assert flops.peak_tflops("NVIDIA H100 80GB HBM3") == 989.4
    assert flops.peak_tflops("NVIDIA H200") == 989.4
    assert flops.peak_tflops("NVIDIA B200") == 2250.0
    assert flops.peak_tflops("NVIDIA A100-SXM4-80GB") == 312.0
    assert flops.peak_tflops("NVIDIA H100 PCIe") == 756.5           # exact key beats the "NVIDIA H100" prefix
    assert flops.peak_tflops("NVIDIA H100 NVL") == 835.5
    assert flops.peak_tflops("NVIDIA H100 80GB HBM3 MIG 7g.80gb") == 989.4  # longest key inside the name
    assert flops.peak_tflops("nvidia a100-pcie-40gb") == 312.0       # case blind
    assert flops.peak_tflops("NVIDIA L40S") == 362.05
    assert flops.peak_tflops("NVIDIA L40") == 181.05                 # "NVIDIA L4" stops at a word boundary
    assert flops.peak_tflops("NVIDIA L4") == 121.0
    assert flops.peak_tflops("NVIDIA GB200") == 2500.0               # not B200's
    assert flops.peak_tflops("NVIDIA GH200 480GB") == 989.4          # not H200's key (no substring), GH200's
    for unknown in ("cpu", "", "Tesla T4", "NVIDIA H1000"):
        assert flops.peak_tflops(unknown) is None
    r = flops.throughput({"model": 989.4e12, "total": 2 * 989.4e12}, 2.0, "NVIDIA H100 80GB HBM3")
    assert r["tflops"] == pytest.approx(494.7) and r["mfu"] == pytest.approx(0.5) and r["hfu"] == pytest.approx(1.0)
    assert flops.throughput(1e12, 1.0, "cpu")["mfu"] is None


def test_one_frozen_linear_by_hand_and_counted():
    f = flops.linear_flops(8, 64, 32)
    assert f == {"forward": 2 * 8 * 64 * 32, "backward": 2 * 8 * 64 * 32}  # input gradient only
    assert flops.linear_flops(8, 64, 32, input_grad=False)["backward"] == 0
    lin = torch.nn.Linear(64, 32, bias=True).requires_grad_(False)
    x = torch.randn(8, 64, requires_grad=True)
    with FlopCounterMode(display=False) as fc:
        lin(x).sum().backward()
    assert fc.get_total_flops() == f["forward"] + f["backward"]  # no weight gradient for a frozen weight


def test_lora_is_three_times_its_forward():
    from peft import LoraConfig, get_peft_model
    T, i, o, r = 8, 64, 32, 4
    lo = flops.lora_flops(T, i, o, r)
    assert lo["forward"] == 2 * T * r * (i + o)
    assert lo["backward"] == 2 * lo["forward"]  # dA, dB (weights) + dx through B and A (inputs)
    no_dx = flops.lora_flops(T, i, o, r, input_grad=False)
    assert no_dx["backward"] == 2 * lo["forward"] - 2 * T * i * r  # A's input gradient is skipped

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(i, o, bias=False)

        def forward(self, x):
            return self.lin(x)

    m = get_peft_model(M(), LoraConfig(r=r, lora_alpha=2 * r, target_modules=["lin"]))
    x = torch.randn(T, i, requires_grad=True)
    with FlopCounterMode(display=False) as fc:
        m(x).sum().backward()
    base = flops.linear_flops(T, i, o)
    assert fc.get_total_flops() == base["forward"] + base["backward"] + 3 * lo["forward"]


def test_attention_pairs_block_diagonal_vs_dense_by_hand():
    assert flops.attention_pairs([3, 5], "block_diagonal") == 6 + 15     # d(d+1)/2 per document
    assert flops.attention_pairs([3, 5], "dense") == 64                  # T^2
    assert flops.attention_pairs([3, 5], "block_diagonal", window=2) == (1 + 2 + 2) + (1 + 2 + 2 + 2 + 2)
    assert flops.attention_pairs([3, 5], "dense", window=2) == 64         # a dense mask is applied after QK^T
    assert flops.causal_pairs(4, window=4) == flops.causal_pairs(4) == 10

    cfg = load_config("tiny-llama")  # 2 layers, 4 query heads of 16, sdpa
    hd_hq = 16 * 4
    blk = flops.step_flops(cfg, [3, 5], lora_rank=4)
    dense = flops.step_flops(cfg, [3, 5], lora_rank=4, attention="dense")
    assert blk["attention"] == "block_diagonal" and dense["attention"] == "dense"
    assert blk["attn_scores"]["forward"] == 2 * (2 * 2 * 21 * hd_hq)    # layers x (QK^T + PV) x 2*pairs*hd*Hq
    assert dense["attn_scores"]["forward"] == 2 * (2 * 2 * 64 * hd_hq)
    assert dense["attn_scores"]["recompute"] == dense["attn_scores"]["forward"]
    assert dense["attn_scores"]["backward"] == 2.5 * dense["attn_scores"]["forward"]  # fused kernel: 5 matmuls
    assert flops.step_flops(cfg, [3, 5], lora_rank=4, attention="auto")["attention"] == "dense"  # sdpa
    eager = flops.step_flops(load_config("tiny-llama", attn="eager"), [3, 5], lora_rank=4, attention="dense")
    assert eager["attn_scores"]["backward"] == 2 * eager["attn_scores"]["forward"]  # autograd: 4 matmuls
    everything_but_scores = ("attn_proj", "mlp", "lm_head", "lora")
    assert all(blk[c] == dense[c] for c in everything_but_scores)
    assert flops.attention_mode("flash_attention_2") == "block_diagonal" and flops.attention_mode("sdpa") == "dense"

    # GPT-OSS: layer 0 slides (window 8), layer 1 is full
    g = flops.step_flops(load_config("tiny-gpt-oss"), [3, 20], lora_rank=4)
    pairs = (6 + (36 + 12 * 8)) + (6 + 210)
    assert g["attn_scores"]["forward"] == 2 * 2 * pairs * 16 * 4
    with pytest.raises(ValueError):
        flops.step_flops(cfg, [3, 5], lora_rank=4, attention="sparse")


def test_components_passes_and_totals():
    cfg = load_config("tiny-qwen3-moe")
    f = flops.step_flops(cfg, DOCS, lora_rank=4)
    assert f["total"] == sum(f[c]["total"] for c in flops.COMPONENTS) == sum(f["by_pass"].values())
    assert f["model"] == f["by_pass"]["forward"] + f["by_pass"]["backward"]
    assert f["lm_head"]["recompute"] == 0 and f["lm_head"]["forward"] == 2 * 32 * 64 * 256
    assert f["mlp"]["total"] == 0 and f["moe_experts"]["forward"] == 2 * (32 * 2) * (64 * 64 + 32 * 64) * 2
    assert f["router"]["forward"] == 2 * (2 * 32 * 64 * 8)
    for c in flops.COMPONENTS:
        if c != "lm_head":
            assert f[c]["recompute"] == f[c]["forward"]  # MoE layers are recomputed whole
    no_ckpt = flops.step_flops(cfg, DOCS, lora_rank=4, checkpointing=False)
    assert no_ckpt["by_pass"]["recompute"] == 0 and no_ckpt["total"] == f["model"]
    factored = flops.step_flops(cfg, DOCS, lora_rank=4, expert_lora="factored")
    S, r = 32 * 2, 4
    assert factored["lora_experts"]["forward"] == 2 * 2 * S * r * ((64 + 64) + (32 + 64))
    assert "block_diagonal" in f["note"] and f["tokens"] == 32


def test_peft_is_asked_for_its_fold_count_only_where_an_expert_lora_fold_is_counted(monkeypatch):
    """`peft_fold_evals` imports peft (~1 s): a dense model's count never asks it, an adapted MoE's does."""
    asked = []
    monkeypatch.setattr(flops, "peft_fold_evals", lambda: asked.append(1) or 2)
    dense = flops.step_flops(load_config("tiny-llama"), DOCS, lora_rank=4)
    assert asked == [] and "fold x" not in dense["note"]
    moe = flops.step_flops(load_config("tiny-qwen3-moe"), DOCS, lora_rank=4)
    assert asked == [1] and "fold x2 per forward" in moe["note"]
    three = flops.step_flops(load_config("tiny-qwen3-moe"), DOCS, lora_rank=4, fold_evals=3)
    assert asked == [1] and three["lora_experts"]["forward"] > moe["lora_experts"]["forward"]
    assert flops.step_flops(load_config("tiny-gpt-oss"), DOCS, lora_rank=4)["lora_experts"]["forward"] > 0
    assert asked == [1, 1]


# --- against FlopCounterMode on the tiny presets ------------------------------------------------------------------

@pytest.mark.parametrize("preset, attn, experts, ckpt", [
    ("tiny-llama", None, None, True),          # sdpa: CPU flash kernel with the dense packed mask
    ("tiny-llama", "eager", None, False),      # eager: matmuls, counted natively; no recompute
    ("tiny-qwen3-moe", None, None, True),      # transformers' default grouped_mm experts
    ("tiny-qwen3-moe", None, "eager", True),   # HF's per-expert loop (mm)
    ("tiny-gpt-oss", None, None, True),        # eager attention with sinks, sliding layer dense too
])
def test_matches_flop_counter(preset, attn, experts, ckpt):
    model = build_model(preset, device="cpu", lora_rank=4, attn=attn, experts_implementation=experts)
    if ckpt:
        enable_checkpointing(model)
    cfg = base_model_of(model).config
    _MASKS.clear()
    counted = _counted(model, DOCS)
    # the HF sdpa / eager paths compute the full T^2 scores on a packed batch: count them dense
    ours = flops.step_flops(cfg, DOCS, lora_rank=4, attention="dense", checkpointing=ckpt)
    if cfg._attn_implementation == "sdpa":
        T = sum(DOCS)
        assert _MASKS and all(m is not None and tuple(m)[-2:] == (T, T) for m in _MASKS), _MASKS
    assert ours["total"] == pytest.approx(counted, rel=0.01), (preset, ours["total"], counted)
    # the block-diagonal count is smaller by the masked score work only
    blk = flops.step_flops(cfg, DOCS, lora_rank=4, attention="block_diagonal", checkpointing=ckpt)
    assert 0 < ours["total"] - blk["total"] == ours["attn_scores"]["total"] - blk["attn_scores"]["total"]


def test_matches_flop_counter_partial_targets_dense_moe_layer_and_input_grads():
    """Qwen3-MoE with a dense MLP layer (mlp_only_layers), LoRA on q/v only (the frozen down_proj is the GEMM the
    checkpoint early stop skips), and embeddings whose output requires grad (layer 0's q/k/v input gradients)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    cfg = load_config("tiny-qwen3-moe")
    cfg.mlp_only_layers = [1]
    torch.manual_seed(0)
    model = get_peft_model(AutoModelForCausalLM.from_config(cfg, dtype=torch.float32),
                           LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    model.train()
    model.enable_input_require_grads()
    enable_checkpointing(model)
    counted = _counted(model, DOCS)
    ours = flops.step_flops(base_model_of(model).config, DOCS, lora_rank=4, lora_targets=["q_proj", "v_proj"],
                            attention="dense", embed_grad=True)
    assert ours["mlp"]["forward"] > 0 and ours["moe_experts"]["forward"] > 0 and ours["lora_experts"]["total"] == 0
    assert ours["mlp"]["recompute"] == ours["mlp"]["forward"] - 2 * 32 * 128 * 64  # down_proj not recomputed
    assert ours["total"] == pytest.approx(counted, rel=0.01), (ours["total"], counted)


def test_committed_runs_get_model_flops_and_mfu_from_their_own_batches():
    """analysis.mfu rebuilds each committed comparison's batches from its meta.json and counts them with
    `for_comparison`: the packing comparison (varlen) is counted block-diagonal, the GPT-OSS MoE ones (eager) dense, and
    every MFU is a fraction of the H100's dense bf16 peak."""
    import os

    from workbench import analysis as an
    from workbench.step import flops

    root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "profiles")
    df = an.mfu(root)
    if df.empty:
        pytest.skip("no committed GPU runs")
    pk = df[(df["name"] == "packing") & (df["attn"] == "varlen")]
    assert set(pk["attention_flops"]) == {"block_diagonal"}
    assert set(df[(df["model"] == "gpt-oss-20b") & (df["name"] == "moe")]["attention_flops"]) == {"dense"}
    # a run since per-arm FLOPs: its flex arms counted as they ran (profiles/2026-11-27_h100_last_points)
    assert set(df[df["folder"].str.endswith("2026-11-27_h100_last_points/gptoss_best/gptoss_best")]["attention_flops"]) \
        == {"block_diagonal"}
    assert df["mfu"].between(0, 1).all() and (df["peak_tflops"] == flops.peak_tflops("NVIDIA H100 80GB HBM3")).all()
    r = pk.iloc[0]
    meta = an._json(os.path.join(root, "..", r["folder"], "meta.json")) if not os.path.isabs(r["folder"]) else None
    args = (meta or an._json(os.path.join(r["folder"], "meta.json")) or {}).get("args") or {}
    per = flops.for_comparison("qwen3-0.6b", 28, 16384, "varlen", lengths=args["lengths"], batches=args["batches"],
                               seed=args["seed"], lora_rank=args["lora_rank"])
    assert r["model_tflop_per_step"] == pytest.approx(sum(f["model"] for f in per) / len(per) / 1e12)


# --- NeMo's convention beside ours ----------------------------------------------------------------------

def test_causal_attention_pairs_and_nemo_flops_exact():
    from workbench.step import flops
    from workbench.step.models import load_config
    assert flops.attention_pairs([3, 5], "causal") == 17  # 9/2 + 25/2: half the square per document
    assert flops.attention_pairs([3, 5], "block_diagonal") == 21 and flops.attention_pairs([3, 5], "dense") == 64
    cfg = load_config("tiny-llama")  # L=2, H=64, I=128, Hq=4, Hkv=2, hd=16, V=256
    n = flops.nemo_flops(cfg, [3, 5])
    # per layer: q,k,v,o 2*8*64*(2*64 + 2*32) = 196608; scores 2 * (2*17) * 16*4 = 4352; MLP 2*8*3*64*128 = 393216
    assert n["full"] == 3 * (2 * (196608 + 4352 + 393216) + 2 * 8 * 64 * 256) == 4351488
    assert n["lora_factor"] == 1.0 and n["model"] == n["full"]
    m = flops.nemo_flops(cfg, [3, 5], lora_params=1, frozen_params=2)
    assert m["lora_factor"] == pytest.approx(2.5 / 3) and m["model"] == pytest.approx(4351488 * 2.5 / 3)
    # one document of s tokens: NeMo AutoModel's llama3_flops (gbs=1), term by term (Hq*hd == H here)
    s, L, h, g, a, I, V = 8, 2, 64, 2, 4, 128, 256
    nemo_published = s * L * h * h * (12 + 12 * g / a + 18 * I / h + (12 * s / h) * 0.5 + 6 * V / (L * h))
    assert flops.nemo_flops(cfg, [8])["full"] == nemo_published == 4374528
    # negative control: dense attention would not match NeMo's count
    assert flops.attention_pairs([8], "dense") != flops.attention_pairs([8], "causal")


def test_arm_batch_flops_nemo_and_mfu_nemo():
    from workbench.step import flops
    from workbench.step.models import load_config
    cfg = load_config("tiny-llama")
    dense = flops.arm_batch_flops(cfg, [3, 5], attn_implementation="sdpa", lora_rank=4, lora_params=1,
                                  frozen_params=2)
    flex = flops.arm_batch_flops(cfg, [3, 5], attn_implementation="flex_attention", lora_rank=4, lora_params=1,
                                 frozen_params=2)
    assert dense["model"] == flex["model"] and dense["total"] > flex["total"]  # MFU: useful work for every arm
    assert dense["nemo"] == flex["nemo"] == pytest.approx(4351488 * 2.5 / 3)
    samples = [{"batch": 0, "step_ms": 1.0}, {"batch": 0, "step_ms": 3.0}]
    t = flops.arm_throughput([dense], samples, "NVIDIA H100 80GB HBM3")
    assert t["mfu_nemo"] == pytest.approx(dense["nemo"] / 2e-3 / 1e12 / 989.4)
    assert t["mfu"] == pytest.approx(dense["model"] / 2e-3 / 1e12 / 989.4)
    older = {k: v for k, v in dense.items() if k != "nemo"}  # a run written before: no NeMo column
    assert "mfu_nemo" not in flops.arm_throughput([older], samples, "NVIDIA H100 80GB HBM3")
