"""Processes of one record that ran in different environments say so (the `nvtx` wheel deleted mid-campaign,
so p00-p01 ran with it and p02-p05 without): `results.environment_diff`, and where it is used (`--processes K`'s
summary, the process verdicts, the dose analysis), and the NVTX backend a run records. Tiny synthetic folders, no
model runs; each check has its negative control (identical environments: no flag)."""
import json
import os
import subprocess

import numpy as np
import pytest

from tests.synthetic_runs import ARM, BASELINE_ARM, COMPARISON, write_run
from workbench.measure import results

VERSIONS = {"python": "3.12.3", "torch": "2.11.0", "transformers": "5.17.0", "nvtx": "0.2.17", "cuda": "13.0"}


def _set_env(run_dir, **versions):
    """Give a synthetic run folder's meta.json the recorded environment, `versions` overriding VERSIONS."""
    path = os.path.join(run_dir, "meta.json")
    meta = json.load(open(path))
    meta["versions"] = {**VERSIONS, **versions}
    meta["args"]["precision"] = "autocast"
    json.dump(meta, open(path, "w"))


def _folder(tmp_path, k=6, without_nvtx=()):
    dirs = [write_run(str(tmp_path / f"p{i:02d}"), rng=np.random.default_rng(i), reps=4) for i in range(k)]
    for i, d in enumerate(dirs):
        _set_env(d, **({"nvtx": None} if i in without_nvtx else {}))
    return dirs


def test_a_process_without_nvtx_is_flagged_and_identical_ones_are_not(tmp_path):
    dirs = _folder(tmp_path / "mixed", without_nvtx=(2, 3, 4, 5))
    env = results.environment_diff(dirs)
    assert env["mixed"] and env["processes"] == 6 and set(env["differ"]) == {"nvtx", "nvtx_backend"}
    assert env["differ"]["nvtx"] == [{"value": "0.2.17", "processes": ["p00", "p01"]},
                                     {"value": None, "processes": ["p02", "p03", "p04", "p05"]}]
    assert env["line"] == ("mixed environment: nvtx 0.2.17 in p00-p01, none in p02-p05; nvtx_backend nvtx in "
                           "p00-p01, torch.cuda.nvtx in p02-p05")
    same = results.environment_diff(_folder(tmp_path / "same"))  # the negative control
    assert not same["mixed"] and same["differ"] == {} and same["line"] is None


def test_sha_gpu_uuid_and_precision_count_and_an_unrecorded_key_does_not(tmp_path):
    dirs = _folder(tmp_path, k=3)
    metas = [json.load(open(os.path.join(d, "meta.json"))) for d in dirs]
    metas[1]["git_sha"] = "beef"
    metas[2]["args"]["precision"] = "fp32"
    metas[0]["device"]["uuid"] = "GPU-aaaa"  # recorded by p00 only: not compared (older runs lack it)
    for d, m in zip(dirs, metas):
        json.dump(m, open(os.path.join(d, "meta.json"), "w"))
    env = results.environment_diff(dirs)
    assert set(env["differ"]) == {"git_sha", "precision"}
    assert "git_sha c0ffee in p00, p02, beef in p01" in env["line"]
    metas[1]["device"]["uuid"] = metas[2]["device"]["uuid"] = "GPU-bbbb"
    for d, m in zip(dirs, metas):
        json.dump(m, open(os.path.join(d, "meta.json"), "w"))
    assert "gpu_uuid GPU-aaaa in p00, GPU-bbbb in p01-p02" in results.environment_diff(dirs)["line"]


def test_the_nvtx_backend_is_recorded_or_inferred(monkeypatch):
    from workbench.instrument import ranges

    assert results.nvtx_backend_of({"instrument": {"nvtx_backend": "off"}, "versions": {"nvtx": "0.2.17"}}) == "off"
    assert results.nvtx_backend_of({"versions": {"nvtx": "0.2.17"}}) == "nvtx"
    assert results.nvtx_backend_of({"versions": {"nvtx": None}, "device": {"type": "cuda"}}) == "torch.cuda.nvtx"
    assert results.nvtx_backend_of({"versions": {"nvtx": None}, "device": {"type": "cpu"}}) == "off"
    assert results.nvtx_backend_of({}) is None
    monkeypatch.setattr(ranges, "_nvtx_pkg", None)
    monkeypatch.setattr(ranges.torch.cuda, "is_available", lambda: True)
    assert ranges.nvtx_backend() == "torch.cuda.nvtx"
    monkeypatch.setattr(ranges.torch.cuda, "is_available", lambda: False)
    assert ranges.nvtx_backend() == "off" and not ranges.Ranges(nvtx=True, profiler=False).nvtx


def test_a_run_folder_records_the_backend_its_ranges_use(tmp_path):
    from workbench.instrument.ranges import nvtx_backend

    w = results.RunWriter(str(tmp_path / "r"), "rid", argv=["x"])
    w.finish("complete")
    meta = json.load(open(tmp_path / "r" / "meta.json"))
    assert meta["instrument"] == {"nvtx_backend": nvtx_backend()}
    assert results.nvtx_backend_of(meta) == nvtx_backend()


