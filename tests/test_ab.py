"""`python -m workbench.ab`: the CLI contract end to end on tiny presets (real opt modules), and the runner's
behaviour on failures, interrupts, A/A and bad input (fake opt modules from tests/fixtures/fake_opts.py).
The equivalence criterion itself (`workbench.measure.equivalence`) is unit-tested at the end of this file and in
tests/test_engine.py."""
import csv
import json
import os
import subprocess
import sys

import pytest
import torch

from workbench import ab
from workbench.measure import equivalence
from workbench.opts import registry
from workbench.cli import run_main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAST = ["--tokens", "128", "--steps", "1", "--warmup", "0", "--warmup-max", "0", "--device", "cpu"]
ARM_KEYS = {"arm", "step_ms", "step_ms_p20", "step_ms_p80", "fwd_ms", "bwd_ms", "syncs_per_step", "peak_mem_mib",
            "tokens_per_s", "loss"}
CMP_KEYS = {"name", "opt", "model", "layers", "tokens", "baseline", "optimized", "others", "speedup", "speedup_ci95",
            "verdict", "n_pairs", "equivalent", "savings_model"}


def _have_all():
    try:
        from workbench import opts
        for o in opts.OPTS:
            opts.module(o)
        return True
    except Exception:
        return False


def _run(capsys, argv):
    rc = run_main(ab.main, argv)
    out, err = capsys.readouterr()
    lines = [ln for ln in out.splitlines() if ln.strip()]
    return rc, lines, err


def _last_json(lines):
    return json.loads(lines[-1])


def _rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


# --- the real thing ---------------------------------------------------------------------------------------------

@pytest.mark.skipif(not _have_all(), reason="the packing / offload / moe modules are not all in place")
def test_cli_all_end_to_end(capsys, tmp_path):
    out = tmp_path / "run"
    rc, lines, err = _run(capsys, ["--opt", "all", *FAST, "--reps", "2", "--out", str(out)])
    assert rc == 0, err[-3000:]
    summary = _last_json(lines)
    assert set(summary) >= {"run_id", "device", "comparisons", "complete", "status"}
    assert summary["device"] == "cpu" and summary["complete"] is True and summary["status"] == "complete"
    cmps = {c["opt"]: c for c in summary["comparisons"]}
    assert list(cmps) == [*registry.in_all_names(), "all"]
    for c in cmps.values():
        assert set(c) >= CMP_KEYS
        assert c["equivalent"] is True, c["errors"]
        for arm in [c["baseline"], c["optimized"], *c["others"]]:
            assert set(arm) >= ARM_KEYS
            assert arm["status"] == "ok" and arm["n"] == 2  # 1 step x 2 repetitions
        assert set(c["savings_model"]) >= {"formula", "predicted_ms", "measured_ms", "reason"}
        assert c["speedup"] > 0 and c["n_pairs"] == 2 and c["verdict"]
    # the optimized arms remove syncs
    for opt in ("packing", "moe", "all"):
        assert cmps[opt]["optimized"]["syncs_per_step"] < cmps[opt]["baseline"]["syncs_per_step"], opt
    assert all(c["wall_s"] > 0 for c in cmps.values())  # each comparison's own wall time: its GPU minutes
    assert cmps["packing"]["others"][0]["arm"] == "precomputed"
    assert cmps["packing"]["others"][0]["syncs_per_step"] < cmps["packing"]["optimized"]["syncs_per_step"]
    # without a trace no model is predicted: its inputs are in-situ trace measurements
    assert cmps["offload"]["savings_model"]["predicted_ms"] is None
    assert "--trace" in cmps["offload"]["savings_model"]["reason"]
    # the tables came before the JSON line, then one human closing line; progress went to stderr only
    assert any(ln.startswith("packing:") for ln in lines[:-1])
    n = len(registry.in_all_names()) + 1  # every optimization of --opt all, and `all`
    at = lines.index(f"complete: {n}/{n} comparisons, all arms equivalent -> {out}")
    after = lines[at + 1:-1]  # the closing sentences (`workbench.ab.recommend`): one a comparison, then the pick
    assert [ln.split(":")[0] for ln in after[:-1]] == list(cmps)
    assert after[-1] == "recommended: nothing: a CPU run gives no timing verdict (run on a GPU for one)"
    assert all("--settle-pct" in ln for ln in err.splitlines() if "not settled" in ln)  # the cap explained
    assert "equivalence" in err and "{" not in "".join(ln for ln in err.splitlines() if ln.startswith("["))
    # files
    assert json.loads((out / "summary.json").read_text())["run_id"] == summary["run_id"]
    meta = json.loads((out / "meta.json").read_text())
    assert meta["status"] == "complete" and meta["command"].startswith("python -m workbench.ab")
    assert meta["versions"]["torch"]
    assert meta["protocol"]["reps"] == 2 and "rule" in meta["protocol"]
    assert meta["equivalence_criterion"]["rtol"] == equivalence.RTOL[torch.float32]
    rows = _rows(out / "results.csv")
    assert rows and set(rows[0]) >= {"run_id", "comparison", "opt", "arm", "rep", "batch", "step", "metric", "value",
                                     "unit", "device", "model", "torch"}
    steps = [r for r in rows if r["metric"] == "step_ms"]
    assert {r["rep"] for r in steps} == {"0", "1"}
    # the arm order rotates by one per repetition: A B C, then B C A
    pk = [(r["rep"], r["arm"]) for r in steps if r["comparison"] == "packing"]
    assert pk == [("0", "rebuild"), ("0", "cached"), ("0", "precomputed"),
                  ("1", "cached"), ("1", "precomputed"), ("1", "rebuild")]
    # the counted pass is recorded apart from the timings
    assert {r["arm"] for r in rows if r["metric"] == "instrumented_step_ms" and r["comparison"] == "packing"} == \
        {"rebuild", "cached", "precomputed"}
    # the CPU's default documents pack several per batch, so packing's checks cross document boundaries
    assert all(b["documents"] > 1 for c in cmps.values() for b in c["batches"]), [c["batches"] for c in cmps.values()]


