"""Offloaded checkpointing (workbench.opts.offload) on CPU: gradients against the references, pool reuse,
fallbacks, ranges, transformers 5.17 compatibility, and the (L-1)·min(c,g) savings model."""
import copy
import functools
import importlib.util
import os
import subprocess

import pytest
import torch
from torch.utils.checkpoint import checkpoint

from workbench.step.data import make_batches
from workbench.step.harness import train_steps
from workbench.instrument import Ranges, instrument_layers
from workbench.step.models import build_model, lora_parameters, model_inputs
from workbench.opts import offload
from workbench.opts.offload_savings import offload_saving, reload_ms_from_bandwidth

OFFLOAD_ARMS = ("sync_reload", "double_buffer")
TOL = dict(rtol=1e-5, atol=1e-6)  # float32: `none` keeps activations instead of recomputing them
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _grads(model, batch, arm, inputs_fn=model_inputs, **options):
    h = offload.apply(model, arm, **options)
    try:
        model.zero_grad(set_to_none=True)
        loss = model(**inputs_fn(model, batch)).loss
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in lora_parameters(model)}, dict(h.info)
    finally:
        h.revert()


def _assert_equal(a, b, what):
    assert a.keys() == b.keys()
    bad = [n for n in a if not torch.equal(a[n], b[n])]
    assert not bad, f"{what}: {len(bad)} LoRA gradients differ, e.g. {bad[0]}"


@pytest.fixture(scope="module", params=["tiny-llama", "tiny-qwen3", "tiny-gpt-oss"])
def model_and_batch(request):
    model = build_model(request.param, layers=3)
    batch = make_batches("uniform:10:60", 192, 1, model.config.vocab_size, seed=1)[0]
    return model, batch


def test_lora_grads_equal_plain_checkpointing_and_close_to_none(model_and_batch):
    model, batch = model_and_batch
    loss_ref, ref, _ = _grads(model, batch, "no_offload")
    loss_none, none, _ = _grads(model, batch, "none")
    assert all(g.abs().sum() > 0 for g in ref.values()), "a LoRA parameter got no gradient"
    for arm in OFFLOAD_ARMS:
        loss, got, info = _grads(model, batch, arm)
        assert torch.equal(loss, loss_ref)
        _assert_equal(got, ref, f"{arm} vs no_offload")
        for n in got:
            torch.testing.assert_close(got[n], none[n], **TOL)
        L = model.config.num_hidden_layers
        assert info["pinned_buffers"] == L and info["n_buffers"] == (2 if arm == "double_buffer" else 1)
        assert info["fallbacks"] == []


def test_frozen_base_with_input_grads_enabled():
    model = build_model("tiny-llama", layers=3)
    batch = make_batches("uniform:10:60", 128, 1, model.config.vocab_size)[0]
    _, ref_plain, _ = _grads(model, batch, "no_offload")
    model.enable_input_require_grads()  # what HF does for reentrant checkpointing: layer 0's input requires grad
    _, ref, _ = _grads(model, batch, "no_offload")
    for arm in OFFLOAD_ARMS:
        _, got, _ = _grads(model, batch, arm)
        _assert_equal(got, ref, arm)
        _assert_equal(got, ref_plain, arm + " (input grads on vs off)")
    assert all(not p.requires_grad for n, p in model.named_parameters() if "lora_" not in n)


def test_revert_restores_checkpointing_state():
    model = build_model("tiny-qwen3", layers=2)
    layers = [m for m in model.modules() if hasattr(m, "gradient_checkpointing")]
    before = [m.gradient_checkpointing for m in layers]
    for arm in offload.ARMS:
        h = offload.apply(model, arm)
        h.revert()
        assert [m.gradient_checkpointing for m in layers] == before
        assert all("_gradient_checkpointing_func" not in vars(m) for m in layers)


# --- a layer returning a tuple, with a grad-requiring keyword tensor --------------------------------------------

class _ToyLayer(torch.nn.Module):
    """Frozen base weight + trainable low-rank pair, returning (hidden, aux, None, an integer tensor)."""

    def __init__(self, d, seed):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.w = torch.nn.Parameter(torch.randn(d, d, generator=g) / d ** 0.5, requires_grad=False)
        self.a = torch.nn.Parameter(torch.randn(4, d, generator=g) * 0.1)
        self.b = torch.nn.Parameter(torch.randn(d, 4, generator=g) * 0.1)

    def forward(self, hidden_states, scale=None, pair=None):
        h = hidden_states @ self.w.T + (hidden_states @ self.a.T) @ self.b.T
        h = torch.nn.functional.gelu(h) * scale + pair[0] * pair[1]
        return hidden_states + h, h.square().mean(), None, torch.argmax(h, dim=-1)


