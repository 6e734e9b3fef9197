"""The A/B runner's flags are frozen here, and every one reaches the nsys child (a flag added to the CLI fails the
freeze test until it is listed; a flag the child would not get fails the second)."""
import json

from workbench import ab
from workbench.ab import cli, passes

FLAGS = {"opt", "model", "layers", "tokens", "attn", "experts", "lengths", "batches", "steps", "warmup", "warmup_max",
         "settle_pct", "reps", "target_ci", "budget_s", "max_reps", "processes", "sweep", "nvtx_cost", "only", "headline", "device",
         "trace", "out", "force", "arms", "aa", "dtype", "precision", "seed", "lora_rank", "lr", "no_checkpointing",
         "cross_check", "_capture", "_config"}

SET_BY_THE_CHILD = {"opt", "model", "layers", "tokens", "attn", "device", "trace", "out", "sweep", "only", "arms", "aa",
                    "nvtx_cost", "_capture", "_config"}
"""What the child sets itself: the comparison's shape, this arm, no trace, its own folder."""


def test_the_flag_set_is_frozen():
    from workbench.ab.config import FIELDS
    assert set(FIELDS) == FLAGS  # the config's fields are the CLI's flags
    assert set(cli.parse_args([]).as_dict()) == FLAGS


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
        assert getattr(child, k) == getattr(a, k), k  # --lr among them: a capture once ran at the default rate
    assert (child.model, child.layers, child.tokens, child.attn, child.trace, child._capture) == \
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
