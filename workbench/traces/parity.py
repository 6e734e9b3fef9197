"""Trace-source parity: the per-class totals of two traces of one step side by side (torch.profiler vs Nsight
Systems, or any two event files), and whether they agree.

    python -m workbench.traces.parity A.events.parquet B.events.parquet            # any two traces or event files
    python -m workbench.traces.parity A.pt.trace.json.gz B.sqlite --keep tests/data/trace_pair

Prints one row per busy class: ms per step in A and in B (the step breakdown, `workbench.traces.decompose.summary`),
B - A, kernels per step of that class in each, and whether the two agree (`agree_rule`); then the step's idle and total
rows for context (not judged: the profilers' own host overhead differs, so idle time is not expected to agree). The
last stdout line is JSON: {"a", "b", "tol_pct", "agree", "classes": [...]}. Exit status 0 when every class agrees,
1 when one does not, 2 for bad input. `--keep DIR` also writes each file's first traced step as
DIR/<source>.events.parquet (the committed pair that `tests/test_trace_parity.py` checks).
"""
from __future__ import annotations

import os

import pandas as pd

from workbench.traces import decompose

TOL_PCT = 2.0
"""Two traces of one step agree on a class when its totals differ by at most this %."""
MIN_SHARE = 0.01
"""Classes under this share of the step's busy time are held to TOL_PCT of that share instead of their own total
(a 0.06 ms optimizer class would otherwise have to agree to 1 us)."""


def agree_rule(tol_pct: float = TOL_PCT) -> str:
    """The decision rule, in words (`compare_classes` applies it; fixed here before the GPU run that it judges)."""
    return (f"|B - A| <= {tol_pct:g}% of max(A, B, {MIN_SHARE:g} x busy ms per step), per busy class "
            "(busy: the larger of the two traces' busy totals)")


COLUMNS = ["component", "group", "a_ms", "b_ms", "diff_ms", "a_kernels", "b_kernels", "agree"]


def class_totals(events: pd.DataFrame) -> pd.DataFrame:
    """Per component: ms per step (`decompose.summary`) and, for busy classes, kernels per step; columns component,
    group, ms, kernels."""
    s = decompose.summary(events)[["component", "group", "ms"]]
    k, _ = decompose._gpu(events)
    steps = decompose.step_windows(events)
    if len(steps):  # the kernels inside the step windows, as the breakdown counts them
        inside = pd.Series(False, index=k.index)
        for w in steps.itertuples():
            inside |= (k["end_ns"] > w.start_ns) & (k["start_ns"] < w.end_ns)
        k = k[inside]
    per_step = k.groupby("cls").size() / max(len(steps), 1)
    s = s.assign(kernels=s["component"].map(per_step).where(s["group"] == "busy"))
    s.loc[(s["group"] == "busy") & s["kernels"].isna(), "kernels"] = 0.0
    return s.reset_index(drop=True)


def compare_classes(a: pd.DataFrame, b: pd.DataFrame, tol_pct: float = TOL_PCT) -> pd.DataFrame:
    """Events A against events B (COLUMNS): busy classes judged by `agree_rule(tol_pct)`, idle and total rows with
    agree = None."""
    ta, tb = class_totals(a).set_index("component"), class_totals(b).set_index("component")
    busy_ms = max(float(t.loc[t["group"] == "busy", "ms"].sum()) for t in (ta, tb))
    rows = []
    for comp in ta.index:
        am, bm = float(ta.loc[comp, "ms"]), float(tb.loc[comp, "ms"])
        busy = ta.loc[comp, "group"] == "busy"
        agree = abs(bm - am) <= tol_pct / 100 * max(am, bm, MIN_SHARE * busy_ms) if busy else None
        rows.append(dict(component=comp, group=ta.loc[comp, "group"], a_ms=am, b_ms=bm, diff_ms=bm - am,
                         a_kernels=ta.loc[comp, "kernels"], b_kernels=tb.loc[comp, "kernels"], agree=agree))
    return pd.DataFrame(rows, columns=COLUMNS)


