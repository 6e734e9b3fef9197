"""The straggler term: does a one-GPU saving carry to N data-parallel ranks, plus the collective wait it removes?

    workbench straggler --one RUN_1GPU --two RUN_2GPU            # verdict per comparison, JSON last
    workbench straggler --one RUN_1GPU --two RUN_2GPU --write    # + straggler.json in the 2-GPU folder

    # N = ranks; S_N = the saving (baseline - optimized step ms) measured on N ranks; W = the exposed wait

Model (judged like the one-GPU savings models, `workbench.savings.verdicts.judge`):

    S_2 (predicted) = S_1 + (W_base - W_opt)

- S_1: the saving measured on one GPU, same GPU model, same shapes, same batches as rank 0 (the 1-GPU run), with
  its se at the rep level (`stats.paired_difference`).
- W: the wait that costs step time on two ranks, from the 2-GPU run's traces: per rank and traced step, the union
  of its collectives' wait intervals (`dist_waits.collective_waits`: matched NCCL kernels' start skew) less the
  rank's other GPU work (`dist_waits.exposed_waits`), averaged over ranks (in lockstep every rank's step lasts the
  slowest rank's time, so the mean rank's exposed wait is the step time the skew costs). Its se: per traced step the
  difference W_base - W_opt, t over traced steps.
- Measured S_2: the 2-GPU run's paired saving on the data-parallel step (max over ranks per step), rep as the unit.
- The instrument (`calibration.instrument_reason`): the traced 2-GPU baseline step must lie within
  `calibration.INSTRUMENT_TOL` of its timed step (the profiler slows the host, and with it the ranks' skew), else
  the verdict is "no verdict: instrument" with both numbers.

Why the summed wait is not used: each collective waits on its own stream while the compute stream goes on, and an
all-gather and a reduce-scatter wait at the same time, so the sum of waits can exceed the step (a sum of
waits longer than the step is possible). `exposed_wait_ms` counts only time the GPU had nothing else to do.

Past two ranks (a projection, not a measurement): if each rank's compute per step varies independently (each rank
packs its own documents), the mean rank waits E[max of N] - mean = sigma * e_N, with e_N the expected maximum of N
standard normals (e_2 = 0.564, e_4 = 1.029, e_8 = 1.424). The distributed part of the saving, D_2 = S_2 - S_1 (the
wait removed and anything else two ranks add), then grows as D_N = D_2 * e_N / e_2, so S_N = S_1 + D_2 * e_N / e_2,
with the CI of S_1 and S_2 (independent runs) carried through. A term that is not an order statistic (offload's
contention for host bandwidth) enters as a known T(N) (`projection(..., term=)`). Judged against N ranks by
`judge_projection` (`PROJECTION_RULE`) on the saving `measured_at_ranks` gives.

Inputs are written once per 2-GPU folder to `straggler_inputs.csv` (`--reduce`, from its traces), so the verdict
reproduces from committed folders without the traces. A comparison that either folder's VOID.json declares void gets
no verdict (`compare`: one row, verdict "void", the reason) and no saving (`_saving` refuses it in one line, so no
projection or `measured_at_ranks` reads one).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys

INPUTS_FILE = "straggler_inputs.csv"
OUT_FILE = "straggler.json"
E_MAX_NORMAL = {1: 0.0, 2: 0.5641895835, 4: 1.0293753730, 8: 1.4236003060, 16: 1.7659675010}
"""E[max of N iid standard normals] (order statistics; N=2 is 1/sqrt(pi))."""
PROJECT_N = (4, 8)
SAME_WORK_TOL = 0.03
"""The model assumes each rank does the 1-GPU run's work (collectives only add time): a 2-GPU baseline step shorter
than the 1-GPU one by more than this makes the comparison "not comparable"."""


def reduce_traces(run_dir: str) -> "pd.DataFrame":
    """Per comparison, arm, rank and traced step of a 2-GPU run folder: summed wait, exposed wait, exposed collective
    time, and the traced step (mean host `wb/step` window) -> `INPUTS_FILE`. Needs the folder's traces."""
    import pandas as pd

    from workbench.traces import dist_waits
    from workbench.traces.events import events_path, load_events

    summary = _json(os.path.join(run_dir, "summary.json"))
    rows = []
    for c in summary.get("comparisons", []):
        arms = [c["baseline"]["arm"], c["optimized"]["arm"]] + [o["arm"] for o in c.get("others", [])]
        for arm in arms:
            ev = {}
            for r in range(int((c.get("distributed") or {}).get("world_size") or 2)):
                path = events_path(run_dir, c["name"], f"{arm}.rank{r}")
                if path is None:
                    break
                raw = path.rsplit(".events.", 1)[0] + ".pt.trace.json.gz"  # its Chrome trace: the clock base
                ev[r] = dist_waits.absolute_events(load_events(path), dist_waits.trace_base_ns(raw))
            if len(ev) < 2:
                continue
            w, _ = dist_waits.collective_waits(ev)
            steps = max(dist_waits.traced_steps(e) for e in ev.values())
            x = dist_waits.exposed_waits(ev, w, steps)
            traced = [float((g["end_ns"] - g["start_ns"]).mean()) / 1e6 for g in
                      (e[(e["kind"] == "range") & (e["name"] == "wb/step") & e["stream"].isna()] for e in ev.values())
                      if len(g)]
            rows += [{"comparison": c["name"], "arm": arm, **rec,
                      "traced_step_ms": float(sum(traced) / len(traced)) if traced else math.nan}
                     for rec in x.to_dict("records")]
    df = pd.DataFrame(rows)
    df.to_csv(os.path.join(run_dir, INPUTS_FILE), index=False)
    return df


