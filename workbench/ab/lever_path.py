"""The path to the best step: the levers applied cumulatively, point by point, from `--opt levers` runs.

    workbench lever_path RUN_DIR [RUN_DIR ...] --out DIR     # DIR/path.csv, DIR/path.png

Each RUN_DIR is a `python -m workbench.ab --opt levers` run folder. Its `path` comparison (`workbench.ab.levers`)
timed, on the same batches and interleaved, the baseline and the levers switched on one after the other in order of
predicted saving (baseline, +first, +first+second, ...). A run that chose one lever has no `path` comparison: its
path is that lever's comparison (baseline, optimized).

`winning_arms(RUN_DIR)` (also `workbench.api.winning_arms`) gives the path's last point as keywords for
`workbench.apply_optimizations`: a user's Trainer runs the step the path measured last.

Per point, one row of path.csv:
- `lever_arm`: the arm a point's lever was switched to where the path took its anchor instead of its OPTIMIZED arm
  (`workbench.ab.levers.faster_anchor`, the run's `levers.path_arms`; e.g. attention at `varlen`), else empty;
- `step_ms` (mean timed step) with `step_ms_ci95` (t-interval over the reps' mean steps: the rep is the unit);
- `speedup_vs_prev` [ci95]: the point against the previous one, paired by (rep, step) as the engine pairs
  (`engine.paired_comparison`), and `speedup_vs_baseline` [ci95];
- `model_tflop_per_step`, `achieved_tflops`, `mfu`, `hfu` (workbench/step/flops.py, over the device's dense bf16 peak;
  empty on a CPU, whose peak is unknown). MFU counts the useful work at every point: the step's FLOPs with attention
  block-diagonal (what the documents need), so that MFU rises exactly as the step time falls along the path. HFU
  counts what the point computes: recompute included, and attention as its arm ran it. Both are read as the run wrote
  them (each arm's `flops_per_batch` in summary.json); `mfu_nemo` beside it: NeMo AutoModel's convention
  (`flops.nemo_flops`: full-training FLOPs with causal d^2 / 2 attention per document, x (2 + r) / 3 for LoRA), the
  figure to hold against NeMo's published MFU; an older run's are recounted from its rebuilt batches (dense
  T x T until a lever whose module states `ATTENTION_FLOPS` for its optimized arm switches it), `flops_note` says so;
- `tokens_per_s`, `peak_mem_mib`, `equivalent`, `different_function_passed` (a point whose arm computes a different
  function by design, as the run judged it: `workbench.measure.numerics.equiv_cell`; None for any other);
- the breakdown: `ms_<component>` per `workbench.traces.decompose` component, from the point's trace (a run with
  `--trace torch`); and for the last point the path measured (a failed later point has no trace) `held_back_by`: the
  levers `workbench.traces.lever_advice.levers` names in its breakdown, largest first (ms, share of the traced step);
  `gemm_share`, GEMM's share of the traced step; and `mfu_if_only_gemm` = mfu / gemm_share, the MFU the point would
  reach if every non-GEMM microsecond went and the GEMMs ran as they do: below a goal, the GEMMs themselves hold the
  point back too; `clock_note` when that point's median SM clock (`sm_clock_mhz`, with `power_w`: NVML over its timed
  reps, columns of every point) is under 95% of another point's: its GEMMs ran below full clock (a power-capped
  step), so `mfu_if_only_gemm` holds at the clock it ran.

A run cut off after the path's timed steps (its summary.json lists `path` in `levers.run` but holds no `path`
comparison) gives its points from results.csv, with status `incomplete` and no equivalence or breakdown.

path.png: one panel per run, the step time of each point as a staircase with its 95% CI, each step labelled with
its speedup over the previous point and MFU.
"""
from __future__ import annotations

import argparse
import csv
import os

from workbench.errors import WorkbenchError

PATH = "path"


