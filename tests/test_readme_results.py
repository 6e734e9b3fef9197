"""The README headline, the results page and the headline figure (`workbench.report.readme` over `headline`,
`results_page` and `prose_check`): run against the committed profiles/ and against synthetic run folders with
savings-model verdicts; every number on the page sits on a row that names an existing file; the headline stays short
and drops no row; `--check` fails on a stale block, page or figure and on a prose speedup that matches no comparison;
a CPU run is never a result."""
from __future__ import annotations

import os
import re

import pytest

from workbench.report import figures, headline
from workbench.report import prose_check
from workbench.report import readme as rr

from test_analysis import _sweep, arm, comparison, packing, vs, with_verdict, write_run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROFILES = os.path.join(ROOT, "profiles")
SECTIONS = ["## Speedups", "## Void", "## Repeat runs", "## Savings models", "## L sweeps", "## A/A", "## What the sync counter costs",
            "## What NVTX ranges cost", "## Model FLOPs and MFU", "## Left out", "## Commands"]


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


def _table_rows(md: str) -> list[str]:
    return [x for x in md.splitlines() if x.startswith("| ") and not x.startswith("| result |")]


def test_page_on_committed_profiles_every_number_names_its_file():
    """The committed results page (`test_committed_readme_first_screen_and_check` proves it is today's render of
    profiles/: `--check` fails on a stale page)."""
    with open(os.path.join(PROFILES, "RESULTS.md"), encoding="utf-8") as f:
        page = f.read()
    pos = [page.index(s) for s in SECTIONS]
    assert pos == sorted(pos)  # every section, in order
    rows = _rows_with_numbers(page)
    assert len(rows) > 20
    for line in rows:
        links = re.findall(r"\]\(([^)]+)\)", line)
        assert links, line
        assert all(os.path.exists(os.path.join(PROFILES, p)) for p in links), line  # relative to profiles/
    # mean step times, the speedup recomputed at the rep level, pairs (reps), no verdict with 3 reps
    assert "| packing | qwen3-0.6b | 28 | 16384 | varlen | rebuild -> cached | 796.2 | 737.4 | 1.080x [1.045, 1.115] " \
           "| no verdict (n=3 reps < 4) | 12 (3) | 168 -> 3 | yes |" in page
    aa = next(line for line in page.splitlines() if "rebuild -> rebuild#2" in line and "h100_engine/ab_aa" in line)
    assert "1.002x [0.980, 1.024] | yes | no detectable difference (±2.4%) | 24 (6) |" in aa  # 6 reps: a verdict
    rep = page[page.index("## Repeat runs"): page.index("## Savings models")]
    # clean repeats only (same commit, batches, steps, trace mode, arm set; >= 4 reps each): 6 pairs in profiles/
    # agreement is a test (p < 0.05 counted against the 5% it would be), not mean z² against 1; tau by REML
    assert "mean z²" not in rep and re.search(r"\*\*\d+ of \d+\*\* do", rep) and "| tau beyond null |" in rep
    assert len(_rows_with_numbers(rep)) >= 5
    assert "rebuild 791.5 -> 881.2 ms (+11.3%)" in page  # the counter's cost on the packing baseline
    for name in ("nvtx:packing", "nvtx:offload", "nvtx:moe", "nvtx:all"):
        assert f"| {name} |" in page
    sweep = next(line for line in page.splitlines() if "L=4: 8.4 [0.2, 16.7] ms" in line)  # the engine's sweep, CIs
    # 4-rep points (3 df) carry no weights: OLS with a robust se, the same verdict
    assert "(L-1) form" not in sweep and "**inconclusive**: fit at L=1: -0.6 ms, 90% CI [-29.9, 28.7]" in sweep
    left = page[page.index("## Left out"): page.index("## Commands")]
    cut = next(line for line in left.splitlines() if "/nvtx_cost)" in line)
    assert "'running'" in cut and "nvtx:packing, nvtx:offload, nvtx:moe are included explicitly" in cut
    tok = next(line for line in left.splitlines() if "/offload_tokens)" in line)
    assert "'incomplete'" in tok and "not included" in tok
    assert "| offload@tokens=16384 |" not in page
    cmds = page[page.index("## Commands"):]
    assert "`python -m workbench.ab --opt packing --aa --reps 6` (complete)" in cmds
    assert "COMMAND.txt" in cmds and "`device: NVIDIA H100 80GB HBM3" in cmds
    # asked for, an incomplete run's comparisons are read (the page's rows for them: tests/test_markers.py)
    from workbench import analysis as an
    assert "offload@tokens=16384" in set(an.comparisons(PROFILES, include_incomplete_comparisons=True)["name"])


