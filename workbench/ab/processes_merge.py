"""Fold `--processes` campaigns of one command into one campaign folder (one shape's processes run on the
GPUs of one host in parallel, or in two leases, judged as one process population).

    python -m workbench.ab.processes_merge INTO SRC [SRC ...]    # INTO, SRC: `python -m workbench.ab ... --processes K` folders

Each SRC must run INTO's command up to --seed, --out and --processes (the record's `command`), with the same
`--process-seeds`: `each` campaigns may not share a seed (a repeated seed is the same model and batches again, not
another process), `same` campaigns must share theirs (one model). The clean processes of each SRC (rc 0 and a
summary.json: `results.process_dirs`) are copied to INTO/pNN with the next free NN (their .log beside), appended to
INTO's processes.json with `merged_from`; a SRC process that did not end cleanly is left out and counted in the note.
Then INTO's estimates and environment are computed again over all its clean processes (`processes.aggregate`,
`results.environment_diff`: processes on several GPUs read as a mixed `gpu` environment, which is what they are).
A mismatch is refused in one line before anything is copied. Then: `workbench verdicts INTO ...`.
"""
from __future__ import annotations

import json
import os

from workbench.errors import WorkbenchError
from workbench.measure import results


def _record(folder: str) -> dict:
    path = os.path.join(folder, results.PROCESSES_FILE)
    if not os.path.isfile(path):
        raise WorkbenchError(f"{folder} holds no {results.PROCESSES_FILE}: give `python -m workbench.ab ... "
                             "--processes K` folders")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _command_key(record: dict) -> list[str]:
    """The record's (first) command less `python -m workbench.ab` and its --processes, --seed and --out: a merged
    record's command is its campaigns' joined by " ; "."""
    from workbench.ab.processes import split_argv, without

    words = (record.get("command") or "").split(" ; ")[0].split()
    _, rest = split_argv(words[3:] if words[:3] == ["python", "-m", "workbench.ab"] else words)
    return without(rest, "--seed", "--out")


def plan(into: str, sources: list[str]) -> list[tuple[str, str, dict]]:
    """(source process folder, target folder name, its processes.json entry) for every clean process of `sources`,
    checked against `into`; raises WorkbenchError on the first mismatch (nothing copied yet)."""
    rec = _record(into)
    key, mode = _command_key(rec), rec.get("process_seeds", "each")
    seeds = {p.get("seed") for p in rec.get("processes", [])}
    taken = {p["folder"] for p in rec.get("processes", [])} | set(os.listdir(into))
    out = []
    for src in sources:
        s = _record(src)
        if _command_key(s) != key:
            raise WorkbenchError(f"{src}: its command ({' '.join(_command_key(s))}) is not {into}'s "
                                 f"({' '.join(key)}) up to --seed, --out and --processes")
        if s.get("process_seeds", "each") != mode:
            raise WorkbenchError(f"{src}: --process-seeds {s.get('process_seeds', 'each')} against {into}'s {mode}")
        clean = {os.path.basename(d) for d in results.process_dirs(src)}
        for p in s.get("processes", []):
            if p["folder"] not in clean:
                continue
            seed = p.get("seed")
            if mode == "each" and seed in seeds:
                raise WorkbenchError(f"{src}: seed {seed} is already in {into} (or an earlier source): the same model "
                                     "and batches again, not another process")
            if mode == "same" and seeds and seed not in seeds:
                raise WorkbenchError(f"{src}: seed {seed} against {into}'s {sorted(seeds)}: --process-seeds same "
                                     "campaigns share one seed")
            seeds.add(seed)
            n = next(i for i in range(1000) if f"p{i:02d}" not in taken)
            target = f"p{n:02d}"
            taken.add(target)
            out.append((os.path.join(src, p["folder"]), target,
                        {**p, "folder": target, "merged_from": f"{os.path.abspath(src)} {p['folder']}"}))
    return out


def merge(into: str, sources: list[str]) -> dict:
    """Copy and record every clean process of `sources` into `into` and estimate again (see the module docstring);
    returns INTO's new record."""
    from workbench.ab import merging
    from workbench.ab.processes import aggregate, write_record

    steps = plan(into, sources)
    rec, src_recs = _record(into), [_record(s) for s in sources]
    dirs = results.process_dirs(into) + [os.path.join(into, t) for _, t, _ in steps]  # INTO's clean ones, then these
    merging.copy_in(into, steps, rec)
    left = sum(len(r.get("processes", [])) for r in src_recs) - len(steps)
    merging.add_provenance(rec, [r.get("command") for r in src_recs], (
        f"then {len(steps)} process(es) of {len(sources)} more campaign(s) (folders "
        f"{', '.join(t for _, t, _ in steps) or 'none'}"
        + (f"; {left} that did not end cleanly left out" if left else "")
        + "), merged by python -m workbench.ab.processes_merge"))
    rec["estimates"] = aggregate(dirs)
    rec["environment"] = results.environment_diff(dirs)
    write_record(into, rec)
    return rec


def main(argv=None) -> int:
    from workbench.ab import merging
    from workbench.ab.processes import estimate_line
    from workbench.cli import emit_json

    a = merging.parse("workbench.ab.processes_merge", __doc__.split("\n\n")[0],
                      "the --processes folder that receives the processes (its processes.json is rewritten)",
                      "--processes folders of the same command whose clean processes are copied in", argv)
    rec = merge(a.into, a.sources)
    for r in rec["estimates"]:
        print(estimate_line(r))
    if rec["environment"]["mixed"]:
        print(rec["environment"]["line"])
    print(f"merged into {a.into}: {rec['merged_note'].split('; ')[-1]}")
    emit_json({"into": a.into, "processes": len(results.process_dirs(a.into)), "note": rec["merged_note"]})
    return 0


if __name__ == "__main__":
    import sys

    from workbench.cli import run_main
    sys.exit(run_main(main))