def _samples(results, cmp_name: str) -> list[dict]:
    from workbench.measure.results import engine_step_rows
    r = engine_step_rows(results[results["comparison"] == cmp_name])
    return [dict(arm=x.arm, rep=int(x.rep), step=int(x.step), batch=int(x.batch) if x.batch == x.batch else 0,
                 step_ms=float(x.value)) for x in r.itertuples()]


def _path_of(summary: dict) -> tuple[dict, list[str]]:
    comps = [c for c in summary.get("comparisons", []) if c.get("baseline")]
    c = next((c for c in comps if c.get("name") == PATH), None)
    if c is not None:
        arms = c.get("path") or [c["baseline"]["arm"], *[a["arm"] for a in c.get("others") or []],
                                 c["optimized"]["arm"]]
        return c, arms
    run = (summary.get("levers") or {}).get("run") or []
    if PATH in run and comps:  # an interrupted run: the path's timings are in results.csv, its summary entry is not
        first = comps[0]
        c = {"name": PATH, "opt": "levers", "status": "incomplete",
             **{k: first.get(k) for k in ("model", "layers", "tokens", "attn")}}
        return c, ["baseline", *[f"+{o}" for o in run if o != PATH]]
    levers = [c for c in comps if c.get("lever") is not None or c.get("opt") not in ("levers",)]
    if len(levers) == 1 and levers[0].get("optimized"):
        c = levers[0]
        return c, [c["baseline"]["arm"], c["optimized"]["arm"]]
    raise WorkbenchError("no `path` comparison in the run (run `python -m workbench.ab --opt levers`)")


def winning_arms(run_dir: str) -> dict:
    """The path's last point of a `--opt levers` run as keywords for `workbench.apply_optimizations` ({opt: arm}):
    each lever the run chose and the path kept (not in `levers.left_out_of_path`: slower, failed, or a different
    function by design), at the arm the path ran it (its anchor or compiled-layer arm where `levers.path_arms` says
    so, else its own comparison's optimized arm: OPTIMIZED, or the arm `lever_arms` chose for the shape). A user's Trainer gets the step the path measured last. Refused in one line for a folder that is no levers
    run."""
    import json

    from workbench import opts

    path = os.path.join(run_dir, "summary.json")
    summary = {}
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            summary = json.load(f)
    lev = summary.get("levers")
    if not lev or not lev.get("run"):
        raise WorkbenchError(f"{run_dir}: not a `python -m workbench.ab --opt levers` run (no levers in summary.json)")
    left, taken = lev.get("left_out_of_path") or {}, lev.get("path_arms") or {}
    own = {c.get("opt"): (c.get("optimized") or {}).get("arm") for c in summary.get("comparisons") or []
           if c.get("name") != PATH}  # a lever's own arm at this shape (`lever_arms`: the activations arm that fits)
    out = {}
    for name in lev["run"]:
        if name == PATH or name in left:
            continue
        out[name] = (taken.get(name) or {}).get("arm") or own.get(name) or opts.module(name).OPTIMIZED
    return out


def _breakdown(run_dir: str, cmp_name: str, arm: str, experts: int | None = None) -> tuple[dict, str | None]:
    from workbench.traces.events import events_path, load_events
    path = events_path(run_dir, cmp_name, arm)
    if not path:
        return {}, None
    ev = load_events(path)
    if not (ev["kind"] == "kernel").any():
        return {}, None
    from workbench.traces.lever_advice import levers, recompute_per_step
    from workbench.traces import decompose
    comps = decompose.summary(ev).to_dict("records")
    ms = {f"ms_{r['component']}": r["ms"] for r in comps if r["component"] in decompose.COMPONENTS}
    top = decompose.top_kernels(ev, 50).to_dict("records")
    rec = recompute_per_step(ev)
    ms["recompute_ms"] = float(rec.mean()) if len(rec) else 0.0  # a part of the busy components (not an ms_ column)
    return ms, held_back(levers(comps, top_kernels=top, experts=experts, recompute_ms=ms["recompute_ms"]))


def held_back(lever_rows: list[dict]) -> str | None:
    """The levers a breakdown names (`workbench.traces.lever_advice.levers` rows), largest first, as one line."""
    rows = sorted(lever_rows, key=lambda r: -(r["ms"] or 0))
    return "; ".join(f"{r['component']} ({r['ms']:.1f} ms, {100 * r['share']:.0f}%)" for r in rows) or None


