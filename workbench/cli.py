"""Shared CLI plumbing: one-line errors without tracebacks, progress on stderr, plain-text tables, the final JSON
line."""
from __future__ import annotations

import argparse
import json
import math
import os
import sys

from workbench.errors import WorkbenchError, write_fault


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """--help keeps the description's and epilog's layout and shows every option's default (flags, and options
    whose default None means "decided later", say so in their help text instead)."""

    def _get_help_string(self, action):
        if action.default is None or isinstance(action.default, bool):
            return action.help
        return super()._get_help_string(action)


class OneLineParser(argparse.ArgumentParser):
    """argparse whose usage errors raise WorkbenchError: `run_main` prints them as one `error: ...` line, exit 2
    (instead of argparse's usage block followed by the error). The one parser class of every CLI."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)  # `--processe 2` is an unknown flag, never a silent --processes
        super().__init__(*args, **kwargs)

    def error(self, message):
        raise WorkbenchError(f"{message} (see {self.prog} --help)")


def parser(prog: str, description: str, **kwargs) -> OneLineParser:
    """The parser of `python -m PROG` (a PROG with a space, e.g. "workbench gate", is shown as given): one-line
    errors, the description printed as written."""
    kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
    return OneLineParser(prog=prog if " " in prog else f"python -m {prog}", description=description, **kwargs)


def run_main(main, argv=None) -> int:
    """Run `main(argv)`; a WorkbenchError or Ctrl-C becomes one line on stderr and a non-zero exit. A reader that
    closed stdout early (`... | head`) ends the command quietly: the work is done, only its printing stops."""
    try:
        return main(argv) or 0
    except BrokenPipeError:
        # Python's documented idiom (signal module, "Note on SIGPIPE"): point stdout at devnull so the interpreter's
        # final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except WorkbenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except OSError as e:  # a full disk, a folder gone mid-run: one line naming the cause, not a traceback
        print(f"error: {write_fault(e)}", file=sys.stderr)
        return 1


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def table(rows: list[list], header: list[str]) -> str:
    """Right-aligned plain-text table (`tabulate`, "plain" format: columns two spaces apart, no rules). The header
    goes in as the first row, so it gets no extra padding of its own and every cell is printed as given."""
    from tabulate import tabulate

    cells = [[str(c) for c in header]] + [["" if c is None else str(c) for c in r] for r in rows]
    return tabulate(cells, tablefmt="plain", stralign="right", numalign="right", disable_numparse=True)


def emit_json(obj) -> None:
    """The last line of stdout: one JSON object."""
    sys.stdout.flush()
    print(json.dumps(_finite(obj), separators=(",", ":"), default=_default, allow_nan=False), flush=True)


def _finite(o):
    """NaN / inf (e.g. peak memory on CPU, where it is not tracked) become null: the line stays strict JSON."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {str(k) if not isinstance(k, str) else k: _finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v) for v in o]
    return o


def _default(o):
    if hasattr(o, "item"):
        return o.item()
    return str(o)
