"""workbench.analysis.lengths (table; its figure, workbench.report.lengths_figure) on synthetic run folders, and
profiles/lengths_campaign.sh with a stand-in Python (no model runs)."""
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from synthetic_runs import write_run
from workbench import report as rp
from workbench.analysis import lengths as ls

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CAMPAIGN = os.path.join(REPO, "profiles", "lengths_campaign.sh")


def _run(path, *, opt, lengths, docs, slowdown, savings_verdict="confirmed", seed=0):
    """A synthetic run folder of `opt` whose optimized arm is `slowdown` x the baseline, packed batches with `docs`
    documents, run with --lengths `lengths`."""
    write_run(str(path), rng=np.random.default_rng(seed), slowdown=slowdown)
    with open(path / "summary.json") as f:
        s = json.load(f)
    c = s["comparisons"][0]
    c.update(opt=opt, model="m", layers=2, tokens=1024, attn="varlen",
             batches=[{"tokens": 1024, "documents": d} for d in docs],
             savings_model={"verdict": savings_verdict, "ratio": 1.1, "ratio_ci90": [0.9, 1.2]})
    (path / "summary.json").write_text(json.dumps(s))
    with open(path / "meta.json") as f:
        m = json.load(f)
    m["args"]["lengths"] = lengths
    m["device"] = {"type": "cuda", "gpu_name": "NVIDIA H100 80GB HBM3"}
    (path / "meta.json").write_text(json.dumps(m))
    return str(path)


@pytest.fixture
def runs(tmp_path):
    return [_run(tmp_path / "syn_packing", opt="packing", lengths="lognormal:5.5:0.8:16", docs=[9, 112], slowdown=0.9),
            _run(tmp_path / "chat_packing", opt="packing", lengths="data:chat", docs=[480, 520], slowdown=0.8,
                 savings_verdict="refuted", seed=1),
            _run(tmp_path / "code_offload", opt="offload", lengths="data:code", docs=[3, 4, 5], slowdown=1.0,
                 savings_verdict="inconclusive", seed=2)]


def test_table_reads_distribution_documents_speedup_and_verdict(runs):
    t = ls.table(runs)
    assert len(t) == 3 and list(t.columns) == ls.COLUMNS
    assert list(t["opt"]) == ["offload", "packing", "packing"]  # by optimization, then documents per batch
    syn = t[t["lengths"] == "lognormal:5.5:0.8:16"].iloc[0]
    assert (syn["docs_per_batch_mean"], syn["docs_per_batch_min"], syn["docs_per_batch_max"]) == (60.5, 9, 112)
    assert syn["n_batches"] == 2 and syn["gpu_name"] == "NVIDIA H100 80GB HBM3"
    assert syn["speedup"] == pytest.approx(1 / 0.9, rel=0.01) and syn["ci95_lo"] < syn["speedup"] < syn["ci95_hi"]
    assert syn["verdict"] == "faster" and syn["n_units"] == 8
    chat = t[t["lengths"] == "data:chat"].iloc[0]
    assert chat["speedup"] == pytest.approx(1.25, rel=0.01) and chat["docs_per_batch_mean"] == 500
    assert chat["savings_verdict"] == "refuted"
    code = t[t["lengths"] == "data:code"].iloc[0]
    assert code["ci95_lo"] < 1 < code["ci95_hi"] and code["verdict"] != "faster"  # negative control: no effect
    assert code["savings_ratio_ci90_lo"] == 0.9 and code["savings_ratio_ci90_hi"] == 1.2


def test_table_skips_folders_without_a_run(tmp_path, runs):
    (tmp_path / "empty").mkdir()
    assert len(ls.table([*runs, str(tmp_path / "empty")])) == 3
    assert ls.table([]).empty and list(ls.table([]).columns) == ls.COLUMNS
    assert sorted(ls.run_folders(str(tmp_path))) == sorted(runs)


def test_varied_keeps_comparisons_run_on_two_or_more_distributions(runs):
    v = ls.varied(ls.table(runs))
    assert list(v["opt"]) == ["packing", "packing"]  # offload ran on data:code alone
    assert ls.varied(ls.table(runs[2:])).empty and ls.varied(ls.table([])).empty


