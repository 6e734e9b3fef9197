"""`python -m` for the library modules the README names (`levers`, `report`, `analysis`, `figures`): each answers
--help and does one useful read-only thing, instead of importing and exiting silently.

    python -m workbench.levers                      # the lever of each step component
    python -m workbench.report RUN_DIR              # a run folder's state and its comparison tables
    python -m workbench.analysis [PROFILES]         # the run folders found, and those left out with the reason
    python -m workbench.figures [PROFILES] [--out PNG]   # the numbers the headline figure draws (and the PNG)
"""
from __future__ import annotations

import argparse
import os
import sys

from workbench.cli import run_main
from workbench.errors import WorkbenchError


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2
        raise WorkbenchError(f"{message} (see --help)")


def _parser(module: str, doc: str) -> argparse.ArgumentParser:
    return _Parser(prog=f"python -m workbench.{module}", description=doc,
                   formatter_class=argparse.RawDescriptionHelpFormatter)


def levers_main(argv=None) -> int:
    from workbench import levers
    _parser("levers", levers.__doc__ + "\nPrints each component and its lever.").parse_args(argv)
    width = max(map(len, levers.LEVERS))
    for component, lever in levers.LEVERS.items():
        print(f"{component:<{width}}  {lever}")
    return 0


def report_main(argv=None) -> int:
    from workbench import markers, report
    from workbench.results import load_run
    p = _parser("report", report.__doc__ + "\nPrints a run folder's state and one table per comparison.")
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
            print(report.comparison_table(c))
        else:
            print(f"\n{c.get('name')}: {c.get('status')}: {'; '.join(c.get('errors') or [])}")
    return 0


def analysis_main(argv=None) -> int:
    from workbench import analysis as an
    p = _parser("analysis", an.__doc__ + "\nPrints the run folders found and those left out, with the reason.")
    p.add_argument("profiles", nargs="?", default=None, help="the folder searched (default: $WB_PROFILES, else "
                   "the checkout's profiles/)")
    p.add_argument("--include-cpu", action="store_true", help="keep CPU runs")
    p.add_argument("--include-incomplete", action="store_true", help="keep runs that did not complete")
    a = p.parse_args(argv)
    runs = an.discover(a.profiles, include_cpu=a.include_cpu, include_incomplete=a.include_incomplete)
    left = runs.attrs["left_out"]
    print(f"{len(runs)} run folders kept under {an.shown_path(an.profiles_root(a.profiles))}:")
    for r in runs.to_dict("records"):
        print(f"  {r['folder']}  {r['device']}  {r['status']}  {r['comparisons']} comparisons")
    print(f"{len(left)} left out:")
    for r in left.to_dict("records"):
        print(f"  {r['folder']}  {r['status']}: {r['reason']}")
    return 0


def figures_main(argv=None) -> int:
    from workbench import analysis as an, figures
    p = _parser("figures", figures.__doc__ + "\nPrints the rows the headline figure draws; --out also draws it.")
    p.add_argument("profiles", nargs="?", default=None, help="the folder searched (default: the checkout's "
                   "profiles/)")
    p.add_argument("--out", default=None, metavar="PNG", help="write the headline figure here")
    a = p.parse_args(argv)
    rows = figures.headline_rows(an.comparisons(a.profiles))
    print(rows.to_string(index=False) if not rows.empty else "no comparison to draw")
    if a.out:
        print(f"wrote {figures.save_headline(rows, a.out)}")
    return 0


MAINS = {"levers": levers_main, "report": report_main, "analysis": analysis_main, "figures": figures_main}


def run(module: str) -> None:
    """The `if __name__ == "__main__":` of `workbench.<module>`."""
    sys.exit(run_main(MAINS[module]))