def _toy_run(ckpt_for, requires_grad_input):
    torch.manual_seed(0)
    d, T = 16, 12
    layers = torch.nn.ModuleList([_ToyLayer(d, s) for s in range(3)])
    scale = torch.full((d,), 0.5, requires_grad=True)
    pair = (torch.randn(T, d), torch.randn(T, d).requires_grad_(True))
    x = torch.randn(T, d, requires_grad=requires_grad_input)
    fn = ckpt_for(layers)
    h, aux_sum = x, 0
    for layer in layers:
        h, aux, none, idx = fn(functools.partial(layer.forward, scale=scale, pair=pair), h)
        assert none is None and idx.dtype == torch.long and not idx.requires_grad
        aux_sum = aux_sum + aux
    (h.sum() + aux_sum).backward()
    grads = {f"{i}.{n}": p.grad.clone() for i, l in enumerate(layers) for n, p in l.named_parameters()
             if p.requires_grad}
    grads["scale"] = scale.grad.clone()
    grads["pair1"] = pair[1].grad.clone()
    if requires_grad_input:
        grads["x"] = x.grad.clone()
    return grads


def _bound_method_partial(layers):
    """transformers 5.17 style: partial(layer.__call__, **kw) -- the layer is the bound method's owner."""
    def run(partial_forward, hidden):
        return partial_forward(hidden)
    return run


@pytest.mark.parametrize("requires_grad_input", [False, True])
@pytest.mark.parametrize("n_buffers", [1, 2])
def test_tuple_output_and_keyword_tensors(requires_grad_input, n_buffers):
    ref = _toy_run(lambda layers: functools.partial(checkpoint, use_reentrant=False), requires_grad_input)
    got = _toy_run(lambda layers: offload.Offloader(layers, n_buffers=n_buffers, device="cpu"), requires_grad_input)
    _assert_equal(got, ref, "toy layers")


# --- the stream/event protocol, recorded with a fake torch.cuda ------------------------------------------------

class _StreamLog:
    """A stand-in for torch.cuda's streams and events that logs every call (CPU tensors do the copies)."""

    def __init__(self):
        self.log = []
        self.compute = self.Stream("compute")
        self.current = self.compute
        self.n_events = 0

    def Stream(self, name="copy"):  # noqa: N802 - mirrors torch.cuda.Stream
        log = self

        class S:
            def __init__(self):
                self.name = name if isinstance(name, str) else "copy"

            def wait_stream(self, other):
                log.log.append(("wait_stream", self.name, other.name))

            def wait_event(self, ev):
                log.log.append(("wait_event", self.name, ev.id))
        return S()

    def Event(self, enable_timing=False):  # noqa: N802
        log = self
        log.n_events += 1

        class E:
            id = log.n_events

            def record(self, stream=None):
                log.log.append(("record", (stream or log.current).name, self.id))

            def elapsed_time(self, other):
                return 1.0

            def synchronize(self):
                pass
        return E()

    def current_stream(self, device=None):
        return self.current

    def stream(self, s):
        import contextlib

        @contextlib.contextmanager
        def ctx():
            prev, self.current = self.current, s
            self.log.append(("on", s.name))
            try:
                yield
            finally:
                self.current = prev
        return ctx()


class _LogRanges(Ranges):
    def __init__(self, log):
        super().__init__(nvtx=False, profiler=True)
        self.log = log

    def push(self, name):
        self.log.append(("range", name))

    def pop(self, token):
        pass


