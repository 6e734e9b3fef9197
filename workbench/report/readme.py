"""Regenerate the README's headline, the results page and the headline figure from the committed profiles/ folder.

    python -m workbench.readme_results                       # rewrite README.md's marked blocks, profiles/RESULTS.md
                                                             # and profiles/headline.png
    python -m workbench.readme_results --print               # print the README block and the page, change nothing
    python -m workbench.readme_results --check               # exit 1 when any of them is out of date with profiles/,
                                                             # or a speedup quoted in the prose matches no comparison
    python -m workbench.readme_results --include-incomplete  # + the complete comparisons of every cut-off run
    python -m workbench.readme_results --notebooks           # + execute notebooks/*.ipynb into their files

The README gets a short block between `<!-- results -->` markers: the headline figure (speedup per comparison with
its 95% CI and verdict, drawn by `workbench.report.figures`) and a headline table of at most 8 rows (the optimized arm of
each optimization at its main shape, and one row per savings model: predicted ± CI, measured ± CI, verdict). Every
long table goes to the results page (`profiles/RESULTS.md`): every comparison and every run of it (repeats that
disagree included), the savings-model verdicts, where each traced saving comes from, the L sweeps and their (L-1)
test, the A/A runs, the instruments' cost, MFU, what was left out and why, and each folder's command. Every number
on the page sits on a row that names its summary.json.

Complete GPU runs only (`workbench.analysis.discover`), plus the complete comparisons of the cut-off runs named in
`workbench.analysis.KEEP_FROM_INCOMPLETE`; `--include-cpu` adds CPU runs (smoke tests, not results). When README.md
also has `<!-- viewing -->` / `<!-- /viewing -->` markers, that block gets `viewing_markdown()`.

`--check` also reads the prose outside the generated blocks (README.md and profiles/README.md): every speedup
quoted there (`1.133x`, `1.133x [1.103, 1.161]`) must be a speedup (with its CI) of a comparison in profiles/;
figures struck through (`~~1.70x~~`, retracted ones) are exempt.
"""
from __future__ import annotations

from workbench.paths import REPO_ROOT
import argparse
import contextlib
import os
import re
import sys

import pandas as pd

from workbench import analysis as an
from workbench.savings import common as savings
from workbench.report import figures
from workbench.opts import registry as opt_registry

RESULTS_MARKERS = ("<!-- results -->", "<!-- /results -->")
VIEWING_MARKERS = ("<!-- viewing -->", "<!-- /viewing -->")
REPO = REPO_ROOT
PAGE_NAME = "RESULTS.md"
FIGURE_NAME = "headline.png"
HEADLINE_MAX_ROWS = 8
HEADLINE_OPTS = (*opt_registry.in_all_names(), "all")
"""The headline's optimizations: those `--opt all` runs, then `all`; the levers (`in_all: False`) have their own
README section (`--opt levers`, the path)."""
MODELLED = savings.modelled()
JUDGED = ("confirmed", "refuted", "inconclusive", "input check failed")


def _f(v, spec="{:.1f}", dash="-") -> str:
    try:
        if v is None or (isinstance(v, float) and v != v) or v is pd.NA:
            return dash
        return spec.format(v)
    except (TypeError, ValueError):
        return str(v)


def _table(header: list[str], rows: list[list]) -> list[str]:
    """A GitHub markdown table, one line per row, cells as given (no padding: the page is read rendered)."""
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return out + ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows] + [""]


def _ci(r, est="speedup", lo="ci95_lo", hi="ci95_hi") -> str:
    return f"{_f(r[est], '{:.3f}')}x [{_f(r[lo], '{:.3f}')}, {_f(r[hi], '{:.3f}')}]"


def _ms_ci(v, lo, hi, spec="{:.1f}") -> str:
    if v is None or v != v:
        return "-"
    ci = f" [{_f(lo, spec)}, {_f(hi, spec)}]" if lo is not None and lo == lo else ""
    return f"{_f(v, spec)}{ci} ms"


def _eq(v) -> str:
    return "-" if v is None or v != v else ("yes" if bool(v) else "NO")


def _shape(r) -> list:
    return [r["model"], _f(r["layers"], "{:.0f}"), _f(r["tokens"], "{:.0f}"), r["attn"] or "-"]


def _shape_text(r) -> str:
    return f"{r['model']} · {_f(r['layers'], '{:.0f}')} layers · {_f(r['tokens'], '{:.0f}')} tokens · " \
           f"{r['attn'] or '-'}"


def _n(r) -> str:
    """`12 (3)`: pairs and, in brackets, reps (the unit of independence)."""
    u = r.get("n_units")
    return _f(r.get("n_pairs"), "{:.0f}") + (f" ({_f(u, '{:.0f}')})" if u is not None and u == u else "")


SPEEDUP_RULE = ("Speedup = exp(mean over reps of log(mean baseline step / mean arm step)) over paired timed steps (same "
                "batch, same rep), recomputed from each run's results.csv; 95% CI a t-interval over reps (the rep is "
                "the unit of independence: arms run as blocks per rep); `faster` / `slower` when the CI excludes 1, no "
                "verdict below 4 reps (`workbench/measure/stats.py`).")
MODEL_RULE = ("A savings model predicts the saving (baseline - arm, ms per step) from inputs measured in the run's own "
              "traces (delta method over the traced steps, plus the traced-vs-timed step difference as a relative "
              "SD); measured = the mean paired saving (rep-level se); `confirmed` when the 90% CI of measured / "
              "predicted lies inside [0.8, 1.25], `refuted` when entirely outside, `inconclusive` otherwise (with the "
              "reps that would decide), Holm-adjusted within each run's family of model verdicts "
              "(`workbench/savings/verdicts.py`).")


