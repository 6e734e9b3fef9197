"""Regenerate the README's headline, the results page and the headline figure from the committed profiles/ folder.

    workbench readme_results                       # rewrite README.md's marked blocks, profiles/RESULTS.md
                                                             # and profiles/headline.png
    workbench readme_results --print               # print the README block and the page, change nothing
    workbench readme_results --check               # exit 1 when any of them is out of date with profiles/,
                                                             # or a speedup quoted in the prose matches no comparison
    workbench readme_results --include-incomplete  # + the complete comparisons of every cut-off run
    workbench readme_results --notebooks           # + execute notebooks/*.ipynb into their files

The README gets a short block between `<!-- results -->` markers: the headline figure (speedup per comparison with
its 95% CI and verdict, drawn by `workbench.report.figures`) and a headline table (the optimized arm of
each optimization at its main shape, and one row per savings model: predicted ± CI, measured ± CI, verdict). Every
long table goes to the results page (`profiles/RESULTS.md`): every comparison and every run of it (repeats that
disagree included), the savings-model verdicts, where each traced saving comes from, the L sweeps and their (L-1)
test, the A/A runs, the instruments' cost, MFU, what was left out and why, and each folder's command. Every number
on the page sits on a row that names its summary.json.

Complete GPU runs only (`workbench.analysis.discover`), plus the complete comparisons of the cut-off runs named in
`workbench.analysis.KEEP_FROM_INCOMPLETE`; `--include-cpu` adds CPU runs (smoke tests, not results). When README.md
also has `<!-- viewing -->` / `<!-- /viewing -->` markers, that block gets `viewing_markdown()`.

`--check` also reads the prose outside the generated blocks (README.md, profiles/README.md and docs/GUIDE.md): every speedup
quoted there (`1.133x`, `1.133x [1.103, 1.161]`) must be a speedup (with its CI) of a comparison in profiles/;
figures struck through (`~~1.70x~~`, retracted ones) are exempt.

The pages: `workbench.report.headline` (the README block), `workbench.report.results_page` (RESULTS.md),
`workbench.report.prose_check` (`--check`'s prose rule), `workbench.report.notebook_outputs` (`--notebooks`).
"""
from __future__ import annotations

from workbench.paths import REPO_ROOT
import argparse
import os
import sys

import pandas as pd

from workbench import analysis as an
from workbench.analysis import between_runs
from workbench.report import figures
from workbench.report.headline import _prefer, breakdown_figure_path, breakdown_figure_rows, headline_markdown
from workbench.report.markdown import RESULTS_MARKERS, VIEWING_MARKERS, _Ctx
from workbench.report.notebook_outputs import execute_notebooks, reexecution_problems
from workbench.report.prose_check import arm_pairs, prose_problems
from workbench.report.results_page import results_page

REPO = REPO_ROOT
PAGE_NAME = "RESULTS.md"
FIGURE_NAME = "headline.png"


