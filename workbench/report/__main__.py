"""`python -m workbench.report RUN_DIR`: a run folder's state and one table per comparison."""
from __future__ import annotations

import os
import sys

from workbench.cli import parser, run_main
from workbench.errors import WorkbenchError


def main(argv=None) -> int:
    from workbench.measure import markers
    from workbench.measure.results import load_run
    from workbench.report import tables
    p = parser("workbench.report", tables.__doc__ + "\nPrints a run folder's state and one table per comparison.")
    p.add_argument("run_dir", help="a run folder (results.csv, summary.json, meta.json)")
    a = p.parse_args(argv)
    if not os.path.isfile(os.path.join(a.run_dir, "results.csv")):
        raise WorkbenchError(f"{a.run_dir} is not a run folder (no results.csv)")
    _, summary, meta = load_run(a.run_dir)
    state, why = markers.state(a.run_dir, meta)
    print(f"{a.run_dir}: {state}" + (f" ({why})" if why else "") + f"; {meta.get('command') or ''}")
    for c in summary.get("comparisons", []):
        if c.get("baseline") is not None:
            print()
            print(tables.comparison_table(c))
        else:
            print(f"\n{c.get('name')}: {c.get('status')}: {'; '.join(c.get('errors') or [])}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