class _Ctx:
    """The data one page is built from, and links relative to the page's folder."""

    def __init__(self, profiles, include_cpu, include_incomplete, repo, page_dir):
        self.root = an.profiles_root(profiles or os.path.join(repo, "profiles"))
        self.repo, self.page_dir = repo, page_dir
        self.include_cpu = include_cpu
        self.keep = True if include_incomplete else an.KEEP_FROM_INCOMPLETE
        kw = dict(include_cpu=include_cpu, include_incomplete_comparisons=self.keep)
        self.comps = an.comparisons(self.root, **kw)
        self.verd = an.verdicts(self.root, **kw)
        self.kw = kw
        self.gpus = sorted({g for g in self.comps["gpu_name"] if isinstance(g, str)})

    def abs(self, rel: str) -> str:
        """`rel` as `analysis` writes it (relative to the profiles root's parent), absolute."""
        return os.path.join(os.path.dirname(self.root), rel)

    def link(self, rel: str, text: str | None = None) -> str:
        p = self.abs(rel)
        shown = text or os.path.relpath(p, self.repo)
        return f"[`{shown}`]({os.path.relpath(p, self.page_dir)})"

    def short(self, rel: str) -> str:
        """A link to a summary.json whose text is its run folder relative to the profiles root."""
        d = os.path.dirname(rel) if rel.endswith(".json") else rel
        return self.link(rel, os.path.relpath(self.abs(d), self.root))


# --- the headline -------------------------------------------------------------------------------------------------

def _label(r) -> str:
    """A comparison's name, with its data-parallel ranks when more than one (FSDP2 under torchrun)."""
    n = r.get("ranks")
    return f"{r['name']} ({int(n)} ranks, FSDP2)" if n == n and n and int(n) > 1 else str(r["name"])


RECIPE = an.RECIPE


def headline_speedups(comps: pd.DataFrame, prefer=None) -> pd.DataFrame:
    """Per optimization (packing, offload, moe, all): the optimized arm at the shape most runs measured (then: from
    the run with the most comparisons, then most pairs), from the run `analysis.runs_of(prefer=...)` chooses (the run
    of the headline's savings-model row where it is one of them: one run per optimization in the headline); with
    `runs` and `disagree` (how many runs of it disagree with that one)."""
    d = an.default_lengths(an.one_gpu(comps[(comps["role"] == "optimized")
                                            & ~comps["name"].astype(str).str.contains("@")]))
    if d.empty:  # (the 2-GPU runs have their own section)
        return d.assign(runs=pd.Series(dtype=int), disagree=pd.Series(dtype=int))
    d = an.runs_of(d, prefer)
    per_run = comps.groupby("folder")["name"].nunique()
    d = d.assign(_in_run=d["folder"].map(per_run).fillna(0),
                 _n=pd.to_numeric(d["n_pairs"], errors="coerce").fillna(0))
    d["disagree"] = 0
    for _, idx in d.groupby(d[an.CONFIG_KEY].astype(str).agg("|".join, axis=1), sort=False).groups.items():
        d.loc[idx, "disagree"] = int((~d.loc[idx, "agrees"].astype(bool)).sum())
    chosen = d[d["chosen"]].assign(_recipe=lambda x: x["precision"].astype(str) == RECIPE)
    out = []
    for opt in HEADLINE_OPTS:
        g = chosen[chosen["name"] == opt]
        if len(g):  # the user's recipe first: a run of another precision times another step
            out.append(g.sort_values(["_recipe", "runs", "_in_run", "_n", "folder"], kind="stable").iloc[-1])
    return pd.DataFrame(out)


def _prefer(verd: pd.DataFrame) -> set:
    """(folder, comparison) of the headline's savings-model rows: the runs the headline and the page report."""
    v = headline_verdicts(verd)
    return set() if v.empty else set(zip(v["folder"], v["comparison"]))


def headline_verdicts(verd: pd.DataFrame) -> pd.DataFrame:
    """Per savings model (packing, offload, moe): the verdict at the optimization's main comparison (no sweep) of the
    user's recipe (`RECIPE`) where one exists, with the most measured pairs (then the later folder); `runs` = how many runs judged that model there."""
    v = an.default_lengths(verd[verd["opt"].isin(MODELLED) & verd["verdict"].isin(JUDGED)
                                & ~verd["comparison"].astype(str).str.contains("@")])
    out = []
    for opt in MODELLED:
        g = v[v["opt"] == opt]
        if len(g):
            g = g.assign(_n=pd.to_numeric(g["n_pairs"], errors="coerce").fillna(0),
                         _recipe=g["precision"].astype(str) == RECIPE)
            best = g.sort_values(["_recipe", "_n", "folder"], kind="stable").iloc[-1]
            out.append(best.copy())
            out[-1]["runs"] = len(g)
            out[-1]["agree"] = int((g["verdict"] == best["verdict"]).sum())
    return pd.DataFrame(out)


def _ratio_text(v, prefix="") -> str:
    r, lo, hi = v.get(prefix + "ratio"), v.get(prefix + "ratio_ci90_lo"), v.get(prefix + "ratio_ci90_hi")
    if r is None or r != r:
        return ""
    ci = f" [90% CI {_f(lo, '{:.2f}')}, {_f(hi, '{:.2f}')}]" if lo is not None and lo == lo else ""
    return f"measured / predicted {_f(r, '{:.2f}')}{ci}"


def _verdict_cell(v) -> str:
    s = f"**{v['verdict']}**"
    if v["verdict"] in ("confirmed", "refuted", "inconclusive") and _ratio_text(v):
        s += f" ({_ratio_text(v)})"
    if v["verdict"] == "inconclusive" and isinstance(v.get("decide_note"), str):
        s += f": {v['decide_note']}"
    if v["verdict"] == "refuted" and isinstance(v.get("largest_missing"), str):
        s += f"; lacks {v['largest_missing']} ({_f(v['largest_missing_ms'], '{:+.1f}')} ms)"
        if isinstance(v.get("corrected_verdict"), str):
            corr = _ms_ci(v["corrected_ms"], v["corrected_ci95_lo"], v["corrected_ci95_hi"])
            s += f"; with it: {v['corrected_verdict']} ({corr})"
    if v["verdict"] == "input check failed" and isinstance(v.get("reason"), str):
        s += f": {v['reason']}"
    return s


