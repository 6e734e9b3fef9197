"""The changes of a run diff as one stacked bar (matplotlib), for notebook 04: the component changes of
`workbench.compare.rundiff.diff_runs` stacked (increases up, decreases down, flagged ones opaque), beside a bar of the
traced step-time change and one of the timed change, each with its 95% CI, so that one sees at a glance whether
the parts add up and whether the profiler's steps moved like the timed ones."""
from __future__ import annotations


def changes_figure(diff: dict, *, top: int = 8, title: str | None = None):
    """A matplotlib Figure of `diff` (the dict of `rundiff.diff_runs`); the `top` largest |changes| are drawn by
    name, the rest as one "other" segment."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted(diff["rows"], key=lambda r: -abs(r["delta_ms"]))
    named, rest = rows[:top], rows[top:]
    from workbench.traces.components import COLOURS

    segs = [("/".join(x for x in (r["component"], r["layer"], r["pass"]) if x), r["delta_ms"], r["flagged"],
             COLOURS.get(r["component"], "#DDDDDD")) for r in named]  # a component's one colour, in every layer
    if rest:
        segs.append((f"the other {len(rest)} changes", sum(r["delta_ms"] for r in rest), False, "#FFFFFF"))
    fig, ax = plt.subplots(figsize=(6.5, 4))
    up = down = 0.0
    for name, v, flagged, colour in segs:
        base = up if v >= 0 else down
        ax.bar(0, v, bottom=base, color=colour, alpha=1.0 if flagged else 0.35,
               label=f"{name}{' *' if flagged else ''}", edgecolor="black", linewidth=0.4)
        if v >= 0:
            up += v
        else:
            down += v
    for x, key, label in ((1, "traced", "traced step"), (2, "timed", "timed step")):
        t = diff[key]
        ci = t.get("ci95")
        err = [[t["delta_ms"] - ci[0]], [ci[1] - t["delta_ms"]]] if ci else None
        ax.bar(x, t["delta_ms"], color="grey", yerr=err, capsize=4)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks([0, 1, 2], ["components", "traced step", "timed step"])
    ax.set_ylabel("change B - A, ms per step")
    ax.set_title(title or f"{diff['comparison']} / {diff['arm']}: what moved (* = CI excludes 0 after Holm)",
                 fontsize=9)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    return fig
