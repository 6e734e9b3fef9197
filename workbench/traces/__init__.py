"""Trace capture (torch.profiler, Nsight Systems) and parsers into one events DataFrame, plus analyses.

    from workbench.traces import load_events, layer_ranges, sync_counts, diff_arms
    ev = load_events("profiles/<run>/traces/packing/rebuild.pt.trace.json.gz")
"""
from workbench.traces.events import (COLUMNS, attribute, from_nsys_sqlite, from_torch_trace, load_events,
                                     parse_range_name, save_events)
from workbench.traces.analysis import copy_compute_overlap, diff_arms, host_syncs_per_step, layer_ranges, sync_counts

__all__ = ["COLUMNS", "attribute", "from_nsys_sqlite", "from_torch_trace", "load_events", "parse_range_name",
           "save_events", "copy_compute_overlap", "diff_arms", "host_syncs_per_step", "layer_ranges", "sync_counts"]