@pytest.mark.skipif(not _have_all(), reason="the opt modules are not all in place")
def test_torch_trace_runs_the_verdicts(packing_trace_run):
    out, r = packing_trace_run  # conftest's shared CPU run of packing with --trace torch
    c = _last_json(r.stdout.splitlines())["comparisons"][0]
    for arm in ("rebuild", "cached", "precomputed"):
        assert (out / "traces" / "packing" / f"{arm}.pt.trace.json.gz").exists()
    sm = c["savings_model"]
    # a CPU trace has no GPU events: the verdict says so, and the measured saving (with its CI) is still there
    assert sm["verdict"] == "no trace" and "CPU" in sm["reason"]
    assert sm["measured_ms"] is not None and sm["measured_n_pairs"] >= 1
    assert json.loads((out / "summary.json").read_text())["verdicts"]["by"] == "workbench verdicts"


@pytest.mark.skipif(not _have_all(), reason="the packing module is not in place")
def test_sync_sources_per_step_add_up_to_the_count(packing_trace_run):
    """summary.json names the source lines of each arm's syncs (per step), so a gap between witnesses can be
    traced to a line; they add up to syncs_per_step."""
    b = _last_json(packing_trace_run[1].stdout.splitlines())["comparisons"][0]["baseline"]
    assert b["syncs_per_step"] > 0
    assert sum(b["sync_sources_per_step"].values()) == pytest.approx(b["syncs_per_step"])
    assert all(":" in k for k in b["sync_sources_per_step"])


# --- runner behaviour with fake optimizations --------------------------------------------------------------------

