"""Speedups: one row per comparison and arm, recomputed from results.csv; timed and warmup steps; the same
comparison across runs (`runs_of`, `repeats`) and the run a headline reports."""
from __future__ import annotations

import math
import os

import pandas as pd

from workbench.analysis.constants import RECIPE
from workbench.analysis.loader import (_arms, _empty, _frame, _included, _name, _rows, _run_lengths, _run_precision,
                                       default_lengths, optimizations_text, recomputed)


COMP_COLUMNS = ["folder", "job", "name", "opt", "model", "layers", "tokens", "attn", "precision", "lengths", "gpu_name",
                "ranks", "role",
                "baseline", "arm", "baseline_ms", "arm_ms", "baseline_mean_ms", "arm_mean_ms", "speedup", "ci95_lo",
                "ci95_hi", "ci_contains_1", "verdict", "n_pairs", "n_units", "outlier_pairs", "summary_speedup",
                "summary_ci95_lo", "summary_ci95_hi", "summary_verdict", "summary_n_pairs", "equivalent",
                "different_function_passed", "syncs_baseline", "syncs_arm", "instrument_cost_pct", "run_status", "file",
                "command",
                "git_sha", "batches", "steps", "trace", "arm_set", "nvtx_backend", "optimizations", "rep_log_ratios",
                "process_of", "void_reason"]


def comparisons(profiles: str | None = None, include_incomplete_comparisons=False, **discover_kw) -> pd.DataFrame:
    """One row per (run, comparison, arm other than the baseline) (`COMP_COLUMNS`): `speedup` = exp(mean per-rep
    log(mean baseline / mean arm)) over the paired steps with its 95% CI (t over reps, `ci95_lo/hi`), verdict,
    pairs and reps (`n_units`), recomputed from each run's results.csv (`recomputed`: the rep is the unit, every
    pair counts); `baseline_mean_ms` / `arm_mean_ms` are the arms' mean timed steps (what the speedup is a ratio
    of), `baseline_ms` / `arm_ms` their medians; `summary_*` the figures the run's summary.json holds (for runs
    before the rep-level statistics: the pair bootstrap, outliers dropped); `role` optimized / other / aa (A/A: the
    baseline against itself) / nvtx (NVTX ranges off -> on); `file` the summary.json it comes from; `process_of`
    the `--processes` campaign folder a process's run folder belongs to (None for a single run);
    `different_function_passed` (summary.json's arm `different_function.passed`) for an arm that computes a different
    function by design (its `equivalent` is False by construction, `numerics.equiv_cell`), None for any other.
    `include_incomplete_comparisons`: True, or job names (e.g. `KEEP_FROM_INCOMPLETE`), to take the comparisons
    whose own status is ok out of incomplete runs; `discover_kw`: include_cpu, include_incomplete, include_void (the
    comparisons a VOID.json declares void, left out otherwise; `void_reason` says why, None on every other row)."""
    rows = []
    for r, comps in _included(profiles, include_incomplete_comparisons=include_incomplete_comparisons,
                              **discover_kw):
        for c in comps:
            b = c.get("baseline") or {}
            for a, role in _arms(c)[1:]:
                v = a.get("vs_baseline") or {}
                olo, ohi = v.get("ci95") or [None, None]
                new = recomputed(r["path"], _name(c), b.get("arm"), a["arm"]) or {}
                lo, hi = new.get("ci95") or [None, None]
                rows.append({"folder": r["folder"], "job": r["job"], "name": _name(c), "gpu_name": r["gpu_name"]
                             or r["device"], **{k: c.get(k) for k in ("opt", "model", "layers", "tokens", "attn")},
                             "precision": c.get("precision") or _run_precision(r["path"]),
                             "lengths": _run_lengths(r["path"]),
                             "ranks": int((c.get("distributed") or {}).get("world_size") or 1), "role": role,
                             "baseline": b.get("arm"), "arm": a["arm"], "baseline_ms": b.get("step_ms"),
                             "arm_ms": a.get("step_ms"),
                             "baseline_mean_ms": new.get("baseline_mean_ms", b.get("step_ms_mean")),
                             "arm_mean_ms": new.get("arm_mean_ms", a.get("step_ms_mean")),
                             "speedup": new.get("speedup"), "ci95_lo": lo,
                             "ci95_hi": hi, "ci_contains_1": None if lo is None else lo <= 1 <= hi,
                             "verdict": new.get("verdict"), "n_pairs": new.get("n_pairs"),
                             "n_units": new.get("n_units"), "outlier_pairs": new.get("outlier_pairs"),
                             "summary_speedup": v.get("speedup"), "summary_ci95_lo": olo, "summary_ci95_hi": ohi,
                             "summary_verdict": v.get("verdict"), "summary_n_pairs": v.get("n_pairs"),
                             "equivalent": a.get("equivalent"),
                             "different_function_passed": (a.get("different_function") or {}).get("passed"),
                             "syncs_baseline": b.get("syncs_per_step"), "syncs_arm": a.get("syncs_per_step"),
                             "instrument_cost_pct": a.get("instrument_cost_pct"), "run_status": r["status"],
                             "file": os.path.join(r["folder"], "summary.json"), "command": r["command"],
                             **_clean_repeat_facts(r, c), "rep_log_ratios": _rep_log_ratios(r["path"], _name(c),
                                                                                             b.get("arm"), a["arm"]),
                             "process_of": r.get("process_of"), "void_reason": c.get("void_reason")})
    return _frame(rows, COMP_COLUMNS, ("baseline_ms", "arm_ms", "baseline_mean_ms", "arm_mean_ms", "speedup",
                                       "ci95_lo", "ci95_hi", "syncs_baseline", "syncs_arm", "instrument_cost_pct",
                                       "summary_speedup", "summary_ci95_lo", "summary_ci95_hi"))


