"""Packing's per-machine arm costs and speedups behind docs/GUIDE.md's "machine or protocol" paragraph (read after
the data, exploratory): the processes v4 pools (A-E, G) plus H's, per machine: the mean speedup over processes (each
process's mean per-rep log ratio, v4's skip_reps), the same over each process's first 3 reps only, and the mean over
processes of each arm's median timed step (ms). Machine J's rows (the ninth H100, 2026-11-26 (7)) were added after
its run: its `--opt all` processes (v5's held-out run) and its 4 standalone packing processes (the protocol test).
Run from the repo root:

    python profiles/2026-11-26_h100_prospective4/arm_costs.py
"""
import json
import math
import os
import sys

import numpy as np
import pandas as pd

sys.path.insert(0, os.getcwd())
from workbench.ab.processes import per_rep_log_ratios  # noqa: E402

V4 = "profiles/2026-11-26_h100_all_processes_g/prospective_v4.json"
H = [f"profiles/2026-11-26_h100_prospective4/all/p0{i}" for i in range(3)]

with open(V4, encoding="utf-8") as f:
    folders = json.load(f)["comparisons"]["packing"]["folders"]
folders["H"] = H
J = "profiles/2026-11-26_h100_prospective5"
folders["J"] = [f"{J}/all/p0{i}" for i in range(4)]
folders["J standalone"] = [f"{J}/packing_only/p0{i}" for i in range(4)]
print("machine       K  protocol  speedup  first-3-reps  rebuild_ms  cached_ms")
for m, fs in folders.items():
    sp, sp3, rb, ca, opts = [], [], [], [], set()
    for f in fs:
        path, _, skip = f.partition(":")
        r = per_rep_log_ratios(path, "packing", "rebuild", "cached", skip_reps=int(skip or 0))
        sp.append(np.mean(r))
        sp3.append(np.mean(r[:3]))
        df = pd.read_csv(os.path.join(path, "results.csv"))
        df = df[(df.comparison == "packing") & (df.metric == "step_ms")]
        rb.append(df[df.arm == "rebuild"].value.median())
        ca.append(df[df.arm == "cached"].value.median())
        with open(os.path.join(path, "meta.json"), encoding="utf-8") as fh:
            opts.add(json.load(fh)["args"]["opt"])
    print(f"{m:12s} {len(fs):2d}  {'/'.join(sorted(opts)):8s}  {math.exp(np.mean(sp)):.4f}   {math.exp(np.mean(sp3)):.4f}"
          f"        {np.mean(rb):7.1f}    {np.mean(ca):7.1f}")
