"""`python -m workbench.ab --opt levers`: the breakdown's levers as arms, each with a predicted saving, a measured
speedup and a verdict, then the path from the baseline to the best step.

    python -m workbench.ab --opt levers                                    # CPU: equivalence and counts
    python -m workbench.ab --opt levers --model llama-3.1-8b --layers 8 --tokens 16384 --trace torch

1. Which levers apply (`select`): every registered lever optimization (SPEC `lever`, `workbench.opts.registry`) whose
   arms this model and device can run (each module's `unsupported`: a dense model skips an expert lever). On a GPU
   a traced baseline pass (torch.profiler, the model with every applicable lever at its baseline arm, the run's
   --warmup and --steps on its batches; saved under traces/_levers_baseline/) gives the step's breakdown
   (`workbench.traces.decompose`) and the levers it names (`workbench.traces.lever_advice.levers`, components with at least
   MIN_SHARE of the step); the lever optimizations whose component is named run, in order of predicted saving. Where
   no trace is available (a CPU, or the trace failed) every applicable lever runs, and none has a prediction.
2. One comparison per lever (its baseline against its OPTIMIZED arm, every comparison on the same batches: one shape,
   one seed; a lever's baseline is the run's recipe where its module says so: `precision.lever_baseline`, autocast
   on a GPU), through the ordinary runner: paired speedup with CI, equivalence, or for an arm whose optimization
   states NUMERICS_CHANGE its deviation from fp32 next to the baseline's (`workbench.measure.numerics`).
3. The path (comparison `path`, more than one lever): arms that apply the chosen levers cumulatively in order of
   predicted saving (baseline, +first, +first+second, ...), timed together on the same batches, without a lever
   whose optimized arm computes a different function by design (DIFFERENT_FUNCTION: "left out: different function
   (stated)", `path_levers`) or whose own comparison failed or was slower (`prune_path`); a lever whose anchor (the
   arm a user would pick instead, timed beside) beat its optimized arm clearly goes on the path at the anchor
   (`faster_anchor`, recorded under `levers.path_arms`);
   `workbench lever_path RUN_DIR` reads it (step time, speedup over the previous point, MFU, breakdown).
   `--only NAME,...` keeps part of the plan, after the selection (e.g. `--only path`: a long run split in two).
4. `annotate`: per lever comparison, `lever` = {component, component_ms (its ms per step in the traced baseline,
   with the se over traced steps), saved_fraction (the module's SAVED_FRACTION, default 1.0), predicted_ms =
   component_ms x saved_fraction, predicted_se}, and `savings_model`: predicted against the measured paired saving
   (the rep as the unit), verdict by `workbench.savings.verdicts.judge` (confirmed / refuted / inconclusive: the 90% CI of
   measured / predicted inside or outside [0.8, 1.25]; "no verdict: instrument" when the traced baseline step is
   more than `workbench.savings.calibration.INSTRUMENT_TOL` off its timed step), Holm over the run's levers. On a
   CPU: no verdict.
"""
from __future__ import annotations

import dataclasses
import math

from workbench.opts import registry
from workbench.cli import progress

MIN_SHARE = 0.05
"""A lever's component must take at least this share of the traced baseline step to be named (`levers.levers`)."""
FORMULA = "component_ms x SAVED_FRACTION (component_ms: the lever's component in the traced baseline step)"
BASELINE_TRACE = "_levers_baseline"
"""The traces/ subfolder of the traced baseline pass."""
PATH = "path"
"""The name of the cumulative comparison."""


