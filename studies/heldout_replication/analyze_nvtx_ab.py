"""Issue 37: the A/B of the NVTX backends (studies/heldout_replication/nvtx_ab.sh), judged by the rule fixed before its run. From the
repo root on a CPU:

    python studies/heldout_replication/analyze_nvtx_ab.py CAMPAIGN_DIR        # CAMPAIGN_DIR = $CAMP/nvtx_ab; writes CAMPAIGN_DIR/analysis.json

Per comparison (CAMPAIGN_DIR/<opt>/{nvtx,torch}_sNNN: one run folder per backend and seed), each process's
mean per-rep log speedup (`processes.per_rep_log_ratios`, every timed rep: the engine discards its own warm-up rep);
per seed the difference torch.cuda.nvtx - nvtx (same seed, same batches); its 95% t-interval over seeds
(`stats.t_interval`). "the backend moves the speedup" when the interval excludes 0, "no effect shown" otherwise
(the interval bounds the effect); fewer than 2 complete seeds: not judged. Each process's recorded backend
(`results.nvtx_backend_of`) must be the one its folder names: a mismatch is refused (the switch did not take).
"""
import argparse
import json
import math
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repository root
from workbench.ab.processes import per_rep_log_ratios  # noqa: E402
from workbench.cli import run_main  # noqa: E402
from workbench.errors import WorkbenchError  # noqa: E402
from workbench.measure import stats  # noqa: E402
from workbench.measure.results import nvtx_backend_of, process_dirs  # noqa: E402

ARMS = {"packing": ("rebuild", "cached"), "moe": ("eager", "sort_bincount")}
WANT = {"nvtx": "nvtx", "torch": "torch.cuda.nvtx"}


def process_mean(folder: str, opt: str, backend: str) -> float | None:
    runs = process_dirs(folder) or ([folder] if os.path.isfile(os.path.join(folder, "summary.json")) else [])
    if not runs:  # --processes 1 runs in place: the folder is the run
        return None
    with open(os.path.join(runs[0], "meta.json"), encoding="utf-8") as f:
        got = nvtx_backend_of(json.load(f))
    if got not in (WANT[backend], "off"):
        raise WorkbenchError(f"{runs[0]}: ran with NVTX backend {got!r}, its folder says {WANT[backend]!r}")
    g = per_rep_log_ratios(runs[0], opt, *ARMS[opt], skip_reps=0)
    return float(np.mean(g)) if g else None


def judge(camp: str) -> dict:
    out = {}
    for opt in ARMS:
        d = os.path.join(camp, opt)
        if not os.path.isdir(d):
            continue
        seeds = sorted({m.group(1) for f in os.listdir(d) if (m := re.fullmatch(r"(?:nvtx|torch)_s(\d+)", f))})
        rows = []
        for s in seeds:
            a, b = (process_mean(os.path.join(d, f"{k}_s{s}"), opt, k) if os.path.isdir(os.path.join(d, f"{k}_s{s}"))
                    else None for k in ("nvtx", "torch"))
            if a is not None and b is not None:
                rows.append({"seed": int(s), "nvtx": math.exp(a), "torch": math.exp(b), "diff_log": b - a})
        if len(rows) < 2:
            out[opt] = {"seeds": rows, "verdict": f"not judged: {len(rows)} complete seed(s)"}
            continue
        t = stats.t_interval([r["diff_log"] for r in rows])
        lo, hi = t["ci"]
        out[opt] = {"seeds": rows, "diff_pct": 100 * math.expm1(t["mean"]),
                    "ci95_pct": [100 * math.expm1(lo), 100 * math.expm1(hi)], "df": t["df"],
                    "verdict": "the backend moves the speedup" if lo > 0 or hi < 0 else "no effect shown"}
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("campaign")
    a = ap.parse_args(argv)
    if not os.path.isdir(a.campaign):
        raise WorkbenchError(f"{a.campaign}: no such folder")
    res = judge(a.campaign)
    for opt, r in res.items():
        if "ci95_pct" not in r:
            print(f"{opt}: {r['verdict']}")
            continue
        print(f"{opt}: speedup with torch.cuda.nvtx vs with the nvtx package over {len(r['seeds'])} seeds: "
              f"{r['diff_pct']:+.2f}% [{r['ci95_pct'][0]:+.2f}, {r['ci95_pct'][1]:+.2f}] ({r['df']} df): {r['verdict']}")
    with open(os.path.join(a.campaign, "analysis.json"), "w", encoding="utf-8") as f:
        json.dump(res, f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
