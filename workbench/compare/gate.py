"""workbench gate --baseline RUN_DIR --aa AA_DIR AA_DIR AA_DIR [--regression-pct 2] [--budget-s S]

A performance regression gate: re-run the baseline run (its meta.json args, so the same comparisons) at HEAD,
then judge one comparison's arm (--comparison, --arm: default the only comparison and its optimized arm): fail
(exit 1) only when the speedup CI of the new run over the baseline lies wholly below 1 - tolerance
(`workbench.compare.gate_stats`). The tolerance comes from the noise of 3 or more same-commit A/A processes of that
comparison on this machine (--aa: `python -m workbench.ab --opt OPT --aa`, run 3 times): their rep and step SDs (as
`workbench power --from` estimates them) and the run-to-run SD of their levels (its upper 95% bound), the
tolerance that keeps the simulated A/A false-fail rate <= 5%. Before the re-run the gate states that false-fail
rate and its simulated power for a --regression-pct slowdown.

It never passes blind: it refuses (exit 2, one line, before the re-run) a baseline timed on a CPU (not a result),
no --aa or fewer than 3 A/A processes, A/A runs of another commit or GPU, a tolerance (derived, or given with
--tolerance-pct) that cannot catch the --regression-pct slowdown, and a gate whose simulated power for that slowdown
is below 0.8 (`gate_stats.POWER_FLOOR`), naming the sizes that would gate (`gate_stats.gateable_sizes`: the
smallest regression it can gate, the A/A processes or reps that would gate the stated one); its verdict line carries
that power ("verdict: pass (power 0.91 for 2%)"); after the re-run, a re-run on another GPU and fewer than 2 reps on a
side (no verdict).

Why adjacent runs, not one interleaved run. The engine's A/B interleaves arms in one process; interleaving two
commits would need both commits' code importable in one process (two copies of the package, every module
reloaded per block): impractical and itself a source of difference. So the gate compares two runs, and the run
effect a new process brings is what the measured run SD and the tolerance absorb.

When both runs kept traces of the arm, `workbench.compare.rundiff` names the component that moved (kernel class or idle
cause, then the layer and pass).
`--budget-s` bounds the re-run: reps = min(the baseline's, what fits the budget at the baseline's step time),
passed to the engine with --budget-s. The re-run's folder is --out, kept; without --out a temporary folder, deleted
once judged. The re-run's own output goes to stderr; the re-run is injectable (`gate(..., rerun=fn)`), so tests feed
synthetic run folders on a CPU. Console lines, the gate's JSON as the last stdout line. Exit 0 pass, 1 fail, 2 bad
input, a failed re-run or no verdict, one line on stderr.
"""
from __future__ import annotations

import dataclasses
import math
import os
import shutil
import subprocess
import sys
import tempfile

from workbench.compare import gate_stats, rundiff
from workbench.measure import power
from workbench.cli import OneLineParser, emit_json, run_main
from workbench.errors import WorkbenchError
from workbench.measure.results import has_results, load_run

SKIP_ARGS = {"out", "force", "budget_s", "reps"}
"""Baseline args the gate sets itself (the output folder, and the reps under the budget)."""


class GateInputError(WorkbenchError, ValueError):
    """Bad input: one line on stderr, exit 2."""


def ab_argv(args: dict, out_dir: str, reps: int | None, budget_s: float | None) -> list[str]:
    """`python -m workbench.ab` argv that repeats a run from its meta.json `args` into `out_dir`."""
    argv = [sys.executable, "-m", "workbench.ab"]
    for k, v in args.items():
        if k in SKIP_ARGS or k.startswith("_") or v is None:
            continue
        name = k.replace("_", "-")
        if v is True:
            argv.append(f"--{name}")
        elif v is False:  # a switch's False is its --no- form (workbench.ab's switches take both)
            argv.append(f"--no-{name}")
        else:
            argv += [f"--{name}", str(v)]
    if reps:
        argv += ["--reps", str(reps)]
    if budget_s:
        argv += ["--budget-s", str(budget_s)]
    return argv + ["--out", out_dir]


