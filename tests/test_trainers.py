"""The optimizations under the real trainers with their defaults (gradient checkpointing on; TRL's padding-free packing),
counted by `WorkbenchCallback` inside the run, and the callback's run folder read by the A/B's readers."""
import json
import os

import pytest
import torch

from workbench.api import apply_optimizations
from workbench.callback import WorkbenchCallback
from workbench.errors import WorkbenchError
from workbench.step.models import base_model_of, build_model

VOCAB = 256


def _docs(n=48, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [{"input_ids": torch.randint(2, VOCAB, (int(k),), generator=g).tolist()}
            for k in torch.randint(5, 40, (n,), generator=g)]


def _trainer(model, out, tmp_path, steps=3):
    from transformers import DataCollatorWithFlattening, Trainer, TrainingArguments
    args = TrainingArguments(output_dir=str(tmp_path / "trainer"), per_device_train_batch_size=4, max_steps=steps,
                             learning_rate=1e-3, logging_steps=1, report_to="none", use_cpu=True, save_strategy="no",
                             dataloader_num_workers=0, seed=0, disable_tqdm=True, gradient_checkpointing=True)
    cb = WorkbenchCallback(str(out), start_step=1, pairs=0, count_steps=steps - 1)
    Trainer(model=model, args=args, train_dataset=_docs(), callbacks=[cb],
            data_collator=DataCollatorWithFlattening(return_flash_attn_kwargs=True)).train()
    return json.load(open(os.path.join(out, "summary.json")))["comparisons"][0]


def _sft(model, out, tmp_path, steps=3):
    trl = pytest.importorskip("trl")
    from datasets import Dataset
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({f"t{i}": i for i in range(VOCAB)},
                                                                              unk_token="t0")),
                                  pad_token="t0", eos_token="t1", unk_token="t0")
    cfg = trl.SFTConfig(output_dir=str(tmp_path / "sft"), per_device_train_batch_size=1, max_steps=steps,
                        learning_rate=1e-3, report_to="none", use_cpu=True, bf16=False, save_strategy="no",
                        dataloader_num_workers=0, seed=0, disable_tqdm=True, packing=True, max_length=128,
                        logging_steps=1)
    assert cfg.gradient_checkpointing  # TRL's default, kept
    cb = WorkbenchCallback(str(out), start_step=1, pairs=0, count_steps=steps - 1)
    trl.SFTTrainer(model=model, args=cfg, train_dataset=Dataset.from_list(_docs()), processing_class=tok,
                   callbacks=[cb]).train()
    return json.load(open(os.path.join(out, "summary.json")))["comparisons"][0]


def _syncs(c):
    return c["baseline"]["syncs_per_step"]


@pytest.mark.parametrize("run", [_trainer, _sft], ids=["Trainer", "SFTTrainer"])
def test_packing_on_padding_free_batches_adds_no_sync(run, tmp_path):
    plain = _syncs(run(build_model("tiny-qwen3", lora_rank=4), tmp_path / "plain", tmp_path))
    for arm in ("cached", "precomputed"):
        model = build_model("tiny-qwen3", lora_rank=4)
        h = apply_optimizations(model, packing=arm)
        got = run(model, tmp_path / arm, tmp_path)
        st = h.by_opt["packing"].packing_state
        assert st.from_batch_keys == 3 and st.builds == 0  # active: every batch's metadata came from its keys
        assert _syncs(got) <= plain, (arm, got["baseline"]["sync_sources_per_step"])
    model = build_model("tiny-qwen3", lora_rank=4)  # negative control: the per-layer rebuild syncs in every layer
    h = apply_optimizations(model, packing="rebuild")
    got = run(model, tmp_path / "rebuild", tmp_path)
    layers = base_model_of(model).config.num_hidden_layers
    assert h.by_opt["packing"].packing_state.builds == 3 * 2 * layers  # forward + recompute, every layer
    assert _syncs(got) >= plain + 2 * layers * 3 - 1  # 3 syncs a build; the unoptimized mask's 1 sync is gone


@pytest.mark.parametrize("run", [_trainer, _sft], ids=["Trainer", "SFTTrainer"])
def test_offload_keeps_its_checkpointing_under_gradient_checkpointing(run, tmp_path, caplog):
    model = build_model("tiny-qwen3", lora_rank=4)
    h = apply_optimizations(model, offload="double_buffer")
    run(model, tmp_path / "db", tmp_path)
    info = h.by_opt["offload"].info
    assert info["pinned_bytes"] > 0 and info["n_buffers"] == 2 and info["checkpointing_taken_over"] >= 1
    layer = base_model_of(model).model.layers[0]
    assert layer._gradient_checkpointing_func is h.by_opt["offload"].offloader
    assert sum("stays installed" in r.getMessage() for r in caplog.records) == 1  # said once
    h.revert()
    assert "_set_gradient_checkpointing" not in vars(base_model_of(model))


