"""Held-out check on a third machine, and the gate's same-commit decisions, applying the rules fixed
beforehand in profiles/2026-11-26_h100_replication/prospective.json (commit it names in git log). Run from the repo
root on a CPU, after `bash studies/heldout_replication/heldout.sh` ran on the GPU:

    python studies/heldout_replication/analyze_heldout.py CAMPAIGN_DIR            # CAMPAIGN_DIR = $CAMP/heldout; writes CAMPAIGN_DIR/analysis.json
    python studies/heldout_replication/analyze_heldout.py CAMPAIGN_DIR --out F    # the JSON to F instead

1. Held-out processes (CAMPAIGN_DIR/packing, moe, offload: M processes each on this third machine): each process's
   mean per-rep log ratio, judged by `replication.heldout_new_machine_check` against the committed prediction and
   its committed null (recomputed with the same seed only when a different M ran): inside >= the null 5% quantile,
   and the variance ratio inside its F interval. A part that did not run says so; nothing is dropped. A part whose
   processes ran in different environments (`results.environment_diff`: a package, the NVTX backend, git sha, GPU or
   precision) prints "mixed environment: ..." and carries it as `mixed_environment`: the verdict stands, flagged.
2. The gate on packing's baseline arm (`rebuild`), per machine, as `profiles/2026-11-26_h100_replication/analyze.py`
   does it: the run SD from 3 same-commit A/A processes of that machine (`gate_stats.run_sd`, its upper bound), the
   rep SD pooled over that machine's processes, the tolerance for a <= 5% simulated false-fail rate and the stated
   power at a 2% slowdown (`gate_stats`), then one decision per further same-commit process against one baseline
   process. Machines A and B from the committed folder (a0cecde; rep 0 left out), machine C from this campaign
   (A/A = CAMPAIGN_DIR/packing_aa, baseline = packing/p00, the rest of packing and gate as new runs). Done when 20
   or more decisions fail at most 3 times. The injected slowdown (committed packing_inject2pct, machine B) is judged
   on machine B's gate: caught at its stated power (a two-sided binomial test, p >= 0.05), or the gate says it
   cannot detect 2% (tolerance >= 2%, or power < 0.8, said as such).
"""
import argparse
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repository root
from workbench.ab.processes import per_rep_log_ratios  # noqa: E402
from workbench.analysis.loader import step_samples  # noqa: E402
from workbench.compare import gate_stats  # noqa: E402
from workbench.measure.results import environment_diff, nvtx_backend_of  # noqa: E402
from workbench.measure.results import process_dirs as procs  # noqa: E402
from workbench.measure import power, replication  # noqa: E402

COMMITTED = os.path.join("profiles", "2026-11-26_h100_replication")
DESIGN = os.path.join(COMMITTED, "prospective.json")
GATE_MAX_FAILS, GATE_MIN_RUNS, REGRESSION_PCT = 3, 20, 2.0


def rep_means(run, name, arm, skip):
    by = {}
    for x in step_samples(run).get(name, []):
        if x["arm"] == arm and x["rep"] >= skip:
            by.setdefault(x["rep"], []).append(x["step_ms"])
    return [float(np.mean(v)) for _, v in sorted(by.items())]


def heldout(camp, design):
    out = {}
    for name, c in design["comparisons"].items():
        runs = procs(os.path.join(camp, name))
        pred, plan = c["prediction"], c["heldout_plan"]
        groups = [per_rep_log_ratios(r, name, c["baseline"], c["arm"], skip_reps=0) for r in runs]
        groups = [g for g in groups if g]
        mixed = environment_diff(runs)["line"]  # the verdict stands; a mixed-environment one carries the flag
        if len(groups) < 2:
            out[name] = {"ran": len(groups), "verdict": f"not judged: {len(groups)} held-out process(es) ran",
                         "mixed_environment": mixed}
            continue
        reps = sorted({len(g) for g in groups})
        chk = replication.heldout_new_machine_check(pred, [float(np.mean(g)) for g in groups], null=plan["null"])
        out[name] = {**chk, "ran": len(groups), "planned_M": plan["M"], "reps_per_process": reps,
                     "same_R_as_estimate": reps == pred["R"], "pi95": pred["pi95"],
                     "heldout_speedups": [math.exp(float(np.mean(g))) for g in groups],
                     "verdict": "holds" if chk["ok"] else "FAILS", "mixed_environment": mixed}
    return out