def mark_last_measured(out: list[dict]) -> None:
    """Keep `held_back_by` on the last point the path measured (status ok, with a breakdown: a failed later point has
    no trace) and give it `gemm_share` and `mfu_if_only_gemm`; every other point's `held_back_by` is cleared."""
    last = next((r for r in reversed(out) if r.get("ms_gemm") is not None and r["status"] == "ok"), None)
    for r in out:
        if r is not last:
            r["held_back_by"] = None
    if last is not None:
        step = sum(v for k, v in last.items() if k.startswith("ms_") and v)
        last["gemm_share"] = last["ms_gemm"] / step if step else None
        last["mfu_if_only_gemm"] = (last["mfu"] / last["gemm_share"]
                                    if last.get("mfu") is not None and last["gemm_share"] else None)
        last["clock_note"] = clock_note(out, last)


CLOCK_DROP = 0.95  # a last point whose median SM clock is under this fraction of the path's fastest-clocked point's


def clock_note(out: list[dict], last: dict) -> str | None:
    """One line when the last measured point ran at a lower SM clock than another point of its path (NVML medians
    over its timed reps, `workbench.instrument.nvml`): its GEMMs then ran slower than the same GEMMs at full clock, so
    `mfu_if_only_gemm` is a bound at the clock it ran, not at the card's. None when the clocks were not sampled
    (a CPU) or do not differ."""
    if not last.get("sm_clock_mhz"):
        return None
    ref = max((r for r in out if r.get("sm_clock_mhz")), key=lambda r: r["sm_clock_mhz"])
    if last["sm_clock_mhz"] >= CLOCK_DROP * ref["sm_clock_mhz"]:
        return None
    gemm = ""
    prev = next((r for r in reversed(out[:out.index(last)]) if r.get("ms_gemm")), None)
    if prev is not None and last.get("ms_gemm"):
        gemm = f"; its GEMMs took {last['ms_gemm']:.0f} ms against {prev['ms_gemm']:.0f} at {prev['arm']}"
    power = f", {last['power_w']:.0f} W" if last.get("power_w") else ""
    return (f"SM clock {last['sm_clock_mhz']:.0f} MHz{power} against {ref['sm_clock_mhz']:.0f} MHz at "
            f"{ref['arm']}{gemm}")


def _batch_flops(c: dict, meta: dict, attention: str) -> list[dict]:
    """An older run's `flops.step_flops` of each batch (rebuilt as the run built them: meta.json's --lengths and seed)
    with `attention` counted so. A run since summary.json writes each arm's `flops_per_batch` is read instead."""
    from workbench.measure.results import run_args
    from workbench.step import flops
    from workbench.step.data import make_batches
    from workbench.step.models import load_config

    a = run_args(meta)
    config = load_config(c["model"], c.get("layers"), None, a.get("experts"))
    return [flops.step_flops(config, b.doc_lens, lora_rank=a["lora_rank"], attention=attention,
                             checkpointing=bool(a["checkpointing"]))
            for b in make_batches(a["lengths"], c["tokens"], a["batches"], config.vocab_size, seed=a["seed"])]


