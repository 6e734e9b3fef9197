"""MoE's saving in two terms: a removed sync saves u, and sort_bincount's backward writes more whole-size row
gradients than HF's eager loop, at beta a GB (issue 39; written 2026-11-27 (9) after the mechanism campaign's
rule read "inconclusive: the saving per sync shrinks with W", and before the probe run that judges it).

What the campaign showed beside its rule (profiles/2026-11-27_h200x2_moe_work_{a,b}, 41 processes, the timed step's
own CUDA-event split): the forward saves 34-41 us a removed sync at all six shapes of both families, but the backward's
saving falls with tokens in qwen3-30b-a3b only (155, 88, -53 ms at 4k, 8k, 16k). The backward has no sync; what
differs is how each arm takes its rows (counted on the CPU, tests/test_moe.py):

    # N = tokens, k = experts per token, S = N*k routed rows, E_hit = experts hit, H = hidden, L = MoE layers
    eager          hidden_states[token_idx] per expert: E_hit zeroed (N,H) gradients (index backward) summed
    sort_bincount  x_SH[start:start+n] per expert:        E_hit zeroed (S,H) gradients (slice_backward) summed
    sort_split     x_SH.split(counts):                    one (S,H) gradient (cat)

So sort_bincount writes E_hit*(S-N)*H more elements a layer than eager: k-1 times eager's, 60 GB a step at
qwen3-30b-a3b 4 L 16k (E 128, k 8) against 18 GB at gpt-oss-20b 4 L 8k (E 32, k 4).

    per process:  saving_ms = u * syncs_removed - beta * extra_gb
                  extra_gb  = L * E_hit * (S - N) * H * 2 bytes / 1e9, E_hit = syncs_removed / (2 L c_family)
                  (c: eager's syncs per expert hit and pass, 7 GPT-OSS, 5 Qwen3-MoE; 2 passes: forward and the
                  checkpointed recompute)
    fit: least squares without an intercept over processes, 90% t-intervals for u and beta.

The probe (gpu/jobs/moe_probe.sh): eager, sort_bincount and sort_split in one process at qwen3-30b-a3b 4 L 16k, the
shape where the term is largest. Its prediction, from the fit above (written to the campaign folder before the run,
PREDICTION_FILE): sort_split saves beta * (sort_bincount's - sort_split's whole-gradient GB) over sort_bincount, and
u * syncs_removed + beta * (eager's - sort_split's GB) over eager. The rule, per process, r = measured / predicted
(point) with the measured saving's 95% rep interval:
    "mechanism measured"   every process's r interval overlaps the band [0.8, 1.25] and lies above 0.5
    "not this mechanism"   every process's r interval lies below 0.5
    otherwise              "inconclusive"
judged on sort_split over sort_bincount (the contrast that moves only the backward's row gradients); sort_split
over eager is reported beside.

    python -m workbench.savings.moe_backward fit DIR [DIR ...]       # the fit; writes DIR/moe_backward.json (first DIR)
    python -m workbench.savings.moe_backward probe FIT_JSON DIR      # the probe's reading against the written prediction
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np

from workbench.errors import WorkbenchError

FIT_FILE = "moe_backward.json"
BYTES = 2  # bf16 row gradients (the autocast step's hidden states)
PASSES = 2  # forward and the checkpointed recompute: eager's loop runs in both
SYNCS_PER_EXPERT = {"gpt_oss": 7, "qwen3_moe": 5}
"""eager's syncs per expert hit, layer and pass (workbench/opts/moe.py's docstring; tests/test_moe.py counts them)."""
BAND = (0.8, 1.25)
FLOOR = 0.5
CONFIDENCE = 0.90


def shape(model: str) -> dict:
    """{"family", "E", "k", "H"} of an MoE preset."""
    from workbench.step.presets import PRESETS

    p = PRESETS.get(model)
    if p is None or p.family not in SYNCS_PER_EXPERT:
        raise WorkbenchError(f"{model}: not an MoE preset (qwen3_moe or gpt_oss)")
    c = p.config
    return {"family": p.family, "E": c.get("num_experts") or c.get("num_local_experts"),
            "k": c["num_experts_per_tok"], "H": c["hidden_size"]}


def row_gradient_elements(arm: str, *, layers: int, tokens: int, top_k: int, experts_hit: float, hidden: int) -> float:
    """Elements of whole-size row gradients one backward writes in the experts (the table in the module docstring)."""
    S = tokens * top_k
    per_layer = {"eager": experts_hit * tokens * hidden, "sort_bincount": experts_hit * S * hidden,
                 "sort_split": S * hidden}
    if arm not in per_layer:
        raise WorkbenchError(f"no row-gradient count for arm {arm!r} (eager, sort_bincount, sort_split)")
    return layers * per_layer[arm]


def gradient_gb(arm: str, model: str, layers: int, tokens: int, syncs_removed: float) -> float:
    s = shape(model)
    hit = syncs_removed / (PASSES * layers * SYNCS_PER_EXPERT[s["family"]])
    return row_gradient_elements(arm, layers=layers, tokens=tokens, top_k=s["k"], experts_hit=hit,
                                 hidden=s["H"]) * BYTES / 1e9


def points(dirs: list[str]) -> list[dict]:
    """moe_work's points (each plain moe run: saving, syncs removed), each with its extra_gb."""
    from workbench.savings import moe_work

    out = []
    for p in moe_work.points(dirs):
        if "s_ms" not in p:
            continue
        args = (p["model"], p["layers"], p["tokens"], p["syncs_removed"])
        out.append({**p, "extra_gb": gradient_gb("sort_bincount", *args) - gradient_gb("eager", *args)})
    return out


