"""What the two merge commands share (`workbench.ab.dose_merge`, `workbench.ab.processes_merge`): their arguments and
the self-merge refusal, copying the planned process folders in (each with its .log), and folding the sources' commands
and one note into the receiving record."""
from __future__ import annotations

import os
import shutil

from workbench.errors import WorkbenchError


def parse(prog: str, description: str, into_help: str, sources_help: str, argv=None):
    """`into` and `sources` from argv; a folder merged into itself is refused in one line."""
    from workbench.cli import parser

    p = parser(prog, description)
    p.add_argument("into", help=into_help)
    p.add_argument("sources", nargs="+", help=sources_help)
    a = p.parse_args(argv)
    if any(os.path.abspath(s) == os.path.abspath(a.into) for s in a.sources):
        raise WorkbenchError("a folder cannot be merged into itself")
    return a


def copy_in(into: str, steps: list[tuple[str, str, dict]], record: dict) -> None:
    """Copy each planned (source folder, target name, entry) into `into`, its .log beside, and append the entry to
    `record["processes"]`."""
    for src_dir, target, entry in steps:
        shutil.copytree(src_dir, os.path.join(into, target))
        if os.path.isfile(src_dir + ".log"):
            shutil.copy(src_dir + ".log", os.path.join(into, target) + ".log")
        record.setdefault("processes", []).append(entry)


def add_provenance(record: dict, commands: list[str | None], note: str) -> None:
    """The sources' commands joined to the record's with " ; ", and `note` appended to its `merged_note`."""
    record["command"] = " ; ".join([record.get("command") or "", *[c for c in commands if c]]).strip(" ;")
    record["merged_note"] = f"{record['merged_note']}; {note}" if record.get("merged_note") else note
