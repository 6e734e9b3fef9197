"""What things cost: the instruments (sync counter, NVTX ranges), syncs per step with their sources, model FLOPs
and MFU, the op-by-op sync witness."""
from __future__ import annotations

import json
import os

import pandas as pd

from workbench.analysis.loader import (_arms, _frame, _included, _json, _meta, _name, is_nvtx_cost,
                                       optimizations_text, profiles_root, recomputed)


COST_COLUMNS = ["instrument", "folder", "comparison", "arm", "role", "off_ms", "on_ms", "cost_pct", "speedup",
                "ci95_lo", "ci95_hi", "verdict", "n", "file"]


def instrument_cost(profiles: str | None = None, **kw) -> pd.DataFrame:
    """What the instruments cost (`COST_COLUMNS`). "sync counter": per arm of every comparison but the nvtx ones,
    off_ms = median timed step, on_ms = median step of the counted pass (counter on, one step per batch: n),
    cost_pct = 100 * (on/off - 1), no CI (the two are not paired). "nvtx ranges": per NVTX-cost comparison
    (`is_nvtx_cost`: an A/B's `nvtx:` one, or a `WorkbenchCallback` folder's, whose pairs are two adjacent steps of
    the user's run on different batches), off_ms / on_ms the means of the ranges-off / on arms, speedup over paired
    steps with its CI and verdict, recomputed from results.csv (`recomputed`: the rep as the unit), `arm` the arm
    ranges were put on (a callback's: `plain (packing=cached)`, the optimizations its model ran); cost_pct =
    100 * (1/speedup - 1)."""
    rows = []
    for r, comps in _included(profiles, **kw):
        base = {"folder": r["folder"], "file": os.path.join(r["folder"], "summary.json")}
        for c in comps:
            if is_nvtx_cost(_name(c)):
                off, on = c.get("baseline") or {}, c.get("optimized") or {}
                new = recomputed(r["path"], _name(c), off.get("arm"), on.get("arm")) or {}
                sp = new.get("speedup")
                lo, hi = new.get("ci95") or [None, None]
                rows.append({**base, "instrument": "nvtx ranges", "comparison": _name(c), "role": "nvtx",
                             "arm": (off.get("arm") or "").removesuffix("-nvtx") + (
                                 f" ({opts})" if (opts := optimizations_text(c)) else ""),
                             "off_ms": new.get("baseline_mean_ms", off.get("step_ms_mean")),
                             "on_ms": new.get("arm_mean_ms", on.get("step_ms_mean")),
                             "cost_pct": 100 * (1 / sp - 1) if sp else None,
                             "speedup": sp, "ci95_lo": lo, "ci95_hi": hi, "verdict": new.get("verdict"),
                             "n": new.get("n_pairs")})
                continue
            for a, role in _arms(c):
                off, on = a.get("step_ms"), a.get("instrumented_step_ms")
                rows.append({**base, "instrument": "sync counter", "comparison": _name(c), "arm": a["arm"],
                             "role": role, "off_ms": off, "on_ms": on,
                             "cost_pct": 100 * (on / off - 1) if on and off else None,
                             "n": (c.get("protocol") or {}).get("batches")})
    return _frame(rows, COST_COLUMNS, ("off_ms", "on_ms", "cost_pct", "speedup", "ci95_lo", "ci95_hi"))


SYNC_COLUMNS = ["folder", "comparison", "arm", "role", "syncs_per_step", "source", "source_syncs_per_step", "rank",
                "file"]


def syncs(profiles: str | None = None, top: int | None = 3, **kw) -> pd.DataFrame:
    """Syncs per step of every arm (counted pass) with its `top` source lines (`sync_sources_per_step`), one row per
    (arm, source), sources ranked by syncs per step; an arm without sources keeps one row with source None."""
    rows = []
    for r, comps in _included(profiles, **kw):
        for c in comps:
            for a, role in _arms(c):
                base = {"folder": r["folder"], "comparison": _name(c), "arm": a["arm"], "role": role,
                        "syncs_per_step": a.get("syncs_per_step"), "file": os.path.join(r["folder"], "summary.json")}
                src = sorted((a.get("sync_sources_per_step") or {}).items(), key=lambda kv: (-kv[1], kv[0]))
                rows += [{**base, "source": s, "source_syncs_per_step": n, "rank": k + 1}
                         for k, (s, n) in enumerate(src[:top] if top else src)] or [base]
    return _frame(rows, SYNC_COLUMNS)


def witness_ops(profiles: str | None = None) -> pd.DataFrame:
    """The op-by-op sync witness of a campaign (`witness_ops/witness.json`: op, counter, cpu_only,
    cuda_debug_warnings), with `agree` = the counter and CUDA's debug mode count the same."""
    rows = []
    for d, _, files in os.walk(profiles_root(profiles)):
        if "witness.json" in files:
            rows += [{**w, "folder": d, "agree": w.get("counter") == w.get("cuda_debug_warnings")}
                     for w in _json(os.path.join(d, "witness.json")) or []]
    return pd.DataFrame(rows, columns=["folder", "op", "counter", "cpu_only", "cuda_debug_warnings", "agree"])


MFU_COLUMNS = ["folder", "name", "model", "layers", "tokens", "attn", "attention_flops", "model_tflop_per_step",
               "arm", "step_mean_ms", "achieved_tflops", "mfu", "peak_tflops", "note", "file"]