def subprocess_rerun(args: dict, out_dir: str, reps: int | None, budget_s: float | None) -> str:
    """The real re-run: the engine at HEAD as a subprocess, its stdout (tables, its JSON line) sent to stderr so
    the gate's JSON is the last stdout line; returns the run folder."""
    timeout = None if budget_s is None else 2 * budget_s + 600  # model builds and the counted pass come on top
    sys.stdout.flush()
    r = subprocess.run(ab_argv(args, out_dir, reps, budget_s), timeout=timeout, stdout=2)
    if r.returncode not in (0, 1):  # 1: a verdict the engine reports as a failure is still a run
        raise RuntimeError(f"workbench.ab exited {r.returncode}")
    return out_dir


def _meta(run_dir: str) -> tuple[dict, dict]:
    if not os.path.isdir(run_dir):
        raise GateInputError(f"{run_dir}: no such run folder")
    if not has_results(run_dir) or not os.path.isfile(os.path.join(run_dir, "meta.json")):
        raise GateInputError(f"{run_dir}: not a run folder (results.csv and meta.json needed)")
    _, summ, meta = load_run(run_dir)
    if not meta.get("args"):
        raise GateInputError(f"{run_dir}: meta.json has no args to re-run")
    return summ, meta


def pick_comparison(summary: dict, comparison: str | None) -> tuple[str, set]:
    """The comparison the gate judges (given, or the only one) and the arms the baseline ran in it."""
    comps = [c for c in summary.get("comparisons", []) or [] if (c.get("optimized") or {}).get("arm")]
    if comparison is None:
        if len(comps) != 1:
            raise GateInputError("give --comparison: the baseline ran " + ", ".join(c["name"] for c in comps))
        comparison = comps[0]["name"]
    match = [c for c in comps if c["name"] == comparison]
    if not match:
        raise GateInputError(f"the baseline has no comparison {comparison!r}")
    return comparison, {(match[0].get(k) or {}).get("arm") for k in ("baseline", "optimized")}


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


def _gpu(run_dir: str, meta: dict) -> str:
    """The run's GPU name; refuses a run timed on a CPU (its timings are not results)."""
    dev = meta.get("device") or {}
    if dev.get("type") != "cuda":
        raise GateInputError(f"{run_dir} ran on {dev.get('type') or 'an unrecorded device'}: its timings are not "
                             "results (CPU timing), so no gate can measure against it; gate a run timed on a GPU")
    return str(dev.get("name") or dev.get("gpu_name") or "")


def _aa_comparison(aa_dir: str, summary: dict, comparison: str) -> tuple[str, str]:
    """The A/A comparison of `aa_dir` that matches the gated one (its name, or the only one) and its first arm."""
    comps = [c for c in summary.get("comparisons") or [] if (c.get("baseline") or {}).get("arm")]
    match = [c for c in comps if c["name"] == comparison] or (comps if len(comps) == 1 else [])
    if not match:
        raise GateInputError(f"{aa_dir}: no A/A of comparison {comparison!r} (it ran "
                             f"{', '.join(c['name'] for c in comps) or 'nothing'})")
    c = match[0]
    a, b = c["baseline"]["arm"], (c.get("optimized") or {}).get("arm") or ""
    if b.split("#")[0] != a:
        raise GateInputError(f"{aa_dir}: {c['name']} compares {a} with {b or 'nothing'}, not an A/A (run it with "
                             "python -m workbench.ab --aa, or --arms ARM,ARM)")
    return c["name"], a


DATA_ARGS = ("model", "layers", "tokens", "lengths", "batches", "seed", "attn", "experts", "dtype", "precision",
             "lora_rank", "checkpointing")
"""The run arguments that fix what one step computes (its model, its batches, its numerics): an A/A process that
differs from the baseline in any of them times another step, and its spread is not the re-run's noise."""


