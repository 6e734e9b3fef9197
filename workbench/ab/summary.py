"""Per-arm dicts for summary.json and the comparison's result rows (no I/O of their own: the writer is passed)."""
from __future__ import annotations


def per_step_by_source(recs, field: str, top: int = 12) -> dict:
    """{file:line: count per step} of a StepRecord's by-source dict (the counter's syncs, or the sync-debug-mode
    warnings), the `top` largest: where two witnesses differ, summary.json says at which lines."""
    from workbench.step.harness import mean_per_step

    ranked = sorted(mean_per_step(recs, field).items(), key=lambda kv: (-kv[1], str(kv[0])))[:top]
    return {str(k): v for k, v in ranked}


def nvml_of(nvml, m, label) -> dict:
    """Median SM clock and power over the arm's timed blocks (NVML samples inside their windows)."""
    from workbench.measure import stats

    if nvml is None or m is None or not nvml.samples:
        return {}
    win = [(t0, t1) for arm, _, t0, t1 in m.windows if arm == label]
    inside = [s for s in list(nvml.samples) if any(t0 <= s["t_s"] <= t1 for t0, t1 in win)]
    if not inside:
        return {}
    return {"sm_clock_mhz_median": stats.quantile([s["sm_clock_mhz"] for s in inside], 0.5),
            "power_w_median": stats.quantile([s["power_w"] for s in inside], 0.5),
            "nvml_samples": len(inside)}


def arm_summary(runner, label, samples, m, counted, arm_status, info, equiv, events, *, batch_flops=(),
                attention_impl=None) -> dict:
    """One arm's dict of summary.json: timed-step statistics, the counted pass's syncs and instrument cost, NVML,
    the FLOPs of each batch as this arm ran it (`batch_flops`: `flops.arm_batch_flops`, written as
    `flops_per_batch` with the `attention_impl` it ran) with throughput, MFU and HFU, equivalence, and the trace's
    sync witness."""
    from workbench.measure import stats

    mine = [s for s in samples if s["arm"] == label]
    st = stats.summarize([s["step_ms"] for s in mine])
    inst = stats.summarize([r.step_ms for r in counted])
    d = {"arm": label, "step_ms": st["median"], "step_ms_p20": st["p20"], "step_ms_p80": st["p80"],
         "step_ms_mean": st["mean"], "n": st["n"],
         "step_ms_rep_geomean": stats.geo_mean_of_unit_means([s["step_ms"] for s in mine], [s["rep"] for s in mine])
         if mine else None,
         "fwd_ms": stats.summarize([s["fwd_ms"] for s in mine])["median"],
         "bwd_ms": stats.summarize([s["bwd_ms"] for s in mine])["median"],
         "syncs_per_step": (sum(r.syncs for r in counted) / len(counted)) if counted else None,
         "instrumented_step_ms": inst["median"],
         "instrument_cost_pct": (100 * (inst["median"] / st["median"] - 1))
         if inst["median"] and st["median"] else None,
         "peak_mem_mib": max((s["peak_mem_mib"] for s in mine), default=None),
         "tokens_per_s": (sum(s["tokens"] for s in mine) / (sum(s["step_ms"] for s in mine) / 1e3)) if mine
         else None,
         "loss": arm_status.get(label, {}).get("loss"),
         "outlier_steps": sum(bool(s.get("outlier")) for s in mine),
         "status": arm_status.get(label, {}).get("status", "ok")}
    if m is not None:
        ws = [w for w in m.warmups if w.arm == label]
        d["warmup_steps"] = [w.steps for w in ws]
        d["warmup_settled"] = sum(w.settled for w in ws)
    d.update(nvml_of(runner.nvml, m, label))
    if batch_flops:
        from workbench.step import flops
        d["attention_impl"] = attention_impl
        d["attention_flops"] = batch_flops[0]["attention"]
        d["flops_per_batch"] = [{k: f[k] for k in ("model", "total", "nemo") if k in f} for f in batch_flops]
        d.update(flops.arm_throughput(list(batch_flops), mine, getattr(runner, "device_name", None)))
    if arm_status.get(label, {}).get("error"):
        d["error"] = arm_status[label]["error"]
    if counted and counted[0].cuda_sync_warnings is not None:
        d["cuda_sync_warnings_per_step"] = sum(r.cuda_sync_warnings for r in counted) / len(counted)
    for key, field in (("sync_sources_per_step", "syncs_by_source"),
                       ("cuda_sync_warning_sources_per_step", "cuda_sync_warning_sources")):
        per_source = per_step_by_source(counted, field)
        if per_source:
            d[key] = per_source
    if equiv is not None:
        d["equivalent"] = equiv["equivalent"]
        d["bitwise"] = equiv["bitwise"]
        d["grad_max_rel_l2"] = equiv["grad_max_rel_l2"]
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


def speedup_rows(writer, cmp, label, c, env):
    """results.csv rows of one arm's paired comparison against the baseline."""
    writer.add(cmp.name, label, "speedup", c["speedup"], "x", **env)
    if c.get("ci95"):
        writer.add(cmp.name, label, "speedup_ci95_lo", c["ci95"][0], "x", **env)
        writer.add(cmp.name, label, "speedup_ci95_hi", c["ci95"][1], "x", **env)
    writer.add(cmp.name, label, "n_pairs", c["n_pairs"], "count", **env)
    writer.add(cmp.name, label, "outlier_pairs", c["outlier_pairs"], "count", **env)
