"""Static figures (PNG, matplotlib with the Agg backend) for pages that cannot run plotly: the README's headline.

    from workbench import analysis as an
    from workbench.report import figures
    rows = figures.headline_rows(an.comparisons("profiles"))
    figures.save_headline(rows, "profiles/headline.png")

Plotly's static export needs a browser; matplotlib draws the same numbers without one. The PNG carries a digest of
the numbers it draws (`DIGEST_KEY` in its text metadata) and no timestamp, so `workbench readme_results
--check` can tell a stale figure from a current one without comparing pixels.
"""
from __future__ import annotations

import hashlib
import os

import pandas as pd

from workbench.opts import registry as opt_registry
from workbench.report import palette
from workbench.traces import components

DIGEST_KEY = "workbench-data-sha256"
OPT_ORDER = (*opt_registry.names(), "all")
VERDICT_COLOURS = {k: palette.VERDICTS[k] for k in ("faster", "slower")}
NEUTRAL = palette.VERDICTS["no detectable difference"]
FIGURE_COLUMNS = ["label", "speedup", "ci95_lo", "ci95_hi", "verdict", "n_pairs", "unit"]
"""`unit`: what the interval is over, said on the figure ("within this run, 8 reps"; "a rerun, 38 processes")."""


def _k(tokens) -> str:
    try:
        t = int(tokens)
    except (TypeError, ValueError):
        return str(tokens)
    return f"{t // 1024}k" if t % 1024 == 0 else str(t)


def headline_rows(comps: pd.DataFrame, prefer=None) -> pd.DataFrame:
    """The comparisons the headline figure draws (`FIGURE_COLUMNS`): every A/B arm against its baseline (sweeps,
    A/A and NVTX comparisons left out), one row per distinct comparison (the run `analysis.runs_of` chooses where
    several ran it; `prefer`: see `runs_of`), in the order packing, offload, MoE, all three. `label` names the arms, model, layers, tokens
    and the attention backend that ran, and says where another run of the same comparison disagrees (its CI
    disjoint, or another verdict: the results page lists both)."""
    from workbench.analysis import runs_of

    from workbench.analysis import default_lengths
    d = default_lengths(comps[comps["role"].isin(["optimized", "other"]) & ~comps["name"].astype(str).str.contains("@")])
    d = runs_of(d, prefer)
    from workbench.analysis import CONFIG_KEY
    key = d[CONFIG_KEY].astype(str).agg("|".join, axis=1)
    split = key[~d["agrees"].astype(bool)].unique() if len(d) else []
    d = d.assign(_split=key.isin(split))
    d = d[d["chosen"]].copy()
    if d.empty:
        return pd.DataFrame(columns=FIGURE_COLUMNS)
    d["_o"] = d["opt"].map({o: i for i, o in enumerate(OPT_ORDER)}).fillna(len(OPT_ORDER))
    d["_ranks"] = pd.to_numeric(d["ranks"], errors="coerce").fillna(1) if "ranks" in d else 1
    d = d.sort_values(["_o", "_ranks", "tokens", "baseline"], kind="stable")
    d["label"] = [f"{o}: {a} vs {b}" + (" (another run disagrees)" if sp else "")
                  + f"\n{m} · {int(la)} layers · {_k(t)} tokens · {at}"
                  + (f" · {int(n)} x {_gpu_short(g)} (FSDP2)" if n > 1 else f" · {_gpu_short(g)}")
                  for o, a, b, m, la, t, at, sp, n, g in zip(d["opt"], d["arm"], d["baseline"], d["model"], d["layers"],
                                                             d["tokens"], d["attn"], d["_split"], d["_ranks"],
                                                             d["gpu_name"])]
    d["unit"] = [f"within this run, {int(u)} reps" if u == u else f"within this run, {int(n)} pairs"
                 for u, n in zip(pd.to_numeric(d["n_units"], errors="coerce"), d["n_pairs"])]
    return d[FIGURE_COLUMNS].reset_index(drop=True)


def claim_rows(claims: pd.DataFrame) -> pd.DataFrame:
    """The headline figure's rerun rows (`FIGURE_COLUMNS`), one per process-level claim of a held-out design
    (`analysis.process_claims` rows whose source is a `prospective*.json`), in the order packing, offload, MoE, all:
    the estimate and its 95% CI over the processes, drawn above the single runs."""
    if claims is None or claims.empty:
        return pd.DataFrame(columns=FIGURE_COLUMNS)
    c = claims[claims["source"].astype(str).str.contains(r"prospective[^/]*\.json$")].copy()
    c["_o"] = c["name"].map({o: i for i, o in enumerate(OPT_ORDER)}).fillna(len(OPT_ORDER))
    c = c.sort_values("_o", kind="stable")
    c["label"] = [f"a rerun: {n}: {a} vs {b}\n{m} · {int(la)} layers · {_k(t)} tokens · {at} · {_gpu_short(g)}"
                  for n, a, b, m, la, t, at, g in zip(c["name"], c["arm"], c["baseline"], c["model"], c["layers"],
                                                      c["tokens"], c["attn"], c["gpu_name"])]
    c["unit"] = [f"a rerun, {int(k)} processes on {int(j)} machines" for k, j in zip(c["K"], c["machines"])]
    c["verdict"] = [str(v).replace(" processes", " reps") if str(v).startswith("no verdict") else v
                    for v in c["verdict"]]
    c["n_pairs"] = c["K"]
    c = c.rename(columns={"speedup": "speedup"})
    return c[FIGURE_COLUMNS].reset_index(drop=True)


