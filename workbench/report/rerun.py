"""The results page's process-level section: what a rerun of each comparison would show (`analysis.process_claims`),
and the held-out designs that test it (each campaign folder's `prospective.json`, fixed before its GPU run, and the
held-out checks already run: `analysis.json`'s `heldout`, and every revised design's check, `analysis_vN.json`)."""
from __future__ import annotations

import json
import os

import pandas as pd

from workbench import analysis as an
from workbench.report.markdown import _Ctx, _f, _table


def _pct(v) -> str:
    return "-" if v is None or v != v else f"{v:.2f}%"


def rerun_section(ctx: _Ctx) -> list[str]:
    claims = an.process_claims(ctx.root, ctx.comps)
    if claims.empty:
        return []
    lines = ["## A rerun: process-level claims", "",
             "Every CI above is a claim within its run (the rep is the unit). Here the process is the unit: K "
             "independent processes (`python -m workbench.ab ... --processes K`: own seed, own model build, a "
             "discarded warm-up rep, R timed reps each); the estimate exp(mean of the process means), its 95% "
             "t-interval over the processes of the machines that ran, and a 95% prediction interval (PI) for one "
             "more process: on another machine where processes of 2 or more machines give a machine component "
             "(omega, the ANOVA of process means by machine; Satterthwaite df, few with 2 machines, so the interval "
             "is wide), else on the same machine. sigma (rep) and tau (process) by REML over every process "
             "(`workbench/measure/replication.py`); GPU minutes from the processes' recorded wall times.", ""]
    rows = [[f"{r['name']}: {r['arm']} vs {r['baseline']}", f"{r['model']} · {r['layers']} · {r['tokens']} · "
             f"{r['attn']} · {r['precision']}", f"{int(r['K'])} x {int(r['R'])}", str(int(r["machines"])),
             f"{r['speedup']:.4f}x [{r['ci95_lo']:.4f}, {r['ci95_hi']:.4f}]",
             f"[{r['pi95_lo']:.4f}, {r['pi95_hi']:.4f}] ({r['pi_scope']}; {_f(r['pi_df'], '{:.1f}')} df)",
             f"{_pct(r['sigma_pct'])} / {_pct(r['tau_pct'])} / {_pct(r['omega_pct'])}",
             _f(r["gpu_minutes"], "{:.1f}"), ctx.link(r["source"])]
            for r in claims.to_dict("records")]
    lines += _table(["comparison", "model · layers · tokens · attn · precision", "K x R", "machines",
                     "estimate [95% CI over the processes]", "95% prediction interval", "sigma / tau / omega",
                     "GPU minutes", "file"], rows)
    lines += _heldout(ctx, sorted({os.path.dirname(s) for s in claims["source"]}))
    lines += _heldout_revised(ctx)
    return lines


def _heldout_revised(ctx: _Ctx) -> list[str]:
    """Every held-out check of a revised design (`analysis.heldout_checks`: the `analysis_vN.json` files)."""
    checks = an.heldout_checks(ctx.root)
    if checks.empty:
        return []
    rows = [[r["name"], ctx.link(r["design"]) + ("" if r["claim"] else " (superseded)"), f"`{r['machine']}`",
             f"{int(r['M'])}" + ("" if pd.isna(r["planned_M"]) or r["planned_M"] == r["M"]
                                 else f" of {int(r['planned_M'])} planned"),
             f"{r['speedup']:.4f}x ({r['shift_pct']:+.1f}%)", f"[{r['pi95_lo']:.4f}, {r['pi95_hi']:.4f}]",
             f"{r['inside']:.2f} ({r['inside_null_q05']:.2f})", r["spread"],
             "holds" if r["verdict"] == "holds" else "**fails**", ctx.link(r["source"])]
            for r in checks.to_dict("records")]
    return ["", "Held-out checks of the revised designs (`prospective_vN.json`, each committed before its run; its "
            "`analysis_vN.json` beside the held-out run): M new processes on a machine the design did not "
            "pool, judged by its rule unchanged. A superseded design is judged too, for the record; the claim is "
            "the newest design naming the comparison.", ""] + _table(
        ["comparison", "design", "held-out machine", "M", "held-out estimate (shift from the estimate)",
         "PI, one process on a new machine", "inside (null 5% quantile)", "spread", "check", "file"], rows)