def machine_gate(aa, skip_aa, baseline, new, skip, all_runs):
    """One machine's gate: tolerance and stated power from its A/A processes, then a decision per new run."""
    rs = gate_stats.run_sd([rep_means(r, "packing", "rebuild", skip_aa) for r in aa])
    within = [np.log(rep_means(r, "packing", "rebuild", s)) for r, s in all_runs]
    within = [w for w in within if w.size >= 2]
    rep_sd_pct = 100 * math.sqrt(np.mean([np.var(w, ddof=1) for w in within]))
    base_ms = rep_means(baseline, "packing", "rebuild", skip)
    noise = power.Noise(rep_sd_pct=rep_sd_pct, step_sd_pct=0.1, batch_sd_pct=0.0, drift_pct=0.0)
    design = gate_stats.GateDesign(reps=len(base_ms), steps=2, batches=1, arms=2, run_sd_pct=rs["run_sd_pct"])
    tol = gate_stats.tolerance_pct(noise, design, sims=2000)
    pw = gate_stats.detection_rate(noise, design, tol, slowdown_pct=REGRESSION_PCT, sims=2000)
    dec = [gate_stats.decide(gate_stats.speedup_ci(base_ms, rep_means(r, "packing", "rebuild", s))["ci95"], tol)
           for r, s in new]
    return {"run_sd": rs, "rep_sd_pct": rep_sd_pct, "tolerance_pct": tol, "power_2pct_stated": pw,
            "baseline": baseline, "decisions": dec, "new": [r for r, _ in new]}


def machine_name(folder):
    """'E (GPU-xxxxxxxx)' from FOLDER/gpu.csv's UUID (its first 12 characters), or the folder's name."""
    path = os.path.join(folder, "gpu.csv")
    rows = open(path, encoding="utf-8").read().splitlines()[1:] if os.path.isfile(path) else []
    uuids = [r.split(",")[-1].strip() for r in rows if "GPU-" in r]
    return uuids[0][:12] if uuids else os.path.basename(os.path.normpath(folder))


def nvtx_backends(runs):
    """Each run's NVTX backend, as `results.nvtx_backend_of` reads it from its meta.json."""
    out = []
    for r in runs:
        with open(os.path.join(r, "meta.json"), encoding="utf-8") as f:
            out.append(nvtx_backend_of(json.load(f)))
    return out


