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
shape where the term is largest. Its prediction, from the fit above (FIT_FILE in the campaign folder, written by
064f85a before the run): sort_split saves beta * (sort_bincount's - sort_split's whole-gradient GB) over
sort_bincount, and u * syncs_removed + beta * (eager's - sort_split's GB) over eager.
Rule (1), the first probe's (2 processes, profiles/2026-11-27_h200x2_moe_probe): per process, r = measured /
predicted (point) with the measured saving's 95% rep interval:
    "mechanism measured"   every process's r interval overlaps the band [0.8, 1.25] and lies above 0.5
    "not this mechanism"   every process's r interval lies below 0.5
    otherwise              "inconclusive"
judged on sort_split over sort_bincount (the contrast that moves only the backward's row gradients); sort_split
over eager is reported beside. It read "inconclusive": r 0.90 [0.45, 1.35] and 0.88 [0.78, 0.98].
Rule (2), written after that reading and before the next probe (gpu/jobs/moe_backward.sh): the process as unit
(MIN_PROCESSES or more, else "not read"). measured = the mean over processes of each one's mean sort_bincount ->
sort_split saving, its se over processes (K - 1 df); predicted = beta x that GB, se from beta's (the fit's df);
`verdicts.judge` against the band at 90%: "confirmed" reads "mechanism measured", "refuted" "not this mechanism (or
not all of it)", else "inconclusive". A probe on another GPU model than the fit's reads "not judged".

