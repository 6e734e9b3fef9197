"""The package holds only the product: nothing under workbench/ imports the lab (studies/), and no two of its
modules share a file name (except __init__, __main__ and cli), so a module's name says which one it is."""
import ast
import collections
import os

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
