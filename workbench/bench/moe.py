"""MoE routing benchmark: eager per-expert loop vs sort_bincount vs grouped (torch and Triton GEMM), on real shapes.

    python -m workbench.bench.moe --out DIR                 # GPU: gpt-oss-20b (as many layers as fit) and
                                                           # qwen3-30b-a3b (<= 12 layers), LoRA r16, checkpointing
    python -m workbench.bench.moe --smoke --out DIR         # CPU, tiny presets (checks the script, not a result)

Per model: a 2-layer probe runs one step of every arm (peak memory -> how many layers fit; also warms Triton's
autotuner), then the full model trains with AdamW at lr=0 (same work, unchanged weights, so every arm sees the
same model and the losses must agree). Arms are interleaved (order rotated per rep); each block is `--steps`
timed steps (one warm-up step in the first rep). Syncs per step (sync counter + CUDA sync-debug warnings) and
device ops per step come from one separate untimed step per arm. The routing savings model
(`workbench.savings.moe_routing_saving`) is fed with the measured per-sync stall and per-launch host cost and
compared with the measured saving of each arm over `eager`. A kernel microbenchmark times the Triton grouped
GEMM against torch._grouped_mm alone (triton.testing.do_bench, median) at the models' expert shapes.

Writes DIR/moe_steps.csv (one row per timed step), DIR/moe_arms.csv (one row per model x arm), DIR/moe_kernels.csv
and DIR/moe_summary.json; prints a short table last.
"""
from __future__ import annotations

import argparse
import csv
import gc
import json
import os
import statistics
import sys
import time

ARMS = {  # bench arm: (moe arm, options)
    "eager": ("eager", {}),
    "sort_bincount": ("sort_bincount", {}),
    "grouped": ("grouped", {}),
    "grouped_triton": ("grouped", {"gemm": "triton"}),
    "grouped_dense": ("grouped", {"gemm": "dense"}),
}
GPU_ARMS = "eager,sort_bincount,grouped,grouped_triton"
CPU_ARMS = "eager,sort_bincount,grouped,grouped_dense"
GPU_CONFIGS = "gpt-oss-20b:fit:8192,qwen3-30b-a3b:12:16384"
CPU_CONFIGS = "tiny-gpt-oss:2:128,tiny-qwen3-moe:2:128"
LENGTHS = "lognormal:6.2:0.8:16"


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _q(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))] if xs else float("nan")


def _med(xs):
    return statistics.median(xs) if xs else float("nan")


def _cleanup(device) -> None:
    import torch
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _is_oom(e: BaseException) -> bool:
    import torch
    return isinstance(e, torch.OutOfMemoryError) or "out of memory" in str(e).lower()


# --- device-op counter (launch proxy) ---------------------------------------------------------------------------

class OpCounter:
    """Counts aten ops that run a kernel on `device_type` tensors (views and allocations excluded), plus the
    Triton grouped-GEMM launches (not aten ops). A proxy for kernel launches: a few aten ops launch more than one."""

    _NO_KERNEL = {"empty", "empty_like", "new_empty", "empty_strided", "new_empty_strided", "detach", "lift_fresh",
                  "_unsafe_view", "set_", "record_stream"}

    def __init__(self, device_type: str):
        self.device_type = device_type
        self.ops = 0
        self._mode = None

    def __enter__(self):
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode

        counter = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                name = func.overloadpacket.__name__
                if not func.is_view and name not in OpCounter._NO_KERNEL:
                    for a in list(args) + list(kwargs.values()):
                        if isinstance(a, torch.Tensor) and a.device.type == counter.device_type:
                            counter.ops += 1
                            break
                return func(*args, **kwargs)

        self._mode = _Mode()
        self._mode.__enter__()
        self._triton0 = _triton_launches()
        return self

    def __exit__(self, *exc):
        self._mode.__exit__(*exc)
        self.ops += _triton_launches() - self._triton0
        return False


def _triton_launches() -> int:
    mod = sys.modules.get("workbench.kernels.grouped_gemm")
    return getattr(mod, "LAUNCHES", 0) if mod is not None else 0


# --- host costs: stall per sync, host time per launch -------------------------------------------------------------

