"""Interleaved A/B runs of the optimizations, with equivalence checks, savings models and optional traces.

    python -m workbench.ab                                    # --opt all; tiny presets on a CPU (about a minute)
    python -m workbench.ab --opt packing --trace torch        # + a torch.profiler trace of every arm
    python -m workbench.ab --opt packing --trace nsys         # + an Nsight Systems capture of every arm (GPU)
    python -m workbench.ab --opt packing --aa --reps 10       # A/A: baseline against itself (the noise floor)
    python -m workbench.ab --opt moe --arms eager,grouped --model gpt-oss-20b --layers 4

Per comparison the model is built once; each repetition runs every arm in turn (A B A B ...): apply the arm,
run warmup + timed steps, revert. Warmup steps are dropped; each arm reports the median step time with its
p20-p80 spread and the number of samples. Every arm is checked against the baseline from the same initial
weights and batch (loss and LoRA gradients after one forward+backward). Traces come from separate passes.

Prints one table per comparison, then, as the last stdout line, one JSON object (DESIGN "CLI contract").
Progress goes to stderr. Exit status 0 only when every comparison ran and every arm was equivalent.
Files: profiles/<run_id>/ (or --out): results.csv, summary.json, meta.json, traces/ when asked.
"""
from __future__ import annotations

import argparse
import dataclasses
import gc
import inspect
import os
import sys
import time
import traceback

import torch

from workbench import opts as opts_registry
from workbench.cli import emit_json, progress, run_main
from workbench.errors import UnsupportedArm, WorkbenchError

OPT_CHOICES = ("packing", "offload", "moe", "all")
HF_ATTN = ("sdpa", "eager", "flex_attention", "flash_attention_2", "flash_attention_3")

# default shapes: tiny presets on a CPU-only machine, real shapes (fewer layers where needed) on a GPU
CPU_DEFAULTS = {"packing": dict(model="tiny-qwen3"), "offload": dict(model="tiny-qwen3"),
                "moe": dict(model="tiny-gpt-oss"), "all": dict(model="tiny-qwen3-moe"),
                "_run": dict(tokens=256, steps=2, warmup=1, reps=2)}
GPU_DEFAULTS = {"packing": dict(model="qwen3-0.6b", tokens=16384), "offload": dict(model="llama-3.1-8b", layers=8),
                "moe": dict(model="gpt-oss-20b", layers=4, tokens=8192),
                "all": dict(model="qwen3-30b-a3b", layers=8, tokens=8192),
                "_run": dict(tokens=16384, steps=6, warmup=2, reps=3)}

TOL = {torch.float32: dict(rtol=1e-4, atol=1e-5), torch.float64: dict(rtol=1e-7, atol=1e-9),
       torch.bfloat16: dict(rtol=2e-2, atol=2e-3), torch.float16: dict(rtol=5e-3, atol=5e-4)}
"""Equivalence tolerance per dtype: elementwise allclose, or relative L2 error within rtol per tensor, or the largest
elementwise difference within rtol of the tensor's largest magnitude (where accumulation order changes: in bf16 a
per-expert `index_add_` rounds after every expert, a grouped GEMM once); torch.equal is reported as `bitwise`."""