The two-term model as a revision, judged prospectively (`judge`): sort_bincount over eager on every shape under the
roots the fit did not use (`fitted_shapes`), MIN_PROCESSES or more, the process as unit, predicted u x syncs removed
- beta x extra GB with its se from the fit's covariance, `verdicts.judge` and Holm over the shapes judged together.
A run from before the fit was written (`written_utc` against the run_id's time) is a reading, never a confirmation
(`verdicts.exploratory`); another GPU model than the fit's reads "not judged". The prediction carries the fit's
GPUs (an H200 pair) to the judged run's: the between-lease component is not in its se.

    python -m workbench.savings.moe_backward fit DIR [DIR ...] [--predict MODEL LAYERS TOKENS]   # -> DIR/moe_backward.json
    python -m workbench.savings.moe_backward probe FIT_JSON DIR [DIR ...] [--rule 1|2]
    python -m workbench.savings.moe_backward judge FIT_JSON DIR [DIR ...]
"""
from __future__ import annotations

import json
import os
import sys
import time

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
MIN_PROCESSES = 4
"""Rule (2) and the held-out verdicts read a shape with this many processes or more."""


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
    cov = np.linalg.inv(X.T @ X) * float(resid @ resid) / df
    by: dict = {}
    for p, r in zip(pts, resid):
        by.setdefault(f"{p['model']} {p['layers']} L {p['tokens']}", []).append(float(r))
    return {"u_ms": float(beta[0]), "u_ci90": [float(beta[0] - t * se[0]), float(beta[0] + t * se[0])],
            "beta_ms_per_gb": float(beta[1]),
            "beta_ci90": [float(beta[1] - t * se[1]), float(beta[1] + t * se[1])], "df": int(df), "n": len(pts),
            "resid_by_shape_ms": {k: float(np.mean(v)) for k, v in by.items()},
            "resid_sd_ms": float(np.sqrt(resid @ resid / df)), "cov": cov.tolist(),
            "gpu_names": sorted({p.get("gpu_name") or "?" for p in pts})}


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


def _groups(roots: list[str]) -> dict:
    """{(model, layers, tokens): [run]} over the plain moe runs under `roots` (each run_id once): run = {"folder",
    "results", "c", "gpu_name"}."""
    from workbench.measure.results import load_run

    out: dict = {}
    seen: set = set()  # a merge copies its processes in beside the campaigns': each run_id once
    for root in roots:
        if not os.path.isdir(root):
            raise WorkbenchError(f"{root}: no such folder")
        for d, _, files in sorted(os.walk(root)):
            if not {"summary.json", "meta.json", "results.csv"} <= set(files) or "dose.json" in files:
                continue
            results, summary, meta = load_run(d)
            if summary.get("run_id") in seen:
                continue
            seen.add(summary.get("run_id"))
            for c in summary.get("comparisons", []):
                if c.get("opt") == "moe" and c.get("status") == "ok":
                    out.setdefault((c["model"], int(c["layers"]), int(c["tokens"])), []).append(
                        {"folder": d, "results": results, "c": c, "run_id": summary.get("run_id") or "",
                         "gpu_name": str((meta.get("device") or {}).get("gpu_name") or "?")})
    return out


def _arms(c: dict) -> dict:
    return {a["arm"]: a for a in [c["baseline"], c["optimized"], *c.get("others", [])]}


def _over_processes(values: list[float]) -> tuple[float, float | None, int]:
    m = float(np.mean(values))
    return (m, float(np.std(values, ddof=1) / np.sqrt(len(values))), len(values) - 1) if len(values) > 1 else (m, None, 0)


def _pred_se(f: dict, a_syncs: float, a_gb: float) -> float:
    """se of a_syncs * u + a_gb * beta from the fit's covariance."""
    g = np.array([a_syncs, a_gb])
    return float(np.sqrt(g @ np.array(f["cov"]) @ g))


def _judged(pred: float, pred_se: float, f: dict, savings: list[float]) -> dict:
    from workbench.savings import verdicts

    m, se, df = _over_processes(savings)
    return {"predicted_ms": pred, "predicted_se_ms": pred_se, "measured_ms": m, "measured_se_ms": se,
            "processes": len(savings),
            **verdicts.judge(pred, pred_se, m, se, df or None, predicted_df=f["df"])}


def _other_gpu(f: dict, runs: list[dict]) -> str | None:
    names = sorted({r["gpu_name"] for r in runs} - set(f.get("gpu_names") or []))
    return f"not judged: another GPU model ({', '.join(names)}; the fit's: {', '.join(f.get('gpu_names') or [])})" \
        if names else None


def probe_processes(f: dict, roots: list[str]) -> dict:
    """Rule (2), written 2026-11-27 (9) after the first probe and before the next (module docstring): sort_split over
    sort_bincount at the probe shape, the process as unit, judged (`verdicts.judge`) against beta x the GB it removes."""
    pred = f.get("prediction") or {}
    runs = [r for r in _groups(roots).get((pred.get("model"), pred.get("layers"), pred.get("tokens")), [])
            if {"sort_bincount", "sort_split"} <= set(_arms(r["c"]))]
    if len(runs) < MIN_PROCESSES:
        return {"decision": f"not read: {len(runs)} processes of the probe (rule (2) reads {MIN_PROCESSES} or more)",
                "processes": len(runs)}
    why = _other_gpu(f, runs)
    if why:
        return {"decision": why, "processes": len(runs)}
    from workbench.savings import verdicts

    gb = pred["gb"]
    sav = [sum(v) / len(v) for r in runs if (v := verdicts.rep_savings(r["results"], r["c"]["name"], "sort_bincount",
                                                                          "sort_split"))]
    equivalent = all(_arms(r["c"])["sort_split"].get("equivalent") for r in runs)
    return probe_verdict(f, gb["sort_bincount"] - gb["sort_split"], sav, equivalent)


def probe_verdict(f: dict, d_gb: float, savings: list[float], equivalent: bool = True) -> dict:
    """Rule (2) on each process's mean sort_bincount -> sort_split saving (ms), against beta x `d_gb`."""
    j = _judged(f["beta_ms_per_gb"] * d_gb, _pred_se(f, 0.0, d_gb), f, savings)
    if not equivalent:
        j["verdict"] = "inconclusive"
    j["decision"] = {"confirmed": "mechanism measured", "refuted": "not this mechanism (or not all of it)"}.get(
        j["verdict"], "inconclusive")
    return j


def judge_held_out(f: dict, roots: list[str]) -> list[dict]:
    """The two-term model on every shape under `roots` it was not fitted on (sort_bincount over eager, the process as
    unit), judged against the band and Holm-adjusted over the shapes judged together."""
    from workbench.savings import verdicts

    fitted = set(f.get("fitted_shapes") or [])
    rows = []
    for (model, layers, tokens), runs in sorted(_groups(roots).items()):
        key = f"{model} {layers} L {tokens}"
        runs = [r for r in runs if r["c"]["baseline"]["arm"] == "eager" and r["c"]["optimized"]["arm"] == "sort_bincount"]
        if not runs:
            continue
        row = {"shape": key, "processes": len(runs)}
        if key in fitted:
            row["verdict"] = "not judged: a shape the fit used"
        elif (why := _other_gpu(f, runs)) is not None:
            row["verdict"] = why
        elif not all(r["c"].get("equivalent") for r in runs):
            row["verdict"] = "not judged: arms not equivalent"
        else:
            from workbench.savings.process_savings import process_saving

            removed = float(np.mean([_arms(r["c"])["eager"]["syncs_per_step"] - _arms(r["c"])["sort_bincount"][
                "syncs_per_step"] for r in runs]))
            extra = (gradient_gb("sort_bincount", model, layers, tokens, removed)
                     - gradient_gb("eager", model, layers, tokens, removed))
            sav = [v for r in runs if (v := process_saving(r["results"], r["c"])) is not None]
            row.update({"syncs_removed": removed, "extra_gb": extra,
                        **_judged(f["u_ms"] * removed - f["beta_ms_per_gb"] * extra, _pred_se(f, removed, -extra),
                                  f, sav)})
            row["seen"] = any(str(r["run_id"]) < str(f.get("written_utc") or "") for r in runs)
        rows.append(row)
    judged = [r for r in rows if "p_confirm" in r and r["processes"] >= MIN_PROCESSES]
    for r in rows:
        if "p_confirm" in r and r["processes"] < MIN_PROCESSES:
            r["verdict"] = f"not read: {r['processes']} processes (the rule reads {MIN_PROCESSES} or more)"
    verdicts.holm_family([r for r in judged if not r["seen"]])
    for r in judged:
        if r["seen"]:  # a run from before the fit was written: a reading, never a confirmation
            r["verdict"] = verdicts.exploratory(r["verdict"])
    return rows


def by_pass(f: dict, fit_json: str) -> list[dict]:
    """Per shape of the fit's own runs (`dirs`, relative to the fit's folder): the mean saving of the forward, the
    backward and the step (ms, from the timed steps' CUDA events), the forward's per removed sync (us), the extra GB
    and the two-term prediction: what notebook 02 draws."""
    root = os.path.dirname(os.path.abspath(fit_json))
    dirs = [os.path.normpath(os.path.join(root, d)) for d in f.get("dirs") or ["."]]
    rows = []
    for (model, layers, tokens), runs in sorted(_groups(dirs).items(), key=lambda kv: (kv[0][0], kv[0][2])):
        runs = [r for r in runs if r["c"]["baseline"]["arm"] == "eager" and r["c"]["optimized"]["arm"] == "sort_bincount"]
        if not runs:
            continue
        d = {k: float(np.mean([r["c"]["baseline"][k] - r["c"]["optimized"][k] for r in runs]))
             for k in ("fwd_ms", "bwd_ms", "step_ms", "syncs_per_step")}
        extra = (gradient_gb("sort_bincount", model, layers, tokens, d["syncs_per_step"])
                 - gradient_gb("eager", model, layers, tokens, d["syncs_per_step"]))
        rows.append({"shape": f"{model} {layers} L {tokens}", "processes": len(runs),
                     "syncs_removed": d["syncs_per_step"], "fwd_saving_ms": d["fwd_ms"], "bwd_saving_ms": d["bwd_ms"],
                     "step_saving_ms": d["step_ms"], "fwd_us_per_sync": 1000 * d["fwd_ms"] / d["syncs_per_step"],
                     "extra_gb": extra,
                     "predicted_ms": f["u_ms"] * d["syncs_per_step"] - f["beta_ms_per_gb"] * extra})
    return rows


def _fmt(v: list) -> str:
    return f"{v[0]:.0f} [{v[1]:.0f}, {v[2]:.0f}]"


def _fmt_judged(r: dict) -> str:
    ci = r.get("ratio_ci90")
    se = r.get("measured_se_ms")
    return (f"predicted {r['predicted_ms']:.0f} ms, measured {r['measured_ms']:.0f}"
            f"{f' (se {se:.0f})' if se else ''} over {r['processes']} processes: {r.get('ratio', float('nan')):.2f}"
            + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "") + f" -> {r['verdict']}")


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m workbench.savings.moe_backward", description=" ".join(__doc__.split("\n\n")[0].split()),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("fit", help="the two-term fit over the plain moe runs under DIRs (writes DIRS[0]/" + FIT_FILE + ")")
    a.add_argument("dirs", nargs="+")
    a.add_argument("--predict", nargs=3, metavar=("MODEL", "LAYERS", "TOKENS"),
                   help="also write the probe's prediction at this shape (syncs removed: eager's count there, "
                        "2 L E c_family)")
    b = sub.add_parser("probe", help="read probe runs against the prediction written before them")
    b.add_argument("fit_json")
    b.add_argument("run_roots", nargs="+")
    b.add_argument("--rule", choices=("1", "2"), default="2",
                   help="1: the first probe's rule (per process, its reps; profiles/2026-11-27_h200x2_moe_probe); "
                        "2 (default): the process as unit (module docstring)")
    c = sub.add_parser("judge", help="the two-term model on held-out shapes (plain moe runs under RUN_ROOTS)")
    c.add_argument("fit_json")
    c.add_argument("run_roots", nargs="+")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "fit":
            pts = points(args.dirs)
            f = fit(pts)
            f["fitted_shapes"] = sorted({f"{p['model']} {p['layers']} L {p['tokens']}" for p in pts})
            f["written_utc"] = time.strftime("%Y%m%d-%H%M%S", time.gmtime())  # runs before it: exploratory
            f["dirs"] = [os.path.relpath(d, args.dirs[0]) for d in args.dirs]  # from the fit's folder (by_pass)
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
            return 0
        f = _read_fit(args.fit_json)
        if args.cmd == "probe" and args.rule == "1":
            r = probe(args.fit_json, args.run_roots[0])
            for row in r["processes"]:
                for key in ("split_over_sort_bincount_ms", "split_over_eager_ms"):
                    v = row[key]
                    if v:
                        print(f"{row['folder']}: {key[:-3].replace('_', ' ')}: measured {_fmt(v['measured'])} ms, "
                              f"predicted {_fmt(v['predicted'])}: r {v['r'][0]:.2f} [{v['r'][1]:.2f}, {v['r'][2]:.2f}]")
            print(f"decision (rule 1): {r['decision']}")
        elif args.cmd == "probe":
            r = probe_processes(f, args.run_roots)
            if "predicted_ms" in r:
                print(f"sort_split over sort_bincount: {_fmt_judged(r)}")
            print(f"decision (rule 2): {r['decision']}")
        else:
            for r in judge_held_out(f, args.run_roots):
                print(f"{r['shape']:<28} " + (_fmt_judged(r) if "predicted_ms" in r and "p_confirm" in r else
                                             f"{r['processes']} processes: {r['verdict']}"))
    except WorkbenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def _read_fit(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            f = json.load(fh)
    except (OSError, ValueError) as e:
        raise WorkbenchError(f"{path}: cannot read the fit ({type(e).__name__}: {e}); run `fit` first") from None
    if "cov" not in f:
        raise WorkbenchError(f"{path}: a fit without its covariance (written before 2026-11-27 (9)'s rule 2): "
                             "rerun `fit` over the same folders")
    return f


if __name__ == "__main__":
    raise SystemExit(main())