def headline_markdown(ctx: _Ctx, page_path: str, figure_path: str) -> str:
    """The README block: the headline figure, the headline table (at most `HEADLINE_MAX_ROWS` rows), one line on the
    L sweeps, and the link to the results page."""
    rel = lambda p: os.path.relpath(p, ctx.page_dir)  # noqa: E731
    gpu = ", ".join(ctx.gpus) or "no GPU run"
    lines = [f"![Speedup of every comparison over its baseline with its 95% CI and verdict ({gpu})]"
             f"({rel(figure_path)})", ""]
    bd_path = breakdown_figure_path(figure_path)
    if not breakdown_figure_rows(ctx).empty:
        lines += [f"![Where each traced step goes: busy time by kernel class, GPU idle by cause, baseline and "
                  f"optimized arm of each optimization ({gpu})]({rel(bd_path)})", ""]
    vd = headline_verdicts(ctx.verd)
    sp = headline_speedups(ctx.comps, _prefer(ctx.verd))
    rows = []
    for r in sp.to_dict("records"):
        runs = "" if r["runs"] <= 1 else (f"; {r['runs']} runs agree" if not r["disagree"] else
                                           f"; {r['disagree']} of {r['runs']} runs DISAGREE (see the results page)")
        rows.append([f"{r['opt']}: `{r['arm']}` vs `{r['baseline']}`", _shape_text(r), f"speedup {_ci(r)}",
                     _n(r), f"**{r['verdict']}**{runs}", ctx.short(r["file"])])
    for v in vd.to_dict("records"):
        runs = "" if v["runs"] <= 1 else f"; {v['agree']} of {v['runs']} runs say so"
        rows.append([f"{v['opt']} savings model `{v['formula'].split(',  ')[0]}`", _shape_text(v),
                     f"predicted {_ms_ci(v['predicted_ms'], v['predicted_ci95_lo'], v['predicted_ci95_hi'])}, "
                     f"measured {_ms_ci(v['measured_ms'], v['measured_ci95_lo'], v['measured_ci95_hi'])}",
                     _n(v), _verdict_cell(v) + runs, ctx.short(v["file"])])
    rows = rows[:HEADLINE_MAX_ROWS]
    if rows:
        lines += _table(["result", "model · layers · tokens · attention backend that ran", "estimate [95% CI]",
                         "pairs (reps)", "verdict", "run"], rows)
    else:
        lines += [f"No complete GPU comparison in `{os.path.relpath(ctx.root, ctx.repo)}/` yet.", ""]
    notes = [SPEEDUP_RULE]
    if len(vd):
        notes.append(MODEL_RULE)
    else:
        notes.append("No savings-model verdict in profiles/ yet: the models' inputs come from a traced run "
                     "(`python -m workbench.ab --trace torch`, then `python -m workbench.verdicts RUN_DIR`).")
    fits = an.sweep_fits(ctx.root, **ctx.kw)
    if len(fits):
        counts = fits["l_minus_1"].value_counts()
        note = (f"L sweeps (weighted least squares; the (L-1) form, one layer saves nothing, holds when the fit's "
                f"90% CI at L = 1 lies within ± half of one layer's saving): of {len(fits)} sweeps, "
                + ", ".join(f"{int(counts.get(k, 0))} {k}" for k in ("confirmed", "refuted", "inconclusive",
                                                                       "untested") if counts.get(k, 0)))
        bad = fits[fits["l_minus_1"] == "refuted"]
        if len(bad):
            note += "; refuted in " + "; ".join(
                f"{os.path.basename(r['folder'])} ({r['model']}): fitted at L = 1 "
                f"{_ms_ci(r['at1_ms'], r['at1_ci90_lo'], r['at1_ci90_hi'])} (90%) against ±{_f(r['margin_ms'])} ms"
                for r in bad.to_dict("records"))
        notes.append(note + "; fits, slopes and the L = 1 tests with their CIs are on the results page.")
    rep = an.repeats(ctx.comps)
    if len(rep):
        old = an.repeats(ctx.comps, "summary")
        notes.append(f"Repeat runs: {rep.attrs['n']} pairs of runs of the same comparison give mean z² = "
                     f"{rep.attrs['mean_z2']:.1f} (honest CIs give about 1; {old.attrs['mean_z2']:.1f} with the old "
                     "pair-bootstrap CIs of the same data).")
    lines += [" ".join(notes), ""]
    lines += [f"**Every comparison and every run of it** (repeats that disagree included), the savings models with "
              f"their inputs, where each traced saving comes from, the L sweeps, the A/A noise floor, what the "
              f"instruments cost, MFU, what was left out and each folder's command: "
              f"**[{os.path.relpath(page_path, ctx.repo)}]({rel(page_path)})**. Generated by "
              f"`python -m workbench.readme_results` from `{os.path.relpath(ctx.root, ctx.repo)}/`; its `--check` "
              "fails when this block, the page, the figure or a speedup quoted in the prose disagrees with them."]
    return "\n".join(lines).rstrip() + "\n"


# --- the results page ---------------------------------------------------------------------------------------------

def _runs_cell(r) -> str:
    if r["runs"] <= 1:
        return "1"
    if r["chosen"]:
        return f"{r['runs']}: the reported one"
    return f"{r['runs']}: agrees with the reported one" if r["agrees"] else \
        f"{r['runs']}: DISAGREES with the reported one (CI disjoint or another verdict)"


