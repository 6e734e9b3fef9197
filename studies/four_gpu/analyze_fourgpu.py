"""Verdicts from the folder `studies/four_gpu/fourgpu.sh` writes (run on the CPU afterwards), by the rules fixed in
`profiles/2026-11-23_h200x2_fsdp2/prospective_4gpu.json` before the run:

    python studies/four_gpu/analyze_fourgpu.py --prospective       # (before the run) write prospective_4gpu.json: rules + projections
    python studies/four_gpu/analyze_fourgpu.py DIR                 # DIR = the job's folder ($CAMP/fourgpu, committed as profiles/...)

Writes DIR/fourgpu_verdicts.json and prints one block per question:
1. the straggler projections at 4 ranks (`straggler.judge_projection` on `straggler.measured_at_ranks` of DIR/d4/p*),
   and offload's projection with the contention term (`projection(..., term=)`, T(N) = `contention_term` from the
   1-GPU run's c, g, h and B(1), B(N) of DIR/bandwidth.json);
2. FSDP2 against one process at bf16 (DIR/equiv_n*.json: `equivalence.judge_sharded`'s verdicts, read as written);
3. the "all three" anomaly: DIR/anomaly_one.json (1 rank) against DIR/anomaly_two.json (rank 0 of 2), class by class
   (`class_totals.explain` with `straggler.SAME_WORK_TOL`);
4. the per-rank pinned bandwidth B(1), B(2), B(4).
A part whose files are missing (the job's deadline cut it) says so; the rest stand. A comparison a run folder's
VOID.json declares void reads "void" with the reason (the committed fourgpu_verdicts.json predates the VOID.json files).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root
sys.path.insert(0, ROOT)

TWO_GPU = os.path.join(ROOT, "profiles", "2026-11-23_h200x2_fsdp2")
PROSPECTIVE = os.path.join(TWO_GPU, "prospective_4gpu.json")
RANKS = 4
OUT_FILE = "fourgpu_verdicts.json"
ANOMALY_TIMED_MS = {"one_gpu": 2817.330948114395, "two_gpu": 1622.7198431789875}
"""The `all` baselines of g1_rest and d2_rest (H200) that made the anomaly."""


def _json(path):
    with open(path) as f:
        return json.load(f)


def prospective() -> dict:
    """The rules and the projections the 4-GPU run is judged by, from the committed 2-GPU folders, with the commit
    that holds the rules' code (HEAD when written)."""
    from workbench.measure.equivalence import SHARDED_FACTOR
    from workbench.savings import straggler
    from workbench.traces.class_totals import EXPLAIN_SHARE

    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    proj = []
    for sub in ("d2_packing", "d2_rest"):
        for c in _json(os.path.join(TWO_GPU, sub, straggler.OUT_FILE))["comparisons"]:
            p = next((q for q in c.get("projection") or [] if q["ranks"] == RANKS), None)
            if p is None:
                continue
            proj.append({"comparison": c["comparison"], "model": c.get("model"), "layers": c.get("layers"),
                         "tokens": c.get("tokens"), "baseline": c["baseline"], "optimized": c["optimized"],
                         "ranks": RANKS, "saving_ms": p["saving_ms"], "ci95": p["ci95"],
                         "one_gpu_saving_ms": c["one_gpu"]["saving_ms"], "two_gpu_saving_ms": c["two_gpu"]["saving_ms"],
                         "source": f"profiles/2026-11-23_h200x2_fsdp2/{sub}/{straggler.OUT_FILE} (NVIDIA H200)"})
    return {"issue": 41, "written_before_the_run": True, "rule_commit": sha,
            "projection_rule": straggler.PROJECTION_RULE,
            "measured_saving": "the saving (baseline - optimized, ms per data-parallel step) of the 4-rank runs: "
                               "straggler.measured_at_ranks (K >= 2 processes: the process is the unit, t over "
                               "processes; K = 1: the rep, within that run)",
            "projections": proj,
            "offload_contention_term": {
                "formula": "S_N = S_1 + T(N) + (S_2 - S_1 - T(2)) * e_N / e_2,  T(N) = saving(c * B(1)/B(N), g, h) - "
                           "saving(c, g, h)",
                "inputs": "c, g, h: the offload model inputs of g1_rest (1 GPU, H200); B(n): mean per-rank pinned "
                          "host-to-device GB/s with n ranks copying at once, measured in the same 4-GPU job",
                "judged_by": "projection_rule, as the others"},
            "equivalence_rule": f"equivalence.judge_sharded: per LoRA gradient rel_l2(FSDP2, one process) <= "
                                f"{SHARDED_FACTOR} x rel_l2(one process bf16, one process fp32) + 1e-4, the loss "
                                "likewise; decisive when dropping any rank's batch would exceed the tolerance; its "
                                "negative control (a rank's batch taken out) must fail",
            "anomaly_rule": f"class_totals.explain: reproduced when the traced 2-rank step is below (1 - "
                            f"{straggler.SAME_WORK_TOL}) x the traced 1-rank step; explained by the fewest components "
                            f"carrying >= {EXPLAIN_SHARE:.0%} of the traced decrease, with their kernels"}