def _point_flops(run_dir: str, c: dict, meta: dict, arms: dict, order: list[str]):
    """({point: [{"model", "total"}] per batch}, [attention count per point], note) of the path's points: as the run
    wrote them (each arm's `flops_per_batch`, `attention_flops`), else, for an older run, recounted from its
    rebuilt batches (`_batch_flops`: useful block-diagonal work for MFU, each point's attention for HFU), with a note
    that says so; (None, None, the reason) where neither works."""
    from workbench.measure.results import older_run_note

    if all(arms.get(arm, {}).get("flops_per_batch") for arm in order):
        return ({arm: arms[arm]["flops_per_batch"] for arm in order},
                [arms[arm].get("attention_flops") for arm in order], None)
    try:
        from workbench import opts
        opts.load_all()  # the packing backends' attention counts (`flops.declare_attention`)
        useful = _batch_flops(c, meta, "block_diagonal")
        modes = _attention_of_points(c, order)
        done = {m: _batch_flops(c, meta, m) for m in set(modes)}
    except Exception as e:  # noqa: BLE001 - a model the FLOP count does not cover, a length file not here: no MFU
        first = (str(e).strip().splitlines() or [""])[0][:200]
        return None, None, older_run_note(run_dir, "no per-arm FLOPs in summary.json and its batches cannot be "
                                          f"rebuilt here ({type(e).__name__}: {first}): no MFU")
    per = {arm: [{"model": u["model"], "total": d["total"]} for u, d in zip(useful, done[modes[i]])]
           for i, arm in enumerate(order)}
    return per, modes, older_run_note(run_dir, "no per-arm FLOPs in summary.json (a run before they were written): "
                                      "recounted from meta.json's --lengths and seed")


def _attention_of_points(c: dict, order: list[str]) -> list[str]:
    """The attention each point computes (`flops.ATTENTION_MODES`): the run's, until a lever's optimized arm states
    another in its module's ATTENTION_FLOPS."""
    from workbench import opts
    from workbench.opts import registry
    from workbench.opts.protocol import hook
    from workbench.step import flops

    mode, out = flops.attention_mode(c.get("attn")), []
    for i, arm in enumerate(order):
        if i > 0 and arm.startswith("+") and arm[1:] in registry.names():  # (one not registered here: as before)
            mod = opts.module(arm[1:])  # a broken module fails loudly
            mode = hook(mod, "ATTENTION_FLOPS").get(mod.OPTIMIZED, mode)
        out.append(mode)
    return out


def _throughput(per_batch: list[dict], mine: list[dict], peak: float | None) -> dict:
    if not mine:
        return {}
    seconds = sum(s["step_ms"] for s in mine) / 1e3
    model = sum(per_batch[s["batch"]]["model"] for s in mine)
    total = sum(per_batch[s["batch"]]["total"] for s in mine)
    tf = model / seconds / 1e12
    out = {"model_tflop_per_step": model / len(mine) / 1e12, "achieved_tflops": tf,
           "mfu": tf / peak if peak else None, "hfu": total / seconds / 1e12 / peak if peak else None}
    if all("nemo" in b for b in per_batch):  # NeMo's convention beside ours (`flops.nemo_flops`)
        nemo = sum(per_batch[s["batch"]]["nemo"] for s in mine) / seconds / 1e12
        out.update(nemo_tflops=nemo, mfu_nemo=nemo / peak if peak else None)
    return out


