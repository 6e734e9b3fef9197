"""`python -m workbench.ab ... --processes K` (workbench/ab/processes.py): the argv it hands each process, the
process-level estimate it computes from the run folders, and what it refuses before any process starts. The
processes themselves are faked (synthetic run folders written where the child would write them): no torch here."""
import json
import math
import os
import subprocess

import numpy as np
import pytest

from tests.synthetic_runs import ARM, BASELINE_ARM, COMPARISON, write_run
from workbench.ab import processes
from workbench.cli import run_main
from workbench.errors import WorkbenchError


@pytest.mark.parametrize("argv, k, rest", [
    (["--opt", "packing", "--processes", "4"], 4, ["--opt", "packing"]),
    (["--processes=3", "--reps", "5"], 3, ["--reps", "5"]),
    (["--opt", "moe"], None, ["--opt", "moe"]),
    (["--processes", "1", "--opt", "moe"], 1, ["--opt", "moe"])])
def test_split_argv(argv, k, rest):
    assert processes.split_argv(argv) == (k, rest)


@pytest.mark.parametrize("argv", [["--processes", "x"], ["--processes", "0"], ["--processes"]])
def test_split_argv_refuses_a_bad_count(argv):
    with pytest.raises(WorkbenchError, match="--processes"):
        processes.split_argv(argv)


def _runs(tmp_path, slowdowns, reps=6):
    rng = np.random.default_rng(0)
    return [write_run(str(tmp_path / f"p{i:02d}"), rng=rng, reps=reps, slowdown=s) for i, s in enumerate(slowdowns)]


def _by_hand(run, skip=0):
    import pandas as pd
    df = pd.read_csv(os.path.join(run, "results.csv"))
    out = []
    for rep, g in df[df.rep >= skip].groupby("rep"):
        out.append(math.log(g[g.arm == BASELINE_ARM].value.mean() / g[g.arm == ARM].value.mean()))
    return out


def test_the_estimate_is_the_mean_over_processes_of_each_process_mean(tmp_path):
    """exp(mean over processes of each process's mean log ratio), K processes, and a prediction interval wider than
    the CI; a process effect (the slowdown differs per process) shows as tau, none as tau near 0 (the control)."""
    runs = _runs(tmp_path, [1.02, 1.06, 1.03, 1.08])
    (row,) = processes.aggregate(runs)
    means = [np.mean(_by_hand(r)) for r in runs]
    assert row["processes"] == row["K"] == 4 and row["R"] == [6] * 4
    assert row["speedup"] == pytest.approx(math.exp(np.mean(means)), rel=1e-12)
    assert row["pi95"][0] < row["ci95"][0] < row["ci95"][1] < row["pi95"][1]
    assert row["tau"] > 0.01
    (flat,) = processes.aggregate(_runs(tmp_path / "flat", [1.05] * 4))
    assert flat["tau"] < row["tau"] / 3


def test_the_estimate_carries_its_comparisons_own_wall_time(tmp_path):
    """Each process's summary names every comparison's wall time (`wall_s`): the estimate sums its own comparison's
    over the processes (a process that ran several comparisons, `--opt all`, does not charge them all to one); a
    process without it (an older run) leaves the sum out."""
    runs = _runs(tmp_path, [1.02, 1.06, 1.03])
    for i, r in enumerate(runs):
        p = os.path.join(r, "summary.json")
        s = json.load(open(p))
        for c in s["comparisons"]:
            c["wall_s"] = 10.0 + i
        s["comparisons"].append({"name": "other", "wall_s": 500.0})
        json.dump(s, open(p, "w"))
    (row,) = processes.aggregate(runs)
    assert row["wall_s"] == 33.0
    s = json.load(open(os.path.join(runs[0], "summary.json")))
    del s["comparisons"][0]["wall_s"]
    json.dump(s, open(os.path.join(runs[0], "summary.json"), "w"))
    assert processes.aggregate(runs)[0]["wall_s"] is None


def test_skip_reps_leaves_the_first_reps_out(tmp_path):
    (run,) = _runs(tmp_path, [1.05])
    assert processes.per_rep_log_ratios(run, COMPARISON, BASELINE_ARM, ARM) == pytest.approx(_by_hand(run))
    assert processes.per_rep_log_ratios(run, COMPARISON, BASELINE_ARM, ARM, skip_reps=1) == \
        pytest.approx(_by_hand(run, skip=1))
    assert len(_by_hand(run, skip=1)) == 5


def test_one_process_gives_no_process_level_interval(tmp_path):
    (row,) = processes.aggregate(_runs(tmp_path, [1.05]))
    assert "speedup" not in row and row["why"].startswith("1 process(es)")


def test_main_runs_k_processes_with_their_seeds_and_writes_the_estimate(tmp_path, monkeypatch, capsys):
    seen = []

    def fake_run(cmd, stdout=None, stderr=None):
        seen.append(cmd)
        out = cmd[cmd.index("--out") + 1]
        seed = int(cmd[cmd.index("--seed") + 1])
        write_run(out, rng=np.random.default_rng(seed), reps=4, slowdown=1.03 + 0.01 * seed)
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(processes.subprocess, "run", fake_run)
    out = str(tmp_path / "camp")
    assert processes.main(["--opt", "packing", "--device", "cpu", "--seed", "5", "--processes", "3", "--out", out]) == 0
    assert [c[c.index("--seed") + 1] for c in seen] == ["5", "6", "7"]
    assert all(c.count("--seed") == 1 and c.count("--out") == 1 and "--processes" not in c for c in seen)
    rec = json.load(open(os.path.join(out, "processes.json")))
    assert [p["folder"] for p in rec["processes"]] == ["p00", "p01", "p02"]
    (est,) = rec["estimates"]
    assert est["K"] == 3 and est["population"] == "a rerun"
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2].startswith("complete: 3/3 processes") and json.loads(lines[-1])["out"] == out


