"""Nothing lost, nothing rewritten behind the user's back: one writer per run folder (RUNNING is its lock), --force
only over a workbench run's own files, analyses that read and never write (unless --write, then beside the
original), run folders that prove their own integrity (results.csv's size and sha256 in summary.json), a failed
write and a diverged arm said once.

The runner's own behaviour runs in-process with the fake opt modules (tests/fixtures/fake_opts.py); the two writers
started at once are real processes."""
from __future__ import annotations

import errno
import json
import multiprocessing
import os
import shutil
import subprocess
import sys

import pytest
from fixtures.run_folders import run_ab as _run, snapshot as _snapshot

from workbench.cli import run_main
from workbench.measure import markers, results

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAST = ["--tokens", "64", "--steps", "1", "--warmup", "0", "--warmup-max", "0", "--device", "cpu", "--reps", "1"]
HEADLINE = ["2026-11-24_h100_fidelity_diff_gate/G0", "2026-11-25_h100_lengths/synthetic/moe",
            "2026-11-25_h100_lengths/synthetic/packing", "2026-11-23_h200x2_fsdp2/g1_rest"]
"""The committed run folders README.md cites (their summary.json): what a user runs the analyses on first."""




# --- one writer per folder -----------------------------------------------------------------------------------------

def _take(args):
    folder, barrier = args
    barrier.wait()
    try:
        markers.acquire(folder)
        return "got"
    except markers.LockHeld as e:
        return str(e)


def test_of_two_writers_taking_one_folder_at_once_exactly_one_gets_it(tmp_path):
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Manager().Barrier(2)
    with ctx.Pool(2) as pool:
        got = pool.map(_take, [(str(tmp_path / "run"), barrier)] * 2)
    assert got.count("got") == 1, got
    [refused] = [g for g in got if g != "got"]
    assert "being written by a live run: pid" in refused or "is locked" in refused or "could not take" in refused


def test_two_runs_started_into_one_folder_at_once_one_is_refused_the_other_whole(tmp_path):
    """Two real `python -m workbench.ab` started together into one --out: one exits 2 with one line, the other 0, and
    the folder holds that run's rows only, results.csv as its summary.json records it."""
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": ROOT}
    cmd = [sys.executable, "-m", "workbench.ab", "--opt", "packing", "--arms", "rebuild,cached", *FAST, "--out", str(out)]
    ps = [subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
          for _ in range(2)]
    res = [(p.wait(), *p.communicate()) for p in ps]
    assert sorted(r[0] for r in res) == [0, 2], [r[2][-2000:] for r in res]
    [(_, won, _)] = [r for r in res if r[0] == 0]
    [(_, _, lost)] = [r for r in res if r[0] == 2]
    assert len(lost.strip().splitlines()) == 1 and "Traceback" not in lost
    run_id = json.loads(won.strip().splitlines()[-1])["run_id"]
    df, summary, meta = results.load_run(str(out))
    assert set(df["run_id"]) == {run_id} and summary["run_id"] == run_id and meta["integrity"] == "verified"
    assert meta["status"] == "complete" and not (out / "RUNNING").exists()


def test_a_live_writers_folder_is_refused_with_or_without_force_and_left_untouched(capsys, tmp_path, fakes):
    d = tmp_path / "run"
    rc, _, err = _run(capsys, ["--opt", "packing", *FAST, "--out", str(d)])
    assert rc == 0, err
    markers.acquire(str(d), run_id="the-live-one")  # this process's pid: a live writer
    before = _snapshot(d)
    for extra in ([], ["--force"]):
        rc, _, err = _run(capsys, ["--opt", "packing", *FAST, "--out", str(d), *extra])
        assert rc == 2 and len(err.strip().splitlines()) == 1, err
        assert f"live run: pid {os.getpid()}" in err and "the-live-one" in err
        assert _snapshot(d) == before


def test_a_dead_writers_lock_is_taken_over_in_one_line(tmp_path):
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    d = tmp_path / "run"
    d.mkdir()
    rec = {**markers._running_record(), "pid": p.pid, "process_start": "1"}
    (d / "RUNNING").write_text(json.dumps(rec))
    said = []
    got = markers.acquire(str(d), note=said.append)
    assert got["pid"] == os.getpid() and json.loads((d / "RUNNING").read_text())["pid"] == os.getpid()
    assert len(said) == 1 and "took over the lock of a dead writer" in said[0] and str(p.pid) in said[0]


def test_force_on_a_folder_of_the_users_own_files_is_refused_and_they_are_untouched(capsys, tmp_path, fakes):
    d = tmp_path / "mine"
    d.mkdir()
    (d / "results.csv").write_text("my,own\n1,2\n")
    before = _snapshot(d)
    rc, _, err = _run(capsys, ["--opt", "packing", *FAST, "--out", str(d), "--force"])
    assert rc == 2 and "no workbench run wrote (results.csv)" in err and len(err.strip().splitlines()) == 1
    assert _snapshot(d) == before


# --- integrity ------------------------------------------------------------------------------------------------------