@dataclasses.dataclass
class Selection:
    comparisons: list
    predictions: dict
    """{opt: {component, component_ms, component_se_ms, saved_fraction, predicted_ms, predicted_se, named}}."""
    skipped: dict
    """{opt: why it does not run here}."""
    breakdown: dict | None = None
    """The traced baseline: {components, levers, steps, trace}; None without a trace."""
    trace_note: str | None = None
    left_out: dict = dataclasses.field(default_factory=dict)
    """{opt: why the path leaves it out}: a different function by design (`path_levers`, when planned), or its own
    comparison was slower, or failed (`prune_path`)."""

    path_arms: dict = dataclasses.field(default_factory=dict)
    """{opt: {"arm", "why"}}: a lever the path takes at its anchor arm instead of its OPTIMIZED one (`faster_anchor`)."""
    on_path: list = dataclasses.field(default_factory=list)
    """The lever comparisons the path was built from (`path_levers`), whether or not they run here (`--only path`)."""
    compiled_arms: dict = dataclasses.field(default_factory=dict)
    """{opt: its `lever_arms` choice at a path point whose layers are regionally compiled} (the activations lever:
    a compiled layer saves fewer tensors, so a faster arm may fit there); taken where compile stays on the path
    (`fit_arms`)."""
    anchors_declined: dict = dataclasses.field(default_factory=dict)
    """{opt: why}: a faster anchor the path does not take, because another lever of the path cannot run beside it
    (`path_conflict`); the lever stays at its OPTIMIZED arm."""

    def describe(self) -> dict:
        return {"predictions": self.predictions, "skipped": self.skipped, "breakdown": self.breakdown,
                "trace_note": self.trace_note, "run": [c.name for c in self.comparisons],
                "left_out_of_path": self.left_out, "path_arms": self.path_arms,
                "anchors_declined": self.anchors_declined,
                "arm_choice": {c.opt: c.arm_choice for c in self.comparisons if getattr(c, "arm_choice", None)},
                "compiled_arm_choice": self.compiled_arms, "arms_off_path": arms_off_path(self.on_path)}


def arms_off_path(comparisons: list) -> dict:
    """{"opt=arm": why} for the arms of the path's levers that the path never takes (their module's OFF_PATH_ARMS)."""
    from workbench import opts
    from workbench.opts.protocol import hook

    return {f"{c.opt}={arm}": why for c in comparisons for arm, why in hook(opts.module(c.opt), "OFF_PATH_ARMS").items()}


def saved_fraction(opt: str) -> float:
    from workbench import opts
    from workbench.opts.protocol import hook
    return float(hook(opts.module(opt), "SAVED_FRACTION"))


def predict(opt: str, breakdown: dict | None, shape: dict | None = None) -> dict:
    """The predicted saving of lever `opt` from a traced baseline's breakdown (`traced_breakdown`), or from the
    module's `lever_prediction` given `shape` ({config, tokens, checkpointing, device_name}) where it has one."""
    from workbench import opts
    from workbench.opts.protocol import hook

    comp, frac = registry.lever(opt), saved_fraction(opt)
    p = {"component": comp, "saved_fraction": frac, "component_ms": None, "component_se_ms": None,
         "predicted_ms": None, "predicted_se": None, "named": None}
    own = hook(opts.module(opt), "lever_prediction")
    if own is not None and shape is not None:
        p.update(own(breakdown, **shape))
        if breakdown is None:
            p["named"] = None
        return p
    if breakdown is None:
        return p
    row = next((r for r in breakdown["levers"] if r["component"] == comp), None)
    p["named"] = row is not None
    ms = row["ms"] if row is not None else next((r["ms"] for r in breakdown["components"]
                                                  if r["component"] == _decompose_component(comp)), None)
    if ms is None or ms != ms:
        return p
    se = breakdown.get("se_ms", {}).get(_decompose_component(comp))
    p.update(component_ms=ms, component_se_ms=se, predicted_ms=ms * frac,
             predicted_se=None if se is None else se * frac)
    return p


def _decompose_component(lever_component: str) -> str:
    """The `decompose` component a lever's component is measured in (its se over traced steps)."""
    from workbench.traces.lever_advice import DENSE_ATTENTION_COMPONENT
    return "attention" if lever_component == DENSE_ATTENTION_COMPONENT else lever_component


