"""`workbench verdicts`: judge the savings models of run folders (`workbench.savings.verdicts` for a single
run, `workbench.savings.process_verdicts` for a `--processes K` folder) and print one table.

    workbench verdicts RUN_DIR [RUN_DIR ...]     # judges each traced comparison; prints, writes nothing
    workbench verdicts RUN_DIR --write           # + RUN_DIR/summary.verdicts.json beside summary.json
    workbench verdicts RUN_DIR --calibration CAL.json --tau-from none
    workbench verdicts PROCESSES_DIR               # a --processes K run: the process as unit
    workbench verdicts RUN_DIR --dose DOSE_DIR     # that model untraced (workbench.savings.untraced)
    workbench verdicts RUN_DIR ... --plan          # + the processes a new run needs (workbench.savings.plan)
"""
from __future__ import annotations

import argparse
import os
import sys

from workbench.savings import across_runs, calibration, process_verdicts, verdicts


WRITE_FILE = "summary.verdicts.json"
"""What --write puts beside a run's summary.json (`results.BESIDE_FILES`)."""


def main(argv=None) -> int:
    from workbench.errors import WorkbenchError
    p = argparse.ArgumentParser(allow_abbrev=False, prog="workbench verdicts", description=verdicts.__doc__.split("\n\n")[0]
                                + "\n\nReads only: no file of a run folder is changed. With --write the judged summary "
                                "goes beside the run's own, as RUN_DIR/" + WRITE_FILE + " (a --processes K folder: "
                                "each process's " + WRITE_FILE + " and DIR/verdicts.json); summary.json is never "
                                "rewritten.", formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run folders written by python -m workbench.ab (a "
                   "--processes K folder: the process-level verdict)")
    p.add_argument("--write", action="store_true", help=f"write the verdicts beside each run's files: "
                   f"RUN_DIR/{WRITE_FILE} (a --processes K folder: also DIR/verdicts.json); without it nothing is "
                   "written")
    p.add_argument("--calibration", metavar="FILE", default=None, help="θ per model ({model: {theta, ci95, source, "
                   "commit}}, from a dose-response analysis): the prediction is multiplied by θ, its CI a shift "
                   "with its own interval; a model without an entry is used as traced")
    p.add_argument("--tau-from", metavar="FILE", default=calibration.TAU_SOURCE, help="a replication campaign's "
                   "analysis.json: the process component tau a single run's measured saving gets (default "
                   "%(default)s; 'none': within this run only)")
    p.add_argument("--dose", metavar="DOSE_DIR", nargs="+", default=None, help="dose folders (python -m "
                   "workbench.ab.dose, analysed by python -m workbench.savings.dose_fit): their optimization's model is "
                   "judged untraced, its untimed slope per unit times the judged shape's exact count "
                   "(workbench.savings.untraced); no trace read, so no instrument precondition and no θ")
    p.add_argument("--plan", action="store_true", help="after the table, for each inconclusive row: the processes "
                   "a NEW run of that shape would need to decide, planned from this one as a pilot "
                   "(workbench.savings.plan; a planning figure, never added to this verdict)")
    p.add_argument("--between-runs", metavar="FILE", default=None, help="the between-run component per "
                   "optimization (python -m workbench.analysis.between_runs writes it; default: between_runs.json in "
                   "$WB_PROFILES, else the checkout's profiles/): under the table, what each process-level verdict "
                   "would read for a rerun on another machine (workbench.savings.across_runs), and with --plan each "
                   "planned size's chance again with it; 'none': without")
    a = p.parse_args(argv)
    from workbench.paths import profiles_root
    from workbench.savings import plan
    br = a.between_runs or os.path.join(profiles_root(), plan.BETWEEN_RUNS_FILE)
    try:  # every input read before anything is judged or written
        if a.between_runs not in (None, "none") and not os.path.isfile(a.between_runs):
            raise WorkbenchError(f"--between-runs {a.between_runs}: no such file (python -m "
                                 "workbench.analysis.between_runs writes it; 'none' reads none)")
        between = plan.read_between_runs("" if br == "none" else br)
        inputs = verdicts.Inputs(a.calibration, a.tau_from, a.dose)
    except WorkbenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    all_rows, failed = [], []
    for d in a.runs:
        is_proc = os.path.isfile(os.path.join(d, "processes.json"))
        if not is_proc and not os.path.isfile(os.path.join(d, "summary.json")):
            print(f"error: {d}: no summary.json (not a run folder of python -m workbench.ab)", file=sys.stderr)
            return 2
        try:
            rs = (process_verdicts.annotate(d, inputs, write=a.write, process_out=WRITE_FILE) if is_proc
                  else verdicts.annotate(d, inputs, out=WRITE_FILE if a.write else None))
        except WorkbenchError as e:  # e.g. a malformed VOID.json: one line, nothing more written
            print(f"error: {e}", file=sys.stderr)
            return 2
        all_rows += rs
        failed += [f"{d}: {r['comparison']}: {r['reason']}" for r in rs if r["verdict"] == "input check failed"]
    if all_rows:
        print(verdicts.table(all_rows))
    for r in all_rows:
        if r["verdict"] == calibration.NO_VERDICT_INSTRUMENT:
            print(f"{r['verdict']}: {r['folder']}: {r['comparison']}: {r['reason']}")
    for line in dict.fromkeys(f"{r['folder']}: {r['mixed_environment']}" for r in all_rows
                              if r.get("mixed_environment")):  # once per folder: the verdicts stand, flagged
        print(line)
    for line in across_runs.lines(all_rows, between):
        print(line)
    if a.plan and all_rows:
        print(plan.table(all_rows, between["omega"], between["omega_pred"]))
    for f in failed:
        print(f"INPUT CHECK FAILED: {f}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
