"""A run folder's state as a file named for it, seen with `ls`, without opening a JSON.

    RUNNING      the writer is at work: its pid, the process start time, the boot id, the host and a heartbeat
                 (refreshed every HEARTBEAT_S by a daemon thread)
    INCOMPLETE   stopped early (Ctrl-C, SIGTERM): the comparisons so far are in the folder, not the whole run
    FAILED       an arm, a check or the run failed (errors.log says why)
    (none)       complete

A folder whose RUNNING names a writer that is gone (its pid no longer exists, or is another process with another
start time, on this host and boot; or its heartbeat older than STALE_S, anywhere) is `died`: killed by SIGKILL or
the OOM killer, with no chance to say so.

RUNNING is also the folder's lock: one writer per folder. `acquire(folder)` creates it with O_CREAT | O_EXCL before
the run writes anything, so of two runs started into one folder exactly one gets it; the other is refused in one line
naming the live writer (`LockHeld`). A RUNNING whose writer is dead (`writer_dead`) is taken over, said in one line. `state(folder)` is what every reader uses (`results.load_run`,
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
    try:
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:  # a full disk: no temporary file left behind
        _remove(tmp)
        raise


def _running_record() -> dict:
    pid = os.getpid()
    return {"pid": pid, "process_start": process_start(pid), "boot_id": boot_id(), "host": platform.node(),
            "heartbeat": time.time(), "heartbeat_s": HEARTBEAT_S}


class LockHeld(Exception):
    """Another live writer holds the folder (its RUNNING record); the message is one line naming it."""


def describe_writer(record: dict) -> str:
    """`pid 123 on host h since 2026-01-01 10:00:00 (run r)` of a RUNNING record."""
    since = record.get("started")
    return (f"pid {record.get('pid')} on {record.get('host') or 'an unnamed host'}"
            + (f" since {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(since))}"
               if isinstance(since, (int, float)) else "")
            + (f" (run {record['run_id']})" if record.get("run_id") else ""))


def acquire(out_dir: str, run_id: str | None = None, note=None) -> dict:
    """Take `out_dir`'s lock: create RUNNING atomically (O_CREAT | O_EXCL) with this writer's record, the folder
    created first if needed. A RUNNING of a dead writer is taken over (`note(line)` says so); a live one raises
    LockHeld. Returns the record written."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, RUNNING)
    record = {**_running_record(), "started": time.time(), **({"run_id": run_id} if run_id else {})}
    for _ in range(3):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                held = json.loads(_read(path) or "{}")
            except ValueError:
                held = {}
            why = writer_dead(held) if held else None
            if held and why is None:
                raise LockHeld(f"{out_dir} is being written by a live run: {describe_writer(held)}; wait for it to "
                               "end or name another folder (--force does not take a live run's folder)") from None
            if not held and time.time() - _mtime(path) < STALE_S:  # being written this instant, or unreadable
                raise LockHeld(f"{out_dir} is locked ({RUNNING} unreadable, written {time.time() - _mtime(path):.0f}"
                               " s ago); wait for its writer or name another folder") from None
            stale = f"{path}.stale{os.getpid()}"
            try:
                os.replace(path, stale)  # one taker wins the rename; the others retry and meet its new lock
            except FileNotFoundError:
                continue
            _remove(stale)
            if note is not None:
                note(f"{out_dir}: took over the lock of a dead writer ({describe_writer(held) if held else 'no record'}"
                     f": {why or 'unreadable, stale'})")
            continue
        try:
            with os.fdopen(fd, "w") as f:
                f.write(json.dumps(record) + "\n")
        except BaseException:
            _remove(path)
            raise
        return record
    raise LockHeld(f"{out_dir}: could not take the folder's lock (another writer keeps taking it)")


def _mtime(path: str) -> float:
    try:
        return os.path.getmtime(path)
    except OSError:
        return 0.0


def holder(out_dir: str) -> dict | None:
    """The live writer's RUNNING record of `out_dir`, or None (no RUNNING, or its writer is dead)."""
    try:
        held = json.loads(_read(os.path.join(out_dir, RUNNING)) or "null")
    except ValueError:
        return None
    return held if isinstance(held, dict) and writer_dead(held) is None else None


class Heartbeat:
    """RUNNING refreshed every `period_s` until `stop()`; taken now (`acquire`) unless `record` says this writer
    holds it already."""

    def __init__(self, out_dir: str, period_s: float = HEARTBEAT_S, record: dict | None = None):
        self.path = os.path.join(out_dir, RUNNING)
        self.record = record if record is not None else acquire(out_dir)
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
            try:
                with open(log, "a") as f:
                    f.write("".join(f"{ln}\n" for ln in missing))
            except OSError:  # a full disk: the marker below still names the cause
                if not have:
                    _remove(log)
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