def test_fake_comparison_and_files(capsys, tmp_path, fakes):
    rc, lines, err = _run(capsys, ["--opt", "packing", *FAST, "--reps", "2", "--out", str(tmp_path)])
    assert rc == 0, err
    summary = _last_json(lines)
    c = summary["comparisons"][0]
    assert [c["baseline"]["arm"], c["optimized"]["arm"]] == ["rebuild", "cached"]
    # the fake baseline reads back once per step more than the others (the counted pass sees it)
    assert c["baseline"]["syncs_per_step"] == c["optimized"]["syncs_per_step"] + 1
    assert c["equivalence"]["cached"]["bitwise"] is True
    # the model is built once; each arm applied once for the equivalence check, once per repetition (order
    # rotated), once for the counted pass
    A, B, C = (("packing", a) for a in ["rebuild", "cached", "precomputed"])
    assert fakes.APPLIED == [A, B, C] + [A, B, C] + [B, C, A] + [A, B, C]
    for name in ("results.csv", "summary.json", "meta.json"):
        assert (tmp_path / name).exists(), name
    assert not (tmp_path / "errors.log").exists()
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["status"] == "complete" and meta["comparisons"] == ["packing"]
    rows = _rows(tmp_path / "results.csv")
    assert {r["run_id"] for r in rows} == {summary["run_id"]} and {r["comparison"] for r in rows} == {"packing"}
    assert len([r for r in rows if r["metric"] == "step_ms"]) == 3 * 2  # arms x reps x 1 step
    assert {r["metric"] for r in rows} >= {"step_ms", "instrumented_step_ms", "syncs", "equivalent", "speedup", "reps"}


def test_not_equivalent_fails(capsys, tmp_path, fakes):
    fakes.DIFFER_ARMS.add(("packing", "cached"))
    rc, lines, err = _run(capsys, ["--opt", "packing", *FAST, "--reps", "1", "--out", str(tmp_path)])
    assert rc == 1
    c = _last_json(lines)["comparisons"][0]
    assert c["equivalent"] is False and c["equivalence"]["cached"]["loss_abs_diff"] > 0
    assert c["equivalence"]["precomputed"]["equivalent"] is True  # only the wrong arm is blamed
    assert "not equivalent" in err and "Traceback" not in err
    assert json.loads((tmp_path / "meta.json").read_text())["status"] == "failed"


def test_oom_in_one_arm(capsys, tmp_path, fakes):
    fakes.FAIL_ARMS[("packing", "cached")] = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    rc, lines, err = _run(capsys, ["--opt", "packing", *FAST, "--reps", "1", "--out", str(tmp_path)])
    assert rc == 1
    c = _last_json(lines)["comparisons"][0]
    assert c["optimized"]["status"] == "failed" and "out of memory" in c["optimized"]["error"]
    assert c["others"][0]["status"] == "ok" and c["others"][0]["n"] == 1  # the other arms went on
    assert c["baseline"]["n"] == 1
    assert "out of memory" in err and "Traceback" not in err
    assert "OutOfMemoryError" in (tmp_path / "errors.log").read_text()  # the traceback is kept there
    assert json.loads((tmp_path / "meta.json").read_text())["status"] == "failed"


def test_unsupported_arms(capsys, tmp_path, fakes):
    fakes.UNSUPPORTED[("packing", "precomputed")] = "needs a GPU"
    # a further arm the device cannot run is skipped with a note
    rc, lines, err = _run(capsys, ["--opt", "packing", *FAST, "--reps", "1", "--out", str(tmp_path / "a")])
    assert rc == 0, err
    c = _last_json(lines)["comparisons"][0]
    assert c["others"][0]["status"] == "skipped" and "needs a GPU" in c["others"][0]["error"]
    assert ("packing", "precomputed") not in fakes.APPLIED
    # asked for explicitly, it is an error
    rc, lines, err = _run(capsys, ["--opt", "packing", *FAST, "--arms", "rebuild,precomputed", "--out",
                                   str(tmp_path / "b")])
    assert rc == 1 and "needs a GPU" in err and "Traceback" not in err


