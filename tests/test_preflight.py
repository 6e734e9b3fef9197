"""Issue 24, item 1: every mistake that needs no model is refused before a model is built or a folder written.

The checks are called directly (`preflight.check_run`, `preflight.check_model`, `check_out_dir`) and through the CLI
in-process (`run_main(ab.main, argv)`), asserting exit status 2, exactly one stderr line, no traceback and nothing
created in the working directory. Each refusal has its negative control (the same flags, one changed, pass)."""
from __future__ import annotations

import dataclasses
import os
import types

import pytest
import torch

from workbench import ab
from workbench.step import memory_estimate as me
from workbench.ab import preflight
from workbench.ab.ab_config import ABConfig
from workbench.cli import run_main
from workbench.errors import WorkbenchError
from workbench.step.models import load_config
from workbench.measure.results import check_out_dir

CPU = torch.device("cpu")
GPU = types.SimpleNamespace(type="cuda")  # check_run reads only device.type
RUN = dict(steps=1, warmup=1, warmup_max=2, batches=2)


def _cfg(**kw) -> ABConfig:
    return ABConfig.from_flat({**RUN, "reps": 8, **kw})


def _one_line(fn, *args, match, **kw) -> str:
    with pytest.raises(WorkbenchError, match=match) as e:
        fn(*args, **kw)
    assert "\n" not in str(e.value)
    return str(e.value)


def _cli(capsys, tmp_path, monkeypatch, argv):
    """`python -m workbench.ab ARGV` in-process in an empty working directory: (rc, stderr lines, cwd entries)."""
    monkeypatch.chdir(tmp_path)
    rc = run_main(ab.main, ["--device", "cpu", *argv])
    out, err = capsys.readouterr()
    return rc, [ln for ln in err.splitlines() if ln.strip()], os.listdir(tmp_path)


def _refused(capsys, tmp_path, monkeypatch, argv, *words):
    rc, lines, made = _cli(capsys, tmp_path, monkeypatch, argv)
    assert rc == 2 and len(lines) == 1, lines
    assert lines[0].startswith("error: ") and all(w in lines[0] for w in words), lines[0]
    assert "Traceback" not in lines[0] and made == []


# --- the flags against the device (check_run) -------------------------------------------------------------------

def test_fp16_on_a_cpu_is_refused_bf16_is_not():
    _one_line(preflight.check_run, _cfg(dtype="fp16"), CPU, match="fp16 needs a CUDA device")
    preflight.check_run(_cfg(dtype="bf16"), CPU)


@pytest.mark.parametrize("attn", ["flash_attention_2", "flash_attention_3"])
def test_flash_attention_on_a_cpu_is_refused(attn):
    _one_line(preflight.check_run, _cfg(attn=attn), CPU, match=f"--attn {attn} needs a CUDA device")
    preflight.check_run(_cfg(attn="sdpa"), CPU)


def test_flash_attention_on_a_gpu_without_its_package_is_refused(monkeypatch):
    import transformers.utils as tu
    monkeypatch.setattr(tu, "is_flash_attn_2_available", lambda: False)
    _one_line(preflight.check_run, _cfg(attn="flash_attention_2"), GPU, match="package is not installed")
    monkeypatch.setattr(tu, "is_flash_attn_2_available", lambda: True)
    preflight.check_run(_cfg(attn="flash_attention_2"), GPU)


def test_a_gpu_protocol_that_can_never_give_a_verdict_is_refused():
    """--reps 1 on a GPU: no verdict is possible (4 reps at least). Allowed with reps added by --target-ci, or when
    the run is for traces or sync counts (with a note); never refused on a CPU (no timing verdict there anyway)."""
    _one_line(preflight.check_run, _cfg(reps=1), GPU, match="--reps 1 on a GPU can never give a verdict")
    _one_line(preflight.check_run, _cfg(reps=3), GPU, match="--reps 3")
    preflight.check_run(_cfg(reps=4), GPU)
    preflight.check_run(_cfg(reps=1, target_ci_pct=2.0), GPU)
    preflight.check_run(_cfg(reps=1), CPU)
    notes = []
    preflight.check_run(_cfg(reps=1, trace="torch"), GPU, note=notes.append)
    preflight.check_run(_cfg(reps=1, cross_check=True), GPU, note=notes.append)
    assert len(notes) == 2 and "--trace" in notes[0] and "--cross-check" in notes[1]



