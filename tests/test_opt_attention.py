"""opts/attention (the packed-attention lever): every arm computes the model's own attention on a packed batch (fp32 on
the CPU, loss and LoRA gradients, tiny-llama and tiny-gpt-oss with its sinks and sliding windows) with 0 syncs; flex
itself (forward, CPU) on the same BlockMask; the BlockMask tables against torch's create_block_mask; the sink
formula against transformers' eager sinks; negative controls (a wrong mask, a wrong sink) that fail."""
import pytest
import torch

from workbench.step.data import batch_from_lengths
from workbench.errors import UnsupportedArm
from workbench.step.harness import enable_checkpointing
from workbench.instrument import SyncCounter, instrument_layers, state
from workbench.step.models import build_model, model_inputs
from workbench.opts import attention, packing

LENS = [13, 5, 21, 9]  # longer than GPT-OSS's tiny sliding window (8): the sliding layers are exercised
PRESETS = ["tiny-llama", "tiny-gpt-oss"]
TOL = dict(rtol=1e-5, atol=1e-6)


def _model(preset):
    m = build_model(preset, layers=2)
    enable_checkpointing(m)
    instrument_layers(m)
    return m


def _step(model, kw, counter=None):
    """One forward + backward (fp32); (loss, LoRA grads)."""
    with counter if counter is not None else SyncCounter(device_type="cpu"):
        with state.phase(state.FORWARD):
            loss = model(**kw).loss
        with state.phase(state.BACKWARD):
            loss.backward()
    grads = [p.grad.detach().clone() for _, p in sorted(model.named_parameters()) if p.requires_grad]
    model.zero_grad(set_to_none=True)
    return loss.detach(), grads


def _close(a, b) -> bool:
    return len(a[1]) == len(b[1]) > 0 and torch.allclose(a[0], b[0], **TOL) and all(
        torch.allclose(x, y, **TOL) for x, y in zip(a[1], b[1]))


def _arm_kw(model, arm, batch, handle=None):
    h = handle or attention.apply(model, arm)
    return h, h.inputs_fn(model, h.prepare_batch(batch))


def test_registered_as_a_lever_outside_all():
    from workbench.opts import registry as opt_registry
    spec = opt_registry.spec("attention")
    from workbench.opts.registry import in_all_names as opts_in_all
    assert "attention" not in opts_in_all() and "packing" in opts_in_all()  # a lever: not in --opt all
    assert spec["lever"] == "attention (dense)" and spec["in_all"] is False and spec["all_variants"] == ()
    assert attention.BASELINE == "dense" and attention.OPTIMIZED == "flex"
    assert not hasattr(attention, "BACKENDS")  # --attn names stay the packing backends


@pytest.mark.parametrize("preset", PRESETS)
def test_every_arm_is_the_models_own_attention_with_zero_syncs(preset):
    """Reference: the model's own attention (sdpa; eager for GPT-OSS) through `model_inputs`. dense is that very
    computation (bitwise); flex (the CPU path: flex has no CPU backward) and varlen agree to fp32 rounding. Every arm
    makes 0 syncs per step: its metadata comes from collate time, its masks are built on the device."""
    model = _model(preset)
    batch = batch_from_lengths(LENS, 256, seed=1)
    ref = _step(model, model_inputs(model, batch))
    for arm in attention.ARMS:
        h, kw = _arm_kw(model, arm, batch)
        c = SyncCounter(device_type="cpu")
        got = _step(model, kw, c)
        h.revert()
        assert c.total == 0, (arm, c.by("source"))
        assert _close(got, ref), (arm, got[0], ref[0])
        if arm == "dense":
            assert torch.equal(got[0], ref[0]) and all(torch.equal(x, y) for x, y in zip(got[1], ref[1]))
    assert model.config._attn_implementation == ("eager" if preset == "tiny-gpt-oss" else "sdpa")


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("arm", ["dense", "flex"])
def test_negative_control_a_wrong_mask_is_caught(preset, arm):
    """The same arm with the documents merged into one (a causal mask across documents) differs from the reference."""
    model = _model(preset)
    batch = batch_from_lengths(LENS, 256, seed=1)
    ref = _step(model, model_inputs(model, batch))
    h = attention.apply(model, arm)
    prepared = h.prepare_batch(batch)
    T = batch.tokens
    wrong = attention.make_prepare_batch(model.get_base_model(), arm)(
        batch_from_lengths([T], 256, seed=1))  # one document of T tokens: the mask ignores document bounds
    kw = h.inputs_fn(model, type(prepared)(prepared.input_ids, prepared.position_ids, prepared.labels,
                                           list(prepared.doc_lens), wrong.meta))
    got = _step(model, kw)
    assert not _close(got, ref)