DTYPES = {"auto": None, "fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
"""--dtype: auto = bf16 on CUDA, fp32 on the CPU (workbench.models.default_dtype)."""

REF_FACTOR = 1.5
"""Low-precision arms judged against an fp32 run of the baseline arm: an arm is equivalent when each LoRA gradient's
relative L2 error against that reference is at most REF_FACTOR x the baseline arm's own error + the dtype's rtol."""

FORMULAS = {"packing": "(L-1)*s", "offload": "(L-1)*min(c,g)", "moe": "syncs_removed*stall_ms + launches_removed*launch_ms",
            "all": "sum of the packing, offload and moe predictions"}


# --- plan ---------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class ArmSpec:
    label: str
    """Name in reports: the arm (or `a+b+c` for --opt all; `arm#2` for a repeated arm)."""
    arms: dict
    """{opt: arm} applied in this order."""


@dataclasses.dataclass
class Comparison:
    opt: str
    model: str
    layers: int | None
    tokens: int
    attn: str | None
    arms: list[ArmSpec]
    baseline: str
    optimized: str | None
    explicit_arms: bool = False
    excluded: dict = dataclasses.field(default_factory=dict)
    """{opt: why} for --opt all: optimizations left out because the model cannot run them."""


def _modules(opt_names) -> dict:
    return {o: opts_registry.module(o) for o in opt_names}


def _unique_labels(names: list[str]) -> list[str]:
    seen: dict = {}
    out = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        out.append(n if seen[n] == 1 else f"{n}#{seen[n]}")
    return out


def plan(args, device: torch.device) -> list[Comparison]:
    """The comparisons to run, validated (unknown opt / model / arm raise WorkbenchError)."""
    from workbench.models import load_config

    defaults = GPU_DEFAULTS if device.type == "cuda" else CPU_DEFAULTS
    if args.opt not in OPT_CHOICES:
        raise WorkbenchError(f"unknown optimization {args.opt!r}; choose from {', '.join(OPT_CHOICES)}")
    opt_list = list(opts_registry.OPTS) + ["all"] if args.opt == "all" else [args.opt]
    if args.arms and args.opt == "all":
        raise WorkbenchError("--arms needs a single --opt (packing, offload or moe); use --aa for an A/A of all")
    comps = []
    for opt in opt_list:
        d = defaults[opt]
        model = args.model or d["model"]
        layers = args.layers if args.layers is not None else d.get("layers")
        tokens = args.tokens or d.get("tokens") or defaults["_run"]["tokens"]
        hf_attn = args.attn if (args.attn is None or args.attn in HF_ATTN) else None
        load_config(model, layers, hf_attn)  # unknown preset / bad checkpoint dir -> WorkbenchError
        if opt == "all":
            mods = _modules(opts_registry.OPTS)
            names = ["baseline", "optimized"] if not args.aa else ["baseline", "baseline"]
            specs = []
            for which in names:
                arms = {o: (m.BASELINE if which == "baseline" else m.OPTIMIZED) for o, m in mods.items()}
                specs.append(arms)
            labels = _unique_labels(["+".join(a.values()) for a in specs])
            arms = [ArmSpec(lbl, a) for lbl, a in zip(labels, specs)]
        else:
            mod = opts_registry.module(opt)
            if args.arms:
                names = [a.strip() for a in args.arms.split(",") if a.strip()]
                bad = [a for a in names if a not in mod.ARMS]
                if bad:
                    raise WorkbenchError(f"unknown arm {bad[0]!r} for --opt {opt}; arms: {', '.join(mod.ARMS)}")
                if len(names) < 2:
                    raise WorkbenchError("--arms needs at least two arms (the first is the baseline)")
            elif args.aa:
                names = [mod.BASELINE, mod.BASELINE]
            else:
                names = [mod.BASELINE, mod.OPTIMIZED] + [a for a in mod.ARMS if a not in (mod.BASELINE, mod.OPTIMIZED)]
            labels = _unique_labels(names)
            arms = [ArmSpec(lbl, {opt: a}) for lbl, a in zip(labels, names)]
        comps.append(Comparison(opt=opt, model=model, layers=layers, tokens=tokens, attn=args.attn, arms=arms,
                                baseline=arms[0].label, optimized=arms[1].label if len(arms) > 1 else None,
                                explicit_arms=bool(args.arms)))
    if args.attn is not None and args.attn not in HF_ATTN:
        backends = set(_packing_backends())
        if args.attn not in backends:
            raise WorkbenchError(f"unknown attention backend {args.attn!r}; choose from "
                                 f"{', '.join(sorted(set(HF_ATTN) | backends))}")
    return comps


def _module_or_none(opt: str):
    try:
        return opts_registry.module(opt)
    except Exception:  # noqa: BLE001 - a module still being written must not break the others
        return None


def _packing_backends() -> tuple:
    return tuple(getattr(_module_or_none("packing"), "BACKENDS", ()))


# --- one arm ------------------------------------------------------------------------------------------------

def _filter_kwargs(fn, options: dict) -> dict:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return dict(options)
    return {k: v for k, v in options.items() if k in params}


def apply_arms(model, arms: dict, options: dict | None = None):
    """Apply {opt: arm} in order; `options` = {opt: apply kwargs}. Returns a `Combined` handle (reverted in reverse
    order); on an error the arms already applied are reverted."""
    handles = []
    try:
        for opt, arm in arms.items():
            mod = opts_registry.module(opt)
            if arm not in mod.ARMS:
                raise WorkbenchError(f"unknown arm {arm!r} for --opt {opt}; arms: {', '.join(mod.ARMS)}")
            handles.append(mod.apply(model, arm, **_filter_kwargs(mod.apply, (options or {}).get(opt, {}))))
    except BaseException:
        for h in reversed(handles):
            h.revert()
        raise
    return opts_registry.Combined(handles)


def unsupported_reason(model, arms: dict, device, options: dict | None = None) -> str | None:
    for opt, arm in arms.items():
        mod = opts_registry.module(opt)
        why = mod.unsupported(arm, model, device, **_filter_kwargs(mod.unsupported, (options or {}).get(opt, {})))
        if why:
            return f"{opt}={arm}: {why}"
    return None


class _GradCapture:
    """Stands in for the optimizer in the equivalence step: snapshots the LoRA gradients instead of stepping."""

    def __init__(self, named_params):
        self.named = list(named_params)
        self.grads: dict | None = None

    def step(self):
        self.grads = {n: (p.grad.detach().float().clone() if p.grad is not None else None) for n, p in self.named}

    def zero_grad(self, set_to_none=True):
        for _, p in self.named:
            p.grad = None


def _fresh(batches):
    # opt modules may write into batch.meta at collate time: give each arm its own copies
    return [dataclasses.replace(b, doc_lens=list(b.doc_lens), meta=dict(b.meta)) for b in batches]


def _compare(out, ref, dtype) -> dict:
    tol = TOL.get(dtype, TOL[torch.float32])
    loss_diff = abs(out["loss"] - ref["loss"])
    loss_ok = loss_diff <= tol["atol"] + tol["rtol"] * abs(ref["loss"])
    bitwise = out["loss"] == ref["loss"]
    gmax, grel, grads_ok, missing, worst = 0.0, 0.0, True, [], None
    for n, g_ref in ref["grads"].items():
        g = out["grads"].get(n)
        if (g is None) != (g_ref is None):
            grads_ok, bitwise = False, False
            missing.append(n)
            continue
        if g is None:
            continue
        if g.shape != g_ref.shape:
            grads_ok, bitwise = False, False
            missing.append(n)
            continue
        bitwise = bitwise and torch.equal(g, g_ref)
        d = (g - g_ref).abs()
        gmax = max(gmax, float(d.max()) if d.numel() else 0.0)
        rel = _rel_l2(g, g_ref)
        if worst is None or rel > grel:
            grel, worst = rel, n
        scale = float(g_ref.abs().max()) if g_ref.numel() else 0.0
        if not (torch.allclose(g, g_ref, **tol) or rel <= tol["rtol"]
                or (d.numel() and float(d.max()) <= tol["rtol"] * scale)):
            grads_ok = False
    res = {"equivalent": bool(loss_ok and grads_ok), "bitwise": bool(bitwise), "loss_abs_diff": loss_diff,
           "grad_max_abs_diff": gmax, "grad_max_rel_l2": grel, "worst_grad": worst,
           "tolerance": {**tol, "dtype": str(dtype)}}
    if missing:
        res["mismatched_grads"] = missing[:5]
    return res


def _rel_l2(g: torch.Tensor, g_ref: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(g - g_ref) / torch.linalg.vector_norm(g_ref).clamp_min(1e-30))


def _judge_by_reference(out: dict, base: dict, ref32: dict, dtype) -> dict:
    """An arm that differs from the baseline in low precision, judged against an fp32 run of the baseline arm.

    bf16 gradients carry rounding noise of their own (LoRA gradients of rarely hit experts: 10-30% relative L2
    against fp32), and two arms that sum in different orders (a per-expert `index_add_` against one grouped GEMM)
    land in different places inside it. The arm is equivalent when its loss is within the dtype's tolerance of the
    reference's (or no further than the baseline's) and every gradient is no further from the reference than
    REF_FACTOR x the baseline's own error + rtol. A wrong function (a dropped expert, a skipped token) lands far
    outside: the test's negative control.
    """
    tol = TOL.get(dtype, TOL[torch.float32])
    l_ref = ref32["loss"]
    loss_err_arm, loss_err_base = abs(out["loss"] - l_ref), abs(base["loss"] - l_ref)
    loss_ok = loss_err_arm <= max(REF_FACTOR * loss_err_base, tol["atol"] + tol["rtol"] * abs(l_ref))
    worst, worst_ratio, e_arm_max, e_base_max, ok = None, 0.0, 0.0, 0.0, True
    for n, g32 in ref32["grads"].items():
        g, gb = out["grads"].get(n), base["grads"].get(n)
        if g32 is None or g is None or gb is None:
            if not (g32 is None and g is None and gb is None):
                ok = False
            continue
        e_arm, e_base = _rel_l2(g, g32), _rel_l2(gb, g32)
        e_arm_max, e_base_max = max(e_arm_max, e_arm), max(e_base_max, e_base)
        ratio = e_arm / max(e_base, 1e-30)
        if e_arm > REF_FACTOR * e_base + tol["rtol"]:
            ok = False
        if worst is None or ratio > worst_ratio:
            worst, worst_ratio = n, ratio
    return {"equivalent": bool(ok and loss_ok), "judged_by": "fp32 reference (the baseline arm in float32)",
            "ref_loss_err": loss_err_arm, "ref_loss_err_baseline": loss_err_base,
            "ref_grad_max_rel_l2": e_arm_max, "ref_grad_max_rel_l2_baseline": e_base_max,
            "ref_worst_grad": worst, "ref_worst_ratio": worst_ratio, "ref_factor": REF_FACTOR}


class _Upcast:
    """Parameters (not buffers: rotary tables stay as built) in float32 for a reference pass, then back to their
    own dtypes; a bf16 / fp16 value survives the round trip exactly."""

    def __init__(self, model, dtype=torch.float32):
        self.model, self.dtype, self.orig = model, dtype, {}

    def __enter__(self):
        with torch.no_grad():
            for n, p in self.model.named_parameters():
                if p.is_floating_point() and p.dtype != self.dtype:
                    self.orig[n] = p.dtype
                    p.data = p.data.to(self.dtype)
        return self

    def __exit__(self, *exc):
        with torch.no_grad():
            for n, p in self.model.named_parameters():
                if n in self.orig:
                    p.data = p.data.to(self.orig[n])
                    p.grad = None
        return False


class _Parked:
    """The model on the CPU while child processes use the GPU (nsys captures), back on `device` after: a child
    running an arm without checkpointing needs the memory the parent's copy would hold."""

    def __init__(self, model, device):
        self.model, self.device = model, torch.device(device)

    def __enter__(self):
        if self.device.type == "cuda":
            self.model.to("cpu")
            _free(self.device)
        return self

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            self.model.to(self.device)
        return False


# --- one comparison -----------------------------------------------------------------------------------------

class Runner:
    def __init__(self, args, device, writer):
        self.args = args
        self.device = device
        self.writer = writer
        self.failures: list[str] = []
        self._meta_stall: dict = {}
        """opt -> meta_stall_ms() of the baseline arm's torch trace (the packing model's in-situ s)."""

    def _progress(self, msg: str):
        progress(msg)

    def build(self, cmp: Comparison):
        from workbench.harness import enable_checkpointing
        from workbench.instrument import instrument_layers
        from workbench.models import build_model

        hf_attn = cmp.attn if (cmp.attn is None or cmp.attn in HF_ATTN) else None
        model = build_model(cmp.model, layers=cmp.layers, attn=hf_attn, device=self.device, seed=self.args.seed,
                            dtype=DTYPES[getattr(self.args, "dtype", "auto")],
                            lora_rank=self.args.lora_rank, experts_implementation=self.args.experts)
        if not self.args.no_checkpointing:
            enable_checkpointing(model)
        instrument_layers(model)
        return model

    def options(self, cmp: Comparison) -> dict:
        """{opt: keyword arguments of its apply / unsupported}: the packing backend from --attn; one pinned host
        pool per comparison for offload (pinned once, not once per repetition)."""
        o: dict = {}
        if cmp.attn is not None and cmp.attn in _packing_backends():
            o["packing"] = {"backend": cmp.attn}
        pool_cls = getattr(_module_or_none("offload"), "HostPool", None)
        if pool_cls is not None:
            if getattr(cmp, "_host_pool", None) is None:
                cmp._host_pool = pool_cls(pin=self.device.type == "cuda")
            o["offload"] = {"host_pool": cmp._host_pool}
        return o

    def run_arm_steps(self, model, cpu_batches, spec: ArmSpec, cmp, *, steps, warmup, on_step=None, ranges=None,
                      count_syncs=True, optimizer=None):
        from workbench.data import to_device
        from workbench.harness import train_steps
        from workbench.instrument import Ranges

        handle = apply_arms(model, spec.arms, self.options(cmp))
        try:
            batches = to_device(_fresh(cpu_batches), self.device, prepare=handle.prepare_batch)
            recs = train_steps(model, batches, steps=steps, warmup=warmup, optimizer=optimizer, lr=self.args.lr,
                               ranges=ranges or Ranges(nvtx=True, profiler=True), count_syncs=count_syncs,
                               cross_check=self.args.cross_check, inputs_fn=handle.inputs_fn, on_step=on_step)
            info = {}
            for h in handle.handles:
                info.update({f"{h.opt}.{k}": v for k, v in (h.info or {}).items() if _plain(v)})
            return recs, info
        finally:
            handle.revert()
            del handle

    def run(self, cmp: Comparison, index: int, total: int) -> dict:
        from workbench.data import make_batches
        from workbench.models import lora_parameters

        a = self.args
        tag = f"[{index}/{total} {cmp.opt}]"
        out = {"opt": cmp.opt, "model": cmp.model, "layers": None, "tokens": cmp.tokens, "attn": cmp.attn,
               "baseline": None, "optimized": None, "others": [], "speedup": None, "equivalent": False,
               "savings_model": {"formula": FORMULAS[cmp.opt], "predicted_ms": None, "measured_ms": None,
                                 "inputs": {}},
               "status": "ok", "errors": []}
        self._progress(f"{tag} building {cmp.model}" + (f" ({cmp.layers} layers)" if cmp.layers else ""))
        model = self.build(cmp)
        L = model.config.num_hidden_layers
        out["layers"] = L
        env = dict(model=cmp.model, layers=L, tokens=cmp.tokens, attn=cmp.attn or model.config._attn_implementation)
        out["attn"] = env["attn"]
        dtype = next(model.parameters()).dtype
        init = {n: p.detach().clone() for n, p in lora_parameters(model)}

        def reset_weights():
            with torch.no_grad():
                for n, p in lora_parameters(model):
                    p.copy_(init[n])
                    p.grad = None

        # which arms can run here
        if cmp.opt == "all":
            for o in list(opts_registry.OPTS):
                why = None
                for spec in cmp.arms:
                    why = why or unsupported_reason(model, {o: spec.arms[o]}, self.device, self.options(cmp))
                if why:
                    cmp.excluded[o] = why
            for spec in cmp.arms:
                spec.arms = {o: arm for o, arm in spec.arms.items() if o not in cmp.excluded}
            if cmp.excluded:
                self._progress(f"{tag} left out of the combination: " +
                               "; ".join(f"{o} ({w})" for o, w in cmp.excluded.items()))
            out["excluded"] = dict(cmp.excluded)
        arm_status: dict[str, dict] = {}
        runnable = []
        for spec in cmp.arms:
            why = unsupported_reason(model, spec.arms, self.device, self.options(cmp)) if spec.arms \
                else "no optimization left to apply"
            if why is None:
                runnable.append(spec)
                arm_status[spec.label] = {"status": "ok"}
                continue
            required = spec.label in (cmp.baseline, cmp.optimized) or cmp.explicit_arms
            arm_status[spec.label] = {"status": "unsupported" if required else "skipped", "error": why}
            msg = f"{cmp.opt} arm {spec.label} cannot run here: {why}"
            if required:
                self.failures.append(msg)
                out["errors"].append(msg)
                progress(f"error: {msg}")
            else:
                self._progress(f"{tag} skipping arm {spec.label}: {why}")

        n_batches = max(1, min(a.steps + a.warmup, 4))
        cpu_batches = make_batches(a.lengths, cmp.tokens, n_batches, model.config.vocab_size, seed=a.seed)

        # equivalence: one forward+backward from the same weights and batch, every arm vs the baseline
        def one_step(spec, batches=None):
            batches = batches or cpu_batches[:1]
            reset_weights()
            cap = _GradCapture(lora_parameters(model))
            recs, _ = self.run_arm_steps(model, batches, spec, cmp, steps=1, warmup=0, optimizer=cap,
                                         count_syncs=False)
            return {"loss": recs[0].loss, "grads": cap.grads}

        ref, equiv, ref_cache = None, {}, {}
        base_spec = next((s for s in runnable if s.label == cmp.baseline), None)
        for spec in runnable:
            try:
                res = one_step(spec)
            except Exception as e:  # noqa: BLE001 - one arm's failure must not stop the others
                self._arm_failed(cmp, spec, e, arm_status, out)
                continue
            if spec.label == cmp.baseline:
                ref = res
                equiv[spec.label] = {"equivalent": True, "bitwise": True, "loss_abs_diff": 0.0,
                                     "grad_max_abs_diff": 0.0, "grad_max_rel_l2": 0.0}
            elif ref is not None:
                equiv[spec.label] = _compare(res, ref, dtype)
                if not equiv[spec.label]["equivalent"] and dtype in (torch.bfloat16, torch.float16):
                    self._progress(f"{tag} {spec.label} differs from {cmp.baseline} beyond the {dtype} "
                                   f"tolerance: judging both against an fp32 run of {cmp.baseline}")
                    verdict = self._reference_verdict(model, cmp, base_spec, spec, res, ref, one_step, ref_cache,
                                                      dtype)
                    if verdict:
                        equiv[spec.label].update(verdict)
            arm_status[spec.label]["loss"] = res["loss"]
            e = equiv.get(spec.label)
            if e is not None:
                self.writer.add(cmp.opt, spec.label, "equiv_loss_abs_diff", e["loss_abs_diff"], "nats", **env)
                self.writer.add(cmp.opt, spec.label, "equiv_grad_max_abs_diff", e["grad_max_abs_diff"], "grad", **env)
                self.writer.add(cmp.opt, spec.label, "equivalent", int(e["equivalent"]), "bool", **env)
                via = (f"; against fp32 ({e['ref_tokens']} tokens): grad rel L2 {e['ref_grad_max_rel_l2']:.3g} "
                       f"vs the baseline's "
                       f"{e['ref_grad_max_rel_l2_baseline']:.3g}, worst ratio {e['ref_worst_ratio']:.2f} "
                       f"({e['ref_worst_grad']})") if "judged_by" in e else ""
                self._progress(f"{tag} equivalence {spec.label}: {'ok' if e['equivalent'] else 'DIFFERS'} "
                               f"(bitwise {e['bitwise']}, loss diff {e['loss_abs_diff']:.3g}, "
                               f"grad max diff {e['grad_max_abs_diff']:.3g}{via})")
                self.writer.flush()
        self.writer.flush()

        # timing: A B A B ..., each arm applied, run, reverted; warmup dropped
        records: dict[str, list] = {s.label: [] for s in runnable}
        infos: dict[str, dict] = {}
        for rep in range(a.reps):
            for spec in runnable:
                if arm_status[spec.label]["status"] != "ok":
                    continue
                reset_weights()

                def on_step(r, _lbl=spec.label, _rep=rep):
                    self._progress(f"{tag} rep {_rep + 1}/{a.reps} {_lbl}: step {r.step + 1}/{a.steps} "
                                   f"{r.step_ms:.1f} ms, syncs {r.syncs}, loss {r.loss:.4f}")
                try:
                    recs, info = self.run_arm_steps(model, cpu_batches, spec, cmp, steps=a.steps, warmup=a.warmup,
                                                    on_step=on_step)
                except Exception as e:  # noqa: BLE001
                    self._arm_failed(cmp, spec, e, arm_status, out)
                    continue
                finally:
                    _free(self.device)
                records[spec.label].extend(recs)
                infos[spec.label] = info
                self.writer.add_steps(cmp.opt, spec.label, rep, recs, **env)
                self.writer.flush()

        # traces: separate passes
        events = {}
        if a.trace == "torch":
            events = self.torch_traces(model, cpu_batches, cmp, runnable, arm_status, reset_weights, env)
        elif a.trace == "nsys":
            with _Parked(model, self.device):  # each capture is a child process that builds its own model
                events = self.nsys_traces(cmp, runnable, arm_status)

        # summary
        arm_dicts = {}
        for spec in cmp.arms:
            arm_dicts[spec.label] = self._arm_summary(spec.label, records.get(spec.label, []), arm_status,
                                                      infos.get(spec.label, {}), equiv.get(spec.label), events)
        out["baseline"] = arm_dicts[cmp.baseline]
        out["optimized"] = arm_dicts[cmp.optimized] if cmp.optimized else None
        out["others"] = [arm_dicts[s.label] for s in cmp.arms if s.label not in (cmp.baseline, cmp.optimized)]
        out["equivalence"] = equiv
        b, o = out["baseline"], out["optimized"]
        if o is not None and b["step_ms"] and o["step_ms"]:
            out["speedup"] = b["step_ms"] / o["step_ms"]
            out["savings_model"]["measured_ms"] = b["step_ms"] - o["step_ms"]
        measured_inputs = {}
        if cmp.opt == "offload" and events.get(cmp.baseline) is None \
                and arm_status.get(cmp.baseline, {}).get("status") == "ok":
            try:
                spec = next(s for s in cmp.arms if s.label == cmp.baseline)
                mi = self.offload_measuring_pass(model, cpu_batches, cmp, spec, reset_weights)
                if mi:
                    measured_inputs["offload"] = mi
            except Exception as e:  # noqa: BLE001 - the model's inputs are optional; the timings stand
                self._progress(f"{tag} offload measuring pass failed: {type(e).__name__}: {e}")
            finally:
                _free(self.device)
        out["savings_model"] = self.savings(cmp, events.get(cmp.baseline), out["savings_model"], L, measured_inputs,
                                            opt_events=events.get(cmp.optimized), arms=arm_dicts)
        ran_all = all(arm_status[s.label]["status"] in ("ok", "skipped") for s in cmp.arms)
        out["equivalent"] = bool(ran_all and equiv and all(
            equiv.get(s.label, {}).get("equivalent", False) for s in cmp.arms if arm_status[s.label]["status"] == "ok"))
        for s in cmp.arms:
            e = equiv.get(s.label)
            if e is not None and not e["equivalent"]:
                msg = (f"{cmp.opt} arm {s.label} is not equivalent to {cmp.baseline}: loss diff "
                       f"{e['loss_abs_diff']:.3g}, grad max diff {e['grad_max_abs_diff']:.3g}")
                self.failures.append(msg)
                out["errors"].append(msg)
        if not ran_all or not out["equivalent"]:
            out["status"] = "failed"
        if out["speedup"] is not None:
            self.writer.add(cmp.opt, cmp.optimized, "speedup", out["speedup"], "x", **env)
        sm = out["savings_model"]
        for k in ("predicted_ms", "measured_ms"):
            if sm.get(k) is not None:
                self.writer.add(cmp.opt, cmp.optimized, f"savings_{k}", sm[k], "ms", **env)
        self.writer.flush()
        del model
        _free(self.device)
        return out

    def _reference_verdict(self, model, cmp, base_spec, spec, res, ref, one_step, cache: dict, dtype) -> dict | None:
        """`_judge_by_reference` of one arm. The fp32 pass of the baseline arm is made once per comparison; where
        fp32 does not fit at the comparison's batch (fp32 eager attention holds T x T scores per head), the arm,
        the baseline and the reference all run on a batch of half the tokens, halved again until it fits."""
        from workbench.data import make_batches

        a = self.args
        tokens, res_arm, res_base = cache.get("fits", cmp.tokens), res, ref
        while tokens >= 64:
            try:
                batches = None  # the comparison's own batch
                if tokens != cmp.tokens:
                    batches = make_batches(a.lengths, tokens, 1, model.config.vocab_size, seed=a.seed)
                    res_base = cache.get(("base", tokens)) or one_step(base_spec, batches)
                    cache[("base", tokens)] = res_base
                    res_arm = one_step(spec, batches)
                if tokens not in cache:
                    with _Upcast(model):
                        cache[tokens] = one_step(base_spec, batches)
                cache["fits"] = tokens
                v = _judge_by_reference(res_arm, res_base, cache[tokens], dtype)
                v["ref_tokens"] = tokens
                return v
            except torch.OutOfMemoryError:
                self._progress(f"[{cmp.opt}] fp32 reference at {tokens} tokens does not fit; halving the batch")
                tokens //= 2
            except Exception as e:  # noqa: BLE001 - no reference: the direct verdict stands
                self._progress(f"[{cmp.opt}] fp32 reference failed: {type(e).__name__}: {e}")
                return None
            finally:
                _free(self.device)
        return None

    def _arm_failed(self, cmp, spec, e, arm_status, out):
        oom = isinstance(e, torch.OutOfMemoryError) or "out of memory" in str(e).lower()
        first = (str(e).strip().splitlines() or [""])[0][:300]
        reason = f"out of memory: {first}" if oom else f"{type(e).__name__}: {first}"
        if isinstance(e, WorkbenchError):
            reason = str(e)
        arm_status[spec.label] = {"status": "failed", "error": reason}
        msg = f"{cmp.opt} arm {spec.label} failed: {reason}"
        self.failures.append(msg)
        out["errors"].append(msg)
        progress(f"error: {msg}")
        with open(self.writer.path("errors.log"), "a") as f:
            f.write(f"--- {msg}\n{''.join(traceback.format_exception(e))}\n")
        _free(self.device)

    def _arm_summary(self, label, recs, arm_status, info, equiv, events) -> dict:
        from workbench.results import step_stats

        st = step_stats([r.step_ms for r in recs])
        d = {"arm": label, "step_ms": st["median"], "step_ms_p20": st["p20"], "step_ms_p80": st["p80"], "n": st["n"],
             "fwd_ms": step_stats([r.fwd_ms for r in recs])["median"],
             "bwd_ms": step_stats([r.bwd_ms for r in recs])["median"],
             "syncs_per_step": (sum(r.syncs for r in recs) / len(recs)) if recs and recs[0].syncs is not None
             else None,
             "peak_mem_mib": max((r.peak_mem_mib for r in recs), default=None) if recs else None,
             "tokens_per_s": (sum(r.tokens for r in recs) / (sum(r.step_ms for r in recs) / 1e3)) if recs else None,
             "loss": arm_status.get(label, {}).get("loss"),
             "status": arm_status.get(label, {}).get("status", "ok")}
        if arm_status.get(label, {}).get("error"):
            d["error"] = arm_status[label]["error"]
        if recs and recs[0].cuda_sync_warnings is not None:
            d["cuda_sync_warnings_per_step"] = sum(r.cuda_sync_warnings for r in recs) / len(recs)
        for key, field in (("sync_sources_per_step", "syncs_by_source"),
                           ("cuda_sync_warning_sources_per_step", "cuda_sync_warning_sources")):
            per_source = _per_step_by_source(recs, field)
            if per_source:
                d[key] = per_source
        if equiv is not None:
            d["equivalent"] = equiv["equivalent"]
            d["bitwise"] = equiv["bitwise"]
            d["grad_max_abs_diff"] = equiv["grad_max_abs_diff"]
        if info:
            d["info"] = info
        ev = events.get(label)
        if ev is not None and len(ev):
            from workbench.traces.analysis import HARNESS_READBACKS_PER_STEP, host_syncs_per_step, readbacks_per_step
            if (ev["kind"] == "kernel").any():  # only a GPU trace witnesses syncs
                d["trace_sync_events_per_step"] = host_syncs_per_step(ev)
                d["trace_syncs_per_step"] = readbacks_per_step(ev) - HARNESS_READBACKS_PER_STEP
                if d["syncs_per_step"] is not None and d["trace_syncs_per_step"] != d["syncs_per_step"]:
                    d["sync_witness_note"] = (
                        "the trace's readbacks (small DtoH copies per step, less the harness's loss read) differ "
                        "from the dispatch counter: blocking host-to-device copies and allocator waits are not "
                        "readbacks, and a trace's steps may include profiler warm-up")
        return d

    # -- savings models --------------------------------------------------------------------------------------
    def _paired_inputs(self, o, cmp, base_events, opt_events, arms) -> dict:
        """Inputs that need both arms: packing's arm and checkpointing; MoE's syncs and launches removed."""
        opt_spec = next((s for s in cmp.arms if s.label == cmp.optimized), None)
        if o == "packing":
            return {"arm": opt_spec.arms.get("packing") if opt_spec else None,
                    "checkpointing": not self.args.no_checkpointing}
        if o == "moe":
            from workbench.traces.analysis import launches_per_step
            b, p = arms.get(cmp.baseline) or {}, arms.get(cmp.optimized) or {}
            out = {}
            if b.get("syncs_per_step") is not None and p.get("syncs_per_step") is not None:
                out["syncs_removed"] = b["syncs_per_step"] - p["syncs_per_step"]
            if opt_events is not None:
                out["launches_removed"] = launches_per_step(base_events) - launches_per_step(opt_events)
            return out
        return {}

    def savings(self, cmp, base_events, sm: dict, L: int, measured_inputs: dict | None = None,
                opt_events=None, arms: dict | None = None) -> dict:
        """Fill the savings model: inputs from the baseline arm's trace (any opt), else from a measuring pass
        (offload's per-layer reload / compute timers); predicted_ms stays null, with a reason, without inputs."""
        from workbench.traces import INPUTS

        opts_here = [cmp.opt] if cmp.opt != "all" else [o for o in opts_registry.OPTS if o not in cmp.excluded]
        measured_inputs = measured_inputs or {}
        parts = {}
        for o in opts_here:
            if base_events is not None:
                inputs = INPUTS[o](base_events)
                inputs.update(self._paired_inputs(o, cmp, base_events, opt_events, arms))
                stall = self._meta_stall.get(cmp.opt) if o == "packing" else None
                if stall and stall.get("s_stall_ms") == stall.get("s_stall_ms") and stall.get("n_measured"):
                    # host range time misses the stall a build's syncs cause; the trace's GPU idle per build has it
                    inputs["s_host_ms"] = inputs.get("s_ms")
                    inputs["s_ms"] = stall["s_stall_ms"]
                    inputs["source"] = "GPU idle per wb/Lxx/attn/meta build (workbench.traces.stall)"
            elif o in measured_inputs:
                inputs = measured_inputs[o]
            else:
                parts[o] = {"formula": FORMULAS[o], "predicted_ms": None, "inputs": {},
                            "reason": "the savings inputs are measured from a trace: run with --trace torch or nsys"}
                continue
            parts[o] = call_savings(o, inputs, measured_ms=sm.get("measured_ms") if cmp.opt == o else None)
        if cmp.opt == "all":
            preds = [p.get("predicted_ms") for p in parts.values()]
            sm["inputs"] = {o: p.get("inputs") for o, p in parts.items()}
            sm["parts"] = {o: {k: v for k, v in p.items() if k != "inputs"} for o, p in parts.items()}
            sm["predicted_ms"] = sum(preds) if preds and all(p is not None for p in preds) else None
            if sm["predicted_ms"] is None:
                sm["reason"] = "; ".join(f"{o}: {p['reason']}" for o, p in parts.items() if p.get("reason"))
        else:
            p = parts[cmp.opt]
            for k, v in p.items():
                if k != "measured_ms":
                    sm[k] = v
        return sm

    def offload_measuring_pass(self, model, cpu_batches, cmp, spec, reset_weights) -> dict | None:
        """Per-layer c (reload) and g (recompute + backward) of the blocking arm from offload's own timers
        (`apply(..., timing=True)`, a separate pass): the offload model's inputs without a trace."""
        mod = _module_or_none("offload")
        if mod is None or not hasattr(mod, "layer_times_ms") or "timing" not in inspect.signature(mod.apply).parameters:
            return None
        from workbench.data import to_device
        from workbench.harness import train_steps

        reset_weights()
        opts = self.options(cmp)
        opts.setdefault("offload", {})["timing"] = True
        handle = apply_arms(model, spec.arms, opts)
        try:
            h = next(x for x in handle.handles if x.opt == "offload")
            batches = to_device(_fresh(cpu_batches), self.device, prepare=handle.prepare_batch)
            steps = max(2, min(self.args.steps, 3))
            train_steps(model, batches, steps=max(self.args.warmup, 1), count_syncs=False, inputs_fn=handle.inputs_fn)
            mod.layer_times_ms(h)  # drop the warmup's rows
            train_steps(model, batches, steps=steps, count_syncs=False, inputs_fn=handle.inputs_fn)
            rows = mod.layer_times_ms(h)
        finally:
            handle.revert()
        if not rows:
            return None
        import statistics
        by_layer: dict = {}
        for r in rows:
            by_layer.setdefault(r["layer"], []).append(r)
        layers = sorted(by_layer)
        c = [statistics.median(r["reload_ms"] for r in by_layer[i]) for i in layers]
        g = [statistics.median(r["compute_ms"] for r in by_layer[i]) for i in layers]
        return {"c_ms": c, "g_ms": g, "layers": len(layers), "source": f"offload timers of {spec.label} ({steps} steps)"}

    # -- traces ----------------------------------------------------------------------------------------------
    def torch_traces(self, model, cpu_batches, cmp, runnable, arm_status, reset_weights, env) -> dict:
        from workbench.traces import from_torch_trace, layer_ranges, save_events
        from workbench.traces.capture import torch_profile

        a = self.args
        events = {}
        for spec in runnable:
            if arm_status[spec.label]["status"] != "ok":
                continue
            reset_weights()
            stem = self.writer.path("traces", cmp.opt, _safe(spec.label))
            path = stem + ".pt.trace.json.gz"
            self._progress(f"[{cmp.opt}] torch.profiler pass of {spec.label} -> {path}")

            def run_steps(step_fn, _spec=spec):
                self.run_arm_steps(model, cpu_batches, _spec, cmp, steps=a.warmup + a.steps, warmup=0,
                                   on_step=lambda r: step_fn(), count_syncs=False)
            try:
                torch_profile(run_steps, path, device=self.device, warmup=a.warmup, steps=a.steps)
                ev = from_torch_trace(path)
                save_events(ev, stem)
                if spec is runnable[0] and cmp.opt in ("packing", "all"):
                    # the packing model's s: the GPU idle each metadata build causes in this step (in situ)
                    from workbench.traces.stall import meta_stall_ms
                    self._meta_stall[cmp.opt] = meta_stall_ms(path)
                for r in layer_ranges(ev).to_dict("records"):
                    name = "/".join(x for x in (r["layer"], r["pass"], r["part"]) if x)
                    self.writer.add(cmp.opt, spec.label, f"trace_range_median_ms/{name}", r["median_ms"], "ms", **env)
                events[spec.label] = ev
            except Exception as e:  # noqa: BLE001 - a trace failure is reported, the timings stand
                msg = f"{cmp.opt} arm {spec.label}: torch trace failed: {type(e).__name__}: {e}"
                self.failures.append(msg)
                progress(f"error: {msg}")
            finally:
                _free(self.device)
        self.writer.flush()
        return events

    def nsys_traces(self, cmp, runnable, arm_status) -> dict:
        from workbench.traces import from_nsys_sqlite, save_events
        from workbench.traces.capture import require_nsys, run_nsys

        a = self.args
        nsys = require_nsys()
        events = {}
        for spec in runnable:
            if arm_status[spec.label]["status"] != "ok":
                continue
            stem = self.writer.path("traces", cmp.opt, _safe(spec.label))
            child = ["--opt", cmp.opt, "--model", cmp.model,
                     "--tokens", str(cmp.tokens), "--steps", str(a.steps), "--warmup", str(a.warmup),
                     "--device", "cuda", "--seed", str(a.seed), "--lengths", a.lengths,
                     "--lora-rank", str(a.lora_rank), "--trace", "none", "--out", stem + ".child",
                     "--_capture", ",".join(f"{o}={arm}" for o, arm in spec.arms.items())]
            if cmp.layers is not None:
                child += ["--layers", str(cmp.layers)]
            if cmp.attn is not None:
                child += ["--attn", cmp.attn]
            if a.experts is not None:
                child += ["--experts", a.experts]
            if a.no_checkpointing:
                child += ["--no-checkpointing"]
            if a.dtype != "auto":
                child += ["--dtype", a.dtype]
            self._progress(f"[{cmp.opt}] nsys capture of {spec.label} -> {stem}.nsys-rep")
            try:
                sqlite = run_nsys(nsys, stem, child, stem + ".nsys.log")
                ev = from_nsys_sqlite(sqlite)
                save_events(ev, stem)
                events[spec.label] = ev
            except Exception as e:  # noqa: BLE001
                msg = f"{cmp.opt} arm {spec.label}: nsys capture failed: {e}"
                self.failures.append(msg)
                progress(f"error: {msg}")
        return events


def _per_step_by_source(recs, field: str, top: int = 12) -> dict:
    """{file:line: count per step} of a StepRecord's by-source dict (the counter's syncs, or the sync-debug-mode
    warnings), the `top` largest: where two witnesses differ, summary.json says at which lines."""
    from workbench.harness import mean_per_step

    ranked = sorted(mean_per_step(recs, field).items(), key=lambda kv: (-kv[1], str(kv[0])))[:top]
    return {str(k): v for k, v in ranked}


def _plain(v) -> bool:
    """JSON-friendly values only (handles may keep live objects in their info)."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return True
    if isinstance(v, (list, tuple)):
        return all(_plain(x) for x in v)
    if isinstance(v, dict):
        return all(isinstance(k, str) and _plain(x) for k, x in v.items())
    return False


def _safe(label: str) -> str:
    return "".join(c if c.isalnum() or c in "-_.+" else "_" for c in label)


def _free(device) -> None:
    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def call_savings(opt: str, inputs: dict, measured_ms: float | None = None) -> dict:
    """The opt's savings model from `workbench.savings` (`<opt>_saving[s]`, `predict_<opt>`, `<opt>`, `<opt>_*_saving`),
    called with the measured inputs it accepts; a dict with formula / predicted_ms / inputs (and `reason` when
    the model or an input is missing)."""
    from workbench import savings

    fn = None
    names = [f"{opt}_saving", f"{opt}_savings", f"predict_{opt}", opt]
    names += sorted(n for n in dir(savings) if n.startswith(f"{opt}_") and n.endswith(("_saving", "_savings")))
    for name in names:
        cand = getattr(savings, name, None)
        if callable(cand):
            fn = cand
            break
    base = {"formula": FORMULAS[opt], "predicted_ms": None, "inputs": inputs}
    if fn is None:
        return {**base, "reason": f"no {opt} savings model in workbench.savings yet"}
    kwargs = _filter_kwargs(fn, {**inputs, "measured_ms": measured_ms})
    missing = [k for k, v in kwargs.items() if isinstance(v, float) and v != v]
    if missing:
        return {**base, "reason": f"inputs not found in the trace: {', '.join(missing)}"}
    try:
        res = fn(**kwargs)
    except Exception as e:  # noqa: BLE001 - a model that cannot take these inputs is reported, not fatal
        return {**base, "reason": f"{fn.__name__}({', '.join(kwargs)}) failed: {type(e).__name__}: {e}"}
    if not isinstance(res, dict):
        res = {"predicted_ms": float(res)}
    out = {**base, **res}
    out["inputs"] = {**inputs, **(res.get("inputs") or {})}
    return out


# --- the nsys child -----------------------------------------------------------------------------------------

def capture_child(args, device) -> int:
    """Under `nsys profile -c cudaProfilerApi`: run one arm's warmup, then its timed steps between
    torch.cuda.profiler.start() and stop()."""
    from workbench.data import make_batches, to_device
    from workbench.harness import train_steps
    from workbench.instrument import Ranges

    arms = dict(kv.split("=", 1) for kv in args._capture.split(","))
    cmp = Comparison(opt=args.opt, model=args.model, layers=args.layers, tokens=args.tokens, attn=args.attn,
                     arms=[ArmSpec("capture", arms)], baseline="capture", optimized=None)
    r = Runner(args, device, writer=None)
    model = r.build(cmp)
    why = unsupported_reason(model, arms, device, r.options(cmp))
    if why:
        raise UnsupportedArm(why)
    cpu_batches = make_batches(args.lengths, args.tokens, max(1, min(args.steps + args.warmup, 4)),
                               model.config.vocab_size, seed=args.seed)
    handle = apply_arms(model, arms, r.options(cmp))
    try:
        batches = to_device(_fresh(cpu_batches), device, prepare=handle.prepare_batch)
        ranges = Ranges(nvtx=True, profiler=False)
        from workbench.harness import make_optimizer
        optim = make_optimizer(model, args.lr)
        if args.warmup:
            train_steps(model, batches, steps=args.warmup, optimizer=optim, ranges=ranges, count_syncs=False,
                        inputs_fn=handle.inputs_fn)
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        train_steps(model, batches, steps=args.steps, optimizer=optim, ranges=ranges, count_syncs=False,
                    inputs_fn=handle.inputs_fn)
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
    finally:
        handle.revert()
    return 0


# --- CLI ----------------------------------------------------------------------------------------------------

def parse_args(argv=None):
    from workbench.config import RunConfig

    d = RunConfig()
    p = argparse.ArgumentParser(prog="python -m workbench.ab", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--opt", default="all", help="packing | offload | moe | all (default: all)")
    p.add_argument("--model", default=None, help="preset or local HF checkpoint dir (default: per opt and device)")
    p.add_argument("--layers", type=int, default=None, help="override the layer count")
    p.add_argument("--tokens", type=int, default=None, help="packed tokens per batch (default: per device)")
    p.add_argument("--attn", default=None, help="attention backend (sdpa, eager, flex_attention, varlen, ...)")
    p.add_argument("--experts", default=None, help="HF experts implementation for MoE models (default: HF's)")
    p.add_argument("--lengths", default=d.lengths, help="document lengths (default %(default)s)")
    p.add_argument("--steps", type=int, default=None, help="timed steps per arm and repetition")
    p.add_argument("--warmup", type=int, default=None, help="dropped warmup steps per arm and repetition")
    p.add_argument("--reps", type=int, default=None, help="repetitions; arms alternate A B A B")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda")
    p.add_argument("--trace", default="none", help="none | torch | nsys (separate profiled passes)")
    p.add_argument("--out", default=None, help="output folder (default profiles/<run_id>)")
    p.add_argument("--arms", default=None, help="comma-separated arms of one --opt, baseline first "
                   "(repeat one for an A/A: --arms rebuild,rebuild)")
    p.add_argument("--aa", action="store_true", help="A/A: run the baseline against itself (noise floor)")
    p.add_argument("--dtype", default="auto", help="auto | fp32 | bf16 | fp16 (auto: bf16 on CUDA, fp32 on a CPU; "
                   "bf16 on a CPU reproduces the GPU's rounding)")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--lora-rank", type=int, default=d.lora_rank)
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--no-checkpointing", action="store_true")
    p.add_argument("--cross-check", action="store_true", help="on CUDA, also count sync-debug-mode warnings")
    p.add_argument("--_capture", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.trace not in ("none", "torch", "nsys"):
        raise WorkbenchError(f"unknown --trace {a.trace!r}; choose none, torch or nsys")
    if a.dtype not in DTYPES:
        raise WorkbenchError(f"unknown --dtype {a.dtype!r}; choose {', '.join(DTYPES)}")
    if a.device not in ("auto", "cpu", "cuda"):
        raise WorkbenchError(f"unknown --device {a.device!r}; choose auto, cpu or cuda")
    if a.opt not in OPT_CHOICES:
        raise WorkbenchError(f"unknown optimization {a.opt!r}; choose from {', '.join(OPT_CHOICES)}")
    for name in ("steps", "reps", "tokens", "layers", "lora_rank"):
        v = getattr(a, name)
        if v is not None and v <= 0:
            raise WorkbenchError(f"--{name.replace('_', '-')} must be positive, got {v}")
    if a.warmup is not None and a.warmup < 0:
        raise WorkbenchError(f"--warmup must be >= 0, got {a.warmup}")
    return a


def main(argv=None) -> int:
    from workbench import report
    from workbench.instrument import NvmlSampler
    from workbench.models import resolve_device
    from workbench.results import RunWriter, device_info, new_run_id

    argv = list(sys.argv[1:] if argv is None else argv)
    a = parse_args(argv)
    device = resolve_device(a.device)
    run_defaults = (GPU_DEFAULTS if device.type == "cuda" else CPU_DEFAULTS)["_run"]
    for k in ("steps", "warmup", "reps"):
        if getattr(a, k) is None:
            setattr(a, k, run_defaults[k])
    if a._capture:
        if a.model is None or a.tokens is None:
            raise WorkbenchError("--_capture needs --model and --tokens")
        return capture_child(a, device)
    if a.trace == "nsys":
        if device.type != "cuda":
            raise WorkbenchError("--trace nsys needs a CUDA device (use --trace torch on a CPU)")
        from workbench.traces.capture import require_nsys
        require_nsys()
    comps = plan(a, device)  # every bad name fails here, before anything is written

    run_id = new_run_id(f"{a.opt}-{device.type}")
    out_dir = a.out or os.path.join("profiles", run_id)
    dinfo = device_info(device)
    writer = RunWriter(out_dir, run_id, argv=["python", "-m", "workbench.ab", *argv],
                       env=dict(device=device.type, gpu_name=dinfo.get("name") if device.type == "cuda" else None),
                       extra_meta={"device": dinfo, "args": {k: v for k, v in vars(a).items() if k != "_capture"}})
    progress(f"run {run_id} on {device} -> {out_dir}")
    runner = Runner(a, device, writer)
    summary = {"run_id": run_id, "device": str(device), "comparisons": []}
    t0 = time.perf_counter()
    sampler = NvmlSampler(device_index=(device.index or 0), period_s=0.5) if device.type == "cuda" else None
    status = "incomplete"
    try:
        if sampler is not None:
            sampler.__enter__()
        for i, cmp in enumerate(comps, 1):
            try:
                res = runner.run(cmp, i, len(comps))
            except torch.OutOfMemoryError as e:
                msg = f"{cmp.opt}: out of memory while building or checking: {str(e).splitlines()[0][:200]}"
                runner.failures.append(msg)
                progress(f"error: {msg}")
                res = {"opt": cmp.opt, "model": cmp.model, "status": "failed", "errors": [msg], "equivalent": False}
                _free(device)
            except WorkbenchError as e:
                msg = f"{cmp.opt}: {e}"
                runner.failures.append(msg)
                progress(f"error: {msg}")
                res = {"opt": cmp.opt, "model": cmp.model, "status": "failed", "errors": [msg], "equivalent": False}
            summary["comparisons"].append(res)
            writer.write_summary({**summary, "complete": False})
            if res.get("baseline") is not None:
                print(report.comparison_table(res), flush=True)
                print(flush=True)
        status = "complete" if not runner.failures else "failed"
    finally:
        if sampler is not None:
            sampler.__exit__(None, None, None)
        nvml = {"summary": sampler.summary(), "samples": sampler.samples[-2000:]} if sampler is not None else {}
        summary["out"] = out_dir
        summary["wall_s"] = time.perf_counter() - t0
        summary["failures"] = runner.failures
        summary["complete"] = status != "incomplete"
        writer.write_summary(summary)
        writer.finish(status, nvml=nvml, failures=runner.failures)
        if status == "incomplete":
            progress(f"interrupted: results so far are in {out_dir} (meta.json status incomplete)")
    emit_json(summary)
    if runner.failures:
        for f in runner.failures:
            progress(f"FAILED: {f}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
