"""Power and calibration of the engine's protocol: simulate it, analyse each simulated run with the engine's own
statistics, and say how often an A/A run gets a false verdict, how often the CI covers the truth, the smallest
speedup found 80% of the time, and the GPU time the protocol takes.

    workbench power                                   # the default GPU protocol at the H100's noise
    workbench power --from profiles/RUN/ --reps 8     # variance components estimated from a run folder
    workbench power --rep-sd 1.0 --step-sd 0.4 --reps 6 --steps 2 --sims 2000
    workbench power --process-sd 1.0                  # a process component: one run's CI under-covers
    workbench power --process-sd 1.0 --analysis process --processes 4   # the process as the unit
    workbench power --arms 4 --carryover 1.0 --order rotate            # carryover under the old order
    workbench power --from profiles/A/ profiles/B/ profiles/C/ --comparison packing   # tau from reruns
    workbench power --analysis iid-pairs              # the retired analysis (pairs as independent)

The simulated run is the engine's protocol (`workbench.measure.engine.measure`, one `engine.Protocol`): R reps;
each rep runs every arm as one block, in the engine's Williams order (`--order rotate`: the rotation by one it
replaced); each block has `steps` timed steps on batch `step mod batches`. The log step time of arm a, rep r, step s
of one process is

    log t = mu_a + batch_(s mod nb) + block_(r,a) + drift · (time in reps) + carryover + [a = 1] · process + noise

with batch ~ N(0, batch_sd) (shared by every arm: it cancels within a pair), block ~ N(0, rep_sd) (one per arm per
rep: the effect all pairs of one rep share), step noise ~ N(0, step_sd), all in percent of the step time, a linear
drift of `drift_pct` per rep, `carryover_pct` on a block that runs right after the last arm's block (with 3 or more
arms a third arm, not compared, that leaves the device slower: memory, clocks), and a process effect
~ N(0, process_sd) on the compared arm, one draw per process (tau: what moves a whole rerun; 0 inside one run).

Analyses (`--analysis`): "rep", the engine's single-run statistic (`stats.paired_speedup`, the rep as the unit;
with `--target-ci`, reps are added as the engine adds them: whole cycles, never an odd R), whose coverage is judged
against the population truth, so a process effect breaks it (at tau / sigma = 0.69 its 8-rep CI covers a rerun's
truth about 70% of the time); "process", K = `--processes` independent processes analysed by
`workbench.measure.replication.process_estimate` (a t-interval over processes, K - 1 df); "iid-pairs", the retired
BCa over pairs as if independent. `--from RUN_DIR ...` estimates the rep / batch / step SDs from run folders and,
with two or more folders of one comparison (separate processes), tau by REML (`replication.reml_components`).
The last stdout line is JSON: aa_false_verdict_rate, coverage, min_detectable_speedup, mean_half_width_pct, gpu_s, ...
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys

import numpy as np

from workbench.measure import engine
from workbench.measure.engine import Protocol

DEFAULT_COMPONENTS = {"rep_sd_pct": 1.0, "step_sd_pct": 0.4, "batch_sd_pct": 2.0}
"""Block (rep), step and batch SDs in percent: the largest rep effect the H100 runs showed (packing_sweep_llama L4:
rep 1.0%, step 0.4%); the offload comparisons showed 0.20-0.27% and 0.13-0.15%."""
DEFAULT_DRIFT_PCT = 0.2
"""Linear drift, percent of the step time per rep (clock and thermal drift over a run)."""


@dataclasses.dataclass(frozen=True)
class Noise:
    rep_sd_pct: float = DEFAULT_COMPONENTS["rep_sd_pct"]
    """SD of one arm's block effect per rep (every pair of a rep shares its two blocks' effects), % of step time."""
    step_sd_pct: float = DEFAULT_COMPONENTS["step_sd_pct"]
    """SD of one timed step around its block, % of step time."""
    batch_sd_pct: float = DEFAULT_COMPONENTS["batch_sd_pct"]
    """SD of the batches' step times (same for every arm), % of step time."""
    drift_pct: float = DEFAULT_DRIFT_PCT
    """Linear drift over the run, % of step time per rep."""
    process_sd_pct: float = 0.0
    """tau: SD of a whole process's shift of the compared arm's log step time (the log speedup), %: one draw per
    process. 0 inside one run; the H100/H200 repeats put it at 0.69 of the per-rep log-ratio SD."""
    carryover_pct: float = 0.0
    """A block that runs right after the last arm's block is this % slower (with 3 or more arms a third arm, not
    compared, that leaves the device slower)."""