def viewing_markdown() -> str:
    """How to open the notebooks and view the traces (for the README)."""
    return """\
**Notebooks** (committed executed, so their tables show without running them; `workbench readme_results
--notebooks` re-executes them into their files against `profiles/`). To run them yourself:
`pip install -e ".[dev,notebooks]"`, then `jupyter lab notebooks/`. Each notebook's first cell names the command that
produced its data; the next cell reads `PROFILES` (default: the committed `profiles/`). Point them at a fresh run
with `WB_PROFILES=/path/to/run jupyter lab notebooks/` (a campaign folder from `python -m workbench.campaign --out
DIR`, or a single `python -m workbench.ab --out DIR`; `WB_INCLUDE_CPU=1` for a CPU run, `WB_INCLUDE_INCOMPLETE=1`
for the complete comparisons of cut-off runs). They run headless too:
`jupyter nbconvert --to notebook --execute notebooks/01_speedup_tables.ipynb`.

They render offline, and untrusted. Each figure is its plotly JSON (interactive in JupyterLab) with a static PNG
beside it (kaleido, which draws with a Chrome or Chromium it finds; nbconvert HTML and static viewers show the PNG); no
output is a script or loads anything from a network, and long tables are collapsed under a one-line summary.
`jupyter nbconvert --to html --template-file notebooks/offline.html.j2 notebooks/01_speedup_tables.ipynb` writes a
page that loads nothing remote. JupyterLab opens them "not trusted": trust is a signature kept in your own local
database (`jupyter trust`), which no repository can carry, and the outputs (tables, PNG, plotly JSON) display without
it. `workbench notebook_pages` renders each page in headless Chromium at 1400 px wide, prints its height and
saves a screenshot: [01](notebooks/img/01_speedup_tables.png), [02](notebooks/img/02_savings_models.png),
[03](notebooks/img/03_sync_anatomy.png), [04](notebooks/img/04_traces.png).

- `01_speedup_tables`: the Unsloth / NVIDIA claims (README, "The claims we check") beside our speedups; every
  comparison with its 95% CI; the A/A runs; MFU; every timed step per arm.
- `02_savings_models`: one verdict row per savings model and configuration (predicted ± CI, measured ± CI,
  confirmed / refuted), the inputs each prediction used, for refuted models the largest missing component and the
  corrected model's verdict; the L sweeps' linear fits with the (L-1) test at L = 1.
- `03_sync_anatomy`: syncs per step per arm and the source lines they come from (the counted pass); what the sync
  counter and NVTX ranges cost.
- `04_traces`: each traced comparison's step decomposition (saving per component), a stacked bar per arm of its
  busy (gemm, attention, glue, copy, norm_elementwise, optimizer, other) and idle (exposed_copy, sync_stall,
  launch_gap) time, its top kernels; one traced step per optimization, baseline against optimized arm, with each
  arm's breakdown beside it, where the run kept its trace events.

**Traces.** `python -m workbench.ab --trace torch` writes `traces/<comparison>/<arm>.pt.trace.json.gz` (open it in
[Perfetto](https://ui.perfetto.dev) or `chrome://tracing`; TensorBoard's profiler plugin reads it too);
`--trace nsys` writes `traces/<comparison>/<arm>.nsys-rep` (open it in Nsight Systems: `nsys-ui X.nsys-rep`; `nsys
stats --report nvtx_sum,cuda_gpu_kern_sum X.nsys-rep` for tables) and its `.sqlite` export. Both are parsed into
`traces/<comparison>/<arm>.events.parquet` (`.events.csv.gz` where pyarrow, a `[dev]` extra, is not installed;
`workbench.traces.load_events` reads either). Ranges are named `wb/L07/fwd`,
`wb/L07/attn/meta`, `wb/L07/recompute`, `wb/L07/bwd`, `wb/L07/reload`. For GPU torch traces, Meta's
[HolisticTraceAnalysis](https://github.com/facebookresearch/HolisticTraceAnalysis) gives temporal / idle
breakdowns and `TraceDiff` between arms (it reads every trace of a folder as one rank's, so give it one arm's folder):
the committed headline arms as Kineto traces, `TraceAnalysis(trace_dir="profiles/2026-11-23_h100_verdicts/ab_traced/kineto/packing/rebuild")`
(one step each, written from the saved events by `workbench kineto_export X.events.parquet --steps 1`); a fresh run's
`traces/<comparison>/<arm>.pt.trace.json.gz` copied into a folder of its own (`tests/test_kineto_export.py` opens both).

**Why the step breakdown is not HTA's** (it reads Nsight exports too, only our NVTX domain's step windows, and
separates sync drains, exposed copies and launch gaps): [docs/GUIDE.md](docs/GUIDE.md#why-the-step-breakdown-is-not-htas).
"""



def replace_block(text: str, markers: tuple[str, str], body: str) -> str:
    """`text` with the part between `markers` replaced by `body` (markers kept). Raises ValueError without them."""
    start, end = markers
    i, j = text.find(start), text.find(end)
    if i < 0 or j < 0 or j < i:
        raise ValueError(f"README has no {start} ... {end} block")
    return text[: i + len(start)] + "\n" + body.rstrip("\n") + "\n" + text[j:]


def _paths(profiles, readme, page, figure, repo):
    root = an.profiles_root(profiles or os.path.join(repo, "profiles"))
    readme = readme or os.path.join(repo, "README.md")
    return root, readme, page or os.path.join(root, PAGE_NAME), figure or os.path.join(root, FIGURE_NAME)


def results_markdown(profiles: str | None = None, include_cpu: bool = False, include_incomplete: bool = False,
                     repo: str = REPO, readme: str | None = None, page: str | None = None,
                     figure: str | None = None) -> str:
    """The README block between the results markers (links relative to the README's folder)."""
    root, readme, page, figure = _paths(profiles, readme, page, figure, repo)
    return headline_markdown(_Ctx(root, include_cpu, include_incomplete, repo, os.path.dirname(readme)), page, figure)


