"""One instrumented training run of a plain HF model: where do time and syncs go, before any optimization?

    python -m workbench.run --model tiny-gpt-oss --experts eager --steps 3
    python -m workbench.run --model qwen3-0.6b --layers 8 --tokens 16384 --cross-check   # on a GPU

Prints a per-step table, a per-layer sync table (by pass) and the top source lines that sync, then, as the
last stdout line, one JSON object: {"model", "layers", "tokens", "device", "steps": [...], "syncs_by_layer"}.
"""
from __future__ import annotations

import argparse
import collections
import sys

from workbench.cli import HelpFormatter, OneLineParser, emit_json, progress, run_main, table
from workbench.step.config import DataConfig, RunConfig, StepConfig
from workbench.step.data import lengths_arg
from workbench.step.length_data import lengths_help
from workbench.errors import WorkbenchError


def _epilog() -> str:
    from workbench.step.presets import ATTN_CHOICES, EXPERTS_CHOICES, PRESETS
    presets = "\n".join(f"  {name:<16} {p.family}" for name, p in PRESETS.items())
    return (f"presets (--model; or a local Hugging Face checkpoint directory with config.json and weights):\n"
            f"{presets}\n\n"
            f"--lengths forms:\n  " + lengths_help().removeprefix("document lengths: ").replace("), ", ")\n  ") + "\n\n"
            f"--attn: {', '.join(ATTN_CHOICES)} (or a name registered in transformers' AttentionInterface)\n"
            f"--experts: {', '.join(EXPERTS_CHOICES)} (or a name registered in transformers' ExpertsInterface, "
            "or the workbench's wb_*)")


def build_parser() -> argparse.ArgumentParser:
    d = RunConfig()
    dd, ds = d.data, d.step
    p = OneLineParser(prog="python -m workbench.run", description=__doc__, epilog=_epilog(),
                       formatter_class=HelpFormatter)
    p.add_argument("--model", default=ds.model, help="preset name (listed below) or local HF checkpoint directory")
    p.add_argument("--layers", type=int, default=None,
                   help="override the decoder layer count (fit a big shape); default: the published count")
    p.add_argument("--tokens", type=int, default=dd.tokens, help="packed tokens per batch")
    p.add_argument("--lengths", type=lengths_arg, default=dd.lengths, help="document lengths (forms below)")
    p.add_argument("--steps", type=int, default=d.steps, help="timed steps")
    p.add_argument("--warmup", type=int, default=d.warmup, help="dropped warmup steps")
    p.add_argument("--attn", default=None,
                   help="HF attention implementation (sdpa, eager, flex_attention, flash_attention_2, ...); "
                        "default: sdpa, eager for GPT-OSS")
    p.add_argument("--experts", default=None,
                   help="HF experts implementation for MoE models (eager, grouped_mm, batched_mm, ...); "
                        "default: transformers' (grouped_mm)")
    p.add_argument("--device", default=d.device, choices=["auto", "cpu", "cuda"],
                   help="auto: cuda when available, else cpu")
    p.add_argument("--seed", type=int, default=dd.seed, help="seeds weights, LoRA init and data")
    p.add_argument("--lora-rank", type=int, default=ds.lora_rank, help="LoRA rank r (alpha 2r)")
    p.add_argument("--no-checkpointing", dest="checkpointing", action="store_false",
                   help="keep all activations (no recompute)")
    p.add_argument("--no-ranges", action="store_true", help="emit no NVTX / record_function ranges")
    p.add_argument("--no-sync-count", action="store_true", help="do not run the dispatch-level sync counter")
    p.add_argument("--cross-check", action="store_true",
                   help="on CUDA, also count torch.cuda sync-debug-mode warnings (second witness)")
    return p


def parse_args(argv=None) -> RunConfig:
    """Parse and validate the command line; every bad argument raises WorkbenchError before any model is built
    (--lengths is read by argparse, --attn / --experts / --model / --layers checked on the model's config)."""
    a = build_parser().parse_args(argv)  # --help and argparse's errors before torch is imported
    from workbench.step.models import check_attn, check_experts, load_config

    from workbench.step.length_files import with_model_tokenizer
    cfg = RunConfig(data=DataConfig(lengths=with_model_tokenizer(a.lengths, a.model), tokens=a.tokens, seed=a.seed),
                    step=StepConfig(model=a.model, layers=a.layers, attn=a.attn, experts=a.experts,
                                    lora_rank=a.lora_rank, checkpointing=a.checkpointing),
                    steps=a.steps, warmup=a.warmup, device=a.device, ranges=not a.no_ranges,
                    count_syncs=not a.no_sync_count, cross_check=a.cross_check)
    st = cfg.step
    if st.attn is not None:
        check_attn(st.attn)
    if st.experts is not None:
        from workbench import opts
        opts.load_all()  # the optimizations' own experts names (wb_*) are registered on import
        check_experts(st.experts)
    load_config(st.model, st.layers, st.attn, st.experts)  # unknown preset, bad checkpoint directory
    return cfg


