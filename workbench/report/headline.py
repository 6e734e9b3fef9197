"""The README's results block: the headline figure, the headline table (the optimized arm of each optimization at
its main shape, one row per savings model), the L-sweep line and the link to the results page. Rendered into README.md
by `workbench readme_results` (`workbench.report.readme`)."""
from __future__ import annotations

import functools
import os

import pandas as pd

from workbench import analysis as an
from workbench.savings import common as savings, verdicts
from workbench.report import figures
from workbench.opts import registry as opt_registry
from workbench.report.markdown import (MODEL_RULE, SPEEDUP_RULE, _Ctx, _ci, _f, _ms_ci, _n, _ratio_text,
                                       _shape_text, _table)


def headline_opts() -> tuple[str, ...]:
    """The headline's optimizations: those `--opt all` runs, then `all`; the levers (`in_all: False`) have their own
    README section (`--opt levers`, the path). Read from the registry when asked (`$WORKBENCH_OPTS` may add one)."""
    return (*opt_registry.in_all_names(), "all")


def max_rows() -> int:
    """The most rows the headline table can have: one speedup per headline optimization, one row per savings model.
    No row is cut: a new optimization is a row more."""
    return len(headline_opts()) + len(savings.modelled())


JUDGED = ("confirmed", "refuted", "inconclusive", "input check failed")


RECIPE = an.RECIPE
RERUN_RULE = ("The first numeric column is the rerun claim: K independent processes of `python -m workbench.ab ... "
              "--processes K` (own seed, own model build, a discarded warm-up rep, R timed reps), the estimate "
              "exp(mean of the process means) with a 95% t-interval over the processes of the machines that ran (the "
              "design's df: over machines where each machine has its own process SD), its verdict by the same rule "
              "as a run's; the numbers and the held-out design fixed before its run: the newest `prospective*.json` "
              "naming the comparison (`workbench/analysis/process_level.py`). One process on another machine: a 95% "
              "prediction interval is shown only where the held-out rule written with it fails a machine with no "
              "effect (true speedup 1.000) with probability 0.8 or more at its planned M, and, for a faster claim, "
              "the interval excludes 1 (`workbench/measure/heldout_power.py`); otherwise the machines' own means are "
              "given as they were measured. The within-run column is one run's claim: the rep is the unit. GPU "
              "minutes from the processes' wall times of the estimate.")


def headline_speedups(comps: pd.DataFrame, prefer=None) -> pd.DataFrame:
    """Per optimization (packing, offload, moe, all): the optimized arm at the shape most runs measured (then: from
    the run with the most comparisons, then most pairs), from the run `analysis.runs_of(prefer=...)` chooses (the run
    of the headline's savings-model row where it is one of them: one run per optimization in the headline); with
    `runs` (on the chosen run's GPU model), `disagree` (how many of them disagree with that one) and `other_gpu`
    (runs of it on another GPU model: another step, not compared)."""
    d = an.default_lengths(an.one_gpu(comps[(comps["role"] == "optimized")
                                            & ~comps["name"].astype(str).str.contains("@")]))
    if d.empty:  # (the 2-GPU runs have their own section)
        return d.assign(runs=pd.Series(dtype=int), disagree=pd.Series(dtype=int), other_gpu=pd.Series(dtype=int))
    d = an.runs_of(d, prefer)
    per_run = comps.groupby("folder")["name"].nunique()
    d = d.assign(_in_run=d["folder"].map(per_run).fillna(0),
                 _n=pd.to_numeric(d["n_pairs"], errors="coerce").fillna(0))
    d["disagree"], d["other_gpu"] = 0, 0
    for _, idx in d.groupby(d[an.CONFIG_KEY].astype(str).agg("|".join, axis=1), sort=False).groups.items():
        same = d.loc[idx, "same_gpu"].astype(bool)
        d.loc[idx, "disagree"] = int((~d.loc[idx, "agrees"].astype(bool)).sum())
        d.loc[idx, "other_gpu"] = int((~same).sum())  # runs on another GPU model: another step, not compared
        d.loc[idx, "runs"] = int(same.sum())
    chosen = d[d["chosen"]].assign(_recipe=lambda x: x["precision"].astype(str) == RECIPE)
    out = []
    for opt in headline_opts():
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
    modelled = savings.modelled()
    v = an.default_lengths(verd[verd["opt"].isin(modelled) & verd["verdict"].isin(JUDGED)
                                & ~verd["comparison"].astype(str).str.contains("@")])
    out = []
    for opt in modelled:
        g = v[v["opt"] == opt]
        if len(g):
            g = g.assign(_n=pd.to_numeric(g["n_pairs"], errors="coerce").fillna(0),
                         _recipe=g["precision"].astype(str) == RECIPE)
            best = g.sort_values(["_recipe", "_n", "folder"], kind="stable").iloc[-1]
            now = recomputed_verdict(best)
            out.append(now)
            out[-1]["runs"] = len(g)
            out[-1]["agree"] = int((g["verdict"] == now["verdict"]).sum())
    return pd.DataFrame(out)