def host_costs(device, n: int = 2000, trials: int = 5) -> dict:
    """launch_ms: host time per queued tiny op that records autograd (host-bound issue rate); stall_ms: extra time
    per op when each is followed by a host read (`.item()`): the GPU idle one sync causes. Medians of `trials`."""
    import torch

    x = torch.zeros(16, device=device)
    w = torch.ones(16, device=device, requires_grad=True)

    def run(sync: bool) -> float:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        for _ in range(n):
            y = x * w
            if sync:
                y[0].item()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return (time.perf_counter() - t0) * 1e3 / n

    run(False), run(True)
    queued = _med([run(False) for _ in range(trials)])
    synced = _med([run(True) for _ in range(trials)])
    return {"launch_ms": queued, "stall_ms": max(0.0, synced - queued), "n": n, "trials": trials}


# --- kernel microbenchmark ---------------------------------------------------------------------------------------

def kernel_micro(device, shapes, seed: int = 0) -> list[dict]:
    """Triton grouped GEMM vs torch._grouped_mm alone: forward and forward+backward, bf16, do_bench medians."""
    import torch
    import triton.testing

    from workbench.kernels.grouped_gemm import grouped_mm
    from workbench.opts.moe import _torch_grouped_mm_fn

    rows = []
    g = torch.Generator(device="cpu").manual_seed(seed)
    for shape_name, T, E, k, K, N in shapes:
        S = T * k
        ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)]).reshape(-1)
        counts = torch.bincount(ids, minlength=E)
        offs = counts.cumsum(0).to(torch.int32).to(device)
        x = torch.randn(S, K, device=device, dtype=torch.bfloat16, requires_grad=True)
        w = (torch.randn(E, K, N, device=device, dtype=torch.bfloat16) * K ** -0.5).requires_grad_()
        dy = torch.randn(S, N, device=device, dtype=torch.bfloat16)
        tgmm = _torch_grouped_mm_fn()
        impls = {"torch": lambda: tgmm(x, w, offs=offs), "triton": lambda: grouped_mm(x, w, offs)}
        ref = impls["torch"]().float()
        for impl, fn in impls.items():
            err = (fn().float() - ref).abs().max().item() / max(1e-6, ref.abs().max().item())
            for what, call, flop_mult in [("fwd", lambda: fn(), 1), ("fwd_bwd", None, 3)]:
                if call is None:
                    def call(fn=fn):
                        torch.autograd.grad(fn(), (x, w), dy)
                med, p20, p80 = triton.testing.do_bench(call, quantiles=[0.5, 0.2, 0.8])
                tflops = flop_mult * 2.0 * S * K * N / (med * 1e-3) / 1e12
                rows.append({"shape": shape_name, "S": S, "E": E, "K": K, "N": N, "impl": impl, "pass": what,
                             "ms": med, "ms_p20": p20, "ms_p80": p80, "tflops": tflops, "max_rel_err_vs_torch": err})
                _log(f"kernel {shape_name} {impl} {what}: {med:.3f} ms ({tflops:.0f} TFLOP/s)")
        del x, w, dy
        _cleanup(device)
    return rows


# --- per-model A/B -----------------------------------------------------------------------------------------------

def _batches(model, tokens, device, n=2, seed=0):
    from workbench.data import make_batches, to_device
    return to_device(make_batches(LENGTHS, tokens, n, model.config.vocab_size, seed=seed), device)


def _build(name, layers, device):
    from workbench.harness import enable_checkpointing
    from workbench.instrument import instrument_layers
    from workbench.models import build_model
    model = build_model(name, layers=layers, device=device, lora_rank=16)
    enable_checkpointing(model)
    instrument_layers(model)
    return model


def _layer_bytes(model) -> int:
    from workbench.instrument.ranges import find_decoder_layers
    layer = find_decoder_layers(model)[0]
    return sum(p.numel() * p.element_size() for p in layer.parameters())


