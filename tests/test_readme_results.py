"""The README results generator: `--print` runs against the committed profiles/, every number in the block sits on
a row or line that names an existing file or folder, what was left out is said, and rendering touches only the
marked blocks. (The `--check` of README.md itself is added once the block is pasted there.)"""
from __future__ import annotations

import os
import re

import pytest

from workbench import readme_results as rr

from test_analysis import arm, comparison, packing, vs, write_run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROFILES = os.path.join(ROOT, "profiles")
SECTIONS = ["**Speedups**", "**A/A**", "**Sweeps**", "**What the sync counter costs**", "**What NVTX ranges cost**",
            "**Left out**", "**Commands**"]


def _block(capsys, *args) -> str:
    assert rr.main(["--print", *args]) == 0
    out = capsys.readouterr().out
    return out[: out.index("**Notebooks.**")]


def _rows_with_numbers(md: str) -> list[str]:
    """Table rows (headers and separators excluded) and bullets that hold a digit."""
    lines = md.splitlines()
    out = []
    for i, line in enumerate(lines):
        header = line.startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|---")
        if (line.startswith("| ") and not header) or line.startswith("- "):
            if re.search(r"\d", line):
                out.append(line)
    return out


def test_print_runs_and_every_number_names_its_file(capsys):
    md = _block(capsys)
    pos = [md.index(s) for s in SECTIONS]
    assert pos == sorted(pos)  # every section, in order
    rows = _rows_with_numbers(md)
    assert len(rows) > 20
    for line in rows:
        links = re.findall(r"\]\(([^)]+)\)", line)
        assert links, line
        assert all(os.path.exists(os.path.join(ROOT, p)) for p in links), line
        assert all(p.startswith("profiles/") for p in links), line


def test_committed_block_content(capsys):
    md = _block(capsys)
    assert "| packing | qwen3-0.6b | 28 | 16384 | varlen | rebuild -> cached | 791.5 | 732.8 | 1.076x [1.059, 1.104] " \
           "| faster | 9 | 168 -> 3 | yes |" in md
    aa = next(line for line in md.splitlines() if "rebuild -> rebuild#2" in line)
    assert "1.012x [0.989, 1.038] | yes |" in aa  # the A/A CI contains 1
    assert "ms per layer" in md and "layers = 4,8,16,28" in md
    assert "rebuild 791.5 -> 881.2 ms (+11.3%)" in md  # the counter's cost on the packing baseline
    for name in ("nvtx:packing", "nvtx:offload", "nvtx:moe", "nvtx:all"):
        assert f"| {name} |" in md
    left = md[md.index("**Left out**"): md.index("**Commands**")]
    cut = next(line for line in left.splitlines() if "/nvtx_cost)" in line)
    assert "'running'" in cut and "nvtx:packing, nvtx:offload, nvtx:moe are included explicitly" in cut
    tok = next(line for line in left.splitlines() if "/offload_tokens)" in line)
    assert "'incomplete'" in tok and "not included" in tok
    assert "| offload@tokens=16384 |" not in md
    cmds = md[md.index("**Commands**"):]
    assert "`python -m workbench.ab --opt packing --aa --reps 6` (complete)" in cmds
    assert "COMMAND.txt" in cmds and "`device: NVIDIA H100 80GB HBM3" in cmds


def test_include_incomplete_adds_the_complete_comparisons_of_every_cut_off_run(capsys):
    md = _block(capsys, "--include-incomplete")
    assert "| offload@tokens=16384 |" in md
    tok = next(line for line in md.splitlines() if "/offload_tokens)" in line)
    assert "offload@tokens=16384 are included explicitly" in tok


def test_gpu_runs_only_unless_asked(tmp_path):
    prof = tmp_path / "profiles"
    write_run(str(prof / "gpu"), [packing()])
    write_run(str(prof / "cpu"), [packing(base_ms=30.0, cached_ms=25.0)], device="cpu")
    write_run(str(prof / "aa"), [comparison("packing", arm("rebuild", 100.0), arm("rebuild#2", 99.0,
                                                                                  v=vs(1.01, 1.002, 1.02)))])
    md = rr.results_markdown(str(prof), repo=str(tmp_path))
    assert "[`profiles/gpu/summary.json`](profiles/gpu/summary.json)" in md
    assert "profiles/cpu/summary.json" not in md
    assert "- [`profiles/cpu`](profiles/cpu): CPU run (device cpu)" in md
    assert "1.010x [1.002, 1.020] | NO |" in md  # an A/A whose CI misses 1 says so
    with_cpu = rr.results_markdown(str(prof), include_cpu=True, repo=str(tmp_path))
    assert "profiles/cpu/summary.json" in with_cpu and "**Left out**" not in with_cpu
    empty = rr.results_markdown(str(tmp_path / "nothing"), repo=str(tmp_path))
    assert "No complete GPU comparison" in empty


def test_render_replaces_only_the_blocks(tmp_path):
    text = "# t\n\nbefore\n<!-- results -->\nold\n<!-- /results -->\nafter\n<!-- viewing -->\nx\n<!-- /viewing -->\n"
    out = rr.render(text, PROFILES)
    assert out.startswith("# t\n\nbefore\n<!-- results -->\n") and "\nold\n" not in out and "\nafter\n" in out
    assert "Perfetto" in out and "HolisticTraceAnalysis" in out and "jupyter lab" in out
    assert rr.render(out, PROFILES) == out  # idempotent
    with pytest.raises(ValueError):
        rr.replace_block("no markers", rr.RESULTS_MARKERS, "x")
    p = tmp_path / "README.md"
    p.write_text(text)
    assert rr.main(["--readme", str(p), "--profiles", PROFILES, "--check"]) == 1
    assert rr.main(["--readme", str(p), "--profiles", PROFILES]) == 0
    assert rr.main(["--readme", str(p), "--profiles", PROFILES, "--check"]) == 0
    (tmp_path / "R2.md").write_text("nothing")
    assert rr.main(["--readme", str(tmp_path / "R2.md"), "--profiles", PROFILES]) == 2