@functools.lru_cache(maxsize=64)
def _judged(folder: str) -> dict:
    return verdicts.judged_summary(folder)


def recomputed_verdict(row: pd.Series) -> pd.Series:
    """A stored verdict row judged again from its run folder with today's code (`verdicts.judged_summary`, in memory:
    nothing written): what the README publishes, so `readme_results --check` fails when today's rules read the
    folder differently from the committed text. The run's own stored verdict is what selected the row."""
    folder = os.path.dirname(str(row["file"]))
    try:
        summary = _judged(folder)
    except (OSError, ValueError) as e:  # a folder that cannot be judged again (no results.csv, no traces): said
        return pd.Series({**row.to_dict(), "recompute_note": f"as stored: not judged again ({type(e).__name__})"})
    for c in summary.get("comparisons", []):
        sm = c.get("savings_model") or {}
        if c.get("name") == row["comparison"] and sm.get("verdict"):
            return pd.Series({**row.to_dict(), **an.verdict_columns(sm)})
    return row.copy()



def _units(r) -> str:
    """"8 reps (16 pairs)": the within-run interval's unit, named."""
    u = r.get("n_units")
    return (f"{_f(u, '{:.0f}')} reps" if u is not None and u == u else "") + f" ({_f(r.get('n_pairs'), '{:.0f}')} pairs)"


def _verdict_cell(v) -> str:
    s = f"**{verdicts.shown_verdict(v)}**"
    if v["verdict"] in ("confirmed", "refuted", "inconclusive") and _ratio_text(v):
        s += f" ({_ratio_text(v)})"
    if v["verdict"] == "refuted" and isinstance(v.get("largest_missing"), str):
        s += f"; lacks {v['largest_missing']} ({_f(v['largest_missing_ms'], '{:+.1f}')} ms)"
        if isinstance(v.get("corrected_verdict"), str):
            corr = _ms_ci(v["corrected_ms"], v["corrected_ci95_lo"], v["corrected_ci95_hi"])
            s += f"; with it: {v['corrected_verdict']} ({corr})"
    if v["verdict"] in ("input check failed", "no verdict: instrument") and isinstance(v.get("reason"), str):
        s += f": {v['reason']}"
    if isinstance(v.get("recompute_note"), str):
        s += f" ({v['recompute_note']})"
    return s


RERUN_MATCH = ("model", "layers", "tokens", "attn")
"""What a process-level claim must share with a headline row to sit beside it (with the comparison and arm)."""


def claim_for(claims: pd.DataFrame, r) -> dict | None:
    """The process-level claim (`analysis.process_claims`) of headline row `r`'s comparison at its shape, if any."""
    if claims is None or claims.empty:
        return None
    m = claims[(claims["name"] == r["opt"]) & (claims["arm"] == r["arm"])]
    for k in RERUN_MATCH:
        m = m[m[k].astype(str) == str(r.get(k))]
    return None if m.empty else m.iloc[0].to_dict()


NO_PROCESS_DATA = "no process-level data: single runs only"


def rerun_cell(claims: pd.DataFrame, r) -> str:
    """The headline's first numeric cell, the rerun claim: the estimate with its 95% CI over K processes (the process
    is the unit), the machines and their GPU, R reps each; `NO_PROCESS_DATA` where no `--processes` campaign measured
    the comparison."""
    c = claim_for(claims, r)
    if c is None:
        return NO_PROCESS_DATA
    prec = "" if str(c["precision"]) == str(r.get("precision")) else f", {c['precision']}"
    gpu = c.get("gpu_name")
    gpu = figures._gpu_short(gpu) if isinstance(gpu, str) else "GPU"
    return (f"{c['speedup']:.3f}x [{c['ci95_lo']:.3f}, {c['ci95_hi']:.3f}], {int(c['K'])} processes on "
            f"{int(c['machines'])} {gpu}{'s' if int(c['machines']) > 1 else ''} x {int(c['R'])} reps{prec}: "
            f"**{c['verdict']}**")


