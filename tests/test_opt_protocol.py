"""The optimization contract (`workbench.opts.protocol`): every registered optimization, the test fixtures' and the
fakes conform; every optional hook the workbench reads is declared there (and read through `hook`); a module that
breaks the contract, or fails to import, is a one-line error naming it, never skipped."""
from __future__ import annotations

import os
import re
import types

import pytest

from workbench import opts
from workbench.cli import run_main
from workbench.errors import WorkbenchError
from workbench.opts import protocol, registry

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = os.path.join(ROOT, "workbench")


def _sources():
    for d, _, files in os.walk(PKG):
        for f in files:
            if f.endswith(".py"):
                p = os.path.join(d, f)
                with open(p) as fh:
                    yield os.path.relpath(p, ROOT), fh.read()


@pytest.mark.parametrize("opt", registry.names())
def test_every_registered_optimization_conforms(opt):
    mod = opts.module(opt)
    assert isinstance(mod, protocol.Optimization)
    assert protocol.problems(mod) == []
    assert protocol.spec_problems(registry.spec(opt)) == []


def test_the_fixture_optimizations_and_the_fakes_conform(monkeypatch):
    import importlib

    from fixtures import fake_opts
    for name in ("lever_copy", "lever_attention", "lever_experts"):
        mod = importlib.import_module(f"fixtures.{name}")
        assert protocol.problems(mod) == [] and protocol.spec_problems(mod.SPEC) == [], name
    fakes = fake_opts.install(monkeypatch)
    assert list(fakes) == list(registry.in_all_names())  # one per optimization of --opt all, from the registry
    for opt, mod in fakes.items():
        assert protocol.problems(mod) == [], opt
        real = importlib.import_module(registry.module_path(opt))
        assert (mod.ARMS, mod.BASELINE, mod.OPTIMIZED) == (real.ARMS, real.BASELINE, real.OPTIMIZED)


def test_every_hook_read_is_declared_and_every_declared_hook_is_read():
    """The workbench reads an optimization's optional members only through `protocol.hook` (no `getattr(mod, NAME,
    default)` with a default of its own), each name declared in `HOOKS`; a declared hook nobody reads is dead."""
    hook_re = re.compile(r"\b(?:opt_)?hook\((?:[^()]|\([^()]*\))*?,\s*\"(\w+)\"\)")
    getattr_re = re.compile(r"getattr\((?:[^(),]|\([^()]*\))+,\s*\"(\w+)\"")
    # (the patterns find the forms they police: a negative control)
    assert getattr_re.findall('getattr(_module_or_none(o), "BACKENDS", ())') == ["BACKENDS"]
    assert hook_re.findall('fn = opt_hook(optimizations.module(opt), "comparison_options")') == ["comparison_options"]
    read, stray = set(), []
    for path, src in _sources():
        read |= set(hook_re.findall(src))
        if not path.endswith("protocol.py"):
            stray += [f"{path}: {n}" for n in getattr_re.findall(src) if n in protocol.HOOKS or n in protocol.REQUIRED]
    assert stray == []
    assert read == set(protocol.HOOKS)


def test_problems_name_what_is_wrong():
    """Negative controls: each rule of the contract, broken once."""
    def mod(**kw):
        m = types.SimpleNamespace(ARMS=("a", "b", "c"), BASELINE="a", OPTIMIZED="b", unsupported=lambda *a: None,
                                  apply=lambda *a, **k: None)
        for k, v in kw.items():
            if v is None:
                delattr(m, k)
            else:
                setattr(m, k, v)
        return m
    assert protocol.problems(mod()) == []
    assert protocol.problems(mod(apply=None)) == ["lacks apply"]
    assert not isinstance(mod(apply=None), protocol.Optimization)
    for kw, says in [({"ARMS": ["a", "b"]}, "ARMS is not a tuple"), ({"ARMS": ("a",)}, "at least two"),
                     ({"ARMS": ("a", "b", "b")}, "names an arm twice"), ({"BASELINE": "c"}, "BASELINE 'c'"),
                     ({"OPTIMIZED": "z"}, "OPTIMIZED 'z'"), ({"OPTIMIZED": "a"}, "OPTIMIZED 'a'"),
                     ({"apply": "x"}, "apply is not callable"), ({"comparison_options": {}}, "comparison_options"),
                     ({"BACKENDS": "flex"}, "BACKENDS"), ({"OPT_IN_ARMS": ("b",)}, "OPT_IN_ARMS ['b']"),
                     ({"LEVER_ANCHOR": "z"}, "LEVER_ANCHOR 'z'"), ({"ATTENTION_FLOPS": {"b": "sparse"}},
                                                                    "ATTENTION_FLOPS"),
                     ({"ATTENTION_FLOPS": {"z": "dense"}}, "ATTENTION_FLOPS"), ({"SAVED_FRACTION": 0}, "SAVED_FRACTION"),
                     ({"SAVED_FRACTION": 1.5}, "SAVED_FRACTION"), ({"NUMERICS_CHANGE": ""}, "NUMERICS_CHANGE")]:
        got = protocol.problems(mod(**kw))
        assert len(got) == 1 and says in got[0], (kw, got)


