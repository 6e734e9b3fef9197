"""Exact sync counts on toy functions, zero on sync-free code, and the eager MoE loop's 1 + 7*E_hit."""
import pytest
import torch

from workbench.instrument import SyncCounter, expected_sync, instrument_layers, state

w = torch.randn(4, 3)
i0 = torch.tensor(2)
mask = torch.tensor([True, False, True, False])
ids = torch.tensor([1, 2, 2])

TOY = [
    ("item", lambda: i0.item(), 1),
    ("tolist", lambda: ids.tolist(), 1),
    ("bool", lambda: bool(i0 == 2), 1),
    ("int", lambda: int(i0), 1),
    ("nonzero", lambda: torch.nonzero(mask), 1),
    ("where one-arg", lambda: torch.where(mask), 1),
    ("0-d tensor index", lambda: w[i0], 1),
    ("bincount (reads min and max)", lambda: torch.bincount(ids), 2),
    ("repeat_interleave no output_size (2 reads)", lambda: torch.repeat_interleave(ids), 2),
    ("boolean index", lambda: w[mask], 1),
    ("boolean index_put", lambda: w.clone().__setitem__(mask, 0.0), 1),
    ("masked_select", lambda: torch.masked_select(w, torch.ones_like(w, dtype=torch.bool)), 1),
    ("unique", lambda: torch.unique(ids), 1),
    ("three items", lambda: [i0.item() for _ in range(3)], 3),
]

SYNC_FREE = [
    ("matmul", lambda: w @ w.T),
    ("repeat_interleave with output_size", lambda: torch.repeat_interleave(ids, ids, output_size=5)),
    ("histc", lambda: torch.histc(ids.float(), bins=4, min=0, max=3)),
    ("long index", lambda: w[ids]),
    ("sort + cumsum", lambda: torch.sort(ids).values.cumsum(0)),
    ("where three-arg", lambda: torch.where(mask, 1.0, 0.0)),
    ("scatter_add count", lambda: torch.zeros(4).scatter_add_(0, ids, torch.ones(3))),
]


@pytest.mark.parametrize("name, fn, n", TOY, ids=[t[0] for t in TOY])
def test_counts_each_syncing_op_exactly(name, fn, n):
    with SyncCounter(device_type="cpu") as c:
        fn()
    assert c.total == n


@pytest.mark.parametrize("name, fn", SYNC_FREE, ids=[t[0] for t in SYNC_FREE])
def test_sync_free_code_counts_zero(name, fn):
    with SyncCounter(device_type="cpu") as c:
        fn()
    assert c.total == 0 and c.events == []


def test_one_hot_checks_are_cpu_only():
    with SyncCounter(device_type="cpu") as c:
        torch.nn.functional.one_hot(ids, 4)
    assert c.total == 0 and c.cpu_only == 2


def test_declared_syncs_are_reported_apart():
    with SyncCounter(device_type="cpu") as c:
        i0.item()
        with expected_sync("loss for logging"):
            i0.item()
            ids.tolist()
    assert (c.total, c.declared) == (1, 2)


def test_source_line_points_at_the_caller():
    with SyncCounter(device_type="cpu") as c:
        i0.item()  # this line
    (src,) = c.by("source")
    assert src.startswith("test_syncs.py:") and "test_source_line_points_at_the_caller" in src


def test_counter_restores_patched_functions():
    orig_tolist, orig_one_hot = torch.Tensor.tolist, torch.nn.functional.one_hot
    with SyncCounter(device_type="cpu"):
        pass
    assert torch.Tensor.tolist is orig_tolist and torch.nn.functional.one_hot is orig_one_hot
    with SyncCounter(device_type="cpu") as c:
        ids.tolist()
    ids.tolist()  # outside: not counted
    assert c.total == 1


def test_host_tensor_reads_are_not_syncs_in_a_cuda_run():
    with SyncCounter(device_type="cuda") as c:  # a CPU tensor's .item() in a CUDA run reads host memory
        i0.item()
    assert c.total == 0


def _expert_hits(model, batch):
    """E_hit per layer, from the router outputs (captured with forward hooks)."""
    hits = {}
    from workbench.instrument.ranges import find_decoder_layers
    for idx, layer in enumerate(find_decoder_layers(model)):
        router = getattr(layer.mlp, "router", None) or getattr(layer.mlp, "gate")

        def hook(mod, inp, out, idx=idx):
            top_idx = out[-1] if isinstance(out, tuple) else out
            hits[f"L{idx:02d}"] = top_idx.detach().clone()  # counted after the counter closes
        router.register_forward_hook(hook)
    return hits


@pytest.mark.parametrize("preset, per_expert", [("tiny-gpt-oss", 7), ("tiny-qwen3-moe", 5)])
def test_eager_moe_layer_syncs_1_plus_c_times_experts_hit(preset, per_expert):
    from workbench.step.data import make_batches
    from workbench.step.harness import enable_checkpointing
    from workbench.step.models import build_model, model_inputs

    model = build_model(preset, experts_implementation="eager", layers=2)
    enable_checkpointing(model)
    instrument_layers(model)
    batch = make_batches("uniform:3:40", 96, 1, model.config.vocab_size, seed=3)[0]
    hits = _expert_hits(model, batch)
    with SyncCounter(device_type="cpu") as c:
        with state.phase(state.FORWARD):
            loss = model(**model_inputs(model, batch)).loss
        fwd_idx = dict(hits)
        with state.phase(state.BACKWARD):
            loss.backward()
    fwd_hits = {layer: int(torch.unique(t).numel()) for layer, t in fwd_idx.items()}
    assert len(fwd_hits) == 2 and all(0 < e <= model.config.num_experts for e in fwd_hits.values())
    by = c.by("layer", "pass_")
    for layer, e_hit in fwd_hits.items():
        assert by[(layer, "forward")] == 1 + per_expert * e_hit
        assert by[(layer, "recompute")] == 1 + per_expert * e_hit
    # negative control: the default grouped_mm experts are sync-free inside the layers
    model2 = build_model(preset, layers=2)
    instrument_layers(model2)
    with SyncCounter(device_type="cpu") as c2, state.phase(state.FORWARD):
        model2(**model_inputs(model2, batch))
    assert not any(k.startswith("L") for k in c2.by("layer"))


def test_transformers_flex_attention_runs_outside_the_counters_dispatch_mode(monkeypatch):
    """Issue 40: the fused_ce counted pass (llama-3.1-8b, --attn flex_attention, 16381 tokens) failed on every arm
    asking for 31.99 GiB = 32 heads x 16381^2 x 4 bytes: under the counter's dispatch mode transformers' flex_attention
    was not compiled and fell back to flex's dense fp32 math. Under the counter the HF entry now runs with no dispatch
    mode active (before the fix the spy saw the counter's mode), and the entry is restored on exit."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, AttentionInterface

    seen = []

    def spy(*args, **kwargs):
        seen.append(len(_get_current_dispatch_mode_stack()))
        return "out"

    monkeypatch.setitem(AttentionInterface._global_mapping, "flex_attention", spy)
    with SyncCounter(device_type="cpu"):
        assert len(_get_current_dispatch_mode_stack()) == 1  # the counter's mode is on around the call
        assert ALL_ATTENTION_FUNCTIONS.get_interface("flex_attention", None)(None) == "out"
    assert seen == [0]
    assert ALL_ATTENTION_FUNCTIONS["flex_attention"] is spy and "flex_attention" not in ALL_ATTENTION_FUNCTIONS._local_mapping
