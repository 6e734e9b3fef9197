"""The committed notebooks are readable: no figure with more rows than a reader can see (`report.MAX_ROWS`), no
speedup figure on a linear axis that spans more than `report.LOG_AXIS_ABOVE`, no table longer than
`analysis.PREVIEW_ROWS`, and each notebook's estimated page height under `MAX_PAGE_PX` (`python -m
workbench.report.notebook_pages` measures it in headless Chromium). They render offline and need no trust: every figure
carries a static PNG beside its plotly JSON, no output holds a script, and nbconvert HTML with
`notebooks/offline.html.j2` loads nothing from a network. (That the outputs equal a fresh execution over profiles/ is
tests/test_notebooks.py's.)"""
from __future__ import annotations

import glob
import json
import os
import re

import pytest

from workbench import analysis
from workbench.report import notebook_pages, tables as report

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")))
PLOTLY = "application/vnd.plotly.v1+json"
MAX_PAGE_PX = notebook_pages.MAX_PAGE_PX
"""About what a reader scrolls through: figures at their PNG's height, table rows at ~24 px, a collapsed table one
line, text lines at ~18 px."""


def _figures(nb):
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            fig = (out.get("data") or {}).get(PLOTLY)
            if fig:
                yield fig


def _fig(fig):
    """A plotly Figure of a notebook output or a figure (typed arrays decoded), validation off."""
    import plotly.graph_objects as go

    return fig if isinstance(fig, go.Figure) else go.Figure(fig, skip_invalid=True)


def _seq(v) -> list:
    return [] if v is None else list(v)


def _title(fig) -> str:
    return str(_fig(fig).layout.title.text or "")


def _is_speedup(fig) -> bool:
    f = _fig(fig)
    return "speedup" in _title(f).lower() and any(getattr(t, "error_x", None) and t.error_x.array is not None
                                                   for t in f.data)


def _rows(fig) -> int:
    """Distinct categories on the figure's category axis (y for horizontal CI plots, x for bars; the labelled ticks
    where the rows are placed by number)."""
    f = _fig(fig)
    if f.layout.yaxis.ticktext is not None:
        return len(f.layout.yaxis.ticktext)
    ys = {str(y) for t in f.data if t.type == "scatter" and t.error_x.array is not None for y in _seq(t.y)}
    xs = {str(x) for t in f.data if t.type == "bar" and t.orientation != "h" for x in _seq(t.x)}
    return max(len(ys), len(xs))


def _span(fig) -> float:
    lo, hi = float("inf"), 0.0
    for t in _fig(fig).data:
        if t.type != "scatter" or t.error_x.array is None:
            continue
        xs = _seq(t.x)
        plus, minus = _seq(t.error_x.array), _seq(t.error_x.arrayminus) or _seq(t.error_x.array)
        for x, p, m in zip(xs, plus, minus):
            if isinstance(x, (int, float)):
                lo, hi = min(lo, x - (m or 0)), max(hi, x + (p or 0))
    return hi / lo if 0 < lo < hi else 1.0


def _xaxis_type(fig) -> str | None:
    return _fig(fig).layout.xaxis.type


def _png_px(b64) -> tuple[int, int]:
    """(width, height) from a base64 PNG's IHDR chunk."""
    import base64
    import struct

    head = base64.b64decode("".join(b64)[:64])
    return struct.unpack(">II", head[16:24])


def _page_px(nb) -> int:
    px = 0
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            px += 18 * max(1, len("".join(cell["source"])) // 110 + 1)
        for out in cell.get("outputs", []):
            data = out.get("data") or {}
            html = "".join(data.get("text/html") or "")
            if "image/png" in data:
                px += _png_px(data["image/png"])[1]
            elif PLOTLY in data:
                px += int((data[PLOTLY].get("layout") or {}).get("height") or 450)
            elif html:
                px += 30 if html.lstrip().startswith("<details") else 24 * len(re.findall(r"<tr", html))
            elif "text/plain" in data or out.get("text"):
                px += 18 * len("".join(data.get("text/plain") or out.get("text") or "").splitlines())
    return px


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[os.path.basename(p) for p in NOTEBOOKS])
def test_committed_notebook_is_readable(path):
    with open(path) as f:
        nb = json.load(f)
    for fig in _figures(nb):
        title = _title(fig)
        assert _rows(fig) <= report.MAX_ROWS, f"{title}: {_rows(fig)} rows"
        if _is_speedup(fig) and _xaxis_type(fig) != "log":
            assert _span(fig) <= report.LOG_AXIS_ABOVE, f"{title}: a linear axis spanning {_span(fig):.1f}x"
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            html = "".join((out.get("data") or {}).get("text/html") or "")
            body = html.split("<tbody>", 1)[-1] if "<tbody>" in html else ""
            assert body.count("<tr") <= analysis.PREVIEW_ROWS + 1, "a table longer than a reader reads"
    assert _page_px(nb) <= MAX_PAGE_PX, f"about {_page_px(nb)} px"


