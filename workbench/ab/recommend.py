"""The A/B's closing sentences: what each optimization saved, and the configuration that won on this machine, as a line
to paste.

    packing: cached saved 8.9% [6.2, 11.6] of the step on NVIDIA H200 (rebuild 804 ms, cached 729 ms)
    recommended on this machine: apply_optimizations(model, packing="cached", moe="grouped")
      moe="grouped": 1.012x [1.004, 1.021] faster than hf_grouped_mm (transformers' default), equivalent

Per optimization the recommended arm is the fastest arm that computed the same function (equivalent) and was decided
faster (`stats.verdict` "faster": the whole 95% CI above 1) than the model's default: what transformers does today,
the module's `TRANSFORMERS_DEFAULT` arm (moe: `hf_grouped_mm`, transformers' `grouped_mm` experts; offload:
`no_offload`, plain checkpointing), else its BASELINE. An optimization whose default did not run in the comparison
recommends nothing (nothing was measured against it); nor do `REFERENCE_ARMS` (offload's `none`: no checkpointing, a
memory reference, not a lever). The speedup over the default is recomputed from the run's results.csv with the rep as
the unit (`workbench.analysis.loader.recomputed`). A CPU run has no timing verdict, so nothing is recommended.
"""
from __future__ import annotations

from workbench.opts.protocol import hook

SKIP_PREFIXES = ("nvtx:", "aa:")
"""Comparisons that are no optimization's (the NVTX-cost and A/A controls)."""


def _module(opt: str):
    from workbench import opts
    try:
        return opts.module(opt)
    except Exception:  # noqa: BLE001 - "all", a sweep's name, an optimization this checkout lacks: no recommendation
        return None


def default_arm(opt: str) -> str | None:
    """What transformers does today for `opt` (`TRANSFORMERS_DEFAULT`, else BASELINE); None for no optimization."""
    mod = _module(opt)
    if mod is None:
        return None
    return hook(mod, "TRANSFORMERS_DEFAULT") or mod.BASELINE


def _arms(c: dict) -> list[dict]:
    return [a for a in [c.get("baseline"), c.get("optimized"), *(c.get("others") or [])] if a]


def _step_ms(a: dict) -> float:
    """An arm's step as the table prints it (the geometric mean of its rep means: what the speedup is a ratio of)."""
    return a.get("step_ms_rep_geomean") or a.get("step_ms") or float("nan")


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def _paired(run_dir: str, c: dict, baseline: str, arm: str) -> dict | None:
    """{speedup, ci95, verdict} of `arm` over `baseline`, recomputed from the run's results.csv (today's statistics);
    for the optimized arm against the baseline, the summary's figures where the rows are gone."""
    from workbench.analysis.loader import recomputed
    r = recomputed(run_dir, c.get("name") or c.get("opt"), baseline, arm)
    if r is None and baseline == (c.get("baseline") or {}).get("arm") and arm == (c.get("optimized") or {}).get("arm"):
        r = {"speedup": c.get("speedup"), "ci95": c.get("speedup_ci95"), "verdict": c.get("verdict")}
    return r if r and r.get("speedup") is not None else None