def digest(rows: pd.DataFrame) -> str:
    """sha256 of the numbers and labels a headline figure draws (rounded as drawn)."""
    text = "\n".join(f"{r.label}|{r.speedup:.4f}|{r.ci95_lo:.4f}|{r.ci95_hi:.4f}|{r.verdict}|{r.n_pairs}|{r.unit}"
                     for r in rows.itertuples())
    return hashlib.sha256(text.encode()).hexdigest()


def _colour(verdict) -> str:
    return VERDICT_COLOURS.get(str(verdict), NEUTRAL)


LOG_AXIS_ABOVE = 3.0
"""The headline figure's speedup axis is logarithmic when its range spans more than this ratio."""


def _gpu_short(name) -> str:
    """"NVIDIA H100 80GB HBM3" -> "H100"."""
    parts = [p for p in str(name or "").replace("NVIDIA", "").split() if p]
    return parts[0] if parts else ""


def headline_figure(rows: pd.DataFrame, title: str = "Speedup over the baseline, 95% CI"):
    """A matplotlib figure: one row per comparison, the speedup (mean baseline / mean arm) as a point with its 95%
    CI as error bars, coloured by verdict, the figure, CI, verdict and pairs written beside it; a line at 1."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = max(len(rows), 1)
    from matplotlib.transforms import blended_transform_factory

    fig, ax = plt.subplots(figsize=(11, 0.5 * n + 1.4), dpi=100)
    ys = list(range(n))[::-1]
    if len(rows):
        lo = min(rows["ci95_lo"].min(), 1.0)
        hi = max(rows["ci95_hi"].max(), 1.0)
        span = hi - lo or 0.1
        right = blended_transform_factory(ax.transAxes, ax.transData)
        for y, r in zip(ys, rows.itertuples()):
            c = _colour(r.verdict)
            ax.errorbar([r.speedup], [y], xerr=[[r.speedup - r.ci95_lo], [r.ci95_hi - r.speedup]], fmt="o",
                        color=c, ecolor=c, capsize=4, markersize=6, lw=1.6)
            ax.text(1.02, y, f"{r.speedup:.3f}x [{r.ci95_lo:.3f}, {r.ci95_hi:.3f}]\n{r.verdict}, {r.unit}",
                    va="center", fontsize=8, color=c, transform=right)
        if hi / lo > LOG_AXIS_ABOVE:  # a wide span (an anchor arm at 8x) would flatten every other CI to a dot
            ax.set_xscale("log")
            ax.set_xlim(lo / (hi / lo) ** 0.03, hi * (hi / lo) ** 0.03)
            grid = (1, 1.5, 2, 3, 5, 8, 10, 20) if hi / lo > 4 else (0.9, 1, 1.1, 1.25, 1.5, 2, 3)
            ticks = [t for t in grid if lo * 0.97 <= t <= hi * 1.03]
            ax.set_xticks(ticks, [f"{t:g}x" for t in ticks])
            ax.minorticks_off()
        else:
            ax.set_xlim(lo - 0.05 * span, hi + 0.05 * span)
    else:
        ax.text(0.5, 0.5, "no complete GPU comparison in profiles/", ha="center", transform=ax.transAxes)
    ax.axvline(1.0, color="#57606a", ls=":", lw=1)
    ax.set_yticks(ys)
    ax.set_yticklabels(list(rows["label"]) if len(rows) else [""], fontsize=8.5)
    ax.set_ylim(-0.7, n - 0.3)
    ax.set_xlabel("exp(mean of log(mean baseline step / mean arm step)) over the unit named beside each row\n"
                  "bars: 95% CI (t over processes for a rerun, over reps within one run)", fontsize=8.5)
    ax.set_title(title, fontsize=11)
    ax.grid(axis="x", color="#d0d7de", lw=0.6)
    for s in ("top", "right"):
        ax.spines[s].set_visible(False)
    fig.subplots_adjust(left=0.36, right=0.8, top=1 - 0.45 / (0.5 * n + 1.4), bottom=0.75 / (0.5 * n + 1.4))
    return fig


def save_headline(rows: pd.DataFrame, path: str, title: str = "Speedup over the baseline, 95% CI") -> str:
    """Write the headline PNG to `path` (no timestamp, no software version; the data digest in its metadata);
    return the digest."""
    return _save_png(headline_figure(rows, title=title), path, digest(rows))


def _save_png(fig, path: str, d: str) -> str:
    """Write `fig` to `path` atomically, without a timestamp or software version, the data digest `d` in its
    metadata; close it; return `d`."""
    import matplotlib.pyplot as plt

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp.png"
    fig.savefig(tmp, format="png", bbox_inches="tight", metadata={"Software": None, DIGEST_KEY: d})
    plt.close(fig)
    os.replace(tmp, path)
    return d


def png_digest(path: str) -> str | None:
    """The data digest a headline PNG was drawn from (None when the file or the key is missing)."""
    if not os.path.exists(path):
        return None
    from PIL import Image

    with Image.open(path) as im:
        return (getattr(im, "text", None) or im.info or {}).get(DIGEST_KEY)


# --- where each traced step goes (issue: a PNG of the headline comparisons' breakdown) -------------------------------

BREAKDOWN_ORDER = components.STACKED
BREAKDOWN_COLOURS = components.COLOURS
"""The step components in stacking order, and their colours (`workbench.traces.components`: the notebooks' too)."""
BREAKDOWN_COLUMNS = ["label", *BREAKDOWN_ORDER]


def breakdown_rows(bd: pd.DataFrame) -> pd.DataFrame:
    """One row per (comparison, arm) of the traced single-optimization comparisons (no sweeps, no levers), baseline and
    optimized arms, ms per traced step per component (`analysis.breakdown` rows in; `BREAKDOWN_COLUMNS` out)."""
    if bd.empty:
        return pd.DataFrame(columns=BREAKDOWN_COLUMNS)
    from workbench.analysis.speedups import lever_comparisons  # the levers' breakdowns: the README's levers section
    d = bd[~bd["comparison"].astype(str).str.contains("@") & bd["role"].isin(["baseline", "optimized"])
           & bd["component"].isin(BREAKDOWN_ORDER) & ~bd["comparison"].astype(str).isin(lever_comparisons())]
    if d.empty:
        return pd.DataFrame(columns=BREAKDOWN_COLUMNS)
    d = d[d["folder"] == sorted(d["folder"].unique())[-1]]  # the newest traced folder
    t = d.pivot_table(index=["comparison", "role", "arm", "model"], columns="component", values="ms",
                      aggfunc="sum").reindex(columns=list(BREAKDOWN_ORDER)).fillna(0.0).reset_index()
    t["_o"] = t["comparison"].map({o: i for i, o in enumerate(OPT_ORDER)}).fillna(len(OPT_ORDER))
    t["_r"] = t["role"].map({"baseline": 0, "optimized": 1})
    t = t.sort_values(["_o", "_r"], kind="stable")
    t["label"] = [f"{c}: {a}\n{m}" for c, a, m in zip(t["comparison"], t["arm"], t["model"])]
    return t[BREAKDOWN_COLUMNS].reset_index(drop=True)


def breakdown_digest(rows: pd.DataFrame) -> str:
    text = "\n".join("|".join([str(r["label"])] + [f"{r[c]:.2f}" for c in BREAKDOWN_ORDER])
                     for r in rows.to_dict("records"))
    return hashlib.sha256(text.encode()).hexdigest()


def save_breakdown(rows: pd.DataFrame, path: str, title: str = "Where each traced step goes (ms per step)") -> str:
    """A stacked bar per arm (busy time by kernel class, then idle time by cause), written like `save_headline`."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = max(len(rows), 1)
    fig, ax = plt.subplots(figsize=(10, 0.55 * n + 1.6))
    y = list(range(n))[::-1]
    left = [0.0] * len(rows)
    for comp in BREAKDOWN_ORDER:
        vals = rows[comp].tolist() if len(rows) else []
        ax.barh(y[:len(vals)], vals, left=left, color=BREAKDOWN_COLOURS[comp], label=components.COMPONENTS[comp].label,
                height=0.65,
                hatch="//" if comp in components.IDLE else None, edgecolor="white",
                linewidth=0.3)
        left = [a + b for a, b in zip(left, vals)]
    ax.set_yticks(y[:len(rows)])
    ax.set_yticklabels(rows["label"].tolist(), fontsize=8.5)
    ax.set_xlabel("ms per traced step (torch.profiler pass; busy = some kernel runs, hatched = GPU idle)", fontsize=8.5)
    ax.set_title(title, fontsize=11)
    ax.legend(ncol=5, fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.12 - 0.3 / n), frameon=False)
    for s in ("top", "right"):
        ax.spines[s].set_visible(False)
    return _save_png(fig, path, breakdown_digest(rows))


def main(argv=None) -> int:
    """`workbench figures [PROFILES] [--out PNG]`: the rows the headline figure draws (and the PNG)."""
    from workbench import analysis as an
    from workbench.cli import parser
    p = parser("workbench figures", __doc__ + "\nPrints the rows the headline figure draws; --out also draws it.")
    p.add_argument("profiles", nargs="?", default=None, help="the folder searched (default: the checkout's "
                   "profiles/)")
    p.add_argument("--out", default=None, metavar="PNG", help="write the headline figure here")
    a = p.parse_args(argv)
    rows = headline_rows(an.comparisons(a.profiles))
    print(rows.to_string(index=False) if not rows.empty else "no comparison to draw")
    if a.out:
        print(f"wrote {save_headline(rows, a.out)}")
    return 0


if __name__ == "__main__":
    import sys

    from workbench.cli import run_main
    sys.exit(run_main(main))
