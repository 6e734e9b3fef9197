"""`workbench.report.tables.table` renders through tabulate (no hand padding): right-aligned columns two spaces apart, full
lines as wide as the widest; the A/B comparison table keeps its title line `<comparison>: ...`."""
from __future__ import annotations

from workbench.report import tables as report


def test_table_is_tabulate_plain_right_aligned():
    from tabulate import tabulate
    rows = [[1, "ab", None], [22, "c", 3.5]]
    out = report.table(rows, ["x", "yyy", "z"])
    assert out == tabulate([["x", "yyy", "z"], ["1", "ab", ""], ["22", "c", "3.5"]], tablefmt="plain",
                           stralign="right", disable_numparse=True)
    lines = out.splitlines()
    assert len(lines[0]) == len(lines[2]) and lines[0].endswith("z") and lines[2].endswith("3.5")
    assert lines[1].startswith(" 1") and lines[1].rstrip().endswith("ab")  # an empty cell stays empty
    assert report.table([], ["only", "header"]).splitlines() == ["only  header"]


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
    arm = {"step_ms": 10.0, "step_ms_mean": 10.75, "step_ms_p20": 9.9, "step_ms_p80": 10.1, "n": 8, "status": "ok"}
    c = {"name": "packing", "opt": "packing", "model": "m", "layers": 2, "tokens": 128, "attn": "sdpa",
         "baseline": {**arm, "arm": "rebuild"},
         "optimized": {**arm, "arm": "cached", "step_ms_mean": 8.5, "vs_baseline": {"speedup": 1.26, "ci95": [1.2, 1.3]}}}
    lines = report.comparison_table(c).splitlines()
    assert "mean step ms" in lines[1] and "10.75" in lines[2] and "8.50" in lines[3]
    assert "10.00" not in lines[2]  # the median is not what the speedup estimates