def another_machine_cell(claims: pd.DataFrame, r) -> str:
    """One process on another machine: the prediction interval where its held-out rule can fail a no-effect machine
    (`measure.heldout_power`), else why not and the machines' spread; the GPU minutes of the estimate."""
    c = claim_for(claims, r)
    if c is None:
        return "-"
    mins = f"; {c['gpu_minutes']:.1f} GPU min" if c.get("gpu_minutes") == c.get("gpu_minutes") else ""
    if c.get("pi_published"):
        return (f"PI [{c['pi95_lo']:.3f}, {c['pi95_hi']:.3f}] (its held-out rule fails a no-effect machine with "
                f"probability {c['pi_power']:.2f}); {c['machine_spread']}{mins}")
    return f"no interval ({c['pi_why']}); {c['machine_spread']}{mins}"


def headline_markdown(ctx: _Ctx, page_path: str, figure_path: str) -> str:
    """The README block: the headline figure, the headline table (`max_rows()` at most: every row), one line on the
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
    claims = an.process_claims(ctx.root, ctx.comps)
    for r in sp.to_dict("records"):
        runs = "" if r["runs"] <= 1 else (f"; {r['runs']} runs, none disagrees (z test)" if not r["disagree"] else
                                           f"; {r['disagree']} of {r['runs']} runs DISAGREE (see the results page)")
        if r.get("other_gpu"):
            runs += f"; {int(r['other_gpu'])} on another GPU model (not compared)"
        gpu = figures._gpu_short(r.get("gpu_name"))
        rows.append([f"{r['opt']}: `{r['arm']}` vs `{r['baseline']}`", _shape_text(r), rerun_cell(claims, r),
                     another_machine_cell(claims, r),
                     f"{_ci(r)} on one {gpu}, {_units(r)}: **{r['verdict']}**{runs}", ctx.short(r["file"])])
    for v in vd.to_dict("records"):
        runs = "" if v["runs"] <= 1 else f"; {v['agree']} of {v['runs']} runs' stored verdicts (their commits' rules) say so"
        rows.append([f"{v['opt']} savings model `{v['formula'].split(',  ')[0]}`", _shape_text(v),
                     NO_PROCESS_DATA.replace("single runs", "one run") + " (the rule adds the process component tau)",
                     "-", f"predicted {_ms_ci(v['predicted_ms'], v['predicted_ci95_lo'], v['predicted_ci95_hi'])}, "
                     f"measured {_ms_ci(v['measured_ms'], v['measured_ci95_lo'], v['measured_ci95_hi'])}, "
                     f"{_units(v)}: " + _verdict_cell(v) + runs, ctx.short(v["file"])])
    if rows:
        lines += _table(["result", "model · layers · tokens · attention backend that ran",
                         "a rerun (the process is the unit): estimate [95% CI], K processes on J machines: verdict",
                         "one process on another machine", "within this run (the rep is the unit): estimate [95% CI]: "
                         "verdict", "run"], rows)
    else:
        lines += [f"No complete GPU comparison in `{os.path.relpath(ctx.root, ctx.repo)}/` yet.", ""]
    notes = [SPEEDUP_RULE, RERUN_RULE]
    if len(vd):
        notes.append(MODEL_RULE)
    else:
        notes.append("No savings-model verdict in profiles/ yet: the models' inputs come from a traced run "
                     "(`python -m workbench.ab --trace torch`, then `workbench verdicts RUN_DIR`).")
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
        g = rep.attrs["groups"]
        notes.append(f"Repeat runs (clean repeats: same commit, GPU, batches, steps, trace mode, arms and NVTX backend, 4 or more "
                     f"reps each): {rep.attrs['n_disagree']} of {rep.attrs['n']} pairs disagree at p < 0.05 (about 5% "
                     f"would if a run's CI spoke for a rerun); the between-process SD tau (REML) exceeds its simulated "
                     f"null in {int(g['tau_beyond_null'].sum())} of {len(g)} repeat groups (results page).")
    lines += [" ".join(notes), ""]
    lines += [f"**Every comparison and every run of it** (repeats that disagree included), the savings models with "
              f"their inputs, where each traced saving comes from, the L sweeps, the A/A noise floor, what the "
              f"instruments cost, MFU, what was left out and each folder's command: "
              f"**[{os.path.relpath(page_path, ctx.repo)}]({rel(page_path)})**. Generated by "
              f"`workbench readme_results` from `{os.path.relpath(ctx.root, ctx.repo)}/`; its `--check` "
              "fails when this block, the page, the figure or a speedup quoted in the prose disagrees with them."]
    return "\n".join(lines).rstrip() + "\n"



def breakdown_figure_path(figure: str) -> str:
    """The breakdown PNG, beside the headline PNG."""
    return os.path.join(os.path.dirname(figure), "breakdown.png")


def breakdown_figure_rows(ctx) -> pd.DataFrame:
    return figures.breakdown_rows(an.breakdown(ctx.root, **ctx.kw))

