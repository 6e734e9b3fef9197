"""Does the workbench time the step users run? Its harness step held against a real `transformers.Trainer` step.

    python -m workbench.fidelity --device cpu                                   # tiny-qwen3, under a minute on 2 cores
    python -m workbench.fidelity --model llama-3.1-8b --layers 8 --tokens 16384 # on a GPU (the default shape there)
    python -m workbench.fidelity --model qwen3-30b-a3b --layers 8 --tokens 8192 --out runs/fidelity_qwen3moe

One model (same preset, seed, LoRA config as `workbench.step.models.build_model`, checkpointing through
`harness.enable_checkpointing`) and one sequence of packed batches (`workbench.step.data.make_batches`) serve both:

- Trainer: `transformers.Trainer` with `bf16=True` on CUDA (accelerate runs the forward under bf16 autocast; on a CPU
  `use_cpu=True` and fp32), the batches through a Dataset and a collator that yields exactly the harness's tensors
  (input_ids, position_ids, labels; batch size 1), in order, `max_steps` = warmup + timed steps, no eval, no saving,
  `report_to=[]`, `dataloader_num_workers=0`, `max_grad_norm` = Trainer's default (1.0), the harness's optimizer
  (`harness.make_optimizer`, passed as `optimizers=(opt, None)`: Trainer adds its default linear LR schedule). A
  TrainerCallback times each step: wall clock from `on_step_begin` to `on_step_end`, with `torch.cuda.synchronize()`
  at both ends on CUDA.
- Harness: `harness.train_step` at the precision `auto` resolves to (autocast on CUDA, fp32-adapters on a CPU),
  timed the same way (wall clock, synchronized at both ends).

After one untimed block of each, the two run in blocks, interleaved over reps with the order rotated (Trainer first in even reps, harness first in odd
ones), LoRA weights reset before each block, so drift hits both. The ratio harness / Trainer gets a 95% CI at the rep
level (`rep_ratio_ci`). Loss and LoRA gradients of one step each from the same weights on batch 0 are compared with
the workbench's equivalence criterion for the step's compute dtype (`workbench.measure.equivalence`). On CUDA one traced step
of each is broken down by kernel class (`workbench.traces.decompose.summary`).

Prints a table, then, as the last stdout line, one JSON object: {"trainer_step_ms", "harness_step_ms", "ratio",
"ratio_ci95", "within_3pct", "equivalent", "loss_rel_diff", "grad_max_rel_l2", "breakdown", "differences", ...}.
Exit status 0 when it ran (whatever the ratio), 1 when the two steps are not equivalent, 2 for bad input.
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import os
import sys
import tempfile
import time

import torch

from workbench.cli import emit_json, progress, run_main, table
from workbench.step.data import lengths_arg
from workbench.step.length_data import DEFAULT_LENGTHS, lengths_help
from workbench.errors import WorkbenchError

CPU_DEFAULTS = dict(model="tiny-qwen3", layers=None, tokens=256, steps=3, warmup=1, reps=3, batches=2)
GPU_DEFAULTS = dict(model="llama-3.1-8b", layers=8, tokens=16384, steps=4, warmup=2, reps=6, batches=4)
"""Defaults per device: a tiny preset on a CPU; on a GPU the offload comparison's shape of `workbench.ab`."""

TRAINER_MAX_GRAD_NORM = 1.0
"""transformers.TrainingArguments' default `max_grad_norm`: Trainer clips the LoRA gradients' global norm to it."""
TOLERANCE_PCT = 3.0
"""The goal: the harness step within this many percent of Trainer's (the whole 95% CI inside)."""
UNSUPPORTED_FAMILIES = ("gpt_oss",)
"""GPT-OSS needs packed masks built at the model call (`models.model_inputs`), which a Trainer collator cannot pass."""


# --- statistics ------------------------------------------------------------------------------------------------