def _clean_repeat_facts(r: dict, c: dict) -> dict:
    """What a clean repeat must share beyond the comparison: the commit, the batches, steps and trace mode it ran,
    its set of arms (meta.json's args; None where not recorded), the NVTX backend its timed steps' ranges went
    through (`results.nvtx_backend_of`: the `nvtx` package or torch.cuda.nvtx, which differ in cost per range) and
    the optimizations a `WorkbenchCallback` run's model ran with (`opt=arm,...`, "none"; None for an A/B, whose arms
    say it): a user's step with `packing="cached"` is another step than without."""
    from workbench.analysis.loader import _meta
    from workbench.measure.results import nvtx_backend_of
    meta = _meta(r["path"])  # read once per file version, not once per row
    args = meta.get("args") or {}
    return {"git_sha": r.get("git_sha"), "batches": args.get("batches"), "steps": args.get("steps"),
            "trace": args.get("trace"), "arm_set": ",".join(sorted(a["arm"] for a, _ in _arms(c) if a.get("arm"))),
            "nvtx_backend": nvtx_backend_of(meta),
            "optimizations": optimizations_text(c)}


def _rep_log_ratios(path: str, comparison: str, baseline, arm) -> list | None:
    """The run's per-rep log(mean baseline / mean arm) (the rep as the unit), for `workbench.measure.replication`."""
    from workbench.analysis.loader import step_samples
    from workbench.measure import engine
    smp = step_samples(path).get(comparison)
    if not smp or baseline is None:
        return None
    b, o, reps = engine.pairs(smp, baseline, arm, engine.pair_keys(comparison))
    per: dict = {}
    for x, y, u in zip(b, o, reps):
        if u is not None and u == u and u >= 0:
            per.setdefault(u, ([], []))[0].append(x)
            per[u][1].append(y)
    return [math.log(sum(x) / len(x) / (sum(y) / len(y))) for x, y in per.values()] or None


STEP_COLUMNS = ["folder", "comparison", "arm", "rep", "batch", "step", "step_ms", "opt", "model", "layers", "tokens"]


def steps(profiles: str | None = None, **kw) -> pd.DataFrame:
    """The timed steps (results.csv `step_ms` rows) of the comparisons `comparisons(...)` reads (`STEP_COLUMNS`)."""
    df = _rows(profiles, ["step_ms"], **kw)
    return _empty(STEP_COLUMNS) if df.empty else df.rename(columns={"value": "step_ms"})[STEP_COLUMNS]