def test_headline_on_committed_profiles_is_short_and_names_backend_pairs_and_ci():
    md = rr.results_markdown(PROFILES)
    rows = _table_rows(md)
    assert 4 <= len(rows) <= headline.max_rows()
    assert md.startswith("![") and "(profiles/headline.png)" in md and "(profiles/RESULTS.md)" in md
    for opt in ("packing", "offload", "moe", "all"):
        assert any(r.startswith(f"| {opt}: ") for r in rows), opt
    for r in rows:
        if "savings model" not in r:  # the rerun claim first (or says there is none), the run's CI with its unit last
            cells = r.split(" | ")
            assert (re.match(r"\d\.\d{3}x \[\d\.\d{3}, \d\.\d{3}\], \d+ processes on \d+ \w+", cells[2])
                    or cells[2] == headline.NO_PROCESS_DATA), r
            assert re.search(r"\d\.\d{3}x \[\d\.\d{3}, \d\.\d{3}\] on one \w+, \d+ reps \(\d+ pairs\): \*\*", r), r
            assert re.search(r" · (varlen|sdpa|eager|flash\w*) \|", r), r  # the backend that ran
    packing_row = next(r for r in rows if r.startswith("| packing: "))
    assert "qwen3-0.6b · 28 layers · 16384 tokens · varlen" in packing_row
    assert len(md.splitlines()) < 25  # the long tables live on the results page


def _verdict_profiles(tmp_path):
    prof = tmp_path / "profiles"
    off = comparison("offload", arm("sync_reload", 1400.0), arm("double_buffer", 1380.0, v=vs(1.014, 1.012, 1.016)))
    off["model"], off["attn"] = "llama-3.1-8b", "sdpa"
    moe = comparison("moe", arm("eager", 1700.0), arm("sort_bincount", 1600.0, v=vs(1.06, 1.05, 1.07)))
    write_run(str(prof / "camp" / "ab_traced"), [
        with_verdict(packing(), 9.5, [8.0, 11.0], 10.0, [9.0, 11.5]),
        with_verdict(off, 5.0, [4.5, 5.5], 20.0, [18.0, 22.0], verdict="refuted", missing=("exposed_copy", 14.0),
                     corrected=(19.0, [18.5, 19.5], "exploratory: consistent")),
        with_verdict(moe, 90.0, [80.0, 100.0], 100.0, [95.0, 105.0])])
    write_run(str(prof / "camp" / "again"), [packing(base_ms=110.0, cached_ms=109.8)])  # disagrees with the first
    write_run(str(prof / "camp" / "sweep"), _sweep([1, 2, 4, 8], lambda L: 2.5 * L + 4))
    return prof


