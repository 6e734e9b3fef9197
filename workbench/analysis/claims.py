"""The articles' claims (README, "The claims we check") as a table, beside our comparisons."""
from __future__ import annotations

import re

import pandas as pd

from workbench.analysis.constants import CLAIMS


CLAIM_COLUMNS = ["opt", "upstream", "model", "gpu", "scope", "claimed_low_pct", "claimed_high_pct", "claimed_extra",
                 "claim"]


def claims_table() -> pd.DataFrame:
    """The Unsloth / NVIDIA articles' claims (README, "The claims we check") as numbers. `scope`: step (per batch / steps/s), fwd, bwd,
    hotspot_fwd / hotspot_bwd (the MoE routing block alone), model (a prediction of the (L-1)·m model), mask_ms
    (cost of one packed SDPA mask rebuild), syncs. Gains are throughput gains in percent (baseline/optimized - 1);
    `claimed_extra` carries non-percent figures (ms, GB of extra VRAM)."""
    return pd.DataFrame(CLAIMS, columns=CLAIM_COLUMNS)


def same_model(claim_model, our_model) -> bool:
    """Whether our model is the claim's: the same preset, or the same size where the claim names only a size
    ("8B" matches llama-3.1-8b)."""
    if not claim_model or not isinstance(our_model, str):
        return False
    c, o = str(claim_model).lower(), our_model.lower()
    size = lambda s: (re.findall(r"(\d+(?:\.\d+)?b)\b", s) or [None])[-1]  # noqa: E731
    return c == o or ("-" not in c and size(c) is not None and size(c) == size(o))


NOT_COMPARABLE_MULTI_GPU = ("a {n}-GPU FSDP2 step: its baseline is not the claim's single-GPU step, and its "
                            "equivalence to one process was checked in fp32 only (README: not comparable across 1 and "
                            "2 GPUs)")
"""Why a multi-GPU measurement is not set beside a single-GPU claim as a speedup of the same step."""


def comparable(ranks) -> tuple[bool, str | None]:
    """Whether our measurement on `ranks` processes compares with a claim (a single-GPU step), and why not."""
    n = int(ranks) if ranks == ranks and ranks is not None else 1
    return (True, None) if n <= 1 else (False, NOT_COMPARABLE_MULTI_GPU.format(n=n))


def claims_vs_ours(comps: pd.DataFrame) -> pd.DataFrame:
    """Each claim beside our comparisons of the same optimization (`comps` = `comparisons(...)`; the optimized arm,
    sweeps left out): scope "step" gets our speedup as a gain, `ours_pct` = 100 * (speedup - 1) with its 95% CI
    (`ours_ci95_lo_pct`/`hi`), verdict and pairs; scope "syncs" our syncs per step; the other scopes (fwd, bwd, model,
    mask, hotspot) are not paired measurements here: one row with note "not measured". `comparable` is False, with
    `why_not_comparable`, for a measurement that is not the claim's step (`comparable`: several GPUs)."""
    extra = ["ours_model", "layers", "tokens", "ours_gpu", "arm", "ours_pct", "ours_ci95_lo_pct", "ours_ci95_hi_pct",
             "verdict", "n_pairs", "ours_extra", "same_model", "ranks", "comparable", "why_not_comparable", "note",
             "file"]
    ours = comps[(comps["role"] == "optimized") & ~comps["name"].astype(str).str.contains("@")]
    rows = []
    for c in claims_table().to_dict("records"):
        m = ours[ours["opt"] == c["opt"]]
        if c["scope"] not in ("step", "syncs") or m.empty:
            rows.append({**c, "note": "no data" if m.empty else f"not measured (scope {c['scope']})"})
            continue
        for o in m.to_dict("records"):
            step = c["scope"] == "step"
            ok, why = comparable(o.get("ranks", 1))
            rows.append({**c, "ours_model": o["model"], "layers": o["layers"], "tokens": o["tokens"],
                         "ours_gpu": o["gpu_name"], "arm": f"{o['baseline']} -> {o['arm']}",
                         "ours_pct": 100 * (o["speedup"] - 1) if step else None,
                         "ours_ci95_lo_pct": 100 * (o["ci95_lo"] - 1) if step else None,
                         "ours_ci95_hi_pct": 100 * (o["ci95_hi"] - 1) if step else None,
                         "verdict": o["verdict"] if step else None, "n_pairs": o["n_pairs"] if step else None,
                         "ours_extra": None if step else f"syncs/step {o['syncs_baseline']:g} -> {o['syncs_arm']:g}",
                         "same_model": same_model(c["model"], o["model"]), "ranks": o.get("ranks", 1),
                         "comparable": ok, "why_not_comparable": why, "note": None, "file": o["file"]})
    df = pd.DataFrame(rows, columns=CLAIM_COLUMNS + extra)
    for col in ("ours_pct", "ours_ci95_lo_pct", "ours_ci95_hi_pct"):
        df[col] = pd.to_numeric(df[col], errors="coerce")
    return df
