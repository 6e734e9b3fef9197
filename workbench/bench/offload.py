"""Offloaded checkpointing on a GPU: blocking reload vs double-buffered prefetch, and the (L-1)·min(c,g) model.

    python -m workbench.bench.offload --out DIR           # CUDA: llama-3.1-8b, qwen3-8b, qwen3-14b (8 layers), 16k + 32k tokens
    python -m workbench.bench.offload --smoke --out DIR   # CPU, tiny presets: checks the script, not a result

    # T = tokens per batch, H = hidden size, L = decoder layers; c = reload time, g = recompute + backward time

For each config (model, L, T), in this order:
1. check: one forward/backward per arm at `--check-tokens` tokens: LoRA gradients of the offload arms against
   `no_offload` (torch.equal) and `none` (max abs diff), syncs per step (dispatch counter, plus CUDA's sync debug
   mode as the second witness);
2. c and g per layer: `sync_reload` with timing events around every reload (copy stream) and every recompute +
   backward (compute stream), where nothing overlaps; c also as input bytes over the pinned H2D bandwidth,
   measured with a plain copy of the same size;
3. timed reps: the arms interleaved (order rotated per rep), `--warmup` + `--steps` steps each, so drift hits all
   arms alike; steps/s (median, p20-p80) and peak VRAM per arm. An arm that runs out of memory is recorded as
   failed and left out of later reps;
4. the savings model: predicted = sum_{i=1}^{L-1} min(c_{i-1}, g_i), measured = median step (sync_reload) -
   median step (double_buffer), overlap efficiency = measured / predicted.
Batches are one document of T tokens by default (`--lengths single`: SDPA runs causal, without a T x T mask);
any data.py length spec works (`--lengths lognormal:6.2:0.8:16`). A config starts only when the time spent plus
its estimate (scaled from the last finished config) stays under `--budget-s` (else it is recorded as skipped).
Writes DIR/steps.csv (long format), summary.csv (one row per config and arm), layers.csv (c and g per layer),
summary.json (after every config, so a run cut short keeps what it measured); prints a short table last.
"""
from __future__ import annotations

import argparse
import csv
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time

GPU_CONFIGS = ["llama-3.1-8b:8:16384", "llama-3.1-8b:8:32768", "qwen3-8b:8:16384", "qwen3-8b:8:32768",
               "qwen3-14b:8:16384", "qwen3-14b:8:32768"]
SMOKE_CONFIGS = ["tiny-llama:3:256", "tiny-qwen3:3:256"]
ARMS = ("sync_reload", "double_buffer", "no_offload", "none")


def _q(xs, q):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    pos = q * (len(xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _med(xs):
    return statistics.median(xs) if xs else float("nan")


def _is_oom(e: BaseException) -> bool:
    import torch
    return isinstance(e, torch.OutOfMemoryError) or "out of memory" in str(e).lower()


def _cleanup(device) -> None:
    import torch
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _env(device) -> dict:
    import peft
    import torch
    import transformers
    sha = None
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             timeout=5).stdout.strip() or None
    except Exception:  # noqa: BLE001 - no git on the machine is fine
        pass
    return {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
            "python": platform.python_version(), "git_sha": sha,
            "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"}


def _parse_config(s: str):
    parts = s.split(":")
    if len(parts) != 3:
        raise SystemExit(f"--configs entries are MODEL:LAYERS:TOKENS, got {s!r}")
    return parts[0], int(parts[1]), int(parts[2])


def _batches(model, tokens, lengths, n, device, seed=0):
    from workbench.data import make_batches, to_device
    spec = f"fixed:{tokens}" if lengths == "single" else lengths
    return to_device(make_batches(spec, tokens, n, model.config.vocab_size, seed=seed), device)


def _pinned_bandwidth(nbytes: int, device, reps: int = 5) -> dict:
    """H2D and D2H GB/s of a plain pinned copy of `nbytes` (median of `reps`)."""
    import torch
    if device.type != "cuda":
        src = torch.empty(nbytes, dtype=torch.uint8)
        dst = torch.empty_like(src)
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            dst.copy_(src)
            ts.append((time.perf_counter() - t0) * 1e3)
        ms = _med(ts)
        return {"h2d_gb_per_s": nbytes / ms / 1e6, "d2h_gb_per_s": nbytes / ms / 1e6, "h2d_ms": ms, "d2h_ms": ms}
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(nbytes, dtype=torch.uint8, device=device)
    out = {}
    for name, dst, src in (("h2d", dev, host), ("d2h", host, dev)):
        ts = []
        for _ in range(reps + 1):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            dst.copy_(src, non_blocking=True)
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b))
        ms = _med(ts[1:])
        out[f"{name}_ms"] = ms
        out[f"{name}_gb_per_s"] = nbytes / ms / 1e6
    del host, dev
    return out


