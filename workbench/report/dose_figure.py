"""The dose-response figure: per timing mode, the measured saving against the dose with the fitted
line and its 95% CI band, beside the traced prediction c * u with its CI band.

    from workbench import report as rp
    from workbench.savings import dose_fit as dose
    from workbench.report.dose_figure import dose_figure
    rp.show(dose_figure(dose.analyse("profiles/<run>/dose/packing")))
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
    """`workbench.savings.dose_fit.analyse`'s result as a plotly figure: markers = each process's saving per level, line
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


def machine_figure(a: dict):
    """The untimed dose slope by machine (`dose.machine_component`, in a dose analysis with `modes.none.machines`):
    dots = each process's slope on its machine, line = the mean slope over processes, bands = its 95% CI over
    processes (narrow) and with the machine as its unit (wide); None where the analysis has no machine block."""
    import plotly.graph_objects as go
    from workbench.measure import stats
    from workbench.measure.machine_label import machine_label

    m = (a.get("modes") or {}).get("none") or {}
    mc = m.get("machines") or {}
    per = mc.get("per_machine") or {}
    if len(per) < 2 or m.get("slope_ms") is None:
        return None
    names = list(per)
    fig = go.Figure()
    for i, k in enumerate(names):
        fig.add_trace(go.Scatter(x=[machine_label(k)] * len(per[k]), y=per[k], mode="markers", marker_color=MODE_COLOURS["none"],
                                 opacity=0.7, showlegend=i == 0, name="each process's slope"))
    s, lo, hi = m["slope_ms"], *m["slope_ci95"]
    fig.add_hline(y=s, line_color="black", annotation_text=f"mean {s:.3g} ms/unit, {m.get('K')} processes")
    fig.add_hrect(y0=lo, y1=hi, fillcolor="black", opacity=0.12, line_width=0)
    if mc.get("slope_se") and mc.get("df"):
        t = stats.t_quantile(0.975, mc["df"])
        fig.add_hrect(y0=s - t * mc["slope_se"], y1=s + t * mc["slope_se"], fillcolor=MODE_COLOURS["torch"],
                      opacity=0.10, line_width=0)
    wide = (f"; orange: with the machine as its unit ({mc['df']:.1f} df)" if mc.get("slope_se") and mc.get("df") else
            "; the machines alike (omega 0): the process CI stands")
    fig.update_layout(title=f"{a['opt']}: untimed dose slope by machine<br><sub>F {mc['F']:.2f}, p {mc['p']:.2g} over "
                            f"{mc['J']} machines; grey: the mean's 95% CI over processes{wide}</sub>",
                      xaxis_title="machine (workbench.measure.machine_label)", yaxis_title=f"ms saved per {a.get('unit') or 'unit'}",
                      height=420)
    return fig
