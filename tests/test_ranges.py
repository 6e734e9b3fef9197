"""Per-layer ranges in a CPU torch.profiler trace of one checkpointed step: present and properly nested."""
import gzip
import json

import pytest
import torch

from workbench.step.data import make_batches
from workbench.step.harness import enable_checkpointing, train_steps
from workbench.instrument import Ranges, instrument_layers, span
from workbench.instrument.ranges import find_decoder_layers
from workbench.step.models import build_model


def _profile_one_step(tmp_path, preset="tiny-llama", layers=3):
    model = build_model(preset, layers=layers)
    enable_checkpointing(model)
    instrument_layers(model)
    batches = make_batches("uniform:4:30", 64, 1, model.config.vocab_size)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        train_steps(model, batches, steps=1, warmup=0, ranges=Ranges(nvtx=True, profiler=True), count_syncs=False)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = [e for e in json.loads(path.read_text())["traceEvents"]
              if e.get("ph") == "X" and str(e.get("name", "")).startswith("wb/")]
    return events, layers


def _inside(inner, outer):
    return outer["ts"] <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"] + 1


def _one(events, name):
    found = [e for e in events if e["name"] == name]
    assert len(found) == 1, f"{name}: {len(found)} events"
    return found[0]


def test_checkpointed_step_has_nested_layer_ranges(tmp_path):
    events, L = _profile_one_step(tmp_path)
    step, fwd, bwd = _one(events, "wb/step"), _one(events, "wb/fwd"), _one(events, "wb/bwd")
    assert _inside(fwd, step) and _inside(bwd, step) and _inside(_one(events, "wb/opt"), step)
    for i in range(L):
        lf, lb, lr = (_one(events, f"wb/L{i:02d}/{k}") for k in ("fwd", "bwd", "recompute"))
        assert _inside(lf, fwd) and _inside(lb, bwd)
        assert _inside(lr, lb), f"L{i:02d} recompute not inside its backward"
        attn = [e for e in events if e["name"] == f"wb/L{i:02d}/attn"]
        mlp = [e for e in events if e["name"] == f"wb/L{i:02d}/mlp"]
        assert len(attn) == 2 and len(mlp) == 2  # forward + recompute
        assert sum(_inside(a, lf) for a in attn) == 1 and sum(_inside(a, lr) for a in attn) == 1
        assert sum(_inside(m, lf) for m in mlp) == 1 and sum(_inside(m, lr) for m in mlp) == 1
    # backward runs last layer first
    starts = [_one(events, f"wb/L{i:02d}/bwd")["ts"] for i in range(L)]
    assert starts == sorted(starts, reverse=True)


def test_ranges_off_cost_nothing():
    from workbench.instrument.ranges import _NULL
    assert span("wb/x") is _NULL  # no active sink: a shared no-op context
    with Ranges(nvtx=False, profiler=False).activate():
        assert span("wb/x") is _NULL


def test_instrumentation_reverts_and_keeps_the_function():
    model = build_model("tiny-qwen3", layers=2)
    enable_checkpointing(model)
    batch = make_batches("fixed:16", 64, 1, model.config.vocab_size)[0]
    from workbench.step.models import model_inputs
    ref = model(**model_inputs(model, batch)).loss
    handle = instrument_layers(model)
    classes = {type(l).__name__ for l in find_decoder_layers(model)}
    assert classes == {"Qwen3DecoderLayer"}
    assert torch.equal(model(**model_inputs(model, batch)).loss, ref)
    handle.revert()
    assert all(getattr(type(l), "_wb_base_class", None) is None for l in find_decoder_layers(model))
    assert all("forward" not in vars(l.self_attn) for l in find_decoder_layers(model))
    assert torch.equal(model(**model_inputs(model, batch)).loss, ref)