def rep_ratio_ci(per_rep_a_ms, per_rep_b_ms, confidence: float = 0.95) -> dict:
    """Ratio of means a / b with its CI, the rep as the unit of independence.

    Per rep r: d_r = log(mean a_r / mean b_r), where a_r / b_r are that rep's step times (a list of ms, or one
    mean). The interval is the Student-t interval of the d_r (R - 1 degrees of freedom), exponentiated:
    ratio = exp(mean d), ci = exp(mean d ± t_{(1+c)/2, R-1} · sd(d) / sqrt(R)). Returns {"ratio", "ci95" ([lo, hi]
    or None with fewer than 2 reps), "reps", "per_rep_ratio"}.
    """
    from workbench.measure.stats import log_ratio_of_unit_means

    def values(x):
        return list(x) if isinstance(x, (list, tuple)) else [x]

    if len(per_rep_a_ms) != len(per_rep_b_ms):
        raise ValueError(f"rep_ratio_ci: {len(per_rep_a_ms)} reps of a, {len(per_rep_b_ms)} of b")
    r = log_ratio_of_unit_means([values(a) for a in per_rep_a_ms], [values(b) for b in per_rep_b_ms],
                                confidence=confidence)
    return {"ratio": r["ratio"] if r["log_ratios"].size else None, "ci95": r["ci"], "reps": int(r["log_ratios"].size),
            "per_rep_ratio": [math.exp(x) for x in r["log_ratios"]]}


# --- Trainer plumbing ------------------------------------------------------------------------------------------

class PackedDataset(torch.utils.data.Dataset):
    """The harness's packed batches, one item each (Trainer's batch size is 1)."""

    def __init__(self, batches):
        self.batches = list(batches)

    def __len__(self):
        return len(self.batches)

    def __getitem__(self, i):
        return self.batches[i]


def collate_packed(items) -> dict:
    """Exactly the harness's model tensors of one PackedBatch: input_ids, position_ids, labels, each (1, T) int64."""
    if len(items) != 1:
        raise ValueError(f"collate_packed: batch size must be 1 (one packed batch), got {len(items)}")
    b = items[0]
    return {"input_ids": b.input_ids, "position_ids": b.position_ids, "labels": b.labels}


def _trainer_callback_class():
    from transformers import TrainerCallback

    class StepClock(TrainerCallback):
        """Wall clock of each Trainer step, on_step_begin to on_step_end, synchronized at both ends on CUDA; with
        `ranges` it also opens `wb/step` / `wb/opt` ranges (the traced step), and calls `on_step` after each step."""

        def __init__(self, cuda: bool, ranges=None, on_step=None):
            self.cuda, self.ranges, self.on_step = cuda, ranges, on_step
            self.step_ms: list[float] = []
            self._t0 = 0.0
            self._tokens: list = []

        def on_step_begin(self, args, state, control, **kw):
            if self.cuda:
                torch.cuda.synchronize()
            if self.ranges is not None:
                self._tokens.append(self.ranges.push("wb/step"))
            self._t0 = time.perf_counter()

        def on_pre_optimizer_step(self, args, state, control, **kw):
            if self.ranges is not None:
                self._tokens.append(self.ranges.push("wb/opt"))

        def on_optimizer_step(self, args, state, control, **kw):
            if self.ranges is not None and self._tokens:
                self.ranges.pop(self._tokens.pop())

        def on_step_end(self, args, state, control, **kw):
            if self.cuda:
                torch.cuda.synchronize()
            self.step_ms.append((time.perf_counter() - self._t0) * 1e3)
            if self.ranges is not None:
                while self._tokens:
                    self.ranges.pop(self._tokens.pop())
            if self.on_step is not None:
                self.on_step()

    return StepClock


def _trainer_class():
    from transformers import Trainer

    class FidelityTrainer(Trainer):
        """Trainer that feeds the dataset in order (the harness's batch sequence) and keeps the last step's loss
        tensor (no readback)."""

        last_loss = None

        def _get_train_sampler(self, *args, **kwargs):
            return torch.utils.data.SequentialSampler(self.train_dataset)

        def training_step(self, *args, **kwargs):
            loss = super().training_step(*args, **kwargs)
            self.last_loss = loss
            return loss

    return FidelityTrainer