MAX_LEGEND_ENTRIES = 20
"""Categories one figure's legend may hold (a reader tells about this many colours apart)."""
MAX_HORIZONTAL_ENTRIES = 6
"""A horizontal legend (above or below the plot) holds one line of entries at most."""


def _colour(trace) -> str | None:
    for part in ("marker", "line"):
        c = getattr(getattr(trace, part, None), "color", None)
        if isinstance(c, str):
            return c.lower()
    return None


def _legend(fig) -> list[tuple[str, str | None]]:
    """(name, colour) of each legend entry, in order (a name once)."""
    f = _fig(fig)
    if f.layout.showlegend is False:
        return []
    out = {}
    for t in f.data:
        if t.showlegend is not False and t.name:
            out.setdefault(t.name, _colour(t))
    return list(out.items())


def _legend_problems(fig) -> list[str]:
    """Why a reader would not see the figure's whole legend, or could not tell its entries apart."""
    f, entries = _fig(fig), _legend(fig)
    out = []
    if len(entries) > MAX_LEGEND_ENTRIES:
        out.append(f"{len(entries)} legend entries")
    if any(k.startswith("legend") and k != "legend" and f.layout[k] is not None for k in f.layout.to_plotly_json()):
        out.append("a second legend (placed outside the plot area, it is cut off)")
    if f.layout.legend.orientation == "h":
        if len(entries) > MAX_HORIZONTAL_ENTRIES:
            out.append(f"{len(entries)} entries in a horizontal legend")
    elif len(entries) > 1:
        titles = len({t.legendgroup for t in f.data if t.legendgrouptitle.text})
        m = f.layout.margin
        plot_px = (f.layout.height or 450) - (100 if m.t is None else m.t) - (80 if m.b is None else m.b)
        if plot_px < report._legend_px(len(entries), titles):
            out.append(f"{len(entries)} entries in {plot_px} px")
    colours = [c for _, c in entries]
    if None in colours:
        out.append("an entry without its own colour (plotly's cycle: the colour follows the order)")
    if len(set(colours)) < len(colours):
        out.append("two entries, one colour")
    return out


def test_every_legend_whole_and_one_colour_per_meaning_across_the_notebooks():
    """Each figure's legend is whole (one legend, tall enough, at most MAX_LEGEND_ENTRIES) and tells its entries
    apart; a name keeps one colour in every figure of every notebook ("optimized" the same blue everywhere)."""
    seen: dict[str, tuple[str, str]] = {}
    for path in NOTEBOOKS:
        with open(path) as f:
            nb = json.load(f)
        for fig in _figures(nb):
            where = f"{os.path.basename(path)}: {_title(fig)[:60]}"
            assert _legend_problems(fig) == [], where
            for name, colour in _legend(fig):
                first = seen.setdefault(name, (colour, where))
                assert first[0] == colour, f"{name}: {colour} in {where}, {first[0]} in {first[1]}"


