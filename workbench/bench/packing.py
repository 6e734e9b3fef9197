"""Packed-sequence metadata on a GPU: per-layer rebuild vs once-per-batch cache vs collate-time precompute.

    python -m workbench.bench.packing --out DIR            # GPU: qwen3-0.6b (28 L) + llama-3.2-1b (16 L), 16k tokens
    python -m workbench.bench.packing --smoke --out DIR    # CPU: tiny presets, a few hundred tokens (checks the script)

For each model and each backend that runs (varlen, sdpa; flex last, in a child process under a time budget), LoRA
training steps with non-reentrant checkpointing (p = 2 passes build: forward + recompute), lr = 0 so every arm sees
the same weights and the losses of one batch must match across arms. Per arm: step / forward / backward ms (median,
p20-p80, arms interleaved A B C A B C), syncs per step (a separate counted step), peak memory, tokens/s. s, the cost
of one metadata build including its syncs, is measured apart (back-to-back builds on the idle device, a sync after
the last) and turned into the predicted saving with `workbench.savings.packing_saving`: (L*p - 1)*s for cached
(the forward saves (L-1)*s, the recompute L*s), L*p*s for precomputed; the measured saving is the difference of the
median step times. An L sweep (4, 8, 16, 28 on the qwen3-0.6b shape, layers cut through `config.num_hidden_layers`)
fits the saving's slope per layer, to compare with p*s.

s measured on the idle device misses most of a build's real cost: each sync drains the GPU queue, and the GPU then
idles until the host has launched new work. So after the timed reps, one *untimed* profiled step of the `rebuild`
arm per (model, backend) (torch.profiler, CPU + CUDA, `wb/...` ranges on) gives s_stall: the mean GPU idle time
each `wb/Lxx/attn/meta` range causes (`workbench.traces.stall.meta_stall_ms`), and a second prediction
pred_stall = packing_saving(L, s_stall). The sweep's p*s_stall slope uses the profile at the sweep's largest L. On a
CPU run the trace has no kernels: s_stall is NaN. The traces go into DIR/traces.tar (one .json.gz per profile,
capped at ~14 MiB in all, first profiles first).

Writes DIR/results.csv (long format, environment columns), DIR/summary.json and DIR/traces.tar (at most 3 files;
the flex child adds DIR/flex-<model>/{results.csv,summary.json} and writes no traces); prints a short table last.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import statistics
import re
import subprocess
import sys
import tarfile
import tempfile
import time

ARMS = ("rebuild", "cached", "precomputed")
LENGTHS = "lognormal:5.5:0.8:16"
"""Document lengths (median ~245 tokens): the two fullest 16k bins hold 14 and 88 documents."""
SMOKE_LENGTHS = "lognormal:3.4:0.8:2"
TRACES_TAR_MAX_BYTES = 14 * 2**20
"""traces.tar stays under the 16 MiB a file that comes back from the GPU machine may have."""


def _q(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))] if xs else float("nan")


def _med(xs):
    return statistics.median(xs) if xs else float("nan")


def _sync(device):
    import torch
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _env(device) -> dict:
    import torch
    import transformers
    env = {"torch": torch.__version__, "transformers": transformers.__version__, "python": platform.python_version(),
           "device": str(device), "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else
           platform.processor() or "cpu"}
    try:
        env["git_sha"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                        cwd=os.path.dirname(__file__), timeout=5).stdout.strip()
    except Exception:
        env["git_sha"] = ""
    return env


def measure_s_ms(position_ids, backend: str, dtype, window=None, n: int = 20) -> float:
    """Wall ms of one in-model metadata build (the rebuild arm's per-layer work, its syncs included): `n` builds
    back to back on the otherwise idle device, one device sync after the last."""
    from workbench.opts import packing

    def once():
        meta = packing._build_in_model(position_ids, backend)
        if backend != "varlen":
            packing._variant(meta, backend, window, dtype, position_ids.device)

    once()
    _sync(position_ids.device)
    t0 = time.perf_counter()
    for _ in range(n):
        once()
    _sync(position_ids.device)
    return (time.perf_counter() - t0) * 1e3 / n


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text)


def profile_stall(model, batches_cpu, backend, device, trace_dir, tag, log=print) -> dict:
    """s_stall of the rebuild arm: one untimed profiled step of `rebuild` on the first batch (the arm is already warm
    from `run_arms`), `wb/...` ranges on; the trace (.json.gz) goes to `trace_dir`. Returns `meta_stall_ms`'s dict
    plus "trace" (path) and "profile_s" (wall s of the profile, export and parse)."""
    from torch.profiler import ProfilerActivity, profile

    from workbench.data import to_device
    from workbench.harness import make_optimizer, train_steps
    from workbench.instrument import Ranges
    from workbench.opts import packing
    from workbench.traces.stall import meta_stall_ms

    t0 = time.perf_counter()
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    opt = make_optimizer(model, lr=0.0)
    path = os.path.join(trace_dir, _safe_name(f"stall_{tag}_{backend}_rebuild") + ".json.gz")
    h = packing.apply(model, "rebuild", backend=backend)
    try:
        batch = to_device(batches_cpu[:1], device, prepare=h.prepare_batch)
        _sync(device)
        with profile(activities=acts, record_shapes=False, with_stack=False, profile_memory=False) as prof:
            train_steps(model, batch, steps=1, warmup=0, optimizer=opt, count_syncs=False, inputs_fn=h.inputs_fn,
                        ranges=Ranges(nvtx=False, profiler=True))
    finally:
        h.revert()
    _sync(device)
    prof.export_chrome_trace(path)
    st = meta_stall_ms(path)
    st["trace"] = path
    st["profile_s"] = time.perf_counter() - t0
    log(f"  {backend}/rebuild profiled: {st['n']} builds, s_stall {st['s_stall_ms']:.3f} ms (median "
        f"{st['median_gpu_idle_ms']:.3f}, host {st['median_host_ms']:.3f}) in {st['profile_s']:.1f} s"
        + (f"; {st['why']}" if st["why"] else ""))
    return st


def _no_stall(why: str) -> dict:
    nan = float("nan")
    return {"rows": [], "n": 0, "n_measured": 0, "s_stall_ms": nan, "median_gpu_idle_ms": nan,
            "mean_gpu_idle_ms": nan, "median_host_ms": nan, "by_pass": {}, "gpu_events": 0, "why": why,
            "trace": None, "profile_s": 0.0}


def _err_pct(pred, meas):
    try:
        return 100.0 * (pred - meas) / meas if meas else float("nan")
    except TypeError:
        return float("nan")


def run_arms(model, batches_cpu, backend, device, *, reps, steps, arms=ARMS, log=print):
    """Interleaved timing of `arms` on one model; returns {arm: {"recs": [...], "counted": rec, "losses": {...}}}."""
    from workbench.data import to_device
    from workbench.harness import make_optimizer, train_steps
    from workbench.opts import packing

    opt = make_optimizer(model, lr=0.0)  # weights never move: one batch's loss must agree across arms
    out, batches = {}, {}
    for arm in arms:  # warm-up (kernels, heuristics, compiles) and a counted step per arm
        h = packing.apply(model, arm, backend=backend)
        try:
            batches[arm] = to_device(batches_cpu, device, prepare=h.prepare_batch)
            counted = train_steps(model, batches[arm], steps=1, warmup=1, optimizer=opt, count_syncs=True,
                                  inputs_fn=h.inputs_fn)[0]
        finally:
            h.revert()
        out[arm] = {"recs": [], "counted": counted, "losses": {}}
        log(f"  {backend}/{arm}: warm, {counted.syncs} syncs/step")
    for rep in range(reps):
        order = list(arms[rep % len(arms):]) + list(arms[:rep % len(arms)])
        for arm in order:
            h = packing.apply(model, arm, backend=backend)
            try:
                recs = train_steps(model, batches[arm], steps=steps, warmup=0, optimizer=opt, count_syncs=False,
                                   inputs_fn=h.inputs_fn)
            finally:
                h.revert()
            for r in recs:
                r.rep = rep
                out[arm]["losses"].setdefault(r.step % len(batches[arm]), []).append(r.loss)
            out[arm]["recs"] += recs
        log(f"  {backend} rep {rep + 1}/{reps}: " + ", ".join(
            f"{a} {_med([r.step_ms for r in out[a]['recs']]):.1f} ms" for a in arms))
    return out


def summarize(model_name, L, tokens, backend, res, s_ms, checkpointing=True, s_stall_ms=float("nan")
              ) -> tuple[list[dict], list[dict]]:
    """(arm rows, savings rows) for one model x backend. Savings carry two predictions: with s = `s_ms` (idle
    device) and with s = `s_stall_ms` (in-situ GPU stall per build, from a trace; NaN where none)."""
    from workbench.savings import packing_saving
    rows, sav = [], []
    base_losses = res["rebuild"]["losses"] if "rebuild" in res else {}
    for arm, d in res.items():
        recs = d["recs"]
        step = [r.step_ms for r in recs]
        loss_diff = max((abs(x - y) for b, xs in d["losses"].items() for x in xs for y in base_losses.get(b, [])),
                        default=0.0)
        rows.append({"model": model_name, "layers": L, "tokens": tokens, "backend": backend, "arm": arm,
                     "step_ms": _med(step), "step_ms_p20": _q(step, 0.2), "step_ms_p80": _q(step, 0.8),
                     "fwd_ms": _med([r.fwd_ms for r in recs]), "bwd_ms": _med([r.bwd_ms for r in recs]),
                     "syncs_per_step": d["counted"].syncs, "peak_mem_mib": max((r.peak_mem_mib for r in recs),
                                                                               default=float("nan")),
                     "tokens_per_s": tokens / (_med(step) / 1e3) if step else float("nan"),
                     "loss": _med([r.loss for r in recs]), "max_loss_diff_vs_rebuild": loss_diff,
                     "bitwise": loss_diff == 0.0, "equivalent": loss_diff <= 1e-2 * abs(_med([r.loss for r in recs])),
                     "n": len(step)})
    by = {r["arm"]: r for r in rows}
    if "rebuild" in by:
        for arm in ("cached", "precomputed"):
            if arm not in by:
                continue
            m = by["rebuild"]["step_ms"] - by[arm]["step_ms"]
            p = packing_saving(L, s_ms, checkpointing=checkpointing, arm=arm, measured_ms=m)
            stall_ok = s_stall_ms is not None and s_stall_ms == s_stall_ms and s_stall_ms >= 0
            pred_stall = (packing_saving(L, s_stall_ms, checkpointing=checkpointing, arm=arm)["predicted_ms"]
                          if stall_ok else float("nan"))
            sav.append({"model": model_name, "layers": L, "tokens": tokens, "backend": backend, "arm": arm,
                        "s_ms": s_ms, "predicted_ms": p["predicted_ms"], "measured_ms": m,
                        "implied_s_ms": p["implied_s_ms"], "formula": p["formula"],
                        "predicted_fwd_ms": (L - 1 if arm == "cached" else L) * s_ms,
                        "measured_fwd_ms": by["rebuild"]["fwd_ms"] - by[arm]["fwd_ms"],
                        "predicted_bwd_ms": (L * s_ms) if checkpointing else 0.0,
                        "measured_bwd_ms": by["rebuild"]["bwd_ms"] - by[arm]["bwd_ms"],
                        "predicted_pct": 100 * p["predicted_ms"] / by["rebuild"]["step_ms"],
                        "measured_pct": 100 * m / by["rebuild"]["step_ms"],
                        "err_pct": _err_pct(p["predicted_ms"], m),
                        "s_stall_ms": s_stall_ms if stall_ok else float("nan"), "pred_stall_ms": pred_stall,
                        "pred_stall_pct": 100 * pred_stall / by["rebuild"]["step_ms"],
                        "err_stall_pct": _err_pct(pred_stall, m)})
    return rows, sav


def _fit_slope(xs, ys):
    n = len(xs)
    if n < 2:
        return float("nan"), float("nan")
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else float("nan")
    return slope, my - slope * mx


class _Layers:
    """Run only the first L decoder layers (transformers iterates `self.layers[:config.num_hidden_layers]`)."""

    def __init__(self, model, L):
        from workbench.models import base_model_of
        self.cfg, self.L = base_model_of(model).config, L

    def __enter__(self):
        self.full = self.cfg.num_hidden_layers
        self.cfg.num_hidden_layers = self.L

    def __exit__(self, *exc):
        self.cfg.num_hidden_layers = self.full


def _stall_or_nan(model, batches, backend, device, deadline, trace_dir, tag, log) -> dict:
    """profile_stall, never raising: a failure or a spent budget gives NaN with its reason."""
    if trace_dir is None:
        return _no_stall("not profiled")
    if time.perf_counter() > deadline:
        return _no_stall("time budget spent")
    try:
        return profile_stall(model, batches, backend, device, trace_dir, tag, log)
    except Exception as e:
        log(f"  {backend}/rebuild profile failed: {e}")
        return _no_stall(f"profile failed: {type(e).__name__}: {e}"[:300])


def _stall_csv(csv_rows, env, st, **where):
    csv_rows.append(dict(env, section="s", arm="rebuild", rep=-1, step=-1, metric="s_stall_ms",
                         value=st["s_stall_ms"], unit="ms", **where))
    csv_rows.append(dict(env, section="s", arm="rebuild", rep=-1, step=-1, metric="s_stall_median_ms",
                         value=st["median_gpu_idle_ms"], unit="ms", **where))
    for i, r in enumerate(st["rows"]):
        csv_rows.append(dict(env, section="stall", arm="rebuild", rep=-1, step=i, metric=f"gpu_idle_ms:{r['layer']}:"
                             f"{r['pass']}", value=r["gpu_idle_ms"], unit="ms", **where))


def bench_model(name, a, device, deadline, log, backends, csv_rows, env, sweep_layers=(), trace_dir=None,
                stalls=None):
    """`trace_dir`: where the profiled rebuild steps' traces go (None: no profiling, s_stall NaN); `stalls`: a list
    the s_stall results are appended to ({model, backend, layers, section, ...})."""
    import torch
    from workbench.data import make_batches
    from workbench.harness import enable_checkpointing
    from workbench.instrument import instrument_layers
    from workbench.models import build_model
    from workbench.opts import packing

    t0 = time.perf_counter()
    model = build_model(name, layers=a.layers, device=device)
    enable_checkpointing(model)
    instrument_layers(model)
    L = model.config.num_hidden_layers
    batches = make_batches(a.lengths, a.tokens, a.batches, model.config.vocab_size, seed=0)
    T = batches[0].tokens
    log(f"{name}: L={L}, built in {time.perf_counter() - t0:.1f} s; batch tokens {[b.tokens for b in batches]}, "
        f"docs {[len(b.doc_lens) for b in batches]}")
    rows, sav, skipped, sweep = [], [], [], []
    dtype = next(model.parameters()).dtype
    for backend in backends:
        why = packing.unsupported("rebuild", model, device, backend)
        if why:
            skipped.append({"model": name, "backend": backend, "why": why})
            continue
        if time.perf_counter() > deadline:
            skipped.append({"model": name, "backend": backend, "why": "time budget spent"})
            continue
        try:
            pos = batches[0].position_ids.to(device)
            s_ms = measure_s_ms(pos, backend, dtype)
            res = run_arms(model, batches, backend, device, reps=a.reps, steps=a.steps, log=log)
        except Exception as e:  # a backend that fails here is reported, the rest still runs
            skipped.append({"model": name, "backend": backend, "why": f"{type(e).__name__}: {e}"[:300]})
            log(f"  {backend} failed: {e}")
            continue
        st = _stall_or_nan(model, batches, backend, device, deadline, trace_dir, name, log)
        if stalls is not None:
            stalls.append(dict(st, model=name, backend=backend, layers=L, section="arms"))
        _stall_csv(csv_rows, env, st, model=name, layers=L, tokens=T, backend=backend)
        r, s = summarize(name, L, T, backend, res, s_ms, s_stall_ms=st["s_stall_ms"])
        rows += r
        sav += s
        for arm, d in res.items():
            for rec in d["recs"]:
                for metric, unit in (("step_ms", "ms"), ("fwd_ms", "ms"), ("bwd_ms", "ms"),
                                     ("peak_mem_mib", "MiB"), ("loss", "")):
                    csv_rows.append(dict(env, section="arms", model=name, layers=L, tokens=T, backend=backend,
                                         arm=arm, rep=rec.rep, step=rec.step, metric=metric,
                                         value=getattr(rec, metric), unit=unit))
            csv_rows.append(dict(env, section="arms", model=name, layers=L, tokens=T, backend=backend, arm=arm,
                                 rep=-1, step=-1, metric="syncs_per_step", value=d["counted"].syncs, unit="syncs"))
        csv_rows.append(dict(env, section="s", model=name, layers=L, tokens=T, backend=backend, arm="rebuild",
                             rep=-1, step=-1, metric="s_ms", value=s_ms, unit="ms"))
    if sweep_layers:
        backend = next((b for b in ("varlen", "sdpa") if b in backends and not
                        packing.unsupported("rebuild", model, device, b)), None)
        sweep_stall = None  # s per build: one profile at the sweep's largest L (the arms' own when that is L)
        for Ls in sweep_layers:
            if backend is None or Ls > L:
                continue
            if time.perf_counter() > deadline:
                skipped.append({"model": name, "backend": backend, "why": f"sweep L={Ls}: time budget spent"})
                continue
            with _Layers(model, Ls):
                try:
                    res = run_arms(model, batches, backend, device, reps=a.sweep_reps, steps=a.steps,
                                   arms=("rebuild", "cached"), log=log)
                except Exception as e:
                    skipped.append({"model": name, "backend": backend, "why": f"sweep L={Ls}: {e}"[:300]})
                    continue
            if Ls == max(x for x in sweep_layers if x <= L):
                same = [x for x in (stalls or []) if x["model"] == name and x["backend"] == backend and
                        x["layers"] == Ls and x["section"] == "arms"]
                if same:
                    sweep_stall = same[0]
                else:
                    with _Layers(model, Ls):
                        sweep_stall = _stall_or_nan(model, batches, backend, device, deadline, trace_dir,
                                                    f"{name}_L{Ls}", log)
                    if stalls is not None:
                        stalls.append(dict(sweep_stall, model=name, backend=backend, layers=Ls, section="sweep"))
                    _stall_csv(csv_rows, env, sweep_stall, model=name, layers=Ls, tokens=T, backend=backend)
            st = {arm: _med([r.step_ms for r in d["recs"]]) for arm, d in res.items()}
            sweep.append({"model": name, "backend": backend, "layers": Ls, "rebuild_ms": st["rebuild"],
                          "cached_ms": st["cached"], "saving_ms": st["rebuild"] - st["cached"],
                          "syncs_rebuild": res["rebuild"]["counted"].syncs,
                          "syncs_cached": res["cached"]["counted"].syncs})
            for arm, d in res.items():
                for rec in d["recs"]:
                    csv_rows.append(dict(env, section="sweep", model=name, layers=Ls, tokens=T, backend=backend,
                                         arm=arm, rep=rec.rep, step=rec.step, metric="step_ms", value=rec.step_ms,
                                         unit="ms"))
        for r in sweep:
            r["s_stall_ms"] = sweep_stall["s_stall_ms"] if sweep_stall else float("nan")
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return rows, sav, skipped, sweep


def _flex_child(a, name, budget_s, out_dir, log):
    """Flex in a child process (its compiles can take minutes): killed at the budget, reported as skipped."""
    cmd = [sys.executable, "-m", "workbench.bench.packing", "--flex-only", "--models", name, "--tokens", str(a.tokens),
           "--lengths", a.lengths,
           "--reps", str(a.reps), "--steps", str(a.steps), "--batches", "1", "--out", out_dir]
    if a.layers:
        cmd += ["--layers", str(a.layers)]
    log(f"flex ({name}): child process, budget {budget_s:.0f} s")
    try:
        p = subprocess.run(cmd, timeout=budget_s, capture_output=True, text=True)
    except subprocess.TimeoutExpired:
        return None, f"flex: over its {budget_s:.0f} s budget (compile), killed"
    if p.returncode != 0:
        return None, f"flex: child exited {p.returncode}: {(p.stderr or '').strip()[-300:]}"
    try:
        with open(os.path.join(out_dir, "summary.json")) as f:
            return json.load(f), None
    except (OSError, json.JSONDecodeError) as e:
        return None, f"flex: no summary ({e})"


def _bundle_traces(stalls, out_dir, keep=True, log=print) -> set[str]:
    """Put the profiles' traces into out_dir/traces.tar, first ones first, under TRACES_TAR_MAX_BYTES. Returns the
    member names kept."""
    paths = [st["trace"] for st in stalls if st.get("trace") and os.path.exists(st["trace"])]
    kept: set[str] = set()
    if not keep or not paths:
        return kept
    total, members = 10240, []
    for pth in paths:
        size = os.path.getsize(pth) + 1024
        if total + size > TRACES_TAR_MAX_BYTES:
            log(f"trace {os.path.basename(pth)} left out of traces.tar ({size / 2**20:.1f} MiB over the cap)")
            continue
        total += size
        members.append(pth)
    if not members:
        return kept
    tmp = os.path.join(out_dir, "traces.tar.tmp")
    with tarfile.open(tmp, "w") as tf:
        for pth in members:
            tf.add(pth, arcname=os.path.basename(pth))
            kept.add(os.path.basename(pth))
    os.replace(tmp, os.path.join(out_dir, "traces.tar"))
    return kept


def _table(summary) -> str:
    lines = [f"{'model':<14}{'backend':<8}{'arm':<12}{'step ms':>10}{'p20-p80':>16}{'fwd':>9}{'bwd':>9}"
             f"{'syncs':>7}{'peak MiB':>10}{'eq':>4}"]  # eq: b bitwise, y within bf16 tolerance, N not
    for r in summary["arms"]:
        lines.append(f"{r['model']:<14}{r['backend']:<8}{r['arm']:<12}{r['step_ms']:>10.1f}"
                     f"{r['step_ms_p20']:>8.1f}-{r['step_ms_p80']:<7.1f}{r['fwd_ms']:>9.1f}{r['bwd_ms']:>9.1f}"
                     f"{r['syncs_per_step']:>7}{r['peak_mem_mib']:>10.0f}{'b' if r['bitwise'] else 'y' if r['equivalent'] else 'N':>4}")
    lines.append("")
    # s idle: back-to-back builds on the idle device; s stall: GPU idle per wb/Lxx/attn/meta in a profiled step
    lines.append(f"{'model':<14}{'backend':<8}{'arm':<12}{'s idle':>8}{'pred ms':>9}{'err %':>8}{'s stall':>9}"
                 f"{'pred ms':>9}{'err %':>8}{'meas ms':>9}{'meas %':>8}{'implied s':>10}")
    nan = float("nan")
    for r in summary["savings"]:
        g = lambda k: nan if r.get(k) is None else r.get(k)  # noqa: E731  (flex child summaries predate s_stall)
        lines.append(f"{r['model']:<14}{r['backend']:<8}{r['arm']:<12}{r['s_ms']:>8.3f}{r['predicted_ms']:>9.2f}"
                     f"{g('err_pct'):>8.1f}{g('s_stall_ms'):>9.3f}{g('pred_stall_ms'):>9.2f}{g('err_stall_pct'):>8.1f}"
                     f"{r['measured_ms']:>9.2f}{r['measured_pct']:>8.1f}{r['implied_s_ms']:>10.3f}")
    for st in summary.get("stall", []):
        if st.get("why"):
            lines.append(f"s_stall {st['model']} {st['backend']} L={st['layers']}: NaN ({st['why']})")
    for f in summary.get("sweep_fits", []):
        lines.append(f"L sweep {f['model']} {f['backend']}: saving slope {f['slope_ms_per_layer']:.3f} ms/layer "
                     f"(p*s predicts {f['predicted_slope_ms_per_layer']:.3f}, p*s_stall "
                     f"{f.get('predicted_slope_stall_ms_per_layer', nan):.3f}), layers {f['layers']}")
    for s in summary["skipped"]:
        lines.append(f"skipped {s.get('model', '')} {s.get('backend', '')}: {s['why']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="qwen3-0.6b,llama-3.2-1b")
    p.add_argument("--layers", type=int, default=None, help="override every model's layer count")
    p.add_argument("--tokens", type=int, default=16384)
    p.add_argument("--batches", type=int, default=2)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--steps", type=int, default=2, help="timed steps per arm per rep")
    p.add_argument("--sweep", default="4,8,16,28", help="layer counts of the L sweep (first model); '' for none")
    p.add_argument("--sweep-reps", type=int, default=2)
    p.add_argument("--backends", default="varlen,sdpa")
    p.add_argument("--lengths", default=LENGTHS, help="document length source (workbench.data)")
    p.add_argument("--flex", default="qwen3-0.6b", help="models to run flex on, last ('' for none)")
    p.add_argument("--budget-s", type=float, default=330.0, help="wall budget; flex gets what is left")
    p.add_argument("--flex-only", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", default=None)
    p.add_argument("--smoke", action="store_true", help="tiny CPU run (checks the script, not a result)")
    p.add_argument("--no-profile", action="store_true", help="skip the profiled rebuild steps (s_stall NaN)")
    a = p.parse_args(argv)
    if a.smoke:
        a.models, a.tokens, a.reps, a.steps, a.sweep, a.sweep_reps = "tiny-qwen3,tiny-llama", 256, 2, 1, "1,2", 1
        a.layers = a.layers or 2
        a.lengths = SMOKE_LENGTHS
        a.flex = ""
    t_start = time.perf_counter()
    deadline = t_start + a.budget_s

    import torch
    from workbench.models import resolve_device

    def log(msg):
        print(f"[{time.perf_counter() - t_start:6.1f}s] {msg}", file=sys.stderr, flush=True)

    device = resolve_device("cpu" if a.smoke else "auto")
    env = _env(device)
    run_id = time.strftime("packing-%Y%m%d-%H%M%S")
    env = dict(run_id=run_id, **env)
    out_dir = a.out or os.path.join("profiles", run_id)
    os.makedirs(out_dir, exist_ok=True)
    models = [m for m in a.models.split(",") if m]
    backends = ["flex"] if a.flex_only else [b for b in a.backends.split(",") if b]
    sweep_layers = tuple(int(x) for x in a.sweep.split(",") if x) if not a.flex_only else ()
    summary = {"run_id": run_id, "env": env, "command": "python -m workbench.bench.packing " + " ".join(
        argv if argv is not None else sys.argv[1:]), "arms": [], "savings": [], "skipped": [], "sweep": [],
        "sweep_fits": [], "checkpointing": True, "lengths": a.lengths, "stall": []}
    csv_rows: list[dict] = []
    stalls: list[dict] = []
    tmp_traces = tempfile.TemporaryDirectory(prefix="wb-packing-traces-")
    trace_dir = None if a.no_profile else tmp_traces.name
    for i, name in enumerate(models):
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        rows, sav, skipped, sweep = bench_model(name, a, device, deadline if not a.flex_only else float("inf"), log,
                                                backends, csv_rows, env, sweep_layers if i == 0 else (),
                                                trace_dir=trace_dir, stalls=stalls)
        summary["arms"] += rows
        summary["savings"] += sav
        summary["skipped"] += skipped
        summary["sweep"] += sweep
    by_model: dict = {}
    for r in summary["sweep"]:
        by_model.setdefault((r["model"], r["backend"]), []).append(r)
    for (m, b), rs in by_model.items():
        slope, icpt = _fit_slope([r["layers"] for r in rs], [r["saving_ms"] for r in rs])
        s_rows = [x for x in summary["savings"] if x["model"] == m and x["backend"] == b and x["arm"] == "cached"]
        s_ms = s_rows[0]["s_ms"] if s_rows else float("nan")
        s_stall = rs[-1].get("s_stall_ms", float("nan"))
        summary["sweep_fits"].append({"model": m, "backend": b, "layers": [r["layers"] for r in rs],
                                      "slope_ms_per_layer": slope, "intercept_ms": icpt,
                                      "predicted_slope_ms_per_layer": 2 * s_ms,
                                      "s_stall_ms": s_stall, "predicted_slope_stall_ms_per_layer": 2 * s_stall,
                                      "implied_s_ms": slope / 2 if slope == slope else float("nan")})
    for fm in [m for m in a.flex.split(",") if m] if not a.flex_only else []:
        left = deadline - time.perf_counter()
        if device.type != "cuda":
            summary["skipped"].append({"model": fm, "backend": "flex", "why": "flex needs a GPU"})
            continue
        if left < 30:
            summary["skipped"].append({"model": fm, "backend": "flex", "why": f"time budget spent ({left:.0f} s left)"})
            continue
        sub, why = _flex_child(a, fm, left, os.path.join(out_dir, f"flex-{fm}"), log)
        if why:
            summary["skipped"].append({"model": fm, "backend": "flex", "why": why})
        else:
            summary["arms"] += sub["arms"]
            summary["savings"] += sub["savings"]
            summary["skipped"] += sub["skipped"]
            for r in sub["arms"]:
                csv_rows.append(dict(env, section="flex", model=r["model"], layers=r["layers"], tokens=r["tokens"],
                                     backend="flex", arm=r["arm"], rep=-1, step=-1, metric="step_ms_median",
                                     value=r["step_ms"], unit="ms"))
    kept = _bundle_traces(stalls, out_dir, keep=not a.flex_only, log=log)
    for st in stalls:
        trace = st.pop("trace", None)
        st["trace_in_tar"] = os.path.basename(trace) if trace and os.path.basename(trace) in kept else None
        summary["stall"].append(st)
    tmp_traces.cleanup()
    summary["wall_s"] = time.perf_counter() - t_start
    summary["equivalent"] = all(r["equivalent"] for r in summary["arms"])
    fields = list(env) + ["section", "model", "layers", "tokens", "backend", "arm", "rep", "step", "metric", "value",
                          "unit"]
    with open(os.path.join(out_dir, "results.csv.tmp"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(csv_rows)
    os.replace(os.path.join(out_dir, "results.csv.tmp"), os.path.join(out_dir, "results.csv"))
    with open(os.path.join(out_dir, "summary.json.tmp"), "w") as f:
        json.dump(summary, f, indent=1, default=str)
    os.replace(os.path.join(out_dir, "summary.json.tmp"), os.path.join(out_dir, "summary.json"))
    log(f"wrote {out_dir}/results.csv and summary.json")
    print(_table(summary), flush=True)
    return 0 if summary["equivalent"] else 1


if __name__ == "__main__":
    sys.exit(main())