def _json(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def void_reason(run_dir: str, cmp_name: str) -> str | None:
    """"void: <reason> (<folder>/VOID.json)" when the run folder declares the comparison void, else None."""
    from workbench.measure.results import VOID_FILE, void_comparisons
    v = void_comparisons(run_dir).get(cmp_name)
    return f"void: {v['void_reason']} ({os.path.join(run_dir, VOID_FILE)})" if v else None


def _saving(run_dir: str, cmp_name: str, baseline: str, arm: str) -> dict:
    import pandas as pd

    from workbench.errors import WorkbenchError
    from workbench.measure.results import results_file
    from workbench.savings.verdicts import measured_saving
    why = void_reason(run_dir, cmp_name)
    if why:
        raise WorkbenchError(f"{cmp_name} of {run_dir} gives no saving: {why}")
    return measured_saving(pd.read_csv(results_file(run_dir)), cmp_name, baseline, arm)


def wait_removed(inputs: "pd.DataFrame", cmp_name: str, baseline: str, arm: str) -> dict:
    """W_base - W_opt (ms per step): per traced step the mean over ranks of each arm's exposed wait, differenced,
    then t over traced steps. Also each arm's mean exposed and summed wait, and the traced baseline step."""
    from workbench.measure import stats

    sel = inputs[inputs["comparison"] == cmp_name]
    per = {a: sel[sel["arm"] == a].groupby("step")[["exposed_wait_ms", "wait_ms"]].mean() for a in (baseline, arm)}
    if any(not len(v) for v in per.values()):
        return {}
    d = (per[baseline]["exposed_wait_ms"] - per[arm]["exposed_wait_ms"]).dropna()
    ti = stats.t_interval(d.to_list())
    base_traced = sel[sel["arm"] == baseline]["traced_step_ms"]
    return {"mean": ti["mean"], "se": ti["se"], "df": ti["df"], "ci95": ti["ci"], "traced_steps": int(len(d)),
            "exposed_wait_ms": {a: float(v["exposed_wait_ms"].mean()) for a, v in per.items()},
            "summed_wait_ms": {a: float(v["wait_ms"].mean()) for a, v in per.items()},
            "traced_baseline_step_ms": float(base_traced.mean()) if len(base_traced) else None}


def projection(s1: dict, s2: dict, n_ranks=PROJECT_N, term: dict | None = None) -> list[dict]:
    """S_N = S_1 + (S_2 - S_1) * e_N / e_2, with a normal-approximation 95% interval from the two runs' se.

    `term` {N: ms} (N = 2 and every projected N): a modelled change of the saving with the rank count that is not an
    order statistic (offload: the contention for host bandwidth, `offload_savings.contention_term`). It is added as
    modelled and taken out of what two ranks measured before the rest is scaled:

        S_N = S_1 + T(N) + (S_2 - S_1 - T(2)) * e_N / e_2

    T is treated as known (its inputs are medians of many copies): the interval is the one without it, shifted."""
    out = []
    for n in n_ranks:
        k = E_MAX_NORMAL[n] / E_MAX_NORMAL[2]
        t_n, t_2 = (float(term[n]), float(term[2])) if term else (0.0, 0.0)
        mean = s1["mean"] + t_n + (s2["mean"] - s1["mean"] - t_2) * k
        se = None
        if s1.get("se") is not None and s2.get("se") is not None:
            se = math.sqrt((s1["se"] * (1 - k)) ** 2 + (s2["se"] * k) ** 2)
        out.append({"ranks": n, "saving_ms": mean, "ci95": None if se is None else [mean - 1.96 * se,
                                                                                     mean + 1.96 * se],
                    "growth": k, **({"term_ms": t_n, "term_ms_at_2": t_2} if term else {})})
    return out


PROJECTION_RULE = ("confirmed when the measured N-rank saving's 95% CI overlaps the projection's 95% interval and "
                   "its point estimate lies inside the projection's interval; refuted when the two intervals are "
                   "disjoint; inconclusive otherwise (and when either interval is missing)")
"""How a projected S_N is judged against the saving measured on N ranks (fixed before the 4-GPU run that it judges;
`profiles/2026-11-23_h200x2_fsdp2/prospective_4gpu.json` holds it with the projections and its commit)."""


def judge_projection(projected_ci, measured_mean: float, measured_ci) -> str:
    """`PROJECTION_RULE`: "confirmed" / "refuted" / "inconclusive"."""
    if not projected_ci or not measured_ci or measured_mean is None or measured_mean != measured_mean:
        return "inconclusive"
    (plo, phi), (mlo, mhi) = sorted(projected_ci), sorted(measured_ci)
    if mhi < plo or mlo > phi:
        return "refuted"
    if plo <= measured_mean <= phi:
        return "confirmed"
    return "inconclusive"


def measured_at_ranks(run_dirs: list[str], cmp_name: str, baseline: str, arm: str) -> dict:
    """The saving (baseline - arm, ms per data-parallel step) measured on N ranks, from K run folders of the same
    command (K processes, each its own seed: `--seed S+k`). K >= 2: the process is the unit (each process's mean
    paired saving; t-interval over processes, K-1 df: what a rerun would see). K = 1: the rep is the unit (the
    run's paired saving, `verdicts.measured_saving`), a claim within this run, labelled so."""
    from workbench.measure import stats

    per = [_saving(d, cmp_name, baseline, arm) for d in run_dirs]
    if len(per) == 1:
        s = per[0]
        return {"mean": s["mean"], "ci95": s["ci95"], "se": s["se"], "df": s["df"], "unit": "rep (within this run)",
                "n_units": s.get("n_units"), "processes": 1, "per_process_ms": [s["mean"]]}
    ti = stats.t_interval([s["mean"] for s in per])
    return {"mean": ti["mean"], "ci95": ti["ci"], "se": ti["se"], "df": ti["df"], "unit": "process",
            "n_units": len(per), "processes": len(per), "per_process_ms": [s["mean"] for s in per],
            "per_process_ci95": [s["ci95"] for s in per]}


def compare(one_dir: str, two_dir: str) -> list[dict]:
    """One verdict per comparison found in both folders (by name, baseline and optimized arm)."""
    import pandas as pd

    from workbench.measure import stats
    from workbench.savings import calibration, verdicts

    one = {c["name"]: c for c in _json(os.path.join(one_dir, "summary.json")).get("comparisons", [])}
    two = _json(os.path.join(two_dir, "summary.json"))
    p = os.path.join(two_dir, INPUTS_FILE)
    inputs = pd.read_csv(p) if os.path.exists(p) else reduce_traces(two_dir)
    out = []
    for c in two.get("comparisons", []):
        b, o = c["baseline"]["arm"], c["optimized"]["arm"]
        c1 = one.get(c["name"])
        if not c1 or c1["baseline"]["arm"] != b or c1["optimized"]["arm"] != o:
            continue
        why = void_reason(one_dir, c["name"]) or void_reason(two_dir, c["name"])
        if why:
            out.append({"comparison": c["name"], "model": c.get("model"), "baseline": b, "optimized": o,
                        "projection": [], "verdict": "void", "reason": why})
            continue
        s1, s2 = _saving(one_dir, c["name"], b, o), _saving(two_dir, c["name"], b, o)
        base1, base2 = c1["baseline"].get("step_ms"), c["baseline"].get("step_ms")
        if base1 and base2 and base2 < base1 * (1 - SAME_WORK_TOL):
            out.append({"comparison": c["name"], "model": c.get("model"), "baseline": b, "optimized": o,
                        "one_gpu": {"saving_ms": s1["mean"], "ci95": s1["ci95"], "speedup": c1.get("speedup"),
                                    "speedup_ci95": c1.get("speedup_ci95"), "baseline_step_ms": base1},
                        "two_gpu": {"saving_ms": s2["mean"], "ci95": s2["ci95"], "speedup": c.get("speedup"),
                                    "speedup_ci95": c.get("speedup_ci95"), "baseline_step_ms": base2},
                        "projection": [], "verdict": "not comparable",
                        "reason": f"the 2-GPU baseline step ({base2:.0f} ms) is shorter than the 1-GPU one "
                                  f"({base1:.0f} ms) by more than {SAME_WORK_TOL:.0%}: each rank does not do the "
                                  "1-GPU run's work, so S_1 is not the per-rank saving"})
            continue
        w = wait_removed(inputs, c["name"], b, o) if len(inputs) else {}
        rec = {"comparison": c["name"], "model": c.get("model"), "layers": c.get("layers"), "tokens": c.get("tokens"),
               "baseline": b, "optimized": o,
               "one_gpu": {"saving_ms": s1["mean"], "ci95": s1["ci95"], "speedup": c1.get("speedup"),
                           "speedup_ci95": c1.get("speedup_ci95")},
               "two_gpu": {"saving_ms": s2["mean"], "ci95": s2["ci95"], "speedup": c.get("speedup"),
                           "speedup_ci95": c.get("speedup_ci95")},
               "projection": projection(s1, s2)}
        if not w:
            rec.update(verdict="inconclusive", reason="no 2-GPU traces of both arms: the wait term is unknown")
            out.append(rec)
            continue
        pred = s1["mean"] + w["mean"]
        se_p = None if s1["se"] is None or w["se"] is None else math.sqrt(s1["se"] ** 2 + w["se"] ** 2)
        df_p = stats.welch_satterthwaite_df([(s1["se"] ** 2, s1["df"]), (w["se"] ** 2, w["df"])]) if se_p else None
        timed_base = c["baseline"].get("step_ms")
        rec.update(wait_removed_ms=w, predicted_ms=pred, predicted_se=se_p, input_source="traced")
        why = calibration.instrument_reason({b: (w.get("traced_baseline_step_ms"), timed_base)})
        if why:
            rec.update(verdict=calibration.NO_VERDICT_INSTRUMENT, reason=why)
            out.append(rec)
            continue
        rec.update(verdicts.judge(pred, se_p, s2["mean"], s2["se"], s2["df"], predicted_df=df_p))
        out.append(rec)
    return out


def _fmt(v, ci=None, f="{:.1f}") -> str:
    if v is None or v != v:
        return "-"
    s = f.format(v)
    return s + (f" [{f.format(ci[0])}, {f.format(ci[1])}]" if ci else "")


def table(results: list[dict]) -> str:
    lines = ["comparison | 1-GPU saving ms | 2-GPU saving ms | wait removed ms | predicted ms | measured/predicted "
             "(90% CI) | verdict | projected saving 4 / 8 ranks ms"]
    for r in results:
        if r.get("verdict") == "void":
            lines.append(f"{r['comparison']} | {r['reason']}")
            continue
        w = r.get("wait_removed_ms") or {}
        proj = " / ".join(_fmt(p["saving_ms"], p["ci95"]) for p in r["projection"]) or "-"
        lines.append(" | ".join([r["comparison"], _fmt(r["one_gpu"]["saving_ms"], r["one_gpu"]["ci95"]),
                                 _fmt(r["two_gpu"]["saving_ms"], r["two_gpu"]["ci95"]), _fmt(w.get("mean"), w.get("ci95")),
                                 _fmt(r.get("predicted_ms")), _fmt(r.get("ratio"), r.get("ratio_ci90"), "{:.2f}"),
                                 r.get("verdict", "-"), proj]))
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(allow_abbrev=False, prog="workbench straggler", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--one", required=True, help="the 1-GPU run folder (python -m workbench.ab ...)")
    p.add_argument("--two", required=True, help="the 2-GPU run folder (torchrun --nproc-per-node 2 -m workbench.ab "
                                                "... --trace torch)")
    p.add_argument("--reduce", action="store_true", help=f"(re)write {INPUTS_FILE} from the 2-GPU folder's traces")
    p.add_argument("--write", action="store_true", help=f"write {OUT_FILE} into the 2-GPU folder")
    a = p.parse_args(argv)
    for d in (a.one, a.two):
        if not os.path.exists(os.path.join(d, "summary.json")):
            print(f"error: {d}: no summary.json (not a run folder)", file=sys.stderr)
            return 2
    if a.reduce:
        reduce_traces(a.two)
    res = compare(a.one, a.two)
    print(table(res))
    if a.write:
        from workbench.measure.results import atomic_write_json
        atomic_write_json(os.path.join(a.two, OUT_FILE), {"one_gpu_run": a.one, "two_gpu_run": a.two,
                                                          "comparisons": res})
    print(json.dumps({"comparisons": res}, default=float))
    return 0


if __name__ == "__main__":
    from workbench.cli import run_main
    raise SystemExit(run_main(main))
