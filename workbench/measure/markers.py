"""A run folder's state as a file named for it, seen with `ls`, without opening a JSON.

    RUNNING      the writer is at work: its pid, the process start time, the boot id, the host and a heartbeat
                 (refreshed every HEARTBEAT_S by a daemon thread)
    INCOMPLETE   stopped early (Ctrl-C, SIGTERM): the comparisons so far are in the folder, not the whole run
    FAILED       an arm, a check or the run failed (errors.log says why)
    (none)       complete

A folder whose RUNNING names a writer that is gone (its pid no longer exists, or is another process with another
start time, on this host and boot; or its heartbeat older than STALE_S, anywhere) is `died`: killed by SIGKILL or
the OOM killer, with no chance to say so. `state(folder)` is what every reader uses (`results.load_run`,
`analysis`, so `readme_results`, `report` and the notebooks); a folder of an older writer, with no marker, is read
from meta.json's status, and its "running" is `died` too (a live writer always has its RUNNING file)."""
from __future__ import annotations

import json
import os
import platform
import threading
import time

RUNNING, INCOMPLETE, FAILED = "RUNNING", "INCOMPLETE", "FAILED"
MARKERS = (RUNNING, INCOMPLETE, FAILED)
HEARTBEAT_S = 30.0
"""How often a live writer refreshes RUNNING's heartbeat."""
STALE_S = 4 * HEARTBEAT_S
"""A heartbeat older than this: the writer is dead (four beats missed)."""
STATES = ("running", "complete", "incomplete", "failed", "died")


def boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return None


def process_start(pid: int) -> str | None:
    """The process's start time since boot (clock ticks, /proc/<pid>/stat field 22); None where unknown or gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()[19]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _write(path: str, text: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _running_record() -> dict:
    pid = os.getpid()
    return {"pid": pid, "process_start": process_start(pid), "boot_id": boot_id(), "host": platform.node(),
            "heartbeat": time.time(), "heartbeat_s": HEARTBEAT_S}


class Heartbeat:
    """RUNNING written now and refreshed every `period_s` until `stop()`."""

    def __init__(self, out_dir: str, period_s: float = HEARTBEAT_S):
        self.path = os.path.join(out_dir, RUNNING)
        self.record = _running_record()
        self._stop = threading.Event()
        for m in (INCOMPLETE, FAILED):  # a --force rerun: an earlier run's marker is not this run's
            _remove(os.path.join(out_dir, m))
        self._beat()
        self._thread = threading.Thread(target=self._loop, args=(period_s,), name="workbench-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        self.record["heartbeat"] = time.time()
        _write(self.path, json.dumps(self.record) + "\n")

    def _loop(self, period_s: float) -> None:
        while not self._stop.wait(period_s):
            try:
                self._beat()
            except OSError:  # the folder went away: nothing to mark
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def finish(out_dir: str, status: str, heartbeat: Heartbeat | None = None, failures=(), reason: str | None = None) \
        -> None:
    """The writer's last word: RUNNING removed and, unless `status` is complete, INCOMPLETE or FAILED written (one
    line: the reason). A failure also leaves errors.log (the failures, when nothing wrote one)."""
    if heartbeat is not None:
        heartbeat.stop()
    lines = [ln for ln in ([reason] if reason else []) + list(failures) if ln]
    if status == "failed":  # every failure's line in errors.log (an arm's traceback may be there already)
        log = os.path.join(out_dir, "errors.log")
        have = _read(log) or ""
        missing = [ln for ln in lines if ln not in have] or ([] if have else ["failed (no message)"])
        if missing:
            with open(log, "a") as f:
                f.write("".join(f"{ln}\n" for ln in missing))
    for m in (INCOMPLETE, FAILED):  # finished twice (a rank's failure, then the session): the last word stands
        _remove(os.path.join(out_dir, m))
    if status in ("incomplete", "failed"):
        _write(os.path.join(out_dir, INCOMPLETE if status == "incomplete" else FAILED),
               f"{status}: {(lines or ['no reason given'])[0]}\n")
    _remove(os.path.join(out_dir, RUNNING))


def writer_dead(record: dict, now: float | None = None) -> str | None:
    """Why the writer of this RUNNING record is dead, or None while it lives."""
    now = time.time() if now is None else now
    here = boot_id()
    same_machine = record.get("host") == platform.node() and here is not None and record.get("boot_id") == here
    pid = record.get("pid")
    if same_machine and isinstance(pid, int):
        if not _alive(pid):
            return f"its writer (pid {pid}) is gone"
        start = process_start(pid)
        if record.get("process_start") and start and start != record["process_start"]:
            return f"pid {pid} is another process now"
    if record.get("host") == platform.node() and record.get("boot_id") and here and record["boot_id"] != here:
        return "the machine rebooted since"
    beat = record.get("heartbeat")
    if isinstance(beat, (int, float)) and now - beat > STALE_S:
        return f"its heartbeat stopped {now - beat:.0f} s ago"
    return None


def state(run_dir: str, meta: dict | None = None) -> tuple[str, str | None]:
    """(state, why) of a run folder: running | complete | incomplete | failed | died (see the module docstring)."""
    if os.path.exists(os.path.join(run_dir, FAILED)):
        return "failed", _read(os.path.join(run_dir, FAILED))
    if os.path.exists(os.path.join(run_dir, INCOMPLETE)):
        return "incomplete", _read(os.path.join(run_dir, INCOMPLETE))
    running = os.path.join(run_dir, RUNNING)
    if os.path.exists(running):
        try:
            record = json.loads(_read(running) or "{}")
        except ValueError:
            record = {}
        why = writer_dead(record)
        return ("died", why) if why else ("running", None)
    if meta is None:
        try:
            with open(os.path.join(run_dir, "meta.json")) as f:
                meta = json.load(f)
        except (OSError, ValueError):
            meta = {}
    status = meta.get("status")
    if status == "running":
        return "died", "no writer holds the folder: no RUNNING file"
    return (status or "unknown"), meta.get("reason")


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None