def trainer_settings(cuda: bool, lr: float) -> dict:
    """The TrainingArguments of the fidelity Trainer that matter, as recorded in the JSON."""
    return {"bf16": cuda, "use_cpu": not cuda, "per_device_train_batch_size": 1, "learning_rate": lr,
            "max_grad_norm": TRAINER_MAX_GRAD_NORM, "lr_scheduler_type": "linear (Trainer's default; warmup 0)",
            "optimizer": "harness.make_optimizer (AdamW, fused on CUDA) via optimizers=(opt, None)",
            "gradient_checkpointing": "on the model (harness.enable_checkpointing); TrainingArguments' flag off",
            "dataloader_num_workers": 0, "dataloader_pin_memory": True, "report_to": [], "save_strategy": "no",
            "eval_strategy": "no", "remove_unused_columns": False, "disable_tqdm": True}


ACCELERATE_MARKS = ("forward", "_original_forward", "_is_accelerate_prepared")
"""What accelerate's `prepare_model` sets on the model instance: the autocast wrapper of `forward`, the forward it
wrapped, and the flag that makes every later `prepare_model` return the model untouched ("can't double wrap")."""


def run_trainer(model, cpu_batches, *, steps: int, lr: float, cuda: bool, seed: int, out_dir: str,
                ranges=None, on_step=None, grad_hooks: dict | None = None, bf16: bool | None = None):
    """`steps` Trainer steps over `cpu_batches` (in order, cycled); returns (per-step ms, the last loss tensor).

    The model leaves as it came (`ACCELERATE_MARKS` restored): accelerate wraps its forward in autocast and marks it
    prepared, and a mark left behind makes the next Trainer's accelerate skip the wrapper, so that Trainer would run
    without autocast (its fp32 adapters as fp32 GEMMs, in every Trainer after
    the first). `grad_hooks` ({name: param}) captures each LoRA gradient right after backward accumulates it,
    before Trainer clips it: the dict gets {name: fp32 copy}. `bf16` (default: `cuda`) is TrainingArguments' flag.
    """
    from transformers import TrainingArguments

    from workbench.step.harness import make_optimizer

    args = TrainingArguments(output_dir=out_dir, max_steps=steps, per_device_train_batch_size=1, learning_rate=lr,
                             bf16=cuda if bf16 is None else bf16, use_cpu=not cuda, max_grad_norm=TRAINER_MAX_GRAD_NORM, report_to=[],
                             save_strategy="no", eval_strategy="no", dataloader_num_workers=0,
                             remove_unused_columns=False, disable_tqdm=True, seed=seed)
    clock = _trainer_callback_class()(cuda, ranges=ranges, on_step=on_step)
    saved = {k: model.__dict__[k] for k in ACCELERATE_MARKS if k in model.__dict__}
    handles, captured = [], {}
    if grad_hooks is not None:
        for n, p in grad_hooks.items():
            handles.append(p.register_post_accumulate_grad_hook(
                lambda p, n=n: captured.__setitem__(n, p.grad.detach().float().clone())))
    trainer = _trainer_class()(model=model, args=args, train_dataset=PackedDataset(cpu_batches),
                               data_collator=collate_packed, optimizers=(make_optimizer(model, lr), None),
                               callbacks=[clock])
    from transformers.trainer_callback import PrinterCallback
    trainer.remove_callback(PrinterCallback)  # stdout stays ours: tables, then the JSON line
    try:
        trainer.train()
        loss = trainer.last_loss
    finally:
        for h in handles:
            h.remove()
        for k in ACCELERATE_MARKS:
            model.__dict__.pop(k, None)
        model.__dict__.update(saved)
        del trainer
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
    if grad_hooks is not None:
        grad_hooks.clear()
        grad_hooks.update(captured)
    return clock.step_ms, loss


