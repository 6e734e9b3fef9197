"""`workbench.cli.table` renders through tabulate (no hand padding): right-aligned columns two spaces apart, full
lines as wide as the widest; the A/B comparison table keeps its title line `<comparison>: ...`."""
from __future__ import annotations

import pytest

from workbench import cli
from workbench.report import tables as report


def test_table_is_tabulate_plain_right_aligned():
    from tabulate import tabulate
    rows = [[1, "ab", None], [22, "c", 3.5]]
    out = cli.table(rows, ["x", "yyy", "z"])
    assert out == tabulate([["x", "yyy", "z"], ["1", "ab", ""], ["22", "c", "3.5"]], tablefmt="plain",
                           stralign="right", disable_numparse=True)
    lines = out.splitlines()
    assert len(lines[0]) == len(lines[2]) and lines[0].endswith("z") and lines[2].endswith("3.5")
    assert lines[1].startswith(" 1") and lines[1].rstrip().endswith("ab")  # an empty cell stays empty
    assert cli.table([], ["only", "header"]).splitlines() == ["only  header"]


def test_comparison_table_columns_line_up():
    arm = {"step_ms": 10.0, "step_ms_p20": 9.9, "step_ms_p80": 10.1, "n": 8, "fwd_ms": 3.0, "bwd_ms": 6.0,
           "syncs_per_step": 16.0, "instrumented_step_ms": 11.0, "peak_mem_mib": 100.0, "tokens_per_s": 1000.0,
           "loss": 1.0, "status": "ok"}
    c = {"name": "packing", "opt": "packing", "model": "tiny-qwen3", "layers": 2, "tokens": 128, "attn": "sdpa",
         "baseline": {**arm, "arm": "rebuild"},
         "optimized": {**arm, "arm": "cached", "step_ms": 8.0, "equivalent": True,
                       "vs_baseline": {"speedup": 1.25, "ci95": [1.2, 1.3]}},
         "speedup": 1.25, "speedup_ci95": [1.2, 1.3], "n_pairs": 8, "verdict": "faster", "equivalent": True,
         "savings_model": {"formula": "f", "predicted_ms": 1.5, "measured_ms": 2.0}}
    lines = report.comparison_table(c).splitlines()
    assert lines[0].startswith("packing: tiny-qwen3")
    body = lines[1:4]
    assert len({len(x) for x in body}) == 1  # header + 2 arms, aligned
    assert body[0].split()[0] == "arm" and "1.250x [1.200, 1.300]" in body[2]


def test_comparison_table_prints_the_mean_the_speedup_is_a_ratio_of():
    """Issue 38, item 5: the CPU run whose mean step column read 1841.7 (baseline) against 2164.1 ms beside a
    1.195x. Reps of very different length (a loaded CPU): the arithmetic means of all steps contradict the speedup
    (the negative control); the column the table prints, the geometric mean of the rep means, gives it exactly."""
    from workbench.measure import stats
    base = [1000.0, 1000.0, 2700.0, 2700.0]
    arm = [500.0, 500.0, 3800.0, 3800.0]
    reps = [0, 0, 1, 1]
    sp = stats.paired_speedup(base, arm, reps)["speedup"]
    assert sp > 1 and sum(base) / 4 < sum(arm) / 4  # "faster" beside a slower arithmetic mean
    gb, ga = stats.geo_mean_of_unit_means(base, reps), stats.geo_mean_of_unit_means(arm, reps)
    assert gb / ga == pytest.approx(sp, rel=1e-12)
    a0 = {"step_ms": 10.0, "step_ms_p20": 9.9, "step_ms_p80": 10.1, "n": 4, "status": "ok"}
    c = {"name": "packing", "opt": "packing", "model": "m", "layers": 2, "tokens": 128, "attn": "sdpa",
         "baseline": {**a0, "arm": "rebuild", "step_ms_mean": 1850.0, "step_ms_rep_geomean": gb},
         "optimized": {**a0, "arm": "cached", "step_ms_mean": 2150.0, "step_ms_rep_geomean": ga,
                       "vs_baseline": {"speedup": sp, "ci95": None}}}
    lines = report.comparison_table(c).splitlines()
    assert "step ms (rep geomean)" in lines[1] and f"{gb:.2f}" in lines[2] and f"{ga:.2f}" in lines[3]
    assert "1850.00" not in lines[2] and "10.00" not in lines[2]  # neither the mean nor the median
    old = {**c, "baseline": {**c["baseline"], "step_ms_rep_geomean": None}}  # a summary from before the column
    assert "1850.00 (mean)" in report.comparison_table(old).splitlines()[2]