GPU_PROTOCOL = Protocol(reps=8, steps=2, warmup_min=3, batches=2, arms=2)
"""The engine's GPU default, as simulated here (one discarded warm-up rep, 8 reps of 2 steps, 2 batches)."""
ORDERS = {"williams": engine.arm_order, "rotate": lambda arms, rep: arms[rep % len(arms):] + arms[:rep % len(arms)]}
"""The engine's order, and the rotation by one it replaced (the negative control for carryover)."""


def simulate_times(rng: np.random.Generator, noise: Noise, design: Protocol, reps: int, speedup: float,
                   step_ms: float = 100.0, order: str = "williams") -> tuple[np.ndarray, np.ndarray]:
    """One simulated process's step times of the baseline and the compared arm, shape (reps, steps) each."""
    A, S, nb = design.arms, design.steps, design.batches
    mu = np.full(A, math.log(step_ms))
    mu[1] -= math.log(speedup)
    batch = rng.standard_normal(nb) * noise.batch_sd_pct / 100
    block = rng.standard_normal((reps, A)) * noise.rep_sd_pct / 100
    process = rng.standard_normal() * noise.process_sd_pct / 100 if noise.process_sd_pct else 0.0
    out = np.empty((2, reps, S))
    # loop invariants hoisted (the same values, the same draws in the same order): the gate's and power's
    # simulations call this tens of thousands of times
    step_batch, arms, order_of = batch[np.arange(S) % nb], list(range(A)), ORDERS[order]
    drift, carryover = noise.drift_pct / 100, noise.carryover_pct / 100
    for r in range(reps):
        seq = order_of(arms, r)
        for pos, a in enumerate(seq):
            if a > 1:
                continue
            t_reps = r + (pos + 0.5) / A
            carry = carryover if pos > 0 and seq[pos - 1] == A - 1 else 0.0
            y = (mu[a] + step_batch + block[r, a] + drift * t_reps + carry
                 + (process if a == 1 else 0.0) + rng.standard_normal(S) * noise.step_sd_pct / 100)
            out[a, r] = np.exp(y)
    return out[0], out[1]


def rep_log_ratios(b: np.ndarray, o: np.ndarray) -> np.ndarray:
    """Per-rep log(mean baseline / mean compared) of (reps, steps) arrays: the y of `workbench.measure.replication`."""
    return np.log(b.mean(axis=1) / o.mean(axis=1))


def _rep_analysis(b: np.ndarray, o: np.ndarray) -> dict:
    from workbench.measure import stats
    reps = np.repeat(np.arange(b.shape[0]), b.shape[1])
    return stats.paired_speedup(b.ravel(), o.ravel(), reps.tolist())


def _iid_pairs_analysis(b: np.ndarray, o: np.ndarray) -> dict:
    """The retired analysis, kept as the negative control: a BCa bootstrap over pairs resampled as independent."""
    import warnings

    from scipy import stats as sps

    from workbench.measure import stats
    x, y = b.ravel(), o.ravel()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = sps.bootstrap((x, y), lambda u, v, axis=-1: np.mean(u, axis=axis) / np.mean(v, axis=axis),
                            paired=True, vectorized=True, axis=-1, method="BCa", n_resamples=999,
                            **{stats._BOOTSTRAP_SEED_KW: np.random.default_rng(0)})
    ci = [float(res.confidence_interval.low), float(res.confidence_interval.high)]
    s = float(x.mean() / y.mean())
    return {"speedup": s, "ci95": ci, "half_width_pct": stats.half_width_pct(ci, s),
            "verdict": stats.verdict(ci) if x.size >= 6 else "no verdict"}


ANALYSES = {"rep": _rep_analysis, "iid-pairs": _iid_pairs_analysis}


