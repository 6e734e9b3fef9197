"""The between-run component of a measured saving: how far a rerun of one shape, in another lease (on another
machine), moves the saving beyond what one run's processes show.

A process-level verdict measures a saving over the K processes of one run: the population of processes on that
machine. Twice a planned run's ratio landed outside its pilot's 90% interval (offload qwen3-14b: 0.74 [0.65, 0.83] ->
0.88, its saving 21.0 -> 23.4 ms; packing qwen3-14b 4 L: 1.13 [0.96, 1.32] -> 0.93, its saving 8.94 -> 7.41 ms). This
module measures the measured saving's share of that from every shape the profiles hold more than one `--processes K`
run of:

- per shape, the runs' process means of the saving on the log scale (log ms: a relative component, comparable across
  shapes), a one-way ANOVA by run (`replication.machine_prediction`, the machine model of the speedup claims):
  omega, the SD of a run's level, and tau', the SD of a process mean within a run; the F test of omega = 0
  (MSB / MSW on J - 1 and K - J df);
- pooled over shapes: omega^2 as the (J - 1)-weighted mean of the shapes' untruncated moment estimates, truncated at
  0 only then (so shapes that read below 0 pull it down rather than being dropped), and Fisher's combination of the
  shapes' F tests;
- the same for a traced prediction, where every process of a shape's runs traced its own (the traced form re-reads
  its input on each machine: offload qwen3-14b's moved 28.6 -> 26.6 ms between two runs).

What it assumes, said where it is used: a shape's runs share one process SD (the F test's level is too high where
machines differ in their SD: tests/test_between_runs.py measures how much), and every run of a shape measured the
same thing (the key below: the comparison and its arms, the model, layers, tokens, batches, lengths, precision,
checkpointing, LoRA rank and GPU name). Runs on the same machine in different leases count as different runs.
Omega is everything two runs do not share: the machine, the lease, the hour, and the commit (each shape's
`machines` and `commits` are listed: where a commit changed an arm between runs, that change is in omega too).

    python -m workbench.analysis.between_runs [PROFILES]    # one line per shape, then pooled; writes
                                                            # PROFILES/between_runs.json
"""
from __future__ import annotations

import json
import math
import os

from workbench.errors import WorkbenchError
from workbench.measure.results import PROCESSES_FILE, results_file
from workbench.savings.plan import BETWEEN_RUNS_FILE
from workbench.savings.process_savings import folder_savings, process_saving  # noqa: F401 - folder_savings: this module's readers' name

ARGS_KEY = ("model", "layers", "tokens", "batches", "lengths", "precision", "checkpointing", "lora_rank", "attn",
            "experts", "process_seeds")
"""What two runs of one shape share (each process's meta.json `args`, the model, layers and tokens as the comparison
resolved them in summary.json), beside the comparison, its arms and the GPU. A key an older meta.json lacks counts as
"None" and its runs form a shape of their own; `process_seeds`, "each" before the flag existed: runs of one model
and batches (`--process-seeds same`) are not runs of a population of them."""

OUT_FILE = BETWEEN_RUNS_FILE
"""Written into the profiles root by the CLI; `workbench verdicts --plan` reads it back
(`workbench.savings.plan.read_between_runs`)."""


def collect(profiles: str | None = None) -> dict:
    """{shape key: [{"key", "label", "folder", "machine", "savings_ms": [each process's mean saving]}]}: one entry per
    `--processes K` folder and comparison, over the runs `workbench.analysis` keeps (complete GPU runs; no deliberately
    slowed run, no void comparison)."""
    import pandas as pd

    from workbench.analysis.loader import _included, _meta

    runs: dict = {}
    for r, comps in _included(profiles):
        if not r["process_of"] or not os.path.isfile(os.path.join(os.path.dirname(r["path"]), PROCESSES_FILE)):
            continue  # not one process of a --processes K run (a dose-response's levels are not the arms)
        m = _meta(r["path"])
        args, dev = m.get("args") or {}, m.get("device") or {}
        results = pd.read_csv(results_file(r["path"]))  # once per process, for all its comparisons
        for c in comps:
            v = process_saving(results, c)
            if v is None:
                continue
            sm = c.get("savings_model") or {}
            pred = (sm.get("predicted_ms") if sm.get("input_source") == "traced" and (sm.get("predicted_ms") or 0) > 0
                    else None)
            shape = {"process_seeds": "each", **args,
                     **{k: c.get(k) for k in ("model", "layers", "tokens") if c.get(k) is not None}}
            base, arm = c["baseline"]["arm"], c["optimized"]["arm"]
            key = (c["name"], base, arm, dev.get("name")) + tuple(str(shape.get(k)) for k in ARGS_KEY)
            e = runs.setdefault((key, r["process_of"]), {
                "key": key, "folder": r["process_of"], "machine": str(dev.get("uuid") or "?")[:12], "savings_ms": [],
                "commit": str(m.get("git_sha") or "?")[:7], "predicted_ms": [],
                "label": f"{c['name']} {shape.get('model')} {shape.get('layers')} L {shape.get('tokens')} "
                         f"({arm} vs {base})"})
            e["savings_ms"].append(v)
            if pred is not None:
                e["predicted_ms"].append(float(pred))
    shapes: dict = {}
    for (key, _), e in sorted(runs.items(), key=lambda kv: kv[0][1]):
        shapes.setdefault(key, []).append(e)
    return shapes