def saved_sentence(run_dir: str, c: dict, device_name: str | None) -> str | None:
    """"packing: cached saved 8.9% [6.2, 11.6] of the step on GPU (rebuild 804 ms, cached 729 ms)": the optimized
    arm against the baseline, the saving 1 - 1/speedup with its 95% CI; the verdict in words where nothing was
    decided."""
    b, o = c.get("baseline") or {}, c.get("optimized") or {}
    if not b.get("arm") or not o.get("arm") or o["arm"] == b["arm"] or str(c.get("name", "")).startswith(SKIP_PREFIXES):
        return None
    r = _paired(run_dir, c, b["arm"], o["arm"])
    if r is None:
        return None
    sp, ci, verdict = r["speedup"], r.get("ci95"), r.get("verdict") or ""
    steps = f"({b['arm']} {_step_ms(b):.0f} ms, {o['arm']} {_step_ms(o):.0f} ms)"
    name = c.get("name") or c.get("opt")
    where = f" on {device_name}" if device_name else ""
    if not ci:
        return f"{name}: {o['arm']} vs {b['arm']}: {verdict or 'no CI'}{where} {steps}"
    lo, hi = 1 - 1 / ci[0], 1 - 1 / ci[1]
    if verdict == "faster":
        return f"{name}: {o['arm']} saved {_pct(1 - 1 / sp)}% [{_pct(lo)}, {_pct(hi)}] of the step{where} {steps}"
    if verdict == "slower":
        return (f"{name}: {o['arm']} cost {_pct(1 / sp - 1)}% [{_pct(1 / ci[1] - 1)}, {_pct(1 / ci[0] - 1)}] more "
                f"per step{where} {steps}")
    return (f"{name}: {o['arm']} vs {b['arm']}: {verdict}{where}; saving {_pct(1 - 1 / sp)}% [{_pct(lo)}, {_pct(hi)}] "
            f"{steps}")


def recommend(run_dir: str, summary: dict) -> dict:
    """{opt: {"arm", "over", "speedup", "ci95"} or {"arm": None, "why"}} for each optimization compared alone."""
    out = {}
    for c in summary.get("comparisons") or []:
        opt, name = c.get("opt"), c.get("name") or c.get("opt")
        if c.get("status", "ok") != "ok" or str(name).startswith(SKIP_PREFIXES) or name != opt:
            continue
        default = default_arm(opt)
        if default is None:
            continue
        ran = {a["arm"]: a for a in _arms(c)}
        if default not in ran:
            out[opt] = {"arm": None, "why": f"transformers' default ({default}) did not run: nothing was measured "
                                            f"against it (add it with --arms)"}
            continue
        refs = set(hook(_module(opt), "REFERENCE_ARMS"))
        best, closest = None, None
        for arm, a in ran.items():
            if arm == default or arm in refs or a.get("equivalent") is not True:
                continue
            r = _paired(run_dir, c, default, arm)
            if r is None:
                continue
            if r.get("verdict") == "faster" and (best is None or r["speedup"] > best["speedup"]):
                best = {"arm": arm, "over": default, "speedup": r["speedup"], "ci95": r.get("ci95")}
            if closest is None or r["speedup"] > closest[1]["speedup"]:
                closest = (arm, r)
        why = f"no equivalent arm was decided faster than {default} (transformers' default)"
        if closest is not None:
            arm, r = closest
            ci = r.get("ci95")
            why += (f"; the fastest, {arm}: {r['speedup']:.3f}x" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")
                    + f", {r.get('verdict')}")
        out[opt] = best or {"arm": None, "why": why}
    return out


def lines(run_dir: str, summary: dict, device_type: str, device_name: str | None = None) -> list[str]:
    """The closing sentences: one per comparison (`saved_sentence`), then the recommendation (`recommend`), as a
    ready `apply_optimizations(...)` line with each pick's interval; on a CPU only that nothing is recommended."""
    out = [s for c in summary.get("comparisons") or [] if c.get("status", "ok") == "ok"
           for s in [saved_sentence(run_dir, c, device_name)] if s]
    if device_type != "cuda":
        return out + ["recommended: nothing: a CPU run gives no timing verdict (run on a GPU for one)"]
    rec = recommend(run_dir, summary)
    picks = {o: r for o, r in rec.items() if r["arm"]}
    if not rec:
        return out
    if not picks:
        return out + ["recommended on this machine: nothing: " + "; ".join(f"{o}: {r['why']}" for o, r in rec.items())]
    call = ", ".join(f'{o}="{r["arm"]}"' for o, r in picks.items())
    out.append(f"recommended on this machine: apply_optimizations(model, {call})")
    for o, r in rec.items():
        if r["arm"]:
            ci = r["ci95"]
            out.append(f'  {o}="{r["arm"]}": {r["speedup"]:.3f}x [{ci[0]:.3f}, {ci[1]:.3f}] faster than {r["over"]} '
                       "(transformers' default), equivalent")
        else:
            out.append(f"  {o}: none: {r['why']}")
    return out