def fit(pts: list[dict]) -> dict:
    """saving_ms = u * syncs_removed - beta * extra_gb over processes: {"u_ms", "u_ci90", "beta_ms_per_gb",
    "beta_ci90", "df", "n", "resid_by_shape"}."""
    from scipy import stats as sps

    from workbench.savings.moe_work import _ols

    if len(pts) < 3:
        raise WorkbenchError(f"{len(pts)} processes: the two-term fit needs 3 or more")
    X = np.array([[p["syncs_removed"], -p["extra_gb"]] for p in pts])
    y = np.array([p["saving_ms"] for p in pts])
    beta, se, df = _ols(X, y)
    t = float(sps.t.ppf(0.5 + CONFIDENCE / 2, df))
    resid = y - X @ beta
    by: dict = {}
    for p, r in zip(pts, resid):
        by.setdefault(f"{p['model']} {p['layers']} L {p['tokens']}", []).append(float(r))
    return {"u_ms": float(beta[0]), "u_ci90": [float(beta[0] - t * se[0]), float(beta[0] + t * se[0])],
            "beta_ms_per_gb": float(beta[1]),
            "beta_ci90": [float(beta[1] - t * se[1]), float(beta[1] + t * se[1])], "df": int(df), "n": len(pts),
            "resid_by_shape_ms": {k: float(np.mean(v)) for k, v in by.items()},
            "resid_sd_ms": float(np.sqrt(resid @ resid / df))}


def predict(f: dict, model: str, layers: int, tokens: int, syncs_removed: float) -> dict:
    """The probe's predictions (ms, point and the interval beta's / u's 90% intervals give) at one shape."""
    gb = {a: gradient_gb(a, model, layers, tokens, syncs_removed) for a in ("eager", "sort_bincount", "sort_split")}
    d_sb = gb["sort_bincount"] - gb["sort_split"]
    d_eager = gb["eager"] - gb["sort_split"]
    b, (blo, bhi) = f["beta_ms_per_gb"], f["beta_ci90"]
    u, (ulo, uhi) = f["u_ms"], f["u_ci90"]
    return {"model": model, "layers": layers, "tokens": tokens, "syncs_removed": syncs_removed, "gb": gb,
            "split_over_sort_bincount_ms": [b * d_sb, blo * d_sb, bhi * d_sb],
            "split_over_eager_ms": [u * syncs_removed + b * d_eager, ulo * syncs_removed + blo * d_eager,
                                    uhi * syncs_removed + bhi * d_eager]}


def _rep_interval(results, name: str, base: str, arm: str) -> tuple[float, float, float] | None:
    from scipy import stats as sps

    from workbench.savings import verdicts

    reps = verdicts.rep_savings(results, name, base, arm)
    if len(reps) < 2:
        return None
    m, sd = float(np.mean(reps)), float(np.std(reps, ddof=1))
    h = float(sps.t.ppf(0.975, len(reps) - 1)) * sd / np.sqrt(len(reps))
    return m, m - h, m + h


