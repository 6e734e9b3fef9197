"""The timed results of this folder's runs, recomputed from each results.csv (the rep is the unit: `analysis.recomputed`),
with MFU counted from the useful work (block-diagonal attention over the run's own batches, `flops.step_flops`) for
every arm, so an arm that skips the masked blocks is not credited with FLOPs it does not do (the runs' own tables
credit every attention arm with the dense T x T FLOPs), and each optimized arm against the anchor timed beside it
(split against transformers' grouped_mm). Run from the repository root:

    python profiles/2026-11-25_h100_levers_path/recount.py

(profiles/2026-11-25_h100_levers/recount.py runs this on that folder's runs.)
"""
import json
import os
import sys

import pandas as pd

from workbench import analysis
from workbench.step import flops

HERE = os.path.dirname(os.path.abspath(__file__))
PEAK = flops.peak_tflops("NVIDIA H100 80GB HBM3")


RUNS = ("llama_levers", "gptoss8k_levers", "gptoss16k_best", "qwen3moe_levers")


def main(here: str = HERE, runs=RUNS) -> int:
    rows = []
    for run in runs:
        path = os.path.join(here, run)
        s = json.load(open(os.path.join(path, "summary.json")))
        a = json.load(open(os.path.join(path, "meta.json")))["args"]
        res = pd.read_csv(os.path.join(path, "results.csv"))
        for c in s["comparisons"]:
            if c["name"] == "path":
                continue
            useful = flops.for_comparison(c["model"], c.get("layers"), c["tokens"], "flash_attention_2",
                                          lengths=a["lengths"], batches=a["batches"], seed=a["seed"],
                                          lora_rank=a["lora_rank"], experts=a.get("experts"))
            base = c["baseline"]["arm"]
            for arm in [base] + [o["arm"] for o in [c.get("optimized") or {}] + (c.get("others") or []) if o]:
                st = res[(res["comparison"] == c["name"]) & (res["arm"] == arm) & (res["metric"] == "step_ms")]
                samples = [{"batch": int(b), "step_ms": v} for b, v in zip(st["batch"], st["value"])]
                t = flops.arm_throughput(useful, samples, "NVIDIA H100 80GB HBM3") if samples else {}
                r = analysis.recomputed(path, c["name"], base, arm) if arm != base else {}
                rows.append({"run": run, "comparison": c["name"], "model": c["model"], "layers": c.get("layers"),
                             "tokens": c["tokens"], "arm": arm, "baseline": base, "n_steps": len(samples),
                             "mean_step_ms": st["value"].mean() if len(st) else None,
                             "speedup": (r or {}).get("speedup"), "ci95": (r or {}).get("ci95"),
                             "verdict": (r or {}).get("verdict"), "mfu_useful": t.get("mfu"),
                             "useful_tflop_per_step": t.get("model_tflop_per_step")})
            opt = (c.get("optimized") or {}).get("arm")
            for anchor in [o["arm"] for o in c.get("others") or []]:  # the optimized arm against the anchor
                r = analysis.recomputed(path, c["name"], anchor, opt)
                rows.append({"run": run, "comparison": c["name"], "model": c["model"], "layers": c.get("layers"),
                             "tokens": c["tokens"], "arm": opt, "baseline": anchor, "speedup": r.get("speedup"),
                             "ci95": r.get("ci95"), "verdict": r.get("verdict")})
    df = pd.DataFrame(rows)
    with pd.option_context("display.width", 250, "display.max_columns", 20):
        print(df.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