def results_page(ctx: _Ctx) -> str:
    """The results page: every table, every number on a row that names its file."""
    root_rel = os.path.relpath(ctx.root, ctx.repo)
    gpu = ", ".join(ctx.gpus) or "no GPU run"
    lines = [f"# Results: every comparison in `{root_rel}/`", "",
             f"Generated by `python -m workbench.readme_results` from `{root_rel}/` ({gpu}); do not edit by hand. "
             + SPEEDUP_RULE + " Runs made before the rep-level statistics hold the old figures (pair bootstrap, "
             "outliers dropped) in their summary.json; every speedup here is recomputed from the timed steps. Step "
             "times are the arms' means (what the speedup is a ratio of); syncs per step come from the separate "
             "counted pass. The README shows the headline; `notebooks/` (committed executed) plot these with their "
             "CIs.", ""]

    main = an.runs_of(ctx.comps[ctx.comps["role"].isin(["optimized", "other"])], _prefer(ctx.verd))
    lines += ["## Speedups", "",
              "One row per run, comparison and arm against the comparison's baseline. Where several runs hold the "
              "same comparison (name, model, layers, tokens, arms), each is listed; `runs` says whether it agrees "
              "with the reported one, the run the README's headline and figure use (the run of the savings-model "
              "verdict where there is one, else the one with the most pairs).", ""]
    if len(main):
        main = main.assign(_k=main[an.CONFIG_KEY].astype(str).agg("|".join, axis=1))
        first = {k: i for i, k in enumerate(dict.fromkeys(main["_k"]))}
        main = main.assign(_o=main["_k"].map(first)).sort_values(["_o", "folder"], kind="stable")
        rows = [[_label(r), *_shape(r), f"{r['baseline']} -> {r['arm']}", _f(r["baseline_mean_ms"]),
                 _f(r["arm_mean_ms"]), _ci(r), r["verdict"], _n(r),
                 f"{_f(r['syncs_baseline'], '{:g}')} -> {_f(r['syncs_arm'], '{:g}')}", _eq(r["equivalent"]),
                 _runs_cell(r), ctx.link(r["file"])] for r in main.to_dict("records")]
        lines += _table(["comparison", "model", "layers", "tokens", "attn", "baseline -> arm", "baseline mean step ms",
                         "arm mean step ms", "speedup [95% CI]", "verdict", "pairs (reps)", "syncs/step",
                         "equivalent", "runs", "file"], rows)
    else:
        lines += [f"No complete GPU comparison in `{root_rel}/` yet.", ""]

    lines += _repeats_section(ctx)
    lines += _verdict_section(ctx)
    lines += _decomposition_section(ctx)
    lines += _sweep_section(ctx)

    aa = ctx.comps[ctx.comps["role"] == "aa"]
    if len(aa):
        lines += ["## A/A", "", "The baseline against itself: the noise floor; a sound protocol's CI contains 1.", ""]
        rows = [[r["name"], *_shape(r), f"{r['baseline']} -> {r['arm']}", _f(r["baseline_mean_ms"]),
                 _f(r["arm_mean_ms"]), _ci(r), {True: "yes", False: "NO"}.get(r["ci_contains_1"], "-"), r["verdict"],
                 _n(r), ctx.link(r["file"])] for r in aa.to_dict("records")]
        lines += _table(["comparison", "model", "layers", "tokens", "attn", "arms", "baseline mean step ms",
                         "arm mean step ms", "speedup [95% CI]", "CI contains 1", "verdict", "pairs (reps)", "file"],
                        rows)

    cost = an.instrument_cost(ctx.root, **ctx.kw)
    counter = cost[(cost["instrument"] == "sync counter") & ~cost["comparison"].str.contains("@")]
    if len(counter):
        lines += ["## What the sync counter costs", "",
                  "Median step of the counted pass (counter on, one step per batch) against the median timed step: "
                  "on/off - 1; not paired, so no CI; the counter never runs in a timed step.", ""]
        rows = []
        for (folder, name), g in counter.groupby(["folder", "comparison"], sort=False):
            arms = "; ".join(f"{r['arm']} {_f(r['off_ms'])} -> {_f(r['on_ms'])} ms ({_f(r['cost_pct'], '{:+.1f}')}%)"
                             for r in g.to_dict("records"))
            rows.append([name, arms, _f(g["n"].iloc[0], "{:.0f}"), ctx.link(g["file"].iloc[0])])
        lines += _table(["comparison", "per arm: timed -> counted ms (cost)", "counted steps", "file"], rows)
    nv = cost[cost["instrument"] == "nvtx ranges"]
    if len(nv):
        lines += ["## What NVTX ranges cost", "",
                  "The one instrument left on in timed steps: each comparison's baseline with ranges off (baseline) "
                  "against on (arm), paired (recomputed at the rep level); cost = 1/speedup - 1.", ""]
        rows = [[r["comparison"], r["arm"], _f(r["off_ms"]), _f(r["on_ms"]), _ci(r), r["verdict"],
                 _f(r["cost_pct"], "{:+.1f}") + "%", _f(r["n"], "{:.0f}"), ctx.link(r["file"])]
                for r in nv.to_dict("records")]
        lines += _table(["comparison", "arm", "off mean step ms", "on mean step ms", "speedup off/on [95% CI]",
                         "verdict", "cost", "pairs", "file"], rows)

    mf = an.mfu(ctx.root, **ctx.kw)
    if len(mf):
        peak = mf["peak_tflops"].dropna().iloc[0] if mf["peak_tflops"].notna().any() else None
        lines += ["## Model FLOPs and MFU", "",
                  "Model FLOPs of a step: the useful work of the run's own batches (`workbench.step.flops`: attention "
                  "block-diagonal, the causal pairs inside each document; recompute left out), as the run wrote them "
                  "(summary.json's per-arm `flops_per_batch`), or for a run before those were written counted from "
                  "its batches here; achieved TFLOP/s over each arm's mean step time; MFU against the device's dense "
                  f"bf16 peak, {_f(peak, '{:.0f}')} TFLOP/s. The attention count says what the arm ran: "
                  "`block_diagonal` (varlen / flex kernels) or `dense` (T^2 per layer: sdpa / eager with a packed "
                  "mask), whose masked-out work is not counted as useful.", ""]
        rows = []
        for (folder, name), g in mf.groupby(["folder", "name"], sort=False):
            r0 = g.iloc[0]
            rows.append([name, *_shape(r0), r0["attention_flops"], _f(r0["model_tflop_per_step"]),
                         "; ".join(f"{a['arm']} {_f(a['achieved_tflops'])} TFLOP/s ({_f(a['mfu'], '{:.1%}')})"
                                   for a in g.to_dict("records")), ctx.link(r0["file"])])
        lines += _table(["comparison", "model", "layers", "tokens", "attn", "attention count", "TFLOP per step",
                         "per arm: achieved TFLOP/s (MFU)", "file"], rows)

    out = an.left_out(ctx.root, include_cpu=ctx.include_cpu)
    if len(out):
        lines += ["## Left out", "", "Complete GPU runs only, unless asked (`--include-cpu`, `--include-incomplete`).",
                  ""]
        for r in out.to_dict("records"):
            taken = ctx.comps[ctx.comps["folder"] == r["folder"]]["name"].unique().tolist()
            if taken:
                took = (f" Its complete comparisons {', '.join(taken)} are included explicitly (their rows above name "
                        "its summary.json).")
            elif r["complete_comparisons"] and r["device"] == "cuda":
                took = f" Its complete comparisons ({r['complete_comparisons']}) are not included here."
            else:
                took = ""
            lines.append(f"- {ctx.link(r['folder'])}: {r['reason']}.{took}")
        lines.append("")

    lines += ["## Commands", "", "Each folder's, from its campaign's `COMMAND.txt`, else its `meta.json`.", ""]
    runs = an.discover(ctx.root, include_cpu=True, include_incomplete=True)
    for camp in sorted({os.path.dirname(p) for p in runs["path"]}):
        txt = os.path.join(camp, "COMMAND.txt")
        if os.path.exists(txt):
            with open(txt) as fh:
                head = [x.strip() for x in fh if x.split(":")[0] in ("device", "command", "git sha")]
            lines.append(f"- {ctx.link(os.path.relpath(txt, os.path.dirname(ctx.root)))}: "
                         + "; ".join(f"`{h}`" for h in head))
    for r in runs.to_dict("records"):  # --out names a folder of the machine that ran it: DIR here
        cmd = re.sub(r"(--out)[ =]\S+", r"\1 DIR", r["command"] or "command not recorded")
        lines.append(f"- {ctx.link(r['folder'])}: `{cmd}` ({r['status']})")
    return "\n".join(lines).rstrip() + "\n"


