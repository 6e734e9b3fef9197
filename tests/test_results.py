"""workbench.measure.results (run folder, schema, atomic writes, output-folder checks, git sha) and workbench.report.tables
(tables, figures)."""
import csv
import dataclasses
import json
import os
import shutil
import subprocess

import pytest

from workbench import cli
from workbench.report import tables as report
from workbench.measure import results
from workbench.errors import WorkbenchError
from workbench.step.harness import StepRecord
from workbench.measure.results import (ENV_COLUMNS, RESULT_COLUMNS, RUN_FILES, RunWriter, atomic_write_json, check_out_dir,
                               clear_run_files, load_run, new_run_id)


def _rec(step, ms):
    known = dict(step=step, step_ms=ms, fwd_ms=ms / 3, bwd_ms=ms / 2, opt_ms=ms / 6, syncs=2, syncs_declared=0,
                 cuda_sync_warnings=None, peak_mem_mib=float("nan"), tokens=128, loss=5.5)
    # fields the harness adds later (attribution dicts, ...) get an empty value
    return StepRecord(**{f.name: known.get(f.name, {}) for f in dataclasses.fields(StepRecord)})


def _sample(arm, rep, step, batch, ms):
    """An engine sample (workbench.measure.engine.measure)."""
    return {"arm": arm, "rep": rep, "batch": batch, "step": step, "step_ms": ms, "fwd_ms": ms / 3, "bwd_ms": ms / 2,
            "opt_ms": ms / 6, "peak_mem_mib": float("nan"), "loss": 5.5, "tokens": 128, "t_start_s": 0.0,
            "t_end_s": 1.0}


def test_schema_columns():
    assert RESULT_COLUMNS == ["run_id", "comparison", "arm", "rep", "batch", "step", "metric", "value", "unit"]
    assert {"opt", "device", "gpu_name", "model", "layers", "tokens", "attn", "torch", "git_sha"} <= set(ENV_COLUMNS)
    assert not set(RESULT_COLUMNS) & set(ENV_COLUMNS)