def shape_component(runs: list[dict]) -> dict | None:
    """The between-run component of one shape's runs (see the module docstring); None with fewer than 2 runs; where
    it cannot be estimated (no run with 2 processes, or a process whose mean saving is not positive: the log scale
    needs it) the runs with "why"; "prediction" the same for the traced prediction where every process has one."""
    runs = [r for r in runs if r["savings_ms"]]
    if len(runs) < 2:
        return None
    vals = [v for r in runs for v in r["savings_ms"]]
    K, J = len(vals), len(runs)
    base = {"label": runs[0]["label"], "J": J, "K": K, "folders": [r["folder"] for r in runs],
            "machines": [r["machine"] for r in runs], "commits": [r.get("commit") for r in runs],
            "run_means_ms": [sum(r["savings_ms"]) / len(r["savings_ms"]) for r in runs]}
    if K - J < 1:
        return {**base, "why": "every run has one process: no within-run spread to judge the runs against"}
    if min(vals) <= 0:
        return {**base, "why": "a process saved nothing or less (the relative scale needs a positive saving)"}
    out = {**base, **_anova([r["savings_ms"] for r in runs])}
    preds = [r.get("predicted_ms") or [] for r in runs]
    if all(len(x) == len(r["savings_ms"]) for x, r in zip(preds, runs)):  # every process traced: the prediction too
        out["prediction"] = _anova(preds)
    return out


def _anova(values: list[list[float]]) -> dict:
    """omega, its untruncated square, tau', F, df and p of one shape's runs (`values`: per run, per process, > 0) on
    the log scale (`replication.machine_prediction`'s one-way ANOVA)."""
    from scipy import stats as sps

    from workbench.measure import replication

    J, K = len(values), sum(len(v) for v in values)
    pred = replication.machine_prediction([[[math.log(v)] for v in run] for run in values])
    msb, msw, n0 = pred["msb"], pred["msw"], pred["n0"]
    f = msb / msw if msw > 0 else math.inf
    return {"omega": pred["omega"], "omega2_raw": (msb - msw) / n0, "tau_process": pred["tau_process"],
            "F": f, "df": (J - 1, K - J), "p": float(sps.f.sf(f, J - 1, K - J)) if math.isfinite(f) else 0.0}


def pooled(components: list[dict]) -> dict | None:
    """omega pooled over shapes ((J - 1)-weighted untruncated omega^2, then truncated) and Fisher's combined p of the
    shapes' F tests; None without an estimable shape."""
    from scipy import stats as sps

    ok = [c for c in components if c and "omega" in c]
    if not ok:
        return None
    w = sum(c["J"] - 1 for c in ok)
    om2 = sum((c["J"] - 1) * c["omega2_raw"] for c in ok) / w
    p = float(sps.combine_pvalues([c["p"] for c in ok], method="fisher")[1])
    return {"omega": math.sqrt(max(0.0, om2)), "shapes": len(ok), "df": w, "p": p,
            "method": f"(J - 1)-weighted moment estimate over {len(ok)} shapes ({w} df between runs); Fisher's p"}


def by_opt(components: list[dict]) -> dict:
    """{optimization: `pooled` over that optimization's shapes} (the comparison name's first word, e.g. "packing"),
    with "prediction": the same pooled over the shapes whose every process traced its prediction (None without)."""
    out: dict = {}
    for c in components:
        out.setdefault(c["label"].split()[0], []).append(c)
    res = {}
    for k, v in sorted(out.items()):
        p = pooled(v)
        if p is not None:
            res[k] = {**p, "prediction": pooled([{**c["prediction"], "J": c["J"]} for c in v if c.get("prediction")])}
    return res