def test_headline_and_page_with_verdicts(tmp_path):
    prof = _verdict_profiles(tmp_path)
    md = rr.results_markdown(str(prof), repo=str(tmp_path))
    rows = _table_rows(md)
    assert len(rows) == 6  # one speedup per optimization run here (no `all`), one row per model
    model = {r.split(" savings model")[0].removeprefix("| "): r for r in rows if "savings model" in r}
    assert set(model) == {"packing", "offload", "moe"}
    assert "predicted 9.5 [8.0, 11.0] ms, measured 10.0 [9.0, 11.5] ms, 3 reps (12 pairs): **confirmed** (measured / " \
           "predicted 1.05 [90% CI 1.00, 1.11])" in model["packing"]
    off = model["offload"]
    assert "**refuted**" in off and "lacks exposed_copy (+14.0 ms)" in off
    assert "with it: exploratory: consistent" in off  # a corrected model never reads confirmed
    assert "llama-3.1-8b · 8 layers · 16384 tokens · sdpa" in off
    pk = next(r for r in rows if r.startswith("| packing: "))
    assert "1 of 2 runs DISAGREE" in pk
    assert re.search(r"of 1 sweeps, 1 refuted; refuted in sweep \(qwen3-0\.6b\): fitted at L = 1 6\.\d "
                     r"\[6\.\d, 6\.\d\] ms \(90%\) against ±1\.\d ms", md)
    page = rr.page_markdown(str(prof), repo=str(tmp_path))
    assert "DISAGREES with the reported one" in page and "2: the reported one" in page
    ver = page[page.index("## Savings models"): page.index("## Where each traced saving")]
    assert len(_rows_with_numbers(ver)) == 3 + 4  # the 3 models, and the 4 sweep points' "no trace" rows
    assert "exposed_copy (+14.0 ms)" in ver and "19.00 [18.50, 19.50] ms: exploratory: consistent" in ver
    dec = page[page.index("## Where each traced saving"): page.index("## L sweeps")]
    assert "sync_stall +5.0; glue +3.0; launch_gap +1.0" in dec
    sw = page[page.index("## L sweeps"):]
    assert "**refuted**" in sw and "measured at L=1: 6.5 ms [" in sw and "entirely outside" in sw
    for line in _rows_with_numbers(page):
        links = re.findall(r"\]\(([^)]+)\)", line)
        assert links and all(os.path.exists(os.path.join(prof, p)) for p in links), line


def test_gpu_runs_only_unless_asked(tmp_path):
    prof = tmp_path / "profiles"
    write_run(str(prof / "gpu"), [packing()])
    write_run(str(prof / "cpu"), [packing(base_ms=30.0, cached_ms=25.0)], device="cpu")
    write_run(str(prof / "aa"), [comparison("packing", arm("rebuild", 100.0), arm("rebuild#2", 99.0,
                                                                                  v=vs(1.01, 1.002, 1.02)))])
    page = rr.page_markdown(str(prof), repo=str(tmp_path))
    assert "[`profiles/gpu/summary.json`](gpu/summary.json)" in page
    assert "profiles/cpu/summary.json" not in page
    assert "- [`profiles/cpu`](cpu): CPU run (device cpu)" in page
    aa = next(line for line in page.splitlines() if "rebuild -> rebuild#2" in line)
    assert "x [1.0" in aa and "| NO |" in aa  # an A/A whose CI misses 1 says so (99 against 100 ms)
    with_cpu = rr.page_markdown(str(prof), include_cpu=True, repo=str(tmp_path))
    assert "profiles/cpu/summary.json" in with_cpu and "## Left out" not in with_cpu
    # a CPU timing is never a result: no CI, no verdict (the runner's rule, `stats.timing_on`, read by the pages too)
    cpu = next(line for line in with_cpu.splitlines() if "(cpu/summary.json)" in line and "rebuild -> cached" in line)
    gpu = next(line for line in with_cpu.splitlines() if "(gpu/summary.json)" in line and "rebuild -> cached" in line)
    assert re.search(r"\| 1\.\d{3}x \[-, -\] \| not a result \(CPU timing\) \|", cpu), cpu
    assert re.search(r"\| 1\.\d{3}x \[1\.\d{3}, 1\.\d{3}\] \| faster \|", gpu), gpu
    assert "No complete GPU comparison" in rr.results_markdown(str(tmp_path / "nothing"), repo=str(tmp_path))