def projections(d: str, pro: dict) -> list[dict]:
    from workbench.savings import straggler

    runs = sorted(glob.glob(os.path.join(d, "d4", "p*")))
    runs = [r for r in runs if os.path.exists(os.path.join(r, "summary.json"))]
    if not runs:
        return [{"verdict": "not run", "reason": f"no 4-rank run folder under {d}/d4"}]
    dev = _json(os.path.join(runs[0], "meta.json")).get("device", {}).get("name")
    out = []
    comps = {c["name"]: c for c in _json(os.path.join(runs[0], "summary.json")).get("comparisons", [])}
    for p in pro["projections"]:
        c = comps.get(p["comparison"])
        if c is None:
            out.append({"comparison": p["comparison"], "verdict": "not run",
                        "reason": "the comparison is not in the 4-rank runs"})
            continue
        void = next(filter(None, (straggler.void_reason(r, p["comparison"]) for r in runs)), None)
        if void:  # declared void after the run (VOID.json): no measured saving is read from it
            out.append({"comparison": p["comparison"], "verdict": "void", "reason": void})
            continue
        m = straggler.measured_at_ranks(runs, p["comparison"], p["baseline"], p["optimized"])
        shape, want = [c.get(k) for k in ("model", "layers", "tokens")], [p[k] for k in ("model", "layers", "tokens")]
        rec = {"comparison": p["comparison"], "projected_ms": p["saving_ms"], "projected_ci95": p["ci95"],
               "measured_ms": m["mean"], "measured_ci95": m["ci95"], "unit": m["unit"],
               "processes": m["processes"], "per_process_ms": m["per_process_ms"], "shape": shape,
               "verdict": straggler.judge_projection(p["ci95"], m["mean"], m["ci95"]),
               "device": dev, "projection_device": "NVIDIA H200", "same_gpu_model": bool(dev and "H200" in dev)}
        if shape != want:
            rec.update(verdict="not comparable", reason=f"the 4-rank shape {shape} is not the projection's {want}")
        out.append(rec)
    return out


def contention(d: str, pro: dict) -> dict:
    from workbench.instrument.bandwidth import per_rank_gb_per_s
    from workbench.opts.offload_savings import contention_term
    from workbench.savings import straggler

    bw_path = os.path.join(d, "bandwidth.json")
    if not os.path.exists(bw_path):
        return {"verdict": "not run", "reason": "no bandwidth.json"}
    bw = _json(bw_path)
    b = {n: per_rank_gb_per_s(bw, n) for n in (1, 2, RANKS)}
    one = next(c for c in _json(os.path.join(TWO_GPU, "g1_rest", "summary.json"))["comparisons"]
               if c["name"] == "offload")
    inp = one["savings_model"]["inputs"]
    c, g, h = inp["c_ms"]["value"], inp["g_ms"]["value"], inp["h_ms"]["value"]
    terms = {n: contention_term(c, g, h, b[1], b[n]) for n in (2, RANKS)}
    void = straggler.void_reason(os.path.join(TWO_GPU, "d2_rest"), "offload")
    if void:  # the 2-rank saving it scales is void (VOID.json): no projection from it
        return {"verdict": "void", "reason": void}
    s1 = straggler._saving(os.path.join(TWO_GPU, "g1_rest"), "offload", "sync_reload", "double_buffer")
    s2 = straggler._saving(os.path.join(TWO_GPU, "d2_rest"), "offload", "sync_reload", "double_buffer")
    (p,) = straggler.projection(s1, s2, (RANKS,), term={n: t["term_ms"] for n, t in terms.items()})
    res = {"b_gb_per_s": b, "terms": terms, "projected_ms": p["saving_ms"], "projected_ci95": p["ci95"],
           "formula": pro["offload_contention_term"]["formula"]}
    meas = next((x for x in projections(d, pro) if x.get("comparison") == "offload" and "measured_ms" in x), None)
    if meas and meas["verdict"] == "not comparable":
        res.update(verdict="not comparable", reason=meas["reason"])
    elif meas:
        res.update(measured_ms=meas["measured_ms"], measured_ci95=meas["measured_ci95"], unit=meas["unit"],
                   verdict=straggler.judge_projection(p["ci95"], meas["measured_ms"], meas["measured_ci95"]))
    else:
        res["verdict"] = "not run"
    return res


