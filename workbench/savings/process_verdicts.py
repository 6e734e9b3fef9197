"""Savings-model verdicts of a `--processes K` run folder: the process as the unit of the claim.

    workbench verdicts DIR        # DIR holds processes.json and DIR/p00 .. (python -m workbench.ab ... --processes K)

Each process folder gets its own verdicts first (`verdicts.annotate`: a single run's, "single run + tau"), then per
comparison, over the K processes that ran (exit status 0, a summary.json):

- measured: the mean over processes of each process's mean paired saving, a t-interval over processes (K-1 df) and
  a prediction interval for one more process (`replication.process_saving`);
- predicted: the mean over processes of each process's prediction (from its own traces), its se the sd of those
  over sqrt(K) (K-1 df): the traced steps' spread and the process's shift together; the published form likewise;
- the instrument precondition holds in every process (else "no verdict: instrument", naming the processes);
- θ from `--calibration` as for a single run; Holm over the folder's comparisons, models and published forms in one
  family (`verdicts.finalize`).

- the processes' environments compared (`results.environment_diff`): where a package version, the NVTX backend, git
  sha, GPU or precision differs, each savings_model carries `mixed_environment` ("mixed environment: nvtx 0.2.17 in
  p00-p01, none in p02-p05"), a flag beside the verdict, which stands.

Written: DIR/verdicts.json ({"by", "git_sha", "processes", "calibration", "tau_from", "environment", "comparisons":
[{name, opt, model, layers, tokens, savings_model}]}); returned: `verdicts.rows` of it. With fewer than 2 processes the folder's
only process's own verdicts are returned (a single run: "single run + tau").
"""
from __future__ import annotations

import os

from workbench.measure import replication, stats
from workbench.savings import calibration, common as savings, untraced, verdicts

OUT_FILE = "verdicts.json"
DECIDED = ("confirmed", "refuted", "inconclusive")


def _mean_over(values: list[float]) -> dict:
    """mean, se (sd / sqrt K), df K-1 and 95% t-interval of per-process values (`stats.t_interval`)."""
    t = stats.t_interval(values)
    return {"predicted_ms": t["mean"], "predicted_se_ms": t["se"], "predicted_df": t["df"], "predicted_ci95": t["ci"]}


def comparison(name: str, per: list[tuple[str, dict, dict]], inputs: verdicts.Inputs,
               gpus: list[str] | None = None) -> dict | None:
    """The process-level savings_model of one comparison from [(process folder, its comparison dict, its results)]
    (`gpus`: the machine each process ran on, as `dose.machine_of` names one, for the untraced form's revision (7));
    None when the comparison has no savings model in the first process."""
    d0, c0, _ = per[0]
    sm0 = c0.get("savings_model") or {}
    if "verdict" not in sm0 or sm0["verdict"] == "not modelled":
        return None
    opt, base, arm = c0.get("opt"), c0["baseline"]["arm"], c0["optimized"]["arm"]
    sms = [(os.path.basename(d), c.get("savings_model") or {}) for d, c, _ in per]
    groups = [verdicts.rep_savings(res, name, base, arm) for _, _, res in per]
    measured = replication.process_saving(groups)
    rev = savings.model_revision(opt)
    out = {"formula": sm0.get("formula"), "model_revision": rev["revision"], "model_revision_commit": rev["commit"],
           "processes": [p for p, _ in sms]}
    not_judged = [(p, sm) for p, sm in sms if sm.get("verdict") not in DECIDED]
    instrument = [(p, sm) for p, sm in not_judged if sm.get("verdict") == calibration.NO_VERDICT_INSTRUMENT]
    other = [(p, sm) for p, sm in not_judged if sm.get("verdict") != calibration.NO_VERDICT_INSTRUMENT]
    theta, src = calibration.theta_for(inputs.calibration, opt, c0)
    if opt in (inputs.calibration.get(None) or {}):
        out["theta_note"] = inputs.calibration[None][opt]
    if other:
        p, sm = other[0]
        out.update(**verdicts._measured_keys(measured), verdict=sm.get("verdict"), reason=f"{p}: {sm.get('reason')}")
        return out
    if sm0.get("input_source") == untraced.INPUT_SOURCE:  # no trace: the dose slope's se, not the processes' spread
        return _untraced(out, sms, measured, opt, inputs.dose.get(opt), gpus)
    model = {**_mean_over([sm["predicted_ms"] for _, sm in sms]), "formula": sm0.get("formula"),
             "n_steps": sum(int(sm.get("n_steps") or 0) for _, sm in sms)}
    if all(sm.get("published") for _, sm in sms):
        model["published"] = {"formula": sm0["published"].get("formula"),
                              **_mean_over([sm["published"]["predicted_ms"] for _, sm in sms])}
    if instrument:
        out.update({k: v for k, v in model.items() if k != "published"}, **verdicts._measured_keys(measured),
                   input_source=src, verdict=calibration.NO_VERDICT_INSTRUMENT,
                   reason="; ".join(f"{p}: {sm.get('reason')}" for p, sm in instrument))
        return out
    out.update(verdicts.check(opt, model, measured, None, theta=theta, input_source=src, alone=False))
    out["_measured"] = measured
    return out