def test_ctrl_c_keeps_results(capsys, tmp_path, fakes):
    keep = tmp_path / "notes.txt"
    keep.write_text("earlier work")
    fakes.INTERRUPT_AT.append(6)  # 3 equivalence applies, then rep 0: rebuild, cached, Ctrl-C at precomputed
    # (beside the run folder, a file of ours: the run must leave it alone)
    rc, lines, err = _run(capsys, ["--opt", "packing", *FAST, "--reps", "2", "--out", str(tmp_path / "run")])
    assert rc == 130
    assert "interrupted" in err and "Traceback" not in err
    assert keep.read_text() == "earlier work"
    tmp_path = tmp_path / "run"
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["status"] == "incomplete"
    rows = _rows(tmp_path / "results.csv")
    assert {r["arm"] for r in rows if r["metric"] == "step_ms"} == {"rebuild", "cached"}
    assert json.loads((tmp_path / "summary.json").read_text())["complete"] is False
    assert not [p for p in os.listdir(tmp_path) if ".tmp" in p]


@pytest.mark.parametrize("how", [["--aa"], ["--arms", "rebuild,rebuild"]])
def test_aa_mode(capsys, tmp_path, fakes, how):
    rc, lines, err = _run(capsys, ["--opt", "packing", *FAST, "--reps", "2", *how, "--out", str(tmp_path)])
    assert rc == 0, err
    c = _last_json(lines)["comparisons"][0]
    assert [c["baseline"]["arm"], c["optimized"]["arm"]] == ["rebuild", "rebuild#2"]
    assert c["others"] == []
    assert c["equivalence"]["rebuild#2"]["bitwise"] is True
    assert c["baseline"]["n"] == c["optimized"]["n"] == 2
    assert set(fakes.APPLIED) == {("packing", "rebuild")}


def test_aa_all(capsys, tmp_path, fakes):
    rc, lines, err = _run(capsys, ["--opt", "all", *FAST, "--reps", "1", "--aa", "--model", "tiny-qwen3",
                                   "--out", str(tmp_path)])
    assert rc == 0, err
    cmps = _last_json(lines)["comparisons"]
    assert [c["opt"] for c in cmps] == [*registry.in_all_names(), "all"]
    assert all(c["baseline"]["arm"] + "#2" == c["optimized"]["arm"] for c in cmps)
    assert cmps[-1]["baseline"]["arm"] == "+".join(fakes.FAKES[o].BASELINE for o in registry.in_all_names())
    assert cmps[-1]["baseline"]["arm"].startswith("rebuild+sync_reload+eager")


@pytest.mark.parametrize("argv,msg", [
    (["--opt", "speed"], "invalid choice: 'speed'"),
    (["--opt", "packing", "--model", "gpt-5"], "unknown model preset"),
    (["--opt", "packing", "--attn", "warp"], "unknown attention backend"),
    (["--opt", "packing", "--arms", "rebuild,fastest"], "unknown arm 'fastest'"),
    (["--opt", "packing", "--arms", "rebuild"], "at least two arms"),
    (["--opt", "all", "--arms", "rebuild,cached"], "--arms needs a single --opt"),
    (["--opt", "packing", "--aa", "--arms", "rebuild,cached"], "--aa and --arms both set"),
    (["--trace", "perfetto"], "invalid choice: 'perfetto'"),
    (["--opt", "packing", "--steps", "0"], "must be positive"),
    (["--opt", "packing", "--sweep", "heads=1,2"], "bad --sweep"),
    (["--opt", "packing", "--sweep", "layers=2,4", "--layers", "2"], "both set"),
    (["--opt", "packing", "--max-reps", "5"], "--max-reps applies with --target-ci"),
    (["--opt", "packing", "--dtype", "fp8"], "invalid choice: 'fp8'"),
    (["--opt", "packing", "--device", "cpu", "--trace", "nsys"], "needs a CUDA device"),
    (["--opt", "packing", "--lengths", "fixed:100000"], "longer than the token budget"),  # before the model is built
    (["--opt", "packing", "--reps", "3", "--max-reps", "1", "--target-ci", "5"], "--max-reps 1 is below --reps 3"),
    (["--opt", "packing", "--warmup", "5", "--warmup-max", "2"], "--warmup-max 2 is below --warmup 5"),
    (["--opt", "packing", "--device", "cpu", "--dtype", "fp16"], "--dtype fp16 needs a CUDA device"),
    (["--opt", "packing", "--sweep", "tokens=512,64", "--lengths", "fixed:100"], "longer than the token budget (64)"),
])
def test_bad_input_one_line(capsys, tmp_path, fakes, argv, msg):
    rc, lines, err = _run(capsys, [*argv, "--out", str(tmp_path / "x")])
    assert rc == 2
    err_lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(err_lines) == 1 and err_lines[0].startswith("error:") and msg in err_lines[0], err
    assert not (tmp_path / "x").exists()  # nothing started, nothing written
    assert lines == []
    assert fakes.APPLIED == []