def test_the_legend_rules_catch_the_figures_notebook_04_drew_before():
    """Negative control: the timeline beside its breakdown with two legends, plotly's cycle for the timeline, 16 kinds
    of event in 10 colours, and the breakdown's legend cut at the figure's bottom."""
    import plotly.graph_objects as go

    cycle = ["#636efa", "#ef553b", "#00cc96", "#ab63fa", "#ffa15a", "#19d3f3", "#ff6692", "#b6e880", "#ff97ff",
             "#fecb52"]  # plotly's default colourway
    fig = go.Figure([go.Bar(x=[1], y=["lane"], name=f"kind {i}", marker_color=cycle[i % 10]) for i in range(16)]
                    + [go.Bar(x=[1], y=["arm"], name=c, legend="legend2") for c in ("gemm", "launch_gap (idle)")])
    fig.update_layout(height=400, legend2=dict(x=1.02, y=1))
    problems = _legend_problems(fig)
    assert any("second legend" in p for p in problems) and "two entries, one colour" in problems
    assert any("without its own colour" in p for p in problems)
    tall = go.Figure([go.Bar(x=[1], y=["a"], name=f"c{i}", marker_color=f"#{i:02x}{i:02x}{i:02x}") for i in range(12)])
    assert any("entries in" in p for p in _legend_problems(tall.update_layout(height=300)))
    assert _legend_problems(tall.update_layout(height=report.MARGIN_PX + report._legend_px(12))) == []


def test_the_rules_catch_a_long_linear_speedup_figure():
    """Negative control: the checks above fail on the figures notebook 01 drew before (53 rows, 1x to 9.5x)."""
    import pandas as pd

    comps = pd.DataFrame({"job": "j", "name": [f"c{i}" for i in range(20)], "baseline": "b", "arm": "a",
                          "speedup": [1.05] * 19 + [8.6], "ci95_lo": [1.0] * 19 + [7.8],
                          "ci95_hi": [1.1] * 19 + [9.5], "n_pairs": 16, "n_units": 8, "verdict": "faster",
                          "baseline_mean_ms": 10.0, "arm_mean_ms": 9.0, "file": "f", "role": "optimized",
                          "opt": "moe"})
    one = report.speedup_figure(comps)
    assert _rows(one) > report.MAX_ROWS and _span(one) > report.LOG_AXIS_ABOVE
    assert _xaxis_type(one) == "log"  # the figure itself switches to a log axis
    parts = report.speedup_figures(comps)
    assert len(parts) == 2 and all(_rows(p) <= report.MAX_ROWS for p in parts)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[os.path.basename(p) for p in NOTEBOOKS])
def test_committed_notebook_renders_offline_without_trust(path):
    """Every figure has a static PNG beside its JSON (nbconvert HTML and static viewers show it; JupyterLab draws the
    JSON); no output is a script or HTML holding one (an untrusted notebook would not run it, an offline one could not
    load it); the file is byte-for-byte what nbformat writes, with no kernel timing, so opening and saving it changes
    nothing."""
    nbformat = pytest.importorskip("nbformat")
    raw = open(path).read()
    nb = json.loads(raw)
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            data = out.get("data") or {}
            assert "application/javascript" not in data
            assert "<script" not in "".join(data.get("text/html") or ""), "an output holds a script"
            if PLOTLY in data:
                w, h = _png_px(data["image/png"])
                assert w == report.PNG_WIDTH_PX and h > 0
    assert set(nb["metadata"]) <= {"kernelspec", "language_info", "workbench_inputs"}  # the data's digest
    assert nbformat.writes(nbformat.reads(raw, as_version=4)) + "\n" == raw


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[os.path.basename(p) for p in NOTEBOOKS])
def test_nbconvert_html_loads_nothing_remote(path):
    pytest.importorskip("nbconvert")
    page = notebook_pages.html(path)
    assert notebook_pages.remote_loads(page) == []
    assert "<img" in page or "no data" in page


def test_remote_loads_negative_control():
    page = '<script src="https://cdn.example/plotly.min.js"></script><link href="//x.example/a.css" rel=stylesheet>'
    assert len(notebook_pages.remote_loads(page)) == 2
    assert notebook_pages.remote_loads('<script>var a = "https://x";</script><img src="data:image/png;base64,AA">') == []


def test_long_tables_collapse_under_a_summary_and_short_ones_stay_open():
    import pandas as pd

    from workbench.report import nbview

    short = pd.DataFrame({"a": range(nbview.OPEN_ROWS)})
    assert nbview.table(short, "rows") is short
    long = pd.DataFrame({"a": range(40)})
    t = nbview.table(long, "comparison rows")
    html = t._repr_html_()
    assert html.startswith("<details><summary>40 comparison rows") and "the first 15 here" in html
    assert html.split("<tbody>", 1)[1].count("<tr") == nbview.PREVIEW_ROWS  # the rest: the results page
    assert repr(t).splitlines()[0] == nbview.summary(long, "comparison rows")
    assert "the first" not in nbview.table(pd.DataFrame({"a": range(10)}), "rows")._repr_html_()