def _check(model, batch, device, arms) -> dict:
    """One forward/backward per arm (no optimizer step): gradients vs no_offload / none, syncs per step."""
    import torch
    from workbench.instrument import SyncCounter, state
    from workbench.models import lora_parameters, model_inputs
    from workbench.opts import offload
    grads, out = {}, {}
    # no_offload twice: whether the kernels are deterministic at all (flash-attention backward may not be), so a
    # non-bitwise offload arm can be read against the run-to-run difference
    runs = list(arms) + (["no_offload_repeat"] if "no_offload" in arms else [])
    for key in runs:
        arm = "no_offload" if key == "no_offload_repeat" else key
        h = offload.apply(model, arm)
        try:
            model.zero_grad(set_to_none=True)
            counter = SyncCounter(cross_check=device.type == "cuda", device_type=device.type)
            with counter:
                with state.phase(state.FORWARD):
                    loss = model(**model_inputs(model, batch)).loss
                with state.phase(state.BACKWARD):
                    loss.backward()
            grads[key] = {n: p.grad.detach().clone() for n, p in lora_parameters(model)}
            out[key] = {"status": "ok", "loss": float(loss.detach().float().item()), "syncs": counter.total,
                        "cuda_sync_warnings": counter.cuda_warnings if counter.cross_check else None}
        except Exception as e:  # noqa: BLE001 - an OOM is a result here
            if not _is_oom(e):
                raise
            out[key] = {"status": "oom", "error": str(e).splitlines()[0][:200]}
        finally:
            h.revert()
            model.zero_grad(set_to_none=True)
            _cleanup(device)
    for arm in runs:
        if arm not in grads:
            continue
        for ref in ("no_offload", "none"):
            if ref == arm or ref not in grads:
                continue
            g, r = grads[arm], grads[ref]
            out[arm][f"grads_equal_{ref}"] = all(torch.equal(g[n], r[n]) for n in g)
            out[arm][f"grads_max_abs_diff_{ref}"] = max(float((g[n].float() - r[n].float()).abs().max()) for n in g)
            out[arm][f"grads_max_abs_{ref}"] = max(float(r[n].float().abs().max()) for n in r)
    return out


def _layer_times(model, batches, device, opt, host_pool, steps=2):
    """c and g per layer from `sync_reload` with timing events; medians over `steps` steps (after a warmup)."""
    from workbench.harness import train_steps
    from workbench.opts import offload
    h = offload.apply(model, "sync_reload", timing=True, host_pool=host_pool)
    try:
        train_steps(model, batches, steps=1, warmup=0, optimizer=opt, count_syncs=False)
        offload.layer_times_ms(h)  # drop the warmup step's
        train_steps(model, batches, steps=steps, warmup=0, optimizer=opt, count_syncs=False)
        rows = offload.layer_times_ms(h)
    finally:
        h.revert()
        _cleanup(device)
    by_layer: dict[int, dict] = {}
    for r in rows:
        d = by_layer.setdefault(r["layer"], {"reload_ms": [], "compute_ms": []})
        d["reload_ms"].append(r["reload_ms"])
        d["compute_ms"].append(r["compute_ms"])
    layers = sorted(by_layer)
    return ([_med(by_layer[i]["reload_ms"]) for i in layers], [_med(by_layer[i]["compute_ms"]) for i in layers])


