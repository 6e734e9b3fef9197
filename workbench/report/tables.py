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

from workbench.cli import table
from workbench.measure import stats
from workbench.report import palette
from workbench.traces import components

ARM_COLUMNS = [("arm", "arm", "{}"), ("step ms (rep geomean)", "step_ms_rep_geomean", "{:.2f}"),
               ("p20-p80", None, None),
               ("n", "n", "{}"),
               ("speedup [95% CI]", None, None), ("fwd_ms", "fwd_ms", "{:.2f}"), ("bwd_ms", "bwd_ms", "{:.2f}"),
               ("syncs/step", "syncs_per_step", "{:.1f}"), ("instrumented_step_ms", "instrumented_step_ms", "{:.2f}"),
               ("peak_mib", "peak_mem_mib", "{:.0f}"), ("tok/s", "tokens_per_s", "{:.0f}"),
               ("TFLOP/s", "achieved_tflops", "{:.1f}"), ("MFU", "mfu", "{:.1%}"), ("MFU NeMo", "mfu_nemo", "{:.1%}"),
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


def arms_frame(comparison: dict) -> pd.DataFrame:
    """The arms of one comparison (summary.json) as a DataFrame, baseline first."""
    arms = [comparison.get("baseline"), comparison.get("optimized"), *comparison.get("others", [])]
    return pd.DataFrame([a for a in arms if a])


def _unit_count(c: dict) -> str:
    """The CI's independent units, named: "4 reps" (arms run as blocks per rep, the rep is the unit), else
    "N pairs" (a summary that does not say how many reps: every adjacent pair its own unit)."""
    reps = c.get("n_reps")
    if reps is None:
        reps = (c.get("protocol") or {}).get("reps")
    return f"{int(reps)} reps" if reps is not None else f"{c.get('n_pairs')} pairs"


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
                from workbench.measure.numerics import equiv_cell
                df = a.get("different_function")  # NaN in the frame for an arm without one
                row.append("ref" if a.get("arm") == (c.get("baseline") or {}).get("arm") else
                           equiv_cell(a.get("equivalent"), df.get("passed") if isinstance(df, dict) else None,
                                      a.get("bitwise")))
            else:
                row.append(_fmt(a.get(key), f))
        rows.append(row)
    lines = [head, table(rows, [t for t, _, _ in ARM_COLUMNS])]
    sm = c.get("savings_model") or {}
    sp, ci = c.get("speedup"), c.get("speedup_ci95")
    tail = f"speedup {_fmt(sp, '{:.3f}')}x" if sp is not None else "speedup -"
    if ci:
        tail += f" within this run [95% CI {ci[0]:.3f}-{ci[1]:.3f}, n={_unit_count(c)}]"
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
    dfs = c.get("different_function") or {}
    if dfs:  # arms that compute another function by design: judged by their own checks, never called equivalent
        from workbench.measure.numerics import different_line
        same = [a["arm"] for a in arms_frame(c).to_dict("records") if a["arm"] not in dfs]
        ok = all((c.get("equivalence") or {}).get(a, {}).get("equivalent", True) for a in same)
        lines.append(f"equivalent: {'yes' if ok else 'NO'} ({', '.join(same)})")
        lines += [f"{arm}: {different_line(df)}" for arm, df in dfs.items()]
    else:
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
    """Predicted vs measured saving per comparison. `different_function_passed`: for a comparison with arms that
    compute a different function by design (summary.json `different_function`), whether every one passed its own
    checks (its `equivalent` is False by construction, no failure); None for any other comparison."""
    rows = []
    for c in summary.get("comparisons", []):
        sm = c.get("savings_model") or {}
        dfs = c.get("different_function") or {}
        rows.append({"opt": c.get("opt"), "formula": sm.get("formula"), "predicted_ms": sm.get("predicted_ms"),
                     "measured_ms": sm.get("measured_ms"), "speedup": c.get("speedup"),
                     "equivalent": c.get("equivalent"),
                     "different_function_passed": all(d.get("passed") for d in dfs.values()) if dfs else None})
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
    labels = pd.Series(run_labels(d), index=d.index)
    units = d["n_units"] if "n_units" in d else [None] * len(d)
    hover = [f"{s:.3f}x [{lo:.3f}, {hi:.3f}], n={n} pairs" + (f" ({u:.0f} reps)" if u == u and u is not None else "")
             + f"<br>{v}<br>{b:.1f} -> {a:.1f} ms (means)<br>{f}"
             for s, lo, hi, n, u, v, b, a, f in zip(d["speedup"], d["ci95_lo"], d["ci95_hi"], d["n_pairs"], units,
                                                     d["verdict"], d["baseline_mean_ms"], d["arm_mean_ms"], d["file"])]
    fig = go.Figure()
    order = {r: i for i, r in enumerate(palette.ROLES)}  # the legend in one order everywhere
    groups = d.assign(label=labels.values, hover=hover).groupby("role", sort=False)
    for role, g in sorted(groups, key=lambda rg: order.get(str(rg[0]), len(order))):
        c = palette.ROLES.get(str(role), palette.ROLES["other"])
        fig.add_trace(go.Scatter(x=g["speedup"], y=g["label"], mode="markers", marker_color=c,
                                 name=palette.ROLE_NAMES.get(str(role), str(role)),
                                 error_x=dict(_ci_errors(g, "speedup", "ci95_lo", "ci95_hi"), color=c),
                                 hovertext=g["hover"], hoverinfo="text"))
    fig.add_vline(x=1.0, line_dash="dot")
    fig.update_layout(title=title, xaxis_title="speedup (mean baseline / mean arm)", height=170 + 26 * len(d),
                      legend=dict(orientation="h", y=1.0, yanchor="bottom", x=1.0, xanchor="right"))
    if len(d):
        lo, hi = min(float(d["ci95_lo"].min()), 1.0), max(float(d["ci95_hi"].max()), 1.0)
        if lo > 0 and hi / lo > LOG_AXIS_ABOVE:
            fig.update_xaxes(type="log")
    return _finish(fig, visualize)


def run_label(folder) -> str:
    """A run folder as a figure names it: its path under profiles/ (the date first), e.g.
    `2026-11-25_h100_lengths/chat/moe`."""
    f = str(folder).replace(os.sep, "/")
    return f.split("profiles/", 1)[1] if "profiles/" in f else os.path.basename(f.rstrip("/"))


def run_labels(d: pd.DataFrame) -> list[str]:
    """One label per comparison row: run folder · comparison · baseline -> arm (unique: one row per run)."""
    runs = [run_label(f) for f in d["folder"]] if "folder" in d else d["job"].astype(str).tolist()
    labels = [f"{r} · {n} · {b} -> {a}" for r, n, b, a in zip(runs, d["name"], d["baseline"], d["arm"])]
    seen: dict = {}
    out = []
    for x in labels:
        seen[x] = seen.get(x, 0) + 1
        out.append(x if seen[x] == 1 else f"{x} ({seen[x]})")
    return out


MAX_ROWS = 15
"""A figure of one row per comparison holds at most this many rows (the reader must see every CI)."""
LOG_AXIS_ABOVE = 3.0
"""A speedup axis spanning more than this ratio is logarithmic, so an 8x anchor does not flatten every other CI."""


def speedup_figures(comps: pd.DataFrame, title: str = "speedup over the baseline (95% CI, t over reps)",
                    newest: int | None = None) -> list:
    """`speedup_figure`s of `comps`, one per optimization (sweep points in their own figures), each at most
    `MAX_ROWS` rows (a longer group is split into parts). With `newest`, each optimization keeps the rows of its
    newest run folders (folder names start with their date), at most `newest` rows, and its title says how many of
    how many it shows, so that a page of every optimization stays the same length as runs are added."""
    if comps is None or not len(comps):
        return []
    d = comps.assign(_sweep=comps["name"].astype(str).str.contains("@"))
    out = []
    for (opt, sweep), g in d.groupby(["opt", "_sweep"], sort=False):
        note = None
        if newest is not None and len(g) > newest:
            runs = pd.Series(run_labels(g))  # its run folder first: newest first when sorted down
            note = f"the newest {newest} of {len(g)} rows"
            g = g.iloc[sorted(runs.sort_values(ascending=False, kind="stable").index[:newest])]
        parts = [g.iloc[i:i + MAX_ROWS] for i in range(0, len(g), MAX_ROWS)]
        for k, part in enumerate(parts):
            said = [f"part {k + 1} of {len(parts)}"] if len(parts) > 1 else []
            said += [note] if note else []
            what = f"{opt}{' sweeps' if sweep else ''}" + (f" ({', '.join(said)})" if said else "")
            out.append(speedup_figure(part.drop(columns="_sweep"), title=f"{what}: {title}"))
    return out


def steps_figure(st: pd.DataFrame, visualize: bool = False, max_panels: int = 6):
    """Strip plot of the timed steps per arm, one panel per (folder, comparison); `st` = `steps(...)`; at most
    `max_panels` panels (the first ones: pass the runs to show)."""
    import plotly.express as px

    d = st.assign(panel=st["comparison"].astype(str) + " (" + st["folder"].astype(str).map(os.path.basename) + ")")
    d = d[d["panel"].isin(list(dict.fromkeys(d["panel"]))[:max_panels])]
    cols = min(4, max(1, d["panel"].nunique()))
    fig = px.strip(d, x="arm", y="step_ms", facet_col="panel", facet_col_wrap=cols,
                   color_discrete_sequence=[palette.MARKS["measured"]],
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
    (points with the 95% CI of 1/speedup - 1) and the sync counter per arm (bars: the largest, `MAX_ROWS` rows in
    both panels together; every row in the table), each row labelled comparison · arm (run folder)."""
    from plotly.subplots import make_subplots
    import plotly.graph_objects as go

    n = cost[cost["instrument"] == "nvtx ranges"].copy()
    c = cost[cost["instrument"] == "sync counter"]  # the largest, so that both panels hold MAX_ROWS rows at most
    c = c.reindex(c["cost_pct"].abs().sort_values(ascending=False).index).head(max(MAX_ROWS - len(n), 5)).iloc[::-1]
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.32, subplot_titles=(
        "NVTX ranges: on vs off (paired, 95% CI)", f"sync counter: counted vs timed ({len(c)} largest)"))
    if len(n):
        n["lo"], n["hi"] = 100 * (1 / n["ci95_hi"] - 1), 100 * (1 / n["ci95_lo"] - 1)
        fig.add_trace(go.Scatter(y=[_cost_label(f, k) for f, k in zip(n["folder"], n["comparison"])], x=n["cost_pct"],
                                 mode="markers", name="NVTX ranges (95% CI)",
                                 marker_color=palette.MARKS["nvtx ranges"],
                                 error_x=_ci_errors(n, "cost_pct", "lo", "hi"),
                                 hovertext=[f"{v}, n={k} pairs" for v, k in zip(n["verdict"], n["n"])]), row=1, col=1)
        fig.add_vline(x=0.0, line_dash="dot", row=1, col=1)
    fig.add_trace(go.Bar(y=[_cost_label(f, k, a) for f, k, a in zip(c["folder"], c["comparison"], c["arm"])],
                         x=c["cost_pct"], orientation="h", name="sync counter",
                         marker_color=palette.MARKS["sync counter"]), row=1, col=2)
    fig.update_xaxes(title_text="cost_pct (% of the step)")
    fig.update_yaxes(automargin=True, tickfont_size=10)
    fig.update_layout(title="what the instruments cost (% of the uninstrumented step)", showlegend=False,
                      height=200 + 24 * max(len(c), len(n), 1))
    return _finish(fig, visualize)


CLAIM_AXIS = "throughput gain, % (baseline step / optimized step - 1)"


CLAIM_ROW_MAX_PX = 64
"""The tallest a claim's row grows (7 px a run point): past that its points share the row more closely (each has its
hover), so that a claim measured by many runs does not stretch every row of the figure (notebook 01's page)."""


def claims_figure(cvo: pd.DataFrame, visualize: bool = False):
    """One row per claim with a percent figure (`analysis.claims_vs_ours`): the claimed range as a bar from its low
    to its high end (a claim of one number: a diamond), ours as points with their 95% CI, one point per run, spread
    over the row. A measurement that is not comparable with the claim (`comparable` False: e.g. a 2-GPU FSDP2 step)
    is drawn hollow and grey, under its own legend entry, with the reason in the hover."""
    import plotly.graph_objects as go

    d = cvo[cvo["claimed_low_pct"].notna() | cvo["claimed_high_pct"].notna()].copy()
    d["label"] = [" · ".join(str(x) for x in xs if isinstance(x, str) and x)
                  for xs in zip(d["opt"], d["scope"], d["model"])]
    claims = d.drop_duplicates("label").reset_index(drop=True)
    y_of = {lab: len(claims) - 1 - i for i, lab in enumerate(claims["label"])}  # the first claim on top
    low = claims["claimed_low_pct"].fillna(claims["claimed_high_pct"])
    high = claims["claimed_high_pct"].fillna(claims["claimed_low_pct"])
    span = high - low > 0
    ys = [y_of[x] for x in claims["label"]]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=(high - low)[span], base=low[span], y=[y for y, s in zip(ys, span) if s], orientation="h",
                         width=0.5, marker_color=palette.MARKS["claimed range"],
                         name="claimed (a range; a diamond: one number)",
                         hovertext=claims["claim"][span], hoverinfo="text"))
    fig.add_trace(go.Scatter(x=low[~span], y=[y for y, s in zip(ys, span) if not s], mode="markers",
                             marker=dict(symbol="diamond", size=12, color=palette.MARKS["claimed range"],
                                         line=dict(width=1, color="#555555")),
                             name="claimed (one number)", showlegend=False, hovertext=claims["claim"][~span],
                             hoverinfo="text"))
    o = d[d["ours_pct"].notna()].copy()
    if len(o):
        i, k = o.groupby("label").cumcount(), o.groupby("label")["label"].transform("size")
        o["y"] = [y_of[x] + (-0.35 + 0.7 * j / (n - 1) if n > 1 else 0.0)  # spread over the row: one point per run
                  for x, j, n in zip(o["label"], i, k)]
        comparable = o["comparable"].fillna(True).astype(bool) if "comparable" in o else pd.Series(True, o.index)
        for ok, g in o.groupby(comparable, sort=False):
            c = palette.MARKS["ours" if ok else "ours, not comparable"]
            name = "ours (95% CI)" if ok else "ours, not comparable (95% CI; hover for why)"
            fig.add_trace(go.Scatter(
                x=g["ours_pct"], y=g["y"], mode="markers", name=name,
                marker=dict(color=c, symbol="circle" if ok else "circle-open", size=8),
                error_x=dict(_ci_errors(g, "ours_pct", "ours_ci95_lo_pct", "ours_ci95_hi_pct"), color=c),
                hovertext=[f"{m} L{la} T{t}: {v}, n={n} pairs<br>{run_label(f) if isinstance(f, str) else ''}"
                           + ("" if ok else f"<br>not comparable: {why}")
                           for m, la, t, v, n, f, why in zip(g["ours_model"], g["layers"], g["tokens"], g["verdict"],
                                                             g["n_pairs"], g["file"], g.get("why_not_comparable",
                                                                                            [""] * len(g)))],
                hoverinfo="text"))
    fig.add_vline(x=0.0, line_dash="dot")
    fig.update_yaxes(tickvals=list(y_of.values()), ticktext=list(y_of), range=[-0.7, len(claims) - 0.3],
                     automargin=True)
    fig.update_layout(title="claimed vs measured throughput gain (claims: README, \"The claims we check\")",
                      xaxis_title=CLAIM_AXIS, barmode="overlay",
                      height=180 + max(1, len(claims)) * min(CLAIM_ROW_MAX_PX, max(34, 7 * (
                          int(o["label"].value_counts().max()) if len(o) else 1))),
                      legend=dict(orientation="h", y=1.0, yanchor="bottom", x=1.0, xanchor="right"))
    return _finish(fig, visualize)


