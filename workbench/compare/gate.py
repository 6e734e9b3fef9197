"""python -m workbench.gate --baseline RUN_DIR [--budget-s S] [--tolerance-pct X | --aa RUN_DIR]

A performance regression gate: re-run the baseline run (its meta.json args, so the same comparisons) at HEAD,
then judge one comparison's arm (--comparison, --arm: default the only comparison and its optimized arm): fail
(exit 1) only when the speedup CI of the new run over the baseline lies wholly below 1 - tolerance
(`workbench.compare.gate_stats`). The tolerance is given (--tolerance-pct), or derived from an A/A run folder on the same
machine (--aa: its noise components as `python -m workbench.power --from` estimates them, the tolerance that keeps
the simulated A/A false-fail rate <= 5%), or, with neither, from power's default (H100) components.

Why adjacent runs, not one interleaved run. The engine's A/B interleaves arms in one process; interleaving two
commits would need both commits' code importable in one process (two copies of the package, every module
reloaded per block): impractical and itself a source of difference. So the gate compares two runs, and the run
effect a new process brings is what the tolerance absorbs.

When both runs kept traces of the arm, `workbench.compare.rundiff` names the component that moved (kernel class or idle
cause, then the layer and pass).
`--budget-s` bounds the re-run: reps = min(the baseline's, what fits the budget at the baseline's step time),
passed to the engine with --budget-s. The re-run is injectable (`gate(..., rerun=fn)`), so tests feed synthetic
run folders on a CPU. Console lines, JSON as the last stdout line. Exit 0 pass, 1 fail, 2 bad input, a failed
re-run or no verdict (fewer than 2 reps on a side: a gate that cannot measure must not pass), one line on stderr.
"""
from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile

from workbench.compare import gate_stats, rundiff
from workbench.measure import power
from workbench.cli import OneLineParser, emit_json, run_main
from workbench.errors import WorkbenchError
from workbench.measure.results import load_run

SKIP_ARGS = {"out", "force", "budget_s", "reps"}
"""Baseline args the gate sets itself (the output folder, and the reps under the budget)."""


class GateInputError(WorkbenchError, ValueError):
    """Bad input: one line on stderr, exit 2."""


def ab_argv(args: dict, out_dir: str, reps: int | None, budget_s: float | None) -> list[str]:
    """`python -m workbench.ab` argv that repeats a run from its meta.json `args` into `out_dir`."""
    argv = [sys.executable, "-m", "workbench.ab"]
    for k, v in args.items():
        if k in SKIP_ARGS or k.startswith("_") or v is None or v is False:
            continue
        flag = "--" + k.replace("_", "-")
        argv += [flag] if v is True else [flag, str(v)]
    if reps:
        argv += ["--reps", str(reps)]
    if budget_s:
        argv += ["--budget-s", str(budget_s)]
    return argv + ["--out", out_dir]


def subprocess_rerun(args: dict, out_dir: str, reps: int | None, budget_s: float | None) -> str:
    """The real re-run: the engine at HEAD as a subprocess; returns the run folder."""
    timeout = None if budget_s is None else 2 * budget_s + 600  # model builds and the counted pass come on top
    r = subprocess.run(ab_argv(args, out_dir, reps, budget_s), timeout=timeout)
    if r.returncode not in (0, 1):  # 1: a verdict the engine reports as a failure is still a run
        raise RuntimeError(f"workbench.ab exited {r.returncode}")
    return out_dir


def _meta(run_dir: str) -> tuple[dict, dict]:
    if not os.path.isfile(os.path.join(run_dir, "results.csv")) or not os.path.isfile(os.path.join(run_dir, "meta.json")):
        raise GateInputError(f"{run_dir}: not a run folder (results.csv and meta.json needed)")
    _, summ, meta = load_run(run_dir)
    if not meta.get("args"):
        raise GateInputError(f"{run_dir}: meta.json has no args to re-run")
    return summ, meta


