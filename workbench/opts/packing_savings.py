"""The packing savings model: the analytic saving (L-1)·s of caching the packed-attention metadata, its inputs
from a trace, and the model of a run (`workbench.savings.contract` states the contract; torch-free).

    # L = decoder layers, p = passes that build packed metadata (2 with checkpointing: forward + recompute)

In situ (`workbench.savings.verdicts`; inputs per traced step, their spread the uncertainty):

    packing   (L·p - b)·s                   b = 1 (cached) / 0 (precomputed); s per build = the GPU idle the build
                                            causes (from the build's start until the GPU gets the first kernel
                                            launched after it, less the GPU work in that window) + the build's
                                            own kernel time; builds per step must equal L·p (else the check fails)
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from workbench.savings import common as savings
from workbench.traces import decompose

FORMULA = "(L*p - b) * s,  s = GPU idle per build + build kernel time"
"""The model as `workbench.savings.verdicts` judges it (in situ, per traced step)."""
MODEL_TERMS = ("glue", "sync_stall", "launch_gap")
"""The decomposition components the model accounts for (the rest are candidates for the term it lacks)."""
TRACED_ARMS = ("baseline",)
"""The arms whose traces the model's inputs come from."""
MODEL_REVISION = ("2026-11-26: (L*p - b) * s, s = GPU idle per build + build kernel time (rebuild arm's trace); the "
                  "formula of 54f840f (2026-11-25), unchanged")
"""The model revision a verdict row names, with the commit that set this value (`savings.model_revision`):
bump it (date: what changed) in the commit that changes FORMULA or an input, before the runs that judge it."""


_META_RE = re.compile(r"^wb/(L\d+)/attn/meta$")

DOSE = {"arm": "cached", "unit": "metadata builds avoided per step"}
"""The dose-response (`workbench.ab.dose`): the arm that takes `dose=u`, and what one unit of u is."""


def dose_order(layers: int, passes: int) -> list[tuple[int, int]]:
    """The (layer, call) cache hits of the cached arm in the order a dose grants them: layer 1's calls (forward, then
    recompute), layer 2's, ..., then layer 0's recompute last. An even u = 2j under checkpointing is "layers 1..j
    reuse the first layer's build in both passes" (L - j builds per pass); all of them is the cached arm."""
    return [(i, k) for i in range(1, layers) for k in range(passes)] + [(0, k) for k in range(1, passes)]


def dose_units(layers: int, checkpointing: bool = True) -> int:
    """The most units a dose takes: L*p - 1 builds avoided per step (the cached arm)."""
    return layers * (2 if checkpointing else 1) - 1


def packing_saving(layers: int, s_ms: float, *, checkpointing: bool = True, arm: str = "cached",
                   measured_ms: float | None = None) -> dict:
    """Packed-metadata caching vs per-layer rebuild: predicted saving per step (L-1)·s per rebuilding pass.

    The `rebuild` arm builds the metadata in every layer of every pass that runs attention: the forward, plus
    the recompute under checkpointing, so p = 2 with checkpointing, else 1, and L·p builds per step. `cached`
    builds once per step (the recompute reuses the forward's build); `precomputed` builds on the CPU at collate
    time, none inside the step:

        builds removed   n = L·p - b,  b = 1 (cached) or 0 (precomputed)
        predicted_ms     = n·s
                         = (L-1)·s·p + (p-1)·s      for cached: the (L-1)·s per pass of the Unsloth article, plus
                                                    the recompute's first layer, which also hits the cache
        implied_s_ms     = measured_ms / n

    Inputs: L = decoder layers; `s_ms` = measured cost of one build, including the stall its syncs cause (e.g.
    wall time of back-to-back builds with a sync after each, or the `wb/Lxx/attn/meta` ranges of a trace);
    `measured_ms` = median step time of rebuild minus that of the arm (same batches, interleaved runs).
    """
    if layers <= 0:
        raise ValueError(f"layers must be positive, got {layers}")
    if s_ms < 0:
        raise ValueError(f"s_ms must be non-negative, got {s_ms}")
    if arm not in ("cached", "precomputed"):
        raise ValueError(f"arm must be cached or precomputed, got {arm!r}")
    passes = 2 if checkpointing else 1
    builds_after = 1 if arm == "cached" else 0
    removed = layers * passes - builds_after
    predicted = removed * float(s_ms)
    return {
        "formula": "(L*p - b)*s = (L-1)*s*p + (p-1)*s  (b=1 cached, 0 precomputed: L*p*s)" if arm == "cached"
        else "L*p*s  (precomputed: every in-step build removed)",
        "predicted_ms": predicted,
        "measured_ms": None if measured_ms is None else float(measured_ms),
        "implied_s_ms": None if measured_ms is None else float(measured_ms) / removed,
        "inputs": {"layers": layers, "s_ms": float(s_ms), "passes": passes, "checkpointing": checkpointing,
                   "arm": arm, "builds_rebuild": layers * passes, "builds_arm": builds_after,
                   "builds_removed": removed},
    }


