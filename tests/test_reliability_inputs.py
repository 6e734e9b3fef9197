"""Bad user input ends as one `WorkbenchError` line naming the problem and the fix, never a traceback.

Library checks are called directly (`load_config`, `check_checkpoint`, `check_attn`, `check_experts`,
`check_lengths`); the CLI ones run `python -m workbench.run` (in-process, conftest.run_cli) and assert exit status 2, exactly one
non-empty stderr line, no traceback, and no "building" progress line (the argument is refused before a model is built).
"""
import argparse
import json
import os
import subprocess
import sys

import pytest

from conftest import run_cli
import workbench.opts.moe  # noqa: F401 - registers the wb_* experts names
from workbench.step.data import check_lengths, lengths_arg, make_batches
from workbench.errors import WorkbenchError
from workbench.step.models import (EXPERTS_CHOICES, build_model, check_attn, check_checkpoint, check_experts,
                              load_config)

SUPPORTED = "llama, qwen3, qwen3_moe, gpt_oss"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _raises(fn, *args, match, **kwargs) -> str:
    with pytest.raises(WorkbenchError, match=match) as e:
        fn(*args, **kwargs)
    msg = str(e.value)
    assert "\n" not in msg, msg
    return msg


def _llama_config_dir(path):
    from transformers import LlamaConfig
    LlamaConfig(num_hidden_layers=1, hidden_size=32, intermediate_size=64, num_attention_heads=2,
                num_key_value_heads=1, vocab_size=64).save_pretrained(path)
    return path


# --- checkpoint directories (direct calls) ----------------------------------------------------------------------

def test_nonexistent_checkpoint_dir(tmp_path):
    msg = _raises(load_config, str(tmp_path / "missing"), match="not found")
    assert "does not exist" in msg and "preset" in msg


def test_empty_checkpoint_dir_is_not_found(tmp_path):
    msg = _raises(load_config, str(tmp_path), match="is a directory but not a Hugging Face checkpoint")
    assert "no config.json" in msg and "not found" not in msg  # it exists:, item 11