# --- the harness side --------------------------------------------------------------------------------------------

def run_harness(model, dev_batches, *, steps: int, lr: float, cuda: bool, precision: str, ranges=None,
                on_step=None) -> list[float]:
    """`steps` harness steps (`harness.train_step`, a fresh optimizer) over `dev_batches`; wall-clock ms per step,
    synchronized at both ends on CUDA, as the Trainer callback times its steps."""
    from workbench.step.harness import make_optimizer, train_step

    opt = make_optimizer(model, lr)
    out = []
    for i in range(steps):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        train_step(model, dev_batches[i % len(dev_batches)], opt, step=i, ranges=ranges, precision=precision)
        if cuda:
            torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) * 1e3)
        if on_step is not None:
            on_step()
    return out


# --- agreement -------------------------------------------------------------------------------------------------

def one_step_agreement(model, cpu_batch, dev_batch, *, lr: float, cuda: bool, seed: int, out_dir: str,
                       reset, step_precision: str = "fp32-adapters", trainer_batch=None) -> dict:
    """Loss and LoRA gradients of one Trainer step and one harness step from the same weights (`reset()` before
    each) on the same batch, judged by `workbench.measure.equivalence` at the step's compute dtype (criterion 1 against the
    harness; in bf16, where that fails, both against an fp32 run of the harness step). `trainer_batch` (a CPU batch)
    feeds Trainer another batch: the negative control. `step_precision`: the harness step's (resolved)."""
    from workbench.measure import equivalence
    from workbench.step import precision_mode as precision
    from workbench.step.harness import train_step
    from workbench.step.models import lora_parameters

    dtype = precision.compute_dtype(model, step_precision)
    named = dict(lora_parameters(model))

    def harness_one(batch_dev, at=step_precision):
        cap = equivalence.GradCapture(lora_parameters(model))
        rec = train_step(model, batch_dev, cap, precision=at)
        return {"loss": rec.loss, "grads": cap.grads}

    reset()
    harness = harness_one(dev_batch)
    reset()
    grads = dict(named)
    _, loss = run_trainer(model, [trainer_batch if trainer_batch is not None else cpu_batch], steps=1, lr=lr,
                          cuda=cuda, seed=seed, out_dir=out_dir, grad_hooks=grads)
    trainer = {"loss": float(loss.detach().float().item()), "grads": {n: grads.get(n) for n in named}}
    reset()
    e = equivalence.compare(trainer, harness, dtype)
    if not e["equivalent"] and dtype in equivalence.LOW_PRECISION:
        ref32 = equivalence.reference_fp32(model, lambda b: harness_one(b, equivalence.REFERENCE_PRECISION), dev_batch,
                                           progress, dev_batch.input_ids.device)
        reset()
        e.update(equivalence.judge_by_reference(trainer, harness, ref32, dtype))
    e.update(loss_trainer=trainer["loss"], loss_harness=harness["loss"], dtype=str(dtype),
             criterion=equivalence.describe(dtype))
    return e


# --- breakdown -------------------------------------------------------------------------------------------------