def _repeats_section(ctx: _Ctx) -> list[str]:
    rep = an.repeats(ctx.comps)
    if rep.empty:
        return []
    old = an.repeats(ctx.comps, "summary")
    lines = ["## Repeat runs: do they agree?", "",
             "Every comparison measured in two or more run folders (same comparison, arms, model, layers, tokens; a "
             "sweep point at the main shape counts as the same comparison): z = (log s1 - log s2) / sqrt(se1² + se2²), "
             "se = the log CI's half width / t with reps - 1 df (`workbench.analysis.repeats`). With honest CIs z is "
             f"about standard normal and the mean z² about 1. Here: **mean z² = {rep.attrs['mean_z2']:.2f}** over "
             f"{rep.attrs['n']} pairs of runs with the rep-level CIs; {old.attrs['mean_z2']:.2f} over "
             f"{old.attrs['n']} with the old pair-bootstrap CIs (outliers dropped, se = half width / 1.96) that the "
             "runs' summary.json hold. Above 1, the runs disagree more than their CIs allow: with 2-3 reps per run the "
             "rep-level se is itself uncertain, and runs on different days differ by more than their reps do. "
             "`python -m workbench.campaign --suite repeat` runs each headline comparison twice in separate "
             "processes (folders `repeat_a`, `repeat_b`).", ""]
    rows = [[r["name"], f"{r['baseline']} -> {r['arm']}", r["model"], _f(r["layers"], "{:.0f}"),
             _f(r["tokens"], "{:.0f}"), ctx.short(os.path.join(r["folder_1"], "summary.json")),
             f"{_f(r['speedup_1'], '{:.3f}')}x [{_f(r['ci95_lo_1'], '{:.3f}')}, {_f(r['ci95_hi_1'], '{:.3f}')}]",
             ctx.short(os.path.join(r["folder_2"], "summary.json")),
             f"{_f(r['speedup_2'], '{:.3f}')}x [{_f(r['ci95_lo_2'], '{:.3f}')}, {_f(r['ci95_hi_2'], '{:.3f}')}]",
             _f(r["z"], "{:+.2f}"), _f(o, "{:+.2f}")]
            for r, o in zip(rep.to_dict("records"), _old_z(rep, old))]
    return lines + _table(["comparison", "arms", "model", "layers", "tokens", "run 1", "speedup 1 [95% CI]", "run 2",
                           "speedup 2 [95% CI]", "z", "z (old CIs)"], rows)


def _old_z(rep: pd.DataFrame, old: pd.DataFrame) -> list:
    k = ["name", "baseline", "arm", "folder_1", "folder_2"]
    z = {tuple(r[c] for c in k): r["z"] for r in old.to_dict("records")}
    return [z.get(tuple(r[c] for c in k)) for r in rep.to_dict("records")]