def test_the_reps_check_skips_an_nsys_capture_child_and_a_process_unit_run():
    """An nsys capture's child (`_capture`: its parent was checked; the child times the captured steps only) and a
    run whose unit is the process (`workbench.ab.dose`: rep_verdict=False) are not refused for few reps; the same
    config as a plain run is (the negative control)."""
    _one_line(preflight.check_run, _cfg(reps=1), GPU, match="--reps 1 on a GPU can never give a verdict")
    preflight.check_run(_cfg(reps=1, _capture="moe=eager"), GPU)
    preflight.check_run(_cfg(reps=2), GPU, rep_verdict=False)


def test_a_processes_child_carries_process_unit_which_lifts_the_reps_floor(tmp_path, monkeypatch):
    """`--processes K` (workbench.ab.processes): each child gets `--_process_unit` (the process, not the rep, is its
    claim's unit), so `--reps 3` on a (mocked) CUDA device passes in the child; the same command without the flag is
    refused (the negative control), and a flag given to no child would leave every held-out process refused."""
    import sys

    from workbench.ab import processes
    from workbench.ab.cli import parse_args
    _one_line(preflight.check_run, parse_args(["--opt", "packing", "--reps", "3"]), GPU, match="--reps 3 on a GPU")
    preflight.check_run(parse_args(["--opt", "packing", "--reps", "3", "--_process_unit"]), GPU)
    assert parse_args(["--opt", "packing"])._process_unit is False

    seen = []
    monkeypatch.setattr(processes, "run_child", lambda cmd, log: (seen.append(cmd), (0, 0.0))[1])
    monkeypatch.setattr(processes, "emit_json", lambda *a, **k: None)
    assert processes.main(["--opt", "packing", "--reps", "3", "--processes", "2", "--out", str(tmp_path / "c")]) == 0
    assert len(seen) == 2 and all(c.count("--_process_unit") == 1 for c in seen)
    for cmd in seen:  # what the child parses and checks, as `python -m workbench.ab` would
        assert cmd[:3] == [sys.executable, "-m", "workbench.ab"]
        child = parse_args(cmd[3:])
        assert child._process_unit is True and child.reps == 3
        preflight.check_run(child, GPU)


@pytest.mark.parametrize("kw, match", [
    (dict(reps=3, max_reps=1, target_ci_pct=5.0), "--max-reps 1 is below --reps 3"),
    (dict(warmup=5, warmup_max=2), "--warmup-max 2 is below --warmup 5"),
    (dict(out=""), "--out is empty"),
    (dict(out="   "), "--out is empty"),
])
def test_contradictory_flags_are_refused_by_the_config(kw, match):
    _one_line(lambda: ABConfig.from_flat(kw), match=match)


def test_consistent_flags_pass_the_config():
    ABConfig(reps=3, max_reps=3, target_ci_pct=5.0)
    ABConfig(warmup=2, warmup_max=2)


@pytest.mark.parametrize("out", ["/proc/x", "/proc/self/x/y", "/sys/x"])
def test_out_on_a_special_file_system_is_refused_and_nothing_created(out):
    _one_line(check_out_dir, out, match="cannot be created")
    assert not os.path.exists(out)


