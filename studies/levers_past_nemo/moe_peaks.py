"""Every committed MoE peak against `workbench.step.memory_estimate`, before and after the selective arm's MoE term
was counted (a MoE layer under selective keeps its router logits, not its experts' outputs).

    python -m studies.levers_past_nemo.moe_peaks

For each arm of each comparison of a MoE model in profiles/*/**/summary.json with a peak: the estimate's total
(GiB) with the arm's settings read back from its info and the run's meta.json (activations arm, experts reading
peft's folded weight or not, compiled layers, eager attention, FSDP ranks), the peak (torch's max allocated, GiB)
and peak / estimate. No term here was fitted to these peaks: the revision comes from counting
(tests/test_memory_estimate.py::test_moe_selective_keeps_what_the_estimate_charges).
"""
from __future__ import annotations

import glob
import json
import os
from unittest import mock

MOE = ("qwen3-30b-a3b", "gpt-oss-20b", "tiny-qwen3-moe", "tiny-gpt-oss")


def _old_selective(config, dtype_bytes=2):
    """The selective term before the count: the experts' outputs at top_k x (2 x expert width) + hidden."""
    from workbench.step import memory_estimate as me
    s = me.shape(config)
    h, q, kv = s["hidden"], s["heads"] * s["head_dim"], s["kv_heads"] * s["head_dim"]
    width = s["top_k"] * s["expert_width"] if s["experts"] else s["intermediate"]
    return (h + (q + 2 * kv + h + 2 * width + h) + q) * dtype_bytes + 4 * s["heads"]


def _arm_of(info, args):
    p = info.get("activations.policy")
    if p is None:
        return "full" if args.get("checkpointing", True) else "none"
    if p.startswith("selective"):
        return "selective"
    if p.startswith("keep every saved tensor"):
        return "offload" if "host" in p else "none"
    return "full"


def rows():
    from workbench.step import memory_estimate as me
    from workbench.step.models import load_config

    out = []
    for path in sorted(glob.glob("profiles/**/summary.json", recursive=True)):
        try:
            summary = json.load(open(path))
            meta = json.load(open(os.path.join(os.path.dirname(path), "meta.json")))
        except (OSError, ValueError):
            continue
        args = meta.get("args", {})
        if summary.get("device") != "cuda":
            continue
        shards = int(meta.get("world_size") or args.get("world_size") or 1)
        for c in summary.get("comparisons", []):
            if c.get("model") not in MOE or c.get("status") not in (None, "ok", "complete"):
                continue
            cfg = load_config(c["model"], c["layers"])
            for a in [c.get("baseline"), c.get("optimized")] + list(c.get("others") or []):
                if not a or not a.get("peak_mem_mib") or a.get("status") not in (None, "ok"):
                    continue
                info = a.get("info", {})
                arm = _arm_of(info, args)
                impl = info.get("expert_lora.experts_implementation", args.get("experts"))
                folded = me.folded_experts_of(impl)
                kernel = info.get("attention.kernel", "")
                eager = c.get("attn") == "eager" or (cfg.model_type == "gpt_oss" and "flex" not in kernel)
                b = me.DTYPE_BYTES.get(args.get("dtype"), 2)
                adapter = b if args.get("precision") == "bf16" else 4
                kw = dict(layers=c["layers"], dtype_bytes=b, eager_attention=eager, weight_shards=shards,
                          lora_rank=args.get("lora_rank", 16), adapter_bytes=adapter, activations=arm,
                          compiled="compile.layers" in info, folded_experts=folded)
                new = me.estimate(cfg, c["tokens"], **kw).total_bytes / me.GIB
                with mock.patch.object(me, "selective_per_token", _old_selective):
                    old = me.estimate(cfg, c["tokens"], **kw).total_bytes / me.GIB
                peak = a["peak_mem_mib"] / 1024
                out.append((os.path.dirname(path).removeprefix("profiles/"), c["name"], a["arm"], arm,
                            "split" if not folded else (impl or "grouped_mm"), c["layers"], c["tokens"],
                            old, new, peak, peak / new))
    return out


if __name__ == "__main__":
    print(f"{'run folder':58s} {'comparison':12s} {'point':14s} {'arm':9s} {'experts':10s} {'L':>3s} {'T':>6s} "
          f"{'old GiB':>8s} {'new GiB':>8s} {'peak GiB':>8s} {'peak/new':>8s}")
    for r in rows():
        print(f"{r[0]:58s} {r[1][:12]:12s} {r[2][:14]:14s} {r[3]:9s} {str(r[4])[:10]:10s} {r[5]:3d} {r[6]:6d} "
              f"{r[7]:8.1f} {r[8]:8.1f} {r[9]:8.1f} {r[10]:8.2f}")
