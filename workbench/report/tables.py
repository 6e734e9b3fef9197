"""Console tables and plotly figures, rendered from recorded results (never from numbers held only here).

    from workbench.measure.results import load_run
    from workbench.report import tables as report
    df, summary, meta = load_run("profiles/<run_id>")
    print(report.comparison_table(summary["comparisons"][0]))
    report.step_time_figure(df).show()

The figures of the frames of `workbench.analysis` (`speedup_figure(an.comparisons(...))`, ...) live here too and are
re-exported by `workbench.analysis`: each takes a frame and returns a plotly figure (`visualize=True` shows it);
every speedup drawn carries its 95% CI (error bars) and its number of pairs (hover).
"""
from __future__ import annotations

import os
import re

import pandas as pd

from workbench.measure import stats

ARM_COLUMNS = [("arm", "arm", "{}"), ("step ms (rep geomean)", "step_ms_rep_geomean", "{:.2f}"),
               ("p20-p80", None, None),
               ("n", "n", "{}"),
               ("speedup [95% CI]", None, None), ("fwd_ms", "fwd_ms", "{:.2f}"), ("bwd_ms", "bwd_ms", "{:.2f}"),
               ("syncs/step", "syncs_per_step", "{:.1f}"), ("instrumented_step_ms", "instrumented_step_ms", "{:.2f}"),
               ("peak_mib", "peak_mem_mib", "{:.0f}"), ("tok/s", "tokens_per_s", "{:.0f}"),
               ("TFLOP/s", "achieved_tflops", "{:.1f}"), ("MFU", "mfu", "{:.1%}"),
               ("loss", "loss", "{:.5f}"), ("equiv", None, None), ("status", "status", "{}")]
"""step ms (rep geomean): the geometric mean over reps of each rep's mean step (`stats.geo_mean_of_unit_means`),
what the speedup is a ratio of: the baseline's over an arm's is its speedup, exactly (the arithmetic mean of all
steps is not: on a CPU it once read 1841.7 against 2164.1 ms beside a 1.195x); its p20-p80 spread of the steps
beside it. A summary without it (written before) shows the arithmetic mean, named so. instrumented_step_ms: the
step time of the counted pass (sync counter on): the counter's cost, never a timing."""


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
    """Right-aligned plain-text table (`tabulate`, "plain" format: columns two spaces apart, no rules). The header
    goes in as the first row, so it gets no extra padding of its own and every cell is printed as given."""
    from tabulate import tabulate

    cells = [[str(c) for c in header]] + [["" if c is None else str(c) for c in r] for r in rows]
    return tabulate(cells, tablefmt="plain", stralign="right", numalign="right", disable_numparse=True)


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
            elif key == "step_ms_rep_geomean" and _fmt(a.get(key), f) == "-" and _fmt(a.get("step_ms_mean"), f) != "-":
                row.append(_fmt(a["step_ms_mean"], f) + " (mean)")  # a summary from before the column
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
    rows = []
    for (opt, arm), g in df[df["metric"] == "step_ms"].groupby(["opt", "arm"], sort=False):
        sm = stats.summarize(g["value"])
        rows.append({"opt": opt, "arm": arm, "step_ms": sm["median"], "step_ms_p20": sm["p20"],
                     "step_ms_p80": sm["p80"], "n": sm["n"]})
    return pd.DataFrame(rows, columns=["opt", "arm", "step_ms", "step_ms_p20", "step_ms_p80", "n"])


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


# --- figures of workbench.analysis frames ------------------------------------------------------------------------

def _finish(fig, visualize):
    if visualize:
        fig.show()
    return fig


def _ci_errors(df, est, lo, hi):
    return dict(type="data", symmetric=False, array=(df[hi] - df[est]).tolist(), arrayminus=(df[est] - df[lo]).tolist())