def table(components: list[dict], pool: dict | None) -> str:
    lines = ["between-run component of the measured saving (relative, log scale; runs of one shape, one-way ANOVA "
             "by run):"]
    for c in components:
        means = ", ".join(f"{m:.3g}" for m in c["run_means_ms"])
        if "why" in c:
            lines.append(f"  {c['label']}: {c['J']} runs (means {means} ms): not estimated: {c['why']}")
            continue
        pr = c.get("prediction")
        lines.append(f"  {c['label']}: {c['J']} runs, {c['K']} processes (run means {means} ms): omega "
                     f"{100 * c['omega']:.1f}%, tau' {100 * c['tau_process']:.1f}%, F {c['F']:.2f} on {c['df'][0]}, "
                     f"{c['df'][1]} df, p {c['p']:.3g}"
                     + (f"; its traced prediction: omega {100 * pr['omega']:.1f}%, p {pr['p']:.3g}" if pr else ""))
    if pool:
        for name, p in by_opt(components).items():
            pr = p.get("prediction")
            lines.append(f"  {name}, pooled: omega {100 * p['omega']:.1f}% over {p['shapes']} shapes ({p['df']} df); "
                         f"Fisher's p {p['p']:.3g}" + (f"; the traced prediction's omega {100 * pr['omega']:.1f}% over "
                                                       f"{pr['shapes']} shapes, p {pr['p']:.3g}" if pr else ""))
        lines.append(f"  every shape, pooled: omega {100 * pool['omega']:.1f}% over {pool['shapes']} shapes "
                     f"({pool['df']} df between runs); Fisher's p {pool['p']:.3g} (the null: no between-run component)")
    return "\n".join(lines)


def estimate(profiles: str | None = None) -> tuple[list[dict], dict | None]:
    """(per-shape components, pooled) over every shape with 2 or more runs under `profiles`."""
    shapes = collect(profiles)
    labels: dict = {}
    for key, runs in shapes.items():
        labels.setdefault(runs[0]["label"], []).append(key)
    for keys in labels.values():  # two shapes that print alike: say what tells them apart
        for key in keys if len(keys) > 1 else ():
            differ = [f"{k} {v}" for i, (k, v) in enumerate(zip(ARGS_KEY, key[4:]))
                      if any(o[4 + i] != v for o in keys)]
            for e in shapes[key]:
                e["label"] += f" [{', '.join(differ)}]"
    comps = [c for runs in shapes.values() if (c := shape_component(runs)) is not None]
    comps.sort(key=lambda c: c["label"])
    return comps, pooled(comps)


def document(profiles: str | None = None) -> dict:
    """What the CLI writes to PROFILES/between_runs.json (JSON-normal: as read back)."""
    comps, pool = estimate(profiles)
    return json.loads(json.dumps({"by": "python -m workbench.analysis.between_runs", "pooled": pool,
                                  "by_opt": by_opt(comps), "shapes": comps}))


def refresh(profiles: str | None = None, write: bool = True) -> bool:
    """Whether PROFILES/between_runs.json was missing or differed from what the profiles give now; with `write`, it
    is rewritten then (`readme_results`; `--check` passes write=False)."""
    from workbench.measure.results import atomic_write_json
    from workbench.paths import profiles_root
    path, doc = os.path.join(profiles_root(profiles), OUT_FILE), document(profiles)
    old = None
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            old = json.load(f)
    if old == doc:
        return False
    if write:
        atomic_write_json(path, doc)
    return True


def main(argv=None) -> int:
    from workbench.analysis.loader import profiles_root, shown_path
    from workbench.cli import emit_json, parser
    from workbench.measure.results import atomic_write_json

    p = parser("workbench.analysis.between_runs", __doc__.split("\n\n")[0])
    p.add_argument("profiles", nargs="?", default=None, help="the folder searched for --processes K runs "
                   "(default: $WB_PROFILES, else the checkout's profiles/); the estimate is written there as "
                   f"{OUT_FILE}")
    p.add_argument("--no-write", action="store_true", help=f"print only; leave {OUT_FILE} as it is")
    a = p.parse_args(argv)
    root = profiles_root(a.profiles)
    if not os.path.isdir(root):
        raise WorkbenchError(f"{a.profiles}: no such folder")
    doc = document(root)
    comps, pool = doc["shapes"], doc["pooled"]
    if not comps:
        raise WorkbenchError(f"{shown_path(root)}: no shape has two --processes K runs (processes.json) to compare")
    print(table(comps, pool))
    if not a.no_write:
        atomic_write_json(os.path.join(root, OUT_FILE), doc)
        print(f"written: {shown_path(os.path.join(root, OUT_FILE))}")
    emit_json({"pooled": pool, "shapes": len(comps)})
    return 0


if __name__ == "__main__":
    import sys

    from workbench.cli import run_main
    sys.exit(run_main(main))