def test_run_writer_files(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_GIT_SHA", "abc123")
    w = RunWriter(str(tmp_path), "rid", argv=["python", "-m", "workbench.ab", "--opt", "packing"],
                  env={"device": "cpu", "model": "tiny-qwen3", "opt": "packing"},
                  extra_meta={"device": {"type": "cpu"}})
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["status"] == "running" and meta["command"] == "python -m workbench.ab --opt packing"
    assert meta["versions"]["torch"] and "python" in meta["versions"] and meta["git_sha"] == "abc123"
    w.add_sample("packing@layers=2", _sample("rebuild", 0, 0, 0, 10.0), layers=2)
    w.add_sample("packing@layers=2", _sample("rebuild", 0, 1, 1, 12.0), layers=2)
    w.add_sample("packing@layers=2", {**_rec(0, 30.0).as_row(), "arm": "rebuild", "batch": 1},
                 prefix="instrumented_", layers=2)
    w.add("packing@layers=2", "cached", "speedup", 1.5, "x")
    w.finish("complete", nvml={})
    df, summary, meta = load_run(str(tmp_path))
    assert list(df.columns) == RESULT_COLUMNS + ENV_COLUMNS
    assert meta["status"] == "complete" and meta["ended"]
    assert summary == {}
    assert set(df["comparison"]) == {"packing@layers=2"} and set(df["opt"]) == {"packing"}
    assert set(df["run_id"]) == {"rid"} and set(df["git_sha"]) == {"abc123"}
    steps = df[df["metric"] == "step_ms"]
    assert steps["value"].tolist() == [10.0, 12.0] and set(steps["unit"]) == {"ms"}
    assert steps["batch"].tolist() == [0, 1] and steps["step"].tolist() == [0, 1] and steps["rep"].tolist() == [0, 0]
    assert set(df["model"]) == {"tiny-qwen3"} and set(steps["layers"]) == {2}
    # the counted pass: its step time under its own name, its syncs as they are; its batch kept
    inst = df[df["metric"] == "instrumented_step_ms"]
    assert inst["value"].tolist() == [30.0] and inst["batch"].tolist() == [1]
    assert df[df["metric"] == "syncs"]["value"].tolist() == [2] and "instrumented_syncs" not in set(df["metric"])
    # None values (cuda_sync_warnings on CPU) are not written; NaN (peak memory on CPU) is an empty cell
    assert "cuda_sync_warnings" not in set(df["metric"])
    assert df[df["metric"] == "peak_mem_mib"]["value"].isna().all()
    assert not [p for p in os.listdir(tmp_path) if ".tmp" in p]


def test_interrupted_flush_keeps_previous_file(tmp_path, monkeypatch):
    w = RunWriter(str(tmp_path), "rid")
    w.add("packing", "rebuild", "step_ms", 1.0, "ms", rep=0, step=0)
    w.flush()
    before = (tmp_path / "results.csv").read_text()
    w.add("packing", "cached", "step_ms", 2.0, "ms", rep=0, step=0)

    def boom(self, row):
        raise KeyboardInterrupt
    monkeypatch.setattr(csv.DictWriter, "writerow", boom)
    with pytest.raises(KeyboardInterrupt):
        w.flush()
    assert (tmp_path / "results.csv").read_text() == before  # the half-written temp file never replaced it


def test_interrupted_json_write_keeps_previous_file(tmp_path, monkeypatch):
    p = str(tmp_path / "meta.json")
    atomic_write_json(p, {"status": "running"})

    def boom(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(results.os, "fsync", boom)
    with pytest.raises(KeyboardInterrupt):
        atomic_write_json(p, {"status": "complete"})
    assert json.loads(open(p).read()) == {"status": "running"}


def test_atomic_json_strict(tmp_path):
    p = str(tmp_path / "s.json")
    atomic_write_json(p, {"a": float("nan"), "b": [1.0, float("inf")], "c": {1: 2}})
    assert json.loads(open(p).read()) == {"a": None, "b": [1.0, None], "c": {"1": 2}}


def test_run_id_is_unique():
    assert new_run_id("packing-cpu") != new_run_id("packing-cpu")
    assert "-packing-cpu-" in new_run_id("packing-cpu")


# --- output folders -----------------------------------------------------------------------------------------

def test_check_out_dir_accepts_new_and_empty_folders_and_creates_nothing(tmp_path):
    check_out_dir(str(tmp_path / "new"))
    check_out_dir(str(tmp_path / "a" / "b" / "c"))  # parents to be made later
    (tmp_path / "empty").mkdir()
    check_out_dir(str(tmp_path / "empty"))
    assert sorted(os.listdir(tmp_path)) == ["empty"]


def test_check_out_dir_refuses_what_would_lose_or_mix_results(tmp_path):
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(WorkbenchError, match="existing file"):
        check_out_dir(str(tmp_path / "file.txt"))
    with pytest.raises(WorkbenchError, match="existing file"):
        check_out_dir(str(tmp_path / "file.txt"), force=True)  # --force never replaces a file
    with pytest.raises(WorkbenchError, match="cannot be created"):
        check_out_dir(str(tmp_path / "file.txt" / "run"))
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.csv").write_text("old")
    with pytest.raises(WorkbenchError, match="not empty; name a new folder$"):  # no meta.json: the user's own file
        check_out_dir(str(run))
    with pytest.raises(WorkbenchError, match="holds files no workbench run wrote \\(results.csv\\)"):
        check_out_dir(str(run), force=True)
    (run / "meta.json").write_text('{"status": "complete", "files": ["results.csv", "meta.json"]}')
    with pytest.raises(WorkbenchError, match="not empty.*--force"):
        check_out_dir(str(run))
    check_out_dir(str(run), force=True)
    assert (run / "results.csv").read_text() == "old"  # checking changes nothing
    (run / "notes.txt").write_text("mine")  # a run's folder with the user's own file in it: --force refused
    with pytest.raises(WorkbenchError, match="no workbench run wrote \\(notes.txt\\)"):
        check_out_dir(str(run), force=True)


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_check_out_dir_refuses_an_unwritable_parent(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(WorkbenchError, match="cannot be created"):
            check_out_dir(str(ro / "run"))
    finally:
        ro.chmod(0o700)


def test_clear_run_files_leaves_foreign_files(tmp_path):
    for name in ("results.csv", "summary.json", "meta.json", "errors.log", "VOID.json", "notes.txt", "results.csv.bak"):
        (tmp_path / name).write_text(name)
    (tmp_path / "traces" / "packing").mkdir(parents=True)
    (tmp_path / "traces" / "packing" / "rebuild.pt.trace.json.gz").write_text("t")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "results.csv").write_text("keep")
    clear_run_files(str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == ["mine", "notes.txt", "results.csv.bak"]
    assert (tmp_path / "mine" / "results.csv").read_text() == "keep"
    assert set(RUN_FILES) == {"results.csv", "summary.json", "meta.json", "errors.log", "traces", "RUNNING", "INCOMPLETE",
                              "FAILED", "VOID.json"}  # --force: an old run's VOID.json does not void the new run
    clear_run_files(str(tmp_path))  # nothing to remove: no error


# --- git sha ------------------------------------------------------------------------------------------------

def _git(cwd, *args):
    return subprocess.run(["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args], cwd=cwd,
                          check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git not installed")
    r = tmp_path / "outer"
    (r / "workbench").mkdir(parents=True)
    (r / "workbench" / "__init__.py").write_text("")
    (r / "inner" / "workbench").mkdir(parents=True)
    (r / "inner" / "workbench" / "__init__.py").write_text("")
    _git(r, "init", "-q")
    _git(r, "add", ".")
    _git(r, "commit", "-q", "-m", "x")
    return r


def test_git_sha_of_the_projects_own_checkout(repo, monkeypatch):
    monkeypatch.delenv("WORKBENCH_GIT_SHA", raising=False)
    monkeypatch.setattr(results, "PROJECT_ROOT", str(repo))
    head = _git(repo, "rev-parse", "HEAD")
    assert results.git_sha() == head
    (repo / "workbench" / "__init__.py").write_text("changed = 1\n")
    assert results.git_sha() == head + "-dirty"


def test_git_sha_is_none_inside_another_repository(repo, monkeypatch, tmp_path):
    """The package inside some other repository (vendored, or a copy in a repo of notebooks): that repository's
    HEAD is not this code's version. Catches a sha recorded from the wrong repository."""
    monkeypatch.delenv("WORKBENCH_GIT_SHA", raising=False)
    monkeypatch.setattr(results, "PROJECT_ROOT", str(repo / "inner"))
    assert results.git_sha() is None
    # and outside any repository
    (tmp_path / "plain" / "workbench").mkdir(parents=True)
    monkeypatch.setattr(results, "PROJECT_ROOT", str(tmp_path / "plain"))
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    assert results.git_sha() is None


def test_git_sha_honours_workbench_git_sha(monkeypatch, tmp_path):
    """A copy of the tree without .git (the GPU machine) is told its sha by the environment."""
    monkeypatch.setattr(results, "PROJECT_ROOT", str(tmp_path))
    monkeypatch.setenv("WORKBENCH_GIT_SHA", "0123abcd-dirty")
    assert results.git_sha() == "0123abcd-dirty"
    monkeypatch.delenv("WORKBENCH_GIT_SHA")
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert results.git_sha() is None


# --- report -------------------------------------------------------------------------------------------------

def _summary():
    arm = dict(step_ms=10.0, step_ms_p20=9.0, step_ms_p80=11.0, n=4, fwd_ms=3.0, bwd_ms=6.0, syncs_per_step=8.0,
               peak_mem_mib=None, tokens_per_s=1000.0, loss=5.5, status="ok")
    return {"name": "packing", "opt": "packing", "model": "tiny-qwen3", "layers": 2, "tokens": 128, "attn": "sdpa",
            "baseline": {**arm, "arm": "rebuild", "equivalent": True, "bitwise": True},
            "optimized": {**arm, "arm": "cached", "step_ms": 8.0, "step_ms_mean": 8.0, "syncs_per_step": 2.0,
                          "equivalent": True,
                          "bitwise": False, "vs_baseline": {"speedup": 1.25, "ci95": [1.2, 1.3]}},
            "others": [{**arm, "arm": "precomputed", "status": "failed", "error": "out of memory"}],
            "speedup": 1.25, "speedup_ci95": [1.2, 1.3], "n_pairs": 8, "verdict": "faster",
            "protocol": {"reps": 2, "stopped_by": "reps"}, "equivalent": True,
            "savings_model": {"formula": "(L-1)*s", "predicted_ms": None, "measured_ms": 2.0, "inputs": {},
                              "reason": "no trace"}}


def test_table_right_aligns():
    assert cli.table([[1, "ab"], [22, "c"]], ["x", "yyy"]).splitlines() == [" x  yyy", " 1   ab", "22    c"]


def test_comparison_table():
    t = report.comparison_table(_summary())
    lines = t.splitlines()
    assert lines[0].startswith("packing: tiny-qwen3")
    assert "rebuild" in lines[2] and "ref" in lines[2]
    assert "cached" in lines[3] and "yes" in lines[3] and "8.00" in lines[3] and "1.250x [1.200, 1.300]" in lines[3]
    assert "failed" in lines[4]
    assert "speedup 1.250x within this run [95% CI 1.200-1.300, n=2 reps]: faster (2 reps, stopped by reps)" in t
    assert "measured 2.00 ms" in t and "(no trace)" in t


def test_figures_from_results(tmp_path):
    w = RunWriter(str(tmp_path), "rid", env={"opt": "packing"})
    for rep in range(2):
        w.add_sample("packing", _sample("rebuild", rep, 0, 0, 10.0 + rep))
        w.add_sample("packing", _sample("cached", rep, 0, 0, 8.0 + rep))
    w.finish("complete")
    df, _, _ = load_run(str(tmp_path))
    st = report.step_times(df).set_index("arm")
    assert st.loc["cached", "step_ms"] == 8.5 and st.loc["rebuild", "n"] == 2
    fig = report.step_time_figure(df)
    assert len(fig.data) == 2
    sf = report.savings_frame({"comparisons": [_summary()]})
    assert sf.loc[0, "measured_ms"] == 2.0


def test_device_info_records_the_host_covariates_of_a_machine_effect():
    """meta.json's device names the host CPU model and kernel (machine effects had no covariate but the
    UUID); the sync round trip is a CUDA measurement, None on a CPU, and environment_diff does not compare it (it
    differs between every two processes)."""
    from workbench.measure.results import device_info, environment, sync_roundtrip_us
    info = device_info("cpu")
    assert info["cpu_model"] and isinstance(info["cpu_model"], str) and info["kernel"]
    assert "sync_roundtrip_us" not in info and sync_roundtrip_us("cpu") is None
    a = environment({"device": {**info, "sync_roundtrip_us": 21.0}})
    b = environment({"device": {**info, "sync_roundtrip_us": 35.0}})
    assert a == b


def test_nvml_handle_follows_cuda_visible_devices(monkeypatch):
    """NVML's index ignores CUDA_VISIBLE_DEVICES: a process pinned to a host's GPU 1 sees it as CUDA device 0, and
    must read GPU 1's UUID, clocks and power, not GPU 0's (found on an H200 pair, 2026-11-27)."""
    from workbench.instrument import nvml

    class FakeNvml:
        uuids = ["GPU-aaaa", "GPU-bbbb"]

        def nvmlDeviceGetHandleByIndex(self, i):
            return ("index", i)

        def nvmlDeviceGetHandleByUUID(self, u):
            if u not in self.uuids:
                raise ValueError(u)
            return ("uuid", self.uuids.index(u))

    monkeypatch.setattr(nvml, "cuda_uuid", lambda i: "GPU-bbbb")  # pinned to the host's second GPU
    assert nvml.handle_for(FakeNvml(), 0) == ("uuid", 1)
    monkeypatch.setattr(nvml, "cuda_uuid", lambda i: None)  # no torch CUDA: the index, as before
    assert nvml.handle_for(FakeNvml(), 0) == ("index", 0)
    monkeypatch.setattr(nvml, "cuda_uuid", lambda i: "GPU-cccc")  # a UUID NVML does not know: the index
    assert nvml.handle_for(FakeNvml(), 0) == ("index", 0)
    assert nvml.cuda_uuid(0) is None or nvml.cuda_uuid(0).startswith("GPU-")
