"""`python -m workbench.run`: the final JSON line, the tables, and one-line errors on bad input."""
import json
import subprocess
import sys

import pytest

from conftest import run_cli


def _run(*args):
    return subprocess.run([sys.executable, "-m", "workbench.run", *args], capture_output=True, text=True,
                          timeout=600)


FINAL_JSON_ARGS = ("--model", "tiny-gpt-oss", "--experts", "eager", "--tokens", "128", "--steps", "2", "--warmup", "1")


def early_start(tmp_path_factory, items):
    """test_run_prints_tables_and_final_json's process, started at collection (conftest's pytest_collection_finish)."""
    if any(item.name == "test_run_prints_tables_and_final_json" for item in items):
        from conftest import Started
        started = Started(tmp_path_factory)
        started.start("final_json", [sys.executable, "-m", "workbench.run", *FINAL_JSON_ARGS])
        return started


def test_run_prints_tables_and_final_json():
    from conftest import early
    started = early(__name__)
    r = started.result("final_json", timeout=600) if started else _run(*FINAL_JSON_ARGS)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    out = json.loads(lines[-1])
    assert set(out) >= {"model", "layers", "tokens", "device", "steps", "syncs_by_layer"}
    assert out["device"] == "cpu" and len(out["steps"]) == 2
    assert set(out["steps"][0]) >= {"step_ms", "fwd_ms", "bwd_ms", "syncs", "loss"}
    assert out["syncs_by_layer"]["L00"] > 0  # the eager per-expert loop syncs in every layer
    assert "syncs per layer and pass" in r.stdout
    assert "step 2/2" in r.stderr  # progress goes to stderr, never into the JSON line


@pytest.mark.parametrize("args, msg", [
    (["--model", "no-such-model"], "unknown model preset"),
    (["--model", "./missing-checkpoint"], "checkpoint directory not found"),
    (["--tokens", "0"], "positive"),
    (["--steps", "-1"], "positive"),
    (["--lengths", "fixed:5000", "--tokens", "1024"], "longer than the token budget"),
    (["--lengths", "bogus"], "bad length source"),
])
def test_bad_input_is_one_line_without_traceback(args, msg):
    r = run_cli("workbench.run", args)  # in-process: test_run_prints_tables_and_final_json is the fresh process
    assert r.returncode != 0
    err = [l for l in r.stderr.strip().splitlines() if l.startswith("error:")]
    assert len(err) == 1 and msg in err[0]
    assert "Traceback" not in r.stderr


def test_tables_are_rendered_by_cli_table(capsys, monkeypatch):
    """workbench.run prints its tables with `workbench.cli.table`, the project's one table renderer (in-process).
    Catches a private copy of the renderer drifting from the A/B tables."""
    from workbench import cli, run
    from workbench.cli import run_main

    assert run.table is cli.table
    real, headers, rendered = cli.table, [], []

    def spy(rows, header):
        headers.append(header)
        rendered.append(real(rows, header))
        return rendered[-1]
    monkeypatch.setattr(run, "table", spy)
    rc = run_main(run.main, ["--model", "tiny-llama", "--tokens", "64", "--steps", "1", "--warmup", "0"])
    out = capsys.readouterr().out
    assert rc == 0
    assert headers[0] == ["step", "step_ms", "fwd_ms", "bwd_ms", "opt_ms", "syncs", "cuda_warn", "peak_mib", "tokens",
                          "loss"]
    assert ["layer", "forward", "recompute", "backward", "optimizer", "total"] in headers
    assert all(t in out for t in rendered)  # printed as cli.table renders them
    assert json.loads(out.strip().splitlines()[-1])["model"] == "tiny-llama"