def _heldout(ctx: _Ctx, folders: list[str]) -> list[str]:
    """Held-out checks already run (a folder's analysis.json) and the designs still to run (prospective.json)."""
    lines = []
    for rel in folders:
        d = ctx.abs(rel)
        done = os.path.join(d, "analysis.json")
        if os.path.isfile(done):
            with open(done, encoding="utf-8") as f:
                a = json.load(f)
            rows = [[c["comparison"], f"{c['heldout']['K']} + {c['heldout']['M']}",
                     f"{c['heldout']['inside']:.2f} ({c['heldout']['inside_null_q05']:.2f})",
                     f"{c['heldout']['variance_ratio']:.2f} [{c['heldout']['f_interval'][0]:.2f}, "
                     f"{c['heldout']['f_interval'][1]:.2f}]", "holds" if c["heldout"]["ok"] else "**fails**",
                     ctx.link(os.path.join(rel, "analysis.json"))]
                    for c in a.get("comparisons", []) if c.get("heldout")]
            if rows:
                lines += [f"Held out (`{rel}/analysis.json`): an estimate from the first K processes, every later "
                          "process held out (some on another machine); the fraction inside the estimate's "
                          "one-machine PI against its null 5% quantile, and the variance ratio against its F "
                          "interval.", ""]
                lines += _table(["comparison", "K + M", "inside PI (null 5% quantile)",
                                 "variance ratio [F interval]", "check", "file"], rows)
        design = os.path.join(d, "prospective.json")
        if os.path.isfile(design):
            with open(design, encoding="utf-8") as f:
                p = json.load(f)
            rows = [[name, c["heldout_plan"]["command"], str(c["heldout_plan"]["M"]),
                     f"{c['heldout_plan']['null']['inside_null_q05']:.2f}",
                     f"[{c['heldout_plan']['null']['f_interval'][0]:.2f}, "
                     f"{c['heldout_plan']['null']['f_interval'][1]:.2f}]",
                     f"{c['heldout_plan']['null']['coverage']:.3f}", ctx.link(os.path.join(rel, "prospective.json"))]
                    for name, c in p["comparisons"].items()]
            lines += [f"The next held-out test (`{rel}/prospective.json`, fixed before its run): M new processes "
                      f"on a machine none of the estimate's ran on. Rule: {p['rule']}.", ""]
            lines += _table(["comparison", "held-out command (a third machine)", "M", "inside >=",
                             "variance ratio inside", "the PI's simulated coverage", "file"], rows)
            lines += _judged(ctx, f"{rel}/prospective.json")
    return lines


def _judged(ctx: _Ctx, design_rel: str) -> list[str]:
    """The runs that applied `design_rel` (an analysis.json whose `design` names it): one row per comparison."""
    root = ctx.abs("profiles")
    rows = []
    for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        f = os.path.join(root, name, "analysis.json")
        if not os.path.isfile(f):
            continue
        with open(f, encoding="utf-8") as fh:
            a = json.load(fh)
        if a.get("design") != design_rel:
            continue
        for comp, h in (a.get("heldout") or {}).items():
            if not h.get("ran"):
                rows.append([comp, "0", "-", "-", "not run", ctx.link(os.path.join("profiles", name, "analysis.json"))])
                continue
            rows.append([comp, str(h["ran"]), f"{h['heldout_speedup']:.4f}x ({h['shift_pct']:+.1f}%)",
                         f"{h['inside']:.2f} ({h['inside_null_q05']:.2f}); {h['variance_ratio']:.2f} "
                         f"[{h['f_interval'][0]:.2f}, {h['f_interval'][1]:.2f}]",
                         "holds" if h["ok"] else "**fails**", ctx.link(os.path.join("profiles", name, "analysis.json"))])
    if not rows:
        return []
    return ["", "Its run (the rule above, applied unchanged):", ""] + _table(
        ["comparison", "M that ran", "held-out estimate (shift from the estimate)",
         "inside PI (null 5% quantile); variance ratio [F interval]", "check", "file"], rows)
