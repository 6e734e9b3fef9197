"""One comparison, phase by phase (`Runner.run`): build (the model, the attention it runs, the packed batches),
runnable arms, equivalence, timing (the engine's timed reps), counted pass, traces (`passes`), summary (`summary`).
Each phase is a `phase_*` method that reads and fills one `_Comparison`."""
from __future__ import annotations

import contextlib
import dataclasses
import sys
import traceback

import torch

from workbench.opts import registry as opt_registry
from workbench import opts as optimizations
from workbench.savings import common as savings
from workbench.ab import passes, summary
from workbench.ab.arm import _Parked, _Session, _fresh, _free, _plain
from workbench.ab.cli import HF_ATTN
from workbench.measure.stats import timing_on
from workbench.ab.planner import ArmSpec, Comparison
from workbench.opts.protocol import hook as opt_hook
from workbench.cli import progress
from workbench.errors import WorkbenchError
from workbench.opts import apply_all as apply_arms, unsupported_reason

DTYPES = {"auto": None, "fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
"""--dtype names (`cli.DTYPE_CHOICES`) to torch dtypes; auto = the precision's (workbench.step.models.default_dtype)."""


@dataclasses.dataclass
class _Comparison:
    """One comparison's state, passed from phase to phase (`Runner.run`)."""
    cmp: Comparison
    tag: str
    """`[i/n name]`, the progress lines' prefix."""
    out: dict
    """The comparison's summary.json entry, filled phase by phase."""
    model: object
    ran_attn: str
    """The attention the comparison names (summary.json's `attn`: an HF implementation or a packing backend)."""
    built_attn: str
    """The model's attention implementation as built (an arm that never ran is counted with it)."""
    env: dict
    """The environment columns of its results.csv rows."""
    dtype: object
    """The dtype the step computes in (the equivalence criterion's)."""
    reset_weights: object
    cpu_batches: list = dataclasses.field(default_factory=list)
    arm_status: dict = dataclasses.field(default_factory=dict)
    runnable: list = dataclasses.field(default_factory=list)
    base_spec: ArmSpec | None = None
    live: list = dataclasses.field(default_factory=list)
    """The runnable arms that passed the equivalence phase without an error."""
    equiv: dict = dataclasses.field(default_factory=dict)
    ref32: dict | None = None
    m: object = None
    """The engine's measurement (None when the baseline could not run)."""
    infos: dict = dataclasses.field(default_factory=dict)
    counted: dict = dataclasses.field(default_factory=dict)
    events: dict = dataclasses.field(default_factory=dict)
    arm_attention: dict = dataclasses.field(default_factory=dict)
    """{arm: (the attention implementation the model ran with the arm applied, the attention count its module states
    or None)} (`Runner.session`, `_attention_ran`)."""
    flops_by_attention: dict = dataclasses.field(default_factory=dict)


def _attention_ran(model, spec: ArmSpec) -> tuple:
    """(attention implementation, stated count) of `model` with `spec`'s arms applied: the implementation the model
    runs (an optimization's own is counted as its module declares it: `flops.declare_attention`), and the count an
    applied arm's module states in `ATTENTION_FLOPS` (None where none does)."""
    stated = None
    for opt, arm in spec.arms.items():
        stated = stated or (opt_hook(optimizations.module(opt), "ATTENTION_FLOPS") or {}).get(arm)
    return model.config._attn_implementation, stated


class Runner:
    def __init__(self, args, device, writer, nvml=None):
        self.args = args
        self.device = device
        self.writer = writer
        self.nvml = nvml
        self.failures: list[str] = []
        self._opt_state: dict = {}
        """{comparison: {opt: state}}: what an optimization keeps for one comparison (a pinned pool)."""
        self._arm_attention: dict = {}
        """{arm: attention implementation} of the comparison running (`session` records what each arm ran)."""

    budget = None
    """The run's `workbench.ab.budget.RunBudget` (--budget-min), set by the session; None: no run budget."""

    def _progress(self, msg: str):
        progress(msg + (f"  [{self.budget.suffix()}]" if self.budget is not None else ""))

    def timing_protocol(self):
        """The timing phase's protocol: `protocol()`, under a run budget with this comparison's share as `budget_s`
        (the smaller of it and --budget-s), the reps floor (`budget.MIN_REPS`, unless --reps named one) and the
        timed reps' warm-up at its fewest steps (`Protocol.rep_warmup_max`; the discarded rep warms up as configured)."""
        p = self.protocol()
        if self.budget is None:
            return p
        import dataclasses
        share = self.budget.timing_share_s()
        reps = self.budget.reps_floor or p.reps
        return dataclasses.replace(p, reps=reps, budget_s=share if p.budget_s is None else min(share, p.budget_s),
                                   max_reps=max(p.max_reps, reps), rep_warmup_max=p.warmup_steps())

    def data_seed(self) -> int:
        """The seed of this process's batches (workbench.ab.distributed: offset per rank under torchrun)."""
        return self.args.data.seed

    def protocol(self):
        from workbench.measure.engine import Protocol

        a = self.args
        # the discarded warm-up rep on a GPU only: a CPU run is a functional check, its timings are not results
        return Protocol(reps=a.reps, steps=a.steps, warmup_min=a.warmup, warmup_max=max(a.warmup_max, a.warmup),
                        settle_pct=a.settle_pct, target_ci_pct=a.target_ci_pct, budget_s=a.budget_s,
                        max_reps=max(a.max_reps, a.reps), discard_reps=1 if self.device.type == "cuda" else 0,
                        batches=a.data.batches)

    def build(self, cmp: Comparison):
        from workbench.step.harness import enable_checkpointing
        from workbench.instrument import instrument_layers
        from workbench.step.models import build_model

        hf_attn = cmp.attn if (cmp.attn is None or cmp.attn in HF_ATTN) else None
        model = build_model(cmp.model, layers=cmp.layers, attn=hf_attn, device=self.device, seed=self.args.data.seed,
                            dtype=DTYPES[self.args.step.dtype],
                            lora_rank=self.args.step.lora_rank, experts_implementation=self.args.step.experts,
                            precision=self.args.step.precision)
        if self.args.step.checkpointing:
            enable_checkpointing(model)
        instrument_layers(model)
        return model

    def options(self, cmp: Comparison) -> dict:
        """{opt: keyword arguments of its apply / unsupported} for this comparison: each optimization's
        `comparison_options` hook (packing: the backend --attn names; offload: one pinned host pool per comparison,
        pinned once, not once per repetition; moe: the tokens per batch), its state kept per comparison here."""
        state = self._opt_state.setdefault(cmp.name, {})
        o: dict = {}
        for opt in optimizations.OPTS:
            fn = opt_hook(optimizations.module(opt), "comparison_options")
            if fn is not None:
                o[opt] = fn(cmp, self.device, state.setdefault(opt, {}))
        return o

    @contextlib.contextmanager
    def session(self, model, cpu_batches, spec: ArmSpec, cmp, *, reset, options=None, infos=None):
        """The arm applied (reverted on exit), its batches prepared and on the device, weights reset."""
        from workbench.step.data import to_device

        reset()
        options = dict(options if options is not None else self.options(cmp))
        for opt, kw in spec.options.items():  # this arm's own options (a dose) over the comparison's
            options[opt] = {**options.get(opt, {}), **kw}
        handle = apply_arms(model, spec.arms, options)
        self._arm_attention.setdefault(spec.label, _attention_ran(model, spec))
        try:
            batches = to_device(_fresh(cpu_batches), self.device, prepare=handle.prepare_batch)
            yield _Session(model, batches, handle, self.args.step.lr, spec.ranges,
                           precision=handle.precision(self.args.step.precision))
            if infos is not None:
                info = {}
                for h in handle.handles:
                    info.update({f"{h.opt}.{k}": v for k, v in (h.info or {}).items() if _plain(v)})
                infos[spec.label] = info
        finally:
            handle.revert()
            del handle
            _free(self.device)

    def reference_fp32(self, model, run_one, batch, *, cmp, spec, options) -> dict:
        """The fp32 reference of the baseline arm on `batch` (`equivalence.reference_fp32`; workbench.ab.distributed
        computes it on an unsharded copy: FSDP2 all-gathers from its own bf16 shards)."""
        from workbench.measure import equivalence

        return equivalence.reference_fp32(model, run_one, batch, self._progress, self.device)

    def reference_options(self, cmp, ran_attn) -> dict:
        """Options of the fp32 reference pass: each optimization's `reference_options` hook (packing: the varlen
        backend's kernels take only fp16 / bf16 on a GPU, so there the reference runs the sdpa backend)."""
        o = self.options(cmp)
        for opt in {x for s in cmp.arms for x in s.arms}:
            fn = opt_hook(optimizations.module(opt), "reference_options")
            if fn is not None:
                o[opt] = fn(o.get(opt, {}), ran_attn, self.device)
        return o

    def run_arm_steps(self, model, cpu_batches, spec: ArmSpec, cmp, *, steps, warmup, reset, on_step=None,
                      count_syncs=False, optimizer=None, options=None, precision=None):
        """A fixed number of steps of one arm (trace passes, equivalence): `harness.train_steps`, at the session's
        precision unless `precision` says otherwise (the fp32 reference)."""
        from workbench.step.harness import train_steps
        from workbench.instrument import Ranges

        with self.session(model, cpu_batches, spec, cmp, reset=reset, options=options) as s:
            return train_steps(model, s.batches, steps=steps, warmup=warmup, optimizer=optimizer or s.optimizer,
                               ranges=Ranges(nvtx=True, profiler=True), count_syncs=count_syncs,
                               cross_check=self.args.cross_check, inputs_fn=s.handle.inputs_fn, on_step=on_step,
                               precision=precision or s.precision)

    def run(self, cmp: Comparison, index: int, total: int) -> dict:
        """One comparison, phase by phase (each a method below, reading and filling one `_Comparison`)."""
        c = self.phase_build(cmp, index, total)
        self.phase_runnable_arms(c)
        self.phase_equivalence(c)
        self.phase_timing(c)
        self.phase_counted_pass(c)
        self.phase_traces(c)
        out = self.phase_summary(c)
        del c.model
        _free(self.device)
        return out

    # -- build: the model, its attention, the packed batches -------------------------------------------------------
    def phase_build(self, cmp: Comparison, index: int, total: int) -> "_Comparison":
        from workbench.step import precision_mode as precision
        from workbench.step.models import lora_resetter

        a = self.args
        tag = f"[{index}/{total} {cmp.name}]"
        out = {"name": cmp.name, "opt": cmp.opt, "model": cmp.model, "layers": None, "tokens": cmp.tokens,
               "attn": cmp.attn, "baseline": None, "optimized": None, "others": [], "speedup": None,
               "speedup_ci95": None, "verdict": None, "n_pairs": 0, "equivalent": False,
               "savings_model": {"formula": savings.formula(cmp.opt) or ("not modelled" + (
                   " (every optimization together)" if cmp.opt == "all" else "")),
                                 "predicted_ms": None, "measured_ms": None,
                                 "reason": "the model's inputs come from traces: run with --trace torch or nsys"
                                 if a.trace == "none" else f"judged from this run's --trace {a.trace} traces once "
                                 "every comparison has run"},
               "status": "ok", "errors": []}
        self._progress(f"{tag} building {cmp.model}" + (f" ({cmp.layers} layers)" if cmp.layers else ""))
        model = self.build(cmp)
        L = model.config.num_hidden_layers
        out["layers"] = L
        built_attn = model.config._attn_implementation
        ran_attn = built_attn
        opts_o = self.options(cmp)
        for opt in dict.fromkeys(x for s in cmp.arms for x in s.arms):  # a backend of ours, through AttentionInterface
            fn = opt_hook(optimizations.module(opt), "attention_backend")
            if fn is not None:
                ran_attn = fn(model, self.device, opts_o.get(opt, {}))
        out["attn"] = ran_attn
        c = _Comparison(cmp=cmp, tag=tag, out=out, model=model, ran_attn=ran_attn, built_attn=built_attn,
                        env=dict(opt=cmp.opt, model=cmp.model, layers=L, tokens=cmp.tokens, attn=ran_attn),
                        dtype=precision.compute_dtype(model, a.step.precision),  # the equivalence tolerance's
                        reset_weights=lora_resetter(model))
        c.cpu_batches = a.data.make_batches(cmp.tokens, model.config.vocab_size, seed=self.data_seed())
        out["batches"] = [{"tokens": b.tokens, "documents": len(b.doc_lens), "doc_lens": list(b.doc_lens)}
                          for b in c.cpu_batches]  # written, so the analysis never replays the packing
        self._arm_attention = c.arm_attention  # filled by `session` with what each arm ran
        return c

    # -- runnable arms: what this model and device can run -------------------------------------------------------
    def phase_runnable_arms(self, c: "_Comparison") -> None:
        cmp, model, out = c.cmp, c.model, c.out
        if cmp.opt == "all":
            for o in opt_registry.in_all_names():
                why = None
                for spec in cmp.arms:
                    why = why or unsupported_reason(model, {o: spec.arms[o]}, self.device, self.options(cmp))
                if why:
                    cmp.excluded[o] = why
            for spec in cmp.arms:
                spec.arms = {o: arm for o, arm in spec.arms.items() if o not in cmp.excluded}
            if cmp.excluded:
                self._progress(f"{c.tag} left out of the combination: " +
                               "; ".join(f"{o} ({w})" for o, w in cmp.excluded.items()))
            out["excluded"] = dict(cmp.excluded)
        for spec in cmp.arms:
            why = unsupported_reason(model, spec.arms, self.device, self.options(cmp)) if spec.arms \
                else "no optimization left to apply"
            if why is None:
                c.runnable.append(spec)
                c.arm_status[spec.label] = {"status": "ok"}
                continue
            required = spec.label in (cmp.baseline, cmp.optimized) or cmp.explicit_arms
            c.arm_status[spec.label] = {"status": "unsupported" if required else "skipped", "error": why}
            msg = f"{cmp.name} arm {spec.label} cannot run here: {why}"
            if required:
                self.failures.append(msg)
                out["errors"].append(msg)
                progress(f"error: {msg}")
            else:
                self._progress(f"{c.tag} skipping arm {spec.label}: {why}")
        c.base_spec = next((s for s in c.runnable if s.label == cmp.baseline), None)

    # -- equivalence: one forward+backward from the same weights on the first batch, every arm vs the baseline -----
    def _one_step(self, c: "_Comparison", spec, batch, options=None, precision=None) -> dict:
        from workbench.measure import equivalence
        from workbench.step.models import lora_parameters

        cap = equivalence.GradCapture(lora_parameters(c.model))
        recs = self.run_arm_steps(c.model, [batch], spec, c.cmp, steps=1, warmup=0, optimizer=cap,
                                  reset=c.reset_weights, options=options, precision=precision)
        return {"loss": recs[0].loss, "grads": cap.grads}

    def _fp32_reference(self, c: "_Comparison", why: str) -> dict:
        """The baseline arm's fp32 run on the first batch, made once per comparison (when an arm needs it)."""
        from workbench.measure import equivalence

        if c.ref32 is None:
            cmp = c.cmp
            self._progress(f"{c.tag} {why}: judging against an fp32 run of {cmp.baseline}")
            ref_opts = self.reference_options(cmp, c.ran_attn)
            c.ref32 = self.reference_fp32(
                c.model, lambda b: self._one_step(c, c.base_spec, b, ref_opts, equivalence.REFERENCE_PRECISION),
                c.cpu_batches[0], cmp=cmp, spec=c.base_spec, options=ref_opts)
            c.ref32["attn"] = next((v["backend"] for v in ref_opts.values()
                                    if isinstance(v, dict) and "backend" in v), c.ran_attn)
        return c.ref32

    def _judge_same(self, c: "_Comparison", label: str, res: dict, ref: dict, changes: str | None) -> dict:
        """The normal criterion of one arm's step `res` against the baseline's `ref`: within the numerics tolerance
        against fp32 for an arm that changes the numerics on purpose (`changes`), else `equivalence.compare`, and in
        low precision, where that fails, against an fp32 run of the baseline."""
        from workbench.measure import equivalence, numerics

        if changes:
            e = numerics.judge(res, ref, self._fp32_reference(c, f"{label} changes the numerics"), changes)
            self._progress(f"{c.tag} {label}: {numerics.line(e['numerics_change'])}")
            return e
        e = equivalence.compare(res, ref, c.dtype)
        if not e["equivalent"] and c.dtype in equivalence.LOW_PRECISION:
            ref32 = self._fp32_reference(c, f"{label} differs from {c.cmp.baseline} beyond the {c.dtype} criterion")
            e.update(equivalence.judge_by_reference(res, ref, ref32, c.dtype))
            e["ref_chunks"] = ref32["chunks"]
            e["ref_attn"] = ref32["attn"]
        return e

    def _judge_different(self, c: "_Comparison", spec, res: dict, ref: dict, different: dict,
                         changes: str | None) -> dict:
        """An arm that computes a different function by design (`numerics.judge_different`): its own code path
        with the change switched off (each module's DIFFERENT_FUNCTION `off` options) run once more on the same batch
        and judged by the normal criterion, then the arm's own step checked for a finite loss and finite, non-zero
        LoRA gradients."""
        from workbench.measure import numerics

        off_label = f"{spec.label} (change off)"
        res_off = self._one_step(c, spec, c.cpu_batches[0], numerics.off_options(different, self.options(c.cmp)))
        e_off = self._judge_same(c, off_label, res_off, ref, changes)
        self._progress(f"{c.tag} equivalence {off_label}: {'ok' if e_off['equivalent'] else 'DIFFERS'} "
                       f"(bitwise {e_off['bitwise']}, loss diff {e_off['loss_abs_diff']:.3g}, "
                       f"grad max rel L2 {e_off['grad_max_rel_l2']:.3g})")
        why = "; ".join(f"{opt}: {d['why']}" for opt, d in different.items())
        e = numerics.judge_different(res, ref, e_off, why)
        self._progress(f"{c.tag} {spec.label}: {numerics.different_line(e['different_function'])}")
        return e

    def phase_equivalence(self, c: "_Comparison") -> None:
        from workbench.measure import numerics

        cmp, ref = c.cmp, None
        for spec in c.runnable:
            try:
                res = self._one_step(c, spec, c.cpu_batches[0])
                changes = optimizations.numerics_change(spec.arms)  # an arm that changes the numerics on purpose (bf16)
                different = optimizations.different_functions(spec.arms)  # one that computes another function by design
                why = None if different else nonfinite(res)  # a different function's own check B judges finiteness
                if why:  # a non-finite step is never "equivalent": the arm fails here
                    raise WorkbenchError(f"diverged at step 1 (the equivalence step): {why}")
                if spec.label == cmp.baseline:
                    ref = res
                    e = {"equivalent": True, "bitwise": True, "loss_abs_diff": 0.0, "grad_max_abs_diff": 0.0,
                         "grad_max_rel_l2": 0.0}
                elif ref is None:
                    e = None
                elif different:
                    e = self._judge_different(c, spec, res, ref, different, changes)
                else:
                    e = self._judge_same(c, spec.label, res, ref, changes)
            except Exception as ex:  # noqa: BLE001 - one arm's failure must not stop the others
                self._arm_failed(cmp, spec, ex, c.arm_status, c.out)
                continue
            c.arm_status[spec.label]["loss"] = res["loss"]
            if e is None:
                continue
            c.equiv[spec.label] = e
            self.writer.add(cmp.name, spec.label, "equiv_loss_abs_diff", e["loss_abs_diff"], "nats", **c.env)
            self.writer.add(cmp.name, spec.label, "equiv_grad_max_rel_l2", e["grad_max_rel_l2"], "ratio", **c.env)
            self.writer.add(cmp.name, spec.label, "equivalent", int(e["equivalent"]), "bool", **c.env)
            if "different_function" in e:
                self.writer.add(cmp.name, spec.label, "different_function_passed",
                                int(e["different_function"]["passed"]), "bool", **c.env)
                continue
            via = (f"; against fp32 ({e['ref_chunks']} chunk(s) of the batch): grad rel L2 "
                   f"{e['ref_grad_max_rel_l2']:.3g} vs the baseline's {e['ref_grad_max_rel_l2_baseline']:.3g}, "
                   f"worst ratio {e['ref_worst_ratio']:.2f} ({e['ref_worst_grad']})") if "judged_by" in e else ""
            self._progress(f"{c.tag} equivalence {spec.label}: {'ok' if e['equivalent'] else 'DIFFERS'} "
                           f"(bitwise {e['bitwise']}, loss diff {e['loss_abs_diff']:.3g}, "
                           f"grad max rel L2 {e['grad_max_rel_l2']:.3g}{via})")
        c.ref32 = None
        self.writer.flush()
        c.live = [s for s in c.runnable if c.arm_status[s.label]["status"] == "ok"]

    # -- timing: the engine (rotated order, settled warmup, uninstrumented steps, paired CI) ----------------------
    def phase_timing(self, c: "_Comparison") -> None:
        from tqdm import tqdm

        from workbench.measure import engine

        a, cmp, env, tag = self.args, c.cmp, c.env, c.tag
        specs = {s.label: s for s in c.live}

        def open_session(label):
            return self.session(c.model, c.cpu_batches, specs[label], cmp, reset=c.reset_weights, infos=c.infos)

        # a progress bar on a terminal; one line per timed step in a log (stderr not a terminal)
        bar = tqdm(total=len(c.live) * (a.max_reps if a.target_ci_pct else a.reps) * a.steps,
                   desc=f"{tag} timed steps", unit="step", file=sys.stderr, disable=not sys.stderr.isatty(),
                   dynamic_ncols=True)

        def on_sample(s):
            self.writer.add_sample(cmp.name, s, **env)
            bar.update(1)
            bar.set_postfix_str(f"rep {s['rep'] + 1} {s['arm']} {s['step_ms']:.0f} ms"
                                + (f", {self.budget.suffix()}" if self.budget is not None else ""), refresh=False)
            if bar.disable:
                self._progress(f"{tag} rep {s['rep'] + 1} {s['arm']}: step {s['step'] + 1}/{a.steps} "
                               f"(batch {s['batch']}) {s['step_ms']:.1f} ms")

        def on_warmup(w):
            for i, ms in enumerate(w.step_ms):
                self.writer.add(cmp.name, w.arm, "warmup_step_ms", ms, "ms", rep=w.rep, step=i,
                                batch=i % a.data.batches, **env)
            self.writer.add(cmp.name, w.arm, "warmup_steps", w.steps, "count", rep=w.rep, **env)
            self.writer.add(cmp.name, w.arm, "warmup_settled", int(w.settled), "bool", rep=w.rep, **env)
            self._progress(f"{tag} rep {w.rep + 1} {w.arm}: warmup {w.steps} steps, " + (
                "settled" if w.settled else
                f"not settled (cap reached: no step came within --settle-pct {a.settle_pct:g}% of the previous one on "
                f"its batch in --warmup-max {a.warmup_max} steps; timed anyway"
                + (", as expected of CPU timings" if self.device.type != "cuda" else "") + ")"))

        def on_rep(rep, r):
            self.writer.flush()
            if r is not None and r.get("ci95"):
                v = timing_on(r, self.device.type)["verdict"]
                self._progress(f"{tag} after rep {rep}: speedup {r['speedup']:.4f} "
                               f"[{r['ci95'][0]:.4f}, {r['ci95'][1]:.4f}] (n={r['n_units']} reps) {v}")

        if c.base_spec is not None and c.arm_status[cmp.baseline]["status"] == "ok" and len(c.live) >= 1:
            c.m = engine.measure([s.label for s in c.live], open_session, a.data.batches, self.timing_protocol(),
                                 baseline=cmp.baseline,
                                 optimized=cmp.optimized if cmp.optimized in specs else None,
                                 on_sample=on_sample, on_warmup=on_warmup, on_rep=on_rep)
            if self.budget is not None:
                self.budget.end_timing(c.m.reps, len(c.live), engine.floor_reps(c.m.protocol, len(c.live)),
                                       c.m.protocol.discard_reps)
            bar.close()
            for d in c.m.discarded:  # the warm-up rep: recorded (rep -1), never a `step_ms` row, never a statistic
                self.writer.add(cmp.name, d["arm"], "discarded_step_ms", d["step_ms"], "ms", rep=-1, step=d["step"],
                                batch=d["batch"], **env)
            for label, e in c.m.failed.items():
                self._arm_failed(cmp, specs[label], e, c.arm_status, c.out)
            for label, why in diverged(c.m.samples).items():  # a non-finite loss: that arm fails, never "equivalent"
                self._arm_failed(cmp, specs[label], WorkbenchError(why), c.arm_status, c.out)
            c.out["protocol"] = {"reps": c.m.reps, "stopped_by": c.m.stopped_by, "steps": a.steps,
                                 "batches": a.data.batches, "discarded_reps": c.m.protocol.discard_reps,
                                 "order": "williams"}
            self.writer.add(cmp.name, None, "reps", c.m.reps, "count", **env)
        self.writer.flush()

    # -- the counted pass: the sync counter on, one step per batch, separate from the timings ----------------------
    def phase_counted_pass(self, c: "_Comparison") -> None:
        from workbench.instrument import SyncCounter

        a, cmp = self.args, c.cmp
        for spec in c.live:
            if c.arm_status[spec.label]["status"] != "ok":
                continue
            try:
                with self.session(c.model, c.cpu_batches, spec, cmp, reset=c.reset_weights) as s:
                    recs = []
                    for i in range(a.data.batches):
                        counter = SyncCounter(cross_check=a.cross_check, device_type=self.device.type)
                        r = s.step(i, i, counter=counter)
                        recs.append(r)
                        self.writer.add_sample(cmp.name, {**r.as_row(), "arm": spec.label, "batch": i},
                                               prefix="instrumented_", **c.env)
                c.counted[spec.label] = recs
                self._progress(f"{c.tag} counted pass {spec.label}: "
                               f"{sum(r.syncs for r in recs) / len(recs):.1f} syncs/step")
            except Exception as e:  # noqa: BLE001
                self._arm_failed(cmp, spec, e, c.arm_status, c.out)
        self.writer.flush()

    # -- traces: separate profiled passes (workbench.ab.passes) ---------------------------------------------------
    def phase_traces(self, c: "_Comparison") -> None:
        if self.args.trace == "torch":
            c.events = self.torch_traces(c.model, c.cpu_batches, c.cmp, c.live, c.arm_status, c.reset_weights,
                                         c.env)
        elif self.args.trace == "nsys":
            with _Parked(c.model, self.device):  # each capture is a child process that builds its own model
                c.events = self.nsys_traces(c.cmp, c.live, c.arm_status)

    # -- summary: per-arm dicts, the speedups, equivalence, the comparison's status ---------------------------------
    def arm_flops(self, c: "_Comparison", label: str) -> list[dict]:
        """`flops.arm_batch_flops` of each batch for arm `label`, counted with the attention it ran (`session`
        records it; an arm that never ran: the comparison's); [] where this model's config does not fit the count."""
        from workbench.step import flops
        from workbench.step.models import base_model_of

        key = c.arm_attention.get(label, (c.built_attn, None))
        if key not in c.flops_by_attention:
            try:
                cfg = base_model_of(c.model).config
                counts = flops.param_counts(c.model)  # NeMo's LoRA convention (mfu_nemo) needs r = trainable / frozen
                c.flops_by_attention[key] = [
                    flops.arm_batch_flops(cfg, b.doc_lens, attn_implementation=key[0], attention=key[1],
                                          lora_rank=self.args.step.lora_rank,
                                          checkpointing=self.args.step.checkpointing, **counts) for b in c.cpu_batches]
            except Exception as e:  # noqa: BLE001 - a count this model's config does not fit must not stop the run
                c.flops_by_attention[key] = []
                self._progress(f"{c.tag} no FLOP count for {label}: {type(e).__name__}: {e}")
        return c.flops_by_attention[key]

    def phase_summary(self, c: "_Comparison") -> dict:
        from workbench.measure import engine, numerics

        cmp, out, m, equiv, arm_status = c.cmp, c.out, c.m, c.equiv, c.arm_status
        samples = m.samples if m is not None else []
        arm_dicts = {}
        for spec in cmp.arms:
            arm_dicts[spec.label] = self._arm_summary(spec.label, samples, m, c.counted.get(spec.label, []),
                                                      arm_status, c.infos.get(spec.label, {}), equiv.get(spec.label),
                                                      c.events, self.arm_flops(c, spec.label),
                                                      c.arm_attention.get(spec.label, (c.built_attn,))[0])
            if spec.label != cmp.baseline and m is not None and arm_status[spec.label]["status"] == "ok":
                r = timing_on(engine.paired_comparison(samples, cmp.baseline, spec.label), self.device.type)
                arm_dicts[spec.label]["vs_baseline"] = r
                self._rows_for_comparison(cmp, spec.label, r, c.env)
        out["baseline"] = arm_dicts[cmp.baseline]
        out["optimized"] = arm_dicts[cmp.optimized] if cmp.optimized else None
        out["others"] = [arm_dicts[s.label] for s in cmp.arms if s.label not in (cmp.baseline, cmp.optimized)]
        out["equivalence"] = equiv
        out["numerics_change"] = {lbl: e["numerics_change"] for lbl, e in equiv.items() if "numerics_change" in e}
        for lbl, nc in out["numerics_change"].items():
            arm_dicts[lbl]["numerics_change"] = nc
        out["different_function"] = {lbl: e["different_function"] for lbl, e in equiv.items()
                                     if "different_function" in e}
        for lbl, df in out["different_function"].items():
            arm_dicts[lbl]["different_function"] = df
        o = out["optimized"]
        if o is not None and o.get("vs_baseline"):
            r = o["vs_baseline"]
            out.update(speedup=r["speedup"], speedup_ci95=r["ci95"], verdict=r["verdict"], n_pairs=r["n_pairs"],
                       n_reps=r["n_units"], outlier_pairs=r["outlier_pairs"],
                       variance_components=r["variance_components"])
            b_ms, o_ms, reps = engine.pairs(samples, cmp.baseline, cmp.optimized)
            if b_ms:
                from workbench.measure import stats
                out["savings_model"]["measured_ms"] = stats.paired_difference(b_ms, o_ms, reps)["mean"]
        ran_all = all(arm_status[s.label]["status"] in ("ok", "skipped") for s in cmp.arms)
        judged = [equiv.get(s.label, {}) for s in cmp.arms if arm_status[s.label]["status"] == "ok"]
        out["equivalent"] = bool(ran_all and equiv and all(e.get("equivalent", False) for e in judged))
        accepted = bool(ran_all and equiv and all(numerics.accepted(e) for e in judged))
        for s in cmp.arms:
            e = equiv.get(s.label)
            if e is not None and "different_function" in e and not e["different_function"]["passed"]:
                msg = f"{cmp.name} arm {s.label}: {numerics.different_line(e['different_function'])}"
                self.failures.append(msg)
                out["errors"].append(msg)
            elif e is not None and not e["equivalent"] and "different_function" not in e:
                msg = (f"{cmp.name} arm {s.label} is not equivalent to {cmp.baseline}: loss diff "
                       f"{e['loss_abs_diff']:.3g}, grad max rel L2 {e['grad_max_rel_l2']:.3g}"
                       + (f" (against fp32: worst ratio {e['ref_worst_ratio']:.2f})" if "judged_by" in e else "")
                       + (f"; {numerics.line(e['numerics_change'])}" if "numerics_change" in e else ""))
                self.failures.append(msg)
                out["errors"].append(msg)
        if not ran_all or not accepted or m is None:
            out["status"] = "failed"
        sm = out["savings_model"]
        for k in ("predicted_ms", "measured_ms"):
            if sm.get(k) is not None:
                self.writer.add(cmp.name, cmp.optimized, f"savings_{k}", sm[k], "ms", **c.env)
        self.writer.flush()
        return out

    def _rows_for_comparison(self, cmp, label, c, env):
        summary.speedup_rows(self.writer, cmp, label, c, env)

    def _arm_failed(self, cmp, spec, e, arm_status, out):
        if arm_status.get(spec.label, {}).get("status") == "failed":
            return
        oom = isinstance(e, torch.OutOfMemoryError) or "out of memory" in str(e).lower()
        first = (str(e).strip().splitlines() or [""])[0][:300]
        reason = f"out of memory: {first}" if oom else f"{type(e).__name__}: {first}"
        if isinstance(e, WorkbenchError):
            reason = str(e)
        arm_status[spec.label] = {"status": "failed", "error": reason}
        msg = f"{cmp.name} arm {spec.label} failed: {reason}"
        self.failures.append(msg)
        out["errors"].append(msg)
        progress(f"error: {msg}")
        with open(self.writer.path("errors.log"), "a") as f:
            f.write(f"--- {msg}\n{''.join(traceback.format_exception(e))}\n")
        _free(self.device)

    def _nvml_of(self, m, label) -> dict:
        return summary.nvml_of(self.nvml, m, label)

    def _arm_summary(self, label, samples, m, counted, arm_status, info, equiv, events, batch_flops=(),
                     attention_impl=None) -> dict:
        return summary.arm_summary(self, label, samples, m, counted, arm_status, info, equiv, events,
                                   batch_flops=batch_flops, attention_impl=attention_impl)

    # -- traces (workbench.ab.passes) -----------------------------------------------------------------------------
    def torch_traces(self, model, cpu_batches, cmp, runnable, arm_status, reset_weights, env) -> dict:
        return passes.torch_traces(self, model, cpu_batches, cmp, runnable, arm_status, reset_weights, env)

    def nsys_traces(self, cmp, runnable, arm_status) -> dict:
        return passes.nsys_traces(self, cmp, runnable, arm_status)


def nonfinite(res: dict) -> str | None:
    """Why one step's {loss, grads} is not finite (`loss nan`, `gradient of NAME inf`), or None."""
    import math
    loss = res.get("loss")
    if loss is not None and not math.isfinite(float(loss)):
        return f"loss {float(loss)}"
    for name, g in (res.get("grads") or {}).items():
        if g is not None and not bool(torch.isfinite(g).all()):
            return f"a non-finite gradient of {name}"
    return None


def diverged(samples) -> dict:
    """{arm: `diverged at timed step N (rep R): loss nan`} for each arm whose timed steps record a non-finite loss,
    N counting that arm's timed steps from 1 in the order they ran."""
    import math
    seen, out = {}, {}
    for s in samples:
        arm = s["arm"]
        seen[arm] = seen.get(arm, 0) + 1
        loss = s.get("loss")
        if arm not in out and loss is not None and not math.isfinite(float(loss)):
            out[arm] = f"diverged at timed step {seen[arm]} (rep {s.get('rep', 0) + 1}): loss {float(loss)}"
    return out