def warmups(profiles: str | None = None, **kw) -> pd.DataFrame:
    """Warmup steps (`warmup_step_ms` rows: rep, batch, step) with each (arm, rep)'s `warmup_steps` and whether it
    settled (`warmup_settled`, 1/0) beside them."""
    cols = ["folder", "comparison", "arm", "rep", "batch", "step", "warmup_step_ms", "warmup_steps", "warmup_settled"]
    df = _rows(profiles, ["warmup_step_ms", "warmup_steps", "warmup_settled"], **kw)
    if df.empty:
        return _empty(cols)
    key = ["folder", "comparison", "arm", "rep"]
    per = df[df["metric"] != "warmup_step_ms"].pivot_table(index=key, columns="metric", values="value").reset_index()
    w = df[df["metric"] == "warmup_step_ms"].rename(columns={"value": "warmup_step_ms"})
    return w.merge(per, on=key, how="left").reindex(columns=cols)


CONFIG_KEY = ["name", "model", "layers", "tokens", "baseline", "arm", "precision", "lengths", "ranks"]
"""The same comparison: ..., the same precision (another recipe is another step), the same document-length
distribution (another mix is another comparison) and the same number of data-parallel
ranks (a 2-GPU step is not a 1-GPU step)."""


def _agrees(r, b) -> bool:
    """Does run `r` agree with the chosen run `b`? `replication.runs_agree` (a z test, p >= 0.05) on their speedups
    and rep-level CIs, not CI overlap (two 95% CIs that just overlap are p = 0.006 apart); without a CI on either
    side, the same verdict."""
    from workbench.measure import replication
    if any(pd.isna(x[k]) for x in (r, b) for k in ("speedup", "ci95_lo", "ci95_hi", "n_units")):
        return r["verdict"] == b["verdict"]
    est = [{"speedup": x["speedup"], "ci95": [x["ci95_lo"], x["ci95_hi"]], "n_units": x["n_units"]} for x in (r, b)]
    return replication.runs_agree(*est)["agree"]


def runs_of(comps: pd.DataFrame, prefer=None) -> pd.DataFrame:
    """`comps` (`comparisons(...)`) with, per row, how many runs hold the same comparison (`CONFIG_KEY`: comparison,
    model, layers, tokens, baseline -> arm): `runs`, `chosen` (the run a headline reports: one of `prefer`, a set of
    (folder, comparison) such as the runs a savings-model verdict comes from, else the most pairs, then the later
    folder), `same_gpu` (the run ran on the chosen run's GPU model) and `agrees` (`_agrees`: a test of the two
    runs' speedups, not CI overlap; True for the chosen, and for a run on another GPU model, which is another step,
    not a rerun: it is not tested)."""
    d = comps.copy()
    d["runs"], d["chosen"], d["agrees"], d["same_gpu"] = 0, False, True, True
    if d.empty:
        return d
    want = set(prefer or ())
    key = d[CONFIG_KEY].astype(str).agg("|".join, axis=1)
    # by position, on plain records (the same choices as sorting each group by (_p, _n, folder), stable, and taking
    # the last): a row-by-row `.loc` cost ~2 ms a row, paid by every page and headline
    recs = d.to_dict("records")
    n_pairs = pd.to_numeric(d["n_pairs"], errors="coerce").fillna(0).tolist()
    runs, chosen, agrees, same = [0] * len(d), [False] * len(d), [True] * len(d), [True] * len(d)
    groups: dict = {}
    for pos, k in enumerate(key.tolist()):
        groups.setdefault(k, []).append(pos)
    for members in groups.values():
        best = max(members, key=lambda i: ((recs[i]["folder"], recs[i]["name"]) in want, n_pairs[i],
                                           recs[i]["folder"], i))
        for i in members:
            runs[i] = len(members)
            same[i] = str(recs[i].get("gpu_name")) == str(recs[best].get("gpu_name"))
            agrees[i] = True if i == best or not same[i] else bool(_agrees(recs[i], recs[best]))
        chosen[best] = True
    d["runs"], d["chosen"], d["agrees"], d["same_gpu"] = runs, chosen, agrees, same
    return d


REPEAT_KEY = ["name", "baseline", "arm", "model", "layers", "tokens", "precision", "lengths", "gpu_name", "ranks",
              "git_sha", "batches", "steps", "trace", "arm_set", "nvtx_backend", "optimizations"]
