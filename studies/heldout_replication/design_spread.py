"""Write a held-out design for ONE comparison from the processes of two or more machines, BEFORE the run
that judges it: the generic form of the frozen prospective_v3.py / prospective_v4.py records. Run from the repo root:

    python studies/heldout_replication/design_spread.py --comparison all --machine G=profiles/2026-11-26_h100_all_processes_g \
        --machine H=profiles/<date>_h100_prospective4/all --version 5 --seed 800 \
        --out profiles/<date>_h100_prospective4/prospective_v5.json
    # then commit the JSON (its rule_commit), run the held-out command it states on a machine none of its machines,
    # and judge it: python studies/heldout_replication/analyze_heldout_v2.py $CAMP/<folder> --design <the JSON>

Each --machine NAME=FOLDER[:SKIP] names a `--processes` folder (its processes.json; SKIP timed reps left out at the
start of each process, 0 for runs whose engine discards its own warm-up rep) of that machine; its GPU UUID is read
from the first process's meta.json, else the campaign's gpu.csv, else --uuid NAME=GPU-... (refused without one). The baseline and the arm are the comparison's own (the first process's
summary.json). The estimate is v2's "spread" model (`replication.spread_prediction`: each machine its own process
SD, a machine component on top): the interval for one process on a NEW machine, and the pass rule for M held-out
processes there (`replication.spread_null`). Refused in one line: fewer than 2 machines, a machine with fewer than
2 clean processes, a comparison a folder did not run, machines that share a GPU UUID.
The held-out command is the first folder's own command with --processes M and --seed SEED (seeds never used:
say which), so the held-out processes run what the estimate's ran.
"""
import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repository root
from workbench.ab.processes import per_rep_log_ratios  # noqa: E402
from workbench.cli import run_main  # noqa: E402
from workbench.errors import WorkbenchError  # noqa: E402
from workbench.measure import replication  # noqa: E402
from workbench.measure.results import PROCESSES_FILE, process_dirs  # noqa: E402

RULE = ("machine check first: the held-out folder's gpu.csv UUID must start with none of `machines`, and its GPU "
        "model must be the estimate's (else refused, no verdict). model 'spread' (v2's): pass when (1) the fraction of "
        "the M process means inside pi95 >= null.inside_null_q05 and (2) T = (L_new - mean L) / sd L <= "
        "null.spread_t_q95 (replication.spread_check), i.e. the SD of the M means <= null.max_sd_log. Fewer than 2 "
        "processes: not judged.")


def _json(path):
    if not os.path.isfile(path):
        raise WorkbenchError(f"{os.path.dirname(path) or '.'}: no {os.path.basename(path)}")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _csv_uuid(folder: str) -> str | None:
    """An older run's GPU UUID (its meta.json has none): the campaign's gpu.csv in the folder or the one above."""
    for d in (folder, os.path.dirname(os.path.normpath(folder))):
        path = os.path.join(d, "gpu.csv")
        if os.path.isfile(path):
            found = re.findall(r"GPU-[0-9a-f-]+", open(path, encoding="utf-8").read())
            if len(found) == 1:
                return found[0]
    return None


def machine_processes(folder: str, comparison: str) -> dict:
    """{"dirs", "wall_s", "uuid", "gpu_name", "baseline", "arm", "command"} of a --processes folder's clean processes
    that ran `comparison`."""
    rec = _json(os.path.join(folder, PROCESSES_FILE))
    dirs = process_dirs(folder)  # the clean processes, as every reader of a --processes folder takes them
    wall = sum(float(p.get("wall_s") or 0) for p in rec["processes"] if os.path.join(folder, p["folder"]) in dirs)
    if not dirs:
        raise WorkbenchError(f"{folder}: no clean process (rc 0 with a summary.json)")
    comps = {c["name"]: c for c in _json(os.path.join(dirs[0], "summary.json"))["comparisons"]}
    if comparison not in comps:
        raise WorkbenchError(f"{folder}: no comparison {comparison!r} (it ran {', '.join(comps)})")
    c = comps[comparison]
    dev = _json(os.path.join(dirs[0], "meta.json")).get("device") or {}
    return {"dirs": dirs, "wall_s": wall, "uuid": dev.get("uuid") or _csv_uuid(folder), "gpu_name": dev.get("gpu_name"),
            "baseline": c["baseline"]["arm"], "arm": c["optimized"]["arm"], "command": rec.get("command", "")}


def held_out_command(command: str, M: int, seed: int) -> str:
    """The estimate's command with --processes M, --seed SEED and no --out (the job names its own)."""
    c = re.sub(r"\s--out\s+\S+", "", command)
    c = re.sub(r"\s--processes\s+\d+", f" --processes {M}", c)
    return re.sub(r"\s--seed\s+\d+", f" --seed {seed}", c) if " --seed " in c else f"{c} --seed {seed}"