def data_mismatch(base_args: dict, aa_args: dict) -> str | None:
    """The first of `DATA_ARGS` where an A/A process's arguments differ from the baseline's, as "seed 511 (baseline
    500)", or None."""
    for k in DATA_ARGS:
        if k in base_args and aa_args.get(k) != base_args.get(k):
            return f"{k} {aa_args.get(k)} (baseline {base_args.get(k)})"
    return None


def aa_noise(aa_dirs, comparison: str, gpu: str, *, base_args: dict | None = None,
             arm: str | None = None) -> tuple[power.Noise, dict, dict]:
    """(Noise, run SD from `gate_stats.run_sd`, details) of K >= 3 same-commit A/A processes on GPU `gpu`, each of
    the baseline's step (`base_args`: the same `DATA_ARGS`) and of the gated `arm` (None: the first process's arm,
    the others' too): the re-run's noise is that of the same step and arm, run again. details["arm"]: that arm."""
    how = (f"run it 3 or more times on this machine, e.g. python -m workbench.ab --opt OPT --aa --out aa1 (aa2, "
           "aa3), and pass --aa aa1 aa2 aa3")
    if not aa_dirs:
        raise GateInputError("no noise estimate (--aa): a gate without same-commit A/A processes cannot tell a "
                             f"regression from a rerun's shift; {how}")
    if len(aa_dirs) < gate_stats.MIN_AA_PROCESSES:
        raise GateInputError(f"--aa gave {len(aa_dirs)} A/A process(es): the run-to-run SD needs "
                             f"{gate_stats.MIN_AA_PROCESSES} or more; {how}")
    same = [d for i, d in enumerate(aa_dirs) if os.path.realpath(d) in map(os.path.realpath, aa_dirs[:i])]
    if same:
        raise GateInputError(f"--aa names {same[0]} more than once: each A/A process is its own run; {how}")
    shas, per, reps, ids = set(), [], [], {}
    for d in aa_dirs:
        summ, meta = _meta(d)
        rid = meta.get("run_id") or summ.get("run_id")
        if rid and rid in ids:  # a copy of one run passed as two processes has no run-to-run spread
            raise GateInputError(f"--aa {ids[rid]} and {d} are one run (run id {rid}): the run SD needs separate "
                                 f"processes; {how}")
        ids[rid] = d
        g = _gpu(d, meta)
        if g != gpu:
            raise GateInputError(f"{d} ran on {g or 'an unnamed GPU'}, the baseline on {gpu}: the A/A runs must come "
                                 "from the gate's machine")
        shas.add(meta.get("git_sha"))
        name, aa_arm = _aa_comparison(d, summ, comparison)
        arm = arm or aa_arm
        if aa_arm != arm:
            raise GateInputError(f"{d} is an A/A of {aa_arm}, the gate judges {arm}: one arm's run-to-run noise is "
                                 f"not another's; gate --arm {aa_arm}, or run the A/A of {arm} "
                                 f"(python -m workbench.ab ... --arms {arm},{arm})")
        differs = data_mismatch(base_args or {}, meta.get("args") or {})
        if differs:
            raise GateInputError(f"{d} timed another step than the baseline ({differs}): its spread would count "
                                 "the data's differences as run-to-run noise; run the A/A processes with the "
                                 "baseline's arguments (its --seed included)")
        try:
            noise, _, details = power.components_from_run(d, name)
        except (OSError, ValueError) as e:
            raise GateInputError(str(e)) from None
        if not any(c.get("n_arms") for c in details["per_comparison"]):
            raise GateInputError(f"{d}: too few timed steps per arm to estimate the noise (3 or more per arm "
                                 "needed); run the A/A with more reps or steps")
        r = rundiff.timed_rep_means(d, name, aa_arm)
        if r.size < 2:
            raise GateInputError(f"{d}: {r.size} timed rep(s) of {aa_arm}; an A/A process needs 2 or more")
        per.append(noise)
        reps.append(r)
    if len(shas) != 1:
        raise GateInputError(f"the --aa runs come from {len(shas)} commits ({', '.join(sorted(map(str, shas)))}): "
                             "the run SD needs processes of one commit")
    rms = lambda k: math.sqrt(sum(getattr(n, k) ** 2 for n in per) / len(per))  # noqa: E731 - pooled variances
    noise = power.Noise(rep_sd_pct=rms("rep_sd_pct"), step_sd_pct=rms("step_sd_pct"),
                        batch_sd_pct=rms("batch_sd_pct"), drift_pct=0.0)
    return noise, gate_stats.run_sd(reps), {"aa": list(aa_dirs), "git_sha": shas.pop(), "gpu": gpu, "arm": arm}


