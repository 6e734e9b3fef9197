"""The readings of MoE's two-term model (`moe_two_term`, its fit written before the runs these read;), and
the command.

The probe (studies/moe_two_term/moe_probe.sh): eager, sort_bincount and sort_split in one process at qwen3-30b-a3b 4 L 16k, the
shape where the term is largest. Its prediction, from the fit (`moe_two_term`; FIT_FILE in the campaign folder, written by
064f85a before the run): sort_split saves beta * (sort_bincount's - sort_split's whole-gradient GB) over
sort_bincount, and u * syncs_removed + beta * (eager's - sort_split's GB) over eager.
Rule (1), the first probe's (2 processes, profiles/2026-11-27_h200x2_moe_probe): per process, r = measured /
predicted (point) with the measured saving's 95% rep interval:
    "mechanism measured"   every process's r interval overlaps the band [0.8, 1.25] and lies above 0.5
    "not this mechanism"   every process's r interval lies below 0.5
    otherwise              "inconclusive"
judged on sort_split over sort_bincount (the contrast that moves only the backward's row gradients); sort_split
over eager is reported beside. It read "inconclusive": r 0.90 [0.45, 1.35] and 0.88 [0.78, 0.98].
Rule (2), for the next probe (studies/moe_two_term/moe_backward.sh), the process as unit (MIN_PROCESSES or more, else "not
read"). Two contrasts, each process's mean saving of sort_split over (a) eager and (b) sort_bincount, judged with
`verdicts.judge` against the fit (90%, the band [0.8, 1.25]) and Holm over the two:
    (a) predicted u x syncs removed + beta x (eager's - sort_split's GB): with the slices' backward gone, the saving is
        what the syncs alone (and eager's own row gradients) predict: the refutation's missing saving restored
    (b) predicted beta x (sort_bincount's - sort_split's GB): the backward term itself
    and (b)'s size, linear: its measured 90% interval (t over processes) above FLOOR x its prediction: "present";
    below it: "absent" (the ratio's log form has no interval where a saving is near 0)
    "mechanism measured"                     (a) confirmed, (b) present and neither refuted
    "not this mechanism (or not all of it)"  (a) or (b) refuted, or (b) absent
    otherwise                                "inconclusive"
History: first written in 07372fd with (b) alone; revised (this form) before any run it reads, because (b)'s prediction
carries beta's own se (9.1%), so at the first probe's ratio (0.89) no number of processes confirms it (measured
exactly: 0.89 [0.76, 1.04]), while (a)'s prediction has 3.9% (u is the fit's best-measured term). Planned
(`plan_probe`, 2000 draws, the first probe's ratios 0.93 and 0.89, a process SD of 10%): 8 processes "mechanism
measured" 0.89, 6 processes 0.80, "not this mechanism" 0 in both; at ratios 0.35 and 0.05 (the negative control: the
split saves nothing) "not this mechanism" 1.0. With MoE's between-run component as a lease's own shift (omega 13.7%,
profiles/between_runs.json; `lease_sd`): 0.55 and 0.53, "not this mechanism" 0.03-0.04 (the fit's lease and the
probe's differ; a lease that refits u and beta on its own GPUs would remove that shift, at twice the device time).
A probe on another GPU model than the fit's reads "not judged".
Rule (2) at another shape (`probe --shape MODEL LAYERS TOKENS`): the same rule, the fit's predictions at that shape with
every expert hit (`shape_prediction`, as `fit --predict` writes them for the probe shape). Written 2026-11-27 (10), after
the probe's rule (2) read "mechanism measured" (profiles/2026-11-27_h200x4_moe_backward) and before the run it reads:
qwen3-30b-a3b 6 L 12288 (studies/moe_two_term/moe_backward.sh RUN="q6l12k"; its predictions and planned chances in that header).

The two-term model as a revision, judged prospectively (`judge`): sort_bincount over eager on every shape under the
roots the fit did not use (`fitted_shapes`), MIN_PROCESSES or more, the process as unit, predicted u x syncs removed
- beta x extra GB with its se from the fit's covariance, `verdicts.judge` and Holm over the shapes judged together.
A run from before the fit was written (`written_utc` against the run_id's time) is a reading, never a confirmation
(`verdicts.exploratory`); another GPU model than the fit's reads "not judged". The prediction carries the fit's
GPUs (an H200 pair) to the judged run's: the between-lease component is not in its se.

    python -m studies.moe_two_term.moe_backward fit DIR [DIR ...] [--predict MODEL LAYERS TOKENS]   # -> DIR/moe_backward.json
    python -m studies.moe_two_term.moe_backward probe FIT_JSON DIR [DIR ...] [--rule 1|2]
    python -m studies.moe_two_term.moe_backward judge FIT_JSON DIR [DIR ...]
"""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