def run_config(model, name, L, T, a, device, host_pool, env, out_rows, layer_rows) -> dict:
    import torch
    from workbench.harness import make_optimizer, train_steps
    from workbench.opts import offload
    from workbench.savings import offload_saving, reload_ms_from_bandwidth

    cfg_id = f"{name}:L{L}:T{T}"
    res = {"config": cfg_id, "model": name, "layers": L, "tokens": T, "lengths": a.lengths, "status": "ok"}
    t0 = time.perf_counter()
    # 1. equivalence and syncs, at a smaller size
    if a.check_tokens > 0:
        cb = _batches(model, min(a.check_tokens, T), a.lengths, 1, device, seed=7)[0]
        res["check"] = _check(model, cb, device, a.arms)
        del cb
    batches = _batches(model, T, a.lengths, 2, device)
    opt = make_optimizer(model)
    # 2. c and g per layer, and c from the pinned bandwidth
    c_ms, g_ms = _layer_times(model, batches, device, opt, host_pool)
    hidden = model.config.hidden_size
    elt = next(model.parameters()).element_size()
    nbytes = T * hidden * elt
    bw = _pinned_bandwidth(nbytes, device)
    c_bw = reload_ms_from_bandwidth(nbytes, bw["h2d_gb_per_s"])
    for i, (c, g) in enumerate(zip(c_ms, g_ms)):
        layer_rows.append({"config": cfg_id, "model": name, "layers": L, "tokens": T, "layer": i, "reload_ms": c,
                           "compute_ms": g, "reload_bw_ms": c_bw, "input_bytes": nbytes})
    res.update({"input_bytes_per_layer": nbytes, "bandwidth": bw, "c_ms_mean": _med(c_ms) if c_ms else None,
                "g_ms_mean": _med(g_ms) if g_ms else None, "c_bw_ms": c_bw})
    # 3. timed reps, arms interleaved
    step_ms = {arm: [] for arm in a.arms}
    extra = {arm: {"peak_mem_mib": [], "fwd_ms": [], "bwd_ms": [], "status": "ok", "info": {}} for arm in a.arms}
    arms = list(a.arms)
    for rep in range(a.reps):
        order = arms[rep % len(arms):] + arms[:rep % len(arms)]
        for arm in order:
            if extra[arm]["status"] != "ok":
                continue
            h = offload.apply(model, arm, host_pool=host_pool, min_free_mib=a.min_free_mib)
            try:
                recs = train_steps(model, batches, steps=a.steps, warmup=a.warmup, optimizer=opt, count_syncs=False)
                for r in recs:
                    step_ms[arm].append(r.step_ms)
                    extra[arm]["peak_mem_mib"].append(r.peak_mem_mib)
                    extra[arm]["fwd_ms"].append(r.fwd_ms)
                    extra[arm]["bwd_ms"].append(r.bwd_ms)
                    for metric, value, unit in (("step_ms", r.step_ms, "ms"), ("fwd_ms", r.fwd_ms, "ms"),
                                                ("bwd_ms", r.bwd_ms, "ms"), ("peak_mem_mib", r.peak_mem_mib, "MiB"),
                                                ("loss", r.loss, "nats")):
                        out_rows.append({"config": cfg_id, "model": name, "layers": L, "tokens": T, "arm": arm,
                                         "rep": rep, "step": r.step, "metric": metric, "value": value, "unit": unit,
                                         **env})
                extra[arm]["info"] = {k: v for k, v in h.info.items()}
            except Exception as e:  # noqa: BLE001 - OOM is a result: record it and go on
                if not _is_oom(e):
                    raise
                extra[arm]["status"] = "oom"
                extra[arm]["error"] = str(e).splitlines()[0][:200]
                print(f"  {cfg_id} {arm}: out of memory (recorded as failed)", file=sys.stderr)
            finally:
                h.revert()
                opt.zero_grad(set_to_none=True)
                _cleanup(device)
    res["arms"] = {}
    for arm in a.arms:
        xs = step_ms[arm]
        med = _med(xs)
        res["arms"][arm] = {
            "arm": arm, "status": extra[arm]["status"], "error": extra[arm].get("error"), "n_steps": len(xs),
            "step_ms": med, "step_ms_p20": _q(xs, 0.2), "step_ms_p80": _q(xs, 0.8),
            "steps_per_s": 1e3 / med if xs else float("nan"), "fwd_ms": _med(extra[arm]["fwd_ms"]),
            "bwd_ms": _med(extra[arm]["bwd_ms"]),
            "peak_mem_mib": max(extra[arm]["peak_mem_mib"]) if extra[arm]["peak_mem_mib"] else float("nan"),
            "tokens_per_s": T * 1e3 / med if xs else float("nan"), "info": extra[arm]["info"]}
    # 4. the savings model
    s, d = res["arms"].get("sync_reload"), res["arms"].get("double_buffer")
    measured = (s["step_ms"] - d["step_ms"]) if (s and d and s["n_steps"] and d["n_steps"]) else None
    if c_ms:
        res["savings_model"] = offload_saving(c_ms, g_ms, measured_ms=measured)
        res["savings_model_bw"] = offload_saving([c_bw] * len(g_ms), g_ms, measured_ms=measured)
    if measured is not None:
        res["speedup_double_vs_sync"] = s["step_ms"] / d["step_ms"]
        n = res["arms"].get("no_offload")
        if n and n["n_steps"]:
            res["gap_double_vs_no_offload_ms"] = d["step_ms"] - n["step_ms"]
            res["extra_vram_double_vs_no_offload_mib"] = d["peak_mem_mib"] - n["peak_mem_mib"]
        res["extra_vram_double_vs_sync_mib"] = d["peak_mem_mib"] - s["peak_mem_mib"]
    res["wall_s"] = time.perf_counter() - t0
    del batches, opt
    _cleanup(device)
    return res