def probe(fit_json: str, run_root: str) -> dict:
    """The probe's reading (module docstring) of every run folder under `run_root` against the prediction in
    `fit_json` (written before the run)."""
    from workbench.measure.results import load_run

    if not os.path.isfile(fit_json):
        raise WorkbenchError(f"{fit_json}: no such file (the fit's json, written before the probe ran)")
    pred = json.load(open(fit_json)).get("prediction")
    if not pred:
        raise WorkbenchError(f"{fit_json} holds no prediction: run `fit` with --predict first")
    rows = []
    for d, _, files in sorted(os.walk(run_root)):
        if "summary.json" not in files or "results.csv" not in files:
            continue
        results, summary, _ = load_run(d)
        for c in summary.get("comparisons", []):
            arms = {c["baseline"]["arm"], c["optimized"]["arm"]} | {o["arm"] for o in c.get("others", [])}
            if c.get("opt") != "moe" or not {"eager", "sort_bincount", "sort_split"} <= arms:
                continue
            row = {"folder": d, "equivalent": bool(c.get("equivalent")) and all(
                o.get("equivalent") for o in c.get("others", []))}
            for key, base in (("split_over_sort_bincount_ms", "sort_bincount"), ("split_over_eager_ms", "eager")):
                iv = _rep_interval(results, c["name"], base, "sort_split")
                p = pred[key][0]
                row[key] = None if iv is None else {"measured": list(iv), "predicted": pred[key],
                                                    "r": [v / p for v in iv]}
            rows.append(row)
    if not rows:
        raise WorkbenchError(f"{run_root}: no moe run with the arms eager, sort_bincount and sort_split")
    rs = [r["split_over_sort_bincount_ms"]["r"] for r in rows if r["split_over_sort_bincount_ms"]]
    if len(rs) < len(rows) or not all(r["equivalent"] for r in rows):
        decision = "inconclusive (a process without two reps, or arms not equivalent)"
    elif all(lo > FLOOR and lo <= BAND[1] and hi >= BAND[0] for _, lo, hi in rs):
        decision = "mechanism measured"
    elif all(hi < FLOOR for _, _, hi in rs):
        decision = "not this mechanism"
    else:
        decision = "inconclusive"
    return {"processes": rows, "decision": decision}


def _fmt(v: list) -> str:
    return f"{v[0]:.0f} [{v[1]:.0f}, {v[2]:.0f}]"


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m workbench.savings.moe_backward", description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("fit", help="the two-term fit over the plain moe runs under DIRs (writes DIRS[0]/" + FIT_FILE + ")")
    a.add_argument("dirs", nargs="+")
    a.add_argument("--predict", nargs=3, metavar=("MODEL", "LAYERS", "TOKENS"),
                   help="also write the probe's prediction at this shape (syncs removed: eager's count there, "
                        "2 L E c_family)")
    b = sub.add_parser("probe", help="read a probe run against the prediction written before it")
    b.add_argument("fit_json")
    b.add_argument("run_root")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "fit":
            pts = points(args.dirs)
            f = fit(pts)
            print(f"saving = u x syncs removed - beta x extra row-gradient GB, over {f['n']} processes ({f['df']} df):")
            print(f"  u {1000 * f['u_ms']:.1f} us a sync [{1000 * f['u_ci90'][0]:.1f}, {1000 * f['u_ci90'][1]:.1f}]"
                  f", beta {f['beta_ms_per_gb']:.2f} ms a GB [{f['beta_ci90'][0]:.2f}, {f['beta_ci90'][1]:.2f}] (90%)"
                  f", residual SD {f['resid_sd_ms']:.1f} ms")
            for k, v in sorted(f["resid_by_shape_ms"].items()):
                print(f"  {k:<28} mean residual {v:+6.1f} ms")
            if args.predict:
                model, layers, tokens = args.predict[0], int(args.predict[1]), int(args.predict[2])
                s = shape(model)
                removed = PASSES * layers * s["E"] * SYNCS_PER_EXPERT[s["family"]]
                f["prediction"] = predict(f, model, layers, tokens, removed)
                p = f["prediction"]
                print(f"prediction at {model} {layers} L {tokens} ({removed} syncs removed, every expert hit): "
                      f"sort_split over sort_bincount {_fmt(p['split_over_sort_bincount_ms'])} ms, over eager "
                      f"{_fmt(p['split_over_eager_ms'])} ms")
            out = os.path.join(args.dirs[0], FIT_FILE)
            with open(out, "w") as fh:
                json.dump(f, fh, indent=1)
            print(json.dumps({"out": out}))
        else:
            r = probe(args.fit_json, args.run_root)
            for row in r["processes"]:
                for key in ("split_over_sort_bincount_ms", "split_over_eager_ms"):
                    v = row[key]
                    if v:
                        print(f"{row['folder']}: {key[:-3].replace('_', ' ')}: measured {_fmt(v['measured'])} ms, "
                              f"predicted {_fmt(v['predicted'])}: r {v['r'][0]:.2f} [{v['r'][1]:.2f}, {v['r'][2]:.2f}]")
            print(f"decision: {r['decision']}")
    except WorkbenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
