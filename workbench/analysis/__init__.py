"""Frames from run folders of the one results schema (`workbench/measure/results.py`): what the notebooks and
`workbench readme_results` show (their figures: `workbench.report`).

    from workbench import analysis as an
    runs = an.discover("profiles")           # complete GPU runs; an.left_out("profiles") says what was not taken, why
    void = an.voided("profiles")             # comparisons a folder's VOID.json declares void (left out of every frame)
    comps = an.comparisons("profiles")       # one row per comparison and arm: speedup, 95% CI, verdict, n pairs
    points, fit = an.sweep(comps)            # saving per layer count, linear fit (slope ms/layer with its CI)

A run folder holds `summary.json` (+ `meta.json`, `results.csv`; `traces/<comparison>/<arm>.events.parquet` with
`--trace`). A profiles root is a folder of such folders at any depth, or one run folder; a campaign folder's
`COMMAND.txt` (`job: command` lines) or `commands.json` names each sub-folder's command. Runs are kept when complete
(meta.json status "complete") and on a GPU; the others are listed by `left_out` with the reason. A comparison that its
folder's `VOID.json` declares void (`workbench.measure.results.void_comparisons`) is left out of every frame;
`voided` lists them with the reason.
Every statistic comes from `workbench.measure.stats`; every frame has its units in its column names; the figures
(`workbench.report`) take a frame and return a plotly figure. Notebooks only load, call and plot.

A facade over one module per topic (HolisticTraceAnalysis's pattern): `loader` (run folders, read once per root and
cached), `speedups`, `sweeps`, `costs`, `models` (the savings models' verdicts), `breakdowns`, `timelines`, `claims`, `processes` (the
process-level claims of `--processes` campaigns), `heldout` (the held-out checks of those claims);
the data they share (folders, the articles' claims, the cut-off runs still reported) is `constants`.
"""
from __future__ import annotations

from workbench.analysis.loader import (
    LEFT_OUT_COLUMNS, RUN_COLUMNS, VOID_COLUMNS, _json, campaign_commands, default_lengths, discover, left_out, no_data,
    preview, profiles_root, recomputed, shown_path, step_samples, voided)
from workbench.analysis.speedups import (
    COMP_COLUMNS, CONFIG_KEY, REPEAT_COLUMNS, REPEAT_GROUP_COLUMNS, REPEAT_KEY, STEP_COLUMNS, comparisons, headline_runs, lever_comparisons,
    one_gpu, repeats, runs_of, steps, warmups)
from workbench.analysis.sweeps import (
    SWEEP_FIT_COLUMNS, SWEEP_POINT_COLUMNS, equivalence, sweep, sweep_fits, sweep_points)
from workbench.analysis.costs import (
    COST_COLUMNS, MFU_COLUMNS, SYNC_COLUMNS, instrument_cost, mfu, syncs, witness_ops)
from workbench.analysis.savings_models import (
    DECOMPOSITION_COLUMNS, SAVINGS_COLUMNS, VERDICT_COLUMNS, VERDICT_TABLE_COLUMNS, decomposition, savings,
    verdict_columns, verdict_table, verdicts)
from workbench.analysis.breakdowns import (
    BREAKDOWN_COLUMNS, LEVER_COLUMNS, TOP_KERNEL_COLUMNS, breakdown, levers, top_kernels)
from workbench.analysis.timelines import (
    STREAM_COLUMNS, TIMELINE_CATEGORIES, TIMELINE_COLUMNS, arm_events, layer_timeline, load_trace, meta_builds, pair_timeline,
    step_windows, stream_roles, timeline_pairs, trace_diffs)
from workbench.analysis.process_level import PROCESS_COLUMNS, claim_designs, design_estimates, process_claims
from workbench.analysis.heldout import HELDOUT_COLUMNS, heldout_checks, heldout_family
from workbench.analysis.claims import (
    CLAIM_COLUMNS, claims_table, claims_vs_ours, same_model)
from workbench.analysis.constants import (
    DEFAULT_PROFILES, KEEP_FROM_INCOMPLETE, NOT_A_MEASUREMENT, PREVIEW_ROWS, RECIPE, REPO, SWEEP_CONFIDENCE)

__all__ = [
    "LEFT_OUT_COLUMNS", "RUN_COLUMNS", "VOID_COLUMNS", "voided", "_json", "campaign_commands", "discover", "left_out", "no_data", "preview",
    "profiles_root", "default_lengths", "recomputed", "shown_path", "step_samples", "COMP_COLUMNS", "CONFIG_KEY", "REPEAT_COLUMNS", "REPEAT_GROUP_COLUMNS",
    "REPEAT_KEY", "STEP_COLUMNS", "comparisons", "headline_runs", "lever_comparisons", "one_gpu", "repeats", "runs_of", "steps",
    "warmups", "SWEEP_FIT_COLUMNS", "SWEEP_POINT_COLUMNS", "equivalence", "sweep", "sweep_fits", "sweep_points",
    "COST_COLUMNS", "MFU_COLUMNS", "SYNC_COLUMNS", "instrument_cost", "mfu", "syncs", "witness_ops",
    "DECOMPOSITION_COLUMNS", "SAVINGS_COLUMNS", "VERDICT_COLUMNS", "VERDICT_TABLE_COLUMNS", "decomposition", "savings",
    "verdict_table", "verdicts",
    "BREAKDOWN_COLUMNS", "LEVER_COLUMNS", "TOP_KERNEL_COLUMNS", "breakdown", "levers", "top_kernels",
    "STREAM_COLUMNS", "TIMELINE_CATEGORIES", "TIMELINE_COLUMNS", "arm_events", "layer_timeline", "load_trace", "meta_builds",
    "pair_timeline", "step_windows", "stream_roles", "timeline_pairs", "trace_diffs", "CLAIM_COLUMNS",
    "claims_table", "claims_vs_ours", "same_model", "PROCESS_COLUMNS", "process_claims", "claim_designs", "design_estimates",
    "HELDOUT_COLUMNS", "heldout_checks", "heldout_family", "DEFAULT_PROFILES", "KEEP_FROM_INCOMPLETE", "NOT_A_MEASUREMENT",
    "PREVIEW_ROWS", "RECIPE", "REPO", "SWEEP_CONFIDENCE"]