def short_named(events: pd.DataFrame) -> float:
    """The share of kernel rows named only by a generic kernel's short name (`elementwise_kernel`, `Kernel2`): events
    saved from an Nsight export before the loader read full names, whose classes the template arguments decided."""
    from workbench.traces.classify import LAUNCHERS, TENSOR_ITERATOR

    k = events.loc[events["kind"] == "kernel", "name"]
    return float(k.isin(TENSOR_ITERATOR | LAUNCHERS).mean()) if len(k) else 0.0


def keep_first_step(events: pd.DataFrame, out_dir: str) -> str:
    """Write the first traced step of `events` as OUT_DIR/<source>.events.parquet; returns the path."""
    from workbench.traces.analysis import first_steps
    from workbench.traces.events import save_events

    source = str(events["source"].iloc[0]) if len(events) else "events"
    os.makedirs(out_dir, exist_ok=True)
    return save_events(first_steps(events, 1), os.path.join(out_dir, source))


def main(argv=None) -> int:
    from workbench.cli import emit_json, parser, table
    from workbench.errors import WorkbenchError
    from workbench.traces.events import load_events

    p = parser("workbench.traces.parity", __doc__)
    p.add_argument("a", help="events A: a torch trace (.json[.gz]), an nsys export (.sqlite) or saved events")
    p.add_argument("b", help="events B, of the same step")
    p.add_argument("--tol-pct", type=float, default=TOL_PCT, help="agreement tolerance per class, in %%")
    p.add_argument("--keep", metavar="DIR", help="also write each file's first traced step to DIR")
    args = p.parse_args(argv)
    if args.tol_pct <= 0:
        raise WorkbenchError(f"--tol-pct must be positive, got {args.tol_pct}")
    events = []
    for path in (args.a, args.b):
        if not os.path.isfile(path):
            raise WorkbenchError(f"no such file: {path}")
        try:
            ev = load_events(path)
        except ValueError as e:
            raise WorkbenchError(str(e)) from None
        if decompose.step_windows(ev).empty:
            raise WorkbenchError(f"{path}: no wb/step range, so no step to compare")
        events.append(ev)
    if args.keep:
        for ev in events:
            keep_first_step(ev, args.keep)
    out = compare_classes(*events, tol_pct=args.tol_pct)
    src = [str(ev["source"].iloc[0]) for ev in events]
    rows = [[r.component, f"{r.a_ms:.2f}", f"{r.b_ms:.2f}", f"{r.diff_ms:+.2f}",
             "" if pd.isna(r.a_kernels) else f"{r.a_kernels:.1f}", "" if pd.isna(r.b_kernels) else f"{r.b_kernels:.1f}",
             "" if r.agree is None else ("yes" if r.agree else "NO")] for r in out.itertuples()]
    for label, path, ev, source in zip("AB", (args.a, args.b), events, src):
        short = short_named(ev)
        print(f"{label} = {path} ({source})" + (f"  note: {100 * short:.0f}% of its kernels carry only a short name "
                                                 "(saved before the normaliser): their classes cannot be recovered"
                                                 if short else ""))
    print(table(rows, ["component", "A ms/step", "B ms/step", "B - A", "A kernels", "B kernels", "agree"]))
    busy = out[out["group"] == "busy"]
    agree = bool(busy["agree"].all())
    print(f"rule: {agree_rule(args.tol_pct)}: "
          + ("every class agrees" if agree else "differ: " + ", ".join(busy.loc[~busy['agree'].astype(bool),
                                                                                  "component"])))
    emit_json({"a": args.a, "b": args.b, "sources": src, "tol_pct": args.tol_pct, "agree": agree,
               "classes": out.to_dict("records")})
    return 0 if agree else 1


if __name__ == "__main__":
    import sys

    from workbench.cli import run_main
    sys.exit(run_main(main))
