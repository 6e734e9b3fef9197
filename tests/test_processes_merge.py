"""`python -m workbench.ab.processes_merge`: `--processes` campaigns of one command (one per GPU of a host, or one per
lease) folded into one process population, checked first. Synthetic run folders, no torch."""
import json
import math
import os

import numpy as np
import pytest

from tests.synthetic_runs import write_run
from workbench.ab import processes, processes_merge
from workbench.cli import run_main
from workbench.errors import WorkbenchError

CMD = "python -m workbench.ab --opt moe --model gpt-oss-20b --layers 8 --tokens 4096 --reps 4 --processes {k} --seed {s} --out {o}"


def _campaign(root, name, slowdowns, seed, *, mode="each", cmd=CMD, rc=None, rng_seed=0):
    d = root / name
    rng = np.random.default_rng(rng_seed)
    procs = []
    for i, s in enumerate(slowdowns):
        write_run(str(d / f"p{i:02d}"), rng=rng, reps=6, slowdown=s)
        (d / f"p{i:02d}.log").write_text("log")
        procs.append({"folder": f"p{i:02d}", "seed": seed + (i if mode == "each" else 0), "rc": (rc or {}).get(i, 0),
                      "wall_s": 1.0})
    rec = {"command": cmd.format(k=len(slowdowns), s=seed, o=name), "process_seeds": mode, "processes": procs}
    (d / "processes.json").write_text(json.dumps(rec))
    return str(d)


def test_the_merged_estimate_is_the_estimate_over_every_clean_process(tmp_path):
    """Two GPUs' campaigns (seeds 100-101 and 200-202) become p00-p04 of one; the estimate equals `aggregate` over
    the five folders as written, and differs from INTO's own (the control: a merge that dropped SRC would pass
    neither)."""
    into = _campaign(tmp_path, "g0", [1.03, 1.05], 100)
    src = _campaign(tmp_path, "g1", [1.10, 1.12, 1.08], 200, rng_seed=1)
    alone = processes.aggregate([os.path.join(into, "p00"), os.path.join(into, "p01")])[0]["speedup"]
    rec = processes_merge.merge(into, [src])
    assert [p["folder"] for p in rec["processes"]] == ["p00", "p01", "p02", "p03", "p04"]
    assert [p["seed"] for p in rec["processes"]] == [100, 101, 200, 201, 202]
    assert rec["processes"][2]["merged_from"].endswith("g1 p00") and os.path.isfile(os.path.join(into, "p04.log"))
    (est,) = rec["estimates"]
    assert est["K"] == 5
    expect = processes.aggregate([os.path.join(into, f"p{i:02d}") for i in range(5)])[0]["speedup"]
    assert est["speedup"] == pytest.approx(expect, rel=1e-12)
    assert abs(math.log(est["speedup"] / alone)) > 0.02
    assert json.load(open(os.path.join(into, "processes.json")))["estimates"][0]["K"] == 5
    assert " ; " in rec["command"] and "2 more" not in rec["merged_note"]


def test_a_process_that_did_not_end_cleanly_is_left_out_and_counted(tmp_path):
    into = _campaign(tmp_path, "g0", [1.03, 1.05], 100)
    src = _campaign(tmp_path, "g1", [1.04, 1.90], 200, rc={1: 137})
    rec = processes_merge.merge(into, [src])
    assert rec["estimates"][0]["K"] == 3 and "1 that did not end cleanly left out" in rec["merged_note"]


@pytest.mark.parametrize("kw, msg", [
    ({"cmd": CMD.replace("--layers 8", "--layers 4")}, "not .* up to --seed"),
    ({"mode": "same"}, "--process-seeds same against"),
    ({"seed": 101}, "seed 101 is already in")])
def test_another_campaign_is_refused_before_anything_is_copied(tmp_path, kw, msg):
    into = _campaign(tmp_path, "g0", [1.03, 1.05], 100)
    before = open(os.path.join(into, "processes.json")).read()
    src = _campaign(tmp_path, "g1", [1.04], kw.pop("seed", 200), **kw)
    with pytest.raises(WorkbenchError, match=msg):
        processes_merge.merge(into, [src])
    assert open(os.path.join(into, "processes.json")).read() == before
    assert sorted(x for x in os.listdir(into) if not x.endswith(".log")) == ["p00", "p01", "processes.json"]


def test_same_seed_campaigns_merge_only_with_their_one_seed(tmp_path):
    into = _campaign(tmp_path, "g0", [1.03, 1.05], 900, mode="same")
    ok = _campaign(tmp_path, "g1", [1.04], 900, mode="same")
    assert processes_merge.merge(into, [ok])["estimates"][0]["K"] == 3
    other = _campaign(tmp_path, "g2", [1.04], 901, mode="same")
    with pytest.raises(WorkbenchError, match="share one seed"):
        processes_merge.merge(into, [other])


def test_the_cli_refuses_a_plain_folder_and_itself_in_one_line(tmp_path, capsys):
    into = _campaign(tmp_path, "g0", [1.03, 1.05], 100)
    assert run_main(processes_merge.main, [into, str(tmp_path)]) == 2
    assert "holds no processes.json" in capsys.readouterr().err
    assert run_main(processes_merge.main, [into, into]) == 2
    assert "into itself" in capsys.readouterr().err