def test_negative_control_a_wrong_sink_is_caught(monkeypatch):
    """flex on GPT-OSS with the sink left out (or with the wrong sign) differs from the model's eager sinks."""
    model = _model("tiny-gpt-oss")
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("sinks"):
                p.copy_(torch.randn(p.shape))
    batch = batch_from_lengths(LENS, 256, seed=1)
    ref = _step(model, model_inputs(model, batch))
    h, kw = _arm_kw(model, "flex", batch)
    assert _close(_step(model, kw), ref)
    for wrong in (lambda out, lse, s: out, lambda out, lse, s: out * torch.sigmoid(s.view(1, -1, 1) - lse)[..., None]):
        monkeypatch.setattr(attention, "with_sinks", wrong)
        assert not _close(_step(model, h.inputs_fn(model, h.prepare_batch(batch))), ref)


def test_with_sinks_is_transformers_eager_sinks():
    """out * sigmoid(lse - s) == the eager softmax over [scores, sink] without the sink column."""
    model = build_model("tiny-gpt-oss", layers=1)
    attn = model.get_base_model().model.layers[0].self_attn
    H, Hkv, T, E = attn.config.num_attention_heads, attn.config.num_key_value_heads, 24, attn.head_dim
    with torch.no_grad():
        attn.sinks.copy_(torch.randn(H) * 2)
        q, k, v = torch.randn(1, H, T, E), torch.randn(1, Hkv, T, E), torch.randn(1, Hkv, T, E)
        out, lse = attention.cpu_flex(q, k, v, [T], None, attn.scaling)
        got = attention.with_sinks(out, lse, attn.sinks).transpose(1, 2)
        causal = torch.zeros(1, 1, T, T).masked_fill_(~torch.ones(T, T, dtype=torch.bool).tril_(),
                                                       torch.finfo(torch.float32).min)
        want, _ = packing._family_eager(attn)(attn, q, k, v, causal, scaling=attn.scaling)
    torch.testing.assert_close(got, want, **TOL)


@pytest.mark.parametrize("lens, block, window", [([5, 3, 8], 4, None), ([5, 3, 8], 4, 3), ([17], 8, 5),
                                                 ([130, 7, 200, 1, 62], 128, None), ([130, 7, 200, 1, 62], 16, 40),
                                                 ([9, 9, 3], 4, 1), ([33, 31], 8, 100)])
def test_block_tables_match_create_block_mask(lens, block, window):
    from torch.nn.attention.flex_attention import create_block_mask
    T = sum(lens)
    parts = attention.interval_block_parts(lens, window, block)
    ref = create_block_mask(attention.mask_mod(parts["doc_ids"], window), 1, None, T, T, device="cpu",
                            BLOCK_SIZE=block)
    with SyncCounter(device_type="cpu") as c:
        got = attention.block_mask(parts, T, window, block)
        dense = attention.dense_mask(parts["doc_ids"], window)
    assert c.total == 0, c.by("source")
    assert torch.equal(got.to_dense(), ref.to_dense())
    assert torch.equal(got.full_kv_num_blocks, ref.full_kv_num_blocks)
    assert torch.equal(got.kv_num_blocks, ref.kv_num_blocks)
    i = torch.arange(T)
    want = (parts["doc_ids"][:, None] == parts["doc_ids"][None]) & (i[:, None] >= i[None])
    if window is not None:
        want &= i[:, None] - i[None] < window
    assert torch.equal(dense[0, 0], want)
    if window is None:  # the packing module's tables (documents only) are the same
        old = packing.flex_block_tensors_host(lens, block)
        for k in ("kv_num_blocks", "full_kv_num_blocks"):
            assert torch.equal(parts[k], old[k])


@pytest.mark.parametrize("window", [None, 7])
def test_flex_kernel_forward_equals_the_cpu_path(window):
    """flex itself (CPU forward) with the BlockMask from the collate-time tables: the same out and lse as the
    per-document CPU path the CPU training step runs (GQA, window)."""
    from torch.nn.attention.flex_attention import flex_attention
    lens = [130, 7, 60, 1, 40]
    T = sum(lens)
    parts = attention.interval_block_parts(lens, window)
    bm = attention.block_mask(parts, T, window)
    q, k, v = torch.randn(1, 4, T, 16), torch.randn(1, 2, T, 16), torch.randn(1, 2, T, 16)
    out, lse = flex_attention(q, k, v, block_mask=bm, scale=0.25, enable_gqa=True, return_lse=True)
    want_out, want_lse = attention.cpu_flex(q, k, v, lens, window, 0.25)
    torch.testing.assert_close(out, want_out, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lse, want_lse, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("preset", PRESETS)
def test_flex_kernel_in_the_model_without_gradients(preset):
    """A forward without gradients runs flex itself on the CPU (BlockMasks per window, GPT-OSS's sinks through its
    LSE): the loss of the model's own attention."""
    model = _model(preset)
    batch = batch_from_lengths(LENS, 256, seed=1)
    with torch.no_grad():
        ref = model(**model_inputs(model, batch)).loss
        h, kw = _arm_kw(model, "flex", batch)
        got = model(**kw).loss
    assert ("flex", None) in kw["wb_attention"].variants  # flex ran (its BlockMask was built)
    if preset == "tiny-gpt-oss":
        assert ("flex", 8) in kw["wb_attention"].variants
    torch.testing.assert_close(got, ref, **TOL)


def test_unsupported_revert_and_unprepared_batches():
    from workbench.errors import WorkbenchError
    gpt = build_model("tiny-gpt-oss", layers=1)
    assert "sinks" in attention.unsupported("varlen", gpt, "cuda")
    assert attention.unsupported("flex", gpt, "cuda") is None
    assert "unknown attention arm" in attention.unsupported("paged", gpt, "cpu")
    with pytest.raises(UnsupportedArm):
        attention.apply(gpt, "paged")
    llama = build_model("tiny-llama", layers=1)
    h = attention.apply(llama, "flex")
    assert llama.config._attn_implementation == "wb_attention_flex"
    batch = batch_from_lengths(LENS, 256, seed=1)
    with pytest.raises(WorkbenchError, match="prepared"):
        h.inputs_fn(llama, batch)
    with pytest.raises(WorkbenchError, match="wb_attention"):
        llama(**model_inputs(llama, batch))
    h.revert()
    assert llama.config._attn_implementation == "sdpa"


def test_saved_fraction():
    assert attention.saved_fraction([16]) == 0.0
    assert attention.saved_fraction([8, 8]) == 0.5
    assert attention.saved_fraction([]) == 0.0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="flex's backward (compiled) needs a GPU")