@pytest.mark.parametrize("n_buffers", [1, 2])
def test_stream_protocol(monkeypatch, n_buffers):
    """Forward never waits for the copy stream; sync_reload's copy waits for all queued compute; double_buffer
    prefetches layer i-1 before layer i computes and its copies wait only for per-buffer events."""
    fake = _StreamLog()
    for name in ("Stream", "Event", "current_stream", "stream"):
        monkeypatch.setattr(torch.cuda, name, getattr(fake, name))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(torch.Tensor, "record_stream", lambda self, s: fake.log.append(("record_stream", s.name)),
                        raising=False)
    ranges = _LogRanges(fake.log)
    ref = _toy_run(lambda layers: functools.partial(checkpoint, use_reentrant=False), True)

    def make(layers):
        ctl = offload.Offloader(layers, n_buffers=n_buffers, device="cpu")
        ctl.cuda, ctl.copy_stream = True, fake.Stream("copy")  # the CUDA code path, on CPU tensors
        return ctl

    with ranges.activate():
        got = _toy_run(make, True)
    _assert_equal(got, ref, "fake-stream run")
    log = fake.log
    first_bwd = next(k for k, e in enumerate(log) if e == ("range", "wb/L02/reload"))
    fwd, bwd = log[:first_bwd], log[first_bwd:]
    assert [e for e in fwd if e[0] == "range"] == [("range", f"wb/L{i:02d}/offload") for i in range(3)]
    assert fwd.count(("wait_stream", "copy", "compute")) == 3  # each offload waits for its input to exist ...
    assert not [e for e in fwd if e[0] in ("wait_stream", "wait_event") and e[1] == "compute"]  # ... compute never
    assert fwd.count(("record_stream", "copy")) == 3  # inputs freed only after their copies
    loaded = {e[2] for e in bwd if e[0] == "record" and e[1] == "copy"}
    waits = [e for e in bwd if e[0] == "wait_event" and e[1] == "compute"]
    assert len(waits) == 3 and all(e[2] in loaded for e in waits)  # compute waits only on its reload's event
    pos = {e[1]: k for k, e in enumerate(bwd) if e[0] == "range"}
    assert [n for n in pos if n.endswith("/reload")] == ["wb/L02/reload", "wb/L01/reload", "wb/L00/reload"]
    if n_buffers == 1:
        assert bwd.count(("wait_stream", "copy", "compute")) == 3  # the blocking baseline
        for i in (1, 0):  # layer i's reload is queued only after layer i+1's recompute
            assert pos[f"wb/L{i + 1:02d}/recompute"] < pos[f"wb/L{i:02d}/reload"]
    else:
        assert ("wait_stream", "copy", "compute") not in bwd  # no full-stream waits in steady state
        for i in (2, 1):  # layer i-1's reload is queued before layer i recomputes
            assert pos[f"wb/L{i - 1:02d}/reload"] < pos[f"wb/L{i:02d}/recompute"]
        # layer 0 reuses layer 2's buffer: its copy waits on the event recorded after layer 2's backward
        free = [e for e in bwd[pos["wb/L02/recompute"]:pos["wb/L01/recompute"]] if e[0] == "record"
                and e[1] == "compute"]
        copy_waits = [e for e in bwd[pos["wb/L00/reload"]:] if e[0] == "wait_event" and e[1] == "copy"]
        assert free and copy_waits and copy_waits[0][2] == free[-1][2]


# --- pool reuse, fallbacks, timing, syncs ---------------------------------------------------------------------

def test_ten_steps_without_pinned_growth():
    model = build_model("tiny-qwen3", layers=3)
    batches = make_batches("fixed:16", 64, 2, model.config.vocab_size)
    h = offload.apply(model, "double_buffer")
    seen = []
    train_steps(model, batches, steps=10, warmup=0, count_syncs=False,
                on_step=lambda r: seen.append((h.info["pinned_bytes"], h.info["pinned_allocs"],
                                               h.info["device_buffer_bytes"])))
    h.revert()
    assert len(seen) == 10 and len(set(seen)) == 1, seen
    assert seen[0][1] == 3  # one host buffer per layer, allocated in step 1 and reused since


def test_varying_batch_shapes_grow_the_pool_only_to_the_largest():
    model = build_model("tiny-llama", layers=2)
    batches = [make_batches(f"fixed:{n}", n, 1, model.config.vocab_size)[0] for n in (300, 1100, 700)]
    h = offload.apply(model, "double_buffer")
    seen = []
    train_steps(model, batches, steps=6, warmup=0, count_syncs=False,
                on_step=lambda r: seen.append((h.info["pinned_bytes"], h.info["pinned_buffers"])))
    h.revert()
    assert len(set(seen[2:])) == 1 and seen[-1][1] == 2, seen  # after the largest batch: no growth


def test_offload_adds_no_syncs():
    model = build_model("tiny-llama", layers=3)
    batches = make_batches("uniform:10:60", 128, 1, model.config.vocab_size)
    syncs = {}
    for arm in ("no_offload", "sync_reload", "double_buffer"):
        h = offload.apply(model, arm)
        syncs[arm] = [r.syncs for r in train_steps(model, batches, steps=1, warmup=0)]
        h.revert()
    assert syncs["sync_reload"] == syncs["double_buffer"] == syncs["no_offload"], syncs


