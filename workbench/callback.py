"""Profile a user's own training run: `WorkbenchCallback`, a `transformers.TrainerCallback` for `Trainer` and TRL's
`SFTTrainer`, which writes the run folder the A/B writes (`workbench.measure.results`).

    from workbench import WorkbenchCallback
    trainer = SFTTrainer(model=model, args=cfg, train_dataset=ds, callbacks=[WorkbenchCallback("runs/my_run")])
    trainer.train()
    #   python -m workbench.report runs/my_run       (or `workbench.analysis` on the folder)

Over a window of the run's optimizer steps, after `start_step` untouched steps (compiles, allocator warm-up), it runs
separate passes, so no timing carries an instrument (the A/B's rule):

- timed: `2 * pairs` steps, alternating `plain` (the user's step; the callback only reads the clock) and `ranges`
  (decoder layers carrying the NVTX ranges `wb/Lxx/{fwd,attn,mlp,bwd,recompute}`, `workbench.instrument.ranges`),
  the order swapped every other pair. Each step's wall clock runs from `on_step_begin` to `on_step_end`
  (synchronized at both ends on CUDA) -> results.csv `step_ms` rows, `rep` the pair, `batch` the step (each step
  its own batch); comparison `trainer`'s speedup `plain` / `ranges` (the adjacent pair is the unit,
  `stats.paired_speedup`) is the cost of the ranges on this step. The analysis reads it as an NVTX-cost comparison
  paired on the rep (`workbench.measure.results.CALLBACK_COMPARISON`).
- counted: `count_steps` steps under the sync counter (`workbench.instrument.syncs`) -> `syncs` rows, their step
  time as `instrumented_step_ms` (the counter's own cost, never a timing); the arm's `syncs_per_step`,
  `sync_sources_per_step`, and the comparison's `syncs_by_layer` (per step, by layer and pass).
- traced (`trace=True`): one step under torch.profiler with the ranges -> `traces/trainer/plain.pt.trace.json.gz`
  and its events; on a GPU the arm's `breakdown` (components, top kernels, the levers they name), as the A/B writes.

Outside the window every hook returns at once; the layers are restored when the window ends. A CPU run records counts
(syncs, tokens) and no timing verdict (`stats.timing_on`).
"""
from __future__ import annotations

import os
import time

import torch
from transformers import TrainerCallback

from workbench.instrument import state
from workbench.instrument.ranges import Ranges, instrument_layers
from workbench.instrument.syncs import SyncCounter
from workbench.measure import stats
from workbench.errors import WorkbenchError
from workbench.measure.results import (CALLBACK_COMPARISON as COMPARISON, RunWriter, check_out_dir, clear_run_files,
                                       device_info, new_run_id)

PLAIN, RANGES = "plain", "ranges"