def fit_layers(name, tokens, cap, arms, device) -> tuple[int, dict]:
    """Layers that fit: probe peak memory of every arm on a 2-layer model, extrapolate the per-layer weights."""
    import torch
    from workbench.harness import make_optimizer, train_steps
    from workbench.models import PRESETS
    from workbench.opts import apply

    full = PRESETS[name].config["num_hidden_layers"] if name in PRESETS else cap
    cap = min(cap or full, full)
    if device.type != "cuda":
        return cap, {}
    model = _build(name, 2, device)
    opt = make_optimizer(model, lr=0.0)
    batches = _batches(model, tokens, device, n=1)
    peak_mib = 0.0
    for arm in arms:
        moe_arm, opts = ARMS[arm]
        h = apply(model, "moe", moe_arm, **opts)
        try:
            recs = train_steps(model, batches, steps=1, warmup=0, optimizer=opt, count_syncs=False)
            peak_mib = max(peak_mib, recs[0].peak_mem_mib)
        finally:
            h.revert()
    layer_b = _layer_bytes(model)
    hidden = model.config.hidden_size
    del model, opt, batches
    _cleanup(device)
    total_b = torch.cuda.get_device_properties(device).total_memory
    fixed_b = peak_mib * 2**20 - 2 * layer_b
    per_layer_b = layer_b + tokens * hidden * 2 * 2  # weights + the checkpointed input (and its grad), bf16
    L = int((0.90 * total_b - fixed_b) // per_layer_b)
    info = {"probe_peak_mib": peak_mib, "layer_weight_mib": layer_b / 2**20, "fixed_mib": fixed_b / 2**20,
            "device_total_mib": total_b / 2**20, "layers_fit": L}
    _log(f"{name}: probe peak {peak_mib:.0f} MiB, {layer_b / 2**20:.0f} MiB/layer -> {L} layers fit (cap {cap})")
    return max(1, min(cap, L)), info


def count_step(model, batches, opt, device) -> dict:
    """One untimed step with the sync counter (and CUDA's sync-debug witness) and the device-op counter."""
    from workbench.harness import train_steps
    with OpCounter(device.type) as oc:
        rec = train_steps(model, batches[:1], steps=1, warmup=0, optimizer=opt, count_syncs=True,
                          cross_check=device.type == "cuda")[0]
    by_lp = rec.syncs_by_layer_pass
    return {"syncs_per_step": rec.syncs, "cuda_sync_warnings": rec.cuda_sync_warnings, "ops_per_step": oc.ops,
            "syncs_L00_forward": by_lp.get(("L00", "forward"), 0), "syncs_L00_recompute": by_lp.get(("L00", "recompute"), 0),
            "syncs_L00_backward": by_lp.get(("L00", "backward"), 0), "loss_batch0": rec.loss}


def run_model(name, layers, tokens, arms, a, device, host, step_rows, deadline: float = float("inf")) -> dict:
    from workbench.harness import make_optimizer, train_steps
    from workbench.opts import apply
    from workbench.savings import moe_routing_saving

    model = _build(name, layers, device)
    opt = make_optimizer(model, lr=0.0)  # lr=0: full optimizer work, weights unchanged -> arms comparable
    batches = _batches(model, tokens, device)
    samples = {arm: [] for arm in arms}
    info = {}
    reps_done = 0
    for rep in range(a.reps):
        t_rep = time.perf_counter()
        order = arms[rep % len(arms):] + arms[:rep % len(arms)]
        for arm in order:
            moe_arm, opts = ARMS[arm]
            h = apply(model, "moe", moe_arm, **opts)
            try:
                recs = train_steps(model, batches, steps=a.steps, warmup=1 if rep == 0 else 0, optimizer=opt,
                                   count_syncs=False)
            finally:
                h.revert()
            info[arm] = dict(h.info)
            for r in recs:
                samples[arm].append(r)
                step_rows.append({"model": name, "layers": layers, "tokens": tokens, "arm": arm, "rep": rep,
                                  "step": r.step, "step_ms": r.step_ms, "fwd_ms": r.fwd_ms, "bwd_ms": r.bwd_ms,
                                  "opt_ms": r.opt_ms, "peak_mem_mib": r.peak_mem_mib, "loss": r.loss})
            _log(f"{name} L={layers} rep {rep + 1}/{a.reps} {arm}: {_med([r.step_ms for r in recs]):.1f} ms/step")
        reps_done += 1
        rep_s = time.perf_counter() - t_rep
        if rep + 1 < a.reps and time.perf_counter() + rep_s * (1.0 + 1.0 / max(1, a.steps)) > deadline:
            _log(f"{name}: stopping after {reps_done} reps to stay within --budget-s")
            break
    counts = {}
    for arm in arms:
        moe_arm, opts = ARMS[arm]
        h = apply(model, "moe", moe_arm, **opts)
        try:
            counts[arm] = count_step(model, batches, opt, device)
        finally:
            h.revert()
    base = arms[0]
    base_ms = _med([r.step_ms for r in samples[base]])
    ref_loss = counts[base]["loss_batch0"]
    rows = []
    for arm in arms:
        st = [r.step_ms for r in samples[arm]]
        med = _med(st)
        row = {"model": name, "layers": layers, "tokens": tokens, "arm": arm, "reps": reps_done,
               "gemm": info.get(arm, {}).get("gemm_resolved"), "n": len(st),
               "step_ms": med, "step_ms_p20": _q(st, 0.2), "step_ms_p80": _q(st, 0.8),
               "fwd_ms": _med([r.fwd_ms for r in samples[arm]]), "bwd_ms": _med([r.bwd_ms for r in samples[arm]]),
               "opt_ms": _med([r.opt_ms for r in samples[arm]]),
               "peak_mem_mib": max(r.peak_mem_mib for r in samples[arm]),
               "tokens_per_s": tokens / (med / 1e3), "speedup_vs_eager": base_ms / med, **counts[arm]}
        row["loss_abs_diff_vs_eager"] = abs(row["loss_batch0"] - ref_loss)
        row["equivalent"] = row["loss_abs_diff_vs_eager"] <= 5e-3 * max(1.0, abs(ref_loss))
        if arm != base:
            m = moe_routing_saving(syncs_removed=counts[base]["syncs_per_step"] - counts[arm]["syncs_per_step"],
                                   stall_ms=host["stall_ms"],
                                   launches_removed=counts[base]["ops_per_step"] - counts[arm]["ops_per_step"],
                                   launch_ms=host["launch_ms"], measured_ms=base_ms - med)
            row.update(predicted_saving_ms=m["predicted_ms"], measured_saving_ms=m["measured_ms"],
                       savings_formula=m["formula"])
        rows.append(row)
    del model, opt, batches
    _cleanup(device)
    return {"rows": rows}


# --- output ------------------------------------------------------------------------------------------------------

def _write_csv(path, rows):
    keys = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)


