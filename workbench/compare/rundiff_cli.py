"""workbench diff RUN_A RUN_B [--comparison NAME] [--arm ARM] [--by component|layer]

Two run folders of the same comparison and arm (an earlier and a later commit, two machines, two settings): each
traced component's change in ms per step (B - A) with its 95% CI over the traced steps (paired by batch when both
runs traced the same batches in the same order, else Welch), flagged (*) only when Holm over the table's components leaves it significant; the closure (the component changes add up to
the traced step-time change; the residual is printed); and the timed step-time change (results.csv, the rep as the
unit) beside the traced one, because the profiler's own cost moves the traced steps. The statistics are in
`workbench.compare.rundiff`; `workbench.compare.figure.changes_figure` draws the changes for notebook 04.

Console table on stdout, JSON as the last stdout line. Bad input: one line on stderr, exit status 2.
"""
from __future__ import annotations

import argparse
import sys

from workbench.compare import rundiff
from workbench.cli import OneLineParser, emit_json, run_main
from workbench.errors import WorkbenchError


def _ci(ci) -> str:
    return f"[{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else "-"


def table(d: dict) -> str:
    """The console table: one line per component with a change or a flag, then the step-time lines."""
    head = f"{'component':<18} {'layer':<5} {'pass':<9} {'A ms':>9} {'B ms':>9} {'B-A ms':>9} {'95% CI':>20} {'p_holm':>7}"
    lines = [f"{d['comparison']} / {d['arm']}: {d['run_b']} - {d['run_a']} "
             f"({d['steps']['a']} and {d['steps']['b']} traced steps, {d['steps']['components']} components; "
             f"{d.get('test', 'Welch')})", head]
    for r in sorted(d["rows"], key=lambda r: -abs(r["delta_ms"])):
        if not r["flagged"] and abs(r["delta_ms"]) < 1e-4:
            continue
        ph = f"{r['p_holm']:.3f}" if r["p_holm"] is not None else "-"
        lines.append(f"{r['component']:<18} {r['layer']:<5} {r['pass']:<9} {r['a_ms']:>9.3f} {r['b_ms']:>9.3f} "
                     f"{r['delta_ms']:>+9.3f} {_ci(r['ci95']):>20} {ph:>7}{' *' if r['flagged'] else ''}")
    t, c, m = d["traced"], d["closure"], d["timed"]
    rp = f" ({c['residual_pct']:.2f}% of the change)" if c["residual_pct"] is not None else ""
    lines += [f"traced step time: {t['delta_ms']:+.3f} ms {_ci(t['ci95'])} ({d.get('test', 'Welch')} over traced steps)",
              f"sum of components: {c['sum_components_ms']:+.3f} ms; residual {c['residual_ms']:+.4f} ms{rp}",
              f"timed step time:  {m['delta_ms']:+.3f} ms {_ci(m['ci95'])}"
              + (f" = {m['pct']:+.2f}%" if m["pct"] is not None else "")
              + f" (Welch over per-rep means, {m['n_a']} and {m['n_b']} reps)",
              "* : CI excludes 0 after Holm over the components"]
    moved = rundiff.moved(d)
    lines.append("moved: " + (", ".join(f"{r['component']}" + (f" {r['layer']}/{r['pass']}" if r["layer"] or r["pass"]
                                                                 else "") for r in moved) or "nothing"))
    u = d.get("unmatched") or {}
    if u.get("only_a") or u.get("only_b"):
        lines.append(f"NVTX labels in one run only: A {u['only_a']}, B {u['only_b']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = OneLineParser(prog="workbench diff", description=__doc__.split("\n\n")[1])
    p.add_argument("run_a", metavar="RUN_A")
    p.add_argument("run_b", metavar="RUN_B")
    p.add_argument("--comparison", default=None, help="comparison name (default: the only one both runs traced)")
    p.add_argument("--arm", default=None, help="arm (default: the comparison's optimized arm)")
    p.add_argument("--by", default="component", choices=("component", "layer"),
                   help="layer: every component per layer and pass of the NVTX ranges")
    a = p.parse_args(argv)
    try:
        d = rundiff.diff_runs(a.run_a, a.run_b, a.comparison, a.arm, a.by)
    except OSError as e:
        raise WorkbenchError(str(e)) from None
    print(table(d))
    emit_json(d)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