def speedup_figure(comps: pd.DataFrame, title: str = "speedup over the baseline (95% CI, t over reps)",
                   visualize: bool = False):
    """One point per comparison row with its 95% CI as error bars; n pairs (reps), verdict and mean steps in the
    hover."""
    import plotly.graph_objects as go

    d = comps.iloc[::-1]
    labels = d["job"].astype(str) + " · " + d["name"].astype(str) + " · " + d["baseline"].astype(str) + " -> " + \
        d["arm"].astype(str)
    units = d["n_units"] if "n_units" in d else [None] * len(d)
    hover = [f"{s:.3f}x [{lo:.3f}, {hi:.3f}], n={n} pairs" + (f" ({u:.0f} reps)" if u == u and u is not None else "")
             + f"<br>{v}<br>{b:.1f} -> {a:.1f} ms (means)<br>{f}"
             for s, lo, hi, n, u, v, b, a, f in zip(d["speedup"], d["ci95_lo"], d["ci95_hi"], d["n_pairs"], units,
                                                     d["verdict"], d["baseline_mean_ms"], d["arm_mean_ms"], d["file"])]
    fig = go.Figure()
    for role, g in d.assign(label=labels.values, hover=hover).groupby("role", sort=False):
        fig.add_trace(go.Scatter(x=g["speedup"], y=g["label"], mode="markers", name=str(role),
                                 error_x=_ci_errors(g, "speedup", "ci95_lo", "ci95_hi"), hovertext=g["hover"],
                                 hoverinfo="text"))
    fig.add_vline(x=1.0, line_dash="dot")
    fig.update_layout(title=title, xaxis_title="speedup (mean baseline / mean arm)", height=170 + 26 * len(d),
                      legend=dict(orientation="h", y=1.0, yanchor="bottom", x=1.0, xanchor="right"))
    if len(d):
        lo, hi = min(float(d["ci95_lo"].min()), 1.0), max(float(d["ci95_hi"].max()), 1.0)
        if lo > 0 and hi / lo > LOG_AXIS_ABOVE:
            fig.update_xaxes(type="log")
    return _finish(fig, visualize)


MAX_ROWS = 15
"""A figure of one row per comparison holds at most this many rows (the reader must see every CI)."""
LOG_AXIS_ABOVE = 3.0
"""A speedup axis spanning more than this ratio is logarithmic, so an 8x anchor does not flatten every other CI."""


def speedup_figures(comps: pd.DataFrame, title: str = "speedup over the baseline (95% CI, t over reps)") -> list:
    """`speedup_figure`s of `comps`, one per optimization (sweep points in their own figures), each at most
    `MAX_ROWS` rows (a longer group is split into parts)."""
    if comps is None or not len(comps):
        return []
    d = comps.assign(_sweep=comps["name"].astype(str).str.contains("@"))
    out = []
    for (opt, sweep), g in d.groupby(["opt", "_sweep"], sort=False):
        parts = [g.iloc[i:i + MAX_ROWS] for i in range(0, len(g), MAX_ROWS)]
        for k, part in enumerate(parts):
            what = f"{opt}{' sweeps' if sweep else ''}" + (f" (part {k + 1} of {len(parts)})" if len(parts) > 1 else "")
            out.append(speedup_figure(part.drop(columns="_sweep"), title=f"{what}: {title}"))
    return out