def _summary_rows(results, env):
    rows = []
    for r in results:
        sm = r.get("savings_model") or {}
        for arm, x in (r.get("arms") or {}).items():
            chk = (r.get("check") or {}).get(arm, {})
            rows.append({"config": r["config"], "model": r["model"], "layers": r["layers"], "tokens": r["tokens"],
                         "arm": arm, "status": x["status"], "n_steps": x["n_steps"], "step_ms": x["step_ms"],
                         "step_ms_p20": x["step_ms_p20"], "step_ms_p80": x["step_ms_p80"],
                         "steps_per_s": x["steps_per_s"], "tokens_per_s": x["tokens_per_s"], "fwd_ms": x["fwd_ms"],
                         "bwd_ms": x["bwd_ms"], "peak_mem_mib": x["peak_mem_mib"],
                         "pinned_mib": (x["info"].get("pinned_bytes", 0) or 0) / 2**20,
                         "n_buffers": x["info"].get("n_buffers"), "fallbacks": "; ".join(x["info"].get("fallbacks", [])),
                         "check_syncs": chk.get("syncs"), "check_cuda_sync_warnings": chk.get("cuda_sync_warnings"),
                         "grads_equal_no_offload": chk.get("grads_equal_no_offload"),
                         "grads_max_abs_diff_none": chk.get("grads_max_abs_diff_none"),
                         "c_ms": r.get("c_ms_mean"), "g_ms": r.get("g_ms_mean"), "c_bw_ms": r.get("c_bw_ms"),
                         "predicted_saving_ms": sm.get("predicted_ms"), "measured_saving_ms": sm.get("measured_ms"),
                         "overlap_efficiency": sm.get("overlap_efficiency"), **env})
    return rows


def _write_csv(path, rows):
    if not rows:
        open(path, "w").close()
        return
    keys = list(rows[0].keys())
    for r in rows[1:]:
        keys += [k for k in r if k not in keys]
    tmp = path + ".tmp"
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    os.replace(tmp, path)


def _fmt(x, spec=".1f"):
    if x is None or (isinstance(x, float) and x != x):
        return "-"
    return format(x, spec)