def test_low_free_memory_switches_double_buffering_off(monkeypatch, caplog):
    model = build_model("tiny-llama", layers=3)
    batch = make_batches("uniform:10:60", 128, 1, model.config.vocab_size)[0]
    _, ref, _ = _grads(model, batch, "no_offload")
    monkeypatch.setattr(offload, "_free_device_bytes", lambda device: 100 * 2**20)
    with caplog.at_level("WARNING", logger="workbench.opts.offload"):
        _, got, info = _grads(model, batch, "double_buffer", min_free_mib=512)
    _assert_equal(got, ref, "double_buffer after the low-memory fallback")
    assert info["n_buffers"] == 1 and len(info["fallbacks"]) == 1 and "free GPU memory" in info["fallbacks"][0]
    assert any("double buffering off" in r.message for r in caplog.records)


def test_out_of_memory_falls_back_to_one_buffer(monkeypatch):
    model = build_model("tiny-llama", layers=3)
    batch = make_batches("uniform:10:60", 128, 1, model.config.vocab_size)[0]
    _, ref, _ = _grads(model, batch, "no_offload")
    real = offload._alloc_device
    calls = []

    def alloc(nbytes, device):
        calls.append(nbytes)
        if len(calls) == 2:  # the second reload buffer
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(nbytes, device)

    monkeypatch.setattr(offload, "_alloc_device", alloc)
    _, got, info = _grads(model, batch, "double_buffer")
    _assert_equal(got, ref, "double_buffer after the OOM fallback")
    assert info["n_buffers"] == 1 and "out of memory" in info["fallbacks"][0]


def test_layer_times_for_the_savings_model():
    model = build_model("tiny-llama", layers=3)
    batches = make_batches("uniform:10:60", 128, 1, model.config.vocab_size)
    h = offload.apply(model, "sync_reload", timing=True)
    train_steps(model, batches, steps=1, warmup=0, count_syncs=False)
    rows = offload.layer_times_ms(h)
    h.revert()
    assert [r["layer"] for r in rows] == [2, 1, 0]  # backward order
    assert all(r["reload_ms"] >= 0 and r["compute_ms"] > 0 for r in rows)
    with pytest.raises(Exception):
        offload.layer_times_ms(offload.apply(model, "none"))


# --- ranges -----------------------------------------------------------------------------------------------------

def _inside(inner, outer):
    return outer["ts"] <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"] + 1


@pytest.mark.parametrize("instrumented", [True, False])
def test_offload_ranges(tmp_path, instrumented):
    import json
    model = build_model("tiny-llama", layers=3)
    if instrumented:
        instrument_layers(model)
    h = offload.apply(model, "double_buffer")
    batches = make_batches("uniform:4:30", 64, 1, model.config.vocab_size)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        train_steps(model, batches, steps=1, warmup=0, ranges=Ranges(nvtx=False, profiler=True), count_syncs=False)
    h.revert()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    ev = [e for e in json.loads(path.read_text())["traceEvents"]
          if e.get("ph") == "X" and str(e.get("name", "")).startswith("wb/")]

    def one(name):
        found = [e for e in ev if e["name"] == name]
        assert len(found) == 1, f"{name}: {len(found)}"
        return found[0]

    fwd, bwd = one("wb/fwd"), one("wb/bwd")
    for i in range(3):
        assert _inside(one(f"wb/L{i:02d}/offload"), fwd)
        assert _inside(one(f"wb/L{i:02d}/reload"), bwd)
        assert _inside(one(f"wb/L{i:02d}/recompute"), bwd)
    if instrumented:  # the prefetch of layer i-1 is queued inside layer i's backward
        for i in range(1, 3):
            assert _inside(one(f"wb/L{i - 1:02d}/reload"), one(f"wb/L{i:02d}/bwd"))
            assert _inside(one(f"wb/L{i:02d}/recompute"), one(f"wb/L{i:02d}/bwd"))


# --- combined with the packing optimization --------------------------------------------------------------------

