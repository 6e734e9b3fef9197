"""Tables as a notebook reader meets them: a short table shown as is, a long one collapsed under a one-line summary
(an HTML `<details>`: nbconvert HTML, JupyterLab and static viewers show the summary and open it on a click), its
first `PREVIEW_ROWS` rows inside, every row on the results page (`profiles/RESULTS.md`) and in the DataFrame the cell
keeps. Plain text (`text/plain`) carries the summary and the same rows.

    from workbench.report import nbview
    display(nbview.table(df, "comparison rows"))
"""
from __future__ import annotations

import html

import pandas as pd

PREVIEW_ROWS = 15
"""Rows inside a collapsed table (the rest: the results page)."""
OPEN_ROWS = 6
"""A table of at most this many rows is shown open."""


class Collapsed:
    """A DataFrame's first rows under a `<details>` summary line."""

    def __init__(self, df: pd.DataFrame, summary: str, n: int = PREVIEW_ROWS):
        self.df, self.summary, self.n = df, summary, n

    def _repr_html_(self) -> str:
        return (f"<details><summary>{html.escape(self.summary)}</summary>\n{self.df.head(self.n)._repr_html_()}"
                "</details>")

    def __repr__(self) -> str:
        return f"{self.summary}\n{self.df.head(self.n).to_string()}"


RESULTS = "every one on the results page (profiles/RESULTS.md) and in the DataFrame this cell keeps"


def summary(df: pd.DataFrame, what: str, n: int = PREVIEW_ROWS, where: str = RESULTS) -> str:
    more = f"; the first {n} here, {where}" if len(df) > n else ""
    return f"{len(df)} {what} (click to open){more}"


def table(df: pd.DataFrame, what: str = "rows", n: int = PREVIEW_ROWS, open_rows: int = OPEN_ROWS,
          where: str = RESULTS):
    """`df` itself when it has at most `open_rows` rows, else its first `n` rows collapsed under a summary line that
    says where the rest are (`where`)."""
    if df is None or len(df) <= open_rows:
        return df
    return Collapsed(df, summary(df, what, n, where), n)