def test_corrupted_config_json(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "llama", "hidden_size": ')
    msg = _raises(load_config, str(tmp_path), match="not valid JSON")
    assert "corrupted" in msg and "re-download" in msg


def test_config_json_without_model_type(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    msg = _raises(load_config, str(tmp_path), match="no model_type")
    assert SUPPORTED in msg


def test_unknown_model_type(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    msg = _raises(load_config, str(tmp_path), match="unsupported model_type 'bert'")
    assert SUPPORTED in msg


def test_config_without_weights(tmp_path):
    d = str(_llama_config_dir(tmp_path / "ckpt"))
    msg = _raises(check_checkpoint, d, match="no weights")
    assert "safetensors" in msg and "preset" in msg and "random weights" in msg
    _raises(load_config, d, match="no weights")
    _raises(build_model, d, match="no weights")  # refused by load_config: no model is built


def test_checkpoint_check_accepts_a_directory_with_weights(tmp_path):
    d = _llama_config_dir(tmp_path / "ckpt")
    header = b'{"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}'
    (d / "model-00001-of-00002.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + bytes(8))
    assert check_checkpoint(str(d))["model_type"] == "llama"  # a whole file: its header against its size
    (d / "model-00001-of-00002.safetensors").write_bytes(b"")  # an empty one is cut short
    with pytest.raises(WorkbenchError, match="not a whole safetensors file"):
        check_checkpoint(str(d))


def test_presets_are_unchanged_by_the_checks():
    cfg = load_config("tiny-qwen3-moe", layers=1, attn="eager", experts_implementation="eager")
    assert cfg.model_type == "qwen3_moe" and cfg.num_hidden_layers == 1
    assert cfg._attn_implementation == "eager" and cfg._experts_implementation == "eager"


# --- attention and experts implementations ----------------------------------------------------------------------

def test_unknown_experts_implementation():
    msg = _raises(check_experts, "bogus", match="unknown experts implementation 'bogus'; choose from")
    assert all(n in msg for n in EXPERTS_CHOICES)
    _raises(load_config, "tiny-qwen3-moe", experts_implementation="bogus", match="unknown experts implementation")


def test_known_and_registered_experts_implementations():
    from transformers.integrations.moe import ExpertsInterface
    for name in EXPERTS_CHOICES + ("wb_sort_bincount", "wb_grouped_dense"):
        check_experts(name)
    ExpertsInterface.register("test_reliability_experts", lambda *a, **k: None)
    try:
        check_experts("test_reliability_experts")
    finally:
        ExpertsInterface._global_mapping.pop("test_reliability_experts", None)


def test_workbench_experts_name_is_registered_on_use():
    from transformers.integrations.moe import ExpertsInterface
    cfg = load_config("tiny-qwen3-moe", experts_implementation="wb_sort_bincount")
    assert cfg._experts_implementation == "wb_sort_bincount"
    assert "wb_sort_bincount" in list(ExpertsInterface())


def test_unknown_attention_implementation():
    msg = _raises(check_attn, "bogus", match="unknown attention implementation 'bogus'; choose from")
    assert "sdpa" in msg and "flash_attention_2" in msg
    _raises(load_config, "tiny-llama", attn="bogus", match="unknown attention implementation")
    for name in ("sdpa", "eager", "flex_attention", "flash_attention_2", "flash_attention_3"):
        check_attn(name)


# --- --lengths (direct calls) ------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec, match", [
    ("lognormal:x:1", "lognormal mu must be a number"),
    ("lognormal:1:nan", "finite"),
    ("fixed:0", "fixed length must be positive"),
    ("uniform:5:2", "LO <= HI"),
    ("bogus", "bad length source 'bogus'"),
    ("fixed:", "bad length source"),
    ("json:/nonexistent", "length file not found"),
])
def test_malformed_lengths(spec, match):
    msg = _raises(check_lengths, spec, match=match)
    assert "use " in msg or "needs" in msg  # the fix: the form to use
    with pytest.raises(argparse.ArgumentTypeError, match=match):
        lengths_arg(spec)


def test_valid_lengths_are_returned():
    assert check_lengths("lognormal:5.5:0.8:16") == "lognormal:5.5:0.8:16"
    assert lengths_arg("uniform:2:9") == "uniform:2:9"


def test_lognormal_with_a_huge_mu_is_clamped_not_an_overflow():
    batches = make_batches("lognormal:1000:0", 64, 2, 100)
    assert all(b.tokens == 64 for b in batches)


# --- the CLI (in-process) ----------------------------------------------------------------------------------------

def _run(*args):
    """`python -m workbench.run` in-process (tests/test_run_cli.py runs it in a fresh process)."""
    return run_cli("workbench.run", args)


def _one_error_line(r) -> str:
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr  # in particular no "building ..." line: refused at parse time
    assert lines[0].startswith("error: ")
    assert r.stdout == ""
    return lines[0]


@pytest.mark.parametrize("args, match", [
    (["--attn", "bogus"], "unknown attention implementation 'bogus'; choose from"),
    (["--experts", "bogus"], "unknown experts implementation 'bogus'; choose from"),
    (["--lengths", "uniform:5:2"], "argument --lengths: bad length source 'uniform:5:2'"),
    (["--lengths", "json:/nonexistent"], "argument --lengths: length file not found"),
])
def test_cli_bad_argument_is_one_line(args, match):
    assert match in _one_error_line(_run(*args))


def test_cli_checkpoint_without_weights_is_one_line(tmp_path):
    d = _llama_config_dir(tmp_path / "ckpt")
    assert "no weights" in _one_error_line(_run("--model", str(d)))


def test_cli_help_lists_presets_and_lengths_forms():
    from workbench.step.models import PRESETS
    r = _run("--help")
    assert r.returncode == 0, r.stderr
    assert all(name in r.stdout for name in PRESETS)
    assert "lognormal:MU:SIGMA[:MIN]" in r.stdout and "jsonl:PATH:TOKENIZER_DIR" in r.stdout
    assert "(default: 1024)" in r.stdout  # ArgumentDefaultsHelpFormatter


# --- `python -m workbench.ab`: the flags against the model's own shape, before torch ----------

AB_BAD = [
    (["--opt", "moe", "--model", "tiny-qwen3"], "--opt moe applies to qwen3_moe, gpt_oss models; tiny-qwen3 is a qwen3"),
    (["--opt", "expert_lora", "--model", "tiny-llama"], "--opt expert_lora applies to qwen3_moe, gpt_oss"),
    (["--opt", "packing", "--model", "tiny-qwen3", "--layers", "1000"], "--layers 1000: tiny-qwen3 has 2 layers"),
    (["--opt", "packing", "--device", "cpu", "--sweep", "layers=1,4"], "--layers 4: tiny-qwen3 has 2 layers"),
    (["--opt", "packing", "--device", "cpu", "--lora-rank", "100000"], "--lora-rank 100000 is above tiny-qwen3's "
                                                                        "hidden size 64"),
    (["--opt", "packing", "--arms", "rebuild,cached,cached"], "--arms names cached twice"),
    (["--opt", "packing", "--seed", "-1"], "--seed must be >= 0"),
    (["--opt", "bogus"], "invalid choice: 'bogus'"),
]
AB_GOOD = [  # the negative controls: one flag changed, each passes the early checks
    ["--opt", "moe", "--model", "tiny-qwen3-moe"],
    ["--opt", "all", "--model", "tiny-qwen3"],  # --opt all leaves moe out on a dense model and says so (the runner)
    ["--opt", "packing", "--model", "tiny-qwen3", "--layers", "2"],
    ["--opt", "packing", "--model", "tiny-qwen3", "--layers", "3", "--force"],  # the stated way to stack more
    ["--opt", "packing", "--device", "cpu", "--lora-rank", "64"],
    ["--opt", "packing", "--arms", "rebuild,rebuild"],  # the A/A
    ["--opt", "packing", "--seed", "0"],
]


def test_ab_refuses_bad_shapes_in_one_line_before_importing_torch():
    """Each refusal in a fresh process that never imports torch (so it answers in well under a second, against
    3-7 s with the import), one `error:` line, rc 2; the controls pass the same checks."""
    code = ("import json, sys\n"
            "from workbench.ab import preflight\n"
            "from workbench.ab.cli import parse_args\n"
            "from workbench.errors import WorkbenchError\n"
            "out = []\n"
            "for argv in json.loads(sys.argv[1]):\n"
            "    try:\n"
            "        preflight.check_early(parse_args(argv)); out.append(None)\n"
            "    except WorkbenchError as e:\n"
            "        out.append(str(e))\n"
            "print(json.dumps({'errors': out, 'torch': 'torch' in sys.modules}))\n")
    argvs = [a for a, _ in AB_BAD] + AB_GOOD
    r = subprocess.run([sys.executable, "-c", code, json.dumps(argvs)], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": ROOT})
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.splitlines()[-1])
    assert got["torch"] is False
    for (argv, match), err in zip(AB_BAD, got["errors"]):
        assert err is not None and match in err and "\n" not in err, (argv, err)
    assert got["errors"][len(AB_BAD):] == [None] * len(AB_GOOD)


@pytest.mark.parametrize("argv, match", AB_BAD[:3])
def test_ab_cli_refuses_them_once_with_no_folder(tmp_path, argv, match):
    """The whole CLI (`python -m workbench.ab`, in-process): rc 2, one line, the reason once, no folder."""
    r = run_cli("workbench.ab", [*argv, "--out", str(tmp_path / "x")])
    assert match in _one_error_line(r)
    assert not (tmp_path / "x").exists()


def test_the_planner_checks_the_device_default_model_too():
    """With --device auto the default model is known only once torch picked the device: the planner runs the same
    check before anything is built (a CPU here: tiny-qwen3 for --opt packing)."""
    import torch

    from workbench.ab.cli import CPU_DEFAULTS
    from workbench.ab.ab_config import ABConfig
    from workbench.ab.planner import plan
    cpu = torch.device("cpu")
    with pytest.raises(WorkbenchError, match="--layers 5: tiny-qwen3 has 2 layers"):
        plan(ABConfig.from_flat(dict(opt="packing", layers=5)).resolved(cpu, CPU_DEFAULTS["_run"]), cpu)
    assert [c.layers for c in plan(ABConfig.from_flat(dict(opt="packing", layers=2)).resolved(cpu, CPU_DEFAULTS["_run"]), cpu)] == [2]


def test_families_in_the_specs_are_the_moe_families():
    from workbench.opts import registry
    from workbench.step.presets import MOE_FAMILIES
    assert registry.families("moe") == registry.families("expert_lora") == MOE_FAMILIES
    assert registry.families("packing") is None


def test_own_shape_of_a_checkpoint_reads_its_config_json(tmp_path):
    from workbench.step.presets import own_shape
    d = _llama_config_dir(tmp_path / "ckpt")
    assert own_shape(str(d)) == {"family": "llama", "layers": 1, "hidden": 32}
    assert own_shape("tiny-qwen3-moe") == {"family": "qwen3_moe", "layers": 2, "hidden": 64}
    assert own_shape(str(tmp_path / "missing")) is None


@pytest.mark.parametrize("module, argv", [("workbench.run", ["--help"]), ("workbench.ab", ["--help"]),
                                          ("workbench.ab", ["--opt", "bogus"])])
def test_help_and_argument_errors_answer_without_torch(module, argv):
    """Issue 38, item 6 of its findings: --help and a bad flag answer before torch is imported (well under a
    second; 3.6-7 s with the import). In a fresh process: whether torch got imported, not a wall-clock bound."""
    code = ("import runpy, sys\n"
            f"sys.argv = [{module!r}, *{argv!r}]\n"
            "try:\n"
            f"    runpy.run_module({module!r}, run_name='__main__')\n"
            "except SystemExit as e:\n"
            "    rc = e.code\n"
            "print('torch' in sys.modules, rc, file=sys.stderr)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ,
                                                                                          "PYTHONPATH": ROOT})
    torch_loaded, rc = r.stderr.strip().splitlines()[-1].split()
    assert torch_loaded == "False" and rc == ("0" if argv == ["--help"] else "2"), r.stderr[-2000:]