def test_spec_problems():
    good = {"order": 1, "help": "a (baseline), b", "cpu": {}, "gpu": {}, "all_variants": ()}
    assert protocol.spec_problems(good) == [] and protocol.spec_problems({**good, "in_all": False, "lever": "x"}) == []
    assert protocol.spec_problems({k: v for k, v in good.items() if k != "gpu"}) == ["SPEC lacks gpu"]
    assert protocol.spec_problems({**good, "order": "1"}) == ["SPEC order is a str, not a int"]
    assert protocol.spec_problems({**good, "order": True}) == ["SPEC order is a bool, not a int"]
    assert protocol.spec_problems({**good, "all_variants": ["b"]}) == ["SPEC all_variants is a list, not a tuple"]
    assert protocol.spec_problems({**good, "saving": "x"})[0].startswith("SPEC key 'saving' is none of order")
    assert protocol.SPEC_REQUIRED == ("order", "help", "cpu", "gpu", "all_variants")


def test_the_hook_default_is_declared_once():
    m = types.SimpleNamespace()
    assert protocol.hook(m, "SAVED_FRACTION") == 1.0 and protocol.hook(m, "BACKENDS") == ()
    assert protocol.hook(types.SimpleNamespace(SAVED_FRACTION=0.5), "SAVED_FRACTION") == 0.5
    with pytest.raises(KeyError):
        protocol.hook(m, "SAVED_FRACTON")  # a typo is no silent default


BROKEN = '''
SPEC = {"order": 20, "help": "a (baseline), b", "cpu": {"model": "tiny-qwen3"}, "gpu": {"model": "qwen3-0.6b"},
        "all_variants": ()}
import workbench_no_such_package  # noqa: F401
'''
NO_APPLY = '''
SPEC = {"order": 21, "help": "a (baseline), b", "cpu": {"model": "tiny-qwen3"}, "gpu": {"model": "qwen3-0.6b"},
        "all_variants": ()}
ARMS = ("a", "b")
BASELINE, OPTIMIZED = "a", "b"


def unsupported(arm, model, device):
    return None
'''


@pytest.fixture
def broken_registry(tmp_path, monkeypatch):
    (tmp_path / "brokenopt.py").write_text(BROKEN)
    (tmp_path / "noapplyopt.py").write_text(NO_APPLY)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(registry.ENV, "brokenopt,noapplyopt")
    assert registry.names()[-2:] == ("brokenopt", "noapplyopt")


def test_a_broken_module_fails_loudly_naming_the_module_and_the_error(broken_registry):
    with pytest.raises(WorkbenchError) as e:
        opts.module("brokenopt")
    assert str(e.value) == ("optimization 'brokenopt': module brokenopt failed to import: ModuleNotFoundError: No "
                            "module named 'workbench_no_such_package'")
    with pytest.raises(WorkbenchError, match="module noapplyopt breaks the contract of workbench/opts/protocol.py: "
                                             "lacks apply"):
        opts.module("noapplyopt")
    from workbench.ab import planner
    with pytest.raises(WorkbenchError, match="brokenopt"):  # its backends once vanished without a word
        planner._attention_backends()


def test_the_cli_says_a_broken_module_in_one_line(broken_registry, capsys):
    from workbench import ab
    rc = run_main(ab.main, ["--opt", "packing", "--attn", "nope", "--device", "cpu"])
    out, err = capsys.readouterr()
    lines = [x for x in err.splitlines() if x.strip()]
    assert rc == 2 and out == "" and len(lines) == 1, err
    assert lines[0].startswith("error: optimization 'brokenopt': module brokenopt failed to import: "
                               "ModuleNotFoundError") and "Traceback" not in err