def rows_of(run_dir: str) -> list[dict]:
    """The path's points of one run folder (see the module's doc)."""
    from workbench.measure import engine, stats
    from workbench.measure.results import comparison_arms, load_run
    from workbench.traces.lever_advice import experts_of

    results, summary, meta = load_run(run_dir)
    if not summary:
        raise WorkbenchError(f"{run_dir}: no summary.json")
    c, order = _path_of(summary)
    arms = comparison_arms(c)
    experts = experts_of(c.get("model"), c.get("layers"))  # the slice-gradient pattern is an MoE model's
    samples = _samples(results, c["name"])
    base = order[0]
    from workbench.step import flops
    dev = meta.get("device") or {}
    peak = flops.peak_tflops(dev.get("name")) if dev.get("type") == "cuda" else None
    per_point, modes, flops_note = _point_flops(run_dir, c, meta, arms, order)
    taken = {o: v.get("arm") for o, v in ((summary.get("levers") or {}).get("path_arms") or {}).items()}
    out = []
    for i, arm in enumerate(order):
        a = arms.get(arm, {})
        per_rep: dict = {}
        for s in samples:
            if s["arm"] == arm:
                per_rep.setdefault(s["rep"], []).append(s["step_ms"])
        t = stats.t_interval([sum(v) / len(v) for v in per_rep.values()])
        row = {"run": os.path.basename(os.path.normpath(run_dir)), "model": c.get("model"), "layers": c.get("layers"),
               "tokens": c.get("tokens"), "point": i, "arm": arm,
               "lever_arm": taken.get(arm[1:]) if i > 0 and arm.startswith("+") else None,  # an anchor it took
               "step_ms": t["mean"] if t["n"] else None,
               "step_ms_ci95_lo": (t["ci"] or [None, None])[0], "step_ms_ci95_hi": (t["ci"] or [None, None])[1],
               "speedup_vs_prev": None, "speedup_vs_prev_ci95_lo": None, "speedup_vs_prev_ci95_hi": None,
               "speedup_vs_baseline": None, "speedup_vs_baseline_ci95_lo": None,
               "speedup_vs_baseline_ci95_hi": None, "model_tflop_per_step": None, "achieved_tflops": None, "mfu": None,
               "hfu": None, "mfu_nemo": None, "attention_flops": modes[i] if modes else None,
               "tokens_per_s": a.get("tokens_per_s"), "peak_mem_mib": a.get("peak_mem_mib"),
               "equivalent": (c.get("equivalence") or {}).get(arm, {}).get("equivalent"),
               "different_function_passed": ((c.get("equivalence") or {}).get(arm, {}).get("different_function")
                                             or {}).get("passed"),
               "status": a.get("status") or c.get("status"), "flops_note": flops_note,
               "sm_clock_mhz": a.get("sm_clock_mhz_median"), "power_w": a.get("power_w_median")}
        if per_point is not None:
            row.update(_throughput(per_point[arm], [s for s in samples if s["arm"] == arm], peak))
        if row["mfu_nemo"] is None and a.get("mfu_nemo") is not None:  # the run's own, from the same timed steps
            row["mfu_nemo"] = a["mfu_nemo"]
        if i > 0:
            for key, ref in (("speedup_vs_prev", order[i - 1]), ("speedup_vs_baseline", base)):
                if any(s["arm"] == arm for s in samples) and any(s["arm"] == ref for s in samples):
                    p = engine.paired_comparison([dict(s) for s in samples], ref, arm)
                    row[key] = p["speedup"]
                    row[f"{key}_ci95_lo"], row[f"{key}_ci95_hi"] = (p["ci95"] or [None, None])
        ms, held = _breakdown(run_dir, c["name"], arm, experts)
        row.update(ms)
        row["held_back_by"] = held
        out.append(row)
    mark_last_measured(out)
    return out


def write_csv(rows: list[dict], path: str) -> str:
    cols = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        for r in rows:
            w.writerow(r)
    return path


