"""`python -m workbench.analysis [PROFILES]`: the run folders found, and those left out with the reason."""
from __future__ import annotations

import sys

from workbench.cli import parser, run_main


def main(argv=None) -> int:
    from workbench import analysis as an
    p = parser("workbench analysis", an.__doc__ + "\nPrints the run folders found and those left out, with the reason.")
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


if __name__ == "__main__":
    sys.exit(run_main(main))