def _table(results) -> str:
    lines = [f"{'config':<26} {'arm':<14} {'steps/s':>8} {'step_ms p20-p80':>22} {'peak GiB':>9} "
             f"{'c ms':>6} {'g ms':>7} {'pred ms':>8} {'meas ms':>8} {'eff':>5}"]
    for r in results:
        if r.get("status") != "ok":
            lines.append(f"{r['config']:<26} {r['status']}: {r.get('reason', '')}")
            continue
        sm = r.get("savings_model") or {}
        for k, (arm, x) in enumerate(r["arms"].items()):
            tail = ""
            if k == 0:
                tail = (f" {_fmt(r.get('c_ms_mean'), '.2f'):>6} {_fmt(r.get('g_ms_mean')):>7} "
                        f"{_fmt(sm.get('predicted_ms')):>8} {_fmt(sm.get('measured_ms')):>8} "
                        f"{_fmt(sm.get('overlap_efficiency'), '.2f'):>5}")
            if x["status"] != "ok":
                lines.append(f"{r['config'] if k == 0 else '':<26} {arm:<14} {x['status']:>8}{'':>33}{tail}")
                continue
            spread = f"{_fmt(x['step_ms'])} ({_fmt(x['step_ms_p20'])}-{_fmt(x['step_ms_p80'])})"
            lines.append(f"{r['config'] if k == 0 else '':<26} {arm:<14} {_fmt(x['steps_per_s'], '.3f'):>8} "
                         f"{spread:>22} {_fmt(x['peak_mem_mib'] / 1024, '.2f'):>9}{tail}")
        if "speedup_double_vs_sync" in r:
            vram = r.get("extra_vram_double_vs_sync_mib")
            vram = "" if vram is None or vram != vram else f", {vram:+.0f} MiB peak"
            lines.append(f"{'':<26} double_buffer vs sync_reload: x{r['speedup_double_vs_sync']:.4f} steps/s{vram}")
        chk = r.get("check") or {}
        if chk:
            eq = ", ".join(f"{k} {v.get('grads_equal_no_offload', v.get('status'))}" for k, v in chk.items()
                           if k not in ("no_offload", "none"))
            sy = ", ".join(f"{k} {v.get('syncs')}/{v.get('cuda_sync_warnings')}" for k, v in chk.items()
                           if k != "no_offload_repeat")
            lines.append(f"{'':<26} check: LoRA grads == no_offload: {eq}; syncs/step (counter/CUDA warnings): {sy}")
    return "\n".join(lines)


def _hidden(name: str) -> int | None:
    from workbench.models import PRESETS
    p = PRESETS.get(name)
    return p.config.get("hidden_size") if p else None


