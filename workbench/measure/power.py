"""Power and calibration of the engine's protocol: simulate it, analyse each simulated run with the engine's own
statistics, and say how often an A/A run gets a false verdict, how often the CI covers the truth, the smallest
speedup found 80% of the time, and the GPU time the protocol takes.

    python -m workbench.power                                   # the default GPU protocol at the H100's noise
    python -m workbench.power --from profiles/RUN/ --reps 8     # variance components estimated from a run folder
    python -m workbench.power --rep-sd 1.0 --step-sd 0.4 --reps 6 --steps 2 --sims 2000
    python -m workbench.power --analysis iid-pairs              # the retired analysis (pairs as independent)

The simulated run is the engine's protocol (`workbench.measure.engine.measure`): R reps; each rep runs every arm as one
block, in an order rotated by one per rep; each block has `steps` timed steps on batch `step mod batches`. The log
step time of arm a, rep r, step s is

    log t = mu_a + batch_(s mod nb) + block_(r,a) + drift · (time in reps) + step noise

with batch ~ N(0, batch_sd) (shared by every arm: it cancels within a pair), block ~ N(0, rep_sd) (one per arm per
rep: the effect all pairs of one rep share), step noise ~ N(0, step_sd), all in percent of the step time, and a
linear drift of `drift_pct` per rep. Each simulated run is analysed by `workbench.measure.stats.paired_speedup` with the rep
as the unit, exactly as the engine does (with `--target-ci`, reps are added as the engine adds them). The last
stdout line is JSON: aa_false_verdict_rate, coverage, min_detectable_speedup, mean_half_width_pct, gpu_s, ...
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys

import numpy as np

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


@dataclasses.dataclass(frozen=True)
class Design:
    reps: int = 8
    """Repetitions (each runs every arm once, as a block)."""
    steps: int = 2
    """Timed steps per arm per rep."""
    batches: int = 2
    """Distinct batches (step s uses batch s mod batches)."""
    arms: int = 2
    """Arms in the comparison (they share the rotation; the first two are compared)."""
    warmup: int = 3
    """Warmup steps per arm per rep (for the GPU time only)."""
    target_ci_pct: float | None = None
    """Add reps until the CI half-width is under this % (the engine's --target-ci), up to max_reps."""
    max_reps: int = 30


def simulate_times(rng: np.random.Generator, noise: Noise, design: Design, reps: int, speedup: float,
                   step_ms: float = 100.0) -> tuple[np.ndarray, np.ndarray]:
    """One simulated run's step times of the baseline and the compared arm, shape (reps, steps) each."""
    A, S, nb = design.arms, design.steps, design.batches
    mu = np.full(A, math.log(step_ms))
    mu[1] -= math.log(speedup)
    batch = rng.standard_normal(nb) * noise.batch_sd_pct / 100
    block = rng.standard_normal((reps, A)) * noise.rep_sd_pct / 100
    out = np.empty((2, reps, S))
    for r in range(reps):
        k = r % A
        order = list(range(A))[k:] + list(range(A))[:k]
        for pos, a in enumerate(order):
            if a > 1:
                continue
            t_reps = r + (pos + 0.5) / A
            y = (mu[a] + batch[np.arange(S) % nb] + block[r, a] + noise.drift_pct / 100 * t_reps
                 + rng.standard_normal(S) * noise.step_sd_pct / 100)
            out[a, r] = np.exp(y)
    return out[0], out[1]


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


def run_once(rng, noise: Noise, design: Design, speedup: float, analysis: str = "rep") -> dict:
    """One simulated run analysed as the engine would (adding reps under target_ci_pct as the engine does)."""
    fn = ANALYSES[analysis]
    reps = design.reps
    b, o = simulate_times(rng, noise, design, design.max_reps if design.target_ci_pct else reps, speedup)
    while True:
        res = fn(b[:reps], o[:reps])
        if design.target_ci_pct is None or reps >= design.max_reps:
            break
        if res.get("half_width_pct") is not None and res["half_width_pct"] <= design.target_ci_pct:
            break
        reps += 1
    res["reps"] = reps
    return res


def calibrate(noise: Noise, design: Design, *, sims: int = 1000, speedup: float = 1.0, seed: int = 0,
              analysis: str = "rep") -> dict:
    """Over `sims` simulated runs at a true `speedup`: the rate of a wrong verdict (faster/slower when speedup = 1;
    the wrong direction or a verdict at all in an A/A), the CI's coverage of the truth, the rate of "faster", the
    mean half-width and the mean reps."""
    rng = np.random.default_rng(seed)
    false_v = cover = faster = 0
    hw, reps, decided = [], [], 0
    for _ in range(sims):
        r = run_once(rng, noise, design, speedup, analysis)
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


def min_detectable_speedup(noise: Noise, design: Design, *, sims: int = 400, power: float = 0.8, seed: int = 1,
                           analysis: str = "rep") -> float:
    """The smallest true speedup the protocol calls "faster" in at least `power` of runs (bisection on the log
    speedup, the same random numbers at every candidate so that the rate rises with the speedup)."""
    lo, hi = 0.0, 0.01
    while calibrate(noise, design, sims=sims, speedup=math.exp(hi), seed=seed, analysis=analysis)["faster_rate"] < power:
        lo, hi = hi, hi * 2
        if hi > math.log(4):
            return math.inf
    for _ in range(10):
        mid = (lo + hi) / 2
        if calibrate(noise, design, sims=sims, speedup=math.exp(mid), seed=seed, analysis=analysis)["faster_rate"] >= power:
            hi = mid
        else:
            lo = mid
    return math.exp(hi)


def gpu_seconds(design: Design, step_ms: float, reps: float | None = None) -> float:
    """Wall time of the timed protocol: reps x arms x (warmup + steps) steps of `step_ms` (model build, the
    counted pass and equivalence checks not included)."""
    r = design.reps if reps is None else reps
    return r * design.arms * (design.warmup + design.steps) * step_ms / 1e3


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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m workbench.power", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--from", dest="from_run", default=None, metavar="RUN_DIR",
                   help="estimate rep / batch / step SDs from this run folder's timed steps (an A/A run is best)")
    p.add_argument("--comparison", default=None, help="with --from: the comparison to estimate from (default: all)")
    p.add_argument("--rep-sd", type=float, default=None, metavar="PCT",
                   help=f"block effect SD per arm per rep, %% (default {DEFAULT_COMPONENTS['rep_sd_pct']})")
    p.add_argument("--step-sd", type=float, default=None, metavar="PCT",
                   help=f"step noise SD, %% (default {DEFAULT_COMPONENTS['step_sd_pct']})")
    p.add_argument("--batch-sd", type=float, default=None, metavar="PCT",
                   help=f"batch-to-batch SD, %% (default {DEFAULT_COMPONENTS['batch_sd_pct']})")
    p.add_argument("--drift-pct", type=float, default=DEFAULT_DRIFT_PCT, help="linear drift, %% of the step per rep")
    p.add_argument("--reps", type=int, default=Design.reps, help="reps (the engine's GPU default)")
    p.add_argument("--steps", type=int, default=Design.steps, help="timed steps per arm per rep")
    p.add_argument("--batches", type=int, default=Design.batches, help="distinct batches")
    p.add_argument("--arms", type=int, default=Design.arms, help="arms in the comparison")
    p.add_argument("--warmup", type=int, default=Design.warmup, help="warmup steps per arm per rep (GPU time only)")
    p.add_argument("--target-ci", type=float, default=None, metavar="PCT", help="add reps until the CI half-width "
                   "is under PCT, as the engine's --target-ci does")
    p.add_argument("--max-reps", type=int, default=Design.max_reps, help="reps at most under --target-ci")
    p.add_argument("--step-ms", type=float, default=None, help="step time for the GPU-time estimate "
                   "(default: the run's mean with --from, else 500)")
    p.add_argument("--sims", type=int, default=1000, help="simulated runs per rate")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--analysis", default="rep", choices=tuple(ANALYSES),
                   help="rep: the engine's statistic; iid-pairs: the retired one (pairs as independent; BCa)")
    p.add_argument("--no-mds", action="store_true", help="skip the minimum-detectable-speedup search")
    a = p.parse_args(argv)
    bad = [f"--{k} must be >= {m}" for k, v, m in (("reps", a.reps, 2), ("steps", a.steps, 1), ("batches", a.batches, 1),
                                                  ("arms", a.arms, 2), ("sims", a.sims, 10), ("warmup", a.warmup, 0))
           if v < m]
    bad += [f"--{k} must be >= 0" for k, v in (("rep-sd", a.rep_sd), ("step-sd", a.step_sd), ("batch-sd", a.batch_sd))
            if v is not None and v < 0]
    if bad:
        print(f"error: {bad[0]}", file=sys.stderr)
        return 2
    step_ms, details = a.step_ms, None
    if a.from_run:
        try:
            est, run_ms, details = components_from_run(a.from_run, a.comparison)
        except (OSError, ValueError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        base = {"rep_sd_pct": est.rep_sd_pct, "step_sd_pct": est.step_sd_pct, "batch_sd_pct": est.batch_sd_pct}
        step_ms = step_ms or run_ms
    else:
        base = dict(DEFAULT_COMPONENTS)
    noise = Noise(rep_sd_pct=base["rep_sd_pct"] if a.rep_sd is None else a.rep_sd,
                  step_sd_pct=base["step_sd_pct"] if a.step_sd is None else a.step_sd,
                  batch_sd_pct=base["batch_sd_pct"] if a.batch_sd is None else a.batch_sd, drift_pct=a.drift_pct)
    design = Design(reps=a.reps, steps=a.steps, batches=a.batches, arms=a.arms, warmup=a.warmup,
                    target_ci_pct=a.target_ci, max_reps=max(a.max_reps, a.reps))
    step_ms = step_ms or 500.0
    print(f"noise: block (rep) {noise.rep_sd_pct:.2f}%, step {noise.step_sd_pct:.2f}%, batch {noise.batch_sd_pct:.2f}%,"
          f" drift {noise.drift_pct:.2f}%/rep" + (f" (from {a.from_run})" if a.from_run else ""), file=sys.stderr)
    print(f"protocol: {design.reps} reps x {design.steps} steps x {design.arms} arms, {design.batches} batches"
          + (f", until ±{design.target_ci_pct}% (<= {design.max_reps} reps)" if design.target_ci_pct else "")
          + f"; analysis: {a.analysis}; {a.sims} simulated runs", file=sys.stderr)
    aa = calibrate(noise, design, sims=a.sims, seed=a.seed, analysis=a.analysis)
    mds = None if a.no_mds else min_detectable_speedup(noise, design, sims=max(100, a.sims // 4), seed=a.seed + 1,
                                                        analysis=a.analysis)
    gpu_s = gpu_seconds(design, step_ms, aa["mean_reps"])
    rows = [("A/A false-verdict rate", f"{aa['false_verdict_rate']:.3f}", "nominal 0.05"),
            ("CI coverage (A/A)", f"{aa['coverage']:.3f}", "nominal 0.95"),
            ("mean CI half-width", f"±{aa['mean_half_width_pct']:.2f}%" if aa["mean_half_width_pct"] else "-", ""),
            ("smallest speedup found 80% of the time", f"{mds:.4f}x" if mds else "-", "power 0.8"),
            ("mean reps", f"{aa['mean_reps']:.1f}", ""),
            ("GPU time of the timed steps", f"{gpu_s:.0f} s", f"at {step_ms:.0f} ms/step, {design.warmup} warmup")]
    w = max(len(r[0]) for r in rows)
    for name, val, note in rows:
        print(f"{name:<{w}}  {val:>10}  {note}")
    out = {"aa_false_verdict_rate": aa["false_verdict_rate"], "coverage": aa["coverage"],
           "min_detectable_speedup": mds, "mean_half_width_pct": aa["mean_half_width_pct"],
           "mean_reps": aa["mean_reps"], "gpu_s": gpu_s, "step_ms": step_ms, "sims": a.sims, "analysis": a.analysis,
           "noise": dataclasses.asdict(noise), "design": dataclasses.asdict(design)}
    if details:
        out["from"] = details
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
