"""The qwen3-30b-a3b levers run was cut off (the lease's 30-minute cap) in the path's trace passes, after every timed
step: its summary.json holds the predictions and the two lever comparisons but no verdicts. This judges them as the run
would have (`workbench.ab.levers.annotate` on its own results.csv and predictions). Run from the repository root:

    python profiles/2026-11-25_h100_levers_path/qwen3_verdicts.py
"""
import json
import os
import types

from workbench.ab import levers as lever_run

RUN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "qwen3moe_levers")

s = json.load(open(os.path.join(RUN, "summary.json")))
lv = s["levers"]
sel = lever_run.Selection([], lv["predictions"], lv["skipped"], lv["breakdown"], lv["trace_note"])
comps = lever_run.annotate(types.SimpleNamespace(flush=lambda: None, out_dir=RUN), s, sel, "cuda")
print(lever_run.table(s))
for c in comps:
    sm = c.get("savings_model") or {}
    print(c["name"], json.dumps({k: sm.get(k) for k in ("predicted_ms", "measured_ms", "ratio", "ratio_ci90",
                                                          "verdict", "p_confirm_holm", "p_refute_holm")}))