def steps_figure(st: pd.DataFrame, visualize: bool = False, max_panels: int = 6):
    """Strip plot of the timed steps per arm, one panel per (folder, comparison); `st` = `steps(...)`; at most
    `max_panels` panels (the first ones: pass the runs to show)."""
    import plotly.express as px

    d = st.assign(panel=st["comparison"].astype(str) + " (" + st["folder"].astype(str).map(os.path.basename) + ")")
    d = d[d["panel"].isin(list(dict.fromkeys(d["panel"]))[:max_panels])]
    cols = min(4, max(1, d["panel"].nunique()))
    fig = px.strip(d, x="arm", y="step_ms", color="arm", facet_col="panel", facet_col_wrap=cols,
                   facet_col_spacing=0.06, facet_row_spacing=0.25, hover_data=["rep", "batch", "step"],
                   title="timed steps per arm (every sample), ms")
    fig.for_each_annotation(lambda a: a.update(text=a.text.split("=", 1)[-1]))
    fig.update_xaxes(matches=None, showticklabels=True, title_text="", tickangle=30)
    fig.update_yaxes(matches=None, showticklabels=True, title_text="")
    fig.update_layout(height=120 + 340 * max(1, -(-d["panel"].nunique() // cols)), showlegend=False)
    return _finish(fig, visualize)


def sweep_figure(points: pd.DataFrame, fit: pd.DataFrame, visualize: bool = False):
    """Saving per sweep value (points; speedup with CI and n in the hover) and the fitted line per arm."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for (folder, group, arm), g in points.groupby(["folder", "group", "arm"], sort=False):
        fig.add_trace(go.Scatter(x=g["x"], y=g["saving_ms"], mode="markers", name=f"{group} {arm}",
                                 hovertext=[f"speedup {s:.3f}x [{lo:.3f}, {hi:.3f}], n={n} pairs" for s, lo, hi, n in
                                            zip(g["speedup"], g["ci95_lo"], g["ci95_hi"], g["n_pairs"])]))
        f = fit[(fit["folder"] == folder) & (fit["group"] == group) & (fit["arm"] == arm)]
        if len(f) and f["slope_ms_per_x"].notna().all():
            f = f.iloc[0]
            xs = [float(g["x"].min()), float(g["x"].max())]
            ci = f"[{f['slope_ci95_lo']:.2f}, {f['slope_ci95_hi']:.2f}]" if pd.notna(f["slope_ci95_lo"]) else "(no CI)"
            fig.add_trace(go.Scatter(x=xs, y=[f["slope_ms_per_x"] * x + f["intercept_ms"] for x in xs], mode="lines",
                                     name=f"fit {arm}: {f['slope_ms_per_x']:.2f} ms/{f['key']} {ci}"))
    key = points["key"].iloc[0] if len(points) else "x"
    fig.update_layout(title="saving (baseline - arm, " + (points["stat"].iloc[0] if len(points) else "") +
                      " step ms) against " + str(key) + ", least-squares fit with the slope's 95% CI",
                      xaxis_title=str(key), yaxis_title="saving_ms")
    return _finish(fig, visualize)


def _cost_label(folder, comparison, arm=None) -> str:
    return f"{comparison}" + (f" · {arm}" if arm is not None else "") + f" ({os.path.basename(str(folder))})"


def cost_figure(cost: pd.DataFrame, visualize: bool = False):
    """What each instrument costs, in percent of the uninstrumented step, one panel each: NVTX ranges per comparison
    (points with the 95% CI of 1/speedup - 1) and the sync counter per arm (bars: the `MAX_ROWS` largest; every row
    in the table), each row labelled comparison · arm (run folder)."""
    from plotly.subplots import make_subplots
    import plotly.graph_objects as go

    n = cost[cost["instrument"] == "nvtx ranges"].copy()
    c = cost[cost["instrument"] == "sync counter"]
    c = c.reindex(c["cost_pct"].abs().sort_values(ascending=False).index).head(MAX_ROWS).iloc[::-1]
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.32, subplot_titles=(
        "NVTX ranges: on vs off (paired, 95% CI)", f"sync counter: counted vs timed ({len(c)} largest)"))
    if len(n):
        n["lo"], n["hi"] = 100 * (1 / n["ci95_hi"] - 1), 100 * (1 / n["ci95_lo"] - 1)
        fig.add_trace(go.Scatter(y=[_cost_label(f, k) for f, k in zip(n["folder"], n["comparison"])], x=n["cost_pct"],
                                 mode="markers", name="NVTX ranges (95% CI)",
                                 error_x=_ci_errors(n, "cost_pct", "lo", "hi"),
                                 hovertext=[f"{v}, n={k} pairs" for v, k in zip(n["verdict"], n["n"])]), row=1, col=1)
        fig.add_vline(x=0.0, line_dash="dot", row=1, col=1)
    fig.add_trace(go.Bar(y=[_cost_label(f, k, a) for f, k, a in zip(c["folder"], c["comparison"], c["arm"])],
                         x=c["cost_pct"], orientation="h", name="sync counter"), row=1, col=2)
    fig.update_xaxes(title_text="cost_pct (% of the step)")
    fig.update_yaxes(automargin=True, tickfont_size=10)
    fig.update_layout(title="what the instruments cost (% of the uninstrumented step)", showlegend=False,
                      height=200 + 24 * max(len(c), len(n), 1))
    return _finish(fig, visualize)


def claims_figure(cvo: pd.DataFrame, visualize: bool = False):
    """Claimed gain (bar, high end) beside ours (points with the 95% CI), per claim with a percent figure."""
    import plotly.graph_objects as go

    d = cvo[cvo["claimed_low_pct"].notna()].copy()
    d["label"] = d["opt"] + " " + d["scope"] + " " + d["model"].fillna("").astype(str)
    cl = d.drop_duplicates("label")
    low = cl["claimed_low_pct"].fillna(cl["claimed_high_pct"])
    # a claim of 10-15% is the range 10..15 (a thin bar where the claim is one number), never a bar from 0 to 15
    fig = go.Figure([go.Bar(x=cl["label"], y=(cl["claimed_high_pct"] - low).clip(lower=0.3), base=low,
                            name="claimed range", hovertext=cl["claim"], opacity=0.5)])
    o = d[d["ours_pct"].notna()]
    if len(o):
        fig.add_trace(go.Scatter(x=o["label"], y=o["ours_pct"], mode="markers", name="ours (95% CI)",
                                 error_y=_ci_errors(o, "ours_pct", "ours_ci95_lo_pct", "ours_ci95_hi_pct"),
                                 hovertext=[f"{m} L{la} T{t}: {v}, n={n} pairs" for m, la, t, v, n in zip(
                                     o["ours_model"], o["layers"], o["tokens"], o["verdict"], o["n_pairs"])]))
    fig.update_layout(title="claimed vs measured gain (%; baseline/optimized - 1)", yaxis_title="gain_pct")
    return _finish(fig, visualize)


def timeline_figure(tl: pd.DataFrame, title: str = "one step, per layer", visualize: bool = False):
    """Horizontal bars (start_ms .. end_ms) per lane of `layer_timeline(...)`, coloured by category."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for cat, g in tl.groupby("category", sort=False):
        fig.add_trace(go.Bar(y=g["lane"], x=g["dur_ms"], base=g["start_ms"], orientation="h", name=str(cat),
                             hovertext=[f"{n}<br>{la or ''} {p or ''} {pt or ''}<br>{d:.3f} ms" for n, la, p, pt, d in
                                        zip(g["name"], g["layer"], g["pass"], g["part"], g["dur_ms"])],
                             hoverinfo="text"))
    fig.update_layout(barmode="overlay", title=title, xaxis_title="ms from step start",
                      height=250 + 40 * max(1, tl["lane"].nunique() if len(tl) else 1))
    return _finish(fig, visualize)


def timeline_breakdown_figure(tl: pd.DataFrame, bd: pd.DataFrame, arms: list, title: str = "one step",
                              visualize: bool = False):
    """One traced step of a baseline and its optimized arm (`timeline_figure`'s lanes, left) beside each arm's step
    breakdown (stacked bars of `analysis.breakdown` rows of those `arms`, right: busy time by kernel class, idle time
    by cause, ms per traced step), so the timeline's detail and the whole step's totals read together."""
    from plotly.subplots import make_subplots
    import plotly.graph_objects as go

    fig = make_subplots(rows=1, cols=2, column_widths=[0.74, 0.26], horizontal_spacing=0.08,
                        subplot_titles=("timeline from the step's start (ms)", "whole step (ms per traced step)"))
    for cat, g in tl.groupby("category", sort=False):
        fig.add_trace(go.Bar(y=g["lane"], x=g["dur_ms"], base=g["start_ms"], orientation="h", name=str(cat),
                             hovertext=[f"{n}<br>{la or ''} {p or ''} {pt or ''}<br>{d:.3f} ms" for n, la, p, pt, d in
                                        zip(g["name"], g["layer"], g["pass"], g["part"], g["dur_ms"])],
                             hoverinfo="text", legend="legend"), row=1, col=1)
    d = bd[bd["arm"].isin(arms)] if len(bd) else bd
    base = [0.0] * len(arms)  # stacked by hand: the timeline's bars overlay, so the figure's barmode is "overlay"
    for comp, colour in {**BUSY_COLOURS, **IDLE_COLOURS}.items():
        g = d[d["component"] == comp].set_index("arm").reindex(arms) if len(d) else pd.DataFrame()
        if len(g) and g["ms"].notna().any():
            ms = g["ms"].fillna(0).tolist()
            fig.add_trace(go.Bar(x=arms, y=ms, base=list(base), marker_color=colour, legend="legend2",
                                 name=comp + (" (idle)" if comp in IDLE_COLOURS else ""),
                                 hovertext=[f"{comp}: {m:.1f} ms ({sh:.1%} of the step)" if m == m else "" for m, sh in
                                            zip(g["ms"], g["share"].fillna(0))], hoverinfo="text"), row=1, col=2)
            base = [b + m for b, m in zip(base, ms)]
    lanes = tl["lane"].nunique() if len(tl) else 1
    fig.update_layout(barmode="overlay", title=title, height=max(400, 160 + 30 * lanes), margin=dict(t=100),
                      legend=dict(orientation="h", y=-0.18, x=0, font_size=10, title_text="timeline"),
                      legend2=dict(x=1.02, y=1, font_size=10, title_text="step breakdown", traceorder="normal"))
    fig.update_yaxes(automargin=True, tickfont_size=10, row=1, col=1)
    fig.update_xaxes(title_text="ms from step start", row=1, col=1)
    return _finish(fig, visualize)


PNG_WIDTH_PX = 1000
"""Width of the static PNG beside each interactive figure (its height is the figure's layout height)."""


def show(fig, png: str | None = None) -> None:
    """Show a figure ($WB_PLOTLY_RENDERER, default "plotly_mimetype+notebook": plotly.js embedded once per notebook,
    viewable offline; the committed notebooks use "plotly_mimetype+png": the figure's JSON for JupyterLab and a
    static PNG (kaleido) for nbconvert HTML and static viewers, no script); also write a PNG to `png` (or
    $WB_PNG_DIR/<title>.png) when kaleido is installed."""
    import plotly.io as pio

    wanted = os.environ.get("WB_PLOTLY_RENDERER", "plotly_mimetype+notebook")
    if pio.renderers.default != wanted:  # set once: plotly.js is embedded at activation, not in every figure
        pio.renderers.default = wanted
    if "png" in wanted.split("+"):
        pio.renderers["png"].width = PNG_WIDTH_PX
    fig.show()
    out = png
    if out is None and os.environ.get("WB_PNG_DIR"):
        title = (fig.layout.title.text or "figure") if fig.layout.title else "figure"
        out = os.path.join(os.environ["WB_PNG_DIR"], re.sub(r"[^A-Za-z0-9_.-]+", "_", title)[:80] + ".png")
    if out:
        try:
            import kaleido  # noqa: F401
        except ImportError:
            return
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        fig.write_image(out)


BUSY_COLOURS = {"gemm": "#0969da", "attention": "#54aeff", "glue": "#bf3989", "copy": "#8250df",
                "norm_elementwise": "#1a7f37", "optimizer": "#4ac26b", "other": "#8c959f"}
IDLE_COLOURS = {"exposed_copy": "#fb8f44", "sync_stall": "#cf222e", "launch_gap": "#d4a72c"}


def breakdown_figure(bd: pd.DataFrame, title: str = "step breakdown per arm (ms per traced step)",
                     visualize: bool = False):
    """Stacked bars, one per (comparison, arm) of `analysis.breakdown(...)`: busy time by kernel class (blues /
    greens) then idle time by cause (oranges / red); the share of the step in the hover."""
    import plotly.graph_objects as go

    d = bd.copy()
    d["bar"] = d["folder"].map(os.path.basename) + " · " + d["comparison"].astype(str) + " · " + d["arm"].astype(str)
    bars = list(dict.fromkeys(d["bar"]))
    fig = go.Figure()
    for comp, colour in {**BUSY_COLOURS, **IDLE_COLOURS}.items():
        g = d[d["component"] == comp].set_index("bar").reindex(bars)
        if g["ms"].notna().any():
            fig.add_trace(go.Bar(x=bars, y=g["ms"].fillna(0).tolist(), name=comp + (" (idle)" if comp in IDLE_COLOURS
                                                                                    else ""),
                                 marker_color=colour, hovertext=[f"{comp}: {m:.1f} ms ({s:.1%} of the step)"
                                                                 if m == m else "" for m, s in
                                                                 zip(g["ms"], g["share"].fillna(0))],
                                 hoverinfo="text"))
    fig.update_layout(barmode="stack", title=title, yaxis_title="ms per traced step", legend_traceorder="normal",
                      height=450)
    return _finish(fig, visualize)


def sweep_fit_figure(points: pd.DataFrame, fits: pd.DataFrame, visualize: bool = False):
    """One panel per sweep: the measured saving per layer count with its 95% CI (error bars), the weighted fitted
    line, and the fitted saving at L = 1 with its 90% CI (the (L-1) test: the form holds when that CI lies inside ±
    half of one layer's saving, `analysis.sweep_fits`); the slope and the test's verdict in the panel's title, the
    test's reasoning in the hover (no legend wider than the plot)."""
    from plotly.subplots import make_subplots
    import plotly.graph_objects as go

    groups = list(points.groupby(["folder", "group", "arm"], sort=False))
    cols = min(3, max(1, len(groups)))
    rows = max(1, -(-len(groups) // cols))
    titles = []
    for (folder, group, arm), g in groups:
        f = fits[(fits["folder"] == folder) & (fits["group"] == group) & (fits["arm"] == arm)]
        fit = (f"<br>{f['slope_ms'].iloc[0]:.2f} ms/layer; (L-1) {f['l_minus_1'].iloc[0]}"
               if len(f) and pd.notna(f["slope_ms"].iloc[0]) else "<br>no fit")
        titles.append(f"{os.path.basename(folder)} · {g['model'].iloc[0]} · {arm}{fit}")
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=titles or None, horizontal_spacing=0.08,
                        vertical_spacing=0.22 if rows > 1 else 0.1)
    for i, ((folder, group, arm), g) in enumerate(groups):
        r, c = i // cols + 1, i % cols + 1
        fig.add_trace(go.Scatter(x=g["x"], y=g["measured_ms"], mode="markers", name="measured (95% CI)",
                                 marker_color="#0969da", showlegend=i == 0, legendgroup="m",
                                 error_y=_ci_errors(g, "measured_ms", "measured_ci95_lo", "measured_ci95_hi"),
                                 hovertext=[f"L={x:g}: {m:.1f} ms [{lo:.1f}, {hi:.1f}], n={n} pairs" for x, m, lo, hi, n
                                            in zip(g["x"], g["measured_ms"], g["measured_ci95_lo"],
                                                   g["measured_ci95_hi"], g["n_pairs"])], hoverinfo="text"),
                      row=r, col=c)
        f = fits[(fits["folder"] == folder) & (fits["group"] == group) & (fits["arm"] == arm)]
        if len(f) and pd.notna(f["slope_ms"].iloc[0]):
            f = f.iloc[0]
            xs = [1.0, float(g["x"].max())]
            fig.add_trace(go.Scatter(x=xs, y=[f["slope_ms"] * x + f["intercept_ms"] for x in xs], mode="lines",
                                     line_dash="dash", line_color="#57606a", name="weighted fit", showlegend=i == 0,
                                     legendgroup="f"), row=r, col=c)
            lo, hi = (f["at1_ci90_lo"], f["at1_ci90_hi"]) if "at1_ci90_lo" in f else (f["at1_ci95_lo"], f["at1_ci95_hi"])
            if pd.notna(lo):
                fig.add_trace(go.Scatter(x=[1.0], y=[f["at1_ms"]], mode="markers", marker_symbol="diamond-open",
                                         marker_size=11, marker_color="#cf222e", name="fitted at L=1 (90% CI)",
                                         showlegend=i == 0, legendgroup="a", hovertext=[str(f["l_minus_1_by"])],
                                         hoverinfo="text",
                                         error_y=dict(type="data", symmetric=False, array=[hi - f["at1_ms"]],
                                                      arrayminus=[f["at1_ms"] - lo])), row=r, col=c)
        fig.add_hline(y=0.0, line_dash="dot", row=r, col=c)
    fig.update_annotations(font_size=11)
    fig.update_xaxes(title_text="layers")
    fig.update_yaxes(title_text="saving ms/step", col=1)
    fig.update_layout(title="measured saving per step against layers (95% CI over reps)<br><sup>baseline - arm, "
                            "paired mean; weighted fit; the fit at L = 1 with its 90% CI</sup>",
                      height=160 + 300 * rows, margin=dict(t=130),
                      legend=dict(orientation="h", y=-0.12 if rows > 1 else -0.25))
    return _finish(fig, visualize)