def breakdown_of(events, attention_impl: str | None, experts: int | None = None) -> dict:
    """{components, levers, se_ms, steps} of a traced baseline's events (`experts`: per MoE layer, None if dense)."""
    from workbench.step import flops
    from workbench.traces.lever_advice import LOSS_COMPONENT, RECOMPUTE_COMPONENT, levers, loss_per_step, recompute_per_step
    from workbench.traces import decompose

    comps = decompose.summary(events).to_dict("records")
    per = decompose.per_step(events)
    n = len(per)
    se = {c: (float(per[c].std(ddof=1)) / math.sqrt(n) if n > 1 else None) for c in per.columns}
    top = decompose.top_kernels(events, 50).to_dict("records")
    loss = loss_per_step(events)
    se[LOSS_COMPONENT] = float(loss.std(ddof=1)) / math.sqrt(len(loss)) if len(loss) > 1 else None
    rec = recompute_per_step(events)
    se[RECOMPUTE_COMPONENT] = float(rec.std(ddof=1)) / math.sqrt(len(rec)) if len(rec) > 1 else None
    rows = levers(comps, attention_flops=flops.attention_mode(attention_impl), min_share=MIN_SHARE, top_kernels=top,
                  loss_ms=float(loss.mean()) if len(loss) else None, experts=experts,
                  recompute_ms=float(rec.mean()) if len(rec) else None)
    return {"components": comps, "levers": rows, "se_ms": se, "steps": n, "top_kernels": top[:10]}


def traced_breakdown(runner, model, cmp, spec) -> dict:
    """A torch.profiler pass of the baseline `spec` on the run's batches; its breakdown (`breakdown_of`)."""
    from workbench.step.models import lora_resetter
    from workbench.traces import from_torch_trace, save_events
    from workbench.traces.capture import torch_profile

    a = runner.args
    attn = model.config._attn_implementation
    cpu_batches = a.data.make_batches(cmp.tokens, model.config.vocab_size, seed=runner.data_seed())
    reset = lora_resetter(model)
    stem = runner.writer.path("traces", BASELINE_TRACE, "baseline")
    path = stem + ".pt.trace.json.gz"
    progress(f"[levers] traced baseline pass ({'+'.join(spec.arms.values()) or 'as built'}) -> {path}")

    def run_steps(step_fn):
        runner.run_arm_steps(model, cpu_batches, spec, cmp, steps=a.warmup + a.steps, warmup=0,
                             on_step=lambda r: step_fn(), reset=reset)
    torch_profile(run_steps, path, device=runner.device, warmup=a.warmup, steps=a.steps)
    ev = from_torch_trace(path)
    save_events(ev, stem)
    if not (ev["kind"] == "kernel").any():
        raise RuntimeError("the trace holds no GPU kernels")
    from workbench.step.memory_estimate import shape
    out = breakdown_of(ev, attn, shape(model.config)["experts"] or None)
    out["trace"] = path
    return out