def _verdict_section(ctx: _Ctx) -> list[str]:
    v = ctx.verd
    lines = ["## Savings models: predicted against measured", ""]
    if v.empty:
        return lines + ["No comparison in profiles/ has a savings-model verdict yet: the models' inputs come from a "
                        "traced run (`python -m workbench.ab --trace torch`, then `python -m workbench.verdicts "
                        "RUN_DIR`).", ""]
    lines += ["Every comparison with a savings model. Predicted: the model on inputs measured in the run's own traces "
              "(per traced step; 95% CI by the delta method, n traced steps). Measured: mean paired saving baseline - "
              "arm over every pair, 95% CI a t-interval over reps. The verdict: the 90% CI of measured / predicted "
              "(log scale; the measured se, the prediction's se and the traced-vs-timed bias `bias` = |traced / timed "
              "baseline step - 1| as a relative SD, Welch-Satterthwaite df) against [0.8, 1.25]: `confirmed` inside, "
              "`refuted` entirely outside, `inconclusive` otherwise, each only when its p-value, Holm-adjusted over "
              "the run's family of model verdicts (one family per run folder, per L sweep, and for the published "
              "forms), is <= 0.05; an inconclusive one says about how many more reps would decide. A refuted model "
              "names the largest component of the traced step decomposition it lacks; the model with it added is "
              "`exploratory` (chosen after seeing the data: never confirmed).", ""]
    rows = []
    for r in v.to_dict("records"):
        corr = "-"
        if isinstance(r["corrected_verdict"], str):
            corr = f"{_ms_ci(r['corrected_ms'], r['corrected_ci95_lo'], r['corrected_ci95_hi'], '{:.2f}')}: " \
                   f"{r['corrected_verdict']}"
        miss = "-" if not isinstance(r["largest_missing"], str) else \
            f"{r['largest_missing']} ({_f(r['largest_missing_ms'], '{:+.1f}')} ms)"
        verdict = r["verdict"] + (f": {r['reason']}" if isinstance(r["reason"], str) and r["verdict"] not in
                                  ("confirmed", "refuted", "inconclusive") else "")
        if r["verdict"] == "inconclusive" and isinstance(r.get("decide_note"), str):
            verdict += f" ({r['decide_note']})"
        if isinstance(r.get("published_verdict"), str):
            verdict += (f"; published (L-1) form {_f(r['published_ms'], '{:.2f}')} ms: {r['published_verdict']}"
                        f" ({_ratio_text(r, 'published_')})")
        pv = "-" if r["p_confirm"] is None or r["p_confirm"] != r["p_confirm"] else (
            f"{_f(r['p_confirm'], '{:.3f}')} / {_f(r['p_confirm_holm'], '{:.3f}')}; "
            f"{_f(r['p_refute'], '{:.3f}')} / {_f(r['p_refute_holm'], '{:.3f}')}")
        ratio = "-" if r["ratio"] is None or r["ratio"] != r["ratio"] else (
            f"{_f(r['ratio'], '{:.2f}')} [{_f(r['ratio_ci90_lo'], '{:.2f}')}, {_f(r['ratio_ci90_hi'], '{:.2f}')}]")
        rows.append([r["comparison"], *_shape(r), f"{r['baseline']} -> {r['arm']}", f"`{r['formula']}`",
                     _ms_ci(r["predicted_ms"], r["predicted_ci95_lo"], r["predicted_ci95_hi"], "{:.2f}"),
                     _ms_ci(r["measured_ms"], r["measured_ci95_lo"], r["measured_ci95_hi"], "{:.2f}"),
                     _n(r), _f(r["bias_rel"], "{:.1%}"), ratio, pv, verdict, miss, corr, ctx.link(r["file"])])
    return lines + _table(["comparison", "model", "layers", "tokens", "attn", "arms", "model", "predicted [95% CI]",
                           "measured [95% CI]", "pairs (reps)", "bias", "measured / predicted [90% CI]",
                           "p confirm raw / Holm; p refute raw / Holm", "verdict", "largest missing component",
                           "corrected model (exploratory)", "file"], rows)


def _decomposition_section(ctx: _Ctx) -> list[str]:
    d = an.decomposition(ctx.root, **ctx.kw)
    if d.empty:
        return []
    lines = ["## Where each traced saving comes from", "",
             "The traced step decomposition (`workbench.traces.decompose`: busy time by kernel class, idle time by "
             "cause, an exact partition of each step), baseline - arm per component, ms per traced step; the "
             "residual is the measured saving minus the traced one (the profiler's own cost and noise). "
             "`notebooks/04_traces.ipynb` shows every component and each arm's breakdown.", ""]
    rows = []
    for (folder, name, base, arm), g in d.groupby(["folder", "comparison", "baseline", "arm"], sort=False):
        g = g.set_index("component")
        comp = g[g["group"].isin(["busy", "idle"])]["saved_ms"].dropna()
        top = comp.reindex(comp.abs().sort_values(ascending=False).index).head(3)
        step = g["saved_ms"].get("step_ms")
        res = g["saved_ms"].get("residual_ms")
        rows.append([name, *_shape(g.iloc[0]), f"{base} -> {arm}", _f(g["baseline_ms"].get("step_ms")),
                     _f(g["arm_ms"].get("step_ms")), _f(step, "{:+.1f}"), _f(res, "{:+.1f}"),
                     "; ".join(f"{c} {v:+.1f}" for c, v in top.items()), ctx.link(g["file"].iloc[0])])
    return lines + _table(["comparison", "model", "layers", "tokens", "attn", "arms", "traced baseline ms",
                           "traced arm ms", "traced saving ms", "measured - traced ms",
                           "largest savings by component (ms)", "file"], rows)


def _sweep_section(ctx: _Ctx) -> list[str]:
    pts = an.sweep_points(ctx.root, **ctx.kw)
    if pts.empty:
        return []
    fits = an.sweep_fits(points=pts)
    lines = ["## L sweeps: the saving against the layer count, and the (L-1) test", "",
             "Per layer count L, the measured saving (mean paired difference baseline - arm, ms per step, with its 95% "
             "CI over reps); a weighted least-squares line through them (`workbench.measure.stats.linear_fit`, weights 1/se² "
             "with each point's rep-level se, the covariance inflated by the reduced χ² when the points scatter more "
             "than their se say; slope and intercept with 95% CIs, t with n-2 df) and the fitted saving at L = 1 with "
             "its 90% CI. The (L-1) form says one layer saves nothing; it is judged by equivalence within a stated "
             "margin, never by a CI that merely contains 0: margin = half of one layer's saving (|slope| / 2, the "
             "midpoint between \"nothing at L = 1\" and \"one layer's saving at L = 1\"). `confirmed` (it holds) when "
             "the 90% CI at L = 1 lies inside ±margin, `refuted` when it lies entirely outside, `inconclusive` "
             "otherwise. The workbench's own model is judged by the same rule around its prediction at L = 1 (one "
             "build for packing; one reload, the first-reload term, for offload), where that point was traced. The "
             "sweeps ran 2 reps per point: each point's se has 1 df, so the weights themselves are rough.", ""]
    rows = []
    for f in fits.to_dict("records"):
        p = pts[(pts["folder"] == f["folder"]) & (pts["group"] == f["group"]) & (pts["arm"] == f["arm"])]
        per = "; ".join(f"L={x:g}: {_ms_ci(m, lo, hi)}" for x, m, lo, hi in
                        zip(p["x"], p["measured_ms"], p["measured_ci95_lo"], p["measured_ci95_hi"]))
        rows.append([f["group"], f["model"], _f(f["tokens"], "{:.0f}"), f["attn"] or "-",
                     f"{f['baseline']} -> {f['arm']}", per,
                     f"{_f(f['slope_ms'], '{:.2f}')} [{_f(f['slope_ci95_lo'], '{:.2f}')}, "
                     f"{_f(f['slope_ci95_hi'], '{:.2f}')}]",
                     _ms_ci(f["intercept_ms"], f["intercept_ci95_lo"], f["intercept_ci95_hi"]),
                     _ms_ci(f["at1_ms"], f["at1_ci90_lo"], f["at1_ci90_hi"]), _f(f["margin_ms"]),
                     _f(f["r2"], "{:.3f}"),
                     f"**{f['l_minus_1']}**: {f['l_minus_1_by']}",
                     f"**{f['model_at1']}**: {f['model_at1_by']}" if isinstance(f.get("model_at1"), str) else "-",
                     ctx.link(f["file"])])
    lines += _table(["sweep", "model", "tokens", "attn", "arms", "measured saving per L [95% CI]",
                     "slope ms per layer [95% CI]", "intercept [95% CI]", "fitted at L=1 [90% CI]", "margin ± ms", "r2",
                     "(L-1) form", "the workbench's model at L=1", "file"], rows)
    return lines


