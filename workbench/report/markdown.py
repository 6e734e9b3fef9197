"""The pieces both generated pages (`workbench.report.headline`, `workbench.report.results_page`) are made of: the
README's block markers, cell formatters, the markdown table, the rules the pages state, and `_Ctx`, the data one page
is built from with links relative to the page's folder."""
from __future__ import annotations

import os

import pandas as pd

from workbench import analysis as an

RESULTS_MARKERS = ("<!-- results -->", "<!-- /results -->")
VIEWING_MARKERS = ("<!-- viewing -->", "<!-- /viewing -->")


def _f(v, spec="{:.1f}", dash="-") -> str:
    try:
        if v is None or (isinstance(v, float) and v != v) or v is pd.NA:
            return dash
        return spec.format(v)
    except (TypeError, ValueError):
        return str(v)


def _table(header: list[str], rows: list[list]) -> list[str]:
    """A GitHub markdown table, one line per row, cells as given (no padding: the page is read rendered)."""
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return out + ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows] + [""]


def _ci(r, est="speedup", lo="ci95_lo", hi="ci95_hi") -> str:
    return f"{_f(r[est], '{:.3f}')}x [{_f(r[lo], '{:.3f}')}, {_f(r[hi], '{:.3f}')}]"


def _ms_ci(v, lo, hi, spec="{:.1f}") -> str:
    if v is None or v != v:
        return "-"
    ci = f" [{_f(lo, spec)}, {_f(hi, spec)}]" if lo is not None and lo == lo else ""
    return f"{_f(v, spec)}{ci} ms"


def _eq(v, different_passed=None) -> str:
    """`numerics.equiv_cell`: "different fn (stated)" for a stated different-function arm that passed its checks."""
    from workbench.measure.numerics import equiv_cell
    return equiv_cell(v, different_passed)


def _shape(r) -> list:
    return [r["model"], _f(r["layers"], "{:.0f}"), _f(r["tokens"], "{:.0f}"), r["attn"] or "-"]


def _shape_text(r) -> str:
    return f"{r['model']} · {_f(r['layers'], '{:.0f}')} layers · {_f(r['tokens'], '{:.0f}')} tokens · " \
           f"{r['attn'] or '-'}"


def _n(r) -> str:
    """`12 (3)`: pairs and, in brackets, reps (the unit of independence)."""
    u = r.get("n_units")
    return _f(r.get("n_pairs"), "{:.0f}") + (f" ({_f(u, '{:.0f}')})" if u is not None and u == u else "")


SPEEDUP_RULE = ("Speedup = exp(mean over reps of log(mean baseline step / mean arm step)) over paired timed steps (same "
                "batch, same rep), recomputed from each run's results.csv; 95% CI a t-interval over reps (the rep is "
                "the unit of independence: arms run as blocks per rep); `faster` / `slower` when the CI excludes 1, no "
                "verdict below 4 reps (`workbench/measure/stats.py`).")
MODEL_RULE = ("A savings model predicts the saving (baseline - arm, ms per step) from inputs measured in the run's own "
              "traces (delta method over the traced steps; times θ, the instrument's calibrated factor, where a "
              "dose-response measured one); measured = the mean paired saving at the unit of the claim (over "
              "processes for a --processes run, else the rep-level se plus the process component tau); `confirmed` "
              "when the 90% CI of measured / predicted lies inside [0.8, 1.25], `refuted` when entirely outside, "
              "`inconclusive` otherwise, Holm-adjusted within each run's family of model verdicts (published forms "
              "included); `no verdict: instrument` when an arm's traced step is more than 15% off its timed step "
              "(`workbench/savings/verdicts.py`).")


class _Ctx:
    """The data one page is built from, and links relative to the page's folder."""

    def __init__(self, profiles, include_cpu, include_incomplete, repo, page_dir):
        self.root = an.profiles_root(profiles or os.path.join(repo, "profiles"))
        self.repo, self.page_dir = repo, page_dir
        self.include_cpu = include_cpu
        self.keep = True if include_incomplete else an.KEEP_FROM_INCOMPLETE
        kw = dict(include_cpu=include_cpu, include_incomplete_comparisons=self.keep)
        self.comps = an.comparisons(self.root, **kw)
        self.verd = an.verdicts(self.root, **kw)
        self.kw = kw
        self.gpus = sorted({g for g in self.comps["gpu_name"] if isinstance(g, str)})

    def abs(self, rel: str) -> str:
        """`rel` as `analysis` writes it (relative to the profiles root's parent), absolute."""
        return os.path.join(os.path.dirname(self.root), rel)

    def link(self, rel: str, text: str | None = None) -> str:
        p = self.abs(rel)
        shown = text or os.path.relpath(p, self.repo)
        return f"[`{shown}`]({os.path.relpath(p, self.page_dir)})"

    def short(self, rel: str) -> str:
        """A link to a summary.json whose text is its run folder relative to the profiles root."""
        d = os.path.dirname(rel) if rel.endswith(".json") else rel
        return self.link(rel, os.path.relpath(self.abs(d), self.root))



def _label(r) -> str:
    """A comparison's name, with its data-parallel ranks when more than one (FSDP2 under torchrun)."""
    n = r.get("ranks")
    return f"{r['name']} ({int(n)} ranks, FSDP2)" if n == n and n and int(n) > 1 else str(r["name"])



def _ratio_text(v, prefix="") -> str:
    r, lo, hi = v.get(prefix + "ratio"), v.get(prefix + "ratio_ci90_lo"), v.get(prefix + "ratio_ci90_hi")
    if r is None or r != r:
        return ""
    ci = f" [90% CI {_f(lo, '{:.2f}')}, {_f(hi, '{:.2f}')}]" if lo is not None and lo == lo else ""
    return f"measured / predicted {_f(r, '{:.2f}')}{ci}"

