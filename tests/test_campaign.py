"""workbench.campaign: the jobs and suites (each job a configuration of `python -m workbench.ab`), the dry run, the
bookkeeping of skips / failures / timeouts in commands.json, and one smoke job end to end on the CPU."""
from __future__ import annotations

import json
import os

import pytest

from workbench.errors import WorkbenchError
import torch

from workbench import ab, campaign
from workbench.opts import registry

EXPECTED_JOBS = ["ab_all", "ab_aa", "nvtx_cost", "packing_sweep", "offload_tokens", "ab_torch",
                 *[f"ab_{o}_nsys" for o in registry.in_all_names()], "ab_witness", "witness_ops",
                 "ab_traced", "offload_sweep", "packing_sweep_l1", "packing_sweep_llama", "offload_sweep_qwen3",
                 "all_traced", "offload_first_reload", "offload_first_reload_qwen3", "repeat_a", "repeat_b",
                 "fidelity_llama", "fidelity_moe"]


def test_campaign_plan_and_dry_run(tmp_path, capsys):
    jobs = campaign.plan(str(tmp_path), "all")
    assert [j.name for j in jobs] == EXPECTED_JOBS == campaign.JOBS
    cmds = {j.name: j.command for j in jobs}
    assert cmds["ab_all"] == f"python -m workbench.ab --opt all --out {tmp_path}/ab_all"
    assert cmds["ab_aa"] == f"python -m workbench.ab --opt packing --aa --reps 6 --out {tmp_path}/ab_aa"
    assert cmds["nvtx_cost"] == f"python -m workbench.ab --opt all --nvtx-cost only --out {tmp_path}/nvtx_cost"
    assert cmds["packing_sweep"] == (f"python -m workbench.ab --opt packing --sweep layers=4,8,16,28 "
                                     f"--out {tmp_path}/packing_sweep")
    assert cmds["offload_tokens"] == ("python -m workbench.ab --opt offload --arms sync_reload,double_buffer,"
                                      f"no_offload --sweep tokens=16384,32768 --out {tmp_path}/offload_tokens")
    assert cmds["ab_torch"] == f"python -m workbench.ab --opt all --trace torch --reps 1 --out {tmp_path}/ab_torch"
    for opt in ("packing", "offload", "moe"):
        assert cmds[f"ab_{opt}_nsys"] == (f"python -m workbench.ab --opt {opt} --trace nsys --reps 1 "
                                          f"--out {tmp_path}/ab_{opt}_nsys")
    assert cmds["ab_witness"] == f"python -m workbench.ab --opt all --cross-check --reps 1 --out {tmp_path}/ab_witness"
    assert cmds["witness_ops"] == "python -m workbench.bench.witness"
    assert cmds["repeat_a"] == f"python -m workbench.ab --opt all --headline --out {tmp_path}/repeat_a"
    assert cmds["repeat_b"] == f"python -m workbench.ab --opt all --headline --trace torch --out {tmp_path}/repeat_b"
    assert cmds["fidelity_llama"] == (f"python -m workbench.fidelity --model llama-3.1-8b --layers 8 --tokens 16384 "
                                      f"--out {tmp_path}/fidelity_llama")
    by = {j.name: j for j in jobs}
    assert by["witness_ops"].stdout_json == "witness.json" and by["witness_ops"].out == f"{tmp_path}/witness_ops"
    assert {j.name for j in jobs if j.needs == "cuda+nsys"} == set(campaign.NSYS_JOBS)
    limits = {j.name: j.min_timeout_s for j in jobs}
    assert limits["ab_all"] == campaign.AB_ALL_TIMEOUT_S and limits["ab_aa"] == 0
    smoke = {j.name: j for j in campaign.plan(str(tmp_path), "ab,nsys", smoke=True)}
    assert list(smoke) == ["ab_all", "ab_aa", *campaign.NSYS_JOBS]
    assert "--tokens" in smoke["ab_all"].args and "--device" in smoke["ab_all"].args
    assert "needs a CUDA device" in campaign.skip_reason(smoke["ab_packing_nsys"])
    with pytest.raises(WorkbenchError, match="unknown suite"):
        campaign.plan(str(tmp_path), "nope")
    assert campaign.main(["--out", str(tmp_path), "--suite", "ab", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == [cmds["ab_all"], cmds["ab_aa"]]
    assert not os.path.exists(tmp_path / "commands.json")


def test_suites_name_jobs_in_run_order():
    assert campaign.SUITES["all"] == campaign.JOBS
    assert campaign.SUITES["ab"] == ["ab_all", "ab_aa"]
    assert campaign.SUITES["sweeps"] == ["nvtx_cost", "packing_sweep", "offload_tokens"]
    assert campaign.SUITES["nsys"] == campaign.NSYS_JOBS
    assert campaign.SUITES["witness"] == ["ab_witness", "witness_ops"]
    assert all("--trace" in campaign.AB_ARGS[j] for j in campaign.SUITES["verdicts"])
    # the smoke versions run the CPU defaults' tiny presets, never an 8B preset on a CPU
    smoke = campaign.plan("/tmp/x", "verdicts", smoke=True)
    assert all("--model" not in j.argv for j in smoke)
    for name, jobs in campaign.SUITES.items():
        assert set(jobs) <= set(campaign.JOBS), name
    for j in campaign.JOBS:
        assert campaign.SUITES[j] == [j]
    # a comma list: each job once, in the order named
    assert [j.name for j in campaign.plan("/x", "witness,ab_witness,ab_aa")] == ["ab_witness", "witness_ops", "ab_aa"]


@pytest.mark.parametrize("smoke", [False, True])
def test_every_ab_job_is_a_valid_engine_configuration(smoke):
    """Each A/B job's flags parse (and, with --smoke, plan) with the current `workbench.ab` CLI. Catches a job that
    names a flag or value the engine no longer takes: it would only fail hours into a GPU campaign."""
    for job in campaign.plan("/tmp/campaign-test", "all", smoke=smoke):
        if job.module != "workbench.ab":
            continue
        a = ab.parse_args(job.args)
        assert a.out == job.out
        if smoke:
            assert a.device == "cpu" and a.reps == 1 and a.steps == 1 and a.warmup_max == 0, job.name
            a = a.resolved(torch.device("cpu"), ab.CPU_DEFAULTS["_run"])  # what ab.main fills in per device
            comps = ab.plan(a, torch.device("cpu"))
            assert comps, job.name
            if a.sweep:
                assert len(comps) == 2, job.name  # the smoke sweeps have two values


def test_dry_run_smoke_lists_the_tiny_commands(tmp_path, capsys):
    d = tmp_path / "c"
    assert campaign.main(["--out", str(d), "--dry-run", "--smoke"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(campaign.JOBS)
    for ln, name in zip(lines, campaign.JOBS):
        assert ln.startswith("python -m "), ln
        if name == "witness_ops":
            assert "# skipped" in ln
            continue
        if name in campaign.FIDELITY_JOBS:
            assert f"--out {d}/{name}" in ln and "--device cpu" in ln
            continue
        assert f"--out {d}/{name}" in ln and "--device cpu" in ln and "--reps 1" in ln and "--steps 1" in ln
        assert ("# skipped: --trace nsys needs a CUDA device" in ln) == (name in campaign.NSYS_JOBS)
    assert "--sweep layers=1,2" in lines[campaign.JOBS.index("packing_sweep")]
    assert "--sweep tokens=64,128" in lines[campaign.JOBS.index("offload_tokens")]
    assert "--tokens" not in lines[campaign.JOBS.index("offload_tokens")]  # the sweep sets the tokens
    assert not d.exists()  # a dry run writes nothing


SMOKE_ARGV = ["--suite", "ab_aa", "--smoke", "--timeout-s", "300"]


def early_start(tmp_path_factory, items):
    """The smoke job's campaign, `python -m workbench.campaign` in its own process, started at collection
    (conftest's pytest_collection_finish): it runs beside the tests before this file instead of being waited for
    here (the campaign's other tests call `campaign.main` in this process)."""
    if any(item.name == "test_a_smoke_job_runs_end_to_end_on_the_cpu" for item in items):
        import sys

        from conftest import Started
        started = Started(tmp_path_factory)
        started.out = tmp_path_factory.mktemp("campaign_smoke") / "c"
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        started.start("smoke", [sys.executable, "-m", "workbench.campaign", "--out", str(started.out), *SMOKE_ARGV],
                      nice=10, cwd=root, env={**os.environ, "PYTHONPATH": root})
        return started


def test_a_smoke_job_runs_end_to_end_on_the_cpu(tmp_path, capsys):
    """One short A/B job through the campaign runner (its own process, its log, commands.json, the job's run
    folder), on the CPU; the campaign itself runs as `python -m workbench.campaign` when started at collection."""
    from conftest import early
    started = early(__name__)
    if started:
        d = started.out
        r = started.result("smoke", timeout=600)
        rc, out, err = r.returncode, r.stdout, r.stderr
    else:
        d = tmp_path / "c"
        rc = campaign.main(["--out", str(d), *SMOKE_ARGV])
        out, err = capsys.readouterr()
    log = (d / "logs" / "ab_aa.log").read_text() if (d / "logs" / "ab_aa.log").exists() else ""
    assert rc == 0, (log or err)[-3000:]
    doc = json.loads(out.strip().splitlines()[-1])
    assert [j["name"] for j in doc["jobs"]] == ["ab_aa"] and doc["jobs"][0]["status"] == "ok"
    assert doc["smoke"] is True and doc["ended"]
    disk = json.loads((d / "commands.json").read_text())
    assert disk["jobs"][0]["status"] == "ok" and disk["jobs"][0]["rc"] == 0 and disk["jobs"][0]["out"] == "ab_aa"
    assert log.startswith("$ python -m workbench.ab --opt packing --aa --reps 1 --device cpu")
    summary = json.loads((d / "ab_aa" / "summary.json").read_text())
    assert summary["complete"] is True
    c = summary["comparisons"][0]
    assert c["baseline"]["arm"] == "rebuild" and c["optimized"]["arm"] == "rebuild#2" and c["equivalent"] is True
    assert json.loads((d / "ab_aa" / "meta.json").read_text())["status"] == "complete"


def test_campaign_records_skips_failures_and_timeouts(tmp_path):
    jobs = [campaign.Job("missing", "workbench.bench.does_not_exist", ["--out", str(tmp_path / "missing")],
                         str(tmp_path / "missing")),
            campaign.Job("fine", "platform", [], str(tmp_path / "fine")),
            campaign.Job("slow", "timeit", ["-n", "1", "import time; time.sleep(30)"], str(tmp_path / "slow"))]
    doc = campaign.run(jobs, str(tmp_path), timeout_s=3, argv=["--out", str(tmp_path)])
    st = {j["name"]: j for j in doc["jobs"]}
    assert st["missing"]["status"] == "skipped" and "does not exist yet" in st["missing"]["reason"]
    assert st["fine"]["status"] == "ok" and st["fine"]["rc"] == 0
    assert st["slow"]["status"] == "timeout" and st["slow"]["wall_s"] < 30
    with open(tmp_path / "commands.json") as f:
        disk = json.load(f)
    assert [j["status"] for j in disk["jobs"]] == ["skipped", "ok", "timeout"]
    assert disk["jobs"][1]["command"] == "python -m platform" and disk["jobs"][1]["out"] == "fine"
    assert os.path.exists(tmp_path / "logs" / "fine.log")
    assert open(tmp_path / "logs" / "fine.log").read().startswith("$ python -m platform")


def test_campaign_saves_a_jobs_json_stdout(tmp_path):
    from workbench import analysis as an

    log = tmp_path / "w.log"
    log.write_text('noise\n[{"op": "item", "counter": 1, "cpu_only": 0, "cuda_debug_warnings": 1}]\n{not json\n')
    campaign._save_last_json(str(log), str(tmp_path / "witness_ops" / "witness.json"))
    assert json.loads((tmp_path / "witness_ops" / "witness.json").read_text()) == \
        [{"op": "item", "counter": 1, "cpu_only": 0, "cuda_debug_warnings": 1}]
    ops = an.witness_ops(str(tmp_path))  # where the analysis reads it
    assert ops["op"].tolist() == ["item"] and ops["agree"].all()