def trace_breakdowns(model, cpu_batches, dev_batches, *, lr: float, warmup: int, cuda: bool, seed: int,
                     out_dir: str, reset, precision: str = "fp32-adapters") -> dict:
    """Busy time by kernel class and idle time by cause (`workbench.traces.decompose.summary`, ms per step) of one
    traced step of each, after `warmup` untraced ones: {"trainer": {component: ms}, "harness": {...}}."""
    from workbench.instrument import Ranges, instrument_layers
    from workbench.traces import from_torch_trace
    from workbench.traces.capture import torch_profile
    from workbench.traces.decompose import summary

    device = torch.device("cuda" if cuda else "cpu")
    ranges = Ranges(nvtx=False, profiler=True)
    inst = instrument_layers(model)
    out = {}
    try:
        def trainer_steps(on_step):
            with ranges.activate():
                run_trainer(model, cpu_batches, steps=warmup + 1, lr=lr, cuda=cuda, seed=seed, out_dir=out_dir,
                            ranges=ranges, on_step=on_step)

        def harness_steps(on_step):
            run_harness(model, dev_batches, steps=warmup + 1, lr=lr, cuda=cuda, precision=precision, ranges=ranges,
                        on_step=on_step)

        for name, fn in (("trainer", trainer_steps), ("harness", harness_steps)):
            reset()
            path = os.path.join(out_dir, f"{name}.pt.trace.json.gz")
            torch_profile(fn, path, device=device, warmup=warmup, steps=1)
            s = summary(from_torch_trace(path))
            out[name] = {r["component"]: float(r["ms"]) for r in s.to_dict("records")}
    finally:
        inst.revert()
        reset()
    return out


# --- the run ---------------------------------------------------------------------------------------------------

DIFFERENCES = [
    "dataloader: Trainer collates each batch on the host (DataLoader, pinned memory, num_workers=0) and copies it to "
    "the device inside the timed step (_prepare_inputs); the harness's batches are on the device before the step",
    f"grad-norm clipping: Trainer clips the LoRA gradients' global norm to max_grad_norm={TRAINER_MAX_GRAD_NORM} "
    "(its default) before the optimizer step; the harness does not clip",
    "LR scheduler: Trainer steps its default linear schedule (warmup 0) after each optimizer step; the harness keeps "
    "a constant LR",
    "loss scaling: none in either (bf16 autocast needs no GradScaler); Trainer divides the summed loss by "
    "num_items_in_batch (labels[..., 1:] != -100), the harness's model takes the mean over the same targets",
    "outputs: accelerate converts the forward's bf16 outputs (the logits too) to fp32 (ConvertOutputsToFp32); the "
    "harness reads the loss only",
    "host work per step: Trainer's callbacks, a NaN/inf check of the loss (torch.isnan(...): a readback inside the "
    "step), FLOP and token counters; the harness reads the loss back after its timer stops",
]
"""What Trainer's step does that the harness's does not (or differently)."""


def _defaults(device: torch.device) -> dict:
    return GPU_DEFAULTS if device.type == "cuda" else CPU_DEFAULTS