def execute(cfg: RunConfig, on_step=None):
    """Build, instrument and train per `cfg`; returns (model, records)."""
    from workbench.step.data import to_device
    from workbench.step.harness import enable_checkpointing, train_steps
    from workbench.instrument import Ranges, instrument_layers
    from workbench.step.models import build_model, resolve_device

    device = resolve_device(cfg.device)
    st = cfg.step.resolved(device)  # the precision, resolved once and passed to every step
    model = build_model(st.model, layers=st.layers, attn=st.attn, device=device, seed=cfg.data.seed,
                        lora_rank=st.lora_rank, experts_implementation=st.experts, precision=st.precision)
    if st.checkpointing:
        enable_checkpointing(model)
    instrument_layers(model)
    vocab = model.config.vocab_size
    n_batches = cfg.data.batches or max(1, min(cfg.steps + cfg.warmup, 4))
    batches = to_device(cfg.data.make_batches(cfg.data.tokens, vocab, batches=n_batches), device)
    records = train_steps(model, batches, steps=cfg.steps, warmup=cfg.warmup, lr=st.lr,
                          ranges=Ranges(nvtx=cfg.ranges, profiler=cfg.ranges), count_syncs=cfg.count_syncs,
                          cross_check=cfg.cross_check, on_step=on_step, precision=st.precision)
    return model, records


def main(argv=None) -> int:
    cfg = parse_args(argv)
    progress(f"building {cfg.step.model} ...")
    total = cfg.steps

    def on_step(r):
        progress(f"step {r.step + 1}/{total}: {r.step_ms:.1f} ms, loss {r.loss:.4f}, syncs {r.syncs}")

    model, records = execute(cfg, on_step)
    device = str(next(model.parameters()).device)
    layers = model.config.num_hidden_layers
    print(f"model {cfg.step.model}  layers {layers}  tokens {cfg.data.tokens}  device {device}")
    print(table([[r.step, f"{r.step_ms:.2f}", f"{r.fwd_ms:.2f}", f"{r.bwd_ms:.2f}", f"{r.opt_ms:.2f}",
                   r.syncs, r.cuda_sync_warnings if r.cuda_sync_warnings is not None else "-",
                   f"{r.peak_mem_mib:.0f}", r.tokens, f"{r.loss:.4f}"] for r in records],
                 ["step", "step_ms", "fwd_ms", "bwd_ms", "opt_ms", "syncs", "cuda_warn", "peak_mib", "tokens",
                  "loss"]))
    last = records[-1]
    by_lp = collections.defaultdict(dict)
    for (layer, pass_), n in _by_layer_pass(last).items():
        by_lp[layer][pass_] = n
    passes = ["forward", "recompute", "backward", "optimizer"]
    print("\nsyncs per layer and pass (last step)")
    print(table([[layer] + [by_lp[layer].get(p, 0) for p in passes] + [sum(by_lp[layer].values())]
                  for layer in sorted(by_lp)], ["layer"] + passes + ["total"]))
    if last.syncs_by_source:
        print("\nsource lines that sync (last step)")
        top = sorted(last.syncs_by_source.items(), key=lambda kv: -kv[1])[:10]
        print(table([[n, src] for src, n in top], ["syncs", "source"]))
    if last.cuda_sync_warnings is not None and last.cuda_sync_warnings != last.syncs:
        print(f"\nwitnesses differ: counter {last.syncs}, CUDA sync debug mode {last.cuda_sync_warnings}; "
              "debug-mode warnings by source line:")
        print(table([[n, src] for src, n in sorted(last.cuda_sync_warning_sources.items(), key=lambda kv: -kv[1])],
                     ["warnings", "source"]))
    emit_json({
        "model": cfg.step.model, "layers": layers, "tokens": cfg.data.tokens, "device": device,
        "steps": [{"step_ms": r.step_ms, "fwd_ms": r.fwd_ms, "bwd_ms": r.bwd_ms, "opt_ms": r.opt_ms,
                   "syncs": r.syncs, "cuda_sync_warnings": r.cuda_sync_warnings, "peak_mem_mib": r.peak_mem_mib,
                   "loss": r.loss} for r in records],
        "syncs_by_layer": last.syncs_by_layer,
    })
    return 0


def _by_layer_pass(rec) -> dict:
    return rec.syncs_by_layer_pass


if __name__ == "__main__":
    sys.exit(run_main(main))