def page_markdown(profiles: str | None = None, include_cpu: bool = False, include_incomplete: bool = False,
                  repo: str = REPO, page: str | None = None) -> str:
    """The results page (links relative to the page's folder)."""
    root, _, page, _ = _paths(profiles, None, page, None, repo)
    return results_page(_Ctx(root, include_cpu, include_incomplete, repo, os.path.dirname(page)))


def figure_rows(profiles: str | None = None, include_cpu: bool = False, include_incomplete: bool = False,
                repo: str = REPO) -> pd.DataFrame:
    """The rows the headline figure draws: the rerun claims first (`figures.claim_rows`), then one run per
    comparison, within that run (`figures.headline_rows`)."""
    ctx = _Ctx(profiles, include_cpu, include_incomplete, repo, repo)
    return pd.concat([figures.claim_rows(an.process_claims(ctx.root, ctx.comps)),
                      figures.headline_rows(ctx.comps, _prefer(ctx.verd))], ignore_index=True)



def _breakdown_rows(root, opts: dict) -> pd.DataFrame:
    """The rows the breakdown PNG draws (`figures.breakdown_rows`)."""
    ctx = _Ctx(root, opts.get("include_cpu", False), opts.get("include_incomplete", False), opts.get("repo", REPO),
               opts.get("repo", REPO))
    return breakdown_figure_rows(ctx)


def figure_title(profiles: str | None = None, repo: str = REPO) -> str:
    ctx_gpus = sorted({g for g in an.comparisons(profiles or os.path.join(repo, "profiles"))["gpu_name"]
                       if isinstance(g, str)})
    return "Speedup over the baseline, 95% CI: a rerun first, then single runs" + (f" ({', '.join(ctx_gpus)})" if ctx_gpus else "")


def render(text: str, profiles: str | None = None, include_cpu: bool = False, include_incomplete: bool = False,
           repo: str = REPO, readme: str | None = None, page: str | None = None, figure: str | None = None) -> str:
    """README text with the results block (and the viewing block, when its markers exist) regenerated."""
    out = replace_block(text, RESULTS_MARKERS, results_markdown(profiles, include_cpu, include_incomplete, repo,
                                                                readme, page, figure))
    if VIEWING_MARKERS[0] in out and VIEWING_MARKERS[1] in out:
        out = replace_block(out, VIEWING_MARKERS, viewing_markdown())
    return out


def _write(path: str, text: str) -> bool:
    old = open(path).read() if os.path.exists(path) else None
    if old == text:
        return False
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)
    return True