def test_same_process_seeds_give_every_process_the_one_seed_and_say_so(tmp_path, monkeypatch):
    """--process-seeds same: one model and its batches in every process (only the process varies); the record says
    which; the default (each) is the control above: 5, 6, 7. A value it does not know is refused in one line."""
    seen = []

    def fake_run(cmd, stdout=None, stderr=None):
        seen.append(cmd)
        write_run(cmd[cmd.index("--out") + 1], rng=np.random.default_rng(len(seen)), reps=4, slowdown=1.03)
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(processes.subprocess, "run", fake_run)
    out = str(tmp_path / "same")
    assert processes.main(["--opt", "packing", "--device", "cpu", "--seed", "5", "--processes", "3",
                           "--process-seeds", "same", "--out", out]) == 0
    assert [c[c.index("--seed") + 1] for c in seen] == ["5", "5", "5"]
    rec = json.load(open(os.path.join(out, "processes.json")))
    assert rec["process_seeds"] == "same" and [p["seed"] for p in rec["processes"]] == [5, 5, 5]
    with pytest.raises(WorkbenchError, match="process-seeds"):
        processes.main(["--opt", "packing", "--device", "cpu", "--processes", "2", "--process-seeds", "one",
                        "--out", str(tmp_path / "bad")])


def test_main_refuses_a_full_out_folder_before_any_process(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(processes.subprocess, "run", lambda *a, **k: pytest.fail("no process may start"))
    (tmp_path / "old.txt").write_text("x")
    assert run_main(processes.main, ["--opt", "packing", "--processes", "2", "--out", str(tmp_path)]) == 2
    assert "holds files already" in capsys.readouterr().err
    assert run_main(processes.main, ["--opt", "bogus", "--processes", "2", "--out", str(tmp_path / "n")]) == 2
    assert not (tmp_path / "n").exists()
    # what preflight refuses for one run (an MoE optimization on a dense model) it refuses for K, before any
    assert run_main(processes.main, ["--opt", "moe", "--model", "tiny-qwen3", "--processes", "2", "--out",
                                     str(tmp_path / "m")]) == 2
    assert not (tmp_path / "m").exists()


def test_finish_summarises_an_interrupted_campaign_from_its_clean_processes_only(tmp_path):
    """A campaign cut by a deadline keeps processes.json without estimates; `finish` estimates over the processes
    it records with rc 0 and names the folder that was running when it stopped. The control: the stray folder's
    very different slowdown would move the estimate if it were pooled."""
    runs = _runs(tmp_path, [1.03, 1.04, 1.05, 1.60])
    rec = {"command": "python -m workbench.ab --opt packing --processes 4 --out X",
           "processes": [{"folder": f"p0{i}", "seed": i, "rc": 0, "wall_s": 1.0} for i in range(3)]}
    (tmp_path / "processes.json").write_text(json.dumps(rec))
    out = processes.finish(str(tmp_path))
    (est,) = out["estimates"]
    assert est["K"] == 3 and est["folders"] == ["p00", "p01", "p02"]
    (pooled,) = processes.aggregate(runs)
    assert abs(math.log(est["speedup"] / pooled["speedup"])) > 0.05
    assert est["speedup"] == processes.aggregate(runs[:3])[0]["speedup"]
    assert out["note"].endswith("3 of 4 planned processes ran cleanly; left out, stopped mid-run: p03")
    assert json.load(open(tmp_path / "processes.json"))["estimates"][0]["K"] == 3


def test_finish_refuses_a_folder_that_is_not_a_campaign(tmp_path, capsys):
    assert run_main(processes.finish, str(tmp_path)) == 2
    assert "not a --processes campaign folder" in capsys.readouterr().err


def test_planned_sums_the_campaigns_a_merge_folded():
    """processes_merge joins its campaigns' commands with " ; ": the plan is their sum (a merged 8-process folder read
    "8 of 2 planned" on 2026-11-27), and a command without K says nothing."""
    one = "python -m workbench.ab --opt moe --processes 2 --seed 4000 --out a"
    assert processes.planned(one) == 2
    assert processes.planned(" ; ".join([one, one.replace("4000", "4002"), one.replace("2 --seed", "3 --seed")])) == 7
    assert processes.planned("python -m workbench.ab --opt moe") is None


def test_abbreviated_processes_is_refused_in_one_line():
    """argparse's prefix matching is off in every CLI: `--processe 2` is an unknown flag (exit 2, one line), never a
    run of one process that records processes: 2."""
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "workbench.ab", "--processe", "2", "--device", "cpu"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().count("\n") == 0 and "--processe" in r.stderr


def test_processes_read_from_the_parse(monkeypatch):
    from workbench.ab import __main__ as ab_main
    seen = {}
    monkeypatch.setattr(processes, "main", lambda argv, cfg: seen.update(argv=argv, k=cfg.processes) or 0)
    assert ab_main._run(["--processes=2", "--device", "cpu"]) == 0
    assert seen == {"argv": ["--processes=2", "--device", "cpu"], "k": 2}


def test_every_parser_refuses_abbreviations():
    import ast
    import pathlib
    from workbench.cli import OneLineParser
    assert OneLineParser(prog="x").allow_abbrev is False
    root = pathlib.Path(__file__).resolve().parents[1] / "workbench"
    loose = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None))
                    in ("ArgumentParser", "add_parser")
                    and not any(k.arg == "allow_abbrev" for k in node.keywords)):
                loose.append(f"{path.relative_to(root)}:{node.lineno}")
    assert loose == []