def equivalence_results(d: str) -> dict:
    out = {}
    for path in sorted(glob.glob(os.path.join(d, "equiv_n*.json"))):
        r = _json(path)
        out[os.path.basename(path)] = {"world_size": r["world_size"], "device": r["device"],
                                       "equivalent": r["equivalent"],
                                       "comparisons": [{k: c.get(k) for k in (
                                           "name", "model", "layers", "tokens", "precision", "equivalent",
                                           "grad_max_rel_l2", "grad_max_bf16_vs_fp32_rel_l2", "worst_ratio_to_tol",
                                           "loss_rel_diff", "loss_tol", "decisive", "control_failed_as_it_must")}
                                           for c in r["comparisons"]]}
    return out or {"verdict": "not run", "reason": "no equiv_n*.json"}


MECHANISM = (
    "A bug, not a property of FSDP2: the 2-rank `all` step computed no LoRA gradient. transformers 5.17 (the GPU "
    "image's) checkpoints `partial(layer.__call__)`, so FSDP2's hooks ran INSIDE the offload arm's autograd Function "
    "(workbench/opts/offload.py, sync_reload): the Function took the layer's parameters before FSDP2's pre-forward "
    "hook unsharded them (the sharded DTensors), the recompute in the backward differentiated the unsharded ones "
    "FSDP2 swapped in, and autograd.grad with respect to the sharded ones returned None. So the backward computed only "
    "the input gradients: no SelectBackward0 of the LoRA-folded expert weights (transformers' eager experts index "
    "`self.gate_up_proj[expert_idx]` / `self.down_proj[expert_idx]` once per expert hit; each index back-propagates "
    "as a zero fill of a gradient the size of ALL experts plus an add into the sum: the bf16 FillFunctor / "
    "CUDAFunctor_add kernels of ~0.1 / ~0.3 ms each on one GPU), no weight-gradient GEMMs, no backward at all for "
    "layer 0 (its input needs no gradient), no reduce-scatter and no optimizer update. Fixed in offload.py "
    "(`Offloader._hooks_outside`: the hooks run outside the Function, as transformers >= 5.23 has them); after the "
    "fix FSDP2 does the same whole-weight fill + add work as one process (CPU counts below), so the 2-rank step is "
    "expected to lose its advantage. The same bug touched every FSDP2 run of the offload arms with transformers 5.17 "
    "(d2_rest offload and all of profiles/2026-11-23_h200x2_fsdp2, d4 offload here).")
"""The anomaly's mechanism, found on the CPU after the 4-GPU run (`anomaly_gpu_witnesses` reads the same
story from the committed GPU summaries; anomaly_cpu_ops.json holds the CPU op counts)."""

WITNESS_KERNELS = {"flash_bwd": "attention backward (one per layer)", "silu_backward": "expert SiLU backward (one per "
                   "expert hit per layer)", "ReduceScatter": "FSDP2's gradient reduce-scatter",
                   "FillFunctor<c10::BFloat16>": "bf16 zero fills", "CUDAFunctor_add<c10::BFloat16>": "bf16 adds"}


def anomaly_gpu_witnesses(one: dict, two: dict) -> dict:
    """Per witness kernel (a name fragment of WITNESS_KERNELS) its count and ms on one GPU and on rank 0 of 2, from
    the summaries' top kernels; and the backward GEMM ms and the optimizer kernel count."""
    out = {}
    for frag, what in WITNESS_KERNELS.items():
        rec = {"what": what}
        for k, r in (("one", one), ("two", two)):
            ks = [t for t in r["classes"]["top_kernels"] if frag in t["name"]]
            rec[k] = {"count": sum(t["count"] for t in ks), "ms": round(sum(t["ms"] for t in ks), 3)}
        out[frag] = rec
    out["bwd_gemm_ms"] = {k: r["classes"]["by_pass_ms"].get("bwd", {}).get("gemm") for k, r in (("one", one),
                                                                                                ("two", two))}
    out["collective_kernels"] = {k: r["classes"]["kernel_count"].get("collective", 0) for k, r in (("one", one),
                                                                                                   ("two", two))}
    out["optimizer_kernels"] = {k: r["classes"]["kernel_count"].get("optimizer", 0) for k, r in (("one", one),
                                                                                                 ("two", two))}
    return out


