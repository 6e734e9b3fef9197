"""How each speedup and savings-model verdict moves with the document-length distribution.

    # D = documents in a packed batch

`table(run_folders)`: one row per (run folder, comparison) of `python -m workbench.ab --opt X --headline --lengths
SPEC` runs (`profiles/lengths_campaign.sh` makes them): the `--lengths` the run used (meta.json), D per batch (mean,
min, max over the run's packed batches, summary.json's `batches`), the speedup with its 95% CI and verdict recomputed
from results.csv with today's statistics (`analysis.recomputed`: the rep is the unit), and the savings-model verdict
with measured / predicted and its 90% CI (summary.json's `savings_model`, written by `workbench verdicts`).
`varied(table)`: the comparisons that ran on two or more distributions. Its figure (speedup with its 95% CI against
mean D per batch, one line per optimization) is `workbench.report.lengths_figure(table)`.
"""
from __future__ import annotations

import json
import os

import pandas as pd

from workbench import analysis
from workbench.measure.results import void_comparisons

COLUMNS = ["lengths", "opt", "comparison", "model", "layers", "tokens", "attn", "gpu_name", "baseline", "arm",
           "docs_per_batch_mean", "docs_per_batch_min", "docs_per_batch_max", "n_batches", "speedup", "ci95_lo",
           "ci95_hi", "verdict", "n_pairs", "n_units", "savings_verdict", "savings_ratio", "savings_ratio_ci90_lo",
           "savings_ratio_ci90_hi", "folder"]
NUMERIC = ("layers", "tokens", "docs_per_batch_mean", "docs_per_batch_min", "docs_per_batch_max", "n_batches",
           "speedup", "ci95_lo", "ci95_hi", "n_pairs", "n_units", "savings_ratio", "savings_ratio_ci90_lo",
           "savings_ratio_ci90_hi")


def _json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError):
        return {}


def _pair(v) -> tuple:
    return (v[0], v[1]) if isinstance(v, (list, tuple)) and len(v) == 2 else (None, None)


def _rows(folder: str) -> list[dict]:
    s, m = _json(os.path.join(folder, "summary.json")), _json(os.path.join(folder, "meta.json"))
    lengths = (m.get("args") or {}).get("lengths")
    dev = m.get("device") if isinstance(m.get("device"), dict) else {}
    rows = []
    void = void_comparisons(folder)  # a void comparison is in no table
    for c in s.get("comparisons", []):
        base, opt = (c.get("baseline") or {}).get("arm"), (c.get("optimized") or {}).get("arm")
        if not base or not opt or c.get("name") in void:
            continue
        docs = [b["documents"] for b in c.get("batches") or [] if isinstance(b, dict) and "documents" in b]
        new = analysis.recomputed(folder, c.get("name"), base, opt) or {}
        lo, hi = _pair(new.get("ci95"))
        sm = c.get("savings_model") or {}
        rlo, rhi = _pair(sm.get("ratio_ci90"))
        rows.append({"lengths": lengths, "opt": c.get("opt") or c.get("name"), "comparison": c.get("name"),
                     **{k: c.get(k) for k in ("model", "layers", "tokens", "attn")},
                     "gpu_name": dev.get("gpu_name") or dev.get("name") or s.get("device"), "baseline": base,
                     "arm": opt, "docs_per_batch_mean": sum(docs) / len(docs) if docs else None,
                     "docs_per_batch_min": min(docs, default=None), "docs_per_batch_max": max(docs, default=None),
                     "n_batches": len(docs), "speedup": new.get("speedup"), "ci95_lo": lo, "ci95_hi": hi,
                     "verdict": new.get("verdict"), "n_pairs": new.get("n_pairs"), "n_units": new.get("n_units"),
                     "savings_verdict": sm.get("verdict"), "savings_ratio": sm.get("ratio"),
                     "savings_ratio_ci90_lo": rlo, "savings_ratio_ci90_hi": rhi, "folder": folder})
    return rows


def table(run_folders) -> pd.DataFrame:
    """One row per comparison of each run folder (`COLUMNS`), sorted by optimization then mean D per batch."""
    rows = [r for f in run_folders for r in _rows(str(f))]
    df = pd.DataFrame(rows, columns=COLUMNS)
    for col in NUMERIC:
        df[col] = pd.to_numeric(df[col], errors="coerce")
    return df.sort_values(["opt", "docs_per_batch_mean"], kind="stable", ignore_index=True)


def varied(tab: pd.DataFrame) -> pd.DataFrame:
    """The rows of `tab` whose comparison (opt, model, layers, tokens, baseline, arm) ran on two or more `--lengths`
    distributions: what a sensitivity can be read from (one distribution alone says nothing about the dependence)."""
    key = ["opt", "model", "layers", "tokens", "baseline", "arm"]
    if tab.empty:
        return tab
    n = tab.fillna({k: "" for k in key}).groupby(key, sort=False)["lengths"].transform("nunique")
    return tab[n.values >= 2].reset_index(drop=True)


def run_folders(root: str) -> list[str]:
    """The run folders below `root` (each holding a summary.json), sorted."""
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in ("traces", "logs"))
        if "summary.json" in files:
            out.append(d)
            dirs[:] = []
    return sorted(out)