def _fmt(x, spec=".1f"):
    if x is None or (isinstance(x, float) and x != x):
        return "-"
    return format(x, spec) if isinstance(x, (int, float)) and not isinstance(x, bool) else str(x)


def table(arm_rows, kernel_rows) -> str:
    head = ["model", "L", "T", "arm", "gemm", "step_ms", "p20-p80", "fwd", "bwd", "syncs/step", "ops/step",
            "peak_MiB", "speedup", "pred_ms", "meas_ms", "equiv"]
    lines = [head]
    for r in arm_rows:
        lines.append([r["model"], r["layers"], r["tokens"], r["arm"], r.get("gemm") or "-", _fmt(r["step_ms"]),
                      f"{_fmt(r['step_ms_p20'])}-{_fmt(r['step_ms_p80'])}", _fmt(r["fwd_ms"]), _fmt(r["bwd_ms"]),
                      r["syncs_per_step"], r["ops_per_step"], _fmt(r["peak_mem_mib"], ".0f"),
                      _fmt(r["speedup_vs_eager"], ".3f"), _fmt(r.get("predicted_saving_ms")),
                      _fmt(r.get("measured_saving_ms")), "yes" if r["equivalent"] else "NO"])
    if kernel_rows:
        lines.append([""] * len(head))
        lines.append(["kernel", "S", "E", "K x N", "impl", "pass", "ms", "p20-p80", "TFLOP/s", "rel_err"] +
                     [""] * (len(head) - 10))
        for r in kernel_rows:
            lines.append([r["shape"], r["S"], r["E"], f"{r['K']}x{r['N']}", r["impl"], r["pass"], _fmt(r["ms"], ".3f"),
                          f"{_fmt(r['ms_p20'], '.3f')}-{_fmt(r['ms_p80'], '.3f')}", _fmt(r["tflops"], ".0f"),
                          _fmt(r["max_rel_err_vs_torch"], ".1e")] + [""] * (len(head) - 10))
    widths = [max(len(str(row[i])) for row in lines) for i in range(len(head))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in lines)


def _env(device) -> dict:
    try:
        from workbench.results import device_info, git_sha, versions
        return {"versions": versions(), "device": device_info(device), "git_sha": git_sha()}
    except Exception as e:  # noqa: BLE001 - a missing optional package must not cost the GPU run
        import torch
        return {"torch": torch.__version__, "env_error": repr(e)}


