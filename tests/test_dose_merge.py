"""`python -m workbench.ab.dose_merge`: processes of later dose runs folded into one folder, checked first."""
import json
import os

import pytest

from workbench.ab import dose_merge
from workbench.errors import WorkbenchError


def _dose(root, name, *, opt="moe", units=(0, 2, 4), layers=4, folders=("none/p00",), uuid="GPU-a", commit="abc1234"):
    d = root / name
    procs = []
    for f in folders:
        (d / f).mkdir(parents=True)
        (d / f / "meta.json").write_text(json.dumps({"args": {"model": "gpt-oss-20b", "layers": layers,
                                                              "tokens": 8192}, "device": {"uuid": uuid}}))
        (d / f"{f}.log").write_text("log")
        procs.append({"timing": f.split("/")[0], "folder": f, "seed": 0, "rc": 0})
    (d / "dose_run.json").write_text(json.dumps({"command": f"cmd {name}", "opt": opt, "unit": "u", "units": list(units),
                                                 "commit": commit, "traced": folders[0], "processes": procs}))
    return str(d)


def test_processes_land_in_the_next_free_folders_with_their_machine(tmp_path):
    into = _dose(tmp_path, "into", folders=("none/p00", "none/p10"))
    src = _dose(tmp_path, "src", folders=("none/p00", "torch/p00"), uuid="GPU-new", commit="def5678aaa")
    assert dose_merge.main([into, src]) == 0
    run = json.load(open(os.path.join(into, "dose_run.json")))
    new = run["processes"][2:]
    assert [p["folder"] for p in new] == ["none/p01", "torch/p00"]
    assert all(p["machine"] == "GPU-new" for p in new) and run["traced"] == "none/p00"
    assert os.path.isfile(os.path.join(into, "none/p01/meta.json")) and os.path.isfile(os.path.join(into, "none/p01.log"))
    assert run["command"] == "cmd into ; cmd src" and "def5678" in run["merged_note"]


@pytest.mark.parametrize("kw, msg", [({"opt": "packing"}, "opt"), ({"units": (0, 1, 2)}, "units"),
                                     ({"layers": 8}, "model, layers, tokens")])
def test_another_dose_response_is_refused_before_anything_is_copied(tmp_path, kw, msg):
    into = _dose(tmp_path, "into")
    before = open(os.path.join(into, "dose_run.json")).read()
    src = _dose(tmp_path, "src", **kw)
    with pytest.raises(WorkbenchError, match=msg):
        dose_merge.merge(into, [src])
    assert open(os.path.join(into, "dose_run.json")).read() == before
    assert sorted(os.listdir(os.path.join(into, "none"))) == ["p00", "p00.log"]