def _one_process(rng, noise: Noise, design: Protocol, speedup: float, fn, order: str) -> tuple[dict, np.ndarray]:
    """One simulated process analysed by `fn` as the engine would: reps added under target_ci_pct only at the
    engine's stopping points (`engine.stop_every`: whole cycles, never an odd R). (result, per-rep log ratios)."""
    reps = design.reps
    every = engine.stop_every(design, design.arms)
    b, o = simulate_times(rng, noise, design, design.max_reps if design.target_ci_pct else reps, speedup, order=order)
    while True:
        res = fn(b[:reps], o[:reps])
        if design.target_ci_pct is None or reps >= design.max_reps:
            break
        if reps % every == 0:
            if res.get("half_width_pct") is not None and res["half_width_pct"] <= design.target_ci_pct:
                break
            if reps + every > design.max_reps:
                break
        reps += 1
    res["reps"] = reps
    return res, rep_log_ratios(b[:reps], o[:reps])


def run_once(rng, noise: Noise, design: Protocol, speedup: float, analysis: str = "rep", *, processes: int = 1,
             order: str = "williams") -> dict:
    """One simulated claim. "rep" / "iid-pairs": one process analysed on its own (what a single run states);
    "process": `processes` independent processes (each its own process effect), the speedup and CI of
    `replication.process_estimate` (t over processes)."""
    if analysis != "process":
        return _one_process(rng, noise, design, speedup, ANALYSES[analysis], order)[0]
    from workbench.measure import replication, stats
    groups, reps = [], 0
    for _ in range(processes):
        res, y = _one_process(rng, noise, design, speedup, _rep_analysis, order)
        groups.append(y)
        reps += res["reps"]
    e = replication.process_estimate(groups, components=False)
    ci = e["ci95"]
    return {"speedup": e["speedup"], "ci95": ci, "pi95": e["pi95"], "verdict": stats.verdict(ci),
            "half_width_pct": stats.half_width_pct(ci, e["speedup"]) if ci else None, "reps": reps / processes,
            "processes": processes}


def calibrate(noise: Noise, design: Protocol, *, sims: int = 1000, speedup: float = 1.0, seed: int = 0,
              analysis: str = "rep", processes: int = 1, order: str = "williams") -> dict:
    """Over `sims` simulated claims at a true `speedup` (the population's: a process effect averages out over
    processes, not within one): the rate of a wrong verdict (faster/slower when speedup = 1; the wrong direction),
    the CI's coverage of the truth, the rate of "faster", the mean half-width and the mean reps (per process)."""
    rng = np.random.default_rng(seed)
    false_v = cover = faster = 0
    hw, reps, decided = [], [], 0
    for _ in range(sims):
        r = run_once(rng, noise, design, speedup, analysis, processes=processes, order=order)
        v, ci = r["verdict"], r["ci95"]
        if v in ("faster", "slower"):
            decided += 1
            if speedup == 1.0 or (v == "slower") == (speedup > 1):
                false_v += 1
        faster += v == "faster"
        if ci is not None and ci[0] <= speedup <= ci[1]:
            cover += 1
        if r.get("half_width_pct") is not None:
            hw.append(r["half_width_pct"])
        reps.append(r["reps"])
    return {"sims": sims, "speedup": speedup, "false_verdict_rate": false_v / sims, "coverage": cover / sims,
            "faster_rate": faster / sims, "verdict_rate": decided / sims,
            "mean_half_width_pct": float(np.mean(hw)) if hw else None, "mean_reps": float(np.mean(reps))}


def min_detectable_speedup(noise: Noise, design: Protocol, *, sims: int = 400, power: float = 0.8, seed: int = 1,
                           analysis: str = "rep", processes: int = 1, order: str = "williams") -> float:
    """The smallest true speedup the protocol calls "faster" in at least `power` of runs (bisection on the log
    speedup, the same random numbers at every candidate so that the rate rises with the speedup)."""
    lo, hi = 0.0, 0.01
    while calibrate(noise, design, sims=sims, speedup=math.exp(hi), seed=seed, analysis=analysis,
                     processes=processes, order=order)["faster_rate"] < power:
        lo, hi = hi, hi * 2
        if hi > math.log(4):
            return math.inf
    for _ in range(10):
        mid = (lo + hi) / 2
        if calibrate(noise, design, sims=sims, speedup=math.exp(mid), seed=seed, analysis=analysis,
                     processes=processes, order=order)["faster_rate"] >= power:
            hi = mid
        else:
            lo = mid
    return math.exp(hi)


def gpu_seconds(design: Protocol, step_ms: float, reps: float | None = None, processes: int = 1) -> float:
    """Wall time of the timed protocol: processes x (reps + discarded reps) x arms x (warmup + steps) steps of
    `step_ms` (model build, the counted pass and equivalence checks not included)."""
    r = design.reps if reps is None else reps
    return processes * (r + design.discard_reps) * design.arms * (design.warmup_steps() + design.steps) * step_ms / 1e3