def tolerance(tolerance_pct: float | None, noise: power.Noise, design: gate_stats.GateDesign, regression_pct: float,
              *, run: dict | None = None, sims: int = 1000, seed: int = 0,
              min_power: float = gate_stats.POWER_FLOOR) -> tuple[float, dict]:
    """(tolerance %, how it was found): the one this noise and design need for a false-fail rate <= 5%, or the given
    one when it is at least that; refused when it cannot catch a `regression_pct` slowdown, or catches it with a
    simulated power below `min_power`, the refusal naming the sizes that would (`gate_stats.gateable_sizes`; the A/A
    processes only with `run`, the `gate_stats.run_sd` result). States the simulated false-fail rate and the power
    for that slowdown."""
    p = gate_stats.gate_power(noise, design, regression_pct, tolerance=tolerance_pct, sims=sims, seed=seed)
    need, tol, det = p["need"], p["tolerance"], p["power"]
    if tolerance_pct is not None and tolerance_pct < need:
        raise GateInputError(f"--tolerance-pct {tolerance_pct:g} is below the {need:.2f}% this noise needs for a "
                             f"false-fail rate <= {100 * gate_stats.FALSE_FAIL_RATE:.0f}% (run SD "
                             f"{design.run_sd_pct:.2f}%): it would fail same-commit reruns; leave it out")
    if tol >= regression_pct or det < min_power:
        sizes = gate_stats.gateable_sizes(noise, design, regression_pct, run, tolerance=tolerance_pct,
                                          floor=min_power, sims=sims, seed=seed)
        would = gate_stats.sizes_text(sizes, regression_pct, run and run["processes"], design.reps)
        if tol >= regression_pct:
            raise GateInputError(f"this gate cannot catch a {regression_pct:g}% regression: at this noise (run SD "
                                 f"{design.run_sd_pct:.2f}%, rep SD {noise.rep_sd_pct:.2f}%, {design.reps} reps) its "
                                 f"tolerance is {tol:.2f}%; {would}")
        raise GateInputError(f"this gate cannot gate a {regression_pct:g}% regression: it would catch one "
                             f"{100 * det:.0f}% of the time (power {det:.2f}, below the floor {min_power:.2f}; run SD "
                             f"{design.run_sd_pct:.2f}%, rep SD {noise.rep_sd_pct:.2f}%, {design.reps} reps, tolerance "
                             f"{tol:.2f}%); {would}")
    ff = gate_stats.simulate_gates(noise, design, tol, sims=sims, seed=seed + 2)["fail_rate"]
    return tol, {"source": "given" if tolerance_pct is not None else "A/A processes",
                 "noise": {k: getattr(noise, k) for k in ("rep_sd_pct", "step_sd_pct", "drift_pct")},
                 "run_sd_pct": design.run_sd_pct, "regression_pct": regression_pct,
                 "simulated_false_fail_rate": ff, "simulated_false_fail_rate_max": gate_stats.FALSE_FAIL_RATE,
                 "detection_rate": det, "sims": sims}


def here_gpu() -> str | None:
    """The name of the GPU a re-run here would time on (CUDA device 0), None without one."""
    import torch
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


