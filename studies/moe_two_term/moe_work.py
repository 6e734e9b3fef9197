"""Why MoE's untraced model missed qwen3-30b-a3b: does the time saved per removed sync grow with the GPU work each
expert iteration holds? (done-when 2: "refuted with its mechanism measured"; rule written 2026-11-27 (8)
before the run that reads it, studies/moe_two_term/moe_work.sh).

The untraced model (`untraced.py`, revision (7)) carries one saving per removed sync, u, from the dose's shape
(gpt-oss-20b 4 L 8k: 0.085 ms on the H200 pair) to every shape. On that pair it was refuted on qwen3-30b-a3b 4 L 8k
(0.054 ms a sync: ratio 0.64 [0.52, 0.78]) and read 0.86 on gpt-oss-20b 8 L 4k (0.073 ms;
profiles/2026-11-27_h200x2_moe_same_host). The mechanism this module tests: a sync stalls the host until the GPU has
drained its queue, and removing it saves the overlap it prevented, which is bounded by the GPU work queued per expert
iteration. qwen3-30b-a3b's experts are small (2048 x 768, top-8 of 128) and gpt-oss-20b's large (2880 x 2880, top-4
of 32): per token routed to an expert, 10.5x less GEMM work. If that is the mechanism, the per-sync saving is one
rising curve in W, the expert GEMM work per expert iteration, for both families; if the families still differ at
equal W, something else differs between them (their experts' code, their host work per expert).

    per process (a plain `python -m workbench.ab --opt moe` run, untraced):
      s = measured saving (ms, the process's mean over its reps) / syncs removed per step (its counted pass)
      W = tokens x top_k / n_experts x 6 x hidden x expert_intermediate   (forward GEMM FLOPs of one expert
          iteration: gate and up, then down; from the model preset, `workbench.step.presets`)
    fit, the process as unit:  log s = a + b log W + c [qwen3_moe] (+ one term per GPU beyond the first)
    90% t-intervals for b and c; then (the rule):
      b: "grows"  its interval above 0;  "flat"  inside [-0.1, 0.1];  "shrinks"  below 0;  else "undecided"
      c: "one curve"  inside [-log 1.25, log 1.25] (the families differ by less than the verdict band at equal W);
         "families differ"  excluding 0 and not inside that band;  else "undecided"
      precondition: every shape read has MIN_PER_SHAPE (2) processes or more and the fit MIN_DF (8) residual df, else
      "not read: too few processes" (the intervals are printed, not read)
      decision: grows + one curve      -> "gpu work per sync": the mechanism measured (u is not one constant)
                grows + families differ -> "gpu work, and a family effect beyond it"
                flat + one curve        -> "constant per sync": the model's form holds (the refutation is not this)
                flat + families differ  -> "a constant per family": not GPU work; what a removed sync saves depends
                                           on the family's expert code (u must be measured per family)
                otherwise               -> "inconclusive" (or the unexpected "shrinks", said)
    FLAT_B: over the 4x range of W a family spans in the job, |b| <= 0.1 moves s by at most 15%, inside the band.
    beside (not the rule's): b within each family.

    python -m studies.moe_two_term.moe_work DIR [DIR ...]     # every plain moe run under the DIRs; writes DIR/moe_work.json
"""
from __future__ import annotations

import math
import os

import numpy as np

from workbench.errors import WorkbenchError

OUT_FILE = "moe_work.json"
FLAT_B = 0.1
"""|b| under which the per-sync saving counts as not depending on W (a 4x range of W moves it by at most 15%)."""
ONE_CURVE = math.log(1.25)
"""The families' gap at equal W counted as none: the verdict band's edge."""
CONFIDENCE = 0.90
MIN_PER_SHAPE = 2
MIN_DF = 8
"""The rule reads no fit with fewer processes a shape or fewer residual df (tightened 2026-11-27 (8), before the
campaign ran, after a lease cut at 5 processes gave a 1-df fit whose t-intervals, valid on paper, rest on one df)."""


def expert_work_gflop(model: str, tokens: int) -> float:
    """W: forward GEMM GFLOPs of one expert iteration at `tokens` routed tokens (mean tokens per expert = tokens x
    top_k / n_experts; 2 x hidden x inter each for gate, up and down)."""
    from workbench.step.presets import PRESETS

    p = PRESETS.get(model)
    if p is None or p.family not in ("qwen3_moe", "gpt_oss"):
        raise WorkbenchError(f"{model}: not an MoE preset (qwen3_moe or gpt_oss)")
    c = p.config
    experts = c.get("num_experts") or c.get("num_local_experts")
    inter = c.get("moe_intermediate_size") if p.family == "qwen3_moe" else c["intermediate_size"]
    return tokens * c["num_experts_per_tok"] / experts * 6 * c["hidden_size"] * inter / 1e9