def test_nsys_missing(monkeypatch):
    from workbench.errors import WorkbenchError
    from workbench.traces.capture import nsys_command, require_nsys

    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("NSYS", raising=False)
    with pytest.raises(WorkbenchError, match="nsys.*not found"):
        require_nsys()
    cmd = nsys_command("/opt/nsys", "out/x", ["--opt", "packing"])
    assert cmd[:2] == ["/opt/nsys", "profile"]
    assert {"--sample=none", "--cpuctxsw=none", "--backtrace=none", "--capture-range-end=stop"} <= set(cmd)
    assert cmd[cmd.index("-c") + 1] == "cudaProfilerApi" and cmd[cmd.index("-t") + 1] == "cuda,nvtx"
    assert cmd[cmd.index("-o") + 1] == "out/x"
    assert cmd[-5:] == [sys.executable, "-m", "workbench.ab", "--opt", "packing"]


def early_start(tmp_path_factory, items):
    """test_subprocess_bad_opt_no_traceback's process, started at collection (conftest's pytest_collection_finish)."""
    if any(item.name == "test_subprocess_bad_opt_no_traceback" for item in items):
        from conftest import Started
        started = Started(tmp_path_factory)
        started.cwd = tmp_path_factory.mktemp("bad_opt")
        started.start("bad_opt", [sys.executable, "-m", "workbench.ab", "--opt", "nope"], cwd=started.cwd,
                      env={**os.environ, "PYTHONPATH": ROOT}, nice=0)  # read within seconds
        return started