def components_from_run(run_dir: str, comparison: str | None = None) -> tuple[Noise, float, dict]:
    """(Noise, mean step ms, details) from a run folder's timed steps: `stats.variance_components` of its
    baseline and optimized arms (of `comparison`, or pooled over every comparison)."""
    import os

    from workbench.measure import stats
    from workbench.measure.results import load_run
    results, summary, _ = load_run(run_dir)
    if results is None or results.empty:
        raise ValueError(f"{run_dir}: no results.csv with timed steps")
    r = results[(results["metric"] == "step_ms") & results["rep"].notna()]
    if comparison:
        r = r[r["comparison"] == comparison]
    if r.empty:
        names = sorted(results["comparison"].dropna().unique())
        raise ValueError(f"{run_dir}: no timed steps for comparison {comparison!r}; it has {', '.join(names)}")
    per = []
    for name, g in r.groupby("comparison"):
        samples = [dict(arm=x.arm, rep=int(x.rep), batch=int(x.batch) if x.batch == x.batch else 0,
                        step_ms=float(x.value)) for x in g.itertuples()]
        arms = list(dict.fromkeys(s["arm"] for s in samples))[:2]
        vc = stats.variance_components([s for s in samples if s["arm"] in arms])
        per.append({"comparison": name, **vc, "step_ms": float(g["value"].mean())})
    def pooled(k):
        v = [p[k] for p in per if p[k] is not None]
        return math.sqrt(float(np.mean(np.square(v)))) if v else 0.0
    noise = Noise(rep_sd_pct=pooled("rep_sd_pct"), step_sd_pct=pooled("step_sd_pct"),
                  batch_sd_pct=pooled("batch_sd_pct"), drift_pct=0.0)
    return noise, float(np.mean([p["step_ms"] for p in per])), {"run": os.path.basename(os.path.normpath(run_dir)),
                                                                "per_comparison": per}


def _rep_log_ratios_of_run(run_dir: str, comparison: str) -> list[float]:
    """One run folder's per-rep log ratios log(mean baseline / mean optimized) of `comparison` (its first two arms
    in results.csv order; `workbench.measure.engine.pairs` pairs them by rep and step)."""
    from workbench.measure.results import load_run
    results, _, _ = load_run(run_dir)
    if results is None or results.empty:
        raise ValueError(f"{run_dir}: no results.csv with timed steps")
    r = results[(results["metric"] == "step_ms") & results["rep"].notna() & (results["comparison"] == comparison)]
    if r.empty:
        raise ValueError(f"{run_dir}: no timed steps for comparison {comparison!r}")
    samples = [dict(arm=x.arm, rep=int(x.rep), step=int(x.step) if x.step == x.step else 0, step_ms=float(x.value))
               for x in r.itertuples() if int(x.rep) >= 0]
    arms = list(dict.fromkeys(s["arm"] for s in samples))[:2]
    if len(arms) < 2:
        raise ValueError(f"{run_dir}: comparison {comparison!r} has fewer than 2 arms")
    b, o, reps = engine.pairs(samples, arms[0], arms[1])
    per: dict = {}
    for x, y, u in zip(b, o, reps):
        per.setdefault(u, ([], []))
        per[u][0].append(x)
        per[u][1].append(y)
    return [math.log(float(np.mean(x)) / float(np.mean(y))) for x, y in per.values()]


def process_components_from_runs(run_dirs: list[str], comparison: str) -> dict:
    """sigma and tau of `comparison` from two or more run folders (separate processes of the same commit, protocol,
    GPU and batches): `replication.reml_components` over their per-rep log ratios, in percent. Returns
    {"sigma_pct", "tau_pct", "tau_ci95_pct", "tau_over_sigma", "lr_p", "K", "R"}."""
    from workbench.measure import replication
    if len(run_dirs) < 2:
        raise ValueError("tau needs two or more run folders (separate processes) of one comparison")
    if not comparison:
        raise ValueError("--from with several run folders needs --comparison NAME")
    c = replication.reml_components([_rep_log_ratios_of_run(d, comparison) for d in run_dirs])
    if c["tau"] is None:
        raise ValueError(f"{comparison}: tau is not estimable from these runs (K={c['K']}, reps {c['R']})")
    return {"sigma_pct": 100 * c["sigma"], "tau_pct": 100 * c["tau"],
            "tau_ci95_pct": [100 * v for v in c["tau_ci95"]] if c["tau_ci95"] else None,
            "tau_over_sigma": c["tau_over_sigma"], "lr_p": c["lr_p"], "K": c["K"], "R": c["R"]}