def test_offload_negative_control_trainer_replaces_an_unheld_function(tmp_path):
    """Without the hold, Trainer's train() puts torch's checkpoint back over the offloader: nothing is pinned."""
    model = build_model("tiny-qwen3", lora_rank=4)
    h = apply_optimizations(model, offload="double_buffer")
    base_model_of(model).__dict__.pop("_set_gradient_checkpointing")
    _trainer(model, tmp_path / "db", tmp_path)
    assert h.by_opt["offload"].info.get("pinned_bytes", 0) == 0
    assert base_model_of(model).model.layers[0]._gradient_checkpointing_func is not h.by_opt["offload"].offloader


def test_offload_none_stays_off_under_trainer(tmp_path):
    model = build_model("tiny-qwen3", lora_rank=4)
    h = apply_optimizations(model, offload="none")
    _trainer(model, tmp_path / "none", tmp_path)
    assert h.by_opt["offload"].info["checkpointing_taken_over"] >= 1
    assert not any(getattr(m, "gradient_checkpointing", False) for m in base_model_of(model).modules())


def test_precomputed_without_keys_or_prepare_refuses_in_one_line():
    from workbench.step.data import batch_from_lengths
    model = build_model("tiny-qwen3", lora_rank=4)
    apply_optimizations(model, packing="precomputed")
    b = batch_from_lengths([5, 7], vocab_size=VOCAB)
    with pytest.raises(WorkbenchError, match="cu_seq_lens_q") as e:
        model(input_ids=b.input_ids, position_ids=b.position_ids, labels=b.labels, use_cache=False)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("window", [None, 3])
def test_mask_from_batch_keys_equals_the_loop_mask(window):
    from workbench.opts.packing import dense_mask_from_doc_ids, dense_mask_loop, doc_ids_from_cu_seqlens
    lens = [4, 1, 6, 3]
    cu = torch.tensor([0, 4, 5, 11, 14], dtype=torch.int32)
    got = dense_mask_from_doc_ids(doc_ids_from_cu_seqlens(cu, 14), window)
    assert torch.equal(got, dense_mask_loop(lens, 14, "cpu", window))
    assert not torch.equal(got, dense_mask_loop([14], 14, "cpu", window))  # the documents matter


def test_sdpa_backend_on_keys_same_loss_and_no_sync():
    """The sdpa arm's mask built from the batch's keys: the loss of the per-layer rebuild, with 0 syncs."""
    from transformers import DataCollatorWithFlattening
    from workbench.instrument.syncs import SyncCounter
    batch = DataCollatorWithFlattening(return_flash_attn_kwargs=True)(_docs(6))
    losses = {}
    for arm in ("rebuild", "cached"):
        torch.manual_seed(0)
        model = build_model("tiny-qwen3", lora_rank=4)
        apply_optimizations(model, packing=arm, backend="sdpa")
        with SyncCounter(device_type="cuda") as c:
            losses[arm] = model(**batch, use_cache=False).loss.detach()
        if arm == "cached":
            assert c.total == 0
    torch.testing.assert_close(losses["cached"], losses["rebuild"])


