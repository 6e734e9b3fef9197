"""Issue: "A run never loses or mixes results, and every mistake gets one clear line".

One test per line of the issue. Where the exit status and stderr are the contract, the CLI runs as a user runs
it: `python -m workbench.ab ...` in a fresh working directory, asserting exit status 2, exactly one non-empty stderr
line, no traceback, and nothing created. The bad-input commands run in this process (`conftest.run_cli`: runpy, the
module's own `__main__`, its exit status); the SIGTERM test below, and tests/test_ab.py's bad --opt, are true
subprocesses.
The runner's own behaviour (failed arms, crashes, --force, the default folder) is checked in-process with the fake
opt modules of tests/fixtures/fake_opts.py."""
from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys

import pytest
from fixtures.run_folders import run_ab as _run, snapshot as _snapshot

from conftest import run_cli
from workbench import ab

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {**os.environ, "PYTHONPATH": ROOT, "PYTHONUNBUFFERED": "1"}
FAST = ["--tokens", "64", "--steps", "1", "--warmup", "0", "--warmup-max", "0", "--device", "cpu", "--reps", "1"]



def _llama_config() -> dict:
    return {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
            "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 256}


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def _prior_run(d):
    """A folder holding an earlier run's files and a file of the user's."""
    _write(os.path.join(d, "results.csv"), "run_id,comparison,arm,metric,value\nOLD,packing,rebuild,step_ms,1.0\n")
    _write(os.path.join(d, "meta.json"), json.dumps({"run_id": "OLD", "status": "complete"}))
    _write(os.path.join(d, "summary.json"), json.dumps({"run_id": "OLD", "complete": True}))
    _write(os.path.join(d, "traces", "packing", "rebuild.events.parquet"), "old trace")
    _write(os.path.join(d, "notes.txt"), "my notes")


def _checkpoint(d, weights: str):
    """A checkpoint folder with a valid config.json and a model.safetensors that is random bytes ("random") or a
    real file cut in half ("truncated")."""
    _write(os.path.join(d, "config.json"), json.dumps(_llama_config()))
    path = os.path.join(d, "model.safetensors")
    if weights == "random":
        with open(path, "wb") as f:
            f.write(os.urandom(4096))
        return
    import torch
    from safetensors.torch import save_file
    save_file({"model.embed_tokens.weight": torch.zeros(256, 64)}, path)
    with open(path, "rb+") as f:
        f.truncate(os.path.getsize(path) // 2)


# name -> (module, argv, setup(cwd) or None, words the one line must hold)
CASES = {
    "model_random_safetensors": ("workbench.ab", ["--model", "ckpt"], lambda c: _checkpoint(os.path.join(c, "ckpt"),
                                                                                          "random"),
                                 ["model.safetensors is not a whole safetensors file"]),
    "model_truncated_safetensors": ("workbench.ab", ["--model", "ckpt"],
                                    lambda c: _checkpoint(os.path.join(c, "ckpt"), "truncated"),
                                    ["model.safetensors is not a whole safetensors file", "cut short"]),
    "lr_inf": ("workbench.ab", ["--lr", "inf"], None, ["--lr", "finite"]),
    "lr_absurd": ("workbench.ab", ["--lr", "1e308"], None, ["--lr", "at most 1"]),
    "sweep_duplicate_values": ("workbench.ab", ["--sweep", "layers=2,2"], None, ["names 2 twice"]),
    "headline_with_floor_arms": ("workbench.ab", ["--opt", "packing", "--headline", "--arms", "rebuild,precomputed"],
                                 None, ["--headline", "--arms", "keep one"]),
    "campaign_bogus_suite": ("workbench.campaign", ["--out", "camp", "--suite", "bogus"], None,
                             ["unknown suite 'bogus'"]),
    "model_corrupted_config": ("workbench.ab", ["--model", "ckpt"],
                               lambda c: _write(os.path.join(c, "ckpt", "config.json"), '{"model_type": "llama",'),
                               ["config.json is not valid JSON"]),
    "model_empty_config": ("workbench.ab", ["--model", "ckpt"],
                           lambda c: _write(os.path.join(c, "ckpt", "config.json"), "{}"), ["has no model_type"]),
    "model_unknown_type": ("workbench.ab", ["--model", "ckpt"],
                           lambda c: _write(os.path.join(c, "ckpt", "config.json"), '{"model_type": "bert"}'),
                           ["unsupported model_type 'bert'"]),
    "model_without_weights": ("workbench.ab", ["--model", "ckpt"],
                              lambda c: _write(os.path.join(c, "ckpt", "config.json"), json.dumps(_llama_config())),
                              ["no weights"]),
    "model_empty_dir": ("workbench.ab", ["--model", "ckpt/"], lambda c: os.makedirs(os.path.join(c, "ckpt")),
                        ["not a Hugging Face checkpoint", "no config.json"]),
    "experts_bogus": ("workbench.ab", ["--experts", "bogus"], None, ["unknown experts implementation 'bogus'"]),
    "lengths_not_a_number": ("workbench.ab", ["--lengths", "lognormal:x:1"], None,
                             ["--lengths", "lognormal:x:1", "lognormal:MU:SIGMA"]),
    "lengths_zero": ("workbench.ab", ["--lengths", "fixed:0"], None, ["--lengths", "fixed:0", "positive"]),
    "out_existing_file": ("workbench.ab", ["--out", "results.txt"],
                          lambda c: _write(os.path.join(c, "results.txt"), "a file of mine"), ["existing file"]),
    "out_parent_is_a_file": ("workbench.ab", ["--out", "results.txt/run"],
                             lambda c: _write(os.path.join(c, "results.txt"), "a file of mine"), ["cannot be created"]),
    "out_not_empty": ("workbench.ab", ["--out", "old_run"], lambda c: _prior_run(os.path.join(c, "old_run")),
                      ["not empty", "--force"]),
    "opt_bogus": ("workbench.ab", ["--opt", "bogus"], None, ["invalid choice: 'bogus'", "packing", "offload", "moe",
                                                            "all"]),
    "run_attn_bogus": ("workbench.run", ["--attn", "bogus"], None, ["unknown attention implementation 'bogus'"]),
}


@pytest.fixture(scope="module")
def bad_inputs(tmp_path_factory):
    """Every CASES command, each in its own working directory; name -> (result, before, cwd)."""
    done = {}
    for name, (module, argv, setup, _) in CASES.items():
        cwd = str(tmp_path_factory.mktemp(name))
        if setup is not None:
            setup(cwd)
        before = _snapshot(cwd)
        args = [*argv, "--device", "cpu"] if module == "workbench.ab" else argv
        done[name] = (run_cli(module, args, cwd=cwd), before, cwd)
    return done


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_and_creates_nothing(bad_inputs, case):
    """Each mistake: exit status 2, one `error:` line naming the problem, no traceback, no stdout, and the working
    directory exactly as it was (no runs/ folder, no --out folder, every existing file byte-identical). One line
    also for --opt all (the default here): the check runs once, before any comparison or model, not per
    comparison. Catches a traceback, a usage block, a line per comparison, a half-made folder, a touched file."""
    r, before, cwd = bad_inputs[case]
    words = CASES[case][3]
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2, r.stderr
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: ") and all(w in lines[0] for w in words), lines[0]
    assert "Traceback" not in r.stderr and r.stdout == ""
    assert _snapshot(cwd) == before


# --- --out ------------------------------------------------------------------------------------------------------


def _rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_out_non_empty_is_refused_and_left_byte_identical(bad_inputs):
    """(The subprocess of case out_not_empty.) An earlier run's folder is refused, every file in it unchanged."""
    r, before, cwd = bad_inputs["out_not_empty"]
    assert r.returncode == 2 and "not empty" in r.stderr
    after = _snapshot(os.path.join(cwd, "old_run"))
    assert after == {k[len("old_run/"):]: v for k, v in before.items() if k.startswith("old_run/")}
    assert after["results.csv"].startswith(b"run_id") and after["notes.txt"] == b"my notes"


def test_force_replaces_the_run_files_and_refuses_a_folder_with_other_files(capsys, tmp_path, fakes):
    """--force: the earlier run's rows are gone (no mixing of two runs in one results.csv), its traces/ too. A folder
    that also holds a file no run wrote (the user's notes) is refused, --force or not, every file untouched."""
    d = tmp_path / "old_run"
    _prior_run(str(d))
    before = _snapshot(d)
    rc, summary, err = _run(capsys, ["--opt", "packing", *FAST, "--out", str(d), "--force"])
    assert rc == 2 and "holds files no workbench run wrote (notes.txt)" in err and len(err.strip().splitlines()) == 1
    assert _snapshot(d) == before
    os.remove(d / "notes.txt")
    rc, summary, err = _run(capsys, ["--opt", "packing", *FAST, "--out", str(d), "--force"])
    assert rc == 0, err
    rows = _rows(d / "results.csv")
    assert rows and {r["run_id"] for r in rows} == {summary["run_id"]} != {"OLD"}
    assert json.loads((d / "meta.json").read_text())["run_id"] == summary["run_id"]
    assert not (d / "traces").exists()


def test_default_output_is_runs_run_id_under_the_cwd(capsys, tmp_path, monkeypatch, fakes):
    """Without --out, a run lands in runs/<run_id> of the working directory, never under profiles/ (committed
    results)."""
    monkeypatch.chdir(tmp_path)
    rc, summary, err = _run(capsys, ["--opt", "packing", *FAST])
    assert rc == 0, err
    assert summary["out"] == os.path.join("runs", summary["run_id"])
    run = tmp_path / "runs" / summary["run_id"]
    assert {"results.csv", "summary.json", "meta.json"} <= set(os.listdir(run))
    assert os.listdir(tmp_path) == ["runs"] and os.listdir(tmp_path / "runs") == [summary["run_id"]]
    assert "profiles" not in summary["out"]


# --- interrupted, failed, crashed ---------------------------------------------------------------------------------

def _sigterm_run(driver, cwd):
    """`python -m workbench.ab` in `cwd`, sent SIGTERM on its first progress line of rep 1: (returncode, stdout,
    stderr, out folder)."""
    out = cwd / "run"
    p = driver.popen([sys.executable, "-m", "workbench.ab", "--opt", "packing", "--arms", "rebuild,cached",
                      "--tokens", "64", "--batches", "1", "--steps", "2", "--warmup", "0", "--warmup-max", "0",
                      "--reps", "300", "--device", "cpu", "--out", str(out)],
                     cwd=cwd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    err = []
    try:  # no wall-clock deadline: on a loaded machine the first timed step may come late, never wrongly
        for line in p.stderr:
            err.append(line)
            if "] rep 1 " in line and ": step " in line:
                p.send_signal(signal.SIGTERM)
                break
        else:
            pytest.fail("no 'rep 1' progress line: " + "".join(err))
        stdout, rest = p.communicate()
    finally:
        if p.poll() is None:
            p.kill()
    return p.returncode, stdout, "".join(err) + rest, out


def early_start(tmp_path_factory, items):
    """The SIGTERM test's process and the thread that signals it, started at collection (conftest's
    pytest_collection_finish): it runs beside the tests before this file instead of being waited for here."""
    if any(item.name == "test_sigterm_keeps_the_results_and_marks_the_run_incomplete" for item in items):
        from conftest import Driven
        driven = Driven(nice=15)  # read last of the work started at collection
        driven.start("sigterm", _sigterm_run, tmp_path_factory.mktemp("sigterm"))
        return driven


def test_sigterm_keeps_the_results_and_marks_the_run_incomplete(tmp_path):
    """SIGTERM after the first timed step (a job limit, a `kill`): exit 143, meta.json status incomplete,
    summary.json complete false, the rows so far kept. Catches a SIGTERM that kills the process without its
    files marked (status "running" forever) or that loses the results."""
    from conftest import Direct, early
    driven = early(__name__)
    rc, stdout, err, out = driven.result("sigterm", None) if driven else _sigterm_run(Direct(), tmp_path)
    assert rc == 143, err
    assert "terminated (SIGTERM)" in err and "Traceback" not in err
    meta = json.loads((out / "meta.json").read_text())
    assert meta["status"] == "incomplete" and meta["reason"] == "terminated (SIGTERM)"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] is False and summary["status"] == "incomplete"
    assert json.loads(stdout.strip().splitlines()[-1])["complete"] is False
    rows = _rows(out / "results.csv")
    assert any(r["metric"] == "step_ms" for r in rows) and any(r["metric"] == "equivalent" for r in rows)
    assert not [n for n in os.listdir(out) if ".tmp" in n]


def test_a_failed_run_says_so_in_its_folder(capsys, tmp_path, fakes):
    """An arm that fails: exit 1, meta.json status failed, summary.json complete false / status failed, the error
    in errors.log and on stderr (one line per failure, no traceback). Catches a failed run that reads complete."""
    fakes.FAIL_ARMS[("packing", "cached")] = RuntimeError("kernel exploded")
    rc, summary, err = _run(capsys, ["--opt", "packing", *FAST, "--out", str(tmp_path)])
    assert rc == 1
    assert summary["complete"] is False and summary["status"] == "failed"
    assert json.loads((tmp_path / "summary.json").read_text())["complete"] is False
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["status"] == "failed" and any("kernel exploded" in f for f in meta["failures"])
    assert "kernel exploded" in (tmp_path / "errors.log").read_text()
    assert "FAILED: packing arm cached failed: RuntimeError: kernel exploded" in err and "Traceback" not in err


def test_an_unexpected_crash_is_reported_as_failed_not_interrupted(capsys, tmp_path, monkeypatch, fakes):
    """A bug in the runner: one `failed: RuntimeError: ...` line (not "interrupted"), the traceback in errors.log,
    meta.json status failed, exit 1. Catches a crash reported as a Ctrl-C, or one that leaves status running."""
    def boom(self, cmp, index, total):
        raise RuntimeError("bug in the runner\nsecond line")
    monkeypatch.setattr(ab.Runner, "run", boom)
    rc, summary, err = _run(capsys, ["--opt", "packing", *FAST, "--out", str(tmp_path)])
    assert rc == 1
    assert "failed: RuntimeError: bug in the runner" in err
    assert "interrupted" not in err and "Traceback" not in err and "second line" not in err
    log = (tmp_path / "errors.log").read_text()
    assert "Traceback" in log and "bug in the runner" in log
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["status"] == "failed" and meta["reason"].startswith("RuntimeError: bug in the runner")
    assert summary["status"] == "failed" and summary["complete"] is False


# --- --help -------------------------------------------------------------------------------------------------------

def test_help_shows_defaults_arms_presets_and_the_lengths_format(capsys, monkeypatch):
    from workbench.step.models import PRESETS

    monkeypatch.setenv("COLUMNS", "200")  # argparse wraps at the terminal width
    with pytest.raises(SystemExit) as e:
        ab.parse_args(["--help"])
    assert e.value.code == 0
    h = capsys.readouterr().out
    assert "(default: all)" in h and "(default: off)" in h and "(default: none)" in h
    for arms in ab.ARMS_HELP.values():
        assert arms in h
    assert "rebuild (baseline), cached (optimized)" in h
    for name in PRESETS:
        assert name in h, name
    for form in ("fixed:N", "uniform:LO:HI", "lognormal:MU:SIGMA[:MIN]", "json:PATH", "jsonl:PATH:TOKENIZER_DIR"):
        assert form in h, form
    # enumerations are argparse choices, listed in the usage
    from workbench.opts import registry as opt_registry
    opts = "{" + ",".join((*opt_registry.names(), "all", "levers")) + "}"  # the registry's, in its order
    for choices in (opts, "{auto,cpu,cuda}", "{none,torch,nsys}", "{auto,fp32,bf16,fp16}",
                    "{off,add,only}"):
        assert choices in h, choices