def moe_runs(roots: list[str]):
    """Each plain run folder under `roots` with an moe comparison, each run_id once (a merge copies its processes in
    beside the campaigns'): (folder, results, summary, meta), its files read once. A dose-response's levels (dose.json)
    are not runs of the comparison; a missing root is a one-line error."""
    from workbench.measure.results import load_run

    seen: set = set()
    for root in roots:
        if not os.path.isdir(root):
            raise WorkbenchError(f"{root}: no such folder")
        for d, _, files in sorted(os.walk(root)):
            if not {"summary.json", "meta.json"} <= set(files) or not ({"results.csv", "results.csv.gz"} & set(files)) or "dose.json" in files:
                continue
            results, summary, meta = load_run(d)
            if summary.get("run_id") in seen or not any(c.get("opt") == "moe" for c in summary.get("comparisons", [])):
                continue
            seen.add(summary.get("run_id"))
            yield d, results, summary, meta


def points(dirs: list[str]) -> list[dict]:
    """One point per plain moe run folder under `dirs` (`moe_runs`):
    {"folder", "model", "family", "tokens", "gpu", "gpu_name", "saving_ms", "syncs_removed", "s_ms", "W_gflop"}. A run
    whose arms were not equivalent, or that removed no sync or saved nothing, is left out and named in "left_out"."""
    from workbench.savings.process_savings import process_saving
    from workbench.step.presets import PRESETS

    out, left = [], []
    for d, results, summary, meta in moe_runs(dirs):
        c = next(c for c in summary["comparisons"] if c.get("opt") == "moe")
        saving = process_saving(results, c)
        removed = (c["baseline"].get("syncs_per_step") or 0) - (c["optimized"].get("syncs_per_step") or 0)
        if not c.get("equivalent") or saving is None or saving <= 0 or removed <= 0:
            left.append({"folder": d, "why": "arms not equivalent" if not c.get("equivalent") else
                         "no positive saving" if not saving or saving <= 0 else "no sync removed"})
            continue
        out.append({"folder": d, "model": c["model"], "family": PRESETS[c["model"]].family,
                    "tokens": int(c["tokens"]), "layers": int(c["layers"]),
                    "gpu": str((meta.get("device") or {}).get("uuid") or "?")[:12],
                    "gpu_name": str((meta.get("device") or {}).get("gpu_name") or "?"),
                    "saving_ms": float(saving), "syncs_removed": float(removed),
                    "s_ms": float(saving) / removed, "W_gflop": expert_work_gflop(c["model"], int(c["tokens"]))})
    return out + ([{"left_out": left}] if left else [])


