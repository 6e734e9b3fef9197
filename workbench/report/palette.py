"""One colour per meaning, for every figure the workbench draws (the README's PNGs and the notebooks' plotly figures).

The step components' colours are owned by `workbench.traces.components`; this module adds the other meanings a
figure colours by: an arm's role, a verdict, an optimization, a timeline category (what a traced event is) and the
marks of single figures (a claim, a fit, an instrument). A meaning keeps its colour in every figure ("optimized" is
the same blue in each panel); within one figure no two meanings share a colour (`DRAWN_TOGETHER` lists the families
one figure combines; `tests/test_components.py` checks both). The colours are Okabe-Ito's and Paul Tol's
colour-blind-safe sets.

    from workbench.report import palette
    palette.ROLES["optimized"]; palette.colour("timeline", "reload")
"""
from __future__ import annotations

from workbench.traces.components import COLOURS as COMPONENTS, STACKED

ROLES = {"baseline": "#000000", "optimized": "#0072B2", "other": "#E69F00", "aa": "#999999"}
"""An arm's role in its comparison (`analysis.comparisons` `role`): `aa` is the baseline against itself."""
ROLE_NAMES = {"baseline": "baseline", "optimized": "optimized arm", "other": "further arm", "aa": "A/A (baseline vs "
              "itself)"}
"""What a legend calls each role."""
VERDICTS = {"faster": "#009E73", "slower": "#D55E00", "no detectable difference": "#777777"}
"""A speedup's verdict (anything else, e.g. "not a result", draws as the last)."""
OPTS = {"packing": "#0072B2", "offload": "#E69F00", "moe": "#009E73", "all": "#CC79A7"}
"""An optimization, where a figure draws one line per optimization; others take `SPARE` in order."""
SPARE = ("#882255", "#44AA99", "#999933", "#332288", "#AA4499", "#DDCC77")
TIMELINE = {"forward": "#F0E442", "recompute": "#EE8866", "backward": "#555555", "metadata build": "#000000",
            "reload": "#EEDD88", "layer part": "#EE3377", "memcpy": "#AA4499", "host sync": "#117733",
            "optimizer": COMPONENTS["optimizer"], "other kernel": "#CC6677"}
"""What a bar of a traced step's timeline is (`analysis.layer_timeline` `category`): a layer's pass (its host range
and the kernels launched inside it share the pass's colour; the lane says which is which), a metadata build, a
reload, another part of a layer, a copy, a host sync, the optimizer step (the component's colour: the same meaning),
a kernel outside every layer pass. Drawn beside the step components, so distinct from theirs."""
MARKS = {"claimed range": "#BBBBBB", "ours": ROLES["optimized"], "ours, not comparable": "#777777",
         "measured": ROLES["optimized"], "fit": "#555555", "fitted at L=1": "#D55E00",
         "nvtx ranges": "#332288", "sync counter": "#117733", "two-term fit": "#D55E00"}
"""Marks of single figures: the claims figure (a claim's range; our optimized arm, as in every speedup figure; a
measurement that is not comparable), the sweep fits (measured saving, the fit, its value at L = 1), the instruments'
cost, MoE's two-term fit (`moe_figure`)."""

FAMILIES = {"component": COMPONENTS, "role": ROLES, "verdict": VERDICTS, "opt": OPTS, "timeline": TIMELINE,
            "mark": MARKS}
DRAWN_TOGETHER = (("component", "timeline"),)
"""Families one figure combines (a timeline beside its step breakdown): distinct colours across them, except where
a name means the same in both."""


def colour(family: str, name: str) -> str:
    """The colour of `name` in `family` (KeyError for an unknown family or name)."""
    return FAMILIES[family][name]


def opt_colour(opt: str, seen: list[str] | None = None) -> str:
    """An optimization's colour: `OPTS`, else the next of `SPARE` by its position in `seen` (the figure's other
    optimizations, in order)."""
    if opt in OPTS:
        return OPTS[opt]
    extra = [o for o in (seen or [opt]) if o not in OPTS]
    return SPARE[extra.index(opt) % len(SPARE)] if opt in extra else SPARE[0]


def verdict_colour(verdict) -> str:
    """A verdict's colour ("no detectable difference (±x%)" reads as "no detectable difference")."""
    v = str(verdict)
    return next((c for k, c in VERDICTS.items() if v.startswith(k)), VERDICTS["no detectable difference"])


__all__ = ["COMPONENTS", "STACKED", "ROLES", "ROLE_NAMES", "VERDICTS", "OPTS", "SPARE", "TIMELINE", "MARKS",
           "FAMILIES", "DRAWN_TOGETHER", "colour", "opt_colour", "verdict_colour"]
