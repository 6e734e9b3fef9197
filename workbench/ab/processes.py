"""`python -m workbench.ab ... --processes K`: the process as the unit of a claim ("you will see this on a rerun").

    python -m workbench.ab --opt packing --headline --processes 8 --reps 5 --out DIR      # DIR/p00 ... DIR/p07

Runs the same `python -m workbench.ab` command K times, each in its own process with its own data and weight seed
(`--seed S+k`; `--process-seeds same`: every process `--seed S`, one model and its batches) and its own model build,
into `DIR/pNN/` (each a complete run folder). Each process's engine runs one
discarded warm-up rep of its own on a GPU (`workbench.measure.engine`: recorded as `discarded_step_ms`, never in a
statistic; a process's first block runs on a cold machine). Then, per comparison (baseline against optimized arm,
and every other arm):

- each process's mean per-rep log ratio m_k over its timed reps;
- the estimate exp(mean m_k), a 95% t-interval over processes (K-1 df), and a 95% prediction interval for one more
  process (`workbench.measure.replication.process_estimate`);
- sigma (rep within process) and tau (between processes) by REML.

An interrupted campaign (a deadline, a kill) keeps every process that ended in `processes.json` but no estimates;
`python -m workbench.ab.processes DIR` summarises it afterwards from the processes that ran cleanly (`finish`).

Each process's own rep-level CI stays in its folder, labelled "within this run". Written: `DIR/processes.json`
(each process's command, seed, exit status and wall time, the per-comparison estimates, and `environment`:
`results.environment_diff` over the processes that ran, which names any package version, NVTX backend, git sha, GPU
or precision that differs between them) and one line per comparison on stdout, then "mixed environment: nvtx 0.2.17
in p00-p01, none in p02-p05" where they differ; the last stdout line is that JSON.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time

from workbench.cli import emit_json, progress
from workbench.errors import WorkbenchError
from workbench.measure import results

SKIP_REPS = 0
"""Timed reps at the start of each process left out here: none, the engine discards its own warm-up rep. Runs of
a commit before that (profiles/2026-11-26_h100_replication) pass `skip_reps=1` to leave their rep 0 out."""


def split_argv(argv: list[str]) -> tuple[int | None, list[str]]:
    """(K, the argv without --processes) from a recorded `python -m workbench.ab` command (a campaign's record; the
    CLI itself reads K from its parse); K is None when the flag is absent (K = 1: one plain run)."""
    out, k, i = [], None, 0
    while i < len(argv):
        a = argv[i]
        if a == "--processes" or a.startswith("--processes="):
            v = a.split("=", 1)[1] if "=" in a else (argv[i + 1] if i + 1 < len(argv) else "")
            i += 1 if "=" in a else 2
            try:
                k = int(v)
            except ValueError:
                raise WorkbenchError(f"argument --processes: expected an integer, got {v!r} (see python -m "
                                     "workbench.ab --help)") from None
            if k < 1:
                raise WorkbenchError(f"argument --processes: must be >= 1, got {k} (see python -m workbench.ab --help)")
            continue
        out.append(a)
        i += 1
    return k, out


def without(argv: list[str], *names: str) -> list[str]:
    """`argv` less the flags `names` (each as `--flag VALUE` or `--flag=VALUE`): a child's command before it gets its
    own --seed / --out (here and `workbench.ab.dose`)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in names:
            skip = True
        elif a.split("=", 1)[0] not in names:
            out.append(a)
    return out


def run_child(cmd: list[str], log_path: str) -> tuple[int, float]:
    """(exit status, wall seconds) of one child process, its stdout and stderr into `log_path`."""
    t0 = time.time()
    with open(log_path, "w", encoding="utf-8") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode
    return rc, time.time() - t0


def per_rep_log_ratios(run_dir: str, comparison: str, baseline: str, arm: str, *,
                       skip_reps: int = SKIP_REPS) -> list[float]:
    """log(mean baseline step / mean arm step) per rep of one run folder's comparison, reps < `skip_reps` left out."""
    from workbench.analysis.loader import step_samples

    smp = step_samples(run_dir).get(comparison) or []
    by_rep: dict = {}
    for x in smp:
        if x["rep"] >= skip_reps and x["arm"] in (baseline, arm):
            by_rep.setdefault(x["rep"], {}).setdefault(x["arm"], []).append(x["step_ms"])
    out = []
    for rep in sorted(by_rep):
        d = by_rep[rep]
        if d.get(baseline) and d.get(arm):
            out.append(math.log(sum(d[baseline]) / len(d[baseline]) / (sum(d[arm]) / len(d[arm]))))
    return out