def _untraced(out: dict, sms: list[tuple[str, dict]], measured: dict, opt: str, entry: dict | None,
              gpus: list[str] | None) -> dict:
    """The untraced form at the process level (`untraced.process_model`), judged as a run's
    (`verdicts.judge_untraced`)."""
    return verdicts.judge_untraced(out, opt, untraced.process_model([sm for _, sm in sms], entry, gpus), measured)


def annotate(run_dir: str, inputs: verdicts.Inputs | None = None, write: bool = True,
             process_out: str = "summary.json") -> list[dict]:
    """Verdicts of every process folder, then the process-level ones; returns their rows. `write`: each process's
    judged summary as its `process_out` and the process-level DIR/verdicts.json (False: nothing written)."""
    from workbench.measure.results import atomic_write_json, environment_diff, git_sha, load_run, process_dirs

    inputs = inputs or verdicts.Inputs()
    dirs = process_dirs(run_dir)
    if not dirs:
        raise FileNotFoundError(f"{run_dir}: no process folder ran to the end (processes.json)")
    judged = {}
    for d in dirs:
        judged[d] = verdicts.judged_summary(d, inputs)
        if write:
            atomic_write_json(os.path.join(d, process_out), judged[d])
    if len(dirs) < 2:
        return verdicts.rows(judged[dirs[0]], dirs[0])
    env = environment_diff(dirs)
    loaded = [load_run(d) for d in dirs]
    gpus = [str((meta.get("device") or {}).get("uuid") or "")[:12] for _, _, meta in loaded]  # as dose.machine_of
    loaded = [(d, res, judged[d]) for d, (res, _, _) in zip(dirs, loaded)]
    comps = []
    for c0 in loaded[0][2].get("comparisons", []):
        name = c0.get("name")
        per = []
        for d, res, summ in loaded:
            c = next((x for x in summ.get("comparisons", []) if x.get("name") == name), None)
            if c is not None:
                per.append((d, c, res))
        sm = comparison(name, per, inputs, gpus=gpus) if len(per) == len(loaded) else None
        if sm is not None:
            sm["mixed_environment"] = env["line"]  # the verdict stands; its processes were not one instrument
            comps.append({k: c0.get(k) for k in ("name", "opt", "model", "layers", "tokens")} | {"savings_model": sm})
    fams: dict = {}
    for c in comps:
        if "_measured" in c["savings_model"]:
            fams.setdefault(verdicts.family_of(c["name"]), []).append(c["savings_model"])
    for sms in fams.values():
        verdicts.finalize(sms, [sm.pop("_measured") for sm in sms])
    doc = {"by": "workbench verdicts", "git_sha": git_sha(), "processes": len(dirs),
           "calibration": inputs.calibration_file, "dose": inputs.dose_dirs or None, "tau_from": None,
           "environment": env, "comparisons": comps}
    if write:
        atomic_write_json(os.path.join(run_dir, OUT_FILE), doc)
    return verdicts.rows(doc, run_dir)