UNTRACED_FORMULA = "(L*p - b) * u  (u: untimed dose slope per build avoided)"
"""The untraced form (`workbench.savings.untraced`): builds removed times the untimed saving per build."""


def untraced_count(c: dict, meta: dict, *, arm: str) -> tuple[float, str]:
    """(builds removed per step, its source) of a comparison: L·p - b from the run's layers, checkpointing and arm
    (`packing_saving`), exact."""
    from workbench.measure.results import run_args
    ck = bool(run_args(meta).get("checkpointing", True))
    n = packing_saving(int(c["layers"]), 0.0, checkpointing=ck,
                       arm=arm if arm in ("cached", "precomputed") else "cached")["inputs"]["builds_removed"]
    return float(n), f"builds removed L*p - b = {n} (L = {c['layers']}, checkpointing {ck}, {arm})"


def count_per_dose_unit(entry: dict) -> tuple[float, str]:
    """Builds removed per dose unit: 1 (the dose's unit is one build avoided, DOSE)."""
    return 1.0, "1 build per build avoided"


def dose_traced_input(events: dict, units: dict, syncs: dict, tracer: str | None) -> dict:
    """The traced s per build avoided from one dose process's traces of every level (`contract.HOOKS`): each traced
    step's mean s over its builds, t-interval over the steps of every level."""
    from workbench.measure import stats

    per_step, per_level = [], {}
    for a, e in events.items():
        b = packing_builds(e)
        if b.empty:
            continue
        s = b.groupby("step")[["s_ms", "idle_ms"]].mean()
        per_step += list(s["s_ms"])
        per_level[units[a]] = {"s_ms": float(s["s_ms"].mean()), "idle_ms": float(s["idle_ms"].mean())}
    t = stats.t_interval(per_step)
    return {"value_ms": t["mean"], "se_ms": t["se"], "df": t["df"], "ci95": t["ci"], "n_steps": t["n"],
            "per_level": per_level, "tracer": tracer,
            "source": f"s per build (GPU idle + build kernels), {tracer} traces, per traced step over the levels"}


def packing_builds(events: pd.DataFrame) -> pd.DataFrame:
    """One row per `wb/Lxx/attn/meta` build: step, layer, idle_ms, kernel_ms, s_ms (= idle + kernel).

    idle: from the build's start a until k, the GPU start of the first kernel launched after the build's end,
    minus the GPU work (any stream) in [a, k]; kernel: the union of the build's own kernels (part attn/meta)."""
    cols = ["step", "layer", "idle_ms", "kernel_ms", "s_ms"]
    r = events[(events["kind"] == "range") & events["stream"].isna() & events["name"].astype(str).str.match(_META_RE)]
    if r.empty:
        return pd.DataFrame(columns=cols)
    win = decompose.step_windows(events)
    gpu = events[events["kind"].isin(("kernel", "memcpy"))]
    u, prefix = savings.gpu_busy(events)
    first_gpu = gpu[gpu["correlation"].notna()].groupby("correlation")["start_ns"].min()
    rt = events[(events["kind"] == "runtime") & events["name"].astype(str).str.contains("Launch", case=False)
                & events["correlation"].isin(first_gpu.index)].sort_values("start_ns")
    rt_start = rt["start_ns"].to_numpy()
    rt_k = first_gpu.reindex(rt["correlation"]).to_numpy()
    mk = gpu[(gpu["kind"] == "kernel") & (gpu["part"] == "attn/meta")].sort_values("start_ns")
    mk_iv = mk[["start_ns", "end_ns"]].to_numpy(dtype=np.int64)
    steps = savings.step_of(r, win) if len(win) else np.zeros(len(r), int)
    rows = []
    for (a, b, name), step in zip(r[["start_ns", "end_ns", "name"]].itertuples(index=False), steps):
        j = int(np.searchsorted(rt_start, b, "left"))
        if j >= len(rt_start):
            continue
        k = int(rt_k[j])
        if k < a:  # the launch's kernel started before the build (cannot happen on one stream; skip)
            continue
        idle = (k - a) - decompose.covered_ns(u, prefix, int(a), k)
        lo, hi = np.searchsorted(mk_iv[:, 0], a, "left"), np.searchsorted(mk_iv[:, 0], k, "left")
        kern = decompose._length(decompose._union(decompose._clip(mk_iv[lo:hi], int(a), k))) if hi > lo else 0
        rows.append(dict(step=int(step), layer=_META_RE.match(name).group(1), idle_ms=idle / 1e6, kernel_ms=kern / 1e6,
                         s_ms=(idle + kern) / 1e6))
    return pd.DataFrame(rows, columns=cols)


