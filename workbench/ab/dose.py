"""`python -m workbench.ab.dose`: a savings model's input measured without the instrument, a dose-response.

    python -m workbench.ab.dose --opt packing --model qwen3-14b --layers 8 --tokens 16384 \\
        --timing none,torch,nsys --processes 3 --reps 4 --trace torch --out DIR
    python -m workbench.savings.dose_fit DIR --calibration FILE      # the analysis (torch-free): slope, theta, decision

The levels u_0 = 0 < ... < u_max of one fix (the optimization's `DOSE` arm with `dose=u`: packing `cached` with u of
its L*p - 1 cache hits per step, moe `sort_bincount` in the first u layers; u = 0 is the baseline's function and
syncs, u_max the optimized arm's) run as the arms of ONE comparison of `python -m workbench.ab` per process: the
engine's protocol (a discarded warm-up rep on a GPU, a Williams order, settled warmups), equivalence of every level
against u = 0, the counted pass (syncs per step per level), the summary. Own flags:

- `--levels N` (5): evenly spaced over 0..u_max (packing 0, ~L/4, ~L/2, ~3L/4 layers per pass, then every hit;
  moe 0..L).
- `--timing MODES` (none): comma-separated, each its own K processes: `none` (no instrument but NVTX), `torch` (the
  same timed steps, each arm block inside torch.profiler: `Protocol.instrument`), `nsys` (the process under
  `nsys profile -c cudaProfilerApi`, every rep inside its capture range; nsys from $NSYS or PATH, the mode skipped
  with a line when there is none or no GPU; the report is deleted, its log kept).
- `--processes K` (1): per mode, seeds --seed .. --seed+K-1, the modes interleaved (process k runs every mode, their
  order rotated by k) so drift falls on every mode alike.
- `--trace none|torch|nsys` (torch): one traced pass of every level (separate from the timed steps), in the first
  process of the first mode: the model's traced input per unit.

Every other flag is `python -m workbench.ab`'s (shape, protocol, --seed, --out, --force); --arms, --aa, --sweep,
--headline, --nvtx-cost and --only are refused (the levels are the arms). Written: DIR/<mode>/pNN/ (run folders, each
with dose.json: its levels' labels and units), DIR/<mode>/pNN.log, DIR/dose_run.json (the command, the processes,
the traced folder); the last stdout line is that JSON.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import time

from workbench.cli import emit_json, parser, progress, run_main
from workbench.errors import WorkbenchError

TIMINGS = ("none", "torch", "nsys")
REFUSED = ("--arms", "--aa", "--sweep", "--headline", "--nvtx-cost", "--only", "--processes")
RUN_FILE, PROCESS_FILE = "dose_run.json", "dose.json"  # read by workbench.savings.dose_fit


def dose_levels(units_max: int, n: int) -> list[int]:
    """n levels evenly spaced over 0..units_max, rounded to whole units (fewer when units_max < n - 1)."""
    if n < 2:
        raise WorkbenchError(f"--levels must be at least 2, got {n}")
    return sorted({round(units_max * i / (n - 1)) for i in range(n)})


def _parser():
    p = parser("workbench.ab.dose", __doc__.split("\n\n")[0])
    p.add_argument("--levels", type=int, default=5, help="dose levels, evenly spaced over 0..u_max")
    p.add_argument("--timing", default="none", help="comma-separated timing modes: none, torch, nsys")
    p.add_argument("--processes", type=int, default=1, help="processes per timing mode")
    p.add_argument("--trace", default="torch", choices=("none", "torch", "nsys"),
                   help="the traced pass of every level (first process of the first mode)")
    p.add_argument("--_child", default=None, choices=TIMINGS, help="one process, in this timing mode (internal)")
    return p


def _split(argv):
    ns, rest = _parser().parse_known_args(argv)
    bad = [a for a in rest if a.split("=", 1)[0] in REFUSED]
    if bad:
        raise WorkbenchError(f"{bad[0].split('=', 1)[0]} does not apply to python -m workbench.ab.dose (the dose "
                             "levels are the arms; --processes is its own)")
    modes = [m.strip() for m in ns.timing.split(",") if m.strip()]
    unknown = [m for m in modes if m not in TIMINGS]
    if unknown or not modes or len(set(modes)) != len(modes):
        raise WorkbenchError(f"--timing {ns.timing!r}: give distinct modes of {', '.join(TIMINGS)}")
    if ns.processes < 1:
        raise WorkbenchError(f"--processes must be >= 1, got {ns.processes}")
    from workbench.ab.cli import parse_args
    from workbench import opts
    from workbench.opts.protocol import hook

    cfg = dataclasses.replace(parse_args(rest), trace=ns.trace if ns._child else "none")
    mod = opts.module(cfg.opt) if cfg.opt in opts.OPTS else None
    if mod is None or hook(mod, "DOSE") is None:
        raise WorkbenchError(f"--opt {cfg.opt}: no dose arm (an optimization whose module has DOSE: "
                             + ", ".join(o for o in opts.OPTS if hook(opts.module(o), "DOSE")) + ")")
    return ns, rest, modes, cfg, mod


# --- one process ----------------------------------------------------------------------------------------------------

def _child(ns, argv, cfg, mod) -> int:
    """One process: the levels as the arms of one comparison, timed under `ns._child`."""
    from workbench.ab import session
    from workbench.ab.planner import ArmSpec
    from workbench.ab.runner import Runner
    from workbench.opts.protocol import hook
    from workbench.step.models import load_config

    if cfg.out is None:
        raise WorkbenchError("--_child needs --out")
    mode, info = ns._child, {}

    def replan(comps, device):
        if mode == "nsys" and device.type != "cuda":
            raise WorkbenchError("--timing nsys needs a CUDA device")
        cmp = comps[0]
        layers = cmp.layers or load_config(cmp.model, None, None, cfg.step.experts).num_hidden_layers
        top = hook(mod, "dose_units")(layers, cfg.step.checkpointing)
        levels = dose_levels(top, ns.levels)
        arm = hook(mod, "DOSE")["arm"]
        cmp.arms = [ArmSpec(f"u{u}", {cfg.opt: arm}, options={cfg.opt: {"dose": u}}) for u in levels]
        cmp.baseline, cmp.optimized, cmp.explicit_arms = cmp.arms[0].label, cmp.arms[-1].label, True
        info.update(opt=cfg.opt, comparison=cmp.name, arms={s.label: u for s, u in zip(cmp.arms, levels)},
                    unit=hook(mod, "DOSE")["unit"], units_max=top, layers=layers, checkpointing=cfg.step.checkpointing,
                    timing=mode, trace=cfg.trace)
        return [cmp]

    class DoseRunner(Runner):
        def protocol(self):
            return dataclasses.replace(super().protocol(), instrument=mode)

    rc = session.run_planned(list(argv), cfg, prog="workbench.ab.dose", replan=replan, runner_cls=DoseRunner,
                              rep_verdict=False)
    if info and os.path.isdir(cfg.out):
        with open(os.path.join(cfg.out, PROCESS_FILE), "w", encoding="utf-8") as f:
            json.dump(info, f, indent=1)
    return rc


# --- the processes --------------------------------------------------------------------------------------------------

def _nsys_or_skip(modes: list[str], device_type: str) -> tuple[list[str], str | None]:
    from workbench.traces.capture import nsys_path

    if "nsys" not in modes:
        return modes, None
    nsys = nsys_path()
    why = ("no CUDA device" if device_type != "cuda" else None) or (None if nsys else "no nsys in $NSYS or on PATH")
    if why:
        progress(f"--timing nsys skipped: {why}")
        return [m for m in modes if m != "nsys"], None
    return modes, nsys


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ns, rest, modes, cfg, mod = _split(argv)
    if ns._child:
        return _child(ns, argv, cfg, mod)
    from workbench.ab.processes import run_child, without
    from workbench.measure.results import git_sha
    from workbench.step.models import resolve_device
    from workbench.traces.capture import nsys_command

    out = cfg.out or os.path.join("runs", time.strftime("dose_%Y%m%d_%H%M%S"))
    if os.path.isdir(out) and os.listdir(out) and not cfg.force:
        raise WorkbenchError(f"--out {out} holds files already; give a new or empty folder (or --force)")
    modes, nsys = _nsys_or_skip(modes, resolve_device(cfg.device).type)
    if not modes:
        raise WorkbenchError("no timing mode left to run")
    os.makedirs(out, exist_ok=True)
    base = without(rest, "--out", "--seed")
    traced_mode = "none" if "none" in modes else modes[0]
    record = {"command": " ".join(["python -m workbench.ab.dose", *argv]), "opt": cfg.opt, "timings": modes,
              "commit": git_sha(), "levels": ns.levels, "processes": [], "traced": None, "unit": None, "units": None}
    for k in range(ns.processes):
        for mode in modes[k % len(modes):] + modes[:k % len(modes)]:
            folder = f"{mode}/p{k:02d}"
            d = os.path.join(out, folder)
            os.makedirs(os.path.dirname(d), exist_ok=True)
            trace = ns.trace if (k == 0 and mode == traced_mode) else "none"
            child = [*base, "--seed", str(cfg.data.seed + k), "--out", d, "--levels", str(ns.levels), "--trace",
                     trace, "--_child", mode]
            cmd = ([sys.executable, "-m", "workbench.ab.dose", *child] if mode != "nsys"
                   else nsys_command(nsys, d + ".timing", child, module="workbench.ab.dose"))
            progress(f"process {k + 1}/{ns.processes} timing {mode}: seed {cfg.data.seed + k} -> {d}")
            rc, wall_s = run_child(cmd, d + ".log")
            if mode == "nsys":  # the capture's cost is what was measured; its report (GBs) is not kept
                for ext in (".nsys-rep", ".qdstrm"):
                    if os.path.exists(d + ".timing" + ext):
                        os.remove(d + ".timing" + ext)
            record["processes"].append({"timing": mode, "folder": folder, "seed": cfg.data.seed + k, "rc": rc,
                                        "wall_s": round(wall_s, 1), "trace": trace,
                                        "command": " ".join(cmd[1:])})
            progress(f"process {k + 1}/{ns.processes} timing {mode}: rc {rc}, {wall_s:.0f} s")
            info = os.path.join(d, PROCESS_FILE)
            if os.path.isfile(info):
                with open(info, encoding="utf-8") as f:
                    pi = json.load(f)
                record.update(unit=pi["unit"], units=sorted(pi["arms"].values()))
                if trace != "none" and rc == 0:
                    record["traced"] = folder
            with open(os.path.join(out, RUN_FILE), "w", encoding="utf-8") as f:
                json.dump(record, f, indent=1)
            if rc == 2:
                raise WorkbenchError(f"process {folder} refused its input (see {d}.log)")
    failed = [p for p in record["processes"] if p["rc"] != 0]
    print(f"{'complete' if not failed else 'INCOMPLETE'}: {len(record['processes']) - len(failed)}/"
          f"{len(record['processes'])} processes ran cleanly -> {out}; analyse: python -m workbench.savings.dose_fit {out}")
    emit_json({"out": out, **record})
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(run_main(main))
