"""`python -m workbench.report RUN_DIR`: a run folder's state and one table per comparison."""
from __future__ import annotations

import os
import sys

from workbench.cli import parser, run_main
from workbench.errors import WorkbenchError


def main(argv=None) -> int:
    from workbench.measure import markers
    from workbench.measure.results import has_results, load_run, void_comparisons
    from workbench.report import tables
    p = parser("workbench report", tables.__doc__ + "\nPrints a run folder's state and one table per comparison.")
    p.add_argument("run_dir", help="a run folder (results.csv, summary.json, meta.json)")
    a = p.parse_args(argv)
    if not has_results(a.run_dir):
        raise WorkbenchError(f"{a.run_dir} is not a run folder (no results.csv)")
    results, summary, meta = load_run(a.run_dir)
    void = void_comparisons(a.run_dir)
    state, why = markers.state(a.run_dir, meta)
    print(f"{a.run_dir}: {state}" + (f" ({why})" if why else "")
          + (f"; results.csv {meta['integrity']}" if meta.get("integrity", "verified") != "verified" else "")
          + f"; {meta.get('command') or ''}")
    for c in summary.get("comparisons", []):
        v = void.get(c.get("name") or c.get("opt"))
        if v:  # no numbers: a void comparison's table is not a result
            print(f"\n{c.get('name')}: void: {v['void_reason']} (found by {v['void_found_by']}; fixed in "
                  f"{v['void_commit']}; {os.path.join(a.run_dir, 'VOID.json')})")
        elif c.get("baseline") is not None:
            print()
            print(tables.comparison_table(c))
        else:
            print(f"\n{c.get('name')}: {c.get('status')}: {'; '.join(c.get('errors') or [])}")
    for line in unsummarized(results, summary):
        print("\n" + line)
    return 0


def unsummarized(results, summary: dict) -> list[str]:
    """One line per comparison whose timed steps are in results.csv but which summary.json lacks (a run stopped,
    by Ctrl-C or a crash, before the comparison finished): what was measured, so the folder never looks empty."""
    if results is None or results.empty or "comparison" not in results:
        return []
    done = {c.get("name") for c in summary.get("comparisons", []) or []}
    steps = results[(results["metric"] == "step_ms") & results["rep"].notna()]
    out = []
    for name, g in steps.groupby("comparison", sort=False):
        if name in done:
            continue
        per_arm = ", ".join(f"{arm} {len(x)}" for arm, x in g.groupby("arm", sort=False))
        out.append(f"{name}: stopped before it finished (no table): results.csv holds timed steps of {per_arm} "
                   f"over {g['rep'].nunique()} rep(s)")
    return out


if __name__ == "__main__":
    sys.exit(run_main(main))