from workbench.errors import WorkbenchError
from workbench.measure import stats
from studies.moe_two_term.moe_work import moe_runs
from studies.moe_two_term.moe_two_term import (FIT_FILE, PASSES, SYNCS_PER_EXPERT, arms, fit, fix_runs, gradient_gb,
                                            points, predict, read_fit, runs_by_shape, shape)

BAND = (0.8, 1.25)
FLOOR = 0.5
MIN_PROCESSES = 4
"""Rule (2) and the held-out verdicts read a shape with this many processes or more."""


def _rep_interval(results, name: str, base: str, arm: str) -> tuple[float, float, float] | None:
    """One process's mean saving of `arm` over `base` with its 95% t-interval over reps (None below 2 reps)."""
    from workbench.savings import verdicts

    ti = stats.t_interval(verdicts.rep_savings(results, name, base, arm), confidence=0.95)
    return None if ti["ci"] is None else (ti["mean"], *ti["ci"])


def probe(fit_json: str, run_root: str) -> dict:
    """The probe's reading (module docstring) of every run folder under `run_root` against the prediction in
    `fit_json` (written before the run)."""
    pred = read_fit(fit_json).get("prediction")
    if not pred:
        raise WorkbenchError(f"{fit_json} holds no prediction: run `fit` with --predict first")
    rows = []
    for d, results, summary, _ in moe_runs([run_root]):
        for c in summary.get("comparisons", []):
            if c.get("opt") != "moe" or not {"eager", "sort_bincount", "sort_split"} <= set(arms(c)):
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


def _pred_se(f: dict, a_syncs: float, a_gb: float) -> float:
    """se of a_syncs * u + a_gb * beta from the fit's covariance."""
    g = np.array([a_syncs, a_gb])
    return float(np.sqrt(g @ np.array(f["cov"]) @ g))


def _judged(pred: float, pred_se: float, f: dict, savings: list[float]) -> dict:
    from workbench.savings import verdicts

    ti = stats.t_interval(savings)
    m, se, df = ti["mean"], ti["se"], ti["df"]
    return {"predicted_ms": pred, "predicted_se_ms": pred_se, "measured_ms": m, "measured_se_ms": se,
            "processes": len(savings),
            **verdicts.judge(pred, pred_se, m, se, df or None, predicted_df=f["df"])}


def _other_gpu(f: dict, runs: list[dict]) -> str | None:
    names = sorted({r["gpu_name"] for r in runs} - set(f.get("gpu_names") or []))
    return f"not judged: another GPU model ({', '.join(names)}; the fit's: {', '.join(f.get('gpu_names') or [])})" \
        if names else None


def shape_prediction(f: dict, model: str, layers: int, tokens: int) -> dict:
    """The fit's predictions at a shape, every expert hit (syncs removed 2 L E c_family), as `fit --predict` writes
    them for the probe shape."""
    s = shape(model)
    return predict(f, model, layers, tokens, PASSES * layers * s["E"] * SYNCS_PER_EXPERT[s["family"]])


def probe_processes(f: dict, roots: list[str], at: tuple[str, int, int] | None = None) -> dict:
    """Rule (2) (module docstring) over the probe shape's processes under `roots` (`at`: another shape's, its
    prediction from `shape_prediction`)."""
    pred = shape_prediction(f, *at) if at else (f.get("prediction") or {})
    runs = [r for r in runs_by_shape(roots).get((pred.get("model"), pred.get("layers"), pred.get("tokens")), [])
            if {"eager", "sort_bincount", "sort_split"} <= set(arms(r["c"]))]
    if len(runs) < MIN_PROCESSES:
        return {"decision": f"not read: {len(runs)} processes of the probe (rule (2) reads {MIN_PROCESSES} or more)",
                "processes": len(runs)}
    why = _other_gpu(f, runs)
    if why:
        return {"decision": why, "processes": len(runs)}
    from workbench.savings import verdicts

    def mean_saving(r, base):
        v = verdicts.rep_savings(r["results"], r["c"]["name"], base, "sort_split")
        return sum(v) / len(v) if v else None

    over = {b: [v for r in runs if (v := mean_saving(r, b)) is not None] for b in ("eager", "sort_bincount")}
    equivalent = all(arms(r["c"])["sort_split"].get("equivalent") for r in runs)
    return probe_verdict(f, pred, over["eager"], over["sort_bincount"], equivalent)