LEGEND_ROW_PX = 19
"""Height of one entry of a vertical legend (font 10 and its gap): a figure is tall enough for its whole legend."""


MARGIN_PX = 180
"""Plotly's default top and bottom margins together (100 + 80): the plot area is the figure's height less these."""


def _legend_px(entries: int, titles: int = 0) -> int:
    """Height that a vertical legend of `entries` entries and `titles` group titles takes."""
    return LEGEND_ROW_PX * (entries + titles) + 16 * titles


def _timeline_bars(fig, tl: pd.DataFrame, **where) -> int:
    """Horizontal bars (start_ms .. end_ms) per lane, one trace per timeline category in `palette.TIMELINE` order;
    returns how many traces (legend entries) it added."""
    import plotly.graph_objects as go

    n = 0
    for cat in [c for c in palette.TIMELINE if c in set(tl["category"])]:
        g = tl[tl["category"] == cat]
        fig.add_trace(go.Bar(y=g["lane"], x=g["dur_ms"], base=g["start_ms"], orientation="h", name=cat,
                             marker_color=palette.TIMELINE[cat], marker_line=dict(width=0.5, color="#ffffff"),
                             hovertext=[f"{n}<br>{la or ''} {p or ''} {pt or ''}<br>{d:.3f} ms" for n, la, p, pt, d in
                                        zip(g["name"], g["layer"], g["pass"], g["part"], g["dur_ms"])],
                             hoverinfo="text", legendgroup="timeline", legendgrouptitle_text="timeline"), **where)
        n += 1
    return n


