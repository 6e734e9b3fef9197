"""Issue 41 after the offload / FSDP2 fix, from `gpu/jobs/fourgpu_fix.sh` (4 x H200, code 6c4a3cc):

    python profiles/2026-11-26_h200x4_fourgpu_fix/analyze.py      # prints the verdicts, writes analysis.json here

1. FSDP2 x 2 against one process at bf16 for the `all` model (equiv_all/equiv_n2_all.json, criterion
   `equivalence.judge_sharded`, fixed before the 4-GPU runs).
2. Offload at 1, 2, 4 ranks on this host (o1, o2, o4): the 4-rank saving projected from o1 and o2 by the committed
   rule (`straggler.projection`, rule commit aed9af7), judged by `straggler.judge_projection`; the contention term
   T(N) of the H100 x4 host's bandwidth.json (profiles/2026-11-26_h100x4_fourgpu/) beside it as a sensitivity (this
   H200 host's bandwidth was not measured: the device time ran out).
3. The anomaly traced again after the fix (anomaly_one / anomaly_two.json), class by class
   (`gpu/analyze_fourgpu.anomaly`), and the whole-weight expert-gradient ops on rank 0 of 2
   (equiv_all/backward_ops_two.json) against the one-process count on the tiny preset's code path.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "gpu"))


def main() -> int:
    from analyze_fourgpu import anomaly
    from workbench.instrument.bandwidth import per_rank_gb_per_s
    from workbench.opts.offload_savings import contention_term
    from workbench.savings import straggler

    out = {}
    e = json.load(open(os.path.join(HERE, "equiv_all", "equiv_n2_all.json")))
    out["equivalence_all_n2"] = [{k: c.get(k) for k in ("name", "model", "layers", "tokens", "arm", "precision",
                                                          "equivalent", "tensors", "grad_max_rel_l2",
                                                          "grad_max_bf16_vs_fp32_rel_l2", "worst_ratio_to_tol",
                                                          "loss_rel_diff", "loss_tol", "decisive",
                                                          "control_failed_as_it_must")} for c in e["comparisons"]]
    s = {n: straggler._saving(os.path.join(HERE, f"o{n}"), "offload", "sync_reload", "double_buffer")
         for n in (1, 2, 4)}
    m4 = straggler.measured_at_ranks([os.path.join(HERE, "o4")], "offload", "sync_reload", "double_buffer")
    (plain,) = straggler.projection(s[1], s[2], (4,))
    h100 = os.path.join(ROOT, "profiles", "2026-11-26_h100x4_fourgpu")
    bw = json.load(open(os.path.join(h100, "bandwidth.json")))
    b = {n: per_rank_gb_per_s(bw, n) for n in (1, 2, 4)}
    inp = json.load(open(os.path.join(HERE, "o1", "summary.json")))["comparisons"][0]["savings_model"].get("inputs")
    rec = {"saving_ms": {n: {k: s[n].get(k) for k in ("mean", "ci95", "n")} for n in s},
           "measured_4": m4, "projection": plain,
           "verdict": straggler.judge_projection(plain["ci95"], m4["mean"], m4["ci95"]), "rule": straggler.PROJECTION_RULE}
    if inp:  # only when o1 carries the model's traced inputs (c, g, h)
        terms = {n: contention_term(inp["c_ms"]["value"], inp["g_ms"]["value"], inp["h_ms"]["value"], b[1], b[n])
                 for n in (2, 4)}
        (p,) = straggler.projection(s[1], s[2], (4,), term={n: t["term_ms"] for n, t in terms.items()})
        rec["with_h100_contention_term"] = {"projection": p, "verdict": straggler.judge_projection(
            p["ci95"], m4["mean"], m4["ci95"])}
    else:
        rec["with_h100_contention_term"] = {"verdict": "not computed",
                                            "reason": "o1 ran untraced: no c, g, h (the model's inputs come from traces)"}
    out["offload_projection"] = rec
    out["anomaly"] = anomaly(HERE)
    out["backward_ops_two"] = json.load(open(os.path.join(HERE, "equiv_all", "backward_ops_two.json")))["comparisons"]
    with open(os.path.join(HERE, "analysis.json"), "w") as f:
        json.dump(out, f, indent=1, default=str)
    for c in out["equivalence_all_n2"]:
        print(f"equivalence {c['name']} ({c['model']} {c['layers']} L {c['tokens']}, {c['arm']}, {c['precision']}): "
              f"{c['equivalent']}, {c['tensors']} tensors, grad max rel L2 {c['grad_max_rel_l2']:.3g} "
              f"(bf16 vs fp32 {c['grad_max_bf16_vs_fp32_rel_l2']:.3g}), worst ratio to tol "
              f"{c['worst_ratio_to_tol']:.3g}, decisive {c['decisive']}, control failed {c['control_failed_as_it_must']}")
    for n in (1, 2, 4):
        print(f"offload saving at {n} rank(s): {s[n]['mean']:.2f} ms {s[n].get('ci95')}")
    print(f"projection at 4 ranks: {plain['saving_ms']:.2f} {plain['ci95']} vs measured {m4['mean']:.2f} "
          f"{m4['ci95']} ({m4['unit']}): {rec['verdict']}; with the H100 host's contention term: "
          f"{rec['with_h100_contention_term']['verdict']}")
    a = out["anomaly"]
    print(f"anomaly after the fix: one {a['one']['traced_step_ms']:.0f} ms traced, two {a['two']['traced_step_ms']:.0f}"
          f" ms; reproduced {a.get('reproduced')}; explained by "
          f"{[(x['component'], round(x['decrease_ms'], 1)) for x in a.get('explained_by', [])]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