def _arm_pairs(summary: dict) -> list[tuple[str, str, str]]:
    """(comparison, baseline, arm) of every arm of every comparison that ran, the optimized arm first."""
    out = []
    for c in summary.get("comparisons", []):
        b = (c.get("baseline") or {}).get("arm")
        if not b:
            continue
        arms = [(c.get("optimized") or {}).get("arm")] + [o.get("arm") for o in c.get("others") or []]
        out += [(c.get("name") or c.get("opt"), b, a) for a in arms if a and a != b]
    return out


def aggregate(run_dirs: list[str], *, skip_reps: int = SKIP_REPS) -> list[dict]:
    """Per (comparison, arm): the process-level estimate over the run folders that hold it."""
    from workbench.measure import replication

    pairs: dict = {}
    walls: dict = {}  # comparison -> [its wall_s in each process] (None where a process's summary has none)
    for d in run_dirs:
        p = os.path.join(d, "summary.json")
        if not os.path.isfile(p):
            continue
        with open(p, encoding="utf-8") as f:
            summary = json.load(f)
        for key in _arm_pairs(summary):
            pairs.setdefault(key, []).append(d)
        for c in summary.get("comparisons") or []:
            walls.setdefault(c.get("name"), []).append(c.get("wall_s"))
    out = []
    for (name, base, arm), dirs in pairs.items():
        groups = [g for g in (per_rep_log_ratios(d, name, base, arm, skip_reps=skip_reps) for d in dirs) if g]
        w = walls.get(name) or []
        row = {"comparison": name, "baseline": base, "arm": arm, "processes": len(groups),
               "folders": [os.path.basename(d) for d in dirs],
               "wall_s": round(sum(w), 1) if w and None not in w else None}  # the comparison's own, every process
        if len(groups) >= 2:
            row.update(replication.process_estimate(groups))
        else:
            row["why"] = f"{len(groups)} process(es) with timed reps: no process-level interval"
        out.append(row)
    return out


def estimate_line(r: dict) -> str:
    if "speedup" not in r:
        return f"{r['comparison']}: {r['arm']} vs {r['baseline']}: {r['why']}"
    ci, pi = r.get("ci95") or (math.nan, math.nan), r.get("pi95") or (math.nan, math.nan)
    return (f"{r['comparison']}: {r['arm']} vs {r['baseline']}: {r['speedup']:.4f}x, 95% CI [{ci[0]:.4f}, "
            f"{ci[1]:.4f}] over {r['processes']} processes (a rerun's population); 95% prediction interval for one "
            f"more run [{pi[0]:.4f}, {pi[1]:.4f}]; sigma {100 * r['sigma']:.2f}%, tau {100 * r['tau']:.2f}% (REML)")