def check_rerun_here(gpu: str) -> None:
    """Refuse, before any re-run, a gate whose re-run would time on no GPU or on another GPU than the baseline's."""
    name = here_gpu()
    if name is None:
        raise GateInputError(f"the baseline was timed on {gpu or 'a GPU'} and this machine has no CUDA device: the "
                             "re-run would time on a CPU (not a result); run the gate where the baseline ran")
    if gpu and name != gpu:
        raise GateInputError(f"this machine's GPU is {name}, the baseline's {gpu}: two machines' timings are not a "
                             "gate; run the gate where the baseline ran")


def gate(baseline: str, *, aa=None, budget_s: float | None = None, tolerance_pct: float | None = None,
         regression_pct: float = 2.0, comparison: str | None = None, arm: str | None = None, rerun=subprocess_rerun,
         out_dir: str | None = None, sims: int = 1000, announce=None,
         min_power: float = gate_stats.POWER_FLOOR) -> dict:
    """Check the inputs, state the gate's false-fail rate and power (`announce(line)`, before the re-run), re-run
    the baseline's comparison (`rerun(args, out_dir, reps, budget_s) -> run folder`) and judge it.
    Returns {"verdict": "pass" | "fail" | "no verdict", "speedup", "ci95", "tolerance_pct", "moved", ...}."""
    summ, meta = _meta(baseline)
    gpu = _gpu(baseline, meta)
    results, _, _ = load_run(baseline)
    comparison, ran = pick_comparison(summ, comparison)
    design, step_ms = design_for(meta, results, comparison, budget_s)
    noise, run, aa_how = aa_noise(aa, comparison, gpu, base_args=meta.get("args") or {}, arm=arm)
    arm = aa_how.pop("arm")  # unasked, the arm the A/A processes timed: the one whose noise was measured
    if arm not in ran:
        raise GateInputError(f"the A/A processes time {arm}, which the baseline's {comparison} does not run "
                             f"({', '.join(sorted(a for a in ran if a))}): give --arm and its A/A processes")
    if rerun is subprocess_rerun:  # the real re-run times on this machine: refused now, not after it ran
        check_rerun_here(gpu)
    design = dataclasses.replace(design, run_sd_pct=run["run_sd_pct"])
    tol, how = tolerance(tolerance_pct, noise, design, regression_pct, run=run, sims=sims, min_power=min_power)
    how.update(aa_how, run_sd=run)
    if announce is not None:
        announce(plan_line(tol, how, design))
    keep = out_dir is not None
    new_dir = out_dir or tempfile.mkdtemp(prefix="gate-")
    try:
        new = rerun(dict(meta["args"]), new_dir, design.reps, budget_s)
        _, new_meta = _meta(new)
        new_gpu = _gpu(new, new_meta)
        if new_gpu != gpu:
            raise GateInputError(f"the re-run ran on {new_gpu}, the baseline on {gpu}: two machines' timings are "
                                 "not a gate; run the gate where the baseline ran")
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
    finally:
        if not keep:  # a temporary re-run is judged, then deleted: give --out to keep it
            shutil.rmtree(new_dir, ignore_errors=True)
    return {"verdict": verdict, "comparison": comparison, "arm": arm, "baseline": baseline,
            "new": new if keep else None, "gpu": gpu,
            "speedup": s["speedup"], "ci95": s["ci95"], "n_base": s["n_base"], "n_new": s["n_new"],
            "tolerance_pct": tol, "tolerance": how, "design": design.__dict__, "baseline_step_ms": step_ms,
            "budget_s": budget_s, "moved": moved, "moved_note": why}


def plan_line(tol: float, how: dict, design: gate_stats.GateDesign) -> str:
    """What the gate can tell, stated before the re-run: its tolerance, false-fail rate and power."""
    n = how["noise"]
    return (f"gate: tolerance {tol:.2f}% ({how['source']}); noise from {len(how['aa'])} A/A processes: run SD "
            f"{how['run_sd_pct']:.2f}% (upper 95% bound; point {how['run_sd']['point_sd_pct']:.2f}%), rep SD "
            f"{n['rep_sd_pct']:.2f}%, step SD {n['step_sd_pct']:.2f}%; {design.reps} reps a side. Simulated over "
            f"{how['sims']} gates: false-fail rate {100 * how['simulated_false_fail_rate']:.1f}% (at most "
            f"{100 * how['simulated_false_fail_rate_max']:.0f}%), a {how['regression_pct']:g}% regression caught "
            f"{100 * how['detection_rate']:.0f}% of the time")