def gate(camp, extra=()):
    a, b = procs(os.path.join(COMMITTED, "packing_a")), procs(os.path.join(COMMITTED, "packing_b"))
    inj = procs(os.path.join(COMMITTED, "packing_inject2pct"))
    machines = {}
    machines["A"] = machine_gate(a[:3], 1, a[3], [(r, 1) for r in a[4:]], 1, [(r, 1) for r in a])
    machines["B"] = machine_gate(b[:3], 1, b[3], [(r, 1) for r in b[4:]], 1, [(r, 1) for r in b])
    aa_c, held_c = procs(os.path.join(camp, "packing_aa")), procs(os.path.join(camp, "packing"))
    extra_c = procs(os.path.join(camp, "gate"))
    if len(aa_c) >= gate_stats.MIN_AA_PROCESSES and len(held_c) >= 2:
        new_c = held_c[1:] + extra_c
        machines["C"] = machine_gate(aa_c, 0, held_c[0], [(r, 0) for r in new_c], 0,
                                     [(r, 0) for r in aa_c + held_c + extra_c])
    for folder in extra:  # a machine of its own: FOLDER/packing_aa (>= 3 A/A), FOLDER/gate (p00 the baseline)
        aa_e, runs_e = procs(os.path.join(folder, "packing_aa")), procs(os.path.join(folder, "gate"))
        if len(aa_e) >= gate_stats.MIN_AA_PROCESSES and len(runs_e) >= 2:
            m = machine_gate(aa_e, 0, runs_e[0], [(r, 0) for r in runs_e[1:]], 0, [(r, 0) for r in aa_e + runs_e])
            m["backends"] = dict(zip(aa_e + runs_e, nvtx_backends(aa_e + runs_e)))
            machines[machine_name(folder)] = m
    for m in machines.values():
        m.setdefault("backends", dict(zip(m["new"] + [m["baseline"]], nvtx_backends(m["new"] + [m["baseline"]]))))
        m["mixed_backend"] = sorted(r for r in m["new"] if m["backends"][r] != m["backends"][m["baseline"]])
    dec = [d for m in machines.values() for d in m["decisions"]]
    fails = dec.count("fail")
    gb = machines["B"]
    b_ms = rep_means(gb["baseline"], "packing", "rebuild", 1)
    inj_dec = [gate_stats.decide(gate_stats.speedup_ci(b_ms, rep_means(r, "packing", "rebuild", 1))["ci95"],
                                 gb["tolerance_pct"]) for r in inj]
    slow = (np.mean([np.mean(rep_means(r, "packing", "rebuild", 1)) for r in inj])
            / np.mean([np.mean(rep_means(r, "packing", "rebuild", 1)) for r in b]) - 1) if inj else math.nan
    from scipy import stats as sps
    caught = inj_dec.count("fail")
    p = float(sps.binomtest(caught, len(inj_dec), gb["power_2pct_stated"]).pvalue) if inj_dec else math.nan
    cannot = gb["tolerance_pct"] >= REGRESSION_PCT or gb["power_2pct_stated"] < 0.8
    clean = [d for m in machines.values() for d, r in zip(m["decisions"], m["new"]) if r not in m["mixed_backend"]]
    return {"machines": machines, "same_commit_runs": len(dec), "fails": fails,
            "clean_runs": len(clean), "clean_fails": clean.count("fail"),
            "done": len(dec) >= GATE_MIN_RUNS and fails <= GATE_MAX_FAILS,
            "injected": {"machine": "B", "decisions": inj_dec, "caught": caught,
                         "slowdown_pct_measured": 100 * slow, "stated_power": gb["power_2pct_stated"],
                         "binomial_p": p, "consistent_with_stated_power": bool(p >= 0.05),
                         "says_cannot_detect_2pct": bool(cannot)}}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("campaign")
    ap.add_argument("--design", default=DESIGN)
    ap.add_argument("--out", default=None)
    ap.add_argument("--gate-machine", action="append", default=[], metavar="DIR",
                    help="another machine's gate folder (DIR/packing_aa: its A/A processes, DIR/gate: p00 the "
                         "baseline, the rest decisions), e.g. profiles/2026-11-26_h100_gate_e")
    a = ap.parse_args(argv)
    with open(a.design, encoding="utf-8") as f:
        design = json.load(f)
    res = {"design": a.design, "heldout": heldout(a.campaign, design), "gate": gate(a.campaign, a.gate_machine)}
    gpu = os.path.join(a.campaign, "gpu.csv")
    res["machine"] = open(gpu).read().strip() if os.path.isfile(gpu) else None
    for name, h in res["heldout"].items():
        if h.get("mixed_environment"):
            print(f"{name}: {h['mixed_environment']}")
        if "inside" not in h:
            print(f"{name}: {h['verdict']}")
            continue
        print(f"{name}: {h['ran']} held-out processes on a new machine: {h['heldout_speedup']:.4f}x "
              f"({h['shift_pct']:+.2f}% from the estimate); inside PI [{h['pi95'][0]:.4f}, {h['pi95'][1]:.4f}]: "
              f"{h['inside']:.2f} (null 5% quantile {h['inside_null_q05']:.2f}); variance ratio "
              f"{h['variance_ratio']:.2f} [{h['f_interval'][0]:.2f}, {h['f_interval'][1]:.2f}]: {h['verdict']}")
    g = res["gate"]
    for m, x in g["machines"].items():
        print(f"gate, machine {m}: run SD {x['run_sd']['run_sd_pct']:.2f}% (upper bound), rep SD "
              f"{x['rep_sd_pct']:.2f}%, tolerance {x['tolerance_pct']:.2f}%, stated power at 2% "
              f"{x['power_2pct_stated']:.2f}: {x['decisions'].count('fail')} of {len(x['decisions'])} fail"
              + (f" ({len(x['mixed_backend'])} of them with another NVTX backend than its baseline: "
                 f"{', '.join(os.path.basename(r) for r in x['mixed_backend'])})" if x["mixed_backend"] else ""))
    i = g["injected"]
    print(f"gate, runs with their baseline's NVTX backend only: {g['clean_fails']} of {g['clean_runs']} fail")
    print(f"gate: {g['fails']} of {g['same_commit_runs']} same-commit runs fail ({'done' if g['done'] else 'NOT done'}: "
          f">= {GATE_MIN_RUNS} runs, <= {GATE_MAX_FAILS} fails); injected (+{i['slowdown_pct_measured']:.2f}%, machine "
          f"B): caught {i['caught']} of {len(i['decisions'])} at stated power {i['stated_power']:.2f} (binomial p "
          f"{i['binomial_p']:.2f})" + ("; the gate says it cannot promise 2% here" if i["says_cannot_detect_2pct"]
                                       else ""))
    out = a.out or os.path.join(a.campaign, "analysis.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump(res, f, indent=1, default=float)
    return 0


if __name__ == "__main__":
    sys.exit(main())