def _ols(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    n, p = X.shape
    if np.linalg.matrix_rank(X) < p:
        raise WorkbenchError("the terms are confounded (each family needs runs at two token counts or more, and each "
                             "GPU beyond the first runs of more than one shape): no fit")
    beta, *_ = np.linalg.lstsq(X, y, rcond=None)
    df = n - p
    if df < 1:
        raise WorkbenchError(f"{n} processes for {p} terms: no degrees of freedom left to judge the fit")
    resid = y - X @ beta
    cov = np.linalg.inv(X.T @ X) * float(resid @ resid) / df
    return beta, np.sqrt(np.diag(cov)), df


def fit(pts: list[dict]) -> dict:
    """The rule's fit (module docstring) over `points`: {"b", "b_ci90", "c", "c_ci90", "df", "n", "gpus",
    "work": grows|flat|shrinks|undecided, "family": one curve|families differ|undecided, "decision", "within"}."""
    from scipy import stats as sps

    pts = [p for p in pts if "s_ms" in p]
    fams = sorted({p["family"] for p in pts})
    if len(fams) != 2:
        raise WorkbenchError(f"need processes of both MoE families (qwen3_moe, gpt_oss), got {fams or 'none'}")
    gpus = sorted({p["gpu"] for p in pts})
    y = np.log([p["s_ms"] for p in pts])
    cols = [np.ones(len(pts)), np.log([p["W_gflop"] for p in pts]),
            np.array([p["family"] == "qwen3_moe" for p in pts], float)]
    cols += [np.array([p["gpu"] == g for p in pts], float) for g in gpus[1:]]
    beta, se, df = _ols(np.column_stack(cols), y)
    t = float(sps.t.ppf((1 + CONFIDENCE) / 2, df))
    b, c = float(beta[1]), float(beta[2])
    bci, cci = [b - t * se[1], b + t * se[1]], [c - t * se[2], c + t * se[2]]
    work = ("grows" if bci[0] > 0 else "shrinks" if bci[1] < 0 else
            "flat" if -FLAT_B <= bci[0] and bci[1] <= FLAT_B else "undecided")
    family = ("one curve" if -ONE_CURVE <= cci[0] and cci[1] <= ONE_CURVE else
              "families differ" if cci[0] > 0 or cci[1] < 0 else "undecided")
    decision = {("grows", "one curve"): "gpu work per sync",
                ("grows", "families differ"): "gpu work, and a family effect beyond it"}.get((work, family))
    if decision is None:
        decision = ({"one curve": "constant per sync", "families differ": "a constant per family"}.get(
                        family, "constant per sync within a family (the families' gap undecided)") if work == "flat"
                    else "inconclusive (the saving per sync shrinks with W: not this mechanism)" if work == "shrinks"
                    else "inconclusive")
    per_shape: dict = {}
    for p in pts:
        per_shape[(p["model"], p["tokens"])] = per_shape.get((p["model"], p["tokens"]), 0) + 1
    thin = sorted(f"{m} {t}" for (m, t), k in per_shape.items() if k < MIN_PER_SHAPE)
    if thin or df < MIN_DF:
        decision = (f"not read: too few processes (the rule needs {MIN_PER_SHAPE} a shape and {MIN_DF} residual df; "
                    f"{df} df" + (f", thin: {', '.join(thin)}" if thin else "") + ")")
    within = {}
    for fam in fams:
        sub = [p for p in pts if p["family"] == fam]
        if len({p["W_gflop"] for p in sub}) >= 2 and len(sub) >= 3:
            bw, sw, dfw = _ols(np.column_stack([np.ones(len(sub)), np.log([p["W_gflop"] for p in sub])]),
                               np.log([p["s_ms"] for p in sub]))
            tw = float(sps.t.ppf((1 + CONFIDENCE) / 2, dfw))
            within[fam] = {"b": float(bw[1]), "b_ci90": [float(bw[1] - tw * sw[1]), float(bw[1] + tw * sw[1])],
                           "n": len(sub)}
    return {"b": b, "b_ci90": [float(v) for v in bci], "c": c, "c_ci90": [float(v) for v in cci], "df": df,
            "n": len(pts), "gpus": gpus, "a": float(beta[0]), "work": work, "family": family, "decision": decision,
            "within": within, "rule": "studies.moe_two_term.moe_work.fit (written 2026-11-27 (8) before its run)"}


def lines(pts: list[dict], f: dict) -> list[str]:
    by: dict = {}
    for p in pts:
        if "s_ms" in p:
            by.setdefault((p["model"], p["tokens"]), []).append(p)
    out = ["per-sync saving of MoE's sort_bincount by shape (the process as unit; W = expert GEMM GFLOPs per expert "
           "iteration):"]
    for (m, t), ps in sorted(by.items(), key=lambda kv: kv[1][0]["W_gflop"]):
        s = [p["s_ms"] for p in ps]
        out.append(f"  {m:14s} {t:6d} tokens  W {ps[0]['W_gflop']:7.2f}  s {np.mean(s) * 1e3:6.1f} us a sync "
                   f"(SD {np.std(s, ddof=1) * 1e3 if len(s) > 1 else float('nan'):5.1f}, {len(s)} processes; "
                   f"{np.mean([p['syncs_removed'] for p in ps]):.0f} syncs removed)")
    out.append(f"fit log s = a + b log W + c [qwen3_moe]{' + GPU' if len(f['gpus']) > 1 else ''} over {f['n']} "
               f"processes ({f['df']} df): b {f['b']:.3f} [{f['b_ci90'][0]:.3f}, {f['b_ci90'][1]:.3f}] ({f['work']}), "
               f"c {f['c']:.3f} [{f['c_ci90'][0]:.3f}, {f['c_ci90'][1]:.3f}] ({f['family']})")
    out.append(f"decision: {f['decision']}")
    for fam, w in f["within"].items():
        out.append(f"  beside: within {fam}, b {w['b']:.3f} [{w['b_ci90'][0]:.3f}, {w['b_ci90'][1]:.3f}] "
                   f"({w['n']} processes)")
    left = [x for p in pts for x in p.get("left_out", [])]
    for x in left:
        out.append(f"  left out: {x['folder']}: {x['why']}")
    return out


def main(argv: list[str] | None = None) -> int:
    from workbench.cli import emit_json, parser
    from workbench.measure.results import atomic_write_json

    ap = parser("studies.moe_two_term.moe_work", __doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+", help="folders holding plain `python -m workbench.ab --opt moe` runs (searched "
                                            "below); the fit goes to FIRST_DIR/moe_work.json")
    a = ap.parse_args(argv)
    pts = points(a.dirs)
    f = fit(pts)
    print("\n".join(lines(pts, f)))
    out = os.path.join(a.dirs[0], OUT_FILE)
    atomic_write_json(out, {"fit": f, "points": pts})
    emit_json({"out": out, "decision": f["decision"], "b_ci90": f["b_ci90"], "c_ci90": f["c_ci90"]})
    return 0


if __name__ == "__main__":
    import sys

    from workbench.cli import run_main
    sys.exit(run_main(main))