"""A clean repeat: the same comparison on the same GPU model, commit, batches, steps, trace mode, arm set, NVTX
backend (the instrument the timed steps carry: a process without the `nvtx` package is not a repeat of one with it)
and, for a `WorkbenchCallback` run, the optimizations its model ran with."""
MIN_REPEAT_REPS = 4
"""A run enters the repeat diagnostic with at least this many reps (fewer: its se rests on 1-2 df)."""
REPEAT_COLUMNS = [*REPEAT_KEY, "statistic", "folder_1", "speedup_1", "ci95_lo_1", "ci95_hi_1", "se_log_1", "folder_2",
                  "speedup_2", "ci95_lo_2", "ci95_hi_2", "se_log_2", "z", "z2", "p", "agree"]
REPEAT_GROUP_COLUMNS = [*REPEAT_KEY, "folders", "K", "R", "sigma_pct", "tau_pct", "tau_ci95_lo_pct", "tau_ci95_hi_pct", "lr_p",
                        "tau_null_q95_pct", "tau_beyond_null"]


def repeats(comps: pd.DataFrame, statistic: str = "rep") -> pd.DataFrame:
    """Do repeat runs agree? Clean repeats only (`REPEAT_KEY`: the comparison (a sweep point's name without its
    `@key=value`), arms, model, shape, precision, lengths, GPU, ranks, git sha, batches, steps, trace mode, arm set
    and NVTX backend), each run with at least MIN_REPEAT_REPS reps. One row per pair of runs (`REPEAT_COLUMNS`):
    `replication.runs_agree`, a test (z = (log s1 - log s2) / sqrt(se1² + se2²), se from each CI with reps - 1 df,
    two-sided p, `agree` p >= 0.05), not CI overlap. `statistic` "rep": the speedups `comparisons` recomputes;
    "summary": the figures each summary.json holds. `df.attrs`: "n" pairs, "n_disagree" (p < 0.05; about 5% of
    pairs when the runs' CIs speak for a rerun), "mean_z2" (kept for comparison only: its null mean is not 1 with
    few reps per run), and "groups": per clean repeat group with K >= 2 runs of per-rep log ratios
    (`REPEAT_GROUP_COLUMNS`), sigma and tau by REML (`replication.reml_components`) with tau's 95% CI and the LR
    test of tau = 0, judged against the 95th percentile of tau-hat when tau = 0 simulated for the group's own design
    (`replication.null_tau_quantile`)."""
    from workbench.measure import replication, stats

    cols = {"rep": ("speedup", "ci95_lo", "ci95_hi", "n_units"),
            "summary": ("summary_speedup", "summary_ci95_lo", "summary_ci95_hi", None)}[statistic]
    d = comps.copy()
    for k in (*REPEAT_KEY, "n_units", "rep_log_ratios"):
        if k not in d:
            d[k] = None
    d["name"] = d["name"].astype(str).str.split("@").str[0]  # a sweep point at the main shape is the same comparison
    d = d[d[cols[0]].notna() & d[cols[1]].notna()]
    d = d[pd.to_numeric(d["n_units"], errors="coerce").fillna(0) >= MIN_REPEAT_REPS]
    rows, groups = [], []
    for _, g in ([] if d.empty else d.groupby(d[REPEAT_KEY].map(str).agg("|".join, axis=1), sort=False)):
        if g["folder"].nunique() < 2:
            continue
        recs = g.sort_values("folder", kind="stable").to_dict("records")

        def est(r):
            lo, hi = float(r[cols[1]]), float(r[cols[2]])
            if statistic == "summary":  # the old pair-bootstrap CI: the normal quantile
                se = (math.log(hi) - math.log(lo)) / 2 / 1.96 if lo > 0 else None
                return {"speedup": float(r[cols[0]]), "se_log": se, "df": None}
            n = int(r["n_units"])
            return {"speedup": float(r[cols[0]]), "se_log": stats.se_from_ci([lo, hi], n), "df": n - 1}

        for i in range(len(recs)):
            for j in range(i + 1, len(recs)):
                a, b = recs[i], recs[j]
                if a["folder"] == b["folder"]:
                    continue
                ea, eb = est(a), est(b)
                if ea["se_log"] is None or eb["se_log"] is None:
                    continue
                t = replication.runs_agree(ea, eb)
                rows.append({**{k: a.get(k) for k in REPEAT_KEY}, "statistic": statistic,
                             "folder_1": a["folder"], "speedup_1": a[cols[0]], "ci95_lo_1": a[cols[1]],
                             "ci95_hi_1": a[cols[2]], "se_log_1": ea["se_log"], "folder_2": b["folder"],
                             "speedup_2": b[cols[0]], "ci95_lo_2": b[cols[1]], "ci95_hi_2": b[cols[2]],
                             "se_log_2": eb["se_log"], "z": t["z"], "z2": t["z"] ** 2, "p": t["p"],
                             "agree": t["agree"]})
        with_reps = [r for r in recs if isinstance(r.get("rep_log_ratios"), list)]
        ys = [r["rep_log_ratios"] for r in with_reps]
        if len(ys) >= 2:
            c = replication.reml_components(ys)
            if c["tau"] is not None and c["sigma"]:
                q95 = replication.null_tau_quantile(c["R"], c["sigma"], sims=200)
                lo, hi = c["tau_ci95"] or [None, None]
                groups.append({**{k: recs[0].get(k) for k in REPEAT_KEY}, "folders": [r["folder"] for r in with_reps],
                               "K": c["K"], "R": ",".join(map(str, c["R"])),
                               "sigma_pct": 100 * c["sigma"], "tau_pct": 100 * c["tau"],
                               "tau_ci95_lo_pct": None if lo is None else 100 * lo,
                               "tau_ci95_hi_pct": None if hi is None else 100 * hi, "lr_p": c["lr_p"],
                               "tau_null_q95_pct": 100 * q95, "tau_beyond_null": c["tau"] > q95})
    out = _frame(rows, REPEAT_COLUMNS, ("speedup_1", "ci95_lo_1", "ci95_hi_1", "se_log_1", "speedup_2", "ci95_lo_2",
                                        "ci95_hi_2", "se_log_2", "z", "z2", "p"))
    out.attrs["mean_z2"] = float(out["z2"].mean()) if len(out) else None
    out.attrs["n"] = len(out)
    out.attrs["n_disagree"] = int((~out["agree"].astype(bool)).sum()) if len(out) else 0
    out.attrs["groups"] = _frame(groups, REPEAT_GROUP_COLUMNS, ("sigma_pct", "tau_pct", "tau_ci95_lo_pct",
                                                                "tau_ci95_hi_pct", "lr_p", "tau_null_q95_pct"))
    return out


