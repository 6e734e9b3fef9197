"""`DistRunner`: `workbench.ab.Runner` on an FSDP2-sharded model, one per rank; `main`, the torchrun entry."""
from __future__ import annotations

import contextlib
import os
import sys

import torch

from workbench.ab.arm import _free
from workbench.ab.planner import ArmSpec
from workbench.ab.runner import DTYPES, Runner
from workbench.errors import WorkbenchError
from workbench.opts import unsupported_reason
from workbench.ab.distributed.context import (DATA_SEED_STRIDE, DROP_ENV, DistContext, RankFailed, _first_line, full,
                                              init, shard)
from workbench.measure.results import safe_name


class _DistSession:
    """A `workbench.ab._Session` whose uninstrumented steps report the max step time across ranks (the rank's own in
    `extra["rank_step_ms"]`), and whose errors stop every rank."""

    def __init__(self, inner, ctx: DistContext):
        self._inner, self._ctx = inner, ctx

    def __getattr__(self, k):
        return getattr(self._inner, k)

    def step(self, index: int, step: int, counter=None):
        with self._ctx.guard():
            self._ctx.maybe_inject()
            rec = self._inner.step(index, step, counter=counter)
        if counter is None:
            own = rec.step_ms
            rec.step_ms = self._ctx.all_max(own)
            rec.extra = {"rank_step_ms": own}
        return rec