def test_notebook_pages_refuses_bad_input_in_one_line(capsys, tmp_path):
    assert notebook_pages.main([str(tmp_path / "nope.ipynb")]) == 2
    assert notebook_pages.main(["--chromium", str(tmp_path / "no-chromium"), "--no-screenshot", NOTEBOOKS[0]]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(x.startswith("notebook_pages: ") for x in err) and "Traceback" not in "".join(err)


def test_reexecution_keeps_static_images_or_says_what_they_need(monkeypatch):
    """Without a browser for kaleido a re-executed notebook gets the figures' JSON and one line naming what the PNGs
    need, never plotly's HTML renderer (plotly.js and MathJax as scripts); a static renderer asked for explicitly
    that cannot draw here is an error, not a silent switch."""
    from workbench.errors import WorkbenchError

    monkeypatch.delenv("WB_PLOTLY_RENDERER", raising=False)
    monkeypatch.setattr(report, "static_export_missing", lambda: None)
    assert report.renderer() == (report.STATIC_RENDERER, None)
    monkeypatch.setattr(report, "static_export_missing", lambda: "no Chrome or Chromium found")
    wanted, note = report.renderer()
    assert wanted == report.INTERACTIVE_RENDERER and "chromium" in note and "no Chrome" in note
    assert "notebook" not in wanted and "html" not in wanted
    monkeypatch.setenv("WB_PLOTLY_RENDERER", report.STATIC_RENDERER)
    with pytest.raises(WorkbenchError, match="apt-get install chromium"):
        report.renderer()
    monkeypatch.setenv("WB_PLOTLY_RENDERER", "plotly_mimetype")  # the tests' own: no PNG asked, none needed
    assert report.renderer() == ("plotly_mimetype", None)


def test_the_setup_module_says_how_figures_render(monkeypatch, capsys):
    from workbench.report import notebook_setup

    monkeypatch.delenv("WB_PLOTLY_RENDERER", raising=False)
    monkeypatch.setattr(report, "static_export_missing", lambda: "kaleido is not installed")
    monkeypatch.setattr(notebook_setup, "display", lambda *a: None)
    kw = notebook_setup.setup(os.path.join(ROOT, "profiles"))
    out = capsys.readouterr().out
    assert out.startswith("figures: interactive only") and "result folders in" in out
    assert kw == notebook_setup.selection() and kw["include_cpu"] is False


def test_speedup_figures_newest_keeps_the_newest_folders_and_says_so():
    """With `newest`, an optimization's figures hold its newest run folders' rows only (by the date their names start
    with), and the title says how many of how many; without it (the negative control) every row is drawn."""
    import pandas as pd

    folders = [f"profiles/2026-11-{d:02d}_h100_x" for d in range(1, 21)] * 2
    comps = pd.DataFrame({"folder": folders, "name": "c", "baseline": "b", "arm": [f"a{i}" for i in range(len(folders))],
                          "speedup": 1.05, "ci95_lo": 1.0, "ci95_hi": 1.1, "n_pairs": 16, "n_units": 8,
                          "verdict": "faster", "baseline_mean_ms": 10.0, "arm_mean_ms": 9.0, "file": "f",
                          "role": "optimized", "opt": "packing"})
    every = report.speedup_figures(comps)
    assert sum(_rows(f) for f in every) == len(comps) == 40
    some = report.speedup_figures(comps, newest=report.MAX_ROWS)
    assert len(some) == 1 and _rows(some[0]) == report.MAX_ROWS
    assert f"the newest {report.MAX_ROWS} of 40 rows" in _title(some[0])
    labels = [str(y) for tr in some[0].data for y in tr.y]
    assert all(lab >= "2026-11-13" for lab in labels), labels  # days 13-20, two rows each: the 15 newest rows
    assert not any(lab.startswith("2026-11-01") for lab in labels)
