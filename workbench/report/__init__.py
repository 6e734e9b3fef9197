"""Tables, figures and pages from the frames of `workbench.analysis`. The figures (plotly; `show` renders one as the
notebooks do) are importable from here:

    from workbench import analysis as an, report as rp
    rp.show(rp.speedup_figure(an.comparisons("profiles")))
"""
from workbench.report.tables import (
    breakdown_figure, claims_figure, cost_figure, lengths_figure, show, speedup_figure, speedup_figures, steps_figure,
    sweep_figure, sweep_fit_figure, timeline_breakdown_figure, timeline_figure)

__all__ = ["breakdown_figure", "claims_figure", "cost_figure", "lengths_figure", "show", "speedup_figure",
           "speedup_figures", "steps_figure", "sweep_figure", "sweep_fit_figure", "timeline_breakdown_figure",
           "timeline_figure"]