def select(runner, comps: list) -> Selection:
    """The lever comparisons that run here, in order of predicted saving, and the path (see the module's doc)."""
    from workbench import opts
    from workbench.ab.arm import _free
    from workbench.ab.planner import ArmSpec

    device = runner.device
    model = runner.build(comps[0])
    skipped, ok = {}, []
    try:
        o = runner.options(comps[0])
        for c in comps:
            mod = opts.module(c.opt)
            why = (opts.unsupported_reason(model, {c.opt: c.baseline}, device, o)
                   or opts.unsupported_reason(model, {c.opt: mod.OPTIMIZED}, device, o))
            if why:
                skipped[c.opt] = why
                progress(f"[levers] {c.opt} does not apply here: {why}")
            else:
                ok.append(c)
        bd, note = None, None
        if not ok:
            note = "no lever applies to this model"
        elif device.type != "cuda":
            note = "no GPU trace on a CPU: every applicable lever runs, without a prediction"
        else:
            base = ArmSpec("baseline", {c.opt: c.baseline for c in ok})
            try:
                bd = traced_breakdown(runner, model, comps[0], base)
            except Exception as e:  # noqa: BLE001 - without a trace every applicable lever runs, unpredicted
                note = f"the traced baseline pass failed ({type(e).__name__}: {e}): every applicable lever runs"
                progress(f"[levers] {note}")
    finally:
        del model
        _free(device)
    preds = {c.opt: predict(c.opt, bd, _shape(runner, c)) for c in ok}
    names, not_named = choose([c.opt for c in ok], preds)
    for o, why in not_named.items():
        skipped[o] = why
        progress(f"[levers] {o}: {why}")
    chosen = sorted((c for c in ok if c.opt in names), key=lambda c: names.index(c.opt))
    for c in chosen:
        p = preds[c.opt]
        progress(f"[levers] {c.opt} ({p['component']}): " + (
            f"predicted saving {p['predicted_ms']:.2f} ms/step = {p['component_ms']:.2f} ms x {p['saved_fraction']:g}"
            if p["predicted_ms"] is not None else "no prediction (no trace)") + (f"; {p['basis']}" if p.get("basis") else ""))
    out = list(chosen)
    on_path, stated = path_levers(chosen)
    for o, why in stated.items():
        progress(f"[levers] the path leaves {o} out: {why}")
    for c in chosen:
        if c.arm_choice:
            progress(f"[levers] {c.opt} at this shape: {c.arm_choice['why']}")
    compiled = compiled_choices(runner, on_path)
    sel_path_arms: dict = {}
    if len(on_path) > 1:
        arms_for = fit_arms(on_path, compiled, sel_path_arms)
        path_cmp = path_comparison(on_path, arms_for)
        _preflight_path(runner, path_cmp)
        out.append(path_cmp)
    if runner.args.only:  # a part of the plan (a long run split in two: --only path, or the levers alone)
        from workbench.errors import WorkbenchError
        names = [n.strip() for n in runner.args.only.split(",") if n.strip()]
        bad = [n for n in names if n not in [c.name for c in out]]
        if bad:
            raise WorkbenchError(f"--only {bad[0]!r} names no comparison of this levers run; its comparisons: "
                                 f"{', '.join(c.name for c in out)}")
        out = [c for c in out if c.name in names]
    return Selection(out, preds, skipped, bd, note, left_out=stated, on_path=on_path, path_arms=sel_path_arms,
                     compiled_arms=compiled)


