"""MoE's saving split by pass: per shape, the forward's and the backward's saving (bars, ms a step, the
timed steps' own CUDA events) beside the two-term model's prediction for the step (marker); shapes the fit did not use
(`by_pass(..., held_out=ROOTS)`) are labelled "held out".

    from workbench import report as rp
    from studies.moe_two_term import moe_two_term as mtt
    from studies.moe_two_term.moe_figure import pass_figure
    rp.show(pass_figure(mtt.by_pass(mtt.read_fit(fit_json), fit_json)))
"""
from __future__ import annotations

from workbench.report import palette


def pass_figure(rows: list[dict]):
    import plotly.graph_objects as go

    x = [f"{r['shape'].split(' ', 1)[0]}<br>{r['shape'].split(' ', 1)[1]} ({r['processes']})"
         + ("<br><b>held out</b>" if r.get("held_out") else "") for r in rows]
    fig = go.Figure()
    fig.add_bar(x=x, y=[r["fwd_saving_ms"] for r in rows], name="forward saving",
                marker_color=palette.TIMELINE["forward"])
    fig.add_bar(x=x, y=[r["bwd_saving_ms"] for r in rows], name="backward saving",
                marker_color=palette.TIMELINE["backward"])
    fig.add_scatter(x=x, y=[r["step_saving_ms"] for r in rows], mode="markers", name="step saving (measured)",
                    marker=dict(color=palette.MARKS["measured"], size=10))
    fig.add_scatter(x=x, y=[r["predicted_ms"] for r in rows], mode="markers", name="u x syncs - beta x GB (fit)",
                    marker=dict(symbol="x", size=10, color=palette.MARKS["two-term fit"]))
    fig.update_layout(barmode="group", height=300, margin=dict(l=50, r=10, t=40, b=85),
                      title="MoE: sort_bincount's saving over eager by pass (processes)", yaxis_title="ms a step",
                      legend=dict(orientation="h", y=-0.42), xaxis=dict(tickangle=0))
    return fig
