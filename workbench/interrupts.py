"""Ctrl-C in two phases: before a run has a folder (imports, argument checks, the plan) it exits at once with
`interrupted` and status 130 (a KeyboardInterrupt inside a half-done numpy / scipy import can surface later as an
unrelated traceback); once the folder exists it is Python's KeyboardInterrupt, which the run catches to mark the
folder incomplete."""
from __future__ import annotations

import os
import signal
import sys

INTERRUPTED_RC = 130


def _exit_at_once(signum, frame):
    try:
        sys.stderr.write("interrupted\n")
        sys.stderr.flush()
    finally:
        os._exit(INTERRUPTED_RC)


_exit_at_once.exits_at_once = True


def exit_at_once() -> None:
    """Ctrl-C exits the process now (nothing written yet to keep). Left alone where SIGINT is ignored."""
    try:
        if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
            signal.signal(signal.SIGINT, _exit_at_once)
    except ValueError:  # not the main thread
        pass


def raise_from_now_on() -> None:
    """Ctrl-C raises KeyboardInterrupt again (the run has a folder to mark), if `exit_at_once` had changed it."""
    try:
        if getattr(signal.getsignal(signal.SIGINT), "exits_at_once", False):
            signal.signal(signal.SIGINT, signal.default_int_handler)
    except ValueError:
        pass
