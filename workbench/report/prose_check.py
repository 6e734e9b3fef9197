"""The prose check of `workbench readme_results --check`: every speedup quoted in README.md's and
profiles/README.md's prose (outside the generated blocks and code) must be a speedup (with its CI) of a comparison in
profiles/; struck-through figures (`~~1.70x~~`, retracted ones) are exempt."""
from __future__ import annotations

import re

import pandas as pd

from workbench.report.markdown import RESULTS_MARKERS, VIEWING_MARKERS

SPEEDUP_RE = re.compile(r"(?<![\w.])(\d+\.\d{2,3})x(?:\s*\[(?:95% CI\s*)?(\d+\.\d{2,3})[,-]\s*(\d+\.\d{2,3})"
                        r"(?:,\s*n=(\d+)(?: pairs)?)?\](?:,?\s*n=(\d+))?)?")


def _strip_blocks(text: str) -> str:
    """`text` with the generated blocks, fenced code blocks and ~~struck-through~~ (retracted) figures blanked (line
    numbers kept)."""
    for start, end in (RESULTS_MARKERS, VIEWING_MARKERS):
        i, j = text.find(start), text.find(end)
        if 0 <= i < j:
            text = text[:i] + re.sub(r"[^\n]", " ", text[i:j]) + text[j:]
    blank = lambda m: re.sub(r"[^\n]", " ", m.group(0))  # noqa: E731
    text = re.sub(r"```.*?```", blank, text, flags=re.S)
    return re.sub(r"~~[^~\n]*~~", blank, text)  # struck-through figures are retracted ones


def arm_pairs(root: str) -> pd.DataFrame:
    """Every other ordered pair of arms timed in one comparison of a run that has more than two (a path's point
    against the previous one, an optimized arm against the anchor beside it), recomputed from results.csv like any
    speedup (`analysis.recomputed`): figures the prose may quote besides each arm against its baseline."""
    from workbench.analysis import loader
    rows = []
    for d in loader._run_dirs(root):
        for name, smp in loader.step_samples(d).items():
            arms = list(dict.fromkeys(x["arm"] for x in smp))
            if len(arms) < 3:
                continue
            for a in arms:
                for b in arms:
                    if a != b and (r := loader.recomputed(d, name, a, b)) is not None and r.get("ci95"):
                        rows.append({"speedup": r["speedup"], "ci95_lo": r["ci95"][0], "ci95_hi": r["ci95"][1],
                                     "n_pairs": r.get("n_pairs")})
    return pd.DataFrame(rows, columns=["speedup", "ci95_lo", "ci95_hi", "n_pairs"])


def prose_problems(text: str, comps: pd.DataFrame, where: str = "README.md") -> list[str]:
    """Every speedup quoted in `text` outside the generated blocks and code (`1.133x`, `1.13x`, `1.133x [1.103,
    1.161]`, `1.133x [1.103, 1.161], n=12`) that matches no comparison of `comps` (any role: A/B, A/A, NVTX, sweeps),
    as rounded in the text, with its n pairs where the text gives them: one message per mismatch, with its line
    number."""
    def fmt(v, d):
        return f"{v:.{d}f}"
    triples, values = set(), set()
    for r in comps.to_dict("records"):
        s, lo, hi = r["speedup"], r["ci95_lo"], r["ci95_hi"]
        if s is None or s != s:
            continue
        pairs = None if r["n_pairs"] is None or r["n_pairs"] != r["n_pairs"] else str(int(r["n_pairs"]))
        for d in (2, 3):
            values.add(fmt(s, d))
            if lo == lo and lo is not None:
                triples.update({(fmt(s, d), fmt(lo, d), fmt(hi, d), None), (fmt(s, d), fmt(lo, d), fmt(hi, d), pairs)})
    out = []
    body = _strip_blocks(text)
    for m in SPEEDUP_RE.finditer(body):  # across line breaks: a figure may wrap
        n = body.count("\n", 0, m.start()) + 1
        s, lo, hi, n_in, n_after = m.groups()
        quoted = " ".join(m.group(0).split())
        if lo is not None and (s, lo, hi, n_in or n_after) not in triples:
            out.append(f"{where}:{n}: {quoted!r} matches no comparison's speedup, 95% CI (and n pairs) in profiles/")
        elif lo is None and s not in values:
            out.append(f"{where}:{n}: {quoted!r} matches no comparison's speedup in profiles/")
    return out