def _estimate_s(last, name, L, T, new_model: bool) -> float:
    """Rough seconds a config will take, scaled from the last finished one (tokens^1.3 for attention, hidden^2
    for the matmuls, layers); 0 when nothing finished yet (the first config always runs)."""
    if last is None:
        return 0.0
    wall, t0, h0, l0 = last
    h = _hidden(name)
    scale = (T / t0) ** 1.3 * (L / l0) * ((h / h0) ** 2 if h and h0 else 1.0)
    return wall * scale + (30.0 if new_model else 0.0)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="directory for steps.csv, summary.csv, layers.csv, summary.json")
    p.add_argument("--configs", default=None, help="comma list of MODEL:LAYERS:TOKENS (default: the GPU set)")
    p.add_argument("--arms", default=",".join(ARMS))
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--steps", type=int, default=2, help="timed steps per arm per rep")
    p.add_argument("--warmup", type=int, default=1, help="steps dropped per arm per rep")
    p.add_argument("--lengths", default="single", help="'single' (one document of T tokens) or a data.py spec")
    p.add_argument("--attn", default=None, help="attention implementation (default: the family's)")
    p.add_argument("--check-tokens", type=int, default=4096, help="size of the equivalence check (0: skip)")
    p.add_argument("--min-free-mib", type=float, default=512.0)
    p.add_argument("--budget-s", type=float, default=400.0,
                   help="start a config only when the time spent plus its estimate stays under this")
    p.add_argument("--device", default="auto")
    p.add_argument("--smoke", action="store_true", help="tiny CPU run (checks the script, not a result)")
    a = p.parse_args(argv)
    t_start = time.perf_counter()

    import torch
    from workbench.models import build_model, resolve_device
    from workbench.opts.offload import HostPool

    if a.smoke:
        a.device = "cpu"
        a.configs = a.configs or ",".join(SMOKE_CONFIGS)
        a.reps, a.steps, a.warmup, a.check_tokens, a.budget_s = 2, 1, 1, 64, float("inf")
    device = resolve_device(a.device)
    configs = [_parse_config(s) for s in (a.configs or ",".join(GPU_CONFIGS)).split(",") if s]
    a.arms = tuple(x for x in a.arms.split(",") if x)
    bad = [x for x in a.arms if x not in ARMS]
    if bad:
        raise SystemExit(f"unknown arms {bad}; arms: {', '.join(ARMS)}")
    os.makedirs(a.out, exist_ok=True)
    env = _env(device)
    host_pool = HostPool(pin=device.type == "cuda")
    results, out_rows, layer_rows = [], [], []
    model, model_key = None, None
    last = None  # (wall_s, tokens, hidden, layers) of the last finished config: scales the next one's estimate
    for name, L, T in configs:
        elapsed = time.perf_counter() - t_start
        est = _estimate_s(last, name, L, T, new_model=model_key != (name, L))
        if elapsed + est > a.budget_s:
            results.append({"config": f"{name}:L{L}:T{T}", "model": name, "layers": L, "tokens": T,
                            "status": "skipped", "reason": f"time budget: {elapsed:.0f} s spent + ~{est:.0f} s "
                                                           f"estimated > {a.budget_s:.0f} s"})
            continue
        try:
            if model_key != (name, L):
                model = None
                _cleanup(device)
                tb = time.perf_counter()
                model = build_model(name, layers=L, attn=a.attn, device=device)
                model_key = (name, L)
                print(f"built {name} L={L} in {time.perf_counter() - tb:.1f} s", file=sys.stderr)
            print(f"config {name} L={L} T={T} ...", file=sys.stderr)
            res = run_config(model, name, L, T, a, device, host_pool, env, out_rows, layer_rows)
        except Exception as e:  # noqa: BLE001 - one failed config must not lose the others
            if not _is_oom(e):
                import traceback
                traceback.print_exc()
            res = {"config": f"{name}:L{L}:T{T}", "model": name, "layers": L, "tokens": T,
                   "status": "oom" if _is_oom(e) else "error", "reason": str(e).splitlines()[0][:300] if str(e) else type(e).__name__}
            _cleanup(device)
        results.append(res)
        if res.get("wall_s"):
            last = (res["wall_s"], T, _hidden(name), L)
        # write after every config: a run cut short keeps what it measured
        _write_csv(os.path.join(a.out, "steps.csv"), out_rows)
        _write_csv(os.path.join(a.out, "summary.csv"), _summary_rows(results, env))
        _write_csv(os.path.join(a.out, "layers.csv"), layer_rows)
        summary = {"bench": "offload", "device": str(device), "env": env, "command": " ".join(sys.argv),
                   "args": {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(a).items()},
                   "pinned_pool": host_pool.stats(), "wall_s": time.perf_counter() - t_start, "configs": results}
        tmp = os.path.join(a.out, "summary.json.tmp")
        with open(tmp, "w") as f:
            json.dump(summary, f, indent=1, default=str)
        os.replace(tmp, os.path.join(a.out, "summary.json"))
    model = None
    print(f"offload bench on {env['device_name']} ({env['torch']}, transformers {env['transformers']}), "
          f"{time.perf_counter() - t_start:.0f} s; c = reload ms/layer, g = recompute+backward ms/layer; "
          f"pred = sum min(c_(i-1), g_i), meas = sync_reload - double_buffer step ms, eff = meas/pred")
    print(_table(results))
    return 0 if all(r.get("status") == "ok" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
