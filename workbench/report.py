"""Console tables and plotly figures, rendered from recorded results (never from numbers held only here).

    from workbench.results import load_run
    from workbench import report
    df, summary, meta = load_run("profiles/<run_id>")
    print(report.comparison_table(summary["comparisons"][0]))
    report.step_time_figure(df).show()
"""
from __future__ import annotations

import pandas as pd

ARM_COLUMNS = [("arm", "arm", "{}"), ("step_ms", "step_ms", "{:.2f}"), ("p20-p80", None, None), ("n", "n", "{}"),
               ("speedup [95% CI]", None, None), ("fwd_ms", "fwd_ms", "{:.2f}"), ("bwd_ms", "bwd_ms", "{:.2f}"),
               ("syncs/step", "syncs_per_step", "{:.1f}"), ("counted_ms", "instrumented_step_ms", "{:.2f}"),
               ("peak_mib", "peak_mem_mib", "{:.0f}"), ("tok/s", "tokens_per_s", "{:.0f}"),
               ("loss", "loss", "{:.5f}"), ("equiv", None, None), ("status", "status", "{}")]
"""counted_ms: the step time of the counted pass (sync counter on): the counter's cost, never a timing."""


def _fmt(v, f) -> str:
    if v is None:
        return "-"
    try:
        if isinstance(v, float) and v != v:
            return "-"
        return f.format(v)
    except (ValueError, TypeError):
        return str(v)


def table(rows: list[list], header: list[str]) -> str:
    """Right-aligned plain-text table."""
    cols = [header] + [[str(c) for c in r] for r in rows]
    w = [max(len(r[i]) for r in cols) for i in range(len(header))]
    return "\n".join("  ".join(c.rjust(w[i]) for i, c in enumerate(r)) for r in cols)


def arms_frame(comparison: dict) -> pd.DataFrame:
    """The arms of one comparison (summary.json) as a DataFrame, baseline first."""
    arms = [comparison.get("baseline"), comparison.get("optimized"), *comparison.get("others", [])]
    return pd.DataFrame([a for a in arms if a])


def comparison_table(comparison: dict) -> str:
    """Title line, one row per arm, then speedup and the savings model against the measured saving."""
    c = comparison
    head = (f"{c.get('name') or c['opt']}: {c.get('model')}  layers {c.get('layers')}  tokens {c.get('tokens')}  "
            f"attn {c.get('attn')}")
    if c.get("excluded"):
        head += "  (left out: " + ", ".join(c["excluded"]) + ")"
    rows = []
    for a in arms_frame(c).to_dict("records"):
        row = []
        for title, key, f in ARM_COLUMNS:
            if title == "speedup [95% CI]":
                v = a.get("vs_baseline") if isinstance(a.get("vs_baseline"), dict) else {}
                ci = v.get("ci95")
                row.append("-" if not v else f"{_fmt(v.get('speedup'), '{:.3f}')}x" + (
                    f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""))
            elif title == "p20-p80":
                row.append(f"{_fmt(a.get('step_ms_p20'), '{:.2f}')}-{_fmt(a.get('step_ms_p80'), '{:.2f}')}")
            elif title == "equiv":
                e = a.get("equivalent")
                row.append("ref" if a.get("arm") == (c.get("baseline") or {}).get("arm") else
                           ("-" if e is None else ("bitwise" if a.get("bitwise") else ("yes" if e else "NO"))))
            else:
                row.append(_fmt(a.get(key), f))
        rows.append(row)
    lines = [head, table(rows, [t for t, _, _ in ARM_COLUMNS])]
    sm = c.get("savings_model") or {}
    sp, ci = c.get("speedup"), c.get("speedup_ci95")
    tail = f"speedup {_fmt(sp, '{:.3f}')}x" if sp is not None else "speedup -"
    if ci:
        tail += f" [95% CI {ci[0]:.3f}-{ci[1]:.3f}, n={c.get('n_pairs')} pairs]"
    if c.get("verdict"):
        tail += f": {c['verdict']}"
    proto = c.get("protocol") or {}
    if proto:
        tail += f" ({proto.get('reps')} reps, stopped by {proto.get('stopped_by')})"
    tail += (f"   saving: measured {_fmt(sm.get('measured_ms'), '{:.2f}')} ms, predicted "
             f"{_fmt(sm.get('predicted_ms'), '{:.2f}')} ms by {sm.get('formula')}")
    if sm.get("predicted_ms") is None and sm.get("reason"):
        tail += f" ({sm['reason']})"
    lines.append(tail)
    lines.append("equivalent: " + ("yes" if c.get("equivalent") else "NO"))
    return "\n".join(lines)


def step_times(df: pd.DataFrame) -> pd.DataFrame:
    """Per (opt, arm): median step_ms, p20, p80, n from a results.csv frame."""
    s = df[df["metric"] == "step_ms"]
    g = s.groupby(["opt", "arm"], sort=False)["value"]
    return pd.DataFrame({"step_ms": g.median(), "step_ms_p20": g.quantile(0.2), "step_ms_p80": g.quantile(0.8),
                         "n": g.count()}).reset_index()


def step_time_figure(df: pd.DataFrame, visualize: bool = False):
    """Box plot of step_ms per arm, one facet per optimization (plotly)."""
    import plotly.express as px

    s = df[df["metric"] == "step_ms"].copy()
    fig = px.box(s, x="arm", y="value", color="arm", facet_col="opt", points="all",
                 labels={"value": "step_ms"}, title="step time per arm (warmup dropped)")
    fig.update_xaxes(matches=None)
    if visualize:
        fig.show()
    return fig


def layer_ranges_figure(layer_df: pd.DataFrame, visualize: bool = False):
    """Bar chart of per-layer range durations (`workbench.traces.layer_ranges` output)."""
    import plotly.express as px

    d = layer_df.copy()
    d["what"] = d["pass"].fillna("") + d["part"].fillna("").map(lambda p: f"/{p}" if p else "")
    fig = px.bar(d, x="layer", y="median_ms", color="what", barmode="group", title="per-layer ranges (median ms)")
    if visualize:
        fig.show()
    return fig


def savings_frame(summary: dict) -> pd.DataFrame:
    """Predicted vs measured saving per comparison."""
    rows = []
    for c in summary.get("comparisons", []):
        sm = c.get("savings_model") or {}
        rows.append({"opt": c.get("opt"), "formula": sm.get("formula"), "predicted_ms": sm.get("predicted_ms"),
                     "measured_ms": sm.get("measured_ms"), "speedup": c.get("speedup"),
                     "equivalent": c.get("equivalent")})
    return pd.DataFrame(rows)
