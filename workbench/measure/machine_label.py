"""A machine's short label for tables and prose, in place of its GPU UUID (the run folders keep the UUID).

A label is "m" and the first 4 hex digits of the SHA-256 of the UUID's first 12 characters (`GPU-` and 8 hex
digits, the short id the analyses key machines by): `machine_label("GPU-aaaaaaaa-...")` is "ma80b". Stable (a
function of the UUID alone, the same in every table), and not the UUID. The run folders of a labelled machine:

    python -c "from workbench.measure.machine_label import folders_of; print(*folders_of('profiles', 'm1b17'))"

(every folder below profiles/ with a record that names a GPU of that label). Distinct machines get distinct labels: `tests/test_layout.py` checks it over every UUID under profiles/.
"""
from __future__ import annotations

import hashlib
import os
import re

GPU_ID = re.compile(r"GPU-[0-9a-fA-F]{8}")
"""The short id of a GPU UUID (`GPU-` and its first 8 hex digits), wherever it stands in a string."""


def machine_label(uuid) -> str:
    """The label of the machine whose GPU UUID (full, its 12-character short id, or a string holding one: "NVIDIA
    H100 80GB HBM3, GPU-...") is `uuid`; a value without a UUID ("unknown", "?", None -> "") comes back as it is."""
    m = GPU_ID.search(str(uuid or ""))
    if m is None:
        return str(uuid or "")
    return "m" + hashlib.sha256(m.group(0).lower().encode()).hexdigest()[:4]


RECORDS = (".json", ".csv", ".txt")
"""The files of a run folder `folders_of` reads for GPU UUIDs (meta.json's `device.uuid`, an analysis's `machine`, a
campaign's gpu.csv, COMMAND.txt)."""


def folders_of(root: str, label: str) -> list[str]:
    """The folders below `root` holding a record (`RECORDS`) that names a GPU `machine_label` calls `label`."""
    out = []
    for d, dirs, files in os.walk(root):
        dirs.sort()
        if d == root:  # its files gather every run's (between_runs.json, calibration.json): no run folder
            continue
        for f in sorted(x for x in files if x.endswith(RECORDS)):
            try:
                with open(os.path.join(d, f), encoding="utf-8", errors="replace") as fh:
                    text = fh.read()
            except OSError:
                continue
            if any(machine_label(u) == label for u in set(GPU_ID.findall(text))):
                out.append(d)
                break
    return out