def build_parser() -> argparse.ArgumentParser:
    from workbench.cli import HelpFormatter, OneLineParser

    p = OneLineParser(prog="python -m workbench.fidelity", description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--model", default=None, help="preset or local HF checkpoint dir (default: tiny-qwen3 on a CPU, "
                   "llama-3.1-8b on a GPU)")
    p.add_argument("--layers", type=int, default=None, help="override the layer count (default: all on a CPU, 8 on a "
                   "GPU)")
    p.add_argument("--tokens", type=int, default=None, help="packed tokens per batch (default: 256 on a CPU, 16384 on "
                   "a GPU)")
    p.add_argument("--lengths", type=lengths_arg, default=DEFAULT_LENGTHS, help=lengths_help())
    p.add_argument("--batches", type=int, default=None, help="distinct packed batches cycled (default: 2 on a CPU, 4 "
                   "on a GPU)")
    p.add_argument("--attn", default=None, help="HF attention implementation (default: the family's, sdpa; the "
                   "harness's baseline without a packing optimization)")
    p.add_argument("--experts", default=None, help="HF experts implementation of MoE models (default: "
                   "transformers')")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"), help="auto: cuda when available")
    p.add_argument("--steps", type=int, default=None, help="timed steps per block (default: 3 on a CPU, 4 on a GPU)")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps at the start of each block (default: 1 "
                   "on a CPU, 2 on a GPU)")
    p.add_argument("--reps", type=int, default=None, help="reps; each runs a Trainer block and a harness block, "
                   "order rotated (default: 3 on a CPU, 6 on a GPU)")
    p.add_argument("--seed", type=int, default=0, help="seeds weights, LoRA and data")
    p.add_argument("--lora-rank", type=int, default=16)
    from workbench.ab.cli import LR_MAX, finite_positive
    p.add_argument("--lr", type=finite_positive(LR_MAX, " (an AdamW step that large diverges)"), default=1e-4,
                   help="AdamW learning rate of the LoRA parameters")
    p.add_argument("--no-breakdown", action="store_true", help="skip the traced step of each (CUDA only anyway)")
    p.add_argument("--out", default=None, help="folder to write fidelity.json (and, on CUDA, the two traces) into")
    return p


def parse_args(argv=None):
    """Parse and check the command line; every bad argument raises WorkbenchError before a model is built."""
    from workbench.step.models import family_of, load_config

    a = build_parser().parse_args(argv)
    for k in ("layers", "tokens", "batches", "steps", "reps", "lora_rank"):
        v = getattr(a, k)
        if v is not None and v <= 0:
            raise WorkbenchError(f"--{k.replace('_', '-')} must be positive, got {v}")
    if a.warmup is not None and a.warmup < 0:
        raise WorkbenchError(f"--warmup must be >= 0, got {a.warmup}")
    if not a.lr > 0:
        raise WorkbenchError(f"--lr must be positive, got {a.lr}")
    if a.model is not None:
        from workbench import opts
        opts.load_all()  # the optimizations' own experts names (wb_*) are registered on import
        fam = family_of(load_config(a.model, a.layers, a.attn, a.experts))
        if fam in UNSUPPORTED_FAMILIES:
            raise WorkbenchError(f"--model {a.model}: the {fam} family is not supported by workbench.fidelity (its "
                                 "packed masks are built at the model call, which a Trainer collator cannot pass)")
    if a.out is not None and os.path.exists(a.out) and not os.path.isdir(a.out):
        raise WorkbenchError(f"--out {a.out} is a file; pass a folder")
    return a


def _mean(x):
    return sum(x) / len(x) if x else float("nan")


def run(a) -> dict:
    """The whole measurement for parsed arguments `a`; returns the JSON object."""
    from workbench.step import precision_mode as precision
    from workbench.step.data import make_batches, to_device
    from workbench.step.harness import enable_checkpointing
    from workbench.step.models import build_model, lora_resetter, resolve_device

    device = resolve_device(a.device)
    cuda = device.type == "cuda"
    d = _defaults(device)
    model_name = a.model or d["model"]
    layers = a.layers if a.layers is not None else (d["layers"] if a.model is None else None)
    tokens, steps = a.tokens or d["tokens"], a.steps or d["steps"]
    warmup = a.warmup if a.warmup is not None else d["warmup"]
    reps, n_batches = a.reps or d["reps"], a.batches or d["batches"]
    from workbench.step.config import StepConfig
    prec = StepConfig().resolved(device).precision  # auto: what Trainer(bf16=True) runs on CUDA

    progress(f"building {model_name}" + (f" ({layers} layers)" if layers else "") + f" on {device}, precision {prec}")
    from workbench.ab.arm import freeze_long_lived
    freeze_long_lived()  # each Trainer run's gc.collect walks what the runs made, not every import
    model = build_model(model_name, layers=layers, attn=a.attn, device=device, seed=a.seed, lora_rank=a.lora_rank,
                        experts_implementation=a.experts, precision=prec)
    if precision.model_dtype(prec, device) != next(model.parameters()).dtype:
        raise WorkbenchError("internal: model dtype does not match the precision")
    enable_checkpointing(model)
    cfg = model.config
    cpu_batches = make_batches(a.lengths, tokens, n_batches, cfg.vocab_size, seed=a.seed)
    dev_batches = to_device(cpu_batches, device)
    reset = lora_resetter(model)

    tmp = tempfile.TemporaryDirectory(prefix="wb-fidelity-")
    work = a.out or tmp.name
    os.makedirs(work, exist_ok=True)
    trainer_dir = os.path.join(tmp.name, "trainer")
    try:
        # agreement first: one step each from the same weights on batch 0
        progress("loss and LoRA-gradient agreement: one Trainer step and one harness step on batch 0")
        agree = one_step_agreement(model, cpu_batches[0], dev_batches[0], lr=a.lr, cuda=cuda, seed=a.seed,
                                   out_dir=trainer_dir, reset=reset, step_precision=prec)
        progress(f"  equivalent {agree['equivalent']}: loss {agree['loss_trainer']:.6g} (Trainer) vs "
                 f"{agree['loss_harness']:.6g} (harness), rel diff {agree['loss_rel_diff']:.3g}; grad max rel L2 "
                 f"{agree['grad_max_rel_l2']:.3g} (rtol {agree['rtol']:g}, {agree['dtype']})")

        # one untimed block of each first: on the H100 the first Trainer block after the agreement step ran 50x
        # slower than later ones (one-time Trainer / accelerate / kernel setup), which would swamp rep 0
        progress("warm-up block of each (not timed)")
        reset()
        run_trainer(model, cpu_batches, steps=warmup + steps, lr=a.lr, cuda=cuda, seed=a.seed, out_dir=trainer_dir)
        reset()
        run_harness(model, dev_batches, steps=warmup + steps, lr=a.lr, cuda=cuda, precision=prec)

        # timing: blocks, order rotated per rep
        per_rep = {"trainer": [], "harness": []}
        for r in range(reps):
            order = ("trainer", "harness") if r % 2 == 0 else ("harness", "trainer")
            for who in order:
                reset()
                if who == "trainer":
                    ms, _ = run_trainer(model, cpu_batches, steps=warmup + steps, lr=a.lr, cuda=cuda, seed=a.seed,
                                        out_dir=trainer_dir)
                else:
                    ms = run_harness(model, dev_batches, steps=warmup + steps, lr=a.lr, cuda=cuda, precision=prec)
                timed = ms[warmup:]
                per_rep[who].append(timed)
                progress(f"rep {r + 1}/{reps} {who}: {_mean(timed):.2f} ms/step over {len(timed)} steps")
        reset()
        ci = rep_ratio_ci(per_rep["harness"], per_rep["trainer"])

        breakdown, note = None, None
        if a.no_breakdown:
            note = "skipped (--no-breakdown)"
        elif not cuda:
            note = "the kernel-class breakdown needs a GPU trace (CUDA); none on a CPU"
            progress(f"breakdown: {note}")
        else:
            progress("breakdown: one traced step of each (torch.profiler)")
            try:
                breakdown = trace_breakdowns(model, cpu_batches, dev_batches, lr=a.lr, warmup=max(warmup, 1),
                                             cuda=cuda, seed=a.seed, out_dir=work if a.out else tmp.name,
                                             reset=reset, precision=prec)
            except Exception as e:  # noqa: BLE001 - the timings stand; the breakdown is reported as failed
                note = f"trace failed: {type(e).__name__}: {e}"
                progress(f"error: breakdown {note}")
    finally:
        tmp.cleanup()

    t_ms = _mean([_mean(x) for x in per_rep["trainer"]])
    h_ms = _mean([_mean(x) for x in per_rep["harness"]])
    lo_hi = ci["ci95"]
    within = None if lo_hi is None or not cuda else bool(1 - TOLERANCE_PCT / 100 <= lo_hi[0]
                                                         and lo_hi[1] <= 1 + TOLERANCE_PCT / 100)  # CPU: no verdict
    experts = getattr(cfg, "_experts_implementation", None) if hasattr(cfg, "num_experts") or \
        hasattr(cfg, "num_local_experts") else None
    out = {
        "model": model_name, "layers": cfg.num_hidden_layers, "tokens": tokens, "lengths": a.lengths,
        "device": str(device), "gpu_name": torch.cuda.get_device_name(device) if cuda else None,
        "precision": prec, "compute_dtype": agree["dtype"], "attn": cfg._attn_implementation, "experts": experts,
        "checkpointing": "non-reentrant torch checkpoint of every decoder layer (harness.enable_checkpointing)",
        "seed": a.seed, "lora_rank": a.lora_rank, "lr": a.lr, "steps": steps, "warmup": warmup, "reps": reps,
        "batches": n_batches,
        "trainer_step_ms": t_ms, "harness_step_ms": h_ms, "ratio": ci["ratio"], "ratio_ci95": lo_hi,
        "ratio_per_rep": ci["per_rep_ratio"], "ratio_ci_unit": "rep (t-interval of per-rep log ratios, reps-1 df)",
        "within_3pct": within,
        "trainer_step_ms_per_rep": [_mean(x) for x in per_rep["trainer"]],
        "harness_step_ms_per_rep": [_mean(x) for x in per_rep["harness"]],
        "equivalent": bool(agree["equivalent"]), "loss_trainer": agree["loss_trainer"],
        "loss_harness": agree["loss_harness"], "loss_rel_diff": agree["loss_rel_diff"],
        "grad_max_rel_l2": agree["grad_max_rel_l2"], "equivalence": {k: v for k, v in agree.items()
                                                                      if k not in ("loss_trainer", "loss_harness")},
        "breakdown": breakdown, "breakdown_note": note, "breakdown_unit": "ms per step (decompose.summary)",
        "trainer": trainer_settings(cuda, a.lr), "differences": DIFFERENCES,
        "versions": _versions(),
    }
    return out


def _versions() -> dict:
    import importlib.metadata as md
    out = {}
    for k in ("torch", "transformers", "accelerate", "peft"):
        try:
            out[k] = md.version(k)
        except md.PackageNotFoundError:
            out[k] = None
    return out


def _fmt_ci(ci):
    return f"[{ci[0]:.4f}, {ci[1]:.4f}]" if ci else "n/a (1 rep)"


def main(argv=None) -> int:
    a = parse_args(argv)
    res = run(a)
    rows = [["trainer", f"{res['trainer_step_ms']:.2f}", f"{res['loss_trainer']:.6g}"],
            ["harness", f"{res['harness_step_ms']:.2f}", f"{res['loss_harness']:.6g}"]]
    print(f"model {res['model']}  layers {res['layers']}  tokens {res['tokens']}  device {res['device']}  "
          f"precision {res['precision']}  attn {res['attn']}")
    print(table(rows, ["step", "step_ms", "loss (batch 0)"]))
    from workbench.measure.stats import NOT_A_RESULT
    verdict = NOT_A_RESULT if res["gpu_name"] is None else f"within ±{TOLERANCE_PCT:g}%: {res['within_3pct']}"
    print(f"harness / Trainer: {res['ratio']:.4f} 95% CI {_fmt_ci(res['ratio_ci95'])} over {res['reps']} reps; "
          f"{verdict}")
    print(f"equivalent: {res['equivalent']} (loss rel diff {res['loss_rel_diff']:.3g}, grad max rel L2 "
          f"{res['grad_max_rel_l2']:.3g}, {res['compute_dtype']})")
    if res["breakdown"]:
        comps = [c for c in res["breakdown"]["trainer"] if c in res["breakdown"]["harness"]]
        print(table([[c, f"{res['breakdown']['trainer'][c]:.2f}", f"{res['breakdown']['harness'][c]:.2f}"]
                     for c in comps], ["component", "trainer_ms", "harness_ms"]))
    else:
        print(f"breakdown: {res['breakdown_note']}")
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        path = os.path.join(a.out, "fidelity.json")
        with open(path + ".tmp", "w") as f:
            json.dump(res, f, indent=1, default=str)
        os.replace(path + ".tmp", path)
        progress(f"wrote {path}")
    emit_json(res)
    return 0 if res["equivalent"] else 1


if __name__ == "__main__":
    sys.exit(run_main(main))