def test_combined_with_packing():
    if importlib.util.find_spec("workbench.opts.packing") is None:
        pytest.skip("workbench.opts.packing is not there yet")
    from workbench.opts import apply as opt_apply
    from workbench.opts import module as opt_module
    packing = opt_module("packing")
    model = build_model("tiny-llama", layers=3)
    raw = make_batches("uniform:10:60", 192, 1, model.config.vocab_size, seed=2)[0]
    for parm in (packing.BASELINE, packing.OPTIMIZED):
        if packing.unsupported(parm, model, torch.device("cpu")):
            continue
        ph = opt_apply(model, "packing", parm)
        try:
            batch = ph.prepare_batch(copy.deepcopy(raw)) if ph.prepare_batch else raw
            fn = ph.inputs_fn or model_inputs
            _, ref, _ = _grads(model, batch, "no_offload", inputs_fn=fn)
            for arm in OFFLOAD_ARMS:
                _, got, _ = _grads(model, batch, arm, inputs_fn=fn)
                _assert_equal(got, ref, f"packing={parm} offload={arm}")
        finally:
            ph.revert()


# --- transformers 5.17 ------------------------------------------------------------------------------------------

_VENV517 = "/work/venv517/bin/python"

_SCRIPT_517 = """
import torch, transformers
from workbench.step.data import make_batches
from workbench.step.models import build_model, lora_parameters, model_inputs
from workbench.opts import offload
assert transformers.__version__.startswith("5.17"), transformers.__version__
m = build_model("tiny-llama", layers=3)
b = make_batches("uniform:10:60", 128, 1, m.config.vocab_size)[0]
res = {}
for arm in ("no_offload", "sync_reload", "double_buffer"):
    h = offload.apply(m, arm)
    m.zero_grad(set_to_none=True)
    m(**model_inputs(m, b)).loss.backward()
    res[arm] = {n: p.grad.clone() for n, p in lora_parameters(m)}
    assert arm == "no_offload" or h.info["pinned_buffers"] == 3, h.info
    h.revert()
for arm in ("sync_reload", "double_buffer"):
    assert all(torch.equal(res[arm][n], res["no_offload"][n]) for n in res[arm]), arm
print("OK")
"""


@pytest.mark.skipif(not os.path.exists(_VENV517), reason="no transformers 5.17 environment")
def test_transformers_517_checkpoints_call():
    env = dict(os.environ, PYTHONPATH=REPO)
    r = subprocess.run([_VENV517, "-c", _SCRIPT_517], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr[-3000:]


# --- the savings model ------------------------------------------------------------------------------------------

def test_savings_uniform_layers_is_l_minus_1_min_c_g():
    s = offload_saving(2.0, 5.0, layers=8, measured_ms=7.0)
    assert s["predicted_ms"] == 7 * 2.0
    assert s["overlap_efficiency"] == 0.5
    assert s["inputs"]["bound"] == "compute"
    assert offload_saving(6.0, 5.0, layers=4)["predicted_ms"] == 3 * 5.0


def test_savings_pairs_reload_of_layer_below_with_compute_of_layer_above():
    # pairs (c0, g1), (c1, g2): min(1, 10) + min(4, 3)
    s = offload_saving([1.0, 4.0, 100.0], [7.0, 10.0, 3.0])
    assert s["predicted_ms"] == 1.0 + 3.0
    assert s["inputs"]["blocking_backward_ms"] == 125.0
    assert s["inputs"]["overlapped_backward_ms"] == 121.0
    assert s["measured_ms"] is None and s["overlap_efficiency"] is None
    assert offload_saving([3.0], [4.0])["predicted_ms"] == 0.0  # one layer: nothing to overlap (published form)
    # with h, the GPU work queued ahead of the first reload: that reload hides behind it, up to its own c
    assert offload_saving([3.0], [4.0], lead_ms=10.0)["predicted_ms"] == 3.0
    assert offload_saving([1.0, 4.0, 100.0], [7.0, 10.0, 3.0], lead_ms=2.0)["predicted_ms"] == 1.0 + 3.0 + 2.0
    assert offload_saving([1.0, 4.0, 100.0], [7.0, 10.0, 3.0], lead_ms=2.0)["published_ms"] == 4.0


def test_savings_rejects_bad_inputs():
    with pytest.raises(ValueError):
        offload_saving(1.0, 2.0)
    with pytest.raises(ValueError):
        offload_saving([1.0, 2.0], [1.0])
    with pytest.raises(ValueError):
        offload_saving([-1.0], [1.0])
    with pytest.raises(ValueError):
        offload_saving([1.0], [1.0], lead_ms=-1.0)


def test_reload_ms_from_bandwidth():
    assert reload_ms_from_bandwidth(52e9, 52.0) == pytest.approx(1000.0)