def figure(rows: list[dict]):
    """One panel per run: each point's step time (staircase) with its 95% CI."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = list(dict.fromkeys(r["run"] for r in rows))
    fig, axes = plt.subplots(1, len(runs), figsize=(4.2 * len(runs), 3.8), squeeze=False)
    for ax, run in zip(axes[0], runs):
        pts = [r for r in rows if r["run"] == run]
        xs = list(range(len(pts)))
        ys = [r["step_ms"] or 0.0 for r in pts]
        lo = [max(0.0, y - (r["step_ms_ci95_lo"] if r["step_ms_ci95_lo"] is not None else y)) for r, y in zip(pts, ys)]
        hi = [max(0.0, (r["step_ms_ci95_hi"] if r["step_ms_ci95_hi"] is not None else y) - y) for r, y in zip(pts, ys)]
        ax.step(xs, ys, where="mid", color="tab:blue")
        ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o", color="tab:blue", capsize=3)
        for x, r in zip(xs, pts):
            lab = []
            if r["speedup_vs_prev"]:
                lab.append(f"{r['speedup_vs_prev']:.2f}x")
            if r["mfu"] is not None:
                lab.append(f"MFU {100 * r['mfu']:.0f}%")
            if lab:
                ax.annotate("\n".join(lab), (x, r["step_ms"] or 0.0), textcoords="offset points", xytext=(0, 8),
                            ha="center", fontsize=7)
        ax.set_xticks(xs, [r["arm"] for r in pts], rotation=30, ha="right", fontsize=7)
        p0 = pts[0]
        ax.set_title(f"{p0['model']} {p0['layers']}L {p0['tokens']} tok", fontsize=9)
        ax.set_ylabel("step ms (mean, 95% CI over reps)")
        ax.set_ylim(bottom=0)
    fig.tight_layout()
    return fig


def path_notes(run_dir: str) -> list[str]:
    """What a run's path left out, and the anchors it declined, each with its reason (summary.json's `levers`:
    `left_out_of_path`, `anchors_declined`): the lines that say why the path has the points it has."""
    import json

    path = os.path.join(run_dir, "summary.json")
    if not os.path.isfile(path):
        return []
    with open(path, encoding="utf-8") as f:
        lev = json.load(f).get("levers") or {}
    return ([f"left out of the path: {o} ({why})" for o, why in (lev.get("left_out_of_path") or {}).items()]
            + [f"anchor declined: {why}" for why in (lev.get("anchors_declined") or {}).values()]
            + [f"arm off the path: {arm} ({why})" for arm, why in (lev.get("arms_off_path") or {}).items()])


def run_labels(runs: list[str]) -> dict[str, str]:
    """Each run folder's label in path.csv and the figure: its name, or parent/name where two runs share a name
    (the same part run on several machines: run_o/llama16k_path, run_p/llama16k_path)."""
    names = [os.path.basename(os.path.normpath(d)) for d in runs]
    return {d: (n if names.count(n) == 1 else os.path.join(os.path.basename(os.path.dirname(os.path.normpath(d))), n))
            for d, n in zip(runs, names)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(allow_abbrev=False, prog="workbench lever_path", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", help="--opt levers run folders")
    p.add_argument("--out", required=True, help="folder for path.csv and path.png")
    a = p.parse_args(argv)
    from workbench.measure.numerics import equiv_cell
    rows = []
    labels = run_labels(a.runs)
    for d in a.runs:
        if not os.path.isdir(d):
            raise WorkbenchError(f"{d}: no such run folder")
        rows += [{**r, "run": labels[d]} for r in rows_of(d)]
    os.makedirs(a.out, exist_ok=True)
    write_csv(rows, os.path.join(a.out, "path.csv"))
    fig = figure(rows)
    fig.savefig(os.path.join(a.out, "path.png"), dpi=120, bbox_inches="tight")
    for r in rows:
        sp = f"{r['speedup_vs_prev']:.3f}x" if r["speedup_vs_prev"] else "-"
        ci = (f" [{r['speedup_vs_prev_ci95_lo']:.3f}, {r['speedup_vs_prev_ci95_hi']:.3f}]"
              if r["speedup_vs_prev_ci95_lo"] is not None else "")
        mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "-"
        mfu += f" (NeMo's convention {100 * r['mfu_nemo']:.1f}%)" if r.get("mfu_nemo") is not None else ""
        arm = r["arm"] + (f" ({r['lever_arm']})" if r.get("lever_arm") else "")  # a lever taken at its anchor
        print(f"{r['run']}  {r['point']} {arm:28s} {r['step_ms'] or float('nan'):10.2f} ms  {sp}{ci}  MFU {mfu}"
              + (f"  held back by {r['held_back_by']}" if r.get("held_back_by") else "")
              + (f"  (GEMM {100 * r['gemm_share']:.0f}% of the step: MFU {100 * r['mfu_if_only_gemm']:.1f}% if only "
                 f"GEMM remained)" if r.get("mfu_if_only_gemm") is not None else "")
              + (f"  ({r['clock_note']})" if r.get("clock_note") else "")
              + (f"  {equiv_cell(False, r['different_function_passed'])}"
                 if r.get("different_function_passed") is not None else ""))
    for d in a.runs:
        for line in path_notes(d):
            print(f"{labels[d]}  {line}")
    print(os.path.join(a.out, "path.csv"))
    return 0


if __name__ == "__main__":
    import sys

    from workbench.cli import run_main
    sys.exit(run_main(main))