def timeline_figure(tl: pd.DataFrame, title: str = "one step, per layer", visualize: bool = False):
    """Horizontal bars (start_ms .. end_ms) per lane of `layer_timeline(...)`, coloured by category
    (`palette.TIMELINE`: one colour per kind of event)."""
    import plotly.graph_objects as go

    fig = go.Figure()
    n = _timeline_bars(fig, tl)
    lanes = tl["lane"].nunique() if len(tl) else 1
    fig.update_layout(barmode="overlay", title=title, xaxis_title="ms from step start",
                      height=max(250 + 40 * lanes, MARGIN_PX + _legend_px(n, 1)), legend=dict(font_size=10))
    return _finish(fig, visualize)


def _breakdown_bars(fig, d: pd.DataFrame, xs: list, key: str, horizontal: bool = False, by_hand: bool = True,
                    **where) -> int:
    """Stacked bars of `analysis.breakdown` rows per `xs` (values of column `key`), one trace per component in the
    decomposition's order, each in its component colour (`workbench.traces.components`), stacked `by_hand` (each
    bar's base: for a figure whose barmode is "overlay") or by plotly ("stack"); returns the traces added."""
    import plotly.graph_objects as go

    base, n = [0.0] * len(xs), 0
    for comp in palette.STACKED:
        g = d[d["component"] == comp].set_index(key).reindex(xs) if len(d) else pd.DataFrame()
        if not len(g) or not g["ms"].notna().any():
            continue
        ms = g["ms"].fillna(0).tolist()
        label = components.COMPONENTS[comp].label
        hover = [f"{comp}: {m:.1f} ms ({sh:.1%} of the step)" if m == m else "" for m, sh in
                 zip(g["ms"], g["share"].fillna(0))]
        fig.add_trace(go.Bar(**({"y": xs, "x": ms, "orientation": "h"} if horizontal else {"x": xs, "y": ms}),
                             base=list(base) if by_hand else None, marker_color=components.colour(comp), name=label,
                             hovertext=hover,
                             hoverinfo="text", legendgroup="breakdown", legendgrouptitle_text="step breakdown"),
                      **where)
        base = [b + m for b, m in zip(base, ms)]
        n += 1
    return n


