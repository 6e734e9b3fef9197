"""What every notebook does first, in one place: pandas' display options, the run selection the README uses, which
result folders were read and which were left out (and why), and how figures will render. Each notebook calls it in
one short cell after its parameters cell:

    from workbench.report.notebook_setup import setup, an, rp, nbview, pd, display, Markdown
    KW = setup(PROFILES, include_cpu=INCLUDE_CPU, include_incomplete=INCLUDE_INCOMPLETE)

`KW` is the selection every `an.*` call of the notebook takes: complete GPU runs, plus the complete comparisons of
the cut-off runs the README names (`an.KEEP_FROM_INCOMPLETE`), or of every cut-off run with `include_incomplete`. `rp`
(`workbench.report`) draws the figures: `rp.show(rp.speedup_figure(...))`.
"""
from __future__ import annotations

import pandas as pd
from IPython.display import Markdown, display

from workbench import analysis as an, report as rp
from workbench.report import nbview, tables

RUN_COLUMNS = ["folder", "command", "gpu_name", "status", "comparisons", "torch", "transformers"]
"""The columns of the result-folder table each notebook opens with."""
LEFT_OUT_COLUMNS = ["folder", "status", "reason"]
VOID_COLUMNS = ["folder", "comparison", "baseline", "arm", "void_reason", "void_commit"]
PANDAS_OPTIONS = {"display.width": 200, "display.max_columns": 40, "display.max_colwidth": 80,
                  "display.max_rows": 400}
"""Every arm and source line shown, not a truncated view; long text cut at 80 characters."""


def selection(include_cpu: bool = False, include_incomplete: bool = False) -> dict:
    """The keyword arguments of the README's selection, for every `an.*` loader."""
    return dict(include_cpu=include_cpu,
                include_incomplete_comparisons=True if include_incomplete else an.KEEP_FROM_INCOMPLETE)


def setup(profiles: str, include_cpu: bool = False, include_incomplete: bool = False) -> dict:
    """Set the display options, print and show the result folders read from `profiles` and those left out (one line,
    the table collapsed), say how figures render when they cannot be static PNGs; return the selection (`selection`)
    for the notebook's `an.*` calls."""
    for k, v in PANDAS_OPTIONS.items():
        pd.set_option(k, v)
    _, note = tables.renderer()
    if note:
        print(note)
    runs = an.discover(profiles, include_cpu=include_cpu)
    print(f"{len(runs)} result folders in {an.shown_path(profiles)}")
    display(nbview.table(runs[RUN_COLUMNS], "result folders"))
    out = an.left_out(profiles, include_cpu=include_cpu)
    if len(out):
        kept = ", ".join(an.KEEP_FROM_INCOMPLETE)
        display(nbview.table(out[LEFT_OUT_COLUMNS], f"run folders left out (the complete comparisons of {kept} are "
                             "still read, as in the README)", open_rows=0,
                             where="every one in an.left_out(PROFILES)"))
    void = an.voided(profiles, **selection(include_cpu, include_incomplete))
    if len(void):
        display(nbview.table(void[VOID_COLUMNS], "comparisons declared void by their folder's VOID.json (left out of "
                             "every frame below)", open_rows=0, where="every one in an.voided(PROFILES)"))
    return selection(include_cpu, include_incomplete)


__all__ = ["Markdown", "an", "display", "nbview", "pd", "rp", "selection", "setup"]