class WorkbenchCallback(TrainerCallback):
    """Profile `start_step` .. the window's end of a Trainer run into `out_dir` (the module docstring).

    pairs: plain / ranges step pairs timed (their cost: `2 * pairs` steps). count_steps: steps under the sync counter.
    trace: one torch.profiler step after them. optimizations: the `apply_optimizations` handle the model runs with
    (recorded in meta.json). force: write into a folder that already holds a run."""

    def __init__(self, out_dir: str, *, start_step: int = 2, pairs: int = 4, count_steps: int = 1,
                 trace: bool = False, optimizations=None, force: bool = False):
        if start_step < 0 or pairs < 0 or count_steps < 0 or pairs + count_steps + int(bool(trace)) == 0:
            raise WorkbenchError("WorkbenchCallback: start_step >= 0, and at least one pair, counted or traced step")
        try:
            check_out_dir(out_dir, force=force)
        except WorkbenchError as e:
            raise WorkbenchError("WorkbenchCallback: " + str(e).replace("--out ", "").replace(
                "add --force", "pass force=True")) from None
        if force and os.path.isdir(out_dir):
            clear_run_files(out_dir)
        self.out_dir, self.start_step, self.pairs, self.count_steps = out_dir, start_step, pairs, count_steps
        self.trace, self.optimizations = bool(trace), optimizations
        self.plan = [PLAIN, RANGES, RANGES, PLAIN] * (pairs // 2) + [PLAIN, RANGES] * (pairs % 2)
        self.plan += ["counted"] * count_steps + (["traced"] if trace else [])
        """What each step of the window does, in order."""
        self.model = None
        self._step = None
        self._hooks, self._layers, self._counter, self._ranges_ctx, self._prof = [], None, None, None, None
        self._t0 = 0.0
        self._tokens = 0
        self._loss = None
        self.records: list[dict] = []
        """One dict per window step: kind, step_ms, tokens, loss, syncs (counted)."""
        self.done = False

    # -- which step of the window -------------------------------------------------------------------------------
    def _kind(self, global_step: int) -> str | None:
        i = global_step - self.start_step
        return self.plan[i] if 0 <= i < len(self.plan) else None

    # -- Trainer events -----------------------------------------------------------------------------------------
    def on_train_begin(self, args, state_, control, model=None, **kw):
        self.model = model
        self._device = next(model.parameters()).device

    def on_step_begin(self, args, state_, control, **kw):
        kind = self._kind(state_.global_step)
        self._step = kind
        if kind is None:
            return
        if kind != PLAIN:
            self._layers = instrument_layers(self.model)
        self._tokens, self._loss = 0, None
        self._hooks = [self.model.register_forward_pre_hook(self._pre_forward, with_kwargs=True),
                       self.model.register_forward_hook(self._post_forward)]
        if kind in (RANGES, "traced"):
            self._ranges_ctx = Ranges(nvtx=True, profiler=kind == "traced").activate()
            ranges = self._ranges_ctx.__enter__()
        if kind == "traced":
            from workbench.measure.engine import profiler_activities
            acts, pkw = profiler_activities(self._device)
            self._prof = torch.profiler.profile(activities=acts, record_shapes=False, with_stack=False, **pkw)
            self._prof.__enter__()
            self._step_token = ranges.push("wb/step")
        if self._device.type == "cuda":
            torch.cuda.synchronize(self._device)
            torch.cuda.reset_peak_memory_stats(self._device)
        if kind == "counted":
            self._counter = SyncCounter(device_type=self._device.type).__enter__()
        self._t0 = time.perf_counter()

    def on_pre_optimizer_step(self, args, state_, control, **kw):
        if self._step is not None:
            state.pass_name = state.OPTIMIZER

    def on_step_end(self, args, state_, control, **kw):
        kind = self._step
        if kind is None:
            return
        if self._device.type == "cuda":
            torch.cuda.synchronize(self._device)
        step_ms = (time.perf_counter() - self._t0) * 1e3
        rec = {"kind": kind, "step": state_.global_step, "step_ms": step_ms, "tokens": self._tokens}
        if self._counter is not None:
            self._counter.__exit__(None, None, None)
            c, self._counter = self._counter, None
            rec.update(syncs=c.total, syncs_declared=c.declared, by_source=c.by("source"),
                       by_layer_pass=c.by("layer", "pass_"))
        if self._prof is not None:
            Ranges.active().pop(self._step_token)
            self._prof.__exit__(None, None, None)
            rec["trace"] = self._save_trace(self._prof)
            self._prof = None
        if self._ranges_ctx is not None:
            self._ranges_ctx.__exit__(None, None, None)
            self._ranges_ctx = None
        if self._device.type == "cuda":
            rec["peak_mem_mib"] = torch.cuda.max_memory_allocated(self._device) / 2**20
        for h in self._hooks:
            h.remove()
        self._hooks = []
        if self._layers is not None:
            self._layers.revert()
            self._layers = None
        state.reset()
        rec["loss"] = float(self._loss) if self._loss is not None else None  # after the clock and the counter
        self.records.append(rec)
        self._step = None
        if len(self.records) == len(self.plan):
            self.write()

    def on_train_end(self, args, state_, control, **kw):
        if not self.done and self.records:
            self.write(status="incomplete", reason=f"the run ended after {len(self.records)} of the window's "
                                                   f"{len(self.plan)} steps")

    # -- model hooks (window steps only) ------------------------------------------------------------------------
    def _pre_forward(self, module, args, kwargs):
        state.pass_name = state.FORWARD
        ids = kwargs.get("input_ids", args[0] if args else None)
        if isinstance(ids, torch.Tensor):
            self._tokens += int(ids.numel())

    def _post_forward(self, module, args, out):
        state.pass_name = state.BACKWARD  # loss scaling, backward and its recompute run until the optimizer step
        loss = getattr(out, "loss", None)
        if isinstance(loss, torch.Tensor):
            self._loss = loss.detach()

    # -- the run folder -----------------------------------------------------------------------------------------
    def _save_trace(self, prof) -> str:
        path = os.path.join(self.out_dir, "traces", COMPARISON, f"{PLAIN}.pt.trace.json.gz")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = path + ".tmp.json.gz"
        prof.export_chrome_trace(tmp)
        os.replace(tmp, path)
        return path

    def _describe(self) -> dict:
        from workbench.step.models import base_model_of
        cfg = base_model_of(self.model).config
        return {"model": getattr(cfg, "_name_or_path", None) or cfg.model_type,
                "layers": getattr(cfg, "num_hidden_layers", None),
                "attn": getattr(cfg, "_attn_implementation", None)}

    def write(self, status: str = "complete", reason: str | None = None) -> str:
        """Write results.csv, summary.json and meta.json from the window's steps; returns the folder."""
        recs = self.records
        device = self._device
        desc = self._describe()
        tokens = [r["tokens"] for r in recs if r["tokens"]]
        run_id = new_run_id("trainer")
        opts = None if self.optimizations is None else {h.opt: h.arm for h in self.optimizations.handles}
        w = RunWriter(self.out_dir, run_id, env={"opt": COMPARISON, "device": str(device), "model": desc["model"],
                                                 "layers": desc["layers"], "tokens": max(tokens) if tokens else None,
                                                 "attn": desc["attn"]},
                      extra_meta={"source": "workbench.callback.WorkbenchCallback", "device": device_info(device),
                                  "args": {"start_step": self.start_step, "pairs": self.pairs,
                                           "count_steps": self.count_steps, "trace": self.trace},
                                  "optimizations": opts})
        for k, r in enumerate(recs):
            arm = r["kind"] if r["kind"] in (PLAIN, RANGES) else PLAIN
            metric = "step_ms" if r["kind"] in (PLAIN, RANGES) else f"instrumented_{r['kind']}_step_ms"
            pair = sum(1 for x in recs[:k] if x["kind"] == r["kind"]) if r["kind"] in (PLAIN, RANGES) else None
            w.add(COMPARISON, arm, metric, r["step_ms"], "ms", rep=pair, step=r["step"], batch=r["step"])
            for m, unit in (("tokens", "tokens"), ("loss", "nats"), ("peak_mem_mib", "MiB"), ("syncs", "count"),
                            ("syncs_declared", "count")):
                if r.get(m) is not None:
                    w.add(COMPARISON, arm, m, r[m], unit, rep=pair, step=r["step"], batch=r["step"])
        plain = [r["step_ms"] for r in recs if r["kind"] == PLAIN]
        ranged = [r["step_ms"] for r in recs if r["kind"] == RANGES]
        counted = [r for r in recs if r["kind"] == "counted"]
        arm_plain = _arm(PLAIN, plain, [r for r in recs if r["kind"] == PLAIN], tokens)
        if counted:
            n = len(counted)
            arm_plain["syncs_per_step"] = sum(r["syncs"] for r in counted) / n
            arm_plain["instrumented_step_ms"] = sum(r["step_ms"] for r in counted) / n
            src: dict = {}
            for r in counted:
                for s, v in r["by_source"].items():
                    src[s] = src.get(s, 0) + v / n
            arm_plain["sync_sources_per_step"] = src
        comp = {"name": COMPARISON, "opt": COMPARISON, "status": "ok", **desc,
                "tokens": max(tokens) if tokens else None, "baseline": arm_plain, "optimized": None, "others": [],
                "equivalent": True, "optimizations": opts}
        if ranged:
            comp["optimized"] = _arm(RANGES, ranged, [r for r in recs if r["kind"] == RANGES], tokens)
            n = min(len(plain), len(ranged))
            ps = stats.timing_on(stats.paired_speedup(plain[:n], ranged[:n]), device.type)
            comp.update(speedup=ps["speedup"], speedup_ci95=ps["ci95"], verdict=ps["verdict"], n_pairs=ps["n_pairs"])
            comp["optimized"]["vs_baseline"] = {"speedup": ps["speedup"], "ci95": ps["ci95"], "verdict": ps["verdict"]}
        if counted:
            by: dict = {}
            for r in counted:
                for (layer, pass_), v in r["by_layer_pass"].items():
                    by.setdefault(layer, {})
                    by[layer][pass_] = by[layer].get(pass_, 0) + v / len(counted)
            comp["syncs_by_layer"] = by
        traced = [r for r in recs if r.get("trace")]
        if traced:
            comp["breakdown"] = _breakdown(traced[0]["trace"], self.out_dir, desc)
        w.write_summary({"run_id": run_id, "device": str(device), "complete": status == "complete",
                         "comparisons": [comp]})
        w.finish(status, **({"reason": reason} if reason else {}))
        self.done = True
        return self.out_dir


def _arm(name: str, step_ms: list, recs: list, tokens: list) -> dict:
    s = stats.summarize(step_ms) if step_ms else {}
    losses = [r["loss"] for r in recs if r.get("loss") is not None]
    mean_ms = sum(step_ms) / len(step_ms) if step_ms else None
    mean_tok = sum(tokens) / len(tokens) if tokens else None
    return {"arm": name, "step_ms": s.get("median"), "step_ms_p20": s.get("p20"), "step_ms_p80": s.get("p80"),
            "step_ms_mean": mean_ms, "n_steps": len(step_ms), "loss": losses[-1] if losses else None,
            "tokens_per_s": mean_tok / mean_ms * 1e3 if mean_ms and mean_tok else None,
            "peak_mem_mib": max((r["peak_mem_mib"] for r in recs if r.get("peak_mem_mib")), default=None)}


def _breakdown(trace_path: str, out_dir: str, desc: dict) -> dict:
    """{plain: {components, top_kernels, levers}} of the traced step, as `workbench.savings.verdicts` writes it for
    an A/B arm; {} when the trace holds no GPU kernel (a CPU run)."""
    from workbench.traces import decompose, from_torch_trace
    from workbench.traces.events import save_events
    from workbench.traces.lever_advice import experts_of, levers
    ev = from_torch_trace(trace_path)
    save_events(ev, os.path.join(out_dir, "traces", COMPARISON, PLAIN))
    if not (ev["kind"] == "kernel").any():
        return {}
    comps = decompose.summary(ev).to_dict("records")
    top = decompose.top_kernels(ev, 8).to_dict("records")
    return {PLAIN: {"components": comps, "top_kernels": top,
                    "levers": levers(comps, top_kernels=top, experts=experts_of(desc["model"], desc["layers"]))}}