# --- the prose check ----------------------------------------------------------------------------------------------

SPEEDUP_RE = re.compile(r"(?<![\w.])(\d+\.\d{2,3})x(?:\s*\[(?:95% CI\s*)?(\d+\.\d{2,3})[,-]\s*(\d+\.\d{2,3})"
                        r"(?:,\s*n=(\d+)(?: pairs)?)?\](?:,?\s*n=(\d+))?)?")


def _strip_blocks(text: str) -> str:
    """`text` with the generated blocks, fenced code blocks and ~~struck-through~~ (retracted) figures blanked (line
    numbers kept)."""
    for start, end in (RESULTS_MARKERS, VIEWING_MARKERS):
        i, j = text.find(start), text.find(end)
        if 0 <= i < j:
            text = text[:i] + re.sub(r"[^\n]", " ", text[i:j]) + text[j:]
    blank = lambda m: re.sub(r"[^\n]", " ", m.group(0))  # noqa: E731
    text = re.sub(r"```.*?```", blank, text, flags=re.S)
    return re.sub(r"~~[^~\n]*~~", blank, text)  # struck-through figures are retracted ones


def arm_pairs(root: str) -> pd.DataFrame:
    """Every other ordered pair of arms timed in one comparison of a run that has more than two (a path's point
    against the previous one, an optimized arm against the anchor beside it), recomputed from results.csv like any
    speedup (`analysis.recomputed`): figures the prose may quote besides each arm against its baseline."""
    from workbench.analysis import loader
    rows = []
    for d in loader._run_dirs(root):
        for name, smp in loader.step_samples(d).items():
            arms = list(dict.fromkeys(x["arm"] for x in smp))
            if len(arms) < 3:
                continue
            for a in arms:
                for b in arms:
                    if a != b and (r := loader.recomputed(d, name, a, b)) is not None and r.get("ci95"):
                        rows.append({"speedup": r["speedup"], "ci95_lo": r["ci95"][0], "ci95_hi": r["ci95"][1],
                                     "n_pairs": r.get("n_pairs")})
    return pd.DataFrame(rows, columns=["speedup", "ci95_lo", "ci95_hi", "n_pairs"])


def prose_problems(text: str, comps: pd.DataFrame, where: str = "README.md") -> list[str]:
    """Every speedup quoted in `text` outside the generated blocks and code (`1.133x`, `1.13x`, `1.133x [1.103,
    1.161]`, `1.133x [1.103, 1.161], n=12`) that matches no comparison of `comps` (any role: A/B, A/A, NVTX, sweeps),
    as rounded in the text, with its n pairs where the text gives them: one message per mismatch, with its line
    number."""
    def fmt(v, d):
        return f"{v:.{d}f}"
    triples, values = set(), set()
    for r in comps.to_dict("records"):
        s, lo, hi = r["speedup"], r["ci95_lo"], r["ci95_hi"]
        if s is None or s != s:
            continue
        pairs = None if r["n_pairs"] is None or r["n_pairs"] != r["n_pairs"] else str(int(r["n_pairs"]))
        for d in (2, 3):
            values.add(fmt(s, d))
            if lo == lo and lo is not None:
                triples.update({(fmt(s, d), fmt(lo, d), fmt(hi, d), None), (fmt(s, d), fmt(lo, d), fmt(hi, d), pairs)})
    out = []
    body = _strip_blocks(text)
    for m in SPEEDUP_RE.finditer(body):  # across line breaks: a figure may wrap
        n = body.count("\n", 0, m.start()) + 1
        s, lo, hi, n_in, n_after = m.groups()
        quoted = " ".join(m.group(0).split())
        if lo is not None and (s, lo, hi, n_in or n_after) not in triples:
            out.append(f"{where}:{n}: {quoted!r} matches no comparison's speedup, 95% CI (and n pairs) in profiles/")
        elif lo is None and s not in values:
            out.append(f"{where}:{n}: {quoted!r} matches no comparison's speedup in profiles/")
    return out


# --- viewing ------------------------------------------------------------------------------------------------------

def viewing_markdown() -> str:
    """How to open the notebooks and view the traces (for the README)."""
    return """\
**Notebooks** (committed executed, so their tables show without running them; `python -m workbench.readme_results
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
it. `python -m workbench.notebook_pages` renders each page in headless Chromium at 1400 px wide, prints its height and
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
breakdowns and `TraceDiff` between arms: `TraceAnalysis(trace_dir="profiles/RUN/traces/packing")`.

**Why the step breakdown is not HTA's.** HTA's temporal breakdown (compute / non-compute / idle) and idle breakdown
(host wait / kernel wait / other, per stream) are the nearest match, and the workbench uses neither: they read
Kineto JSON only (the breakdown must also read Nsight Systems exports), they cover a rank's whole trace rather than
the `wb/step` windows of the workbench's own NVTX domain, and their idle classes do not separate what the savings
models need (a sync drain, where a blocking call returns inside the gap; a copy with no kernel beside it; a launch
gap). `workbench.traces.decompose` computes one exact partition of each step window (busy by kernel class, idle by
cause; tested to sum to the step on synthetic traces with known answers and on the committed Nsight fixture).
"""


