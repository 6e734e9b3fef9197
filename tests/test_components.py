"""One place for the step components (`workbench.traces.components`) and one colour per meaning
(`workbench.report.palette`): every component the decomposition and the levers can emit has an entry, no two meanings
share a colour where a figure draws them together, the colours stay apart for a reader, and the figures, the
README's PNGs and the levers take their colours and lever text from there."""
from __future__ import annotations

import itertools
import math

import pandas as pd
import pytest

from workbench.report import palette
from workbench.traces import components, decompose, lever_advice as levers

MIN_DELTA_E = 20.0
"""The least CIE76 distance between two colours that one figure draws (about where two swatches stop being mistaken
for one at a glance)."""


def _lab(hex_colour: str) -> tuple[float, float, float]:
    """sRGB hex -> CIELAB (D65)."""
    def lin(c):
        return ((c + 0.055) / 1.055) ** 2.4 if c > 0.04045 else c / 12.92

    r, g, b = (lin(int(hex_colour[i:i + 2], 16) / 255) for i in (1, 3, 5))
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883

    def f(t):
        return t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116

    return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))


def _clashes(colours: dict) -> list[tuple]:
    """Pairs of names with one colour, or colours closer than MIN_DELTA_E (the same name may repeat across families:
    same meaning, same colour)."""
    out = []
    for (a, x), (b, y) in itertools.combinations(colours.items(), 2):
        if x.lower() == y.lower() or math.dist(_lab(x), _lab(y)) < MIN_DELTA_E:
            out.append((a, b, x, y))
    return out


def test_every_component_the_decomposition_and_the_levers_emit_has_an_entry():
    assert components.STACKED == decompose.COMPONENTS  # the partition, in its order
    assert set(components.BUSY) == set(decompose.BUSY) and set(components.IDLE) == set(decompose.IDLE)
    assert levers.LEVER_COMPONENTS <= set(components.COMPONENTS)
    for c in components.COMPONENTS.values():
        assert c.group in ("busy", "idle", "lever") and c.colour.startswith("#") and len(c.colour) == 7
    assert [c for c in components.COMPONENTS.values() if c.lever is None] == \
        [components.COMPONENTS["gemm"], components.COMPONENTS["attention"]]  # the useful work has no lever
    assert components.attention_component("dense") == levers.DENSE_ATTENTION_COMPONENT
    assert components.COMPONENTS["attention"].attention_flops == "block_diagonal"


def test_no_two_meanings_share_a_colour():
    assert _clashes(components.COLOURS) == []
    for family, colours in palette.FAMILIES.items():
        if family != "mark":  # marks belong to single figures; the notebooks' figures are checked as drawn
            assert _clashes(colours) == [], family
    for families in palette.DRAWN_TOGETHER:
        together = {}
        for f in families:
            for name, c in palette.FAMILIES[f].items():
                together.setdefault(name, c)
                assert together[name] == c, name  # a name in both families means the same: one colour
        assert _clashes(together) == [], families


def test_the_clash_check_fails_on_the_old_palettes():
    """Negative control: the timeline before this module took plotly's 10-colour cycle for about 16 kinds of event
    (two kinds, one colour), beside a step breakdown whose exposed_copy (#fb8f44) was near the cycle's #FFA15A."""
    old_timeline = {"fwd": "#636efa", "kernel": "#636efa", "recompute": "#ef553b", "kernel (fwd)": "#ef553b"}
    near = {"exposed_copy (idle)": "#fb8f44", "kernel (bwd)": "#FFA15A"}
    assert len(_clashes(old_timeline)) == 2 and _clashes(near)


def test_levers_read_their_text_from_the_components():
    rows = [{"component": c, "ms": 10.0, "share": 0.1} for c in components.STACKED] + \
        [{"component": "step_ms", "ms": 100.0, "share": 1.0}]
    out = levers.levers(rows, attention_flops="dense")
    assert {r["component"] for r in out} == set(components.LEVERS) | {levers.DENSE_ATTENTION_COMPONENT}
    for r in out:
        assert r["lever"].startswith(components.COMPONENTS[r["component"]].lever)
    assert levers.levers(rows, attention_flops="block_diagonal")[-1]["component"] != levers.DENSE_ATTENTION_COMPONENT


def test_timeline_categories_each_have_a_colour():
    from workbench import analysis as an

    assert set(an.TIMELINE_CATEGORIES) == set(palette.TIMELINE)


def _bd(arm, **ms):
    return [dict(folder="profiles/2026-01-01_x/run", comparison="packing", arm=arm, component=c, ms=v, share=v / 100)
            for c, v in ms.items()]


def test_figures_take_the_component_colours():
    from workbench.report import figures, tables

    bd = pd.DataFrame(_bd("rebuild", gemm=10.0, launch_gap=5.0, sync_stall=2.0) + _bd("cached", gemm=10.0))
    fig = tables.breakdown_figure(bd)
    assert {t.name: t.marker.color for t in fig.data} == {"gemm": components.colour("gemm"),
                                                         "sync_stall (idle)": components.colour("sync_stall"),
                                                         "launch_gap (idle)": components.colour("launch_gap")}
    assert figures.BREAKDOWN_COLOURS == components.COLOURS and figures.BREAKDOWN_ORDER == components.STACKED
    assert figures.VERDICT_COLOURS["faster"] == palette.VERDICTS["faster"]


@pytest.mark.parametrize("first", ["optimized", "other"])
def test_a_role_keeps_its_colour_whichever_comes_first(first):
    """"optimized" was blue in one panel and red in the next: plotly's colourway followed the order of the roles."""
    from workbench.report import tables

    roles = [first, "other" if first == "optimized" else "optimized"]
    comps = pd.DataFrame({"folder": "profiles/2026-01-01_x/run", "name": ["a", "b"], "baseline": "b0",
                          "arm": ["x", "y"], "role": roles, "speedup": 1.1, "ci95_lo": 1.0, "ci95_hi": 1.2,
                          "n_pairs": 8, "n_units": 4, "verdict": "faster", "baseline_mean_ms": 10.0,
                          "arm_mean_ms": 9.0, "file": "f"})
    fig = tables.speedup_figure(comps)
    by_name = {t.name: t.marker.color for t in fig.data}
    assert by_name[palette.ROLE_NAMES["optimized"]] == palette.ROLES["optimized"]
    assert by_name[palette.ROLE_NAMES["other"]] == palette.ROLES["other"]


def test_one_row_per_run_in_a_speedup_figure():
    from workbench.report import tables

    comps = pd.DataFrame({"folder": ["profiles/2026-01-01_a/packing", "profiles/2026-01-02_b/packing"],
                          "name": "packing", "baseline": "rebuild", "arm": "cached", "role": "optimized"})
    labels = tables.run_labels(comps)
    assert labels == ["2026-01-01_a/packing · packing · rebuild -> cached",
                      "2026-01-02_b/packing · packing · rebuild -> cached"]
    assert len(set(tables.run_labels(pd.concat([comps, comps])))) == 4  # even the same folder twice: two rows
