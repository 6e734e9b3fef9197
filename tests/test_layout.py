"""The package holds only the product: nothing under workbench/ imports the lab (studies/), and no two of its
modules share a file name (except __init__, __main__ and cli), so a module's name says which one it is."""
import ast
import collections
import os

import pytest

from workbench.paths import REPO_ROOT

PACKAGE = os.path.join(REPO_ROOT, "workbench")
SHARED_NAMES = {"__init__.py", "__main__.py", "cli.py"}


def _modules():
    for dirpath, _dirs, files in os.walk(PACKAGE):
        for f in files:
            if f.endswith(".py"):
                yield os.path.join(dirpath, f)


def _imported(path):
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                "import_module", "run_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant):
            yield str(node.args[0].value)


def test_nothing_in_the_package_imports_a_study():
    bad = [(os.path.relpath(p, REPO_ROOT), m) for p in _modules() for m in _imported(p)
           if m == "studies" or m.startswith("studies.")]
    assert bad == []


def test_the_checker_sees_a_study_import(tmp_path):
    p = tmp_path / "m.py"
    p.write_text("import os\nfrom studies.moe_two_term import moe_work\nimportlib.import_module('studies.x')\n")
    assert [m for m in _imported(str(p)) if m.startswith("studies")] == ["studies.moe_two_term", "studies.x"]


def test_module_basenames_are_unique():
    by_name = collections.defaultdict(list)
    for p in _modules():
        by_name[os.path.basename(p)].append(os.path.relpath(p, REPO_ROOT))
    repeated = {n: ps for n, ps in by_name.items() if len(ps) > 1 and n not in SHARED_NAMES}
    assert repeated == {}


def test_every_command_line_is_a_workbench_command_and_help_lists_it(capsys):
    from workbench import commands
    mains = set()
    for p in _modules():
        if '__name__ == "__main__"' in open(p, encoding="utf-8").read():
            mod = os.path.relpath(p, REPO_ROOT)[:-3].replace(os.sep, ".")
            mains.add(mod.removesuffix(".__main__"))
    mains.discard("workbench")  # the dispatcher itself
    assert mains == {module for module, _what in commands.COMMANDS.values()}
    assert commands.main(["--help"]) == 0
    listed = capsys.readouterr().out
    assert all(f"  {name} " in listed for name in commands.COMMANDS)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # runpy: the module was imported before, by this test process
def test_a_command_runs_its_module_and_an_unknown_one_is_one_line(capsys):
    from workbench import commands
    assert commands.main(["levers"]) == 0 and "copy" in capsys.readouterr().out
    assert commands.main(["nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown command 'nope'") and len(err.strip().splitlines()) == 1


def test_python_dash_m_workbench_is_the_console_script():
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "workbench", "gate", "--help"], capture_output=True, text=True,
                       cwd=REPO_ROOT)
    assert r.returncode == 0 and r.stdout.startswith("usage: workbench gate")
