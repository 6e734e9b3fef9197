"""The compile lever's opt-in `regional_cudagraphs` arm, on the CPU: refused in one line where it cannot run (no CUDA
device, dynamic shapes, a checkpointed layer, beside the activations lever's checkpointed or offloaded arms), never
on the levers' path (OFF_PATH_ARMS, listed with the path's notes), and its predicted saving read off a breakdown."""
import json

import pytest

from workbench import opts
from workbench.errors import UnsupportedArm, WorkbenchError
from workbench.instrument import instrument_layers
from workbench.opts import compile as comp
from workbench.step.harness import enable_checkpointing
from workbench.step.models import build_model


def _model(checkpointed: bool):
    m = build_model("tiny-llama", layers=1, precision="fp32-adapters")
    if checkpointed:
        enable_checkpointing(m)
    instrument_layers(m)
    return m


def test_refused_on_a_cpu_and_opt_in():
    m = _model(False)
    why = comp.unsupported(comp.CUDAGRAPHS, m, "cpu")
    assert why.startswith("CUDA graphs need a CUDA device") and "\n" not in why
    with pytest.raises(UnsupportedArm):
        opts.apply(m, "compile", comp.CUDAGRAPHS, tokens=256)
    assert comp.CUDAGRAPHS in comp.OPT_IN_ARMS and comp.CUDAGRAPHS in comp.OFF_PATH_ARMS


def test_refused_without_static_shapes_and_in_a_checkpointed_layer(monkeypatch):
    """Past the device check (monkeypatched: no CUDA here), on aot_eager: no tokens is refused at apply; a
    checkpointed layer at its first call, before anything compiles."""
    from workbench.step import harness
    from workbench.step.data import make_batches, to_device
    monkeypatch.setattr(comp, "unsupported", lambda arm, model, device: None)
    m = _model(True)
    with pytest.raises(UnsupportedArm, match="static shapes"):
        opts.apply(m, "compile", comp.CUDAGRAPHS)
    h = opts.apply(m, "compile", comp.CUDAGRAPHS, tokens=256, backend="aot_eager")
    try:
        data = to_device(make_batches("uniform:16:64", 256, 1, 256, seed=0), "cpu", prepare=h.prepare_batch)
        with pytest.raises(WorkbenchError, match="checkpointed layer"):
            harness.train_step(m, data[0], harness.make_optimizer(m, lr=0.0))
        assert h.info["graphs_here"] == 0  # nothing compiled under this handle (graphs: an earlier apply's)
    finally:
        h.revert()


@pytest.mark.parametrize("act,conflicts", [("full", True), ("selective", True), ("offload", True), ("none", False)])
def test_path_conflict_beside_the_activations_arms(act, conflicts):
    why = comp.path_conflict({"compile": comp.CUDAGRAPHS, "activations": act}, "cuda")
    assert (why is not None) == conflicts
    assert comp.path_conflict({"compile": "regional", "activations": act}, "cuda") is None


def test_prediction_is_the_launch_gap():
    bd = {"components": [{"component": "gemm", "ms": 300.0}, {"component": "launch_gap", "ms": 12.5}]}
    assert comp.cudagraphs_prediction(bd) == 12.5 and comp.cudagraphs_prediction(None) is None


def test_off_path_arms_are_listed_with_the_paths_notes(tmp_path):
    from workbench.ab.lever_path import path_notes
    from workbench.ab.levers import arms_off_path
    from types import SimpleNamespace
    off = arms_off_path([SimpleNamespace(opt="compile"), SimpleNamespace(opt="lora_fusion")])
    assert list(off) == ["compile=regional_cudagraphs"]
    (tmp_path / "summary.json").write_text(json.dumps({"levers": {"arms_off_path": off}}))
    assert any(n.startswith("arm off the path: compile=regional_cudagraphs (CUDA graphs fail")
               for n in path_notes(str(tmp_path)))
