"""Fold dose folders run later, or on other machines, into one dose folder (more processes per model).

    python -m workbench.ab.dose_merge INTO SRC [SRC ...]    # INTO, SRC: `python -m workbench.ab.dose` folders

Each SRC must measure what INTO measures: the same --opt, unit and levels (`dose_run.json`), and the same model,
layers and tokens (each process's meta.json). Its processes are copied to INTO/<mode>/pNN with the next free NN (their
.log beside), appended to INTO's dose_run.json `processes` with `machine` (the GPU UUID from the process's meta.json)
and `merged_from`, its command joined to INTO's with " ; ", and one sentence added to `merged_note`. INTO's `traced`
(the process the decision's c comes from) is kept; SRC's traced processes count in `c_over_processes` beside it
(`workbench.savings.dose_fit`). A mismatch, or a SRC without dose_run.json, is refused in one line before anything is
copied. Then: `python -m workbench.savings.dose_fit INTO [--calibration FILE]`.
"""
from __future__ import annotations

import json
import os

from workbench.ab.dose import RUN_FILE
from workbench.errors import WorkbenchError

SHAPE_KEYS = ("model", "layers", "tokens")
"""What a merged process must share with INTO's processes (meta.json `args`)."""


def _json(path: str) -> dict:
    if not os.path.isfile(path):
        raise WorkbenchError(f"{os.path.dirname(path) or '.'} holds no {os.path.basename(path)}: give "
                             "`python -m workbench.ab.dose` folders")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _meta(folder: str, proc: dict) -> dict:
    path = os.path.join(folder, proc["folder"], "meta.json")
    return _json(path) if os.path.isfile(path) else {}


def _shape(folder: str, run: dict) -> tuple | None:
    for p in run["processes"]:
        args = _meta(folder, p).get("args") or {}
        if args:
            return tuple(args.get(k) for k in SHAPE_KEYS)
    return None


def plan(into: str, sources: list[str]) -> list[tuple[str, str, dict]]:
    """(source process folder, target folder, its dose_run.json entry) for every process of `sources`, checked
    against `into`; raises WorkbenchError on the first mismatch (nothing copied yet)."""
    run = _json(os.path.join(into, RUN_FILE))
    shape = _shape(into, run)
    taken = {p["folder"] for p in run["processes"]} | {
        f"{m}/{d}" for m in os.listdir(into) if os.path.isdir(os.path.join(into, m))
        for d in os.listdir(os.path.join(into, m))}
    out = []
    for src in sources:
        s = _json(os.path.join(src, RUN_FILE))
        for k in ("opt", "unit", "units"):
            if s.get(k) != run.get(k):
                raise WorkbenchError(f"{src}: {k} {s.get(k)!r} differs from {into}'s {run.get(k)!r}: not the same "
                                     "dose-response")
        if shape is not None and (sh := _shape(src, s)) is not None and sh != shape:
            raise WorkbenchError(f"{src}: model, layers, tokens {sh} differ from {into}'s {shape}")
        for p in s["processes"]:
            mode = p["folder"].split("/")[0]
            n = next(i for i in range(100) if f"{mode}/p{i:02d}" not in taken)
            target = f"{mode}/p{n:02d}"
            taken.add(target)
            uuid = ((_meta(src, p).get("device") or {}).get("uuid")) or "unknown"
            out.append((os.path.join(src, p["folder"]), target,
                        {**p, "folder": target, "machine": uuid, "merged_from": f"{os.path.abspath(src)} {p['folder']}"}))
    return out


def merge(into: str, sources: list[str]) -> list[str]:
    """Copy and record every process of `sources` into `into` (see the module docstring); returns the new folders."""
    from workbench.ab import merging

    steps = plan(into, sources)
    run, src_runs = _json(os.path.join(into, RUN_FILE)), [_json(os.path.join(s, RUN_FILE)) for s in sources]
    merging.copy_in(into, steps, run)
    machines = sorted({e["machine"] for _, _, e in steps})
    commits = sorted({str(r.get("commit"))[:7] for r in src_runs})
    merging.add_provenance(run, [r.get("command") for r in src_runs], (
        f"then {len(steps)} process(es) of {len(sources)} more invocation(s) (folders "
        f"{', '.join(t for _, t, _ in steps)}; machine {', '.join(machines)}; code {', '.join(commits)}), "
        "merged by python -m workbench.ab.dose_merge"))
    with open(os.path.join(into, RUN_FILE), "w", encoding="utf-8") as f:
        json.dump(run, f, indent=1)
        f.write("\n")
    return [t for _, t, _ in steps]


def main(argv=None) -> int:
    from workbench.ab import merging
    from workbench.cli import emit_json

    a = merging.parse("workbench.ab.dose_merge", __doc__.split("\n\n")[0],
                      "the dose folder that receives the processes (its dose_run.json is rewritten)",
                      "dose folders whose processes are copied in", argv)
    new = merge(a.into, a.sources)
    print(f"merged {len(new)} process(es) into {a.into}: {', '.join(new)}; now run python -m workbench.savings.dose_fit "
          f"{a.into}")
    emit_json({"into": a.into, "added": new})
    return 0


if __name__ == "__main__":
    import sys

    from workbench.cli import run_main
    sys.exit(run_main(main))