def one_gpu(comps: pd.DataFrame) -> pd.DataFrame:
    """The rows of single-process runs (`ranks` 1 or unrecorded): what a one-GPU headline reports."""
    if "ranks" not in comps:
        return comps
    return comps[pd.to_numeric(comps["ranks"], errors="coerce").fillna(1) == 1]


def lever_comparisons() -> set:
    """The comparison names of `--opt levers` runs: every lever optimization (SPEC `lever`) and the `path`."""
    from workbench.opts import registry as opt_registry
    return {*opt_registry.levers(), "path"}


def headline_runs(comps: pd.DataFrame) -> set:
    """(folder, comparison) of the one-GPU runs a headline reports, one per comparison (`runs_of`'s choice among the
    optimized arms, sweeps left out; the user's recipe `RECIPE` first, then the most pairs, then the later folder):
    the runs a notebook draws step by step. The levers' comparisons (`--opt levers`: each lever and the `path`) are
    left out: the README's levers section and `workbench.ab.lever_path` report them."""
    d = default_lengths(one_gpu(comps[(comps["role"] == "optimized") & ~comps["name"].astype(str).str.contains("@")
                                      & ~comps["name"].astype(str).isin(lever_comparisons())]))
    if d.empty:
        return set()
    d = runs_of(d)
    c = d[d["chosen"]].assign(_recipe=lambda x: x["precision"].astype(str) == RECIPE,
                              _n=lambda x: pd.to_numeric(x["n_pairs"], errors="coerce").fillna(0))
    best = c.sort_values(["_recipe", "_n", "folder"], kind="stable").groupby("name", sort=False).tail(1)
    return set(zip(best["folder"], best["name"]))
