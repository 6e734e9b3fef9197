"""Trace capture (torch.profiler, Nsight Systems) and parsers into one events DataFrame, plus analyses.

    from workbench.traces import load_events, layer_ranges, sync_counts, diff_arms
    ev = load_events("profiles/<run>/traces/packing/rebuild.pt.trace.json.gz")
    kernel_class(kernel_name(...))   # one name, one class, whichever tool traced the kernel (`names`, `classify`)

The names below load on first use (PEP 562), so `workbench.traces.lever_advice` and `workbench.traces.components` (data
only) import without pandas: the CLIs' argument checks answer before any heavy import.
"""
import importlib

_HOME = {**dict.fromkeys(("COLUMNS", "attribute", "from_nsys_sqlite", "from_torch_trace", "load_events",
                          "parse_range_name", "save_events"), "workbench.traces.events"),
         **dict.fromkeys(("copy_compute_overlap", "diff_arms", "host_syncs_per_step", "layer_ranges", "sync_counts"),
                         "workbench.traces.analysis"),
         "kernel_name": "workbench.traces.names", "kernel_class": "workbench.traces.classify"}

__all__ = list(_HOME)


def __getattr__(name):
    if name in _HOME:
        return getattr(importlib.import_module(_HOME[name]), name)
    raise AttributeError(f"module 'workbench.traces' has no attribute {name!r}")
