"""Adding an optimization is one new module: a fake two-arm one, written to a temporary folder and named in
$WORKBENCH_OPTS, runs (`--opt fakeopt --device cpu`) and shows in the tables and the results page, with no file of the
workbench touched; the registry-derived test fixtures (tests/fixtures/fake_opts.py) pick it up and run it under
`--opt all`; the README headline keeps its rows (one per optimization and savings model: none cut)."""
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

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
            ("run", [sys.executable, "-m", "workbench.ab", "--opt", "fakeopt", "--device", "cpu",
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
    from workbench.report import readme
    page = readme.page_markdown(str(tmp_path / "run"), include_cpu=True, repo=str(tmp_path))
    row = next(x for x in page.splitlines() if x.startswith("| fakeopt |"))  # the results page reports it
    assert "| plain -> same |" in row and "| not a result (CPU timing) |" in row  # a CPU timing: no CI, no verdict


@pytest.fixture
def fake_registry(tmp_path, monkeypatch):
    """fakeopt (with its savings model) registered through $WORKBENCH_OPTS, in this process."""
    from workbench.opts import registry
    before = registry.in_all_names()
    (tmp_path / "fakeopt.py").write_text(FAKE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(registry.ENV, "fakeopt")
    assert registry.in_all_names() == (*before, "fakeopt")  # (order 9: after the workbench's own)
    return tmp_path


def test_the_fake_fixtures_pick_up_a_new_optimization_and_run_it_under_all(fake_registry, monkeypatch, capsys):
    """tests/fixtures/fake_opts.py derives its fakes from the registry, so the runner tests cover a new optimization
    too: an A/A of every optimization together, fakeopt's arm included."""
    from fixtures import fake_opts
    from workbench import ab
    from workbench.cli import run_main
    from workbench.opts import registry

    fakes = fake_opts.install(monkeypatch)
    assert list(fakes) == list(registry.in_all_names()) and list(fakes)[-1] == "fakeopt"
    assert (fakes["fakeopt"].ARMS, fakes["fakeopt"].BASELINE) == (("plain", "same"), "plain")
    monkeypatch.setitem(ab.CPU_DEFAULTS, "fakeopt", {"model": "tiny-qwen3"})  # (the CLI read the registry at import)
    rc = run_main(ab.main, ["--opt", "all", "--only", "all", "--aa", "--reps", "1", "--tokens", "128", "--steps", "1",
                            "--warmup", "0", "--warmup-max", "0", "--device", "cpu", "--model", "tiny-qwen3",
                            "--out", str(fake_registry / "all")])
    out, err = capsys.readouterr()
    assert rc == 0, err[-2000:]
    (c,) = json.loads(out.strip().splitlines()[-1])["comparisons"]
    assert c["baseline"]["arm"] == "+".join(m.BASELINE for m in fakes.values()) and c["equivalent"] is True
    assert c["baseline"]["arm"].startswith("rebuild+sync_reload+eager+") and c["baseline"]["arm"].endswith("+plain")
    assert ("fakeopt", "plain") in fake_opts.APPLIED


def test_a_fourth_optimization_with_a_model_gets_its_headline_rows(fake_registry):
    """The headline table once kept only its first 8 rows: 4 optimizations + all + 4 savings models are 9, and the
    last (a savings model's) went without a word."""
    from test_analysis import arm, comparison, vs, with_verdict, write_run
    from workbench import opts
    from workbench.opts import registry
    from workbench.report import headline, readme
    from workbench.savings import common as savings

    arms = {o: (opts.module(o).BASELINE, opts.module(o).OPTIMIZED) for o in registry.in_all_names()}
    assert len(arms) >= 4 and list(arms)[-1] == "fakeopt" and savings.modelled()[-1] == "fakeopt"
    comps = [with_verdict(comparison(o, arm(b, 110.0), arm(x, 100.0, v=vs(1.1, 1.08, 1.12))), 9.5, [8.0, 11.0], 10.0,
                          [9.0, 11.5]) for o, (b, x) in arms.items()]
    comps.append(comparison("all", arm("baseline", 120.0), arm("optimized", 100.0, v=vs(1.2, 1.18, 1.22))))
    prof = fake_registry / "profiles"
    write_run(str(prof / "camp" / "ab_traced"), comps)
    md = readme.results_markdown(str(prof), repo=str(fake_registry))
    rows = [x for x in md.splitlines() if x.startswith("| ") and not x.startswith("| result |")]
    models = [o for o in savings.modelled() if o in arms]
    assert [re.match(r"\| (\w+)", r).group(1) for r in rows] == [*arms, "all", *models]  # every one, in order
    assert len(rows) > 8 and len(rows) <= headline.max_rows()
    assert rows[-1].startswith("| fakeopt savings model ")


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


FOURTH_OPT_TESTS = ["tests/test_ab.py::test_cli_all_end_to_end",
                    "tests/test_ab.py::test_every_cpu_comparison_of_opt_all_packs_several_documents_per_batch",
                    "tests/test_fourgpu.py::test_backward_ops_counts_the_eager_experts_whole_weight_gradient_exactly",
                    "tests/test_opt_protocol.py", "tests/test_savings_contract.py"]
"""The optimization tests that read the set of optimizations (`--opt all`, the registry, the contracts); less
test_opt_protocol's broken-module test, which sets $WORKBENCH_OPTS itself."""


def test_the_optimization_tests_pass_with_a_fourth_optimization_in_all():
    """A fourth optimization, added as docs/GUIDE.md says (a module with a SPEC, `in_all` on), breaks no test: the
    optimization tests run again in a fresh process with tests/fixtures/fourth_opt.py registered."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "WORKBENCH_OPTS": "fixtures.fourth_opt",
           "PYTHONPATH": os.pathsep.join([repo, os.path.join(repo, "tests")])}
    check = subprocess.run([sys.executable, "-c", "from workbench.opts import registry; print(registry.in_all_names())"],
                           env=env, capture_output=True, text=True, cwd=repo)
    assert "fourth_opt" in check.stdout, check.stderr  # registered, and in --opt all
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *FOURTH_OPT_TESTS,
                        "--deselect", "tests/test_opt_protocol.py::test_the_cli_says_a_broken_module_in_one_line"],
                       env=env, capture_output=True, text=True, cwd=repo)
    assert r.returncode == 0, r.stdout[-3000:]
