"""The cost of `workbench.WorkbenchCallback` on a real Trainer step, on a GPU: one Trainer run per configuration, each
profiled by the callback into its own run folder.

    python studies/practitioner_recipe/trainer_cost.py OUT_DIR [--model qwen3-0.6b --layers 8 --docs-per-step 64 --pairs 16]

Design (stated before the run): in one `transformers.Trainer` run (bf16, gradient checkpointing on, peft LoRA,
`DataCollatorWithFlattening(return_flash_attn_kwargs=True)`, lognormal document lengths) the callback skips 4 steps,
then times `pairs` adjacent pairs of steps, `plain` (only its clock) against `ranges` (NVTX ranges on every layer), the
order swapped every other pair; the adjacent pair is the unit (`stats.paired_speedup`), so the ranges' cost is the
comparison's speedup with its 95% CI. Then 2 steps under the sync counter (its own cost: their mean against the plain
steps' mean, `instrumented_counted_step_ms` vs `step_ms`) and one traced step (the breakdown). Runs twice: the model as
it is, and with `apply_optimizations(packing="cached")` (syncs per step of each are in their folders). Outside its
window the callback does nothing (its hooks return at once), so its cost on the rest of a run is nil by construction.
Writes OUT_DIR/{plain,cached}/ (run folders: `python -m workbench.report OUT_DIR/plain`) and prints one line each.
Budget: about 3 minutes on one H100 / H200 at the defaults (2 x ~40 steps of ~0.3 s, model builds).
CPU check: python studies/practitioner_recipe/trainer_cost.py /tmp/tc --cpu --model tiny-qwen3 --layers 2 --docs-per-step 4 --pairs 2
"""
from __future__ import annotations

import argparse
import json
import os
import random


def main() -> int:
    p = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--model", default="qwen3-0.6b")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--docs-per-step", type=int, default=64)
    p.add_argument("--pairs", type=int, default=16)
    p.add_argument("--cpu", action="store_true", help="a functional check on the CPU (tiny presets; no timing)")
    a = p.parse_args()
    # one GPU: with several visible, Trainer wraps the model in DataParallel (replicas, a gathered loss), which is
    # not the single-GPU step this measures
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "0")
    import torch
    from transformers import DataCollatorWithFlattening, Trainer, TrainingArguments

    from workbench import WorkbenchCallback, apply_optimizations
    from workbench.step.data import parse_lengths
    from workbench.step.models import build_model

    steps = 4 + 2 * a.pairs + 2 + 1 + 2
    rng = random.Random(0)
    docs = parse_lengths("lognormal:5.5:0.8:16").draw(245 * a.docs_per_step * steps, 4096, rng)
    device = torch.device("cpu" if a.cpu else "cuda")
    for arms in ({}, {"packing": "cached"}):
        name = "cached" if arms else "plain"
        model = build_model(a.model, layers=a.layers, device=device, lora_rank=16)
        vocab = model.config.vocab_size
        g = torch.Generator().manual_seed(0)
        ds = [{"input_ids": torch.randint(0, vocab, (d.length,), generator=g).tolist()} for d in docs]
        h = apply_optimizations(model, **arms) if arms else None
        args = TrainingArguments(output_dir=os.path.join(a.out, "trainer", name), per_device_train_batch_size=a.docs_per_step,
                                 max_steps=steps, learning_rate=1e-4, bf16=not a.cpu, use_cpu=a.cpu,
                                 gradient_checkpointing=True,
                                 report_to="none", save_strategy="no", logging_steps=10, dataloader_num_workers=0,
                                 seed=0, disable_tqdm=True)
        cb = WorkbenchCallback(os.path.join(a.out, name), start_step=4, pairs=a.pairs, count_steps=2, trace=True,
                               optimizations=h)
        Trainer(model=model, args=args, train_dataset=ds, callbacks=[cb],
                data_collator=DataCollatorWithFlattening(return_flash_attn_kwargs=True)).train()
        c = json.load(open(os.path.join(a.out, name, "summary.json")))["comparisons"][0]
        b = c["baseline"]
        print(json.dumps({"run": name, "plain_step_ms": b["step_ms_mean"], "ranges_vs_plain": c.get("speedup"),
                          "ci95": c.get("speedup_ci95"), "verdict": c.get("verdict"),
                          "counted_step_ms": b.get("instrumented_step_ms"), "syncs_per_step": b.get("syncs_per_step"),
                          "tokens": c.get("tokens")}), flush=True)
        del model, h
        if not a.cpu:
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