def test_callback_folder_read_as_an_ab_run(tmp_path):
    from workbench import analysis as an
    from workbench.measure.results import load_run
    from workbench.report.__main__ import main as report_main
    from transformers import DataCollatorWithFlattening, Trainer, TrainingArguments
    model = build_model("tiny-qwen3", lora_rank=4)
    h = apply_optimizations(model, packing="cached")
    out = tmp_path / "run"
    args = TrainingArguments(output_dir=str(tmp_path / "t"), per_device_train_batch_size=4, max_steps=8,
                             learning_rate=1e-3, report_to="none", use_cpu=True, save_strategy="no",
                             dataloader_num_workers=0, seed=0, disable_tqdm=True, gradient_checkpointing=True)
    cb = WorkbenchCallback(str(out), start_step=1, pairs=2, count_steps=1, trace=True, optimizations=h)
    Trainer(model=model, args=args, train_dataset=_docs(), callbacks=[cb],
            data_collator=DataCollatorWithFlattening(return_flash_attn_kwargs=True)).train()
    df, summary, meta = load_run(str(out))
    assert meta["status"] == "complete" and meta["optimizations"] == {"packing": "cached"}
    assert sorted(df[df.metric == "step_ms"].arm.value_counts().items()) == [("plain", 2), ("ranges", 2)]
    assert os.path.exists(out / "traces" / "trainer" / "plain.pt.trace.json.gz")
    assert not any(type(layer).__name__ != type(layer).__mro__[0].__name__ or "_wb_label" in vars(layer)
                   for layer in base_model_of(model).model.layers)  # restored after the window
    assert report_main([str(out)]) == 0
    comps = an.comparisons(str(out), include_cpu=True)
    assert list(comps.arm) == ["ranges"] and comps.verdict.iloc[0] == "not a result (CPU timing)"
    # the same analysis as an A/B's: an NVTX-cost comparison whose pairs are the adjacent steps of a rep
    written = summary["comparisons"][0]
    assert comps.role.iloc[0] == "nvtx" and comps.n_pairs.iloc[0] == written["n_pairs"] == 2
    assert comps.optimizations.iloc[0] == "packing=cached"  # part of what a clean repeat shares (`REPEAT_KEY`)
    assert comps.speedup.iloc[0] == pytest.approx(written["speedup"], rel=1e-12)
    cost = an.instrument_cost(str(out), include_cpu=True)
    assert list(cost.instrument) == ["nvtx ranges"] and cost.n.iloc[0] == 2
    assert cost.arm.iloc[0] == "plain (packing=cached)"
    assert cost.speedup.iloc[0] == pytest.approx(written["speedup"], rel=1e-12)
    assert an.mfu(str(out), include_cpu=True).empty  # left out as the A/B's nvtx: comparisons are
    # negative control: the same steps written as an A/B comparison (paired on rep and step) get no pair
    ab = _rewritten_as(out, tmp_path / "ab", "packing")
    assert an.comparisons(ab, include_cpu=True).n_pairs.iloc[0] == 0
    s = an.syncs(str(out), include_cpu=True)
    assert s.syncs_per_step.iloc[0] == summary["comparisons"][0]["baseline"]["syncs_per_step"]
    assert len(an.steps(str(out), include_cpu=True)) == 4
    by_layer = summary["comparisons"][0]["syncs_by_layer"]
    assert set(by_layer) <= {"model", "L00", "L01"}


def _rewritten_as(run, out, name: str) -> str:
    """The timed steps of the callback's folder `run` written by `RunWriter` into `out` as a comparison `name`."""
    from workbench.measure.results import RunWriter, load_run
    df, summary, _ = load_run(str(run))
    w = RunWriter(str(out), "neg", env={"opt": name, "device": "cpu"})
    for r in df[df.metric == "step_ms"].to_dict("records"):
        w.add(name, r["arm"], "step_ms", r["value"], "ms", rep=r["rep"], step=r["step"], batch=r["batch"])
    comp = {**summary["comparisons"][0], "name": name, "opt": name}
    w.write_summary({"run_id": "neg", "device": "cpu", "complete": True, "comparisons": [comp]})
    w.finish("complete")
    return str(out)


def test_callback_refuses_bad_arguments(tmp_path):
    with pytest.raises(WorkbenchError, match="at least one"):
        WorkbenchCallback(str(tmp_path / "x"), pairs=0, count_steps=0)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "f").write_text("x")
    with pytest.raises(WorkbenchError, match="not empty"):  # a folder of the user's own files: never replaced
        WorkbenchCallback(str(tmp_path / "full"))


def _layer_syncs(c):
    return {(layer, p): v for layer, by in c["syncs_by_layer"].items() if layer.startswith("L") for p, v in by.items()}


def test_moe_arms_active_under_trainer_with_their_syncs(tmp_path):
    """Under Trainer(gradient_checkpointing=True) each arm stays the experts implementation the model runs, with the
    syncs it promises per layer and pass: grouped 0, sort_bincount 1 (forward and recompute); eager, the negative
    control, more."""
    got = {}
    for arm in ("grouped", "sort_bincount", "eager"):
        model = build_model("tiny-qwen3-moe", lora_rank=4)
        h = apply_optimizations(model, moe=arm)
        c = _trainer(model, tmp_path / arm, tmp_path)
        assert base_model_of(model).config._experts_implementation == h.by_opt["moe"].info["experts_implementation"]
        got[arm] = _layer_syncs(c)
    layers = base_model_of(model).config.num_hidden_layers
    assert sum(got["grouped"].values()) == 0
    assert got["sort_bincount"] == {(f"L{i:02d}", p): 1 for i in range(layers) for p in ("forward", "recompute")}
    assert all(got["eager"][k] > 1 for k in got["sort_bincount"])