def test_an_unwritable_default_folder_is_named_as_the_default_not_as_out(capsys, tmp_path, monkeypatch):
    """Issue 38, item 11: with no --out, the line names the default runs/<run_id> and says to give --out."""
    (tmp_path / "runs").write_text("")  # a file where the runs/ folder would go
    rc, lines, made = _cli(capsys, tmp_path, monkeypatch, ["--opt", "packing"])
    assert rc == 2 and len(lines) == 1 and made == ["runs"], lines
    assert "the default output folder runs/" in lines[0] and "give --out DIR" in lines[0]
    assert "error: --out" not in lines[0]
    _one_line(check_out_dir, str(tmp_path / "runs" / "x"), match="^--out .* name another folder$")  # given: as was


def test_out_in_a_writable_folder_passes(tmp_path):
    check_out_dir(str(tmp_path / "new" / "run"))
    assert os.listdir(tmp_path) == []


# --- the model config (check_model) -----------------------------------------------------------------------------

def _cmp(model="tiny-qwen3", tokens=256, layers=None, attn=None, name="packing"):
    return types.SimpleNamespace(model=model, tokens=tokens, layers=layers, attn=attn, name=name)


def test_experts_on_a_dense_model_is_refused():
    dense, moe = load_config("tiny-qwen3"), load_config("tiny-qwen3-moe")
    _one_line(preflight.check_model, _cfg(opt="packing", experts="eager"), CPU, dense, [_cmp()],
              match="--experts eager applies to MoE models")
    _one_line(preflight.check_model, _cfg(opt="all", model="tiny-qwen3", experts="eager"), CPU, dense, [_cmp()],
              match="dense qwen3 model")
    preflight.check_model(_cfg(opt="moe", experts="eager"), CPU, moe, [_cmp("tiny-qwen3-moe")])
    # --opt all: the packing comparison's default model is dense, the others MoE: --experts is for those
    preflight.check_model(_cfg(opt="all", experts="eager"), CPU, dense, [_cmp()])


def test_a_run_that_cannot_fit_host_ram_is_refused_unless_forced(monkeypatch):
    monkeypatch.setattr(me, "host_ram_bytes", lambda: 8 * me.GIB)
    cfg = load_config("tiny-qwen3")
    msg = _one_line(preflight.check_model, _cfg(opt="packing"), CPU, cfg, [_cmp(tokens=50_000_000)],
                    match="needs at least")
    # the loss path alone: 50e6 tokens x 256 vocab x 12 bytes (memory_estimate.LOSS_BYTES_PER_LOGIT) = 143.1 GiB
    assert "loss path 143.1" in msg and "8.0 GiB of host RAM" in msg and "--force" in msg
    preflight.check_model(_cfg(opt="packing", force=True), CPU, cfg, [_cmp(tokens=50_000_000)])
    preflight.check_model(_cfg(opt="packing"), CPU, cfg, [_cmp(tokens=256)])


def test_eager_attention_counts_its_t_by_t_scores(monkeypatch):
    """T = 65536 on a tiny model: negligible without eager attention; eager's 4 heads x T^2 x 12 bytes + the fp32
    mask = 208 GiB is refused against 128 GiB."""
    monkeypatch.setattr(me, "host_ram_bytes", lambda: 128 * me.GIB)
    cfg = load_config("tiny-qwen3")
    preflight.check_model(_cfg(opt="packing"), CPU, cfg, [_cmp(tokens=65536, attn="sdpa")])
    msg = _one_line(preflight.check_model, _cfg(opt="packing"), CPU, cfg, [_cmp(tokens=65536, attn="eager")],
                    match="the larger of loss path 0.2 and eager attention 208.0")
    assert "128.0 GiB" in msg


