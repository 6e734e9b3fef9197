"""workbench.cli.run_main: a reader that closes the pipe early (`... | head -1`) ends the command quietly."""
from __future__ import annotations

import subprocess
import sys

LOUD = ("import sys; from workbench.cli import run_main; "
        "sys.exit(run_main(lambda argv: [print('x' * 80) for _ in range(200000)] and 0))")


def _first_line_then_close(code: str) -> tuple[int, str]:
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    p.stdout.readline()
    p.stdout.close()
    err = p.stderr.read()
    return p.wait(timeout=60), err


def test_a_closed_pipe_ends_quietly_with_sigpipes_status():
    rc, err = _first_line_then_close(LOUD)
    assert rc == 141
    assert "Traceback" not in err and err == ""


def test_control_without_run_main_the_same_printing_raises():
    rc, err = _first_line_then_close("[print('x' * 80) for _ in range(200000)]")
    assert rc != 0 and "BrokenPipeError" in err
