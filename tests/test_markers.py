"""Issue 24, item 2: a folder cannot pass for complete.

Its state is a file named for it (RUNNING with pid, process start time, boot id and heartbeat; INCOMPLETE; FAILED;
none when complete); a writer that died without a word (SIGKILL, the OOM killer) is `died` to every reader
(`markers.state`, `results.load_run`, `analysis`, so `readme_results` and the notebooks); errors.log is written on
every failure; Ctrl-C at any moment is `interrupted`, exit 130, no traceback."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from workbench.measure import markers
from workbench.measure.results import RunWriter, load_run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {**os.environ, "PYTHONPATH": ROOT, "PYTHONUNBUFFERED": "1"}


def _files(d) -> set:
    return set(os.listdir(d))


def test_a_live_writer_is_running_with_its_identity(tmp_path):
    w = RunWriter(str(tmp_path / "run"), "r1")
    rec = json.loads((tmp_path / "run" / "RUNNING").read_text())
    assert rec["pid"] == os.getpid() and rec["process_start"] == markers.process_start(os.getpid())
    assert rec["boot_id"] == markers.boot_id() and rec["heartbeat"] <= time.time()
    assert markers.state(w.out_dir) == ("running", None)
    w.finish("complete")
    assert _files(w.out_dir) == {"meta.json", "results.csv"}
    assert markers.state(w.out_dir)[0] == "complete"


@pytest.mark.parametrize("status, marker", [("incomplete", "INCOMPLETE"), ("failed", "FAILED")])
def test_a_run_that_did_not_complete_names_its_state_in_a_file(tmp_path, status, marker):
    w = RunWriter(str(tmp_path), "r1")
    w.finish(status, reason="why it stopped", failures=["packing: arm cached failed"])
    assert marker in _files(tmp_path) and "RUNNING" not in _files(tmp_path)
    assert (tmp_path / marker).read_text() == f"{status}: why it stopped\n"
    assert markers.state(str(tmp_path)) == (status, f"{status}: why it stopped")
    assert load_run(str(tmp_path))[2]["status"] == status
    assert ("errors.log" in _files(tmp_path)) == (status == "failed")


def test_every_failure_line_reaches_errors_log_once(tmp_path):
    (tmp_path / "errors.log").write_text("--- arm cached\nTraceback ...\npacking: arm cached failed\n")
    markers.finish(str(tmp_path), "failed", failures=["packing: arm cached failed", "verdicts failed: X"])
    log = (tmp_path / "errors.log").read_text()
    assert log.count("packing: arm cached failed") == 1 and log.endswith("verdicts failed: X\n")


def test_a_forced_rerun_drops_the_earlier_runs_marker(tmp_path):
    (tmp_path / "FAILED").write_text("failed: old\n")
    w = RunWriter(str(tmp_path), "r2")
    assert "FAILED" not in _files(tmp_path)
    w.finish("complete")
    assert markers.state(str(tmp_path))[0] == "complete"


def test_the_heartbeat_is_refreshed(tmp_path):
    hb = markers.Heartbeat(str(tmp_path), period_s=0.05)
    first = hb.record["heartbeat"]
    time.sleep(0.3)
    hb.stop()
    assert json.loads((tmp_path / "RUNNING").read_text())["heartbeat"] > first


def _running(tmp_path, **changes):
    rec = {**markers._running_record(), **changes}
    (tmp_path / "RUNNING").write_text(json.dumps(rec))
    return rec


def test_dead_writers_are_recognised(tmp_path):
    """Each way a writer can be gone, and the live one (negative control)."""
    _running(tmp_path)
    assert markers.state(str(tmp_path))[0] == "running"
    _running(tmp_path, process_start="1")  # the pid now names another process
    assert markers.state(str(tmp_path)) == ("died", f"pid {os.getpid()} is another process now")
    _running(tmp_path, heartbeat=time.time() - markers.STALE_S - 5, host="another-host")
    assert markers.state(str(tmp_path))[1].startswith("its heartbeat stopped")
    _running(tmp_path, boot_id="another-boot")
    assert markers.state(str(tmp_path)) == ("died", "the machine rebooted since")
    _running(tmp_path, heartbeat=time.time(), host="another-host")  # elsewhere, beating: trusted
    assert markers.state(str(tmp_path))[0] == "running"


def test_an_older_writers_running_without_a_marker_is_died(tmp_path):
    (tmp_path / "meta.json").write_text(json.dumps({"run_id": "old", "status": "running"}))
    assert markers.state(str(tmp_path))[0] == "died"
    (tmp_path / "meta.json").write_text(json.dumps({"run_id": "old", "status": "complete"}))
    assert markers.state(str(tmp_path))[0] == "complete"


WRITER = ("import sys, time; from workbench.measure.results import RunWriter; "
          "w = RunWriter(sys.argv[1], 'killed'); w.add('packing', 'rebuild', 'step_ms', 1.0, 'ms', rep=0, step=0); "
          "w.flush(); w.write_summary({'run_id': 'killed', 'device': 'cuda:0', 'comparisons': [], 'complete': False, "
          "'status': 'running'}); print('ready', flush=True); time.sleep(600)")


def test_a_sigkilled_writers_folder_is_died_to_every_reader(tmp_path):
    """A writer killed with SIGKILL (as the OOM killer does): its folder still says running in meta.json and holds
    RUNNING; `markers.state`, `load_run`, `analysis` (the notebooks' loader) and readme_results' results page all
    call it died, never running or complete."""
    from workbench import analysis
    from workbench.report import readme as readme_results
    run = tmp_path / "profiles" / "camp" / "ab_killed"
    p = subprocess.Popen([sys.executable, "-c", WRITER, str(run)], env=ENV, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        assert markers.state(str(run))[0] == "running"
        (run / "meta.json").write_text(json.dumps({**json.loads((run / "meta.json").read_text()),
                                                   "device": {"type": "cuda", "name": "H100"}}))
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
    assert json.loads((run / "meta.json").read_text())["status"] == "running"
    state, why = markers.state(str(run))
    assert state == "died" and why == f"its writer (pid {p.pid}) is gone"
    assert load_run(str(run))[2]["status"] == "died"
    profiles = str(tmp_path / "profiles")
    assert analysis.discover(profiles).empty
    left = analysis.left_out(profiles)
    assert list(left["status"]) == ["died"] and "gone" in left["reason"][0]
    page = readme_results.page_markdown(profiles, include_cpu=True, include_incomplete=True)
    assert "(died)" in page and "(running)" not in page


def _ab(driver, tmp_path, out):
    return driver.popen([sys.executable, "-m", "workbench.ab", "--opt", "packing", "--device", "cpu", "--reps", "300",
                         "--out", str(out)], cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                        text=True)


def _loaded(pid: int, names) -> bool:
    """Whether the process has mapped a shared library whose path holds one of `names` (it is importing them)."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            maps = f.read()
    except OSError:
        return False
    return any(n in maps for n in names)


def _ctrl_c_during_imports(driver, tmp_path, extra_s):
    """`python -m workbench.ab` sent SIGINT once torch's or numpy's libraries are mapped, plus `extra_s`:
    (returncode, stderr)."""
    p = _ab(driver, tmp_path, tmp_path / "run")
    t0 = time.monotonic()
    while not _loaded(p.pid, ("libtorch", "_multiarray_umath")) and p.poll() is None and time.monotonic() - t0 < 120:
        time.sleep(0.01)
    time.sleep(extra_s)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=300)
    return p.returncode, err