def timeline_breakdown_figure(tl: pd.DataFrame, bd: pd.DataFrame, arms: list, title: str = "one step",
                              visualize: bool = False):
    """One traced step of a baseline and its optimized arm (`timeline_figure`'s lanes, left) beside each arm's step
    breakdown (stacked bars of `analysis.breakdown` rows of those `arms`, right: busy time by kernel class, idle time
    by cause, ms per traced step), so the timeline's detail and the whole step's totals read together. One legend,
    whole (the figure is as tall as it needs): the timeline's kinds of event, then the step's components, each in
    its one colour (`workbench.report.palette`)."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, column_widths=[0.72, 0.28], horizontal_spacing=0.1,
                        subplot_titles=("timeline from the step's start (ms)", "whole step (ms per traced step)"))
    n = _timeline_bars(fig, tl, row=1, col=1)
    d = bd[bd["arm"].isin(arms)] if len(bd) else bd
    n += _breakdown_bars(fig, d, list(arms), "arm", row=1, col=2)  # stacked by hand: the timeline's bars overlay
    lanes = tl["lane"].nunique() if len(tl) else 1
    ticks = [str(a).replace("+", "+<br>") for a in arms]  # a combined arm's name on lines, never rotated
    bottom = 60 + 13 * max([t.count("<br>") for t in ticks] or [0])
    fig.update_layout(barmode="overlay", title=title, margin=dict(t=100, b=bottom),
                      height=max(400, 160 + 30 * lanes, 100 + bottom + _legend_px(n, 2)),
                      legend=dict(font_size=10, groupclick="toggleitem", tracegroupgap=8))
    fig.update_yaxes(automargin=True, tickfont_size=10, row=1, col=1)
    fig.update_xaxes(title_text="ms from step start", row=1, col=1)
    fig.update_xaxes(tickvals=list(arms), ticktext=ticks, tickangle=0, tickfont_size=10, row=1, col=2)
    return _finish(fig, visualize)


PNG_WIDTH_PX = 1000
"""Width of the static PNG beside each interactive figure (its height is the figure's layout height)."""


STATIC_RENDERER = "plotly_mimetype+png"
"""The renderer of the committed notebooks: each figure's JSON (JupyterLab, VS Code: interactive) and a static PNG
(kaleido; nbconvert HTML, static viewers) in one output, no script, nothing loaded from a network."""
INTERACTIVE_RENDERER = "plotly_mimetype"
"""Where no static PNG can be drawn (no Chrome / Chromium for kaleido): the figure's JSON only, said once."""
STATIC_NEEDS = ("static figures need kaleido (the [notebooks] or [dev] extra: pip install -e '.[notebooks]') and a "
                "Chrome or Chromium for it: `apt-get install chromium`, BROWSER_PATH=/path/to/chrome, or kaleido's own "
                "(python -c 'import kaleido; kaleido.get_chrome_sync()')")
"""The install hint for a missing static export: kaleido is in both extras that run notebooks."""


def static_export_missing() -> str | None:
    """What a static PNG export lacks here (None when kaleido and a browser for it are found)."""
    try:
        import kaleido  # noqa: F401
    except ImportError:
        return "kaleido is not installed"
    from workbench.report.notebook_pages import CHROMIUMS

    import shutil
    if os.environ.get("BROWSER_PATH") or any(shutil.which(c) for c in CHROMIUMS):
        return None
    try:  # a Chrome that kaleido downloaded (`kaleido.get_chrome_sync()`)
        from choreographer.browsers.chromium import Chromium
        if Chromium.find_browser():
            return None
    except Exception:  # noqa: BLE001 (a private API: absent means not found)
        pass
    return "no Chrome or Chromium found"


def renderer() -> tuple[str, str | None]:
    """The plotly renderer `show` uses and a note for the reader when it is not the static one: $WB_PLOTLY_RENDERER
    when set (a static one that cannot be drawn here is an error: `STATIC_NEEDS`), else `STATIC_RENDERER` where
    kaleido can draw, else `INTERACTIVE_RENDERER` with a note that says what the PNGs need. Never plotly's HTML
    renderers (they load plotly.js / MathJax as scripts)."""
    from workbench.errors import WorkbenchError

    wanted = os.environ.get("WB_PLOTLY_RENDERER")
    static = "png" in (wanted or STATIC_RENDERER).split("+")
    missing = static_export_missing() if static else None
    if wanted:
        if missing:
            raise WorkbenchError(f"WB_PLOTLY_RENDERER={wanted}: {missing}; {STATIC_NEEDS}")
        return wanted, None
    if missing:
        return INTERACTIVE_RENDERER, (f"figures: interactive only (plotly JSON, no static PNG: {missing}), so "
                                      "nbconvert HTML and static viewers show none of them; "
                                      f"{STATIC_NEEDS}")
    return STATIC_RENDERER, None


def show(fig, png: str | None = None) -> None:
    """Show a figure with `renderer()` (static PNG + JSON where kaleido can draw, else JSON; never HTML with
    scripts); also write a PNG to `png` (or $WB_PNG_DIR/<title>.png) when kaleido is installed."""
    import plotly.io as pio

    wanted, _ = renderer()
    if pio.renderers.default != wanted:
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


BUSY_COLOURS = {c: components.colour(c) for c in components.BUSY}
IDLE_COLOURS = {c: components.colour(c) for c in components.IDLE}
"""The step components' colours (`workbench.traces.components` owns them)."""


def breakdown_figure(bd: pd.DataFrame, title: str = "step breakdown per arm (ms per traced step)",
                     visualize: bool = False):
    """Stacked horizontal bars, one per (run, comparison, arm) of `analysis.breakdown(...)`: busy time by kernel
    class, then idle time by cause, each component in its one colour; the share of the step in the hover; the
    legend whole (the figure is as tall as its bars and its legend need)."""
    import plotly.graph_objects as go

    d = bd.copy()
    d["bar"] = [f"{run_label(f)} · {c} · {a}" for f, c, a in zip(d["folder"], d["comparison"], d["arm"])]
    bars = list(dict.fromkeys(d["bar"]))[::-1]  # the first on top
    fig = go.Figure()
    n = _breakdown_bars(fig, d, bars, "bar", horizontal=True, by_hand=False)
    fig.update_layout(barmode="stack", title=title, xaxis_title="ms per traced step", legend_traceorder="grouped",
                      height=max(160 + 28 * len(bars), MARGIN_PX + _legend_px(n, 1)), legend=dict(font_size=10))
    fig.update_yaxes(automargin=True, tickfont_size=10)
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
                                 marker_color=palette.MARKS["measured"], showlegend=i == 0, legendgroup="m",
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
                                     line_dash="dash", line_color=palette.MARKS["fit"], name="weighted fit", showlegend=i == 0,
                                     legendgroup="f"), row=r, col=c)
            lo, hi = (f["at1_ci90_lo"], f["at1_ci90_hi"]) if "at1_ci90_lo" in f else (f["at1_ci95_lo"], f["at1_ci95_hi"])
            if pd.notna(lo):
                fig.add_trace(go.Scatter(x=[1.0], y=[f["at1_ms"]], mode="markers", marker_symbol="diamond-open",
                                         marker_size=11, marker_color=palette.MARKS["fitted at L=1"],
                                         name="fitted at L=1 (90% CI)",
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


def lengths_figure(tab: pd.DataFrame, title: str = "speedup against documents per batch (95% CI, t over reps)"):
    """Speedup with its 95% CI against mean documents per batch (log axis), one line per optimization; the
    distribution, D's range and the savings-model verdict in the hover. `tab`: `workbench.analysis.lengths.table`."""
    import plotly.graph_objects as go

    fig = go.Figure()
    d = tab.dropna(subset=["speedup", "docs_per_batch_mean"])

    opts = sorted(d["opt"].astype(str).unique())
    for opt, g in d.groupby("opt", sort=True):
        c = palette.opt_colour(str(opt), opts)
        g = g.sort_values("docs_per_batch_mean")
        hover = [f"{ln}<br>{s:.3f}x [{lo:.3f}, {hi:.3f}] ({v})<br>D per batch {m:.1f} (min {a:.0f}, max {b:.0f})"
                 f"<br>savings model: {sv}" for ln, s, lo, hi, v, m, a, b, sv in
                 zip(g["lengths"], g["speedup"], g["ci95_lo"], g["ci95_hi"], g["verdict"], g["docs_per_batch_mean"],
                     g["docs_per_batch_min"], g["docs_per_batch_max"], g["savings_verdict"])]
        fig.add_trace(go.Scatter(x=g["docs_per_batch_mean"], y=g["speedup"], mode="lines+markers", name=str(opt), marker_color=c,
                                 line_color=c,
                                 error_y=dict(type="data", symmetric=False, array=(g["ci95_hi"] - g["speedup"]).tolist(),
                                              arrayminus=(g["speedup"] - g["ci95_lo"]).tolist()),
                                 hovertext=hover, hoverinfo="text"))
    fig.add_hline(y=1.0, line_dash="dot")
    fig.update_xaxes(type="log", title="documents per packed batch (mean over the run's batches)")
    fig.update_yaxes(title="speedup (mean baseline / mean arm)")
    fig.update_layout(title=title, legend=dict(orientation="h", y=-0.2))
    return fig
