"""A sync-driven savings model's input measured without the instrument: the dose-response.

    python -m workbench.savings.dose_fit DIR [--calibration FILE]     # DIR: a `python -m workbench.ab.dose` folder

    # u = units of the fix (packing: metadata builds avoided per step; moe: MoE layers switched to sort_bincount),
    # K = processes per timing mode, c = the model's traced input per unit (ms), slope = measured saving per unit (ms)

`workbench.ab.dose` times the levels u_0 = 0 .. u_max of one fix as the arms of one engine comparison per process
(Williams order, discarded warm-up rep), K processes per timing mode: `none` (no instrument but NVTX), `torch` (the
same timed steps with torch.profiler on), `nsys` (the process under Nsight Systems, the timed reps in its capture
range); and one traced pass per level in one process (`dose_run.json` `traced`). Read here:

- slope (per mode): per process the OLS slope of step time on u (the saving per unit), the mean over processes
  with its t-interval (K - 1 df), and the quadratic term over processes (`replication.dose_slope`): its CI
  excluding 0 says the response is not linear in u, a finding about the model's form (each unit saving the same).
- c (traced, from the traced process): packing: s per build, the GPU idle the build causes plus its kernels
  (`packing_savings.packing_builds`), per traced step pooled over the levels that build, t-interval over steps;
  moe: the moe model's predicted saving between u = 0 and u_max (`moe_savings.moe_model`, delta method over traced
  steps) / u_max.
- beside the decision, not part of it: c from every process that traced every level, its mean and t-interval over
  those processes, and theta from it (`c_over_processes`): the traced input's between-process spread.
- theta = slope(none) / c with Fieller's 95% interval (`stats.fieller_ratio`: slope and c independent, t at the
  smaller df): the instrument's factor on the model's input.
- the profiler x dose interaction per instrumented mode: slope(mode) - slope(none), Welch over processes
  (`stats.welch`).
- syncs per step per level (the counted pass): their slope per unit, which must be the model's syncs per unit.

The processes' environments are compared (`results.environment_diff`: every package version, the NVTX backend, git
sha, GPU, precision); where they differ the analysis says so ("mixed environment: nvtx 0.2.17 in none/p01, none in
none/p00, ...", `environment` in the JSON), beside the decision, which stands.

The decision (`decide`), fixed at this commit before any GPU run of it: see its docstring. Written: DIR/
dose_analysis.json, and with --calibration FILE the entry {"theta", "ci95", "source", "commit", "decision"} under
the optimization's name (other entries of FILE kept), the instrument factor the verdicts read.
"""
from __future__ import annotations

import argparse
import json
import math
import os

import numpy as np
import pandas as pd

from workbench.errors import WorkbenchError
from workbench.measure import replication, stats
from workbench.measure.machine_label import machine_label
from workbench.savings import common, contract

BAND = (0.8, 1.25)
"""theta's band: the model's input agrees with the untimed dose-response (the verdicts' band)."""
AGREE_REL = 0.10
"""Slopes with and without the profiler "agree" when the interaction's CI lies within +-10% of the untimed slope."""
FINE, INFLATION, RIVAL, INCONCLUSIVE = ("model and instrument fine", "instrument inflation",
                                        "rival explanation (host work)", "inconclusive")
RUN_FILE, PROCESS_FILE, OUT_FILE = "dose_run.json", "dose.json", "dose_analysis.json"


