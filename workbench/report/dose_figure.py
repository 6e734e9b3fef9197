"""The dose-response figure (issue 39 item 5): per timing mode, the measured saving against the dose with the fitted
line and its 95% CI band, beside the traced prediction c * u with its CI band.

    from workbench.savings import dose
    from workbench.report.dose_figure import dose_figure
    an.show(dose_figure(dose.analyse("profiles/<run>/dose/packing")))
"""
from __future__ import annotations

import numpy as np

from workbench.report import palette

MODE_COLOURS = {"none": palette.MARKS["measured"], "torch": "#D55E00", "nsys": "#009E73"}
MODE_NAMES = {"none": "untimed (NVTX only)", "torch": "under torch.profiler", "nsys": "under nsys"}


def saving_points(points: list) -> list[tuple[float, float]]:
    """(units, saving ms) per process and level: the process's mean step at u = 0 minus its mean step at u."""
    out = []
    for pts in points:
        by: dict = {}
        for u, ms in pts:
            by.setdefault(u, []).append(ms)
        if 0 in by:
            base = float(np.mean(by[0]))
            out += [(u, base - float(np.mean(v))) for u, v in sorted(by.items())]
    return out


def dose_figure(a: dict, visualize: bool = False):
    """`workbench.savings.dose.analyse`'s result as a plotly figure: markers = each process's saving per level, line
    and band = the mean slope over processes with its 95% CI (K - 1 df), dashed = the traced prediction c * u."""
    import plotly.graph_objects as go

    fig = go.Figure()
    umax = max(a.get("units") or [1])
    xs = np.linspace(0, umax, 20)
    for mode, m in a["modes"].items():
        col = MODE_COLOURS.get(mode, "#777777")
        name = MODE_NAMES.get(mode, mode)
        pts = saving_points(m.get("points") or [])
        fig.add_trace(go.Scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], mode="markers", marker_color=col,
                                 name=f"{name}: each process", legendgroup=mode, opacity=0.6, showlegend=False))
        s, ci = m.get("slope_ms"), m.get("slope_ci95")
        if s is None or s != s:
            continue
        fig.add_trace(go.Scatter(x=xs, y=s * xs, mode="lines", line_color=col, legendgroup=mode,
                                 name=f"{name}: {s:.3g} ms/unit over {m.get('K')} processes (dots: each process)"))
        if ci:
            fig.add_trace(go.Scatter(x=np.r_[xs, xs[::-1]], y=np.r_[ci[1] * xs, ci[0] * xs[::-1]], fill="toself",
                                     line_width=0, fillcolor=col, opacity=0.15, legendgroup=mode, showlegend=False,
                                     hoverinfo="skip"))
    c = a.get("c") or {}
    if c.get("value_ms") is not None:
        fig.add_trace(go.Scatter(x=xs, y=c["value_ms"] * xs, mode="lines", line=dict(color="black", dash="dash"),
                                 name=f"traced prediction c = {c['value_ms']:.3g} ms/unit ({c.get('tracer')})"))
        if c.get("ci95"):
            lo, hi = c["ci95"]
            fig.add_trace(go.Scatter(x=np.r_[xs, xs[::-1]], y=np.r_[hi * xs, lo * xs[::-1]], fill="toself",
                                     line_width=0, fillcolor="black", opacity=0.08, showlegend=False,
                                     hoverinfo="skip"))
    th = ((a["modes"].get("none") or {}).get("theta") or {})
    sub = (f"theta {th['ratio']:.2f} [{th['ci95'][0]:.2f}, {th['ci95'][1]:.2f}]" if th.get("ci95") else
           f"no theta ({a.get('c_why') or 'no bounded interval'})")
    fig.update_layout(title=f"{a['opt']} dose-response: saving against {a['unit']}<br><sub>{sub}; decision: "
                            f"{a['decision']['decision']}</sub>", xaxis_title=f"u ({a['unit']})",
                      yaxis_title="saving vs u = 0 (ms per step)", height=460)
    if visualize:
        fig.show()
    return fig