def main(argv=None) -> int:
    p = argparse.ArgumentParser(allow_abbrev=False, prog="workbench readme_results", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--readme", default=os.path.join(REPO, "README.md"))
    p.add_argument("--profiles", default=os.path.join(REPO, "profiles"))
    p.add_argument("--page", default=None, help="the results page (default: PROFILES/RESULTS.md)")
    p.add_argument("--figure", default=None, help="the headline PNG (default: PROFILES/headline.png)")
    p.add_argument("--print", action="store_true", help="print the README block and the results page; write nothing")
    p.add_argument("--check", action="store_true",
                   help="exit 1 when the README block, the results page or the figure is out of date, or a speedup "
                        "quoted in the prose matches no comparison")
    p.add_argument("--notebooks", action="store_true",
                   help="also execute notebooks/*.ipynb against the committed profiles/ and write their outputs")
    p.add_argument("--include-cpu", action="store_true", help="also report CPU runs found under profiles/")
    p.add_argument("--include-incomplete", action="store_true",
                   help="also report the complete comparisons of every incomplete run "
                        "(not only analysis.KEEP_FROM_INCOMPLETE)")
    a = p.parse_args(argv)
    repo = os.path.dirname(os.path.abspath(a.readme))  # paths shown relative to the README's folder
    root, readme, page, figure = _paths(a.profiles, os.path.abspath(a.readme), a.page, a.figure, repo)
    opts = dict(include_cpu=a.include_cpu, include_incomplete=a.include_incomplete, repo=repo)
    if a.print:
        print(results_markdown(root, readme=readme, page=page, figure=figure, **opts))
        print(viewing_markdown())
        print(page_markdown(root, page=page, **opts))
        return 0
    with open(readme) as f:
        text = f.read()
    try:
        new = render(text, root, readme=readme, page=page, figure=figure, **opts)
    except ValueError as e:
        print(f"error: {e}: add the markers {RESULTS_MARKERS[0]} and {RESULTS_MARKERS[1]} where the results go",
              file=sys.stderr)
        return 2
    page_text = page_markdown(root, page=page, **opts)
    rows = figure_rows(root, **opts)
    if a.check:
        problems = []
        if new != text:
            problems.append(f"{readme}: the generated block is out of date")
        if not os.path.exists(page) or open(page).read() != page_text:
            problems.append(f"{page}: out of date")
        if figures.png_digest(figure) != figures.digest(rows):
            problems.append(f"{figure}: drawn from other numbers than profiles/ holds (or missing)")
        import glob
        problems += reexecution_problems(sorted(glob.glob(os.path.join(repo, "notebooks", "*.ipynb"))), repo)
        if between_runs.refresh(root, write=False):
            problems.append(f"{os.path.join(root, between_runs.OUT_FILE)}: out of date (or missing)")
        bd_rows, bd_path = _breakdown_rows(root, opts), breakdown_figure_path(figure)
        if not bd_rows.empty and figures.png_digest(bd_path) != figures.breakdown_digest(bd_rows):
            problems.append(f"{bd_path}: drawn from other numbers than profiles/ holds (or missing)")
        # the prose may quote any timed comparison profiles/ holds, a failed or void run's too (the prose says so):
        # its speedup is recomputed from the timed steps of its results.csv like any other; and any process-level
        # claim (`analysis.process_claims`: a design's prediction or a --processes folder's estimate; a designed
        # per-GPU job's estimate over its processes, `design_estimates`)
        comps = an.comparisons(root, include_cpu=True, include_incomplete=True, include_void=True)
        claims = pd.concat([an.process_claims(root, comps)[["speedup", "ci95_lo", "ci95_hi"]],  # over processes
                            an.design_estimates(root, comps)[["speedup", "ci95_lo", "ci95_hi"]]], ignore_index=True)
        comps = pd.concat([comps, arm_pairs(root), claims.assign(n_pairs=None)], ignore_index=True)
        problems += prose_problems(text, comps, os.path.relpath(readme, repo))
        for other in (os.path.join(root, "README.md"), os.path.join(repo, "docs", "GUIDE.md")):
            if os.path.exists(other):
                problems += prose_problems(open(other).read(), comps, os.path.relpath(other, repo))
        for msg in problems:
            print(msg, file=sys.stderr)
        if problems:
            print("run workbench readme_results (and fix the prose figures named above)", file=sys.stderr)
            return 1
        checked = [f"{os.path.relpath(readme, repo)}: the results block is current",
                   f"{os.path.relpath(page, repo)}: current", f"{os.path.relpath(figure, repo)}: drawn from the "
                   f"{len(rows)} comparisons profiles/ holds"]
        if not bd_rows.empty:
            checked.append(f"{os.path.relpath(bd_path, repo)}: drawn from the {len(bd_rows)} rows profiles/ holds")
        checked += [f"{os.path.relpath(t, repo)}: every speedup quoted in its prose matches a comparison "
                    f"(of {len(comps)})" for t in (readme, other) if os.path.exists(t)]
        print("ok: " + "; ".join(checked))
        return 0
    for path, txt in ((readme, new), (page, page_text)):
        print(f"updated {path}" if _write(path, txt) else f"{path} already up to date")
    if figures.png_digest(figure) != figures.digest(rows):
        figures.save_headline(rows, figure, title=figure_title(root, repo))
        print(f"updated {figure}")
    else:
        print(f"{figure} already up to date")
    bd_rows, bd_path = _breakdown_rows(root, opts), breakdown_figure_path(figure)
    if not bd_rows.empty and figures.png_digest(bd_path) != figures.breakdown_digest(bd_rows):
        figures.save_breakdown(bd_rows, bd_path)
        print(f"updated {bd_path}")
    if between_runs.refresh(root):
        print(f"updated {os.path.join(root, between_runs.OUT_FILE)}")
    if a.notebooks:
        import glob
        execute_notebooks(sorted(glob.glob(os.path.join(REPO, "notebooks", "*.ipynb"))))
    return 0


if __name__ == "__main__":
    from workbench.cli import run_main
    sys.exit(run_main(main))  # a malformed VOID.json (any WorkbenchError): one `error: ...` line, exit 2
