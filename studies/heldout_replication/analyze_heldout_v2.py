"""Held-out check on a FOURTH machine, by the rule fixed beforehand in
profiles/2026-11-26_h100_replication/prospective_v2.json (the commit that added it, in git log). Run from the repo
root on a CPU, after `bash studies/heldout_replication/prospective2.sh` ran on the GPU:

    python studies/heldout_replication/analyze_heldout_v2.py CAMPAIGN_DIR            # CAMPAIGN_DIR = $CAMP/prospective2; writes analysis_v2.json there
    python studies/heldout_replication/analyze_heldout_v2.py CAMPAIGN_DIR --out F    # the JSON to F instead

1. The machine: CAMPAIGN_DIR/gpu.csv's UUID must start with none of the design's `machines` (A, B, C: already in the
   estimate); a folder without a readable UUID, or from one of them, is refused (`error: ...`, exit 2, nothing
   written). So is a machine of another GPU model than the estimate's processes ran on (their meta.json).
2. Per comparison (CAMPAIGN_DIR/packing, moe, offload: M processes each; where that folder is missing,
   CAMPAIGN_DIR/all, an `--opt all --headline --processes M` folder whose processes ran every comparison): each process's mean per-rep log ratio
   (every timed rep: the engine discards its own warm-up rep), judged by the design's model: "spread"
   (`replication.spread_check`: inside >= its null 5% quantile, and the one-sided spread check) or "pooled" (moe, one
   machine: `replication.heldout_new_machine_check`, prospective.json's rule). A part that did not run says so. A
   part whose processes ran in different environments (`results.environment_diff`) prints "mixed environment: ..."
   and carries it as `mixed_environment`: the verdict stands, flagged.
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
from workbench.measure.results import environment_diff  # noqa: E402
from workbench.measure.results import process_dirs as procs  # noqa: E402
from workbench.measure import replication  # noqa: E402

DESIGN = os.path.join("profiles", "2026-11-26_h100_replication", "prospective_v2.json")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root


def machine_uuid(camp: str, known: dict) -> tuple[str, str]:
    """The held-out machine's GPU (model name, UUID) from CAMPAIGN_DIR/gpu.csv (nvidia-smi's name, uuid), refused
    when missing or when it is one of the estimate's machines (`known`: name -> UUID or its prefix)."""
    path = os.path.join(camp, "gpu.csv")
    rows = open(path, encoding="utf-8").read().splitlines()[1:] if os.path.isfile(path) else []
    gpus = [(r.split(",")[0].strip(), r.split(",")[-1].strip()) for r in rows if "GPU-" in r]
    if len(gpus) != 1:
        raise WorkbenchError(f"{path}: no single GPU UUID ({len(gpus)} found): cannot tell the held-out machine "
                             "from the estimate's")
    gpu_name, u = gpus[0]
    for name, k in known.items():
        if u.lower().startswith(k.lower()) or k.lower().startswith(u.lower()):
            raise WorkbenchError(f"{camp} ran on machine {name} ({u}), already in the estimate: a held-out check "
                                 "needs a machine none of the estimate's processes ran on")
    return gpu_name, u


def same_gpu_model(camp: str, name: str, design: dict) -> None:
    """Refuse the held-out machine's GPU model `name` (from `machine_uuid`) when it is not the model every estimate
    process ran on (their meta.json `device.gpu_name`): a prediction for another H100 says nothing about an H200 (a
    2-GPU lease may come as H200s)."""
    seen = set()
    for c in design["comparisons"].values():
        for folders in c["folders"].values():
            meta = os.path.join(ROOT, folders[0], "meta.json")  # v2+ name process folders from the repo root
            if os.path.isfile(meta):
                with open(meta, encoding="utf-8") as f:
                    seen.add((json.load(f).get("device") or {}).get("gpu_name"))
    seen.discard(None)
    if seen and name not in seen:
        raise WorkbenchError(f"{camp} ran on {name or 'an unnamed GPU'}, the estimate on {', '.join(sorted(seen))}: "
                             "a held-out check needs the same GPU model")


def judge(camp: str, design: dict) -> dict:
    out = {}
    for name, c in design["comparisons"].items():
        folder = os.path.join(camp, name)  # a part of its own, else the `--opt all` processes (every comparison)
        runs = procs(folder if os.path.isdir(folder) else os.path.join(camp, "all"))
        groups = [g for g in (per_rep_log_ratios(r, name, c["baseline"], c["arm"], skip_reps=0) for r in runs) if g]
        pred, plan = c["prediction"], c["heldout_plan"]
        mixed = environment_diff(runs)["line"]  # the verdict stands; a mixed-environment one carries the flag
        if len(groups) < 2:
            out[name] = {"ran": len(groups), "verdict": f"not judged: {len(groups)} held-out process(es) ran",
                         "mixed_environment": mixed}
            continue
        means = [float(np.mean(g)) for g in groups]
        if c["model"] == "spread":
            chk = replication.spread_check(pred, means, plan["null"])
        else:
            chk = replication.heldout_new_machine_check(pred, means, null=plan["null"])
        reps = sorted({len(g) for g in groups})
        out[name] = {**chk, "model": c["model"], "ran": len(groups), "planned_M": plan["M"],
                     "reps_per_process": reps, "same_R_as_estimate": reps == pred["R"], "pi95": pred["pi95"],
                     "heldout_speedups": [math.exp(m) for m in means], "verdict": "holds" if chk["ok"] else "FAILS",
                     "mixed_environment": mixed}
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("campaign")
    ap.add_argument("--design", default=DESIGN)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    with open(a.design, encoding="utf-8") as f:
        design = json.load(f)
    gpu_name, uuid = machine_uuid(a.campaign, design["machines"])
    same_gpu_model(a.campaign, gpu_name, design)
    res = {"design": a.design, "machine": uuid, "heldout": judge(a.campaign, design)}
    for name, h in res["heldout"].items():
        if h.get("mixed_environment"):
            print(f"{name}: {h['mixed_environment']}")
        if "inside" not in h:
            print(f"{name}: {h['verdict']}")
            continue
        second = (f"SD of the means {100 * h['heldout_sd_log']:.2f}% (passes <= {100 * h['max_sd_log']:.2f}%)"
                  if h["model"] == "spread" else
                  f"variance ratio {h['variance_ratio']:.2f} [{h['f_interval'][0]:.2f}, {h['f_interval'][1]:.2f}]")
        print(f"{name}: {h['ran']} held-out processes on {uuid}: {h['heldout_speedup']:.4f}x ({h['shift_pct']:+.2f}% "
              f"from the estimate); inside PI [{h['pi95'][0]:.4f}, {h['pi95'][1]:.4f}]: {h['inside']:.2f} (null 5% "
              f"quantile {h['inside_null_q05']:.2f}); {second}: {h['verdict']}")
    out = a.out or os.path.join(a.campaign, "analysis_v2.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump(res, f, indent=1, default=float)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
