"""The sync counter against CUDA's sync debug mode, op by op (the toy functions of tests/test_syncs.py).

    python -m workbench.bench.witness      # on a GPU; prints one row per op: counter vs debug-mode warnings
"""
from __future__ import annotations

import json
import sys
import warnings

import torch

from workbench.instrument import SyncCounter


def _ops(dev):
    w = torch.randn(4, 3, device=dev)
    i0 = torch.tensor(2, device=dev)
    mask = torch.tensor([True, False, True, False], device=dev)
    ids = torch.tensor([1, 2, 2], device=dev)
    return [
        ("item", lambda: i0.item()), ("tolist", lambda: ids.tolist()), ("bool", lambda: bool(i0 == 2)),
        ("nonzero", lambda: torch.nonzero(mask)), ("where1", lambda: torch.where(mask)),
        ("0d index", lambda: w[i0]), ("bincount", lambda: torch.bincount(ids)),
        ("bincount minlength", lambda: torch.bincount(ids, minlength=8)),
        ("repeat_interleave", lambda: torch.repeat_interleave(ids)), ("bool index", lambda: w[mask]),
        ("masked_select", lambda: torch.masked_select(w, w > 0)), ("unique", lambda: torch.unique(ids)),
        ("cpu()", lambda: w.cpu()), ("one_hot", lambda: torch.nn.functional.one_hot(ids, 4)),
        ("histc", lambda: torch.histc(ids.float(), bins=4, min=0, max=3)),
        ("rep_int output_size", lambda: torch.repeat_interleave(ids, ids, output_size=5)),
    ]


def main() -> int:
    dev = torch.device("cuda")
    rows = []
    for name, fn in _ops(dev):
        fn()
        torch.cuda.synchronize()
        with SyncCounter(cross_check=True) as c:
            fn()
        rows.append({"op": name, "counter": c.total, "cpu_only": c.cpu_only, "cuda_debug_warnings": c.cuda_warnings})
    for r in rows:
        flag = "" if r["counter"] == r["cuda_debug_warnings"] else "  <- differs"
        print(f"{r['op']:>22} counter {r['counter']} debug-mode {r['cuda_debug_warnings']}{flag}")
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