def decide(theta_ci95, interaction_ci95, slope_untimed_ms: float) -> tuple[str, str]:
    """The decision rule, fixed before the runs it judges, in this order:

    1. "model and instrument fine": theta's 95% CI lies inside the band [0.8, 1.25]. (Not "overlaps", which passes
       any CI wide enough to reach the band.)
    2. "instrument inflation": theta's CI lies below the band (hi < 0.8) AND the slope under the tracer that gave c
       exceeds the untimed slope (the interaction's 95% CI lies above 0): the instrument inflates the input, and
       inflates the saving it times too.
    3. "rival explanation (host work)": theta's CI lies below the band AND the slopes with and without the tracer
       agree (the interaction's CI inside +-10% of the untimed slope): the saving per unit is below c whatever the
       instrument; part of the traced idle is the host's own work, which removing the sync does not remove.
    4. "inconclusive": anything else (no bounded theta, a CI that reaches into the band and out of it, theta above
       the band, an interaction neither clear nor within +-10%, a tracer mode that did not run).
    Returns (decision, why)."""
    if theta_ci95 is None:
        return INCONCLUSIVE, "no bounded theta (c's own CI reaches 0, or a slope is missing)"
    lo, hi = theta_ci95
    if BAND[0] <= lo and hi <= BAND[1]:
        return FINE, f"theta's CI [{lo:.2f}, {hi:.2f}] lies inside the band [{BAND[0]}, {BAND[1]}]"
    if hi >= BAND[0]:
        return INCONCLUSIVE, (f"theta's CI [{lo:.2f}, {hi:.2f}] reaches into the band [{BAND[0]}, {BAND[1]}] and out "
                              "of it: more processes")
    if lo > BAND[1]:
        return INCONCLUSIVE, f"theta's CI [{lo:.2f}, {hi:.2f}] lies above the band: the model under-predicts"
    if interaction_ci95 is None:
        return INCONCLUSIVE, f"theta's CI [{lo:.2f}, {hi:.2f}] lies below the band; no profiler x dose interaction"
    ilo, ihi = interaction_ci95
    tol = AGREE_REL * abs(slope_untimed_ms)
    if ilo > 0:
        return INFLATION, (f"theta's CI [{lo:.2f}, {hi:.2f}] lies below the band and the traced slope exceeds the "
                           f"untimed one by [{ilo:.3g}, {ihi:.3g}] ms per unit")
    if -tol <= ilo and ihi <= tol:
        return RIVAL, (f"theta's CI [{lo:.2f}, {hi:.2f}] lies below the band and the slopes agree (interaction "
                       f"[{ilo:.3g}, {ihi:.3g}] ms within +-{tol:.3g})")
    return INCONCLUSIVE, (f"theta's CI [{lo:.2f}, {hi:.2f}] lies below the band; the interaction [{ilo:.3g}, "
                          f"{ihi:.3g}] ms neither excludes 0 upward nor lies within +-{tol:.3g}")


# --- reading a dose folder ------------------------------------------------------------------------------------------