def write_record(out: str, record: dict) -> None:
    """`out`'s processes.json (here and `processes_merge`)."""
    with open(os.path.join(out, results.PROCESSES_FILE), "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1, default=float)


def main(argv: list[str], cfg=None) -> int:
    """Run K processes of `python -m workbench.ab` (argv with --processes K), then the process-level estimates. `cfg`:
    argv already parsed (`workbench.ab.cli.parse_args`), whose `processes` is K."""
    from workbench.ab import preflight
    from workbench.ab.cli import parse_args

    if cfg is None:
        cfg = parse_args(argv)  # every flag checked here, once, before any process starts
    k, rest = cfg.processes, without(argv, "--processes")
    preflight.check_early(cfg)
    out = cfg.out or os.path.join("runs", time.strftime("processes_%Y%m%d_%H%M%S"))
    if os.path.isdir(out) and os.listdir(out) and not cfg.force:
        raise WorkbenchError(f"--out {out} holds files already; give a new or empty folder (or --force)")
    os.makedirs(out, exist_ok=True)
    base = without(rest, "--out", "--seed")
    record = {"command": " ".join(["python -m workbench.ab", *argv]), "process_seeds": cfg.process_seeds,
              "processes": []}
    dirs = []
    for i in range(k):
        d = os.path.join(out, f"p{i:02d}")
        seed = cfg.data.seed + (i if cfg.process_seeds == "each" else 0)
        cmd = [sys.executable, "-m", "workbench.ab", *base, "--seed", str(seed), "--out", d, "--_process_unit"]
        progress(f"process {i + 1}/{k}: seed {seed} -> {d}")
        rc, wall_s = run_child(cmd, os.path.join(out, f"p{i:02d}.log"))
        record["processes"].append({"folder": os.path.basename(d), "seed": seed, "rc": rc,
                                    "wall_s": round(wall_s, 1), "command": " ".join(cmd[1:])})
        progress(f"process {i + 1}/{k}: rc {rc}, {wall_s:.0f} s")
        dirs.append(d)
        write_record(out, record)  # after every process: an interrupted campaign keeps what ran
        if rc == 2:  # bad input: every other process would say the same
            raise WorkbenchError(f"process {i + 1} refused its input (see {d}.log)")
    record["estimates"] = aggregate(dirs)
    record["environment"] = results.environment_diff(
        [d for d, p in zip(dirs, record["processes"]) if p["rc"] == 0 and os.path.isdir(d)])
    write_record(out, record)
    for r in record["estimates"]:
        print(estimate_line(r))
    if record["environment"]["mixed"]:  # the estimate stands, but its processes are not one instrument
        print(record["environment"]["line"])
    failed = [p for p in record["processes"] if p["rc"] != 0]
    print(f"{'complete' if not failed else 'INCOMPLETE'}: {k - len(failed)}/{k} processes ran cleanly -> {out}")
    emit_json({"out": out, **record})
    return 0 if not failed else 1


def planned(command: str) -> int | None:
    """The processes a campaign's recorded command planned: the sum over its campaigns where
    `workbench.ab.processes_merge` folded several (their commands joined by " ; "); None where one names no K."""
    ks = [split_argv(c.split()[3:])[0] for c in command.split(" ; ") if c.strip()]
    return sum(ks) if ks and None not in ks else None


def finish(out: str) -> dict:
    """Summarise an interrupted `--processes` campaign `out` afterwards: the estimates and environment over the
    processes that ran to the end (`results.process_dirs`: rc 0 in `processes.json`, and a summary.json). A process folder the record does not hold (the one
    running when the campaign was stopped) is left out and named in the record's `note`."""
    path = os.path.join(out, results.PROCESSES_FILE)
    if not os.path.isfile(path):
        raise WorkbenchError(f"{out}: no {results.PROCESSES_FILE}: not a --processes campaign folder")
    with open(path, encoding="utf-8") as f:
        record = json.load(f)
    dirs = results.process_dirs(out)  # the clean-process rule's one owner
    if not dirs:
        raise WorkbenchError(f"{out}: no process ended cleanly: nothing to summarise")
    recorded = {p["folder"] for p in record.get("processes", [])}
    stray = sorted(d for d in os.listdir(out) if os.path.isdir(os.path.join(out, d)) and d.startswith("p")
                   and d not in recorded)
    k_planned = planned(record.get("command", ""))
    record["estimates"] = aggregate(dirs)
    record["environment"] = results.environment_diff(dirs)
    record["note"] = (f"summarised afterwards (python -m workbench.ab.processes {out}): {len(dirs)} of "
                      f"{k_planned or '?'} planned processes ran cleanly"
                      + (f"; left out, stopped mid-run: {', '.join(stray)}" if stray else ""))
    write_record(out, record)
    return record


if __name__ == "__main__":  # python -m workbench.ab.processes DIR: summarise an interrupted campaign
    from workbench.cli import parser, run_main

    def _cli(argv: list[str]) -> int:
        ap = parser("workbench.ab.processes", (
            "Summarise an interrupted `python -m workbench.ab ... --processes K` campaign folder: the process-level "
            "estimates over the processes that ran cleanly, written into its processes.json."))
        ap.add_argument("folder", help="the campaign's --out folder (holds processes.json and p00, p01, ...)")
        record = finish(ap.parse_args(argv).folder)
        for r in record["estimates"]:
            print(estimate_line(r))
        print(record["note"])
        return 0

    sys.exit(run_main(_cli, sys.argv[1:]))