def test_subprocess_bad_opt_no_traceback(tmp_path):
    from conftest import early
    started = early(__name__)
    if started:
        tmp_path = started.cwd
        p = started.result("bad_opt", timeout=120)
    else:
        p = subprocess.run([sys.executable, "-m", "workbench.ab", "--opt", "nope"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=120, env={**os.environ, "PYTHONPATH": ROOT})
    assert p.returncode == 2
    assert p.stderr.strip().startswith("error: argument --opt: invalid choice: 'nope'")
    assert "Traceback" not in p.stderr and p.stdout == ""
    assert os.listdir(tmp_path) == []


def test_parked_moves_the_model_off_cuda_and_back(monkeypatch):
    moves = []

    class M:
        def to(self, d):
            moves.append(str(d))
            return self
    from workbench.ab import arm
    monkeypatch.setattr(arm, "_free", lambda d: moves.append("free"))
    with ab._Parked(M(), "cuda"):
        moves.append("child")
    assert moves == ["cpu", "free", "child", "cuda"]
    moves.clear()
    with ab._Parked(M(), "cpu"):
        pass
    assert moves == []


# --- the equivalence criterion (workbench.measure.equivalence) -----------------------------------------------------------

def test_compare_tolerance():
    g = {"w": torch.ones(4)}
    ref = {"loss": 1.0, "grads": g}
    assert equivalence.compare({"loss": 1.0, "grads": {"w": torch.ones(4)}}, ref, torch.float32)["bitwise"]
    near = equivalence.compare({"loss": 1.0 + 1e-7, "grads": {"w": torch.ones(4) + 1e-7}}, ref, torch.float32)
    assert near["equivalent"] and not near["bitwise"]
    far = equivalence.compare({"loss": 1.1, "grads": {"w": torch.ones(4)}}, ref, torch.float32)
    assert not far["equivalent"]
    bad = equivalence.compare({"loss": 1.0, "grads": {"w": torch.ones(4) * 2}}, ref, torch.float32)
    assert not bad["equivalent"] and bad["grad_max_abs_diff"] == 1.0 and bad["grad_max_rel_l2"] == pytest.approx(1.0)
    # a gradient that is missing, or of another shape, is never equivalent
    assert not equivalence.compare({"loss": 1.0, "grads": {"w": None}}, ref, torch.float32)["equivalent"]
    assert not equivalence.compare({"loss": 1.0, "grads": {"w": torch.ones(5)}}, ref, torch.float32)["equivalent"]


def test_judge_by_reference_accepts_equal_noise_and_rejects_a_wrong_arm():
    g = torch.Generator().manual_seed(0)
    ref32 = {"loss": 2.0, "grads": {"a": torch.randn(64, generator=g), "b": torch.randn(64, generator=g) * 1e-4}}
    noisy = lambda: {k: v + 0.2 * v.abs().mean() * torch.randn(v.shape, generator=g)  # noqa: E731
                     for k, v in ref32["grads"].items()}
    base = {"loss": 2.001, "grads": noisy()}
    arm = {"loss": 2.0005, "grads": noisy()}  # as far from fp32 as the baseline: bf16 summing in another order
    ok = equivalence.judge_by_reference(arm, base, ref32, torch.bfloat16)
    assert ok["equivalent"] and ok["ref_worst_ratio"] < equivalence.REF_FACTOR
    assert ok["ref_grad_max_rel_l2_baseline"] > 0.1  # the noise is large: the direct check fails
    assert not equivalence.compare(arm, base, torch.bfloat16)["equivalent"]
    # negative control: one expert's gradient dropped (zeros) is far outside the baseline's own error
    wrong = {"loss": 2.0005, "grads": dict(arm["grads"], b=torch.zeros(64))}
    bad = equivalence.judge_by_reference(wrong, base, ref32, torch.bfloat16)
    assert not bad["equivalent"] and bad["ref_worst_grad"] == "b"
    # and a loss off by far more than the baseline's error
    assert not equivalence.judge_by_reference({**arm, "loss": 2.5}, base, ref32, torch.bfloat16)["equivalent"]


def test_upcast_round_trip_is_exact_and_leaves_buffers():
    from workbench.step.models import build_model
    m = build_model("tiny-qwen3", dtype=torch.bfloat16, seed=0)
    params = {n: p.detach().clone() for n, p in m.named_parameters()}
    bufs = {n: (b.dtype, b.clone()) for n, b in m.named_buffers()}
    with equivalence.Upcast(m):
        assert all(p.dtype == torch.float32 for p in m.parameters())
        assert {n: b.dtype for n, b in m.named_buffers()} == {n: d for n, (d, _) in bufs.items()}
    assert any(p.dtype == torch.bfloat16 for p in params.values())  # the base (peft keeps adapters in fp32)
    for n, p in m.named_parameters():
        assert p.dtype == params[n].dtype and torch.equal(p, params[n]), n
    for n, b in m.named_buffers():
        assert torch.equal(b, bufs[n][1]), n


# --- low precision: judged against an fp32 reference ------------------------------------------------------------

@pytest.mark.skipif(not _have_all(), reason="the moe module is not in place")
def test_bf16_arms_beyond_tolerance_are_judged_against_fp32(capsys, tmp_path, monkeypatch):
    """Forced down the GPU's path on the CPU: a zero direct tolerance makes the MoE arms 'differ'; the fp32 run of
    the baseline then judges them equivalent (same function, bf16 noise) - and, where fp32 does not fit at once,
    over the batch's documents in chunks."""
    monkeypatch.setitem(equivalence.RTOL, torch.bfloat16, 0.0)
    enter = equivalence.Upcast.__enter__
    calls = []

    def oom_once(self):
        calls.append(1)
        if len(calls) == 1:
            raise torch.OutOfMemoryError("CUDA out of memory (fake)")
        return enter(self)
    monkeypatch.setattr(equivalence.Upcast, "__enter__", oom_once)
    rc, lines, err = _run(capsys, ["--opt", "moe", "--dtype", "bf16", *FAST, "--tokens", "256",
                                   "--lengths", "uniform:16:64", "--reps", "1", "--out", str(tmp_path)])
    assert rc == 0, err
    c = _last_json(lines)["comparisons"][0]
    for arm in ("sort_bincount", "grouped"):
        e = c["equivalence"][arm]
        assert e["equivalent"] and e["judged_by"].startswith("fp32") and e["ref_chunks"] == 2, e
    assert "in 2 chunks" in err and len(calls) == 2  # one reference per comparison, reused for every arm


def test_bf16_wrong_arm_fails_against_fp32_too(capsys, tmp_path, fakes, monkeypatch):
    """Negative control: an arm computing another function (half the labels dropped) still fails after the
    fp32 reference is consulted."""
    monkeypatch.setitem(equivalence.RTOL, torch.bfloat16, 0.0)
    fakes.DIFFER_ARMS.add(("packing", "cached"))
    rc, lines, err = _run(capsys, ["--opt", "packing", "--dtype", "bf16", "--model", "tiny-qwen3", *FAST,
                                   "--reps", "1", "--out", str(tmp_path)])
    assert rc == 1
    e = _last_json(lines)["comparisons"][0]["equivalence"]["cached"]
    assert e["judged_by"].startswith("fp32") and not e["equivalent"]
    assert "against fp32" in err and "not equivalent" in err


@pytest.mark.parametrize("out,msg", [("", "--out is empty"), ("/proc/wb-x", "cannot be created in /proc")])
def test_an_out_folder_that_cannot_be_made_is_one_line(capsys, fakes, out, msg):
    """Permission bits can say yes where the file system says no (/proc); an empty --out once meant runs/<id>."""
    import os
    if msg.startswith("cannot") and not os.path.isdir("/proc"):
        pytest.skip("no /proc here")
    rc, lines, err = _run(capsys, ["--opt", "packing", "--out", out])
    assert rc == 2 and msg in err and "Traceback" not in err and lines == []



def test_the_closing_line_counts_comparisons_and_names_the_ones_not_equivalent():
    from workbench.ab.session import closing_line
    s = {"status": "failed", "out": "runs/x", "comparisons": [{"name": "packing", "status": "ok", "equivalent": False},
                                                                {"name": "moe", "status": "failed"}]}
    assert closing_line(s, 3) == "failed: 1/3 comparisons, NOT equivalent: packing -> runs/x"
    ok = {"status": "complete", "out": "o", "comparisons": [{"name": "a", "status": "ok", "equivalent": True}]}
    assert closing_line(ok, 1) == "complete: 1/1 comparisons, all arms equivalent -> o"


def test_every_cpu_comparison_of_opt_all_packs_several_documents_per_batch():
    """Issue 38, item 3: the batches every comparison of `python -m workbench.ab --opt all --device cpu` runs (the
    planner's comparisons, the runner's make_batches call) hold more than one document each; the GPU's lognormal at
    the CPU's 256 tokens (the old CPU default) held one: the negative control."""
    from workbench.step.data import make_batches
    from workbench.step.models import load_config

    cpu = torch.device("cpu")
    a = ab.parse_args(["--opt", "all", "--device", "cpu"]).resolved(cpu, ab.CPU_DEFAULTS["_run"])
    comps = ab.plan(a, cpu)
    assert [c.name for c in comps] == [*registry.in_all_names(), "all"]
    for c in comps:
        vocab = load_config(c.model).vocab_size
        docs = [len(b.doc_lens) for b in make_batches(a.data.lengths, c.tokens, a.data.batches, vocab, seed=a.data.seed)]
        assert len(docs) == a.data.batches and min(docs) > 1, (c.name, docs)
    old = make_batches(ab.GPU_DEFAULTS["_run"]["lengths"], 256, 2, 256, seed=0)
    assert [len(b.doc_lens) for b in old] == [1, 1]


def test_lengths_are_checked_against_the_budgets_the_comparisons_use():
    """A --sweep of token budgets replaces the default one: documents longer than the default (256 on a CPU) but
    shorter than every swept budget plan fine; one swept budget too small is refused (the negative control)."""
    from workbench.errors import WorkbenchError
    a = ab.parse_args(["--opt", "packing", "--device", "cpu", "--sweep", "tokens=512,1024", "--lengths", "fixed:300"])
    assert [c.tokens for c in ab.plan(a, torch.device("cpu"))] == [512, 1024]
    a = ab.parse_args(["--opt", "packing", "--device", "cpu", "--sweep", "tokens=512,256", "--lengths", "fixed:300"])
    with pytest.raises(WorkbenchError, match=r"longer than the token budget \(256\)"):
        ab.plan(a, torch.device("cpu"))


# --- write what was built, read what was written -------------------------------------------------------

def test_summary_writes_each_batch_and_each_arms_flops_and_the_analysis_reads_them(capsys, tmp_path, fakes):
    """summary.json holds each batch's document lengths (the batches the run packed) and, per arm, the FLOPs of each
    batch as that arm ran it (`flops.arm_batch_flops` with the attention it ran); `analysis.mfu` reads them, so a run
    whose length file is not on the reading machine keeps its rows. Negative control: the same run without the written
    fields (an older run) cannot be counted without the file, and its rows say why instead of vanishing."""
    import shutil

    from workbench import analysis
    from workbench.step import flops
    from workbench.step.data import make_batches
    from workbench.step.models import load_config

    lens = tmp_path / "lens.json"
    lens.write_text(json.dumps([30, 50, 17, 9, 64, 22, 40, 11, 70, 5]))
    run = tmp_path / "runs" / "new"
    rc, lines, err = _run(capsys, ["--opt", "packing", *FAST, "--reps", "2", "--lengths", f"json:{lens}",
                                   "--batches", "2", "--out", str(run)])
    assert rc == 0, err
    c = _last_json(lines)["comparisons"][0]
    cfg = load_config(c["model"], c["layers"])
    built = make_batches(f"json:{lens}", 128, 2, cfg.vocab_size, seed=0)
    assert [b["doc_lens"] for b in c["batches"]] == [b.doc_lens for b in built]
    for a in (c["baseline"], c["optimized"], *c["others"]):
        want = [flops.arm_batch_flops(cfg, b.doc_lens, attn_implementation=a["attention_impl"], lora_rank=16)
                for b in built]
        assert [{k: f[k] for k in ("model", "total")} for f in a["flops_per_batch"]] == \
            [{"model": f["model"], "total": f["total"]} for f in want], a["arm"]
        # NeMo's count per batch too (with the built model's parameter counts): lever_path's mfu_nemo per point
        assert all(0 < f["nemo"] < f["total"] for f in a["flops_per_batch"]), a["arm"]
        assert a["attention_flops"] == want[0]["attention"]

    older = tmp_path / "runs" / "older"
    shutil.copytree(run, older)
    s = json.loads((older / "summary.json").read_text())
    for cc in s["comparisons"]:
        for b in cc["batches"]:
            b.pop("doc_lens")
        for a in (cc["baseline"], cc["optimized"], *cc["others"]):
            for k in ("flops_per_batch", "attention_flops", "attention_impl", "achieved_tflops"):
                a.pop(k, None)
    (older / "summary.json").write_text(json.dumps(s))
    lens.unlink()  # the reading machine has no length file (and, as another process, no parse of it)
    from workbench.step import data
    data._SOURCES.clear()

    df = analysis.mfu(str(tmp_path / "runs"), include_cpu=True)
    new, old = df[df["folder"].str.endswith("new")], df[df["folder"].str.endswith("older")]
    assert len(new) == len(old) == 3  # every arm of both runs keeps its row
    assert new["model_tflop_per_step"].notna().all() and new["note"].isna().all()
    assert old["model_tflop_per_step"].isna().all()
    assert old["note"].str.contains("cannot be rebuilt here").all() and "note:" in capsys.readouterr().err
