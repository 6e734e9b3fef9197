"""studies/heldout_replication/design_spread.py: a held-out design for one comparison from two or more machines' --processes folders (the
generic form of the frozen prospective_v3.py / v4.py records), checked against the committed v3 it must reproduce."""
import json
import os

from workbench.paths import REPO_ROOT
import pytest

from workbench.cli import run_main

ROOT = REPO_ROOT
P = os.path.join(ROOT, "profiles")
A = "A=" + os.path.join("profiles", "2026-11-26_h100_replication", "moe_a") + ":1"
with open(os.path.join(P, "2026-11-26_h100_replication", "prospective.json"), encoding="utf-8") as _f:
    MACHINE_A = json.load(_f)["machines"]["A"]  # machine A's GPU, as the committed design names it
D = "D=" + os.path.join("profiles", "2026-11-26_h100_prospective2", "moe")


def _tool():
    from studies.heldout_replication import design_spread
    return design_spread


def test_it_reproduces_the_committed_v3_design_from_the_same_folders(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    out = tmp_path / "prospective_v3.json"
    assert run_main(_tool().main, ["--comparison", "moe", "--machine", A, "--machine", D, "--uuid", "A=" + MACHINE_A,
                                   "--seed", "500", "--version", "3", "--out", str(out)]) == 0
    got = json.loads(out.read_text())["comparisons"]["moe"]
    with open(os.path.join(P, "2026-11-26_h100_prospective2", "prospective_v3.json"), encoding="utf-8") as f:
        want = json.load(f)["comparisons"]["moe"]
    assert got["prediction"]["pi95"] == want["prediction"]["pi95"] and got["folders"] == want["folders"]
    assert got["heldout_plan"]["null"] == want["heldout_plan"]["null"] and got["heldout_plan"]["M"] == 4
    assert (got["baseline"], got["arm"], got["model"]) == ("eager", "sort_bincount", "spread")
    assert "--processes 4 --seed 500" in got["heldout_plan"]["command"] and "--out" not in got["heldout_plan"]["command"]


@pytest.mark.parametrize("argv, msg", [
    (["--machine", D], "at least 2 machines"),
    (["--machine", A, "--machine", D], "no GPU UUID"),  # A's runs recorded none, and no --uuid
    (["--machine", A, "--machine", D, "--uuid", "A=" + MACHINE_A, "--comparison", "nope"], "no comparison 'nope'"),
    (["--machine", D, "--machine", "E=" + D.split("=")[1]], "same GPU"),  # one machine's folder named twice
])
def test_what_it_refuses_in_one_line(tmp_path, monkeypatch, capsys, argv, msg):
    monkeypatch.chdir(ROOT)
    base = {"--comparison": "moe"}
    if "--comparison" in argv:
        base = {}
    args = [x for k, v in base.items() for x in (k, v)] + argv + ["--seed", "1", "--version", "5", "--out",
                                                                    str(tmp_path / "prospective_v5.json")]
    assert run_main(_tool().main, args) == 2
    assert msg in capsys.readouterr().err and not (tmp_path / "prospective_v5.json").exists()


def test_the_held_out_command_is_the_estimates_with_new_processes_and_seeds():
    t = _tool()
    c = "python -m workbench.ab --opt all --headline --reps 3 --processes 4 --seed 600 --out /tmp/x"
    assert t.held_out_command(c, 4, 700) == "python -m workbench.ab --opt all --headline --reps 3 --processes 4 --seed 700"
    assert t.held_out_command("python -m workbench.ab --opt moe --processes 2", 6, 9).endswith("--processes 6 --seed 9")