def pick_arm(summary: dict, comparison: str | None, arm: str | None) -> tuple[str, str]:
    """The comparison (given, or the only one) and arm (given, or its optimized arm) the gate judges."""
    comps = [c for c in summary.get("comparisons", []) or [] if (c.get("optimized") or {}).get("arm")]
    if comparison is None:
        if len(comps) != 1:
            raise GateInputError("give --comparison: the baseline ran " + ", ".join(c["name"] for c in comps))
        comparison = comps[0]["name"]
    match = [c for c in comps if c["name"] == comparison]
    if not match:
        raise GateInputError(f"the baseline has no comparison {comparison!r}")
    return comparison, arm or match[0]["optimized"]["arm"]


def design_for(meta: dict, results, comparison: str, budget_s: float | None) -> tuple[gate_stats.GateDesign, float]:
    """The gate's design (reps under the budget) and the baseline's mean step ms."""
    p = meta.get("protocol") or {}
    r = results[(results["comparison"] == comparison) & (results["metric"] == "step_ms") & results["rep"].notna()]
    step_ms = float(r["value"].mean()) if len(r) else math.nan
    arms = max(int(r["arm"].nunique()), 2)
    reps, steps = int(p.get("reps") or 8), int(p.get("steps") or 2)
    if budget_s is not None and math.isfinite(step_ms):
        per_rep_s = arms * (int(p.get("warmup_min") or 0) + steps) * step_ms / 1e3
        reps = max(2, min(reps, int(budget_s // per_rep_s) if per_rep_s > 0 else reps))
    return gate_stats.GateDesign(reps=reps, steps=steps, batches=int((meta.get("args") or {}).get("batches") or 2),
                                 arms=arms), step_ms


def tolerance(tolerance_pct: float | None, aa_dir: str | None, design: gate_stats.GateDesign, *, sims: int = 1000,
              seed: int = 0) -> tuple[float, dict]:
    """(tolerance %, how it was found)."""
    if tolerance_pct is not None:
        return tolerance_pct, {"source": "given"}
    if aa_dir:
        try:
            noise, _, details = power.components_from_run(aa_dir)
        except (OSError, ValueError) as e:
            raise GateInputError(str(e)) from None
        if not any(c.get("n_arms") for c in details["per_comparison"]):
            raise GateInputError(f"{aa_dir}: too few timed steps per arm to estimate the noise (3 or more per arm "
                                 "needed); run the A/A with more reps or steps")
        src = {"source": f"A/A run {aa_dir}", "per_comparison": details["per_comparison"]}
    else:
        noise, src = power.Noise(), {"source": "power's default components (no --aa given)"}
    tol = gate_stats.tolerance_pct(noise, design, sims=sims, seed=seed)
    det = gate_stats.detection_rate(noise, design, tol, sims=sims, seed=seed + 1)
    return tol, {**src, "noise": {k: getattr(noise, k) for k in ("rep_sd_pct", "step_sd_pct", "drift_pct")},
                 "simulated_false_fail_rate_max": gate_stats.FALSE_FAIL_RATE, "detection_rate_2pct": det}


def gate(baseline: str, *, budget_s: float | None = None, tolerance_pct: float | None = None, aa: str | None = None,
         comparison: str | None = None, arm: str | None = None, rerun=subprocess_rerun, out_dir: str | None = None,
         sims: int = 1000) -> dict:
    """Re-run the baseline's comparison (`rerun(args, out_dir, reps, budget_s) -> run folder`) and judge it.
    Returns {"verdict": "pass" | "fail" | "no verdict", "speedup", "ci95", "tolerance_pct", "moved", ...}."""
    if tolerance_pct is not None and aa:
        raise GateInputError("give --tolerance-pct or --aa, not both")
    summ, meta = _meta(baseline)
    results, _, _ = load_run(baseline)
    comparison, arm = pick_arm(summ, comparison, arm)
    design, step_ms = design_for(meta, results, comparison, budget_s)
    tol, how = tolerance(tolerance_pct, aa, design, sims=sims)
    new = rerun(dict(meta["args"]), out_dir or tempfile.mkdtemp(prefix="gate-"), design.reps, budget_s)
    base_reps = rundiff.timed_rep_means(baseline, comparison, arm)
    new_reps = rundiff.timed_rep_means(new, comparison, arm)
    s = gate_stats.speedup_ci(base_reps, new_reps)
    verdict = gate_stats.decide(s["ci95"], tol)
    moved, why = [], None
    if rundiff.trace_path(baseline, comparison, arm) and rundiff.trace_path(new, comparison, arm):
        for by in ("component", "layer"):  # the class first (fewer tests: more power), then where it moved
            d = rundiff.diff_runs(baseline, new, comparison, arm, by=by)
            moved += [{"by": by, **{k: r[k] for k in ("component", "layer", "pass", "delta_ms", "ci95")}}
                      for r in rundiff.moved(d)]
    else:
        why = "no traces of this arm in both runs (run the baseline with --trace torch to name the component)"
    return {"verdict": verdict, "comparison": comparison, "arm": arm, "baseline": baseline, "new": new,
            "speedup": s["speedup"], "ci95": s["ci95"], "n_base": s["n_base"], "n_new": s["n_new"],
            "tolerance_pct": tol, "tolerance": how, "design": design.__dict__, "baseline_step_ms": step_ms,
            "budget_s": budget_s, "moved": moved, "moved_note": why}


def main(argv=None, rerun=subprocess_rerun) -> int:
    p = OneLineParser(prog="python -m workbench.gate", description=__doc__.split("\n\n")[1])
    p.add_argument("--baseline", required=True, metavar="RUN_DIR")
    p.add_argument("--budget-s", type=float, default=None, metavar="S", help="bound on the re-run's timed steps")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--tolerance-pct", type=float, default=None, metavar="X")
    g.add_argument("--aa", default=None, metavar="RUN_DIR", help="A/A run folder on the same machine")
    p.add_argument("--comparison", default=None)
    p.add_argument("--arm", default=None, help="default: the comparison's optimized arm")
    p.add_argument("--out", default=None, help="the re-run's folder (default: a new temporary folder)")
    a = p.parse_args(argv)
    if (a.budget_s is not None and a.budget_s <= 0) or (a.tolerance_pct is not None and a.tolerance_pct < 0):
        raise GateInputError("--budget-s must be > 0 and --tolerance-pct >= 0")
    try:
        r = gate(a.baseline, budget_s=a.budget_s, tolerance_pct=a.tolerance_pct, aa=a.aa, comparison=a.comparison,
                 arm=a.arm, out_dir=a.out, rerun=rerun)
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as e:
        raise GateInputError(f"the re-run failed: {e}") from None
    report(r)
    if r["verdict"] == "no verdict":  # a gate that cannot measure must not pass
        print(f"error: no verdict: {r['n_base']} baseline and {r['n_new']} new reps of {r['arm']} (2 each needed)",
              file=sys.stderr)
        return 2
    return 1 if r["verdict"] == "fail" else 0


def report(r: dict) -> None:
    """The console lines and the JSON line of a gate result."""
    ci = r["ci95"]
    print(f"{r['comparison']} / {r['arm']}: new over baseline {r['speedup']:.4f}x "
          + (f"[{ci[0]:.4f}, {ci[1]:.4f}]" if ci else "(no CI)")
          + f" ({r['n_base']} and {r['n_new']} reps); tolerance {r['tolerance_pct']:.2f}% ({r['tolerance']['source']})")
    det = r["tolerance"].get("detection_rate_2pct")
    if det is not None:
        print(f"simulated: false-fail rate <= 5%, a 2% slowdown caught {100 * det:.0f}% of the time")
    print(f"verdict: {r['verdict']}")
    if r["moved"]:
        print("moved: " + ", ".join(f"{m['component']}" + (f" {m['layer']}/{m['pass']}" if m["layer"] else "")
                                    + f" {m['delta_ms']:+.3f} ms" for m in r["moved"]))
    elif r["moved_note"]:
        print(f"moved: {r['moved_note']}")
    emit_json(r)


if __name__ == "__main__":
    sys.exit(run_main(main))