def probe_verdict(f: dict, pred: dict, over_eager: list[float], over_sort_bincount: list[float],
                  equivalent: bool = True) -> dict:
    """Rule (2) on each process's mean sort_split saving (ms) over eager and over sort_bincount, against the fit's
    prediction at the probe shape (`pred`: `moe_two_term.predict`)."""
    from workbench.savings import verdicts

    gb, n = pred["gb"], pred["syncs_removed"]
    d_eager, d_sb = gb["eager"] - gb["sort_split"], gb["sort_bincount"] - gb["sort_split"]
    a = _judged(f["u_ms"] * n + f["beta_ms_per_gb"] * d_eager, _pred_se(f, n, d_eager), f, over_eager)
    b = _judged(f["beta_ms_per_gb"] * d_sb, _pred_se(f, 0.0, d_sb), f, over_sort_bincount)
    verdicts.holm_family([a, b])
    ti = stats.t_interval(over_sort_bincount, confidence=0.90)
    half = FLOOR * b["predicted_ms"]
    if ti["se"]:  # (b)'s size, linear (a ratio's log form has no interval where the saving is near 0)
        lo, hi = b["measured_ci90"] = ti["ci"]
        b["size"] = "present" if lo > half else "absent" if hi < half else "undecided"
    else:
        b["size"] = "undecided"
    if not equivalent:
        decision = "inconclusive (arms not equivalent)"
    elif "refuted" in (a["verdict"], b["verdict"]) or b["size"] == "absent":
        decision = "not this mechanism (or not all of it)"
    elif a["verdict"] == "confirmed" and b["size"] == "present":
        decision = "mechanism measured"
    else:
        decision = "inconclusive"
    return {"over_eager": a, "over_sort_bincount": b, "decision": decision, "processes": len(over_eager)}


def plan_probe(f: dict, pred: dict, ratio_eager: float, ratio_sort_bincount: float, sd_rel: float, k: int,
               sims: int = 2000, seed: int = 0, lease_sd: float = 0.0) -> dict:
    """Each decision's chance under rule (2) with `k` processes whose savings lie at these ratios of the prediction,
    a process SD of `sd_rel` of the mean (log-normal), the lease's own level off by `lease_sd` (log-normal, shared by
    its processes: the between-run component): {decision: chance}."""
    rng = np.random.default_rng(seed)
    gb, n = pred["gb"], pred["syncs_removed"]
    means = (ratio_eager * (f["u_ms"] * n + f["beta_ms_per_gb"] * (gb["eager"] - gb["sort_split"])),
             ratio_sort_bincount * f["beta_ms_per_gb"] * (gb["sort_bincount"] - gb["sort_split"]))
    out: dict = {}
    for _ in range(sims):
        shift = float(np.exp(rng.normal(0, lease_sd))) if lease_sd else 1.0
        a, b = (list(m * shift * np.exp(rng.normal(0, sd_rel, k))) for m in means)
        d = probe_verdict(f, pred, a, b)["decision"]
        out[d] = out.get(d, 0) + 1 / sims
    return out