def anomaly(d: str) -> dict:
    from workbench.savings import straggler
    from workbench.traces.class_totals import explain

    paths = {k: os.path.join(d, f"anomaly_{k}.json") for k in ("one", "two")}
    if not all(os.path.exists(p) for p in paths.values()):
        return {"verdict": "not run", "reason": "anomaly_one.json / anomaly_two.json missing"}
    one, two = (_json(paths[k])["comparisons"][0] for k in ("one", "two"))
    e = explain(one["classes"], two["classes"], straggler.SAME_WORK_TOL)
    return {"one": {k: one[k] for k in ("model", "layers", "tokens", "arm", "world_size", "step_ms", "traced_step_ms")},
            "two": {k: two[k] for k in ("model", "layers", "tokens", "arm", "world_size", "step_ms", "traced_step_ms")},
            "timed_before_h200": ANOMALY_TIMED_MS, "by_pass_ms": {"one": one["classes"]["by_pass_ms"],
                                                                   "two": two["classes"]["by_pass_ms"]},
            "kernel_count": {"one": one["classes"]["kernel_count"], "two": two["classes"]["kernel_count"]},
            **e, "mechanism": MECHANISM, "gpu_witnesses": anomaly_gpu_witnesses(one, two),
            "cpu_ops": _json(cpu) if os.path.exists(cpu := os.path.join(d, "anomaly_cpu_ops.json")) else None}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", nargs="?", help="the job's folder")
    ap.add_argument("--prospective", action="store_true", help=f"write {os.path.relpath(PROSPECTIVE, ROOT)}")
    a = ap.parse_args(argv)
    from workbench.measure.results import atomic_write_json
    if a.prospective:
        atomic_write_json(PROSPECTIVE, prospective())
        print(PROSPECTIVE)
        return 0
    if not a.dir or not os.path.isdir(a.dir):
        print("error: give the job's folder (or --prospective)", file=sys.stderr)
        return 2
    pro = _json(PROSPECTIVE)
    res = {"prospective": os.path.relpath(PROSPECTIVE, ROOT), "rule_commit": pro["rule_commit"],
           "projections": projections(a.dir, pro), "offload_with_contention": contention(a.dir, pro),
           "equivalence_bf16": equivalence_results(a.dir), "anomaly": anomaly(a.dir)}
    res["invalidated"] = {  # found after the run (the anomaly): stated, the verdicts above left as computed
        "offload": "the 4-rank (and 2-rank) offload runs used transformers 5.17 with the offload checkpoint before "
                   "the fix: under FSDP2 both arms computed no LoRA gradient (MECHANISM); their measured saving and "
                   "the verdicts on it (projection and contention) do not describe the training step",
        "all": "the 2-rank `all` baseline likewise (the anomaly)"}
    bw = os.path.join(a.dir, "bandwidth.json")
    if os.path.exists(bw):
        res["bandwidth"] = {dr: {n: s["mean_gb_per_s"] for n, s in v.items()}
                            for dr, v in _json(bw)["directions"].items()}
    atomic_write_json(os.path.join(a.dir, OUT_FILE), res)
    for p in res["projections"]:
        print(f"projection {p.get('comparison')}: {p.get('projected_ms', float('nan')):.1f} {p.get('projected_ci95')} "
              f"vs measured {p.get('measured_ms', float('nan')):.1f} {p.get('measured_ci95')} ({p.get('unit')}): "
              f"{p['verdict']}" + (f" ({p['reason']})" if p["verdict"] == "void" else ""))
    oc = res["offload_with_contention"]
    print(f"offload with contention: {oc.get('projected_ms', float('nan')):.1f} {oc.get('projected_ci95')}: "
          f"{oc['verdict']}  B(n) {oc.get('b_gb_per_s')}" + (f" ({oc['reason']})" if oc["verdict"] == "void" else ""))
    for f, r in res["equivalence_bf16"].items():
        print(f"equivalence {f}: {r}")
    an = res["anomaly"]
    print(f"anomaly: reproduced {an.get('reproduced')}, explained by "
          f"{[(x['component'], round(x['decrease_ms'], 1)) for x in an.get('explained_by', [])]}")
    print(json.dumps(res, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