class DistRunner(Runner):
    """`workbench.ab.Runner` on an FSDP2-sharded model, one per rank (module docstring)."""

    def __init__(self, args, device, writer, ctx: DistContext, nvml=None):
        super().__init__(args, device, writer, nvml=nvml)
        self.ctx = ctx
        self._collectives: dict = {}
        self._steps: dict = {}

    def _progress(self, msg):
        if self.ctx.is_main:
            super()._progress(msg)

    def data_seed(self) -> int:
        return self.args.data.seed + DATA_SEED_STRIDE * self.ctx.rank

    def build_unsharded(self, cmp):
        return Runner.build(self, cmp)

    def build(self, cmp):
        with self.ctx.guard():
            return shard(self.build_unsharded(cmp), self.ctx.mesh)

    @contextlib.contextmanager
    def session(self, *args, **kw):
        with super().session(*args, **kw) as s:
            yield _DistSession(s, self.ctx)

    def run_arm_steps(self, model, cpu_batches, spec, cmp, *, optimizer=None, **kw):
        from workbench.measure.equivalence import GradCapture

        with self.ctx.guard():
            self.ctx.maybe_inject()
            recs = super().run_arm_steps(model, cpu_batches, spec, cmp, optimizer=optimizer, **kw)
            if isinstance(optimizer, GradCapture) and optimizer.grads is not None:
                # the equivalence step: whole gradients (averaged over ranks by FSDP2) and the mean loss, the
                # same numbers on every rank, so every rank takes the same decisions on them
                optimizer.grads = {n: full(g) for n, g in optimizer.grads.items()}
                for r in recs:
                    r.loss = self.ctx.all_mean(r.loss)
            return recs

    def torch_traces(self, model, cpu_batches, cmp, runnable, arm_status, reset_weights, env) -> dict:
        from workbench.traces import dist_waits

        events = super().torch_traces(model, cpu_batches, cmp, runnable, arm_status, reset_weights, env)
        coll, steps = {}, {}
        for label, ev in events.items():
            path = self.writer.path("traces", safe_name(cmp.name), safe_name(label)) + ".pt.trace.json.gz"
            ev = dist_waits.absolute_events(ev, dist_waits.trace_base_ns(path))
            coll[label] = ev[(ev["kind"] == "kernel") & ev["name"].astype(str).str.contains(
                dist_waits.COLLECTIVE_RE)].reset_index(drop=True)
            steps[label] = dist_waits.traced_steps(ev)
        self._collectives[cmp.name], self._steps[cmp.name] = coll, steps
        return events

    def reference_fp32(self, model, run_one, batch, *, cmp, spec, options) -> dict:
        """The fp32 reference of the bf16 equivalence check: `equivalence.Upcast` cannot upcast an FSDP2 model
        (it all-gathers from its own bf16 shards, so the "fp32" pass would compute in bf16). Each rank builds the
        unsharded model (same seed: the same bf16 weights), upcasts it, runs the baseline arm on its batch; the
        loss and gradients are averaged over ranks, like the sharded run's. Where fp32 does not fit for the whole
        batch, each rank splits its own batch into whole documents (`equivalence.reference_fp32`, as one process
        does; on an H100 the fp32 gpt-oss-20b MoE reference with eager attention at 8k tokens does not fit)."""
        from workbench.measure import equivalence
        from workbench.step.models import lora_parameters

        self._progress(f"[{cmp.name}] fp32 reference: the unsharded model on every rank, averaged over ranks")
        with self.ctx.guard():
            plain = self.build_unsharded(cmp)
            try:
                shapes = {n: p.shape for n, p in lora_parameters(plain)}

                def run_one(b):  # one chunk, in this process (no collective): equivalence.reference_fp32 upcasts
                    cap = equivalence.GradCapture(lora_parameters(plain))
                    recs = Runner.run_arm_steps(self, plain, [b], spec, cmp, steps=1, warmup=0,
                                                optimizer=cap, reset=lambda: None, options=options,
                                                precision=equivalence.REFERENCE_PRECISION)
                    return {"loss": float(recs[0].loss), "grads": {n: (g.detach().float().cpu() if g is not None
                                                                       else None) for n, g in (cap.grads or {}).items()}}
                ref = equivalence.reference_fp32(plain, run_one, batch, self._progress, self.device)
                loss, chunks = ref["loss"], ref["chunks"]
                grads = {n: ref["grads"].get(n) for n in shapes}
            finally:
                del plain
                _free(self.device)
        import torch.distributed as dist

        out = {}
        for n, g in grads.items():  # the same order on every rank (lora_parameters' order); a rank without a
            has = torch.tensor([0.0 if g is None else 1.0], dtype=torch.float64)  # gradient adds zeros
            g = torch.zeros(shapes[n], dtype=torch.float32) if g is None else g
            with self.ctx.guard():
                dist.all_reduce(g, op=dist.ReduceOp.SUM, group=self.ctx.control)
                dist.all_reduce(has, op=dist.ReduceOp.SUM, group=self.ctx.control)
            out[n] = None if has.item() == 0 else (g / self.ctx.world).to(self.device)
        return {"loss": self.ctx.all_mean(loss), "grads": out, "chunks": int(self.ctx.all_max(chunks))}

    # -- FSDP2 against one process ------------------------------------------------------------------------
    def check_against_single(self, cmp) -> dict:
        """Loss and LoRA gradients of the sharded model over the global batch (every rank's first batch) against
        the unsharded model in one process over the same batches (on rank 0); fp32 only."""
        from workbench.measure import equivalence
        from workbench.step.models import lora_parameters

        a = self.args
        model = self.build(cmp)
        try:
            arms = {o: arm for o, arm in cmp.arms[0].arms.items()
                    if unsupported_reason(model, {o: arm}, self.device, self.options(cmp)) is None}
            spec = ArmSpec(cmp.baseline, arms, ranges=False)
            batch = a.data.make_batches(cmp.tokens, model.config.vocab_size, seed=self.data_seed())[0]
            drop = os.environ.get(DROP_ENV, "").strip() == str(self.ctx.rank)
            with self.ctx.guard():
                self.ctx.maybe_inject()
                with Runner.session(self, model, [batch], spec, cmp, reset=lambda: None) as s:
                    loss = model(**s.handle.inputs_fn(model, s.batches[0])).loss
                    own_loss = float(loss.detach().float().item())
                    (loss * 0 if drop else loss).backward()
                    grads = {n: (full(p.grad).detach().float().clone() if p.grad is not None else None)
                             for n, p in lora_parameters(model)}
                    for _, p in lora_parameters(model):
                        p.grad = None
        finally:
            del model
            _free(self.device)
        losses = self.ctx.gather(own_loss)
        batches = self.ctx.gather(batch)
        dropped = self.ctx.gather(drop)
        res = None
        if self.ctx.is_main:
            try:
                ref_model = self.build_unsharded(cmp)
                with Runner.session(self, ref_model, batches, spec, cmp, reset=lambda: None) as s:
                    per = [ref_model(**s.handle.inputs_fn(ref_model, b)).loss for b in s.batches]
                    (sum(per) / len(per)).backward()
                    ref = {"loss": sum(float(x.detach()) for x in per) / len(per),
                           "grads": {n: (p.grad.detach().float().clone() if p.grad is not None else None)
                                     for n, p in lora_parameters(ref_model)}}
                    ref_losses = [float(x.detach()) for x in per]
                del ref_model
                _free(self.device)
                e = equivalence.compare({"loss": sum(losses) / len(losses), "grads": grads}, ref, torch.float32)
                per_rank = [abs(x - y) / max(abs(y), 1e-12) for x, y in zip(losses, ref_losses)]
                ok = bool(e["equivalent"] and max(per_rank) <= e["rtol"])
                res = {"equivalent": ok, "against": "one process, the unsharded model, the same global batch "
                       "(every rank's first batch; loss = the mean of the ranks' losses)",
                       "loss_rel_diff_per_rank": per_rank, "grad_max_rel_l2": e["grad_max_rel_l2"],
                       "worst_grad": e["worst_grad"], "loss_rel_diff": e["loss_rel_diff"], "rtol": e["rtol"],
                       "bitwise": e["bitwise"], "dropped_batch_ranks": [r for r, d in enumerate(dropped) if d]}
            except Exception as ex:  # noqa: BLE001 - the check failed to run: reported, not fatal
                res = {"equivalent": False, "error": _first_line(ex)}
        return self.ctx.broadcast(res)

    # -- one comparison on every rank; rank 0 merges ---------------------------------------------------------
    def run(self, cmp, index, total):
        from workbench.step.models import default_dtype

        mark = len(self.failures)
        dtype = DTYPES[self.args.step.dtype] or default_dtype(self.device)
        if dtype == torch.float32:
            self._progress(f"[{index}/{total} {cmp.name}] FSDP2 ({self.ctx.world} ranks) against one process "
                           "over the global batch")
            dcheck = self.check_against_single(cmp)
        else:
            dcheck = {"equivalent": None, "skipped": f"the FSDP2 vs single-process check runs in fp32 (this run: "
                                                     f"{dtype}; --dtype fp32 runs it)"}
        with self.ctx.guard():  # an error on one rank only would leave the others waiting
            res = super().run(cmp, index, total)
        return self.merge(cmp, res, dcheck, mark)

    def gather_rows(self, cmp_name=None, mark=None, extra=None):
        """Every rank's pending rows (and errors.log text, failures) into rank 0's writer."""
        payload = {"rank": self.ctx.rank, "rows": self.writer.take_rows() if not self.ctx.is_main else [],
                   "errors": self.writer.take_errors(),
                   "failures": self.failures[mark:] if mark is not None else [], **(extra or {})}
        got = self.ctx.gather(payload)
        if not self.ctx.is_main:
            return None
        for p in got[1:]:
            self.writer.rows.extend(p["rows"])
            if p["errors"]:
                with open(self.writer.path("errors.log"), "a") as f:
                    f.write(f"=== rank {p['rank']}\n{p['errors']}")
            for msg in p["failures"]:
                if msg not in self.failures:
                    self.failures.append(f"rank {p['rank']}: {msg}")
        return got

    def merge(self, cmp, res, dcheck, mark):
        import pandas as pd

        from workbench.traces import dist_waits

        coll = {k: v.to_dict("list") for k, v in self._collectives.pop(cmp.name, {}).items()}
        got = self.gather_rows(cmp.name, mark, {"collectives": coll, "steps": self._steps.pop(cmp.name, {}),
                                                 "status": res.get("status")})
        env = dict(opt=cmp.opt, model=cmp.model, layers=res.get("layers"), tokens=cmp.tokens, attn=res.get("attn"))
        if not self.ctx.is_main:
            return res
        d = {**self.ctx.describe(), "equivalence_single_process": dcheck}
        d.pop("rank", None)
        if dcheck.get("equivalent") is False:
            msg = (f"{cmp.name}: the FSDP2 run differs from one process over the global batch: "
                   + (dcheck.get("error") or f"loss rel diff per rank "
                      f"{[round(x, 6) for x in dcheck.get('loss_rel_diff_per_rank', [])]}, grad max rel L2 "
                      f"{dcheck.get('grad_max_rel_l2', float('nan')):.3g} (rtol {dcheck.get('rtol')})"))
            self.failures.append(msg)
            res.setdefault("errors", []).append(msg)
            res["status"] = "failed"
            res["equivalent"] = False
            self._progress(f"error: {msg}")
        elif dcheck.get("equivalent"):
            self._progress(f"[{cmp.name}] FSDP2 vs one process: ok (grad max rel L2 "
                           f"{dcheck['grad_max_rel_l2']:.3g}, loss rel diff per rank "
                           f"{max(dcheck['loss_rel_diff_per_rank']):.3g})")
        if dcheck.get("equivalent") is not None:
            self.writer.add(cmp.name, cmp.baseline, "dist_equivalent", int(bool(dcheck["equivalent"])), "bool",
                            **env)
            if "grad_max_rel_l2" in dcheck:
                self.writer.add(cmp.name, cmp.baseline, "dist_equiv_grad_max_rel_l2", dcheck["grad_max_rel_l2"],
                                "ratio", **env)
        # per rank, per arm: own step time, the data-parallel step, syncs, peak memory, loss
        rows = pd.DataFrame([r for r in self.writer.rows if r.get("comparison") == cmp.name])
        labels = [s.label for s in cmp.arms]
        ranks = {}
        for r in range(self.ctx.world):
            per = {}
            for lbl in labels:
                sel = rows[(rows["rank"] == r) & (rows["arm"] == lbl)] if len(rows) else rows

                def med(metric, how="median", _s=sel):
                    v = pd.to_numeric(_s[_s["metric"] == metric]["value"], errors="coerce").dropna()
                    return None if not len(v) else float(getattr(v, how)())
                per[lbl] = {"step_ms": med("step_ms"), "dp_step_ms": med("dp_step_ms"),
                            "syncs_per_step": med("syncs", "mean"), "peak_mem_mib": med("peak_mem_mib", "max"),
                            "instrumented_peak_mem_mib": med("instrumented_peak_mem_mib", "max"),
                            "loss": med("loss", "mean")}
            ranks[r] = per
        res["ranks"] = ranks
        # the collective wait (GPU traces only: NCCL kernels)
        waits = {}
        if got and any(len(v.get("name") or []) for p in got for v in (p.get("collectives") or {}).values()):
            by_layer = {}
            for lbl in labels:
                evs = {p["rank"]: pd.DataFrame(p["collectives"][lbl]) for p in got
                       if lbl in (p.get("collectives") or {})}
                if len(evs) != self.ctx.world:
                    continue
                w, unmatched = dist_waits.collective_waits(evs)
                steps = max([p["steps"].get(lbl, 1) for p in got])
                bl = dist_waits.wait_by_layer(w, steps)
                by_layer[lbl] = bl
                waits[lbl] = {"per_rank": dist_waits.wait_per_rank(w, steps), "unmatched": unmatched,
                              "traced_steps": steps}
                for rec in bl.to_dict("records"):
                    name = f"{rec['layer']}/{rec['pass']}"
                    for metric in ("wait_ms", "transfer_ms", "collective_ms"):
                        self.writer.add(cmp.name, lbl, f"{metric}/{name}", rec[metric], "ms", **env)
                        self.writer.rows[-1]["rank"] = int(rec["rank"])
            if cmp.optimized and by_layer:
                table = dist_waits.wait_table(by_layer, cmp.baseline, cmp.optimized)
                waits["table"] = table.to_dict("records")
                self._progress(f"[{cmp.name}] wait for the slowest rank per layer (ms/step, mean over ranks):\n"
                               + table.to_string(index=False))
            d["wait_method"] = ("per matched collective (k-th NCCL kernel of a kind on every rank): wait_r = "
                                "max start - start_r, transfer = duration - wait (workbench/traces/dist_waits.py). "
                                "Summed, these waits overlap (collectives wait on their own streams while "
                                "compute goes on, and two streams wait at once): not step time lost. The "
                                "exposed wait, what the skew costs the step, is `workbench straggler "
                                "--reduce`'s (dist_waits.exposed_waits)")
        elif self.args.trace == "torch":
            d["wait_note"] = ("no collective kernels in the traces: the wait estimate needs NCCL kernels (GPUs); "
                              "gloo runs collectives on host threads")
        d["waits"] = waits
        d["rank_status"] = {p["rank"]: p.get("status") for p in got}
        res["distributed"] = d
        self.writer.flush()
        return res