def judge_held_out(f: dict, roots: list[str]) -> list[dict]:
    """The two-term model on every shape under `roots` it was not fitted on (sort_bincount over eager, the process as
    unit), judged against the band and Holm-adjusted over the shapes judged together."""
    from workbench.savings import verdicts

    fitted = set(f.get("fitted_shapes") or [])
    rows = []
    for (model, layers, tokens), runs in sorted(runs_by_shape(roots).items()):
        key = f"{model} {layers} L {tokens}"
        runs = fix_runs(runs)
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

            removed = float(np.mean([arms(r["c"])["eager"]["syncs_per_step"] - arms(r["c"])["sort_bincount"][
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


def _fmt(v: list) -> str:
    return f"{v[0]:.0f} [{v[1]:.0f}, {v[2]:.0f}]"


def _fmt_judged(r: dict) -> str:
    ci = r.get("ratio_ci90")
    se = r.get("measured_se_ms")
    return (f"predicted {r['predicted_ms']:.0f} ms, measured {r['measured_ms']:.0f}"
            f"{f' (se {se:.0f})' if se else ''} over {r['processes']} processes: {r.get('ratio', float('nan')):.2f}"
            + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "") + f" -> {r['verdict']}")


def _shape_arg(v: list[str], flag: str) -> tuple[str, int, int]:
    """MODEL LAYERS TOKENS from the command line, LAYERS and TOKENS positive integers, MODEL a preset with a shape."""
    try:
        layers, tokens = int(v[1]), int(v[2])
    except ValueError:
        layers = tokens = 0
    if layers < 1 or tokens < 1:
        raise WorkbenchError(f"{flag} {' '.join(v)}: LAYERS and TOKENS must be positive integers")
    shape(v[0])  # an unknown model: its own one line
    return v[0], layers, tokens


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(allow_abbrev=False, prog="python -m studies.moe_two_term.moe_backward",
                                 description=" ".join(__doc__.split("\n\n")[0].split()),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("fit", allow_abbrev=False, help=f"the two-term fit over the plain moe runs under DIRs (writes DIRS[0]/{FIT_FILE})")
    a.add_argument("dirs", nargs="+")
    a.add_argument("--force", action="store_true", help="replace an existing fit (a record: runs after its written "
                   "time are judged against it)")
    a.add_argument("--predict", nargs=3, metavar=("MODEL", "LAYERS", "TOKENS"),
                   help="also write the probe's prediction at this shape (syncs removed: eager's count there, "
                        "2 L E c_family)")
    b = sub.add_parser("probe", allow_abbrev=False, help="read probe runs against the prediction written before them")
    b.add_argument("fit_json")
    b.add_argument("run_roots", nargs="+")
    b.add_argument("--shape", nargs=3, metavar=("MODEL", "LAYERS", "TOKENS"),
                   help="rule (2) at this shape's processes, its prediction from the fit (every expert hit), instead "
                        "of the prediction `fit --predict` wrote")
    b.add_argument("--rule", choices=("1", "2"), default="2",
                   help="1: the first probe's rule (per process, its reps; profiles/2026-11-27_h200x2_moe_probe); "
                        "2 (default): the process as unit (module docstring)")
    c = sub.add_parser("judge", allow_abbrev=False, help="the two-term model on held-out shapes (plain moe runs under RUN_ROOTS)")
    c.add_argument("fit_json")
    c.add_argument("run_roots", nargs="+")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "fit":
            if os.path.isfile(os.path.join(args.dirs[0], FIT_FILE)) and not args.force:
                raise WorkbenchError(f"{os.path.join(args.dirs[0], FIT_FILE)} exists: the fit later runs are judged "
                                     "against (its written time decides which runs came before it); --force to replace")
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
                model, layers, tokens = _shape_arg(args.predict, "--predict")
                p = f["prediction"] = shape_prediction(f, model, layers, tokens)
                removed = p["syncs_removed"]
                print(f"prediction at {model} {layers} L {tokens} ({removed} syncs removed, every expert hit): "
                      f"sort_split over sort_bincount {_fmt(p['split_over_sort_bincount_ms'])} ms, over eager "
                      f"{_fmt(p['split_over_eager_ms'])} ms")
            out = os.path.join(args.dirs[0], FIT_FILE)
            with open(out, "w") as fh:
                json.dump(f, fh, indent=1)
            print(json.dumps({"out": out}))
            return 0
        f = read_fit(args.fit_json)
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
            at = _shape_arg(args.shape, "--shape") if args.shape else None
            r = probe_processes(f, args.run_roots, at)
            for key in ("over_eager", "over_sort_bincount"):
                if key in r:
                    size = r[key].get("size")
                    ci = r[key].get("measured_ci90")
                    print(f"sort_split {key.replace('_', ' ')}: {_fmt_judged(r[key])}" + (
                        f"; size {size} (90% [{ci[0]:.0f}, {ci[1]:.0f}] ms against {FLOOR} x predicted)" if ci else
                        f"; size {size}" if size else ""))
            print(f"decision (rule 2): {r['decision']}")
        else:
            for r in judge_held_out(f, args.run_roots):
                print(f"{r['shape']:<28} " + (_fmt_judged(r) if "predicted_ms" in r and "p_confirm" in r else
                                             f"{r['processes']} processes: {r['verdict']}"))
    except WorkbenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