def test_prose_check_catches_a_figure_that_matches_no_comparison(tmp_path):
    from workbench import analysis as an
    comps = an.comparisons(PROFILES, include_incomplete_comparisons=True)
    good = "cached is 1.080x [1.045, 1.115], n=12, grouped 1.37x; ~~retracted 1.70x~~\n```\nexample 9.999x\n```\n" \
        "`speedup 1.133x [95% CI 1.081-1.188, n=12 pairs]`\n"
    assert prose_check.prose_problems(good, comps) == []
    assert len(prose_check.prose_problems("cached is 1.080x [1.045, 1.115], n=9", comps)) == 1  # wrong n pairs
    assert len(prose_check.prose_problems("- cached is 1.080x\n  [1.045, 1.116], n=12", comps)) == 1  # wrapped: still read
    # the old figures (pair bootstrap, outliers dropped) that summary.json still holds are not accepted
    assert len(prose_check.prose_problems("cached is 1.076x [1.059, 1.104], n=9", comps)) == 1
    bad = "moe 1.086x [1.071, 1.116]\nand 3.47x\n<!-- results -->\n7.777x\n<!-- /results -->\n"
    problems = prose_check.prose_problems(bad, comps)
    assert len(problems) == 2 and problems[0].startswith("README.md:1: '1.086x [1.071, 1.116]'")
    assert problems[1].startswith("README.md:2: '3.47x'")  # (1.50x: a committed comparison since)  # the generated block is not prose


def test_render_check_and_write(tmp_path):
    from workbench import analysis as an
    prof = _verdict_profiles(tmp_path)
    moe = an.comparisons(str(prof)).set_index("name").loc["moe"]
    quoted = f"{moe['speedup']:.3f}x [{moe['ci95_lo']:.3f}, {moe['ci95_hi']:.3f}]"  # recomputed: 1700.5 / 1600.5
    text = f"# t\n\nbefore {quoted}\n<!-- results -->\nold\n<!-- /results -->\nafter\n" \
           "<!-- viewing -->\nx\n<!-- /viewing -->\n"
    readme = tmp_path / "README.md"
    readme.write_text(text)
    args = ["--readme", str(readme), "--profiles", str(prof)]
    assert rr.main(args + ["--check"]) == 1
    assert rr.main(args) == 0
    out = readme.read_text()
    assert out.startswith("# t\n\nbefore") and "\nold\n" not in out and "\nafter\n" in out
    assert "(profiles/headline.png)" in out and "(profiles/RESULTS.md)" in out
    assert "Perfetto" in out and "jupyter lab" in out
    assert (prof / "RESULTS.md").exists() and figures.png_digest(str(prof / "headline.png"))
    assert rr.main(args + ["--check"]) == 0
    assert rr.render(out, str(prof), repo=str(tmp_path), readme=str(readme)) == out  # idempotent
    (prof / "RESULTS.md").write_text("edited by hand\n")  # a stale page
    assert rr.main(args + ["--check"]) == 1
    assert rr.main(args) == 0 and rr.main(args + ["--check"]) == 0
    write_run(str(prof / "camp" / "new"), [comparison("moe", arm("eager", 1700.0),
                                                      arm("grouped", 1200.0, v=vs(1.4, 1.3, 1.5)))])
    assert rr.main(args + ["--check"]) == 1  # new data: block, page and figure are stale
    assert rr.main(args) == 0 and rr.main(args + ["--check"]) == 0
    readme.write_text(readme.read_text().replace(f"before {moe['speedup']:.3f}x",
                                                 f"before {moe['speedup'] + 0.001:.3f}x"))  # a prose figure drifts
    assert rr.main(args + ["--check"]) == 1
    with pytest.raises(ValueError):
        rr.replace_block("no markers", rr.RESULTS_MARKERS, "x")
    (tmp_path / "R2.md").write_text("nothing")
    assert rr.main(["--readme", str(tmp_path / "R2.md"), "--profiles", str(prof)]) == 2