_COUNTED: dict = {}
FILE_LENGTHS = ("data", "json", "jsonl", "file")
"""--lengths kinds read from files: a replay over them is not cached (the files may change between two readings)."""


def _counted(model, layers, tokens, attn, *, lengths, batches, seed, lora_rank, checkpointing, experts, doc_lens):
    """`flops.for_comparison`, once per arguments in this process where they fix the answer (written document
    lengths, or a synthetic --lengths replayed from its seed; `FILE_LENGTHS` are counted every time): every results
    page, headline and MFU table replays the same older runs. Copies are handed out."""
    from workbench.step import flops

    kw = dict(lengths=lengths, batches=batches, seed=seed, lora_rank=lora_rank, checkpointing=checkpointing,
              experts=experts, doc_lens=doc_lens)
    if doc_lens is None and str(lengths).split(":")[0] in FILE_LENGTHS:
        return flops.for_comparison(model, layers, tokens, attn, **kw)
    key = json.dumps([model, layers, tokens, attn, kw], sort_keys=True, default=str)
    if key not in _COUNTED:
        _COUNTED[key] = flops.for_comparison(model, layers, tokens, attn, **kw)
    return [dict(f) for f in _COUNTED[key]]


def _replayed_flops(r: dict, c: dict) -> tuple[list | None, str]:
    """An older run's FLOPs per batch (no `flops_per_batch` in its summary.json): counted from the document lengths
    summary.json wrote, else from its batches rebuilt from meta.json's --lengths and seed (which needs the length
    source's files on this machine); ([], why) where neither works. The note says which, once per folder."""
    from workbench import opts
    from workbench.measure.results import older_run_note, run_args

    opts.load_all()  # the packing backends' attention counts (`flops.declare_attention`)
    args = run_args(_meta(r["path"]))  # (a copy of the shared, cached meta.json's args)
    doc_lens = [b["doc_lens"] for b in c.get("batches") or [] if isinstance(b, dict) and b.get("doc_lens")] or None
    try:
        per_batch = _counted(
            c["model"], c.get("layers"), c["tokens"], c.get("attn"), lengths=args.get("lengths"),
            batches=args.get("batches") or len(c.get("batches") or []) or 1, seed=args.get("seed", 0),
            lora_rank=args.get("lora_rank", 16), checkpointing=bool(args["checkpointing"]),
            experts=args.get("experts"), doc_lens=doc_lens)
    except Exception as e:  # noqa: BLE001 - the row stays, with the reason it has no FLOP count
        first = (str(e).strip().splitlines() or [""])[0][:200]
        return [], older_run_note(r["folder"], "no per-arm FLOPs in summary.json (a run before they were written) "
                                  f"and its batches cannot be rebuilt here ({type(e).__name__}: {first}): no MFU")
    how = "the document lengths summary.json wrote" if doc_lens else "meta.json's --lengths and seed (replayed)"
    return per_batch, older_run_note(r["folder"], "no per-arm FLOPs in summary.json (a run before they were "
                                     f"written): counted from {how}, every arm with the attention the comparison "
                                     "names")


def mfu(profiles: str | None = None, **kw) -> pd.DataFrame:
    """Per arm of every comparison (`MFU_COLUMNS`): the model FLOPs of a step (the useful work: block-diagonal
    attention, recompute left out; `workbench.step.flops.arm_batch_flops`), the achieved TFLOP/s over the arm's mean
    step time, MFU against the device's dense bf16 peak (`flops.PEAK_BF16_DENSE_TFLOPS`) and `attention_flops`, the
    attention count of what the arm ran. Read as the run wrote them (summary.json's per-arm `flops_per_batch`); an
    older run's are counted here (`_replayed_flops`), and `note` says so; a row without a count keeps its reason."""
    from workbench.step import flops

    rows = []
    for r, comps in _included(profiles, **kw):
        for c in comps:
            if is_nvtx_cost(_name(c)):
                continue
            peak = flops.peak_tflops(r["gpu_name"] or "")
            older = None
            for a, _ in _arms(c):
                ms = a.get("step_ms_mean") or a.get("step_ms")
                if not ms:
                    continue
                per_batch, note, mode = a.get("flops_per_batch"), None, a.get("attention_flops")
                if not per_batch:
                    older = older or _replayed_flops(r, c)
                    per_batch, note = older
                    mode = per_batch[0]["attention"] if per_batch else None
                model_flops = sum(f["model"] for f in per_batch) / len(per_batch) if per_batch else None
                tf = (a.get("achieved_tflops") if a.get("flops_per_batch") else None) or (
                    model_flops / (ms / 1e3) / 1e12 if model_flops else None)
                rows.append({"folder": r["folder"], "name": _name(c), **{k: c.get(k) for k in
                             ("model", "layers", "tokens", "attn")}, "attention_flops": mode,
                             "model_tflop_per_step": model_flops / 1e12 if model_flops else None, "arm": a["arm"],
                             "step_mean_ms": ms, "achieved_tflops": tf, "mfu": tf / peak if peak and tf else None,
                             "peak_tflops": peak, "note": note, "file": os.path.join(r["folder"], "summary.json")})
    return _frame(rows, MFU_COLUMNS, ("model_tflop_per_step", "step_mean_ms", "achieved_tflops", "mfu"))