def _ctrl_c_once_the_folder_exists(driver, tmp_path):
    """`python -m workbench.ab` sent SIGINT once it said "run <id> on cpu -> <out>" (the folder exists):
    (returncode, stderr)."""
    p = _ab(driver, tmp_path, tmp_path / "run")
    for line in p.stderr:
        if line.startswith("run "):
            break
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=300)
    return p.returncode, err


def early_start(tmp_path_factory, items):
    """The Ctrl-C tests' processes and the threads that signal them, started at collection (conftest's
    pytest_collection_finish): they run beside the tests before this file instead of being waited for here."""
    from conftest import Driven
    driven = Driven(nice=15)  # read late
    for item in items:
        if item.originalname == "test_ctrl_c_during_imports_is_interrupted_exit_130_no_traceback":
            extra_s = item.callspec.params["extra_s"]
            d = tmp_path_factory.mktemp("ctrl_c_imports")
            driven.start(f"imports-{extra_s}", _ctrl_c_during_imports, d, extra_s)
            driven.dirs[f"imports-{extra_s}"] = d
        elif item.originalname == "test_ctrl_c_once_the_folder_exists_marks_it_incomplete":
            d = tmp_path_factory.mktemp("ctrl_c_folder")
            driven.start("folder", _ctrl_c_once_the_folder_exists, d)
            driven.dirs["folder"] = d
    return driven if driven.threads else None


def _started(name, fn, tmp_path, *args):
    """(tmp_path, (returncode, stderr)): from the run started at collection, else run here."""
    from conftest import Direct, early
    driven = early(__name__)
    if driven is not None and name in driven.threads:
        return driven.dirs[name], driven.result(name, 600)
    return tmp_path, fn(Direct(), tmp_path, *args)


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc to see the imports")
@pytest.mark.parametrize("extra_s", [0.0, 0.5, 1.5])
def test_ctrl_c_during_imports_is_interrupted_exit_130_no_traceback(tmp_path, extra_s):
    """SIGINT while Python imports torch, numpy, scipy (a half-done numpy import once surfaced as a scipy
    traceback): `interrupted`, exit 130, no traceback, no folder. The signal is sent once torch's or numpy's
    libraries are mapped (the project's code runs by then), plus `extra_s`: a Ctrl-C inside the interpreter's own
    start-up (its `site` imports, before any project code) is Python's KeyboardInterrupt."""
    tmp_path, (rc, err) = _started(f"imports-{extra_s}", _ctrl_c_during_imports, tmp_path, extra_s)
    assert rc == 130 and err.strip().splitlines()[-1] == "interrupted", err
    assert "Traceback" not in err
    if (tmp_path / "run").exists():  # a fast machine got past the imports: the folder is marked
        assert markers.state(str(tmp_path / "run"))[0] == "incomplete"


def test_ctrl_c_once_the_folder_exists_marks_it_incomplete(tmp_path):
    tmp_path, (rc, err) = _started("folder", _ctrl_c_once_the_folder_exists, tmp_path)
    out = tmp_path / "run"
    assert rc == 130, err
    assert "Traceback" not in err and "interrupted" in err
    assert "RUNNING" not in _files(out) and "INCOMPLETE" in _files(out)
    assert markers.state(str(out))[0] == "incomplete"