def test_figure_one_line_per_optimization_with_ci(runs):
    t = ls.table(runs)
    fig = rp.lengths_figure(t)
    assert sorted(tr.name for tr in fig.data) == ["offload", "packing"]
    packing = next(tr for tr in fig.data if tr.name == "packing")
    assert list(packing.x) == [60.5, 500.0]  # sorted by documents per batch
    rows = t[t["opt"] == "packing"]
    assert list(packing.y) == pytest.approx(list(rows["speedup"]))
    assert list(packing.error_y.array) == pytest.approx(list(rows["ci95_hi"] - rows["speedup"]))
    assert list(packing.error_y.arrayminus) == pytest.approx(list(rows["speedup"] - rows["ci95_lo"]))
    assert "data:chat" in packing.hovertext[1] and "refuted" in packing.hovertext[1]
    assert fig.layout.xaxis.type == "log"


def _stub(tmp_path):
    """A stand-in for python: `-m workbench.ab ... --out DIR` writes a complete meta.json; anything else is Python."""
    p = tmp_path / "stub.sh"
    p.write_text("#!/bin/bash\nif [ \"$1\" = \"-m\" ]; then\n  while [ $# -gt 0 ]; do [ \"$1\" = \"--out\" ] && "
                 "out=$2; shift; done\n  mkdir -p \"$out\" && echo '{\"status\": \"complete\"}' > \"$out/meta.json\"; "
                 f"echo \"$out\" >> {tmp_path}/calls; exit 0\nfi\nexec {sys.executable} \"$@\"\n")
    p.chmod(0o755)
    return str(p)


def _campaign(tmp_path, out, budget=None):
    env = {**{k: v for k, v in os.environ.items() if k not in ("DISTS", "OPTS", "BUDGET_MIN")},
           "PYTHON": _stub(tmp_path), "PYTHONPATH": REPO}
    if budget is not None:
        env["BUDGET_MIN"] = str(budget)
    return subprocess.run(["bash", CAMPAIGN, *([out] if out else [])], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=120)


def test_campaign_runs_nine_headline_comparisons_and_resumes(tmp_path):
    out = str(tmp_path / "camp")
    r = _campaign(tmp_path, out, budget=0)  # nothing fits a zero budget
    assert r.returncode == 0 and "budget: 0 of 9" in r.stdout and not os.path.exists(tmp_path / "calls")
    r = _campaign(tmp_path, out)
    assert r.returncode == 0, r.stderr
    assert "ALL DONE: 9 of 9" in r.stdout and "[9/9] end code/moe rc 0" in r.stdout
    calls = (tmp_path / "calls").read_text().split()
    assert len(calls) == 9 and {os.path.relpath(c, out) for c in calls} == {
        f"{d}/{o}" for d in ("synthetic", "chat", "code") for o in ("packing", "offload", "moe")}
    log = open(os.path.join(out, "jobs.txt")).read()
    assert "--headline --trace torch --lengths data:chat" in log and "--lengths lognormal:5.5:0.8:16" in log
    r = _campaign(tmp_path, out)  # everything complete: nothing reruns
    assert "skip code/moe: complete already" in r.stdout and len((tmp_path / "calls").read_text().split()) == 9


def test_campaign_runs_a_subset_in_the_order_given(tmp_path, monkeypatch):
    monkeypatch.setenv("DISTS", "code=data:code chat=data:chat")
    monkeypatch.setenv("OPTS", "moe")
    out = str(tmp_path / "camp")
    r = subprocess.run(["bash", CAMPAIGN, out], capture_output=True, text=True, cwd=REPO, timeout=120,
                       env={**os.environ, "PYTHON": _stub(tmp_path), "PYTHONPATH": REPO})
    assert r.returncode == 0 and "ALL DONE: 2 of 2" in r.stdout
    assert [os.path.relpath(c, out) for c in (tmp_path / "calls").read_text().split()] == ["code/moe", "chat/moe"]


def test_campaign_bad_arguments_are_rc_2(tmp_path):
    r = _campaign(tmp_path, None)
    assert r.returncode == 2 and r.stderr.startswith("usage:") and len(r.stderr.splitlines()) == 1
    r = _campaign(tmp_path, str(tmp_path / "o"), budget="ten")
    assert r.returncode == 2 and "BUDGET_MIN" in r.stderr


def test_duration_estimate_is_stated():
    text = open(CAMPAIGN).read()
    assert "BUDGET_MIN=${BUDGET_MIN:-12}" in text and "H100" in text
    assert math.isfinite(float(text.split("take about ")[1].split()[0]))