@pytest.fixture
def complete_run(capsys, tmp_path, fakes):
    d = tmp_path / "run"
    rc, _, err = _run(capsys, ["--opt", "packing", *FAST, "--out", str(d)])
    assert rc == 0, err
    return d


def test_summary_records_results_csv_and_every_reader_refuses_an_edited_one(complete_run, capsys):
    from workbench.analysis import loader
    from workbench.report.__main__ import main as report_main
    from workbench.savings import verdicts_cli

    d = complete_run
    rec = json.loads((d / "summary.json").read_text())["integrity"]["results.csv"]
    assert rec == results.file_record(str(d / "results.csv"))
    assert json.loads((d / "meta.json").read_text())["files"]  # what a later --force may replace
    assert run_main(report_main, [str(d)]) == 0 and "Traceback" not in capsys.readouterr().err
    text = (d / "results.csv").read_bytes()
    for edited in (text[: len(text) // 2], text.splitlines(keepends=True)[0], text.replace(b"step_ms", b"step_MS", 1)):
        (d / "results.csv").write_bytes(edited)
        assert run_main(report_main, [str(d)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "results.csv was edited after the run" in err
        assert verdicts_cli.main([str(d), "--tau-from", "none"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "edited" in err
        loader._RUNS.clear()
        recs = {r["path"]: r for r in loader._scan(str(d.parent))}
        assert recs[str(d)]["integrity"] == "edited"
        out = loader.left_out(str(d.parent), include_cpu=True)
        assert "edited after the run" in " ".join(out["reason"])
    (d / "results.csv").write_bytes(text)  # the negative control: the run's own file reads again
    assert run_main(report_main, [str(d)]) == 0


def test_a_committed_gzip_copy_is_checked_against_the_record_of_the_csv_it_holds(complete_run, capsys):
    """The repository keeps a committed folder's results.csv as results.csv.gz: every reader finds it, and the
    integrity check hashes its content against summary.json's record, so an edited copy is refused as a plain one
    is; the run's own content, gzipped, reads verified (the control)."""
    import gzip
    from workbench.report.__main__ import main as report_main

    d = complete_run
    text = (d / "results.csv").read_bytes()
    (d / "results.csv").unlink()
    (d / "results.csv.gz").write_bytes(gzip.compress(text.replace(b"step_ms", b"step_MS", 1), mtime=0))
    assert run_main(report_main, [str(d)]) == 2
    assert "results.csv was edited after the run" in capsys.readouterr().err
    (d / "results.csv.gz").write_bytes(gzip.compress(text, mtime=0))
    assert results.results_file(str(d)) == str(d / "results.csv.gz")
    df, _, meta = results.load_run(str(d))
    assert meta["integrity"] == "verified" and len(df) == text.count(b"\n") - 1
    assert run_main(report_main, [str(d)]) == 0


def test_a_folder_written_before_integrity_records_reads_unverified_without_failing(complete_run):
    d = complete_run
    s = json.loads((d / "summary.json").read_text())
    del s["integrity"]
    (d / "summary.json").write_text(json.dumps(s))
    assert results.load_run(str(d))[2]["integrity"] == results.UNVERIFIED


# --- analyses read, never write ---------------------------------------------------------------------------------------

def test_every_analysis_on_the_committed_headline_folders_leaves_every_file_byte_identical(tmp_path, capsys):
    from workbench.analysis import loader
    from workbench.compare import gate, rundiff_cli as diff
    from workbench.measure import power
    from workbench.report.__main__ import main as report_main
    from workbench.savings import verdicts_cli

    copies = []
    for rel in HEADLINE:
        dst = tmp_path / "profiles" / rel
        shutil.copytree(os.path.join(ROOT, "profiles", rel), dst)
        copies.append(str(dst))
    before = _snapshot(tmp_path)
    for d in copies:
        assert run_main(report_main, [d]) == 0
        assert results.load_run(d)[2]["integrity"] == results.UNVERIFIED  # committed before the records
    assert verdicts_cli.main([*copies, "--tau-from", "none"]) in (0, 1)
    run_main(diff.main, [copies[1], copies[2]])
    run_main(power.main, ["--from", copies[0], "--sims", "20"])
    assert run_main(lambda v: gate.main(v, rerun=None), ["--baseline", copies[0], "--aa", *copies[1:]]) == 2
    loader._RUNS.clear()
    loader.discover(str(tmp_path / "profiles"), include_cpu=True)
    capsys.readouterr()
    assert _snapshot(tmp_path) == before
    assert verdicts_cli.main([copies[0], "--tau-from", "none", "--write"]) in (0, 1)  # --write: beside, not over
    after = _snapshot(tmp_path)
    new = sorted(set(after) - set(before))
    assert new == [os.path.relpath(os.path.join(copies[0], "summary.verdicts.json"), tmp_path)]
    assert {k: v for k, v in after.items() if k in before} == before


# --- faults said once ---------------------------------------------------------------------------------------------

def test_a_full_disk_ends_the_run_in_one_line_rc_1_cause_in_the_marker_no_tmp(capsys, tmp_path, fakes, monkeypatch):
    calls = {"n": 0}
    real = results.RunWriter.flush

    def flush(self):
        calls["n"] += 1
        if calls["n"] >= 2:  # the first results.csv written, then the disk fills up
            tmp = os.path.join(self.out_dir, f"results.csv.tmp{os.getpid()}")
            open(tmp, "w").close()
            try:
                raise OSError(errno.ENOSPC, "No space left on device", tmp)
            finally:
                os.remove(tmp)
        real(self)
    monkeypatch.setattr(results.RunWriter, "flush", flush)
    d = tmp_path / "run"
    rc, _, err = _run(capsys, ["--opt", "packing", *FAST, "--out", str(d)])
    assert rc == 1 and "Traceback" not in err
    said = [ln for ln in err.splitlines() if "No space left on device" in ln]
    assert len(said) == 1 and said[0].startswith("failed: could not write") and "(the disk is full)" in said[0]
    assert "No space left on device" in (d / "FAILED").read_text()
    assert not (d / "RUNNING").exists() and not [n for n in os.listdir(d) if ".tmp" in n]
    assert markers.state(str(d))[0] == "failed"


def test_an_atomic_write_that_fails_leaves_the_old_file_and_no_tmp(tmp_path, monkeypatch):
    p = tmp_path / "summary.json"
    p.write_text("old")

    def full(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device", dst)
    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(OSError):
        results.atomic_write_json(str(p), {"a": 1})
    assert p.read_text() == "old" and os.listdir(tmp_path) == ["summary.json"]


def test_a_run_whose_loss_goes_non_finite_fails_its_arm_never_equivalent(capsys, tmp_path, monkeypatch):
    """--lr 1e30 (allowed here by lifting the bound the CLI enforces) sends the real tiny model's loss to NaN after
    its first update: each arm fails with "diverged at timed step N", rc 1, never "all arms equivalent"."""
    from workbench.ab import cli
    monkeypatch.setattr(cli, "LR_MAX", 1e31)
    d = tmp_path / "run"
    rc, summary, err = _run(capsys, ["--opt", "packing", "--arms", "rebuild,cached", "--tokens", "64", "--steps", "2",
                                     "--warmup", "0", "--warmup-max", "0", "--device", "cpu", "--reps", "2",
                                     "--lr", "1e30", "--out", str(d)])
    assert rc == 1
    assert "diverged at timed step 2 (rep 1): loss nan" in err and "all arms equivalent" not in err
    [c] = summary["comparisons"]
    assert c["equivalent"] is False and c["status"] == "failed"
    assert "diverged at timed step" in (d / "FAILED").read_text()


def test_diverged_and_nonfinite_name_the_first_bad_step():
    import torch
    from workbench.ab.runner import diverged, nonfinite
    s = [{"arm": "a", "rep": 0, "loss": 1.0}, {"arm": "b", "rep": 0, "loss": 1.0}, {"arm": "a", "rep": 1, "loss": float("inf")},
         {"arm": "a", "rep": 1, "loss": float("nan")}]
    assert diverged(s) == {"a": "diverged at timed step 2 (rep 2): loss inf"}
    assert nonfinite({"loss": 1.0, "grads": {"w": torch.ones(2)}}) is None
    assert nonfinite({"loss": 1.0, "grads": {"w": torch.tensor([1.0, float("nan")])}}) == "a non-finite gradient of w"


# --- conflicts refused up front: the gate -----------------------------------------------------------------------------

def test_the_gate_refuses_one_aa_folder_as_several_processes_and_a_gpu_rerun_on_a_cpu(tmp_path, capsys, monkeypatch):
    import numpy as np
    from synthetic_runs import BASELINE_ARM, write_run
    from workbench.compare import gate

    base = write_run(str(tmp_path / "base"), rng=np.random.default_rng(0))
    aa = [write_run(str(tmp_path / f"aa{i}"), rng=np.random.default_rng(100 + i),
                    arms=(BASELINE_ARM, BASELINE_ARM + "#2"), run_offset=o, rep_sd=0.002)
          for i, o in enumerate((1.0, 1.0005, 0.9995, 1.0002, 0.9998, 1.0))]

    def never(*a):
        raise AssertionError("a refused gate must not re-run")

    def refusal(argv, rerun=never):
        assert run_main(lambda v: gate.main(v, rerun=rerun), argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1, err
        return err
    assert "more than once" in refusal(["--baseline", base, "--aa", aa[0], aa[0], aa[0]])
    copy = str(tmp_path / "copy")
    shutil.copytree(aa[0], copy)
    for d in (aa[0], copy):
        m = json.load(open(os.path.join(d, "meta.json")))
        json.dump({**m, "run_id": "one-run"}, open(os.path.join(d, "meta.json"), "w"))
    assert "are one run (run id one-run)" in refusal(["--baseline", base, "--aa", aa[0], copy, aa[1]])
    monkeypatch.setattr(gate, "here_gpu", lambda: None)  # this machine: no CUDA device
    assert "has no CUDA device" in refusal(["--baseline", base, "--aa", *aa[1:]], rerun=gate.subprocess_rerun)