def test_headline_figure_digest_and_png(tmp_path):
    from workbench import analysis as an
    rows = figures.headline_rows(an.comparisons(PROFILES, include_incomplete_comparisons=an.KEEP_FROM_INCOMPLETE))
    assert len(rows) >= 8 and rows["label"].str.contains("varlen").any()
    assert (rows["ci95_lo"] <= rows["speedup"]).all() and (rows["speedup"] <= rows["ci95_hi"]).all()
    p = str(tmp_path / "h.png")
    d = figures.save_headline(rows, p)
    assert figures.png_digest(p) == d == figures.digest(rows)
    assert open(p, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    changed = rows.copy()
    changed.loc[0, "speedup"] += 0.01
    assert figures.digest(changed) != d
    assert figures.png_digest(str(tmp_path / "missing.png")) is None


def test_committed_readme_first_screen_and_check():
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    first = text[: text.index("## What the results say")]
    assert "<!-- test-command -->\n```\npython3 -m venv .venv && . .venv/bin/activate && pip install -q -c " \
           "constraints.txt -e \".[dev]\" && python -m pytest -q -n 2 --dist loadfile\n```\n<!-- /test-command -->" in first
    assert "python -m workbench.ab --opt all" in first and "(profiles/headline.png)" in first
    assert "(profiles/RESULTS.md)" in first
    assert len(_table_rows(first)) <= headline.max_rows()
    for target in re.findall(r"\]\(([^)#]+)\)", text):  # every relative link stays inside the repository
        if not target.startswith(("http://", "https://")):
            path = os.path.normpath(os.path.join(ROOT, target))
            assert path.startswith(ROOT + os.sep) and os.path.exists(path), target
    assert rr.main(["--check"]) == 0


def test_the_readme_savings_rows_are_judged_again_and_check_fails_when_todays_code_disagrees(monkeypatch):
    """`readme_results --check` (the test above) compares the README with its results block rendered now, every
    savings-model row judged again by today's code (`headline._judged`). With those judgements flipped to "refuted",
    the render differs from the committed README in those rows: the check fails. (After the check above, in this
    process, the folders' real judgements are cached; the flip reads them.)"""
    import copy
    real = headline._judged

    def flipped(folder):
        s = copy.deepcopy(real(folder))
        for c in s.get("comparisons", []):
            if (c.get("savings_model") or {}).get("verdict"):
                c["savings_model"]["verdict"] = "refuted"
        return s

    monkeypatch.setattr(headline, "_judged", flipped)
    text = open(os.path.join(ROOT, "README.md")).read()
    now = rr.render(text)
    assert now != text and now.count("**refuted**") > text.count("**refuted**")


def test_the_prose_may_quote_two_arms_of_one_comparison():
    """`arm_pairs`: in a comparison of more than two arms (a path, an arm beside its anchor) every other pair of arms,
    recomputed from results.csv like any speedup; a figure no pair gives is still caught (negative control)."""
    from workbench.analysis import loader
    run = os.path.join(rr.REPO, "profiles", "2026-11-25_h100_levers_path", "qwen3moe_levers")
    pairs = prose_check.arm_pairs(run)
    r = loader.recomputed(run, "expert_lora", "grouped_mm", "split")  # split against the anchor beside it
    text = f"split beats the anchor: {r['speedup']:.3f}x [{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}]"
    assert prose_check.prose_problems(text, pairs) == []
    assert len(prose_check.prose_problems(f"{r['speedup'] + 0.01:.3f}x [{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}]", pairs)) == 1
    # the point of a path against the previous one
    p = loader.recomputed(run, "path", "+expert_lora", "+attention")
    assert prose_check.prose_problems(f"{p['speedup']:.3f}x [{p['ci95'][0]:.3f}, {p['ci95'][1]:.3f}]", pairs) == []
