"""workbench.apply_optimizations: a user's HF Trainer with DataCollatorWithFlattening trains to the same losses with
and without the optimizations, and revert() restores the model."""
import pytest
import torch

from workbench.api import apply_optimizations
from workbench.errors import WorkbenchError
from workbench.step.models import build_model


def _have(opt):
    try:
        from workbench import opts
        opts.module(opt)
        return True
    except Exception:
        return False


def _docs(n=12, vocab=256, seed=0):
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(5, 40, (n,), generator=g).tolist()
    return [{"input_ids": torch.randint(0, vocab, (k,), generator=g).tolist()} for k in lens]


def _train(model, tmp_path, steps=3):
    from transformers import DataCollatorWithFlattening, Trainer, TrainingArguments

    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=4, max_steps=steps,
                             learning_rate=1e-3, logging_steps=1, report_to="none", use_cpu=True,
                             save_strategy="no", dataloader_num_workers=0, seed=0, disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=_docs(), data_collator=DataCollatorWithFlattening())
    trainer.train()
    return [h["loss"] for h in trainer.state.log_history if "loss" in h]


@pytest.mark.skipif(not _have("packing"), reason="workbench.opts.packing not available")
def test_trainer_same_losses_with_and_without(tmp_path):
    ref = _train(build_model("tiny-qwen3", lora_rank=4), tmp_path / "ref")
    model = build_model("tiny-qwen3", lora_rank=4)
    arms = {"packing": "cached"}
    if _have("offload"):
        arms["offload"] = "double_buffer"
    handle = apply_optimizations(model, **arms)
    try:
        got = _train(model, tmp_path / "opt")
        h = handle.by_opt["packing"]
        st = getattr(h, "packing_state", None) or h.info["state"]
        assert st.builds >= 3  # the optimized attention really ran: one metadata build per batch (cached)
    finally:
        handle.revert()
    assert len(ref) == len(got) == 3
    torch.testing.assert_close(torch.tensor(got), torch.tensor(ref), rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(not (_have("packing") and _have("moe")), reason="packing / moe modules not available")
def test_revert_restores_the_model():
    from workbench.step.data import batch_from_lengths
    from workbench.step.models import base_model_of, model_inputs

    model = build_model("tiny-qwen3-moe", lora_rank=4)
    base = base_model_of(model)
    attn0, experts0 = base.config._attn_implementation, base.config._experts_implementation
    batch = batch_from_lengths([7, 9, 16], model.config.vocab_size)
    with torch.no_grad():
        ref = model(**model_inputs(model, batch)).loss
    with apply_optimizations(model, packing="cached", moe="sort_bincount") as h:
        assert set(h.by_opt) == {"packing", "moe"}
        assert base.config._attn_implementation != attn0
        with torch.no_grad():
            got = model(**model_inputs(model, batch)).loss
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)
    assert base.config._attn_implementation == attn0
    assert base.config._experts_implementation == experts0


def test_bad_input():
    model = build_model("tiny-qwen3", lora_rank=4)
    with pytest.raises(WorkbenchError, match="choose at least one"):
        apply_optimizations(model)
    if _have("packing"):
        with pytest.raises(WorkbenchError, match="unknown arm .* for packing"):
            apply_optimizations(model, packing="fastest")
        with pytest.raises(WorkbenchError, match="unknown options"):
            apply_optimizations(model, packing="cached", bogus=1)
    if _have("moe"):
        with pytest.raises(WorkbenchError, match="MoE"):
            apply_optimizations(model, moe="sort_bincount")


def test_reexported():
    import workbench
    assert callable(workbench.apply_optimizations)
