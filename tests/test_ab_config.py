"""The A/B runner's flags are frozen here, and every one reaches the nsys child (a flag added to the CLI fails the
freeze test until it is listed; a flag the child would not get fails the second)."""
import json

from workbench import ab
from workbench.ab import cli, passes

FLAGS = {"opt", "model", "layers", "tokens", "attn", "experts", "lengths", "batches", "steps", "warmup", "warmup_max",
         "settle_pct", "reps", "target_ci_pct", "budget_s", "budget_min", "max_reps", "processes", "process_seeds", "sweep", "nvtx_cost", "only",
         "headline", "device", "trace", "out", "force", "memory_limit_gib", "arms", "aa", "dtype", "precision", "seed", "lora_rank", "lr",
         "checkpointing", "cross_check", "_capture", "_config", "_process_unit"}
"""The config's leaves (flat), one per flag: `--no-checkpointing` sets `checkpointing`, `--target-ci` `target_ci_pct`."""
OPTIONS = {"--opt", "--model", "--layers", "--tokens", "--attn", "--experts", "--lengths", "--batches", "--steps",
           "--warmup", "--warmup-max", "--settle-pct", "--reps", "--target-ci", "--budget-s", "--budget-min", "--max-reps",
           "--processes", "--process-seeds", "--sweep", "--nvtx-cost", "--only", "--headline", "--device", "--trace", "--out", "--force",
           "--memory-limit-gib",
           "--arms", "--aa", "--dtype", "--precision", "--seed", "--lora-rank", "--lr", "--checkpointing",
           "--no-checkpointing", "--cross-check", "--no-cross-check", "--no-headline", "--no-aa", "--_capture",
           "--_config", "--_process_unit"}
"""The command line itself: frozen (a renamed destination keeps its flag; each switch has its --no- form, which the
gate writes for a recorded False)."""

SET_BY_THE_CHILD = {"opt", "model", "layers", "tokens", "attn", "device", "trace", "out", "sweep", "only", "arms", "aa",
                    "nvtx_cost", "_capture", "_config"}
"""What the child sets itself: the comparison's shape, this arm, no trace, its own folder."""


def test_the_flag_set_is_frozen():
    from workbench.ab.ab_config import FIELDS
    assert set(FIELDS) == FLAGS  # the config's leaves are the CLI's flags
    assert set(cli.parse_args([]).as_dict()) == FLAGS
    parser = cli.build_parser()
    assert {o for act in parser._actions for o in act.option_strings} - {"-h", "--help"} == OPTIONS
    assert {act.dest for act in parser._actions} - {"help"} == FLAGS


def test_the_config_is_a_tree_with_one_name_per_leaf():
    """ABConfig and RunConfig compose the same DataConfig and StepConfig; a leaf has one name in both."""
    import dataclasses
    from workbench.ab.ab_config import ABConfig
    from workbench.step.config import DataConfig, RunConfig, StepConfig, leaf_names
    for cls in (ABConfig, RunConfig):
        types = {f.name: f.type for f in dataclasses.fields(cls)}
        assert types["data"] in (DataConfig, "DataConfig") and types["step"] in (StepConfig, "StepConfig")
        assert len(set(leaf_names(cls))) == len(leaf_names(cls))  # no leaf name twice
    shared = set(leaf_names(ABConfig)) & set(leaf_names(RunConfig))
    assert {"checkpointing", "cross_check", "lengths", "seed", "lora_rank", "lr"} <= shared
    assert not {"no_checkpointing", "cross_check_syncs", "target_ci"} & (set(leaf_names(ABConfig))
                                                                       | set(leaf_names(RunConfig)))
    a = cli.parse_args(["--no-checkpointing", "--target-ci", "2", "--lengths", "fixed:64", "--tokens", "128"])
    assert (a.step.checkpointing, a.target_ci_pct, a.data.lengths, a.data.tokens) == (False, 2.0, "fixed:64", 128)
    assert ABConfig.from_json(json.dumps(a.as_dict())) == a  # flat JSON (meta.json, the nsys child) reads back
    assert cli.parse_args([]).step.checkpointing is True


def test_the_precision_is_resolved_once_by_the_config():
    import torch
    from workbench.ab.ab_config import ABConfig
    a = cli.parse_args([]).resolved(torch.device("cpu"), cli.CPU_DEFAULTS["_run"])
    assert a.step.precision == "fp32-adapters" and a.data.batches == cli.CPU_DEFAULTS["_run"]["batches"]
    b = ABConfig().resolved(torch.device("cuda"), cli.GPU_DEFAULTS["_run"])
    assert b.step.precision == "autocast"
    assert ABConfig.from_json(json.dumps(b.as_dict())).step.precision == "autocast"  # resolved, it stays so


def test_every_flag_reaches_the_nsys_child():
    argv = ["--opt", "packing", "--lr", "0.003", "--seed", "7", "--lora-rank", "8", "--steps", "3", "--warmup", "1",
            "--warmup-max", "4", "--batches", "3", "--reps", "5", "--lengths", "fixed:64", "--dtype", "bf16",
            "--precision", "bf16", "--experts", "eager", "--no-checkpointing", "--cross-check", "--settle-pct", "3",
            "--max-reps", "9", "--budget-s", "60", "--headline", "--force"]
    a = cli.parse_args(argv)
    cmp = ab.Comparison(opt="packing", model="qwen3-0.6b", layers=4, tokens=4096, attn="varlen",
                        arms=[ab.ArmSpec("cached", {"packing": "cached"})], baseline="cached", optimized=None)
    child_argv = passes.child_argv(a, cmp, cmp.arms[0], "/tmp/x.child")
    child = cli.parse_args(child_argv)
    for k in FLAGS - SET_BY_THE_CHILD:
        assert child.as_dict()[k] == a.as_dict()[k], k  # --lr among them: a capture once ran at the default rate
    assert (child.step.model, child.step.layers, child.data.tokens, child.step.attn, child.trace, child._capture) == \
        ("qwen3-0.6b", 4, 4096, "varlen", "none", "packing=cached")
    assert json.loads(child_argv[1])["lr"] == 0.003


def test_help_needs_no_torch():
    import subprocess
    import sys
    code = ("import sys, runpy; sys.argv = ['ab', '--help']\n"
            "try:\n    runpy.run_module('workbench.ab', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "assert 'torch' not in sys.modules, 'torch imported for --help'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "usage: python -m workbench.ab" in r.stdout