@pytest.mark.parametrize("preset", PRESETS)
def test_flex_on_cuda_trains_like_the_models_own_attention(preset):
    """On a GPU the flex arm runs the compiled kernel forward and backward (GPT-OSS: gradients through its LSE):
    fp32 loss and LoRA gradients against the model's own attention (sdpa; eager with sinks)."""
    from workbench.step.data import to_device
    model = build_model(preset, layers=2, device="cuda", dtype=torch.float32, precision="fp32-adapters",
                        experts_implementation="eager")
    enable_checkpointing(model)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("sinks"):
                p.copy_(torch.randn(p.shape))
    batch = batch_from_lengths([300, 17, 500, 140, 67], model.config.vocab_size, seed=1)  # token ids < vocab size
    ref = _step(model, model_inputs(model, to_device([batch], "cuda")[0]))
    h = attention.apply(model, "flex")
    got = _step(model, h.inputs_fn(model, to_device([batch], "cuda", prepare=h.prepare_batch)[0]))
    torch.testing.assert_close(got[0], ref[0], rtol=1e-4, atol=1e-5)
    for x, y in zip(got[1], ref[1]):
        assert float((x - y).norm() / y.norm().clamp_min(1e-30)) < 1e-3


def test_flex_runs_under_the_sync_counter_and_counts_no_sync():
    """The counted pass runs the step under the sync counter's TorchDispatchMode; flex_attention (a higher-order op
    that compiles itself) must run there too and give the same output (the H100 run of 2026-11-25 failed here:
    without `syncs.outside_dispatch_modes` this test fails the same way; calling flex_attention bare under the
    counter to show it would leave dynamo's nested-compile flag set for the rest of the process)."""
    from workbench.instrument.syncs import SyncCounter
    from workbench.opts import attention as att

    q = torch.randn(1, 2, 128, 16)
    with torch.no_grad():
        ref, _ = att._flex_kernel(q, q, q, None, 0.25, need_lse=False)
        counter = SyncCounter()
        with counter:
            out, _ = att._flex_kernel(q, q, q, None, 0.25, need_lse=False)
        assert torch.equal(out, ref)
        assert counter.total == 0


@pytest.mark.parametrize("argv,msg", [
    (["--opt", "moe"], "comparison moe would run the model's own attention"),
    (["--opt", "offload"], "comparison offload would run"),
    (["--opt", "all"], "(in --opt all: --only packing,all)"),
    (["--opt", "levers"], "only --opt packing installs"),
    (["--opt", "attention"], "does not apply to --opt attention: its arms choose the attention kernel"),
    (["--opt", "moe_balance", "--attn", "flex"], "--attn flex is a workbench attention backend"),
])
def test_a_packing_backend_outside_packing_is_refused_in_one_line(argv, msg):
    """--attn varlen / flex (packing's backends) where no arm installs them would be the model's own attention (sdpa,
    a dense T x T mask) under their name: refused at plan time. Controls: packing, and --opt all cut to the
    comparisons that install it, plan; an HF implementation plans for any opt."""
    from workbench.ab.cli import CPU_DEFAULTS, parse_args
    from workbench.ab.planner import plan
    from workbench.errors import WorkbenchError
    cpu = torch.device("cpu")

    def planned(*a):
        return plan(parse_args([*a, "--device", "cpu"]).resolved(cpu, CPU_DEFAULTS["_run"]), cpu)

    argv = argv if "--attn" in argv else [*argv, "--attn", "varlen"]
    with pytest.raises(WorkbenchError) as e:
        planned(*argv)
    assert msg in str(e.value) and "\n" not in str(e.value)
    assert [c.attn for c in planned("--opt", "packing", "--attn", "varlen")] == ["varlen"]
    assert [c.name for c in planned("--opt", "all", "--attn", "varlen", "--only", "packing,all")] == ["packing", "all"]
    assert planned(*[a for a in argv if a not in ("--attn", "varlen", "flex")], "--attn", "sdpa")