def packing_model(base_events: pd.DataFrame, *, layers: int, checkpointing: bool, arm: str,
                  batches: list | None = None, trace_batch_of_step=None) -> dict:
    """The packing model from the baseline (rebuild) arm's trace; raises savings.InputCheckFailed when builds per step
    differ from L·p."""
    passes = 2 if checkpointing else 1
    b_after = 1 if arm == "cached" else 0
    removed = layers * passes - b_after
    builds = packing_builds(base_events)
    if builds.empty:
        raise savings.InputCheckFailed("packing: no wb/Lxx/attn/meta builds in the baseline's trace")
    per = builds.groupby("step").agg(builds=("s_ms", "size"), s_ms=("s_ms", "mean"), idle_ms=("idle_ms", "mean"),
                                     kernel_ms=("kernel_ms", "mean")).reset_index()
    bad = per[per["builds"] != layers * passes]
    if len(bad):
        raise savings.InputCheckFailed(f"packing: {int(bad['builds'].iloc[0])} builds in traced step {int(bad['step'].iloc[0])}, "
                               f"expected L*p = {layers}*{passes} = {layers * passes}")
    X = per[["idle_ms", "kernel_ms"]].to_numpy()
    out = savings.predicted(lambda v: packing_saving(layers, max(v[0] + v[1], 0.0), checkpointing=checkpointing,
                                                 arm=arm)["predicted_ms"], X)
    per_batch = []
    for r in per.itertuples():
        bi = trace_batch_of_step(r.step) if trace_batch_of_step else None
        docs = (batches[bi].get("documents") if batches and bi is not None and bi < len(batches) else None)
        per_batch.append(dict(step=int(r.step), batch=bi, documents=docs, builds=int(r.builds), s_ms=r.s_ms,
                              idle_ms=r.idle_ms, kernel_ms=r.kernel_ms))
    idle, kern = float(X[:, 0].mean()), float(X[:, 1].mean())
    out.update(formula=FORMULA,
               inputs={"L": {"value": layers, "source": "the comparison's layer count"},
                       "p": {"value": passes, "source": "forward + recompute (checkpointing)" if checkpointing
                             else "forward (no checkpointing)"},
                       "b": {"value": b_after, "source": f"builds left in the {arm} arm"},
                       "builds_per_step": {"value": float(per["builds"].mean()),
                                           "source": "wb/Lxx/attn/meta ranges per traced step (= L*p, checked)"},
                       "s_idle_ms": {"value": idle, "source": "GPU idle per build, baseline trace"},
                       "s_kernel_ms": {"value": kern, "source": "build kernels per build, baseline trace"},
                       "s_ms": {"value": idle + kern, "source": "s_idle_ms + s_kernel_ms"}},
               terms={"builds removed x idle per build": removed * idle,
                      "builds removed x build kernels": removed * kern},
               per_batch=per_batch)
    return out


def from_run(traced: dict, c: dict, meta: dict, *, baseline: str, arm: str) -> dict:
    """The model of a comparison of a run: the baseline (rebuild) arm's trace, the run's layers, checkpointing and
    batches (the traced step k ran batch (warmup + k) mod batches)."""
    from workbench.measure.results import run_args
    args = run_args(meta)
    nb = int((c.get("protocol") or {}).get("batches") or args.get("batches") or 1)
    warm = int(args.get("warmup") or 0)
    return packing_model(traced[baseline], layers=int(c["layers"]), checkpointing=bool(args["checkpointing"]),
                         arm=arm if arm in ("cached", "precomputed") else "cached", batches=c.get("batches"),
                         trace_batch_of_step=lambda k: (warm + k) % nb)