# --- executed notebooks -------------------------------------------------------------------------------------------

NOTEBOOK_RENDERER = "plotly_mimetype+png"
"""Plotly renderer of the committed notebooks: the figure as JSON (JupyterLab, VS Code: interactive) and a static PNG
(kaleido; nbconvert HTML, static viewers) in one output, with no script and nothing loaded from a network."""
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def normalize_outputs(nb, repo: str = REPO) -> None:
    """Make an executed notebook's outputs stable across runs and machines: plotly's random div ids become
    numbered ones, the checkout's absolute path becomes `.`, stderr (library warnings) is dropped, consecutive stdout
    streams are one, no execution timings, execution counts from 1."""
    ids: dict = {}

    def fix(text: str) -> str:
        text = _UUID.sub(lambda m: ids.setdefault(m.group(0), f"00000000-0000-4000-8000-{len(ids) + 1:012d}"), text)
        return text.replace(repo + os.sep, "").replace(repo, ".")

    n = 0
    for c in nb.cells:
        c.metadata.pop("execution", None)
        if c.cell_type != "code":
            continue
        n += 1
        c.execution_count = n if c.get("outputs") is not None else None
        c.outputs = [o for o in c.get("outputs", []) if not (o.get("output_type") == "stream"
                                                              and o.get("name") == "stderr")]  # warnings: not results
        merged = []
        for o in c.outputs:  # one stream per run of prints, however the kernel happened to flush it
            if merged and o.get("output_type") == "stream" and merged[-1].get("output_type") == "stream" \
                    and merged[-1].get("name") == o.get("name"):
                merged[-1]["text"] += o["text"]
            else:
                merged.append(o)
        c.outputs = merged
        for o in c.outputs:
            if "execution_count" in o:
                o["execution_count"] = n
            if "text" in o:
                o["text"] = fix(o["text"])
            for k, v in list((o.get("data") or {}).items()):
                if isinstance(v, str):
                    o["data"][k] = fix(v)


def execute_notebooks(paths: list[str], timeout: int = 600, repo: str = REPO) -> None:
    """Execute each notebook against the committed profiles/ (nbclient, the `python3` kernel) and write it back with
    its outputs, normalized (`normalize_outputs`)."""
    import nbclient
    import nbformat

    env = {"WB_PLOTLY_RENDERER": NOTEBOOK_RENDERER, "WB_PROFILES": None, "WB_INCLUDE_CPU": None,
           "WB_INCLUDE_INCOMPLETE": None, "WB_PNG_DIR": None}
    with environ(env):
        for p in paths:
            nb = nbformat.read(p, as_version=4)
            nbclient.NotebookClient(nb, kernel_name="python3", timeout=timeout, record_timing=False,
                                    resources={"metadata": {"path": os.path.dirname(os.path.abspath(p))}}).execute()
            normalize_outputs(nb, repo)
            nbformat.write(nb, p)
            print(f"executed {p}")


@contextlib.contextmanager
def environ(overrides: dict):
    """Set environment variables for the duration (a None value unsets one); restore them after."""
    def put(values: dict) -> None:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    old = {k: os.environ.get(k) for k in overrides}
    try:
        put(overrides)
        yield
    finally:
        put(old)


# --- rendering ----------------------------------------------------------------------------------------------------

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
    """The rows the headline figure draws (`figures.headline_rows`)."""
    ctx = _Ctx(profiles, include_cpu, include_incomplete, repo, repo)
    return figures.headline_rows(ctx.comps, _prefer(ctx.verd))


def breakdown_figure_path(figure: str) -> str:
    """The breakdown PNG, beside the headline PNG."""
    return os.path.join(os.path.dirname(figure), "breakdown.png")


def breakdown_figure_rows(ctx) -> pd.DataFrame:
    return figures.breakdown_rows(an.breakdown(ctx.root, **ctx.kw))


def _breakdown_rows(root, opts: dict) -> pd.DataFrame:
    """The rows the breakdown PNG draws (`figures.breakdown_rows`)."""
    ctx = _Ctx(root, opts.get("include_cpu", False), opts.get("include_incomplete", False), opts.get("repo", REPO),
               opts.get("repo", REPO))
    return breakdown_figure_rows(ctx)


def figure_title(profiles: str | None = None, repo: str = REPO) -> str:
    ctx_gpus = sorted({g for g in an.comparisons(profiles or os.path.join(repo, "profiles"))["gpu_name"]
                       if isinstance(g, str)})
    return "Speedup over the baseline, 95% CI" + (f" ({', '.join(ctx_gpus)})" if ctx_gpus else "")


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
    p = argparse.ArgumentParser(prog="python -m workbench.readme_results", description=__doc__,
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
        bd_rows, bd_path = _breakdown_rows(root, opts), breakdown_figure_path(figure)
        if not bd_rows.empty and figures.png_digest(bd_path) != figures.breakdown_digest(bd_rows):
            problems.append(f"{bd_path}: drawn from other numbers than profiles/ holds (or missing)")
        # the prose may quote any timed comparison profiles/ holds, a failed run's too (the prose says it failed):
        # its speedup is recomputed from the timed steps of its results.csv like any other
        comps = an.comparisons(root, include_cpu=True, include_incomplete=True)
        comps = pd.concat([comps, arm_pairs(root)], ignore_index=True)
        problems += prose_problems(text, comps, os.path.relpath(readme, repo))
        other = os.path.join(root, "README.md")
        if os.path.exists(other):
            problems += prose_problems(open(other).read(), comps, os.path.relpath(other, repo))
        for msg in problems:
            print(msg, file=sys.stderr)
        if problems:
            print("run python -m workbench.readme_results (and fix the prose figures named above)", file=sys.stderr)
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
    if a.notebooks:
        import glob
        execute_notebooks(sorted(glob.glob(os.path.join(REPO, "notebooks", "*.ipynb"))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