def _json(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def process_points(run_dir: str) -> list[tuple[float, float]]:
    """(units, mean step_ms) per (level, rep) of one process's timed steps (results.csv, the engine's rows)."""
    from workbench.measure.results import engine_step_rows, results_file

    dose = _json(os.path.join(run_dir, PROCESS_FILE))
    p = results_file(run_dir)
    if not os.path.exists(p):
        return []
    df = engine_step_rows(pd.read_csv(p))
    df = df[df["comparison"] == dose["comparison"]]
    units = dose["arms"]
    g = df[df["arm"].isin(units)].groupby(["arm", "rep"])["value"].mean()
    return [(float(units[a]), float(v)) for (a, _), v in g.items()]


def syncs_per_level(run_dir: str) -> dict:
    """{units: syncs per step} of one process's counted pass (summary.json)."""
    dose = _json(os.path.join(run_dir, PROCESS_FILE))
    s = _json(os.path.join(run_dir, "summary.json"))
    c = next(c for c in s["comparisons"] if c.get("name") == dose["comparison"])
    arms = [c.get("baseline"), c.get("optimized"), *(c.get("others") or [])]
    return {dose["arms"][a["arm"]]: a.get("syncs_per_step") for a in arms if a and a.get("arm") in dose["arms"]}


def traced_c(run_dir: str) -> dict:
    """The model's traced input per unit from one process's traces of every level: {"value_ms", "se_ms", "df",
    "ci95", "source", "per_level": {units: traced value}, "n_steps"}."""
    from workbench.traces.events import events_path, load_events

    dose = _json(os.path.join(run_dir, PROCESS_FILE))
    cmp_name, arms, opt = dose["comparison"], dose["arms"], dose["opt"]
    ev = {a: load_events(p) for a in arms if (p := events_path(run_dir, cmp_name, a))}
    if not ev:
        raise WorkbenchError(f"{run_dir}: no traces of the dose levels (run `workbench.ab.dose` with --trace torch)")
    tracer = _json(os.path.join(run_dir, "meta.json")).get("args", {}).get("trace")
    fn = contract.member(common.module(opt), "dose_traced_input")
    if fn is None:
        raise WorkbenchError(f"no traced input per unit for --opt {opt} (its savings model has no dose_traced_input)")
    return fn(ev, arms, syncs_per_level(run_dir), tracer)


def c_over_processes(per_process: dict, slope: dict | None) -> dict | None:
    """Beside the rule's c (one traced process, `traced_c`): c from EVERY process of the folder that traced every
    level (`per_process`: {folder: traced_c(...)}), its mean and t-interval over those processes (K_c - 1 df), and
    theta = untimed slope / that mean (Fieller, t at the smaller df). None with fewer than 2 such processes. Not the
    rule's reading (`decide` reads `c`): reported because the traced input varies between processes, which one
    process's interval over its own steps cannot show (MoE on gpt-oss-20b: 39.7-75.3 ms per layer over three)."""
    vals = {k: v["value_ms"] for k, v in per_process.items() if v and v.get("value_ms") == v.get("value_ms")}
    if len(vals) < 2:
        return None
    t = stats.t_interval(list(vals.values()))
    out = {"per_process_ms": vals, "value_ms": t["mean"], "se_ms": t["se"], "df": t["df"], "ci95": t["ci"],
           "K": t["n"], "method": "mean of each traced process's c, t-interval over processes", "theta": None,
           "reading": "not the rule's (decide reads c from the one traced process named in dose_run.json)"}
    if slope and slope.get("slope_se") is not None:
        out["theta"] = stats.fieller_ratio(slope["slope_ms"], slope["slope_se"], slope["df"], t["mean"], t["se"],
                                           t["df"])
    return out


UNKNOWN_MACHINE = "unknown"
"""A process whose machine no record names (the first invocation of profiles/2026-11-26_h100_dose, one machine by its
COMMAND.txt): such processes count as one machine."""


def machine_of(dose_dir: str, entry: dict) -> str:
    """The machine a dose process ran on: its dose_run.json entry's `machine` (`workbench.ab.dose_merge` writes it),
    else its meta.json device UUID, else `UNKNOWN_MACHINE`."""
    if entry.get("machine") and entry["machine"] != "unknown":
        return str(entry["machine"])[:12]
    meta = os.path.join(dose_dir, entry["folder"], "meta.json")
    uuid = ((_json(meta).get("device") or {}).get("uuid")) if os.path.isfile(meta) else None
    return str(uuid)[:12] if uuid else UNKNOWN_MACHINE


def machine_component(points: list, machines: list[str]) -> dict | None:
    """The untimed slope with the machine as its unit, where the dose's processes ran on J >= 2 machines: a one-way
    random-effects ANOVA of the processes' slopes by machine (each slope `replication.dose_slope` of one process).
    Returns {"J", "K", "per_machine" {machine: [slopes]}, "F", "p" (omega = 0), "omega_ms" (MoM, truncated at 0),
    "slope_se", "df", "method"}: where omega > 0, the se of the mean slope with the machine effect in it,
    Var = (MSW K + omega^2 sum n_j^2) / K^2, written as a MSB + b MSW with Welch-Satterthwaite df (J - 1 and K - J);
    where omega is 0, "slope_se" None: the process-level se stands. None with fewer than 2 machines or no process to
    spare. Why: the packing dose's 21 processes on five H100s differ by machine (F p 0.013; machine means 0.95 to 1.30
    ms per build), so a t-interval over processes, as if independent, is too narrow for a slope carried to another
    machine."""
    from scipy import stats as sps

    by: dict = {}
    for pts, m in zip(points, machines):
        sl = replication.dose_slope([pts]) if len(pts) >= 2 else {"K": 0}
        if sl["K"]:
            by.setdefault(m, []).append(float(sl["slope_ms"]))
    n = [len(v) for v in by.values()]
    J, K = len(by), sum(n)
    if J < 2 or K - J < 1:
        return None
    anova = replication.machine_prediction([[[x] for x in v] for v in by.values()])  # the one-way ANOVA's owner
    msb, msw, n0 = anova["msb"], anova["msw"], anova["n0"]
    f = msb / msw if msw > 0 else math.inf
    om2 = max(0.0, (msb - msw) / n0)
    p = float(sps.f.sf(f, J - 1, K - J)) if math.isfinite(f) else 0.0
    out = {"J": J, "K": K, "per_machine": by, "F": f, "p": p, "omega_ms": math.sqrt(om2), "slope_se": None, "df": None,
           "method": "one-way random effects of the process slopes by machine (MoM); se of the mean slope with the "
                     "machine effect, Welch-Satterthwaite df"}
    if om2 > 0:
        a = sum(x * x for x in n) / (n0 * K * K)
        parts = [(a * msb, J - 1), ((1 / K - a) * msw, K - J)]
        var = max(sum(v for v, _ in parts), msw / K)
        out.update(slope_se=math.sqrt(var), df=stats.welch_satterthwaite_df(parts))
    return out


def new_machine_interval(per_machine: dict, n: int) -> dict | None:
    """The 95% prediction interval for the mean untimed slope of `n` processes on a machine the dose did not run on,
    from its processes' slopes by machine ({machine: [slopes]}, `machine_component`'s "per_machine"):
    `replication.machine_prediction` with `n_new` = n (the machine effect omega^2 in full, the process part / n).
    {"n", "pi95", "df", "machines"}; None with no process to spare. Given one machine (or every process pooled as
    one), the interval assumes no machine component: the processes-only interval, the control of the held-out check
    in profiles/2026-11-27_h100_same_machine/COMMAND.txt (a new machine's mean inside the five machines' interval,
    outside the processes-only one)."""
    groups = [[[float(x)] for x in v] for v in per_machine.values() if v]
    if sum(len(g) for g in groups) - len(groups) < 1:
        return None
    mp = replication.machine_prediction(groups, n_new=n)
    c = mp["log_mean"]  # the plain mean of the values given (slopes here, not logs); pi95 is exp(c -+ half)
    h = math.log(mp["pi95"][1]) - c
    return {"n": n, "pi95": [c - h, c + h], "df": mp["pi_df"], "machines": len(groups)}


def theta_by_machine(mode: dict, c: dict | None) -> dict | None:
    """Beside the rule's theta (not its reading: `decide` reads the process-level one, as fixed before the runs):
    theta = untimed slope / c with the slope's se taken with the machine as its unit (`machine_component`), where
    the machines differ; None otherwise."""
    mc = mode.get("machines") or {}
    if not mc.get("slope_se") or not c or c.get("se_ms") is None:
        return None
    return stats.fieller_ratio(mode["slope_ms"], mc["slope_se"], mc["df"], c["value_ms"], c["se_ms"], c["df"])


def estimate(points: dict, c: dict | None) -> dict:
    """The statistics and the decision from {timing mode: [per process: [(units, step_ms)]]} and the traced c
    ({"value_ms", "se_ms", "df", "tracer"} or None): {"modes": {mode: `replication.dose_slope` + "theta" (Fieller) +
    "interaction" (against none)}, "decision": {...}}."""
    modes = {mode: replication.dose_slope(pts) for mode, pts in points.items()}
    none = modes.get("none")
    for mode, m in modes.items():
        m["theta"] = (stats.fieller_ratio(m["slope_ms"], m["slope_se"], m["df"], c["value_ms"], c["se_ms"], c["df"])
                      if c and m.get("slope_se") is not None and c.get("se_ms") is not None else None)
        if none is not None and mode != "none":
            w = stats.welch(none["per_process"], m["per_process"])
            m["interaction"] = {"delta_ms": w["delta_ms"], "ci95": w["ci95"], "p": w["p"],
                                "method": "slope(mode) - slope(none), Welch over processes"}
    tracer = (c or {}).get("tracer")
    theta = (none or {}).get("theta") or {}
    inter = (modes.get(tracer) or {}).get("interaction") or {}
    decision, why = decide(theta.get("ci95"), inter.get("ci95"), (none or {}).get("slope_ms") or math.nan)
    return {"modes": modes, "decision": {"decision": decision, "why": why, "tracer": tracer,
                                         "rule": "workbench.savings.dose_fit.decide", "linear": (none or {}).get("linear")}}


def analyse(dose_dir: str) -> dict:
    """The whole analysis of one `workbench.ab.dose` folder (the module docstring), as written to dose_analysis.json."""
    run = _json(os.path.join(dose_dir, RUN_FILE))
    folders: dict = {}
    machines: dict = {}
    for p in run["processes"]:
        if p.get("rc") == 0:
            folders.setdefault(p["timing"], []).append(os.path.join(dose_dir, p["folder"]))
            machines.setdefault(p["timing"], []).append(machine_of(dose_dir, p))
    try:
        c = traced_c(os.path.join(dose_dir, run["traced"])) if run.get("traced") else None
    except Exception as e:  # noqa: BLE001 - the slopes stand without c (a CPU run's traces hold no GPU time)
        c = None
        out_why = f"no traced c: {type(e).__name__}: {e}"
    else:
        out_why = None if c else "no traced pass (run with --trace torch)"
    points = {mode: [process_points(d) for d in dirs] for mode, dirs in folders.items()}
    from workbench.measure.results import environment_diff
    ran = [d for dirs in folders.values() for d in dirs]
    env = environment_diff(ran, [os.path.relpath(d, dose_dir) for d in ran])
    out = {"opt": run["opt"], "unit": run["unit"], "units": run["units"], "command": run.get("command"),
           "commit": run.get("commit"), "band": list(BAND), "agree_rel": AGREE_REL, "c": c, "c_why": out_why,
           **estimate(points, c), "environment": env}
    per_c = {run["traced"]: c} if c and run.get("traced") else {}  # the decision's c, not read again
    for d in ran:
        rel = os.path.relpath(d, dose_dir)
        if rel not in per_c and os.path.isdir(os.path.join(d, "traces")):
            try:
                per_c[rel] = traced_c(d)
            except Exception:  # noqa: BLE001 - a process without GPU events in its traces gives no c
                continue
    out["c_over_processes"] = c_over_processes(per_c, out["modes"].get("none"))
    for mode, dirs in folders.items():
        s0 = syncs_per_level(dirs[0])
        fit = stats.linear_fit(list(s0), list(s0.values())) if len(s0) >= 2 else {"slope": None}
        out["modes"][mode].update(processes=[os.path.relpath(d, dose_dir) for d in dirs],
                                  points=[[list(p) for p in x] for x in points[mode]], syncs_per_level=s0,
                                  syncs_removed_per_unit=None if fit["slope"] is None else -fit["slope"],
                                  machines=machine_component(points[mode], machines[mode]))
        out["modes"][mode]["theta_by_machine"] = theta_by_machine(out["modes"][mode], c)
    return out


def load_analysis(dose_dir: str) -> dict:
    """The folder's written analysis (DIR/dose_analysis.json, `main`'s output) when it is there, else `analyse(DIR)`:
    a committed dose folder keeps its analysis, not the per-process traces it was computed from."""
    path = os.path.join(dose_dir, OUT_FILE)
    return _json(path) if os.path.isfile(path) else analyse(dose_dir)


def missing_traces(dose_dir: str) -> list[str]:
    """The traced processes (dose_run.json's `traced`, and those the written analysis took c from) whose traces/
    folder is not on disk (a clone that keeps only dose_analysis.json): an analysis run here would lose their c."""
    run = _json(os.path.join(dose_dir, RUN_FILE))
    traced = {run["traced"]} if run.get("traced") else set()
    if os.path.isfile(os.path.join(dose_dir, OUT_FILE)):
        traced |= set(((_json(os.path.join(dose_dir, OUT_FILE)).get("c_over_processes") or {})
                       .get("per_process_ms") or {}))
    return sorted(t for t in traced if not os.path.isdir(os.path.join(dose_dir, t, "traces")))


def calibration_entry(a: dict, dose_dir: str) -> dict:
    """The entry the verdicts read: theta (untimed slope / traced c) with its 95% CI, its source, commit, decision."""
    th = (a["modes"].get("none") or {}).get("theta") or {}
    return {"theta": th.get("ratio"), "ci95": th.get("ci95"), "commit": a.get("commit"),
            "decision": a["decision"]["decision"],
            "source": (f"dose-response {dose_dir}: untimed slope over {(a['modes'].get('none') or {}).get('K')} "
                       f"processes / {(a.get('c') or {}).get('source')}; {th.get('method')}")}


def table(a: dict) -> str:
    """The analysis as printed: one line per timing mode, then c, theta and the decision."""
    lines = [f"dose-response of {a['opt']}: {a['unit']}, levels {a['units']}"]
    for mode, m in a["modes"].items():
        ci = m.get("slope_ci95") or [math.nan, math.nan]
        th = m.get("theta") or {}
        tci = th.get("ci95") or [math.nan, math.nan]
        ia = m.get("interaction") or {}
        lines.append(f"  {mode:5s} slope {m['slope_ms']:.4g} ms/unit [{ci[0]:.4g}, {ci[1]:.4g}] over {m['K']} "
                     f"processes; theta {th.get('ratio', math.nan):.3g} [{tci[0]:.3g}, {tci[1]:.3g}]; "
                     f"linear {m.get('linear')} (bend {m.get('bend') if m.get('bend') is None else round(m['bend'], 3)})"
                     + (f"; x dose interaction {ia['delta_ms']:.3g} ms/unit {ia.get('ci95')}" if ia else "")
                     + f"; syncs removed per unit {m.get('syncs_removed_per_unit')}")
        mc = m.get("machines")
        if mc:
            lines.append(f"        by machine: {mc['J']} machines ("
                         + ", ".join(f"{machine_label(k)} {sum(v) / len(v):.3g} x{len(v)}"
                                   for k, v in mc["per_machine"].items())
                         + f"); F {mc['F']:.2f}, p {mc['p']:.3g}; omega {mc['omega_ms']:.3g} ms/unit; "
                         + (f"slope se with the machine as unit {mc['slope_se']:.3g} ({mc['df']:.1f} df; over "
                            f"processes {m['slope_se']:.3g})" if mc.get("slope_se") else "the process se stands"))
            tm = m.get("theta_by_machine")
            if tm and tm.get("ci95"):
                lines.append(f"        beside it (not the rule's reading): theta with the machine as the slope's unit "
                             f"{tm['ratio']:.3g} [{tm['ci95'][0]:.3g}, {tm['ci95'][1]:.3g}]")
    c = a.get("c") or {}
    lines.append(f"  c = {c.get('value_ms', math.nan):.4g} ms/unit {c.get('ci95')} ({c.get('source')})")
    lines.append(f"  decision: {a['decision']['decision']} ({a['decision']['why']})")
    cp = a.get("c_over_processes")
    if cp:  # beside the decision, not part of it
        th = cp.get("theta") or {}
        tci = th.get("ci95") or [math.nan, math.nan]
        lines.append(f"  beside it (not the rule's reading): c over the {cp['K']} traced processes "
                     f"{cp['value_ms']:.4g} ms/unit [{cp['ci95'][0]:.4g}, {cp['ci95'][1]:.4g}] (each: "
                     + ", ".join(f"{v:.4g}" for v in cp["per_process_ms"].values())
                     + f"); theta from it {th.get('ratio', math.nan):.3g} [{tci[0]:.3g}, {tci[1]:.3g}]")
    if (a.get("environment") or {}).get("mixed"):  # the decision stands; its processes were not one instrument
        lines.append(f"  {a['environment']['line']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    from workbench.cli import emit_json, parser

    p = parser("workbench.savings.dose_fit", __doc__.split("\n\n")[0])
    p.add_argument("dir", help="a python -m workbench.ab.dose folder")
    p.add_argument("--calibration", default=None, metavar="FILE", help="merge theta, its CI and the decision into "
                   "this JSON under the optimization's name")
    a = p.parse_args(argv)
    if not os.path.isfile(os.path.join(a.dir, RUN_FILE)):
        raise WorkbenchError(f"{a.dir} holds no {RUN_FILE}: give a python -m workbench.ab.dose folder")
    gone = missing_traces(a.dir)
    if gone:
        raise WorkbenchError(f"{a.dir}: the traces of {', '.join(gone)} are not here (the committed folder keeps "
                             f"{OUT_FILE} only; its COMMAND.txt reruns them): {OUT_FILE} left as it is")
    res = analyse(a.dir)
    with open(os.path.join(a.dir, OUT_FILE), "w", encoding="utf-8") as f:
        json.dump(res, f, indent=1, default=_plain)
    if a.calibration:
        cal = _json(a.calibration) if os.path.isfile(a.calibration) else {}
        cal[res["opt"]] = calibration_entry(res, a.dir)
        with open(a.calibration, "w", encoding="utf-8") as f:
            json.dump(cal, f, indent=1, default=_plain)
    print(table(res))
    emit_json({"out": os.path.join(a.dir, OUT_FILE), "decision": res["decision"]})
    return 0


def _plain(v):
    return v.item() if isinstance(v, np.generic) else str(v)


if __name__ == "__main__":
    import sys

    from workbench.cli import run_main
    sys.exit(run_main(main))