def main(argv=None) -> int:
    g = GPU_PROTOCOL
    p = argparse.ArgumentParser(allow_abbrev=False, prog="workbench power", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--from", dest="from_run", default=None, nargs="+", metavar="RUN_DIR",
                   help="estimate rep / batch / step SDs from the first run folder's timed steps (an A/A run is "
                        "best); with two or more folders of one comparison (separate processes), tau by REML")
    p.add_argument("--comparison", default=None, help="with --from: the comparison to estimate from (default: all; "
                   "needed with several folders)")
    p.add_argument("--rep-sd", type=float, default=None, metavar="PCT",
                   help=f"block effect SD per arm per rep, %% (default {DEFAULT_COMPONENTS['rep_sd_pct']})")
    p.add_argument("--step-sd", type=float, default=None, metavar="PCT",
                   help=f"step noise SD, %% (default {DEFAULT_COMPONENTS['step_sd_pct']})")
    p.add_argument("--batch-sd", type=float, default=None, metavar="PCT",
                   help=f"batch-to-batch SD, %% (default {DEFAULT_COMPONENTS['batch_sd_pct']})")
    p.add_argument("--process-sd", type=float, default=None, metavar="PCT",
                   help="tau: SD of a whole process's shift of the log speedup, %% (default 0, or REML from --from)")
    p.add_argument("--carryover", type=float, default=0.0, metavar="PCT",
                   help="a block right after the last arm's block is PCT %% slower")
    p.add_argument("--drift-pct", type=float, default=DEFAULT_DRIFT_PCT, help="linear drift, %% of the step per rep")
    p.add_argument("--reps", type=int, default=g.reps, help="reps per process (the engine's GPU default)")
    p.add_argument("--steps", type=int, default=g.steps, help="timed steps per arm per rep")
    p.add_argument("--batches", type=int, default=g.batches, help="distinct batches")
    p.add_argument("--arms", type=int, default=g.arms, help="arms in the comparison")
    p.add_argument("--warmup", type=int, default=g.warmup_min, help="warmup steps per arm per rep at least (GPU "
                   "time only)")
    p.add_argument("--target-ci", type=float, default=None, metavar="PCT", help="add reps until the CI half-width "
                   "is under PCT, as the engine's --target-ci does (whole cycles, never an odd R)")
    p.add_argument("--max-reps", type=int, default=g.max_reps, help="reps at most under --target-ci")
    p.add_argument("--processes", type=int, default=1, metavar="K", help="independent processes (with --analysis "
                   "process)")
    p.add_argument("--order", default="williams", choices=tuple(ORDERS), help="the arm order (rotate: the old one)")
    p.add_argument("--step-ms", type=float, default=None, help="step time for the GPU-time estimate "
                   "(default: the run's mean with --from, else 500)")
    p.add_argument("--sims", type=int, default=1000, help="simulated claims per rate")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--analysis", default="rep", choices=(*ANALYSES, "process"),
                   help="rep: one run's statistic; process: K processes, t over processes; iid-pairs: the retired "
                        "one (pairs as independent; BCa)")
    p.add_argument("--no-mds", action="store_true", help="skip the minimum-detectable-speedup search")
    a = p.parse_args(argv)
    bad = [f"--{k} must be >= {m}" for k, v, m in (("reps", a.reps, 2), ("steps", a.steps, 1), ("batches", a.batches, 1),
                                                  ("arms", a.arms, 2), ("sims", a.sims, 10), ("warmup", a.warmup, 0),
                                                  ("processes", a.processes, 1))
           if v < m]
    bad += [f"--{k} must be >= 0" for k, v in (("rep-sd", a.rep_sd), ("step-sd", a.step_sd), ("batch-sd", a.batch_sd),
                                               ("process-sd", a.process_sd)) if v is not None and v < 0]
    if a.analysis == "process" and a.processes < 2:
        bad.append("--analysis process needs --processes K >= 2")
    if bad:
        print(f"error: {bad[0]}", file=sys.stderr)
        return 2
    step_ms, details, proc = a.step_ms, None, None
    base = dict(DEFAULT_COMPONENTS)
    if a.from_run:
        try:
            est, run_ms, details = components_from_run(a.from_run[0], a.comparison)
            if len(a.from_run) > 1:
                proc = process_components_from_runs(a.from_run, a.comparison)
        except (OSError, ValueError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        base = {"rep_sd_pct": est.rep_sd_pct, "step_sd_pct": est.step_sd_pct, "batch_sd_pct": est.batch_sd_pct}
        step_ms = step_ms or run_ms
    tau = a.process_sd if a.process_sd is not None else (proc["tau_pct"] if proc else 0.0)
    noise = Noise(rep_sd_pct=base["rep_sd_pct"] if a.rep_sd is None else a.rep_sd,
                  step_sd_pct=base["step_sd_pct"] if a.step_sd is None else a.step_sd,
                  batch_sd_pct=base["batch_sd_pct"] if a.batch_sd is None else a.batch_sd, drift_pct=a.drift_pct,
                  process_sd_pct=tau, carryover_pct=a.carryover)
    design = Protocol(reps=a.reps, steps=a.steps, batches=a.batches, arms=a.arms, warmup_min=a.warmup,
                      warmup_max=max(g.warmup_max, a.warmup, 2 * a.batches), target_ci_pct=a.target_ci,
                      max_reps=max(a.max_reps, a.reps))
    step_ms = step_ms or 500.0
    K = a.processes if a.analysis == "process" else 1
    print(f"noise: block (rep) {noise.rep_sd_pct:.2f}%, step {noise.step_sd_pct:.2f}%, batch {noise.batch_sd_pct:.2f}%,"
          f" drift {noise.drift_pct:.2f}%/rep, process (tau) {noise.process_sd_pct:.2f}%, carryover "
          f"{noise.carryover_pct:.2f}%" + (f" (from {', '.join(a.from_run)})" if a.from_run else ""), file=sys.stderr)
    print(f"protocol: {K} process(es) x {design.reps} reps x {design.steps} steps x {design.arms} arms ({a.order} "
          f"order), {design.batches} batches"
          + (f", until ±{design.target_ci_pct}% (<= {design.max_reps} reps)" if design.target_ci_pct else "")
          + f"; analysis: {a.analysis}; {a.sims} simulated claims", file=sys.stderr)
    kw = dict(analysis=a.analysis, processes=K, order=a.order)
    aa = calibrate(noise, design, sims=a.sims, seed=a.seed, **kw)
    mds = None if a.no_mds else min_detectable_speedup(noise, design, sims=max(100, a.sims // 4), seed=a.seed + 1,
                                                        **kw)
    gpu_s = gpu_seconds(design, step_ms, aa["mean_reps"], processes=K)
    rows = [("A/A false-verdict rate", f"{aa['false_verdict_rate']:.3f}", "nominal 0.05"),
            ("CI coverage of the population truth", f"{aa['coverage']:.3f}",
             "nominal 0.95" + (" (a rerun)" if K > 1 or noise.process_sd_pct else " (within this run)")),
            ("mean CI half-width", f"±{aa['mean_half_width_pct']:.2f}%" if aa["mean_half_width_pct"] else "-", ""),
            ("smallest speedup found 80% of the time", f"{mds:.4f}x" if mds else "-", "power 0.8"),
            ("mean reps per process", f"{aa['mean_reps']:.1f}", ""),
            ("GPU time of the timed steps", f"{gpu_s:.0f} s", f"at {step_ms:.0f} ms/step, {K} process(es), "
             f"{design.discard_reps} discarded rep")]
    w = max(len(r[0]) for r in rows)
    for name, val, note in rows:
        print(f"{name:<{w}}  {val:>10}  {note}")
    out = {"aa_false_verdict_rate": aa["false_verdict_rate"], "coverage": aa["coverage"],
           "min_detectable_speedup": mds, "mean_half_width_pct": aa["mean_half_width_pct"],
           "mean_reps": aa["mean_reps"], "gpu_s": gpu_s, "step_ms": step_ms, "sims": a.sims, "analysis": a.analysis,
           "processes": K, "order": a.order, "noise": dataclasses.asdict(noise), "design": dataclasses.asdict(design)}
    if details:
        out["from"] = details
    if proc:
        out["process_components"] = proc
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
