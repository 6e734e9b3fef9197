"""Protocol test, by the rule fixed before its run in
profiles/2026-11-26_h100_prospective4/protocol_test.json: is packing's reading inside an `--opt all --headline`
process (its first comparison) different from a standalone `--opt packing --headline` process on the same machine?

    python studies/heldout_replication/analyze_protocol.py --standalone $CAMP/prospective5/packing_only --inside $CAMP/prospective5/all \
        [--out FILE]

Each side: the clean processes of a `--processes` folder (`results.process_dirs`), each process's mean per-rep log
ratio of packing's cached vs rebuild. d = mean(standalone) - mean(inside), a 95% Welch t-interval for d; "protocol
effect" when it excludes 0, else "no protocol effect shown" with the largest |d| the interval leaves open. Both
folders must come from one GPU (meta.json's UUID), else refused in one line; fewer than 2 processes a side: not judged.
Host covariates (meta.json `device`: CPU model, sync_roundtrip_us where recorded) are printed beside, not judged.
"""
import argparse
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repository root
from workbench.ab.processes import per_rep_log_ratios  # noqa: E402
from workbench.cli import run_main  # noqa: E402
from workbench.errors import WorkbenchError  # noqa: E402
from workbench.measure import stats  # noqa: E402
from workbench.measure.results import process_dirs  # noqa: E402

COMPARISON, BASELINE, ARM = "packing", "rebuild", "cached"


def side(folder: str) -> tuple[list[float], set, list]:
    """(process means of the log ratio, the GPU UUIDs, host covariates) of one `--processes` folder."""
    means, uuids, hosts = [], set(), []
    for d in process_dirs(folder):
        r = per_rep_log_ratios(d, COMPARISON, BASELINE, ARM)
        if not r:
            continue
        means.append(float(np.mean(r)))
        with open(os.path.join(d, "meta.json"), encoding="utf-8") as f:
            dev = json.load(f).get("device") or {}
        uuids.add(dev.get("uuid"))
        hosts.append({k: dev.get(k) for k in ("cpu_model", "sync_roundtrip_us")})
    return means, uuids, hosts


def judge(standalone: list[float], inside: list[float]) -> dict:
    """The committed rule on two lists of process means (log)."""
    if len(standalone) < 2 or len(inside) < 2:
        return {"verdict": f"not judged: {len(standalone)} standalone and {len(inside)} inside processes (2 a side needed)"}
    a, b = np.asarray(standalone), np.asarray(inside)
    w = stats.welch(b, a)  # mean(standalone) - mean(inside), scipy's Welch interval
    d, (lo, hi) = w["delta_ms"], w["ci95"]
    df = stats.welch_satterthwaite_df([(a.var(ddof=1) / len(a), len(a) - 1), (b.var(ddof=1) / len(b), len(b) - 1)])
    if lo > 0 or hi < 0:
        verdict = "protocol effect"
    else:
        verdict = f"no protocol effect shown (|d| up to {100 * max(abs(lo), abs(hi)):.2f}% left open)"
    return {"d_log": d, "ci95_log": [lo, hi], "df": df, "standalone_speedup": math.exp(a.mean()),
            "inside_speedup": math.exp(b.mean()), "n": [len(a), len(b)], "verdict": verdict}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--standalone", required=True, help="the `--opt packing --headline --processes K` folder")
    ap.add_argument("--inside", required=True, help="the `--opt all --headline --processes K` folder, same machine")
    ap.add_argument("--out", help="write the result as JSON here")
    a = ap.parse_args(argv)
    s_means, s_gpu, s_host = side(a.standalone)
    i_means, i_gpu, i_host = side(a.inside)
    gpus = (s_gpu | i_gpu) - {None}
    if len(gpus) > 1:
        raise WorkbenchError(f"the two folders ran on {len(gpus)} GPUs ({', '.join(sorted(gpus))}): the test needs one machine")
    out = {"rule": "profiles/2026-11-26_h100_prospective4/protocol_test.json", "gpu_uuid": next(iter(gpus), None),
           "standalone_means_log": s_means, "inside_means_log": i_means, **judge(s_means, i_means),
           "hosts": {"standalone": s_host, "inside": i_host}}
    if "d_log" in out:
        print(f"packing standalone {out['standalone_speedup']:.4f}x ({len(s_means)} processes) vs inside --opt all "
              f"{out['inside_speedup']:.4f}x ({len(i_means)}): d {100 * out['d_log']:+.2f}% [{100 * out['ci95_log'][0]:+.2f}, "
              f"{100 * out['ci95_log'][1]:+.2f}] (Welch, {out['df']:.1f} df): {out['verdict']}")
    else:
        print(out["verdict"])
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