@pytest.mark.parametrize("mixed", [True, False])
def test_processes_summary_says_mixed_environment(tmp_path, monkeypatch, capsys, mixed):
    from workbench.ab import processes

    def fake_run(cmd, stdout=None, stderr=None):
        out, seed = cmd[cmd.index("--out") + 1], int(cmd[cmd.index("--seed") + 1])
        write_run(out, rng=np.random.default_rng(seed), reps=4, slowdown=1.03)
        _set_env(out, **({"nvtx": None} if mixed and seed >= 2 else {}))  # the wheel gone from the third process on
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(processes.subprocess, "run", fake_run)
    out = str(tmp_path / "camp")
    assert processes.main(["--opt", "packing", "--device", "cpu", "--processes", "4", "--out", out]) == 0
    rec = json.load(open(os.path.join(out, "processes.json")))
    stdout = capsys.readouterr().out
    assert rec["environment"]["mixed"] is mixed
    line = "mixed environment: nvtx 0.2.17 in p00-p01, none in p02-p03"
    assert (line in stdout) is mixed and (rec["environment"]["line"] or "").startswith(line) is mixed
    assert [p["folder"] for p in rec["processes"]] == ["p00", "p01", "p02", "p03"]


@pytest.mark.parametrize("mixed", [True, False])
def test_process_verdicts_carry_the_flag(tmp_path, monkeypatch, mixed):
    from workbench.savings import process_verdicts, verdicts

    dirs = _folder(tmp_path, k=3, without_nvtx=(2,) if mixed else ())
    json.dump({"processes": [{"folder": os.path.basename(d), "rc": 0} for d in dirs]},
              open(tmp_path / results.PROCESSES_FILE, "w"))
    monkeypatch.setattr(verdicts, "annotate", lambda d, inputs=None: [])  # each process's own verdicts: not here
    monkeypatch.setattr(process_verdicts, "comparison", lambda name, per, inputs, gpus=None: {"verdict": "confirmed"})
    rows = process_verdicts.annotate(str(tmp_path))
    doc = json.load(open(tmp_path / process_verdicts.OUT_FILE))
    assert doc["environment"]["mixed"] is mixed and len(rows) == 1 and rows[0]["verdict"] == "confirmed"
    want = "mixed environment: nvtx 0.2.17 in p00-p01, none in p02" if mixed else None
    assert (rows[0]["mixed_environment"] or "").startswith(want or "x") is mixed
    assert (rows[0]["mixed_environment"] is None) is not mixed


def _dose_folder(root, without_nvtx=()):
    """A `workbench.ab.dose` folder: 3 untimed processes of two levels (0 and 4 units), no traced pass."""
    procs = []
    for i in range(3):
        d = write_run(os.path.join(root, "none", f"p{i:02d}"), rng=np.random.default_rng(i), reps=4, slowdown=0.98)
        _set_env(d, **({"nvtx": None} if i in without_nvtx else {}))
        json.dump({"comparison": COMPARISON, "opt": "packing", "arms": {BASELINE_ARM: 0, ARM: 4}},
                  open(os.path.join(d, "dose.json"), "w"))
        json.dump({"comparisons": [{"name": COMPARISON, "baseline": {"arm": BASELINE_ARM, "syncs_per_step": 10},
                                    "optimized": {"arm": ARM, "syncs_per_step": 2}}]},
                  open(os.path.join(d, "summary.json"), "w"))
        procs.append({"timing": "none", "folder": f"none/p{i:02d}", "rc": 0})
    json.dump({"opt": "packing", "unit": "builds", "units": [0, 4], "processes": procs, "traced": None},
              open(os.path.join(root, "dose_run.json"), "w"))
    return root


def test_a_dose_folder_whose_processes_differ_says_so(tmp_path):
    from workbench.savings import dose_fit as dose

    a = dose.analyse(_dose_folder(str(tmp_path / "m"), without_nvtx=(1,)))
    assert a["modes"]["none"]["K"] == 3  # the slopes stand beside the flag
    assert a["environment"]["line"].startswith("mixed environment: nvtx 0.2.17 in none/p00, none/p02, none in none/p01")
    assert "mixed environment: nvtx" in dose.table(a)
    same = dose.analyse(_dose_folder(str(tmp_path / "s")))  # the negative control
    assert not same["environment"]["mixed"] and "mixed environment" not in dose.table(same)


def test_the_torch_backend_can_be_forced_for_the_ab(monkeypatch):
    """$WORKBENCH_NVTX_BACKEND=torch.cuda.nvtx takes torch's ranges although the package is installed (the A/B of
    studies/heldout_replication/nvtx_ab.sh); unset, the package's; another value is one line."""
    import pytest
    from workbench.errors import WorkbenchError
    from workbench.instrument import ranges
    monkeypatch.setattr(ranges, "_nvtx_pkg", object())
    monkeypatch.delenv(ranges.FORCE_TORCH_NVTX_ENV, raising=False)
    assert ranges.nvtx_backend() == "nvtx"  # the negative control: nothing forced
    monkeypatch.setenv(ranges.FORCE_TORCH_NVTX_ENV, "torch.cuda.nvtx")
    monkeypatch.setattr(ranges.torch.cuda, "is_available", lambda: True)
    assert ranges.nvtx_backend() == "torch.cuda.nvtx"
    monkeypatch.setenv(ranges.FORCE_TORCH_NVTX_ENV, "nsight")
    with pytest.raises(WorkbenchError, match="WORKBENCH_NVTX_BACKEND"):
        ranges.nvtx_backend()