def _shape(runner, c) -> dict:
    """What a module's `lever_prediction` counts from: the comparison's config, tokens, checkpointing and GPU."""
    import torch

    from workbench.step.models import load_config

    dev = runner.device
    return {"config": load_config(c.model, c.layers, None, runner.args.step.experts), "tokens": c.tokens,
            "checkpointing": bool(runner.args.step.checkpointing),
            "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else None}


def compiled_choices(runner, on_path: list) -> dict:
    """{opt: `lever_arms(..., compiled=True)`} for each lever of the path that chooses its arm by shape, when the
    compile lever is on the path too (the point where it is switched on has compiled layers). With the expert_lora
    lever on the path at `split` the experts there read no folded weight (`folded_experts` False); `prune_path`
    declines that lever's anchor, which would (`SPLIT_MEMORY`)."""
    from workbench import opts
    from workbench.opts.protocol import hook
    from workbench.step.models import load_config

    if "compile" not in [c.opt for c in on_path]:
        return {}
    split = any(c.opt == "expert_lora" and (c.optimized or opts.module(c.opt).OPTIMIZED) == "split" for c in on_path)
    out = {}
    for c in on_path:
        fn = hook(opts.module(c.opt), "lever_arms")
        if fn is not None and c.arm_choice:
            cfg = load_config(c.model, c.layers, None, runner.args.step.experts)
            out[c.opt] = fn(runner.args, runner.device, cfg, c.tokens, c.layers, compiled=True,
                            **({"folded_experts": False} if split else {}))
    return out


SPLIT_MEMORY = ("the compiled point's activations arm was chosen for split's memory (no folded expert stack kept per "
                "layer); the anchor reads peft's folded weight")
"""Why the path declines the expert_lora lever's anchor where a compiled point's arm assumed `split`."""


def fit_arms(kept: list, compiled: dict, path_arms: dict, anchors: dict | None = None) -> dict:
    """{opt: arm} a path of the levers `kept` switches each shape-chosen lever to where it differs from its own
    comparison's arm: its `compiled` choice when the compile lever stays on the path at a compiled arm, recorded in
    `path_arms` with why; `anchors` ({opt: arm}) come first."""
    from workbench import opts

    arms_for = dict(anchors or {})
    comp = next((c for c in kept if c.opt == "compile"), None)
    if comp is None or comp.optimized == opts.module("compile").BASELINE:
        return arms_for
    for c in kept:
        pick = compiled.get(c.opt)
        if c.opt in arms_for or pick is None or pick["optimized"] == c.optimized:
            continue
        arms_for[c.opt] = pick["optimized"]
        path_arms[c.opt] = {"arm": pick["optimized"], "why": f"with the layers compiled, {pick['why']}"}
        progress(f"[levers] the path takes {c.opt} at {pick['optimized']} (compiled layers): {pick['why']}")
    return arms_for


def _preflight_path(runner, path_cmp) -> None:
    """The path's points' memory estimates against the device (`preflight.check_model`), before the path runs."""
    from workbench.ab import preflight
    from workbench.step.models import load_config

    cfg = load_config(path_cmp.model, path_cmp.layers, None, runner.args.step.experts)
    preflight.check_model(runner.args, runner.device, cfg, [path_cmp])


def path_levers(chosen: list) -> tuple[list, dict]:
    """(the lever comparisons the path may switch on, {opt: DIFFERENT_FN} for those whose optimized arm computes a
    different function by design: their module states DIFFERENT_FUNCTION before any run
    (`workbench.opts.different_functions`), so the path never adds one as a speed lever; its own comparison
    still runs and is judged as one)."""
    from workbench import opts

    stated = {c.opt: DIFFERENT_FN for c in chosen if opts.different_functions({c.opt: opts.module(c.opt).OPTIMIZED})}
    return [c for c in chosen if c.opt not in stated], stated


def choose(applicable: list[str], preds: dict) -> tuple[list[str], dict]:
    """(the levers that run, in order of predicted saving, largest first; {lever: why not} for those whose component
    the traced breakdown does not name). Without a breakdown (predictions' `named` None) every applicable lever runs,
    in the registry's order."""
    if all(preds[o]["named"] is None for o in applicable):
        return list(applicable), {}
    run = [o for o in applicable if preds[o]["named"]]
    why = {o: f"the traced baseline does not name its component {preds[o]['component']!r} (under "
              f"{100 * MIN_SHARE:.0f}% of the step)" for o in applicable if not preds[o]["named"]}
    return sorted(run, key=lambda o: -(preds[o]["predicted_ms"] or 0.0)), why


def path_comparison(chosen: list, arms_for: dict | None = None):
    """The cumulative comparison: baseline (every lever at its comparison's baseline arm: the realistic recipe), then
    each lever switched to its OPTIMIZED arm (or the arm `arms_for` names: `faster_anchor`) on top of the previous
    point, in the order given."""
    import dataclasses as dc

    from workbench import opts
    from workbench.ab.planner import ArmSpec

    from workbench.opts.protocol import hook

    mods = {c.opt: opts.module(c.opt) for c in chosen}
    mods = dict(sorted(mods.items(), key=lambda kv: bool(hook(kv[1], "PATH_LAST"))))  # PATH_LAST: switched on last
    order = sorted(mods, key=_apply_rank)  # applied in apply order (compile's padding first), labelled by saving
    cur = {o: next(c.baseline for c in chosen if c.opt == o) for o in order}
    own = {c.opt: c.optimized or mods[c.opt].OPTIMIZED for c in chosen}  # a shape-chosen arm (`lever_arms`)
    arms = [ArmSpec("baseline", dict(cur))]
    for o in mods:
        cur[o] = (arms_for or {}).get(o, own[o])
        arms.append(ArmSpec(f"+{o}", dict(cur)))
    return dc.replace(chosen[0], opt="levers", name=PATH, arms=arms, baseline="baseline", optimized=arms[-1].label,
                      excluded={}, explicit_arms=False)


def _apply_rank(opt: str) -> tuple:
    spec = registry.spec(opt)
    return (spec.get("apply_order", spec["order"]), spec["order"], opt)


DIFFERENT_FN = "different function (stated): not a speed lever"
"""Why the path leaves out a lever whose optimized arm computes a different function by design (DIFFERENT_FUNCTION)."""
SLOWER = "slower"
"""The verdict (`workbench.measure.stats`: the speedup's 95% CI entirely below 1) that keeps a lever out of the path."""


def left_out_reason(result: dict) -> str | None:
    """Why the path leaves a lever out, from its own comparison's result (None: it stays). The rule, fixed before the
    runs it judges: the lever's comparison failed, or its optimized arm computes a different function by design (the
    run's `different_function` for that arm: no speed lever, whatever its speedup), or made the step slower (verdict
    `slower`: the 95% CI of its speedup entirely below 1). A CPU timing has no verdict, so on a CPU only a failure or
    a different function leaves one out."""
    if result.get("status") == "failed" or not result.get("optimized"):
        return "failed"
    opt = result["optimized"]
    if (opt.get("status") or "ok") != "ok":
        return "failed"
    if (result.get("different_function") or {}).get(opt.get("arm")) or opt.get("different_function"):
        return DIFFERENT_FN
    vs = opt.get("vs_baseline") or {}
    if vs.get("verdict") == SLOWER:
        ci = vs.get("ci95") or [None, None]
        return (f"slower ({vs['speedup']:.3f}x [{ci[0]:.3f}, {ci[1]:.3f}])" if ci[0] is not None
                else f"slower ({vs['speedup']:.3f}x)")
    return None


def faster_anchor(result: dict) -> tuple[str, str] | None:
    """(arm, why) when the path should take the lever's anchor (LEVER_ANCHOR: the arm a user would pick instead,
    timed beside the optimized one in the lever's own comparison) rather than its OPTIMIZED arm; else None. The rule,
    fixed before the runs it judges: the anchor ran, is equivalent to the baseline, computes the same function, and the
    95% CI of its speedup over the baseline lies entirely above the optimized arm's (the two intervals do not
    overlap: conservative, no test of the two arms against each other needed)."""
    from workbench import opts
    from workbench.opts.protocol import hook

    if result.get("opt") not in registry.names():
        return None
    anchor = hook(opts.module(result["opt"]), "LEVER_ANCHOR")
    opt_ci = ((result.get("optimized") or {}).get("vs_baseline") or {}).get("ci95") or [None, None]
    for a in result.get("others") or []:
        if anchor is None or a.get("arm") != anchor:
            continue
        vs = a.get("vs_baseline") or {}
        ci = vs.get("ci95") or [None, None]
        if ((a.get("status") or "ok") != "ok" or a.get("equivalent") is False or a.get("different_function")
                or (result.get("different_function") or {}).get(anchor) or ci[0] is None or opt_ci[1] is None):
            return None
        if ci[0] > opt_ci[1]:
            return anchor, (f"{anchor} {vs.get('speedup', float('nan')):.3f}x [{ci[0]:.3f}, {ci[1]:.3f}] over the "
                            f"baseline, above {result['optimized'].get('arm')}'s [{opt_ci[0]:.3f}, {opt_ci[1]:.3f}]")
    return None


def prune_path(sel: Selection, results: list[dict], path_cmp, device_type: str = "cuda"):
    """The path comparison without the levers whose own comparison (already run: `results`) says `left_out_reason`,
    each kept lever at its anchor arm where `faster_anchor` says so; None when no lever is left. Records each one left
    out in `sel.left_out`, each anchor taken in `sel.path_arms`.

    Then the path's last point (every kept lever on) must be one the levers can run together
    (`workbench.opts.conflicts`: each module's `path_conflict` hook), by a rule fixed before the runs it judges: an
    anchor that another lever cannot run beside (a conflict that goes when the lever is at its OPTIMIZED arm instead)
    is declined (the lever stays at its OPTIMIZED arm,
    `sel.anchors_declined`: the path keeps every lever rather than an anchor's edge over the OPTIMIZED arm, which its
    own comparison still reports), and a lever that conflicts even so is left out ("conflicts: ..."). A refusal known
    before the run is never a failed path point that takes every later point down with it."""
    from workbench import opts

    by_opt = {r.get("opt"): r for r in results if r.get("name") != PATH}
    chosen = [c for c in (sel.on_path or sel.comparisons) if c.name != PATH and c.opt not in sel.left_out]
    kept = []
    for c in chosen:
        why = left_out_reason(by_opt[c.opt]) if c.opt in by_opt else None
        if why is None:
            kept.append(c)
        else:
            sel.left_out[c.opt] = why
            progress(f"[levers] the path leaves {c.opt} out: {why}")
    anchors = {c.opt: fa for c in kept if c.opt in by_opt and (fa := faster_anchor(by_opt[c.opt])) is not None}
    fit = fit_arms(kept, sel.compiled_arms, {})
    final = {c.opt: anchors[c.opt][0] if c.opt in anchors else fit.get(c.opt, c.optimized or
                                                                          opts.module(c.opt).OPTIMIZED) for c in kept}
    if "expert_lora" in anchors and any(p.get("folded_experts") is False for p in sel.compiled_arms.values()) \
            and final.get("compile", "eager") != "eager":
        sel.anchors_declined["expert_lora"] = (f"expert_lora stays at {opts.module('expert_lora').OPTIMIZED}, not its "
                                               f"faster anchor {anchors['expert_lora'][0]}: {SPLIT_MEMORY}")
        progress(f"[levers] the path declines expert_lora's anchor: {sel.anchors_declined['expert_lora']}")
        final["expert_lora"] = opts.module("expert_lora").OPTIMIZED
        del anchors["expert_lora"]
    for o in list(anchors):
        clash = opts.conflicts(final, device_type)
        without = opts.conflicts({**final, o: opts.module(o).OPTIMIZED}, device_type)
        if clash.keys() - without.keys():  # the anchor is what some lever cannot run beside
            why = clash[next(iter(clash.keys() - without.keys()))]
            sel.anchors_declined[o] = (f"{o} stays at {opts.module(o).OPTIMIZED}, not its faster anchor "
                                       f"{anchors[o][0]}: {why}")
            progress(f"[levers] the path declines {o}'s anchor: {sel.anchors_declined[o]}")
            final[o] = opts.module(o).OPTIMIZED
            del anchors[o]
    while (clash := opts.conflict(final, device_type)) is not None:
        o, why = clash
        sel.left_out[o] = f"conflicts: {why}"
        progress(f"[levers] the path leaves {o} out: {sel.left_out[o]}")
        kept = [c for c in kept if c.opt != o]
        del final[o]
        anchors.pop(o, None)
    for o, (arm, why) in anchors.items():
        sel.path_arms[o] = {"arm": arm, "why": why}
        progress(f"[levers] the path takes {o} at {why}")
    recorded: dict = {}
    arms_for = fit_arms(kept, sel.compiled_arms, recorded, {o: arm for o, (arm, _) in anchors.items()})
    for o in [o for o in sel.path_arms if o not in anchors]:  # a compiled-layer arm is re-decided on the kept levers
        del sel.path_arms[o]
    sel.path_arms.update(recorded)
    if len(kept) == len(chosen) and not anchors and path_cmp is not None and all(
            path_cmp.arms[-1].arms.get(o) == arm for o, arm in arms_for.items()):
        return path_cmp
    return path_comparison(kept, arms_for) if kept else None


def annotate(writer, summary: dict, sel: Selection, device_type: str) -> list[dict]:
    """Each lever comparison of `summary` with its `lever` prediction and its `savings_model` verdict; the path's
    points named. Returns the comparisons (updated in place)."""
    from workbench.savings import calibration, verdicts
    from workbench.measure.results import load_run

    writer.flush()
    results = load_run(writer.out_dir)[0]
    judged = []
    for c in summary["comparisons"]:
        p = sel.predictions.get(c.get("opt"))
        if c.get("name") == PATH:
            c["path"] = [a for a in [c.get("baseline"), *(c.get("others") or []), c.get("optimized")] if a]
            c["path"] = [a["arm"] for a in c["path"]]
            continue
        if p is None or not c.get("baseline") or not c.get("optimized"):
            continue
        c["lever"] = dict(p)
        sm = {"formula": FORMULA, "predicted_ms": p["predicted_ms"], "predicted_se": p["predicted_se"],
              "predicted_ci95": None if p["predicted_se"] is None else
              [p["predicted_ms"] - 1.96 * p["predicted_se"], p["predicted_ms"] + 1.96 * p["predicted_se"]]}
        try:
            m = verdicts.measured_saving(results, c["name"], c["baseline"]["arm"], c["optimized"]["arm"])
        except Exception as e:  # noqa: BLE001 - an arm without timed steps (failed): no measured saving
            sm.update(verdict=None, reason=f"no measured saving: {type(e).__name__}: {e}")
            c["savings_model"] = sm
            continue
        sm.update(measured_ms=m["mean"], measured_ci95=m["ci95"], measured_n_pairs=m["n_pairs"])
        traced = next((r["ms"] for r in (sel.breakdown or {}).get("components", []) if r["component"] == "step_ms"),
                      None)
        why = calibration.instrument_reason({c["baseline"]["arm"]: (traced, c["baseline"].get("step_ms_mean"))})
        if device_type != "cuda":
            sm.update(verdict=None, reason="a CPU timing measures the machine's load: no verdict")
        elif p["predicted_ms"] is None:
            sm.update(verdict=None, reason=sel.trace_note or "no prediction")
        elif why:  # the traced pass the prediction comes from is not the step that was timed
            sm.update(verdict=calibration.NO_VERDICT_INSTRUMENT, reason=why, traced_step_ms=traced)
        else:
            steps = (sel.breakdown or {}).get("steps") or 0
            j = verdicts.judge(p["predicted_ms"], p["predicted_se"], m["mean"], m["se"], m["df"],
                               predicted_df=(steps - 1) if steps > 1 else None)
            sm.update(j, input_source="traced", traced_step_ms=traced)
            judged.append(sm)
        c["savings_model"] = sm
    if judged:
        verdicts.holm_family(judged)
    return summary["comparisons"]


def table(summary: dict) -> str:
    """One line per lever: component, predicted saving, measured speedup [CI], equivalence, verdict."""
    lines = ["lever            component                       predicted ms  speedup [95% CI]          "
             "equivalent  verdict"]
    left = (summary.get("levers") or {}).get("left_out_of_path") or {}
    for c in summary["comparisons"]:
        lv = c.get("lever")
        if lv is None:
            continue
        sm = c.get("savings_model") or {}
        path = f"left out: {left[c['opt']]}" if c.get("opt") in left else ""
        ci = c.get("speedup_ci95")
        sp = f"{c['speedup']:.3f}" if c.get("speedup") else "-"
        sp += f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""
        pred = f"{lv['predicted_ms']:.2f}" if lv.get("predicted_ms") is not None else "-"
        eq = "numerics" if c.get("numerics_change") else ""
        eq = f"{c.get('equivalent')}" + (f" ({eq})" if eq else "")
        dfs = c.get("different_function") or {}
        if dfs:  # as the run judged it: neither equivalent nor an ordinary failure (`numerics.equiv_cell`)
            from workbench.measure.numerics import equiv_cell
            eq = equiv_cell(False, all(d.get("passed") for d in dfs.values()))
        lines.append(f"{c['name']:16s} {str(lv['component'])[:30]:31s} {pred:>12s}  {sp:24s}  {eq:10s}  "
                     f"{sm.get('verdict') or sm.get('reason') or '-'}" + (f"  path: {path}" if path else ""))
    return "\n".join(lines)
