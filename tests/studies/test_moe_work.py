"""MoE's mechanism rule (studies/moe_two_term/moe_work.py): each decision it can give is reachable, and data generated
under one mechanism is not read as another (the negative controls)."""
import math

import numpy as np
from workbench.paths import REPO_ROOT
import pytest

from workbench.errors import WorkbenchError
from studies.moe_two_term import moe_work

GRID = [("gpt-oss-20b", t) for t in (2048, 4096, 8192)] + [("qwen3-30b-a3b", t) for t in (4096, 8192, 16384)]


def _pts(rng, s_of, k=6, sd=0.12, gpus=("GPU-a", "GPU-b")):
    out = []
    for m, t in GRID:
        w = moe_work.expert_work_gflop(m, t)
        fam = "qwen3_moe" if m.startswith("qwen") else "gpt_oss"
        for i in range(k):
            s = s_of(w, fam) * math.exp(rng.normal(0, sd))
            out.append({"model": m, "family": fam, "tokens": t, "gpu": gpus[i % len(gpus)], "W_gflop": w,
                        "s_ms": s, "saving_ms": s * 4000, "syncs_removed": 4000.0})
    return out


def test_expert_work_is_the_presets_forward_gemm_per_expert_iteration():
    # gpt-oss-20b: 8192 x 4 / 32 = 1024 tokens an expert, 6 x 2880 x 2880 FLOPs a token
    assert moe_work.expert_work_gflop("gpt-oss-20b", 8192) == pytest.approx(1024 * 6 * 2880 * 2880 / 1e9)
    # qwen3-30b-a3b: 8192 x 8 / 128 = 512 tokens an expert, 6 x 2048 x 768 a token: 10.5x less work a token
    assert moe_work.expert_work_gflop("qwen3-30b-a3b", 8192) == pytest.approx(512 * 6 * 2048 * 768 / 1e9)
    with pytest.raises(WorkbenchError, match="not an MoE preset"):
        moe_work.expert_work_gflop("qwen3-8b", 8192)


def test_one_rising_curve_in_gpu_work_reads_gpu_work_per_sync():
    f = moe_work.fit(_pts(np.random.default_rng(1), lambda w, fam: 0.03 * w ** 0.25))
    assert (f["work"], f["family"], f["decision"]) == ("grows", "one curve", "gpu work per sync")
    assert set(f["within"]) == {"gpt_oss", "qwen3_moe"}


def test_a_family_constant_is_not_read_as_gpu_work():
    """Negative control: the pilot's pattern (qwen3 saves 0.68x per sync, nothing depends on W). W differs 10x
    between the families, so a fit without the family term would see a slope; this one must not."""
    f = moe_work.fit(_pts(np.random.default_rng(2), lambda w, fam: 0.075 * (0.68 if fam == "qwen3_moe" else 1)))
    assert f["work"] == "flat" and f["family"] == "families differ"
    assert f["decision"] == "a constant per family"


def test_the_models_form_reads_constant_and_a_mix_reads_both():
    f = moe_work.fit(_pts(np.random.default_rng(3), lambda w, fam: 0.075))
    assert f["decision"] == "constant per sync"
    f = moe_work.fit(_pts(np.random.default_rng(4), lambda w, fam: 0.03 * w ** 0.3 * (0.6 if fam == "qwen3_moe" else 1)))
    assert f["decision"] == "gpu work, and a family effect beyond it"


def test_too_few_processes_is_inconclusive_not_a_mechanism():
    f = moe_work.fit(_pts(np.random.default_rng(5), lambda w, fam: 0.03 * w ** 0.1, k=1, sd=0.3, gpus=("g",)))
    assert f["decision"].startswith("inconclusive") or f["work"] == "undecided"


def test_one_family_or_no_df_is_a_one_line_error():
    pts = [p for p in _pts(np.random.default_rng(6), lambda w, fam: 0.07) if p["family"] == "gpt_oss"]
    with pytest.raises(WorkbenchError, match="both MoE families"):
        moe_work.fit(pts)
    two = _pts(np.random.default_rng(7), lambda w, fam: 0.07, k=1, gpus=("g",))[2:4]
    with pytest.raises(WorkbenchError):
        moe_work.fit(two)


def test_it_reads_the_committed_same_host_runs(tmp_path):
    """On real run folders (the H200 pair's verdict processes): a point per process, s = saving / syncs removed."""
    import os
    import shutil

    src = os.path.join(REPO_ROOT, "profiles", "2026-11-27_h200x2_moe_same_host")
    for p in ("moe_q30_l4", "moe_l8_4k"):
        shutil.copytree(os.path.join(src, p), tmp_path / p)
    pts = moe_work.points([str(tmp_path)])
    assert len(pts) == 16 and {p["model"] for p in pts} == {"qwen3-30b-a3b", "gpt-oss-20b"}
    q = [p["s_ms"] for p in pts if p["model"] == "qwen3-30b-a3b"]
    assert 0.04 < float(np.mean(q)) < 0.07  # 54 us a sync (profiles/.../COMMAND.txt)
    with pytest.raises(WorkbenchError, match="confounded"):  # one token count a family: W is the family
        moe_work.fit(pts)
    from workbench.cli import run_main
    assert run_main(moe_work.main, [str(tmp_path)]) == 2


def test_a_lease_cut_at_a_few_processes_is_not_read():
    """A 2-GPU lease cut after 5 processes (profiles/2026-11-27_h200x2_moe_work_a) fits on 1 df: not read."""
    pts = _pts(np.random.default_rng(8), lambda w, fam: 0.03 * w ** 0.25, k=1, gpus=("g",))
    assert moe_work.fit(pts)["decision"].startswith("not read: too few processes")
    assert moe_work.fit(_pts(np.random.default_rng(9), lambda w, fam: 0.03 * w ** 0.25, k=2, sd=0.05))["decision"] == \
        "gpu work per sync"