def check_args(a) -> None:
    if a.budget_s is not None:
        raise WorkbenchError("--budget-s under torchrun: each rank would decide on its own clock when to stop; use "
                             "--reps or --target-ci (decided on the max-across-ranks step times, the same on every "
                             "rank)")
    if a.trace == "nsys":
        raise WorkbenchError("--trace nsys under torchrun: profile the launcher instead (nsys profile -o DIR/rank "
                             "--trace cuda,nvtx torchrun ... -m workbench.ab ...), or use --trace torch (a trace per "
                             "rank)")
    if a._capture:
        raise WorkbenchError("--_capture is not for torchrun")


def main(a, argv, body) -> int:
    """`workbench.ab.main` under torchrun: init, `body(argv, a, ctx)` on every rank, a clean end (module docstring).
    Rank 0's exit status is the run's; the other ranks return 0, or 1 when they failed."""
    check_args(a)
    ctx = init(a.device)
    rc = 1
    try:
        rc = body(argv, a, ctx)
        return rc
    except RankFailed as e:  # before the run loop (setup): one line on rank 0
        if ctx.is_main:
            print(f"failed: rank {e.rank}: {e.msg}", flush=True, file=sys.stderr)
        return 1
    except WorkbenchError:  # bad input, the same on every rank: rank 0 says it (one line), the others exit 2
        if ctx.is_main:
            raise
        return 2
    finally:
        ctx.close()