def main(argv=None, rerun=subprocess_rerun) -> int:
    p = OneLineParser(prog="workbench gate", description=__doc__.split("\n\n")[1])
    p.add_argument("--baseline", required=True, metavar="RUN_DIR", help="the run to re-run and gate (timed on a GPU)")
    p.add_argument("--aa", nargs="+", default=None, metavar="RUN_DIR", help="3 or more same-commit A/A run folders "
                   "of the comparison on this machine: the noise the tolerance comes from (required)")
    p.add_argument("--regression-pct", type=float, default=2.0, metavar="X", help="the slowdown the gate must be "
                   "able to catch: refused when its tolerance is not below X (default: %(default)s)")
    p.add_argument("--tolerance-pct", type=float, default=None, metavar="X", help="a wider tolerance than the A/A "
                   "noise needs (never a narrower one)")
    p.add_argument("--budget-s", type=float, default=None, metavar="S", help="bound on the re-run's timed steps")
    p.add_argument("--comparison", default=None)
    p.add_argument("--arm", default=None, help="default: the arm the --aa processes timed (their noise is the one measured)")
    p.add_argument("--out", default=None, help="the re-run's folder, kept (default: a temporary folder, deleted)")
    a = p.parse_args(argv)
    if (a.budget_s is not None and a.budget_s <= 0) or (a.tolerance_pct is not None and a.tolerance_pct < 0) \
            or not a.regression_pct > 0:
        raise GateInputError("--budget-s and --regression-pct must be > 0, --tolerance-pct >= 0")
    try:
        r = gate(a.baseline, budget_s=a.budget_s, tolerance_pct=a.tolerance_pct, aa=a.aa, comparison=a.comparison,
                 arm=a.arm, out_dir=a.out, rerun=rerun, regression_pct=a.regression_pct,
                 announce=lambda line: print(line, flush=True))
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as e:
        raise GateInputError(f"the re-run failed: {e}") from None
    report(r)
    if r["verdict"] == "no verdict":  # a gate that cannot measure must not pass
        print(f"error: no verdict: {r['n_base']} baseline and {r['n_new']} new reps of {r['arm']} (2 each needed)",
              file=sys.stderr)
        return 2
    return 1 if r["verdict"] == "fail" else 0


def verdict_text(r: dict) -> str:
    """"pass (power 0.84 for 2%)": the verdict with the simulated power the gate had for its stated regression."""
    t = r.get("tolerance") or {}
    if t.get("detection_rate") is None:
        return str(r["verdict"])
    return f"{r['verdict']} (power {t['detection_rate']:.2f} for {t['regression_pct']:g}%)"


def report(r: dict) -> None:
    """The console lines and the JSON line of a gate result."""
    ci = r["ci95"]
    print(f"{r['comparison']} / {r['arm']}: new over baseline {r['speedup']:.4f}x "
          + (f"[{ci[0]:.4f}, {ci[1]:.4f}]" if ci else "(no CI)")
          + f" ({r['n_base']} and {r['n_new']} reps); tolerance {r['tolerance_pct']:.2f}%")
    print(f"verdict: {verdict_text(r)}" + ("" if r["new"] else " (the temporary re-run is deleted; --out keeps it)"))
    if r["moved"]:
        print("moved: " + ", ".join(f"{m['component']}" + (f" {m['layer']}/{m['pass']}" if m["layer"] else "")
                                    + f" {m['delta_ms']:+.3f} ms" for m in r["moved"]))
    elif r["moved_note"]:
        print(f"moved: {r['moved_note']}")
    emit_json(r)


if __name__ == "__main__":
    sys.exit(run_main(main))