def test_the_cli_refuses_a_huge_token_budget_before_anything(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(me, "host_ram_bytes", lambda: 8 * me.GIB)
    _refused(capsys, tmp_path, monkeypatch, ["--opt", "packing", "--tokens", "50000000"], "needs at least",
             "host RAM", "--force")


@pytest.mark.parametrize("argv, words", [
    (["--opt", "packing", "--lengths", "fixed:100000"], ["100000 tokens", "token budget (256)"]),
    (["--opt", "packing", "--attn", "flash_attention_2"], ["needs a CUDA device"]),
    (["--opt", "packing", "--experts", "eager"], ["applies to MoE models"]),
    (["--dtype", "fp16"], ["fp16 needs a CUDA device"]),
    (["--out", "/proc/x"], ["cannot be created"]),
    (["--out", ""], ["--out is empty"]),
    (["--reps", "3", "--max-reps", "1", "--target-ci", "5"], ["--max-reps 1 is below --reps 3"]),
    (["--warmup", "5", "--warmup-max", "2"], ["--warmup-max 2 is below --warmup 5"]),
])
def test_the_cli_refuses_each_mistake_with_one_line_and_no_folder(capsys, tmp_path, monkeypatch, argv, words):
    _refused(capsys, tmp_path, monkeypatch, argv, *words)


# --- the estimate -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("preset", ["tiny-llama", "tiny-qwen3", "tiny-qwen3-moe", "tiny-gpt-oss"])
def test_weight_count_is_the_built_models_less_its_norms_and_biases(preset):
    """Exact: the estimate's parameters are the built model's, less the norms, sinks and biases (GPT-OSS's experts'
    are 2-D) it leaves out. Catches a family whose experts, head or tied embedding are counted wrong."""
    from transformers import AutoModelForCausalLM
    cfg = load_config(preset)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    matrices = sum(p.numel() for n, p in model.named_parameters() if p.dim() >= 2 and "bias" not in n)
    assert me.weight_params(cfg) == matrices


def test_estimate_terms_are_exact_for_a_small_shape():
    cfg = load_config("tiny-qwen3")  # L 2, hidden 64, 4 heads x 16, 2 kv heads, MLP 128, vocab 256
    e = me.estimate(cfg, 1000, dtype_bytes=2)
    assert e.activations_bytes == 2 * 1000 * 64 * 2
    assert e.logits_bytes == 1000 * 256 * 12
    assert e.eager_scores_bytes == 0
    lora = 16 * 2 * ((64 + 64) + 2 * (64 + 32) + (64 + 64) + 3 * (64 + 128))  # r x layers x (in + out) per linear
    assert me.lora_params(cfg) == lora and e.lora_state_bytes == 4 * lora * 4  # 4 fp32 copies
    full = me.estimate(cfg, 1000, dtype_bytes=4, checkpointing=False, eager_attention=True)
    # no checkpointing: the counted saved bytes per token of a dense layer (memory_estimate.SAVED_BYTES_PER_TOKEN),
    # at fp32 twice the counted bf16 figure: (15 x 64 + 10.75 x 64 + 0.5 x 32 + 8.75 x 128) x 4 / 2 per layer
    assert full.activations_bytes == int(1000 * (15 * 64 + 10.75 * 64 + 0.5 * 32 + 8.75 * 128) * 2) * 2
    assert full.logits_bytes == 1000 * 256 * 12 and full.eager_scores_bytes == (4 * 12 + 4) * 1000 * 1000
    terms = dataclasses.asdict(full)  # the loss path and eager attention peak at different moments: the larger
    assert full.total_bytes == sum(terms.values()) - min(full.logits_bytes, full.eager_scores_bytes)
    assert me.estimate(cfg, 1000, weight_shards=2).weights_bytes == me.weight_params(cfg) * 4 // 2  # FSDP2, 2 ranks


# --- the help and the library modules' command lines ---------------------

def test_help_shows_every_default(capsys):
    from workbench.ab.cli import parse_args
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    for flag in ("--device", "--lora-rank", "--lr"):
        opt = out[out.rindex(f"{flag} "):]
        assert "(default: " in opt[:200], flag


@pytest.mark.parametrize("module", ["levers", "report", "analysis", "figures"])
def test_library_modules_answer_help(capsys, module):
    import importlib
    mains = {"levers": "workbench.traces.lever_advice", "report": "workbench.report.__main__",
             "analysis": "workbench.analysis.__main__", "figures": "workbench.report.figures"}
    with pytest.raises(SystemExit) as e:
        importlib.import_module(mains[module]).main(["--help"])
    assert e.value.code == 0 and f"workbench {module}" in capsys.readouterr().out


def test_levers_prints_every_lever(capsys):
    from workbench.traces import lever_advice as levers
    levers_main = levers.main
    assert levers_main([]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == len(levers.LEVERS) and all(line.split()[0] in levers.LEVERS for line in out)


def test_report_prints_a_folders_state_and_refuses_a_non_run(capsys, tmp_path):
    from workbench.report.__main__ import main as report_main
    from workbench.measure.results import RunWriter
    w = RunWriter(str(tmp_path / "run"), "r1", argv=["python", "-m", "workbench.ab"])
    w.write_summary({"comparisons": [{"name": "packing", "status": "failed", "errors": ["boom"]}]})
    w.finish("failed", failures=["packing: boom"])
    assert report_main([str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{tmp_path / 'run'}: failed (failed: packing: boom)") and "packing: failed: boom" in out
    assert run_main(report_main, [str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"error: {tmp_path} is not a run folder (no results.csv)"


def test_analysis_lists_kept_and_left_out_folders(capsys, tmp_path):
    from workbench.analysis.__main__ import main as analysis_main
    from workbench.measure.results import RunWriter
    RunWriter(str(tmp_path / "cpu_run"), "r1").finish("complete")
    assert analysis_main([str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("0 run folders kept") and out[1] == "1 left out:" and "cpu_run" in out[2]


def test_help_times_come_from_the_measured_source(capsys, monkeypatch):
    """Issue 38, item 6: the time `--help` quotes is profiles/timings.json's (seconds, machine, date), no guess;
    per-device defaults are spelled out instead of `(default: None)`."""
    import json

    from workbench.ab import cli
    from workbench.paths import REPO_ROOT
    with open(os.path.join(REPO_ROOT, cli.TIMINGS)) as f:
        t = json.load(f)["cpu_main_command"]
    monkeypatch.setenv("COLUMNS", "400")
    with pytest.raises(SystemExit):
        cli.parse_args(["--help"])
    h = capsys.readouterr().out
    assert f"{t['wall_s']:g} s on " in h and f"measured {t['date']}" in h and cli.TIMINGS in h
    assert "a few minutes" not in h and "(default: None)" not in h
    assert f"(per device: CPU {cli.CPU_DEFAULTS['_run']['reps']}, GPU {cli.GPU_DEFAULTS['_run']['reps']})" in h


def test_report_lists_what_an_interrupted_comparison_measured(capsys, tmp_path):
    """Issue 38, item 11: after Ctrl-C, a comparison with timed steps in results.csv but no summary entry is listed
    (its arms' step counts and reps), not left out; a summarized one is not listed twice."""
    from workbench.report.__main__ import main as report_main
    from workbench.measure.results import RunWriter
    w = RunWriter(str(tmp_path / "run"), "r1", argv=["python", "-m", "workbench.ab"])
    for rep in range(2):
        for arm in ("rebuild", "cached"):
            w.add("packing", arm, "step_ms", 10.0, "ms", rep=rep, step=0, batch=0)
            w.add("offload", arm, "step_ms", 10.0, "ms", rep=rep, step=0, batch=0)
    w.write_summary({"comparisons": [{"name": "offload", "status": "failed", "errors": ["boom"]}]})
    w.finish("incomplete", reason="interrupted (Ctrl-C)")
    assert report_main([str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "packing: stopped before it finished (no table): results.csv holds timed steps of rebuild 2, cached 2 " \
           "over 2 rep(s)" in out
    assert "offload: stopped" not in out
