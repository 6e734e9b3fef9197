"""The workbench's one console script: `workbench COMMAND [ARGS...]`.

Each command is a module's own command line, run as `python -m MODULE ARGS...` would run it (its `--help` explains
it); `python -m workbench COMMAND` is the same."""
from __future__ import annotations

import runpy
import sys

COMMANDS = {
    "ab": ("workbench.ab", "A/B-test optimization arms on one training step (the main command)"),
    "run": ("workbench.run", "one instrumented training run"),
    "fidelity": ("workbench.fidelity", "hold the timed step against a real transformers Trainer step"),
    "campaign": ("workbench.campaign", "a suite of A/B jobs into one folder"),
    "report": ("workbench.report", "a run folder's state and one table per comparison"),
    "analysis": ("workbench.analysis", "the run folders found under a profiles root, and those left out"),
    "readme_results": ("workbench.report.readme", "regenerate or --check README.md's results and profiles/RESULTS.md"),
    "figures": ("workbench.report.figures", "the rows the headline figure draws (and the PNG)"),
    "notebook_pages": ("workbench.report.notebook_pages", "render the notebooks' pages and report their heights"),
    "verdicts": ("workbench.savings.verdicts_cli", "judge the savings models of run folders"),
    "straggler": ("workbench.savings.straggler", "the straggler term of a 2-GPU run against its 1-GPU run"),
    "dose": ("workbench.ab.dose", "a savings model's input measured as a dose-response"),
    "dose_fit": ("workbench.savings.dose_fit", "analyse a dose folder: slope, theta, decision"),
    "dose_merge": ("workbench.ab.dose_merge", "fold later dose processes into one dose folder"),
    "processes": ("workbench.ab.processes", "summarise an interrupted --processes run from its folder"),
    "processes_merge": ("workbench.ab.processes_merge", "fold later --processes runs into one folder"),
    "between_runs": ("workbench.analysis.between_runs", "the between-runs spread of repeated --processes runs"),
    "gate": ("workbench.compare.gate", "the regression gate: a run against a baseline and its A/A runs"),
    "diff": ("workbench.compare.rundiff_cli", "what changed between two runs of one comparison and arm"),
    "power": ("workbench.measure.power", "the protocol's false-verdict rate and power, by simulation"),
    "levers": ("workbench.traces.lever_advice", "each step component and the lever that would move it"),
    "lever_path": ("workbench.ab.lever_path", "the levers' path of a run: step time, speedup, MFU per point"),
    "kineto_export": ("workbench.traces.kineto_export", "saved events as a Kineto trace (HTA, TensorBoard, Perfetto)"),
    "trace_parity": ("workbench.traces.parity", "one step traced by torch.profiler and by nsys, compared"),
    "bandwidth": ("workbench.instrument.bandwidth", "pinned host-device copy bandwidth per rank"),
    "witness": ("workbench.bench.witness", "a sync witness: the dispatch counter against CUDA's sync debug mode"),
    "equiv_bf16": ("workbench.ab.distributed.equiv_bf16", "FSDP2 against one process at bf16 (under torchrun)"),
    "trace_classes": ("workbench.ab.distributed.trace_classes", "a traced step's per-class totals (under torchrun)"),
    "backward_ops": ("workbench.ab.distributed.backward_ops", "the expert-gradient ops of a backward (under torchrun)"),
}
"""command -> (module run as `python -m`, one line of what it does)."""


def usage() -> str:
    width = max(map(len, COMMANDS))
    rows = "\n".join(f"  {name:<{width}}  {what}" for name, (_module, what) in COMMANDS.items())
    return (f"usage: workbench COMMAND [ARGS...]   (or: python -m workbench COMMAND ...)\n\n"
            "Profile a LoRA fine-tuning step, A/B-test optimizations of it, and judge the models of what they save.\n\n"
            f"commands:\n{rows}\n\n`workbench COMMAND --help` explains a command.")


def main(argv: list[str] | None = None) -> int:
    from workbench.cli import run_main
    return run_main(_main, sys.argv[1:] if argv is None else list(argv))


def _main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    name = argv[0].replace("-", "_")
    if name not in COMMANDS:
        print(f"error: unknown command {argv[0]!r}; one of: {', '.join(COMMANDS)} (see workbench --help)",
              file=sys.stderr)
        return 2
    module = COMMANDS[name][0]
    sys.argv = [f"workbench {name}", *argv[1:]]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return 0
