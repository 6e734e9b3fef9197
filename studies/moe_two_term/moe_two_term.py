"""MoE's saving in two terms: a removed sync saves u, and sort_bincount's backward writes more whole-size row
gradients than HF's eager loop, at beta a GB (written 2026-11-27 (9) after the mechanism campaign's
rule read "inconclusive: the saving per sync shrinks with W", and before the probe run that judges it).

What the campaign showed beside its rule (profiles/2026-11-27_h200x2_moe_work_{a,b}, 41 processes, the timed step's
own CUDA-event split): the forward saves 34-41 us a removed sync at all six shapes of both families, but the backward's
saving falls with tokens in qwen3-30b-a3b only (155, 88, -53 ms at 4k, 8k, 16k). The backward has no sync; what
differs is how each arm takes its rows (counted on the CPU, tests/test_moe.py):

    # N = tokens, k = experts per token, S = N*k routed rows, E_hit = experts hit, H = hidden, L = MoE layers
    eager          hidden_states[token_idx] per expert: E_hit zeroed (N,H) gradients (index backward) summed
    sort_bincount  x_SH[start:start+n] per expert:        E_hit zeroed (S,H) gradients (slice_backward) summed
    sort_split     x_SH.split(counts):                    one (S,H) gradient (cat)

So sort_bincount writes E_hit*(S-N)*H more elements a layer than eager: k-1 times eager's, 240 GB more a step at
qwen3-30b-a3b 4 L 16k (E 128, k 8) against 18 GB at gpt-oss-20b 4 L 8k (E 32, k 4).

    per process:  saving_ms = u * syncs_removed - beta * extra_gb
                  extra_gb  = L * E_hit * (S - N) * H * 2 bytes / 1e9, E_hit = syncs_removed / (2 L c_family)
                  (c: eager's syncs per expert hit and pass, 7 GPT-OSS, 5 Qwen3-MoE; 2 passes: forward and the
                  checkpointed recompute)
    fit: least squares without an intercept over processes, 90% t-intervals for u and beta.
    beside (a plausibility reading of beta, not a test): each extra element is written by the zero-fill, then read
    twice and written once by autograd's sum: 4 accesses, so beta ~ 4 / memory bandwidth (1.15 ms a GB: 3.5 TB/s,
    73% of an H200's 4.8 TB/s peak).

    python -m studies.moe_two_term.moe_backward fit DIR [DIR ...] [--predict MODEL LAYERS TOKENS]   # -> DIR/moe_backward.json

The readings that judge it (the probe's rules, the held-out verdicts) and the command: `moe_backward`.
"""
from __future__ import annotations

import json
import os

import numpy as np

from workbench.errors import WorkbenchError

FIT_FILE = "moe_backward.json"
BYTES = 2  # bf16 row gradients (the autocast step's hidden states)
PASSES = 2  # forward and the checkpointed recompute: eager's loop runs in both
SYNCS_PER_EXPERT = {"gpt_oss": 7, "qwen3_moe": 5}
"""eager's syncs per expert hit, layer and pass (workbench/opts/moe.py's docstring; tests/test_moe.py counts them)."""
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
    from studies.moe_two_term import moe_work

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

    from studies.moe_two_term.moe_work import _ols

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


def runs_by_shape(roots: list[str]) -> dict:
    """{(model, layers, tokens): [run]} over the plain moe runs under `roots` (`moe_work.moe_runs`: each run_id once),
    comparisons that ran to the end: run = {"folder", "results", "c", "run_id", "gpu_name"}."""
    from studies.moe_two_term.moe_work import moe_runs

    out: dict = {}
    for d, results, summary, meta in moe_runs(roots):
        for c in summary.get("comparisons", []):
            if c.get("opt") == "moe" and c.get("status") == "ok":
                out.setdefault((c["model"], int(c["layers"]), int(c["tokens"])), []).append(
                    {"folder": d, "results": results, "c": c, "run_id": summary.get("run_id") or "",
                     "gpu_name": str((meta.get("device") or {}).get("gpu_name") or "?")})
    return out


def fix_runs(runs: list[dict]) -> list[dict]:
    """The runs of `runs_by_shape` that time the seeds' fix against eager (baseline eager, optimized sort_bincount):
    what the fit's readings by pass and the held-out verdicts read."""
    return [r for r in runs if r["c"]["baseline"]["arm"] == "eager" and r["c"]["optimized"]["arm"] == "sort_bincount"]


def arms(c: dict) -> dict:
    return {a["arm"]: a for a in [c["baseline"], c["optimized"], *c.get("others", [])]}


def by_pass(f: dict, fit_json: str, held_out: list[str] | None = None) -> list[dict]:
    """Per shape of the fit's own runs (`dirs`, relative to the fit's folder): the mean saving of the forward, the
    backward and the step (ms, from the timed steps' CUDA events), the forward's per removed sync (us), the extra GB
    and the two-term prediction: what notebook 02 draws. With `held_out` (run roots), also each shape there the fit
    did not use, its row marked "held_out": True."""
    root = os.path.dirname(os.path.abspath(fit_json))
    dirs = [os.path.normpath(os.path.join(root, d)) for d in f.get("dirs") or ["."]]
    fitted = set(f.get("fitted_shapes") or [])
    groups = [(False, sorted(runs_by_shape(dirs).items(), key=lambda kv: (kv[0][0], kv[0][2])))]
    if held_out:
        held = sorted(runs_by_shape(held_out).items(), key=lambda kv: (kv[0][0], kv[0][2]))
        groups.append((True, [(k, v) for k, v in held if f"{k[0]} {k[1]} L {k[2]}" not in fitted]))
    rows = []
    for held, items in groups:
        rows += _pass_rows(f, items, held)
    return rows


def _pass_rows(f: dict, items: list, held: bool) -> list[dict]:
    rows = []
    for (model, layers, tokens), runs in items:
        runs = fix_runs(runs)
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
                     "predicted_ms": f["u_ms"] * d["syncs_per_step"] - f["beta_ms_per_gb"] * extra, "held_out": held})
    return rows


def job_roots(profiles: str, job: str) -> list[str]:
    """The folders under `profiles` a designed per-GPU job wrote (its `results.DESIGN_FILE` names `job`; matched by the
    script's file name, so a record made before the script moved folders still matches)."""
    from workbench.measure import results

    out = []
    for dirpath, _dirs, files in sorted(os.walk(profiles)):
        if results.DESIGN_FILE in files:
            try:
                with open(os.path.join(dirpath, results.DESIGN_FILE), encoding="utf-8") as fh:
                    if os.path.basename(json.load(fh).get("job") or "") == os.path.basename(job):
                        out.append(dirpath)
            except (OSError, ValueError):
                continue
    return out


def read_fit(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            f = json.load(fh)
    except (OSError, ValueError) as e:
        raise WorkbenchError(f"{path}: cannot read the fit ({type(e).__name__}: {e}); run `fit` first") from None
    if "cov" not in f:
        raise WorkbenchError(f"{path}: a fit without its covariance (written before 2026-11-27 (9)'s rule 2): "
                             "rerun `fit` over the same folders")
    return f