def design(comparison: str, machines: dict, M: int, seed: int, version: int, uuids: dict | None = None) -> dict:
    """The design JSON for `machines` ({name: (folder, skip)}); `uuids` ({name: UUID}) names the GPU of a machine
    whose runs did not record it."""
    if len(machines) < 2:
        raise WorkbenchError("a design for a new machine needs processes of at least 2 machines (--machine twice)")
    got = {m: machine_processes(f, comparison) for m, (f, _) in machines.items()}
    for m, g in got.items():
        g["uuid"] = g["uuid"] or (uuids or {}).get(m)
        if not g["uuid"]:
            raise WorkbenchError(f"machine {m}: its runs record no GPU UUID; give --uuid {m}=GPU-...")
    seen = [g["uuid"] for g in got.values()]
    if len(set(seen)) < len(seen):
        raise WorkbenchError(f"two --machine folders ran on the same GPU ({', '.join(seen)})")
    small = [m for m, g in got.items() if len(g["dirs"]) < 2]
    if small:
        raise WorkbenchError(f"machine {small[0]} has {len(got[small[0]]['dirs'])} clean process: at least 2 each")
    first = next(iter(got.values()))
    base, arm = first["baseline"], first["arm"]
    groups = [[per_rep_log_ratios(d, comparison, base, arm, skip_reps=machines[m][1]) for d in g["dirs"]]
              for m, g in got.items()]
    pred = replication.spread_prediction(groups)
    null = replication.spread_null(pred, M)
    factor = null["max_sd_log"] / max(pred["process_sd_log"])
    minutes = sum(g["wall_s"] for g in got.values()) / 60
    per_process_min = minutes / sum(len(g["dirs"]) for g in got.values())
    rule = (f"inside >= {null['inside_null_q05']:.3f} and the {M} means' SD <= {100 * null['max_sd_log']:.2f}% "
            f"(T <= {null['spread_t_q95']:.2f}: it fails only for a machine {factor:.1f}x noisier than the noisiest "
            f"of {pred['J']} seen)")
    root = os.getcwd()
    return {"rule": RULE, "rule_commit": "the commit that adds this file, before any run it judges (git log)",
            "version": version, "machines": {m: g["uuid"] for m, g in got.items()},
            "gpu_name": sorted({g["gpu_name"] for g in got.values()}),
            "written_by": "python studies/heldout_replication/design_spread.py " + " ".join(sys.argv[1:]),
            "comparisons": {comparison: {
                "baseline": base, "arm": arm, "model": "spread",
                "folders": {m: [os.path.relpath(d, root) for d in g["dirs"]] for m, g in got.items()},
                "estimate_gpu_minutes": round(minutes, 1), "prediction": pred,
                "heldout_plan": {"M": M, "gpu_minutes": round(M * per_process_min, 1),
                                 "command": held_out_command(first["command"], M, seed), "null": null,
                                 "pass_when": rule}}}}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--comparison", required=True, help="the comparison's name (packing, moe, offload, all, ...)")
    ap.add_argument("--machine", action="append", default=[], metavar="NAME=FOLDER[:SKIP]",
                    help="a machine's --processes folder (repeat for each machine)")
    ap.add_argument("--uuid", action="append", default=[], metavar="NAME=GPU-...",
                    help="the GPU UUID of a machine whose runs did not record it")
    ap.add_argument("--held-out", type=int, default=4, metavar="M", help="held-out processes on the new machine")
    ap.add_argument("--seed", type=int, required=True, help="the held-out run's first seed (one never used)")
    ap.add_argument("--version", type=int, required=True, help="N of prospective_vN.json (supersedes lower N)")
    ap.add_argument("--out", required=True, help="the design JSON to write (prospective_vN.json)")
    a = ap.parse_args(argv)
    machines = {}
    for spec in a.machine:
        name, sep, rest = spec.partition("=")
        if not sep or not name or not rest:
            raise WorkbenchError(f"--machine {spec!r}: give NAME=FOLDER[:SKIP]")
        folder, _, skip = rest.partition(":")
        machines[name] = (folder, int(skip) if skip else 0)
    if not re.fullmatch(r"prospective_v\d+\.json", os.path.basename(a.out)) or \
            int(re.findall(r"\d+", os.path.basename(a.out))[0]) != a.version:
        raise WorkbenchError(f"--out must be named prospective_v{a.version}.json (the headline reads the newest)")
    uuids = dict(u.partition("=")[::2] for u in a.uuid)
    d = design(a.comparison, machines, a.held_out, a.seed, a.version, uuids)
    p = d["comparisons"][a.comparison]
    print(f"{a.comparison} (spread): {p['prediction']['speedup']:.4f}x over K={p['prediction']['K']} processes on "
          f"J={p['prediction']['J']} machines; one process on a new machine: PI [{p['prediction']['pi95'][0]:.4f}, "
          f"{p['prediction']['pi95'][1]:.4f}]; held out M={a.held_out}: {p['heldout_plan']['pass_when']}; run: "
          f"{p['heldout_plan']['command']} (~{p['heldout_plan']['gpu_minutes']} GPU min)")
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(d, f, indent=1, default=float)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