def _kernel_shapes(configs) -> list:
    from workbench.models import PRESETS
    shapes = []
    for name, _, tokens in configs:
        c = PRESETS[name].config
        E = c.get("num_local_experts") or c.get("num_experts")
        k = c["num_experts_per_tok"]
        H = c["hidden_size"]
        inter = c.get("moe_intermediate_size") or c["intermediate_size"]
        shapes.append((f"{name}/gate_up", tokens, E, k, H, 2 * inter))
        shapes.append((f"{name}/down", tokens, E, k, inter, H))
    return shapes


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--configs", default=None,
                   help=f"MODEL:LAYERS:TOKENS,... (LAYERS 'fit' = as many as fit; a number = at most that many); "
                        f"default {GPU_CONFIGS} on a GPU")
    p.add_argument("--arms", default=None, help=f"default {GPU_ARMS} on a GPU, {CPU_ARMS} on CPU (eager first)")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--steps", type=int, default=2, help="timed steps per arm per rep")
    p.add_argument("--no-kernels", action="store_true", help="skip the kernel microbenchmark")
    p.add_argument("--budget-s", type=float, default=330.0,
                   help="soft wall-time budget: fewer reps (at least one) and skipped models beyond it")
    p.add_argument("--out", default=None)
    p.add_argument("--smoke", action="store_true", help="tiny CPU run (checks the script, not a result)")
    a = p.parse_args(argv)
    t_start = time.perf_counter()

    import torch
    from workbench.models import resolve_device

    device = resolve_device("cpu" if a.smoke else "auto")
    cuda = device.type == "cuda"
    if a.smoke:
        a.reps, a.steps = 2, 1
    arms = (a.arms or (GPU_ARMS if cuda else CPU_ARMS)).split(",")
    for arm in arms:
        if arm not in ARMS:
            raise SystemExit(f"unknown arm {arm!r}; arms: {', '.join(ARMS)}")
    if arms[0] != "eager":
        raise SystemExit("the first arm must be eager (the baseline)")
    configs = []
    for s in (a.configs or (GPU_CONFIGS if cuda else CPU_CONFIGS)).split(","):
        name, layers, tokens = s.split(":")
        configs.append((name, None if layers == "fit" else int(layers), int(tokens)))

    env = _env(device)
    host = host_costs(device, n=2000 if cuda else 200)
    _log(f"host costs: launch {host['launch_ms'] * 1e3:.1f} us, stall per sync {host['stall_ms'] * 1e3:.1f} us")
    kernel_rows = []
    if cuda and not a.no_kernels:
        kernel_rows = kernel_micro(device, _kernel_shapes(configs))
    step_rows, arm_rows, fits, failures = [], [], {}, []
    t_models = time.perf_counter()
    for i, (name, cap, tokens) in enumerate(configs):
        # each model gets an equal share of what is left of the budget
        deadline = t_models + (t_start + a.budget_s - t_models) * (i + 1) / len(configs)
        if time.perf_counter() > deadline and arm_rows:
            failures.append(f"{name}: skipped (--budget-s {a.budget_s} spent)")
            continue
        oom = None
        try:
            L, fit_info = fit_layers(name, tokens, cap, arms, device)
            fits[name] = fit_info
        except Exception as e:  # noqa: BLE001 - one model's failure must not lose the other's results
            if not _is_oom(e):
                raise
            oom = str(e)
        if oom is not None:  # cleaned up outside the except block, so the traceback no longer pins the model
            failures.append(f"{name}: probe OOM ({oom[:200]})")
            _cleanup(device)
            continue
        for attempt in range(2):
            oom = None
            try:
                res = run_model(name, L, tokens, arms, a, device, host, step_rows, deadline=deadline)
                arm_rows += res["rows"]
                break
            except Exception as e:  # noqa: BLE001
                if not _is_oom(e) or attempt == 1:
                    raise
                oom = str(e)
            _cleanup(device)
            step_rows[:] = [r for r in step_rows if not (r["model"] == name and r["layers"] == L)]
            _log(f"{name}: OOM at L={L}, retrying with {max(1, L * 3 // 4)}")
            failures.append(f"{name}: OOM at L={L}")
            L = max(1, L * 3 // 4)

    summary = {"command": "python -m workbench.bench.moe " + " ".join(argv if argv is not None else sys.argv[1:]),
               "device": str(device), "arms": arms, "reps": a.reps, "steps": a.steps, "host_costs": host,
               "fits": fits, "failures": failures, "arms_results": arm_rows, "kernels": kernel_rows, "env": env,
               "wall_s": time.perf_counter() - t_start}
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        _write_csv(os.path.join(a.out, "moe_steps.csv"), step_rows)
        _write_csv(os.path.join(a.out, "moe_arms.csv"), arm_rows)
        if kernel_rows:
            _write_csv(os.path.join(a.out, "moe_kernels.csv"), kernel_rows)
        with open(os.path.join(a.out, "moe_summary.json"), "w") as f:
            json.dump(summary, f, indent=2, default=str)
    print(f"host: launch {host['launch_ms'] * 1e3:.1f} us/op, stall {host['stall_ms'] * 1e3:.1f} us/sync; "
          f"wall {summary['wall_s']:.0f} s" + (f"; failures: {failures}" if failures else ""))
    print(table(arm_rows, kernel_rows))
    return 0 if arm_rows and all(r["equivalent"] for r in arm_rows) else 1


if __name__ == "__main__":
    sys.exit(main())
