"""Adding an optimization is one new module: a fake one, written to a temporary folder, named in $WORKBENCH_OPTS,
runs under `--opt all` on the CPU and shows in the tables, with no file of the workbench touched."""
import json
import os
import subprocess
import sys
import textwrap

FAKE = textwrap.dedent('''
    """A do-nothing optimization: two arms that compute the same function; its savings model in the same module."""
    from workbench.opts import Handle

    SPEC = {"order": 9, "help": "plain (baseline), same (optimized)", "cpu": {"model": "tiny-qwen3"},
            "gpu": {"model": "qwen3-0.6b"}, "all_variants": (), "savings": "fakeopt"}
    FORMULA = "0 (the fake saves nothing)"
    MODEL_TERMS = ()
    TRACED_ARMS = ("baseline",)


    def from_run(traced, c, meta, *, baseline, arm):
        return {"predicted_ms": 0.0, "predicted_se_ms": 0.0, "predicted_ci95": [0.0, 0.0], "n_steps": 1,
                "formula": FORMULA, "inputs": {}, "terms": {}}
    ARMS = ("plain", "same")
    BASELINE, OPTIMIZED = "plain", "same"


    def unsupported(arm, model, device):
        return None


    def apply(model, arm, **options):
        return Handle(opt="fakeopt", arm=arm)
''')


def _new_module_commands(tmp_path):
    """(name, argv, env) of test_a_new_module_is_a_new_optimization's two processes, fakeopt.py written."""
    (tmp_path / "fakeopt.py").write_text(FAKE)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "WORKBENCH_OPTS": "fakeopt", "PYTHONPATH": os.pathsep.join([str(tmp_path), repo])}
    return [("help", [sys.executable, "-m", "workbench.ab", "--help"], env),
            ("run", [sys.executable, "-m", "workbench.ab", "--opt", "all", "--only", "fakeopt",
                     "--out", str(tmp_path / "run")], env)]


def early_start(tmp_path_factory, items):
    """test_a_new_module_is_a_new_optimization's processes, started at collection (conftest's
    pytest_collection_finish)."""
    if any(item.name == "test_a_new_module_is_a_new_optimization" for item in items):
        from conftest import Started
        started = Started(tmp_path_factory)
        started.dir = tmp_path_factory.mktemp("new_module")
        for name, argv, env in _new_module_commands(started.dir):
            started.start(name, argv, env=env, nice=0)  # read within seconds
        return started


def test_a_new_module_is_a_new_optimization(tmp_path):
    from conftest import early
    started = early(__name__)
    if started:
        tmp_path = started.dir
        help_, r = started.result("help", timeout=600), started.result("run", timeout=600)
    else:
        (_, h_argv, env), (_, r_argv, _) = _new_module_commands(tmp_path)
        help_ = subprocess.run(h_argv, env=env, capture_output=True, text=True)
        r = subprocess.run(r_argv, env=env, capture_output=True, text=True, timeout=600)
    assert help_.returncode == 0 and "fakeopt" in help_.stdout and "plain (baseline), same (optimized)" in help_.stdout
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    (c,) = summary["comparisons"]
    assert (c["name"], c["baseline"]["arm"], c["optimized"]["arm"], c["equivalent"]) == ("fakeopt", "plain", "same",
                                                                                         True)
    assert "fakeopt" in r.stdout.split("\n{")[0]  # the printed comparison table
    assert c["savings_model"]["formula"] == "0 (the fake saves nothing)"  # its savings model, from its SPEC
    from workbench import analysis as an
    comps = an.comparisons(str(tmp_path / "run"), include_cpu=True)
    assert comps[["opt", "baseline", "arm"]].values.tolist() == [["fakeopt", "plain", "same"]]
    assert an.savings(str(tmp_path / "run"), include_cpu=True)["formula"].tolist() == ["0 (the fake saves nothing)"]


def test_a_module_without_spec_is_refused_in_one_line(tmp_path):
    (tmp_path / "nospec.py").write_text("ARMS = ('a', 'b')\n")
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "WORKBENCH_OPTS": "nospec", "PYTHONPATH": os.pathsep.join([str(tmp_path), repo])}
    r = subprocess.run([sys.executable, "-m", "workbench.ab", "--help"], env=env, capture_output=True, text=True)
    assert r.returncode == 2 and "nospec has no SPEC" in r.stderr and "Traceback" not in r.stderr


def test_the_savings_model_is_found_through_the_spec_alone(tmp_path, monkeypatch):
    (tmp_path / "fakeopt.py").write_text(FAKE)
    (tmp_path / "plainopt.py").write_text(FAKE.replace(', "savings": "fakeopt"', "").replace('"order": 9', '"order": 10'))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("WORKBENCH_OPTS", "fakeopt,plainopt")
    from workbench.savings import common as savings

    assert savings.modelled()[-1] == "fakeopt" and "plainopt" not in savings.modelled()
    assert savings.formula("fakeopt") == "0 (the fake saves nothing)" and savings.model_terms("fakeopt") == ()
    assert savings.module("plainopt") is None and savings.formula("plainopt") is None  # no `savings`: not modelled
    assert savings.module("all") is None  # not an optimization
