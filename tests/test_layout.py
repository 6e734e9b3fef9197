"""The package holds only the product: nothing under workbench/ imports the lab (studies/), and no two of its
modules share a file name (except __init__, __main__ and cli), so a module's name says which one it is."""
import ast
import collections
import os
import re
import subprocess

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


# --- floors: docs DESIGN "Floors point one way" --------------------------------------------------------------------
FLOORS = {
    "errors": 0, "paths": 0, "cli": 0, "interrupts": 0, "kernels": 0,  # ground: import nothing above
    "step": 1, "instrument": 1,
    "measure": 2,
    "traces": 3,
    "savings": 4, "compare": 4,
    "opts": 5,
    "analysis": 6,
    "report": 7,
    "ab": 8, "run": 8, "fidelity": 8, "campaign": 8, "api": 8, "callback": 8, "commands": 8, "bench": 8,
    "__init__": 8, "__main__": 8,  # the entry points
}
"""The floor of each top-level folder or file of workbench/: a lower floor never imports a higher one (at any depth:
a function-level import is an arrow too). Same floor (savings and compare) is allowed."""
KNOWN_UPWARD: set = set()
"""Arrows against the floors still in the tree, each to be removed here when its import goes."""


def _part(path: str) -> str:
    """The top-level folder or file (without .py) of workbench/ that `path` (relative to the repository) is in."""
    rel = os.path.relpath(path, "workbench").split(os.sep)
    return rel[0].removesuffix(".py")


def _targets(node) -> list[tuple[str, str]]:
    """(the workbench part it reaches, the module as written) of each name an import node imports from workbench/."""
    if isinstance(node, ast.Import):
        return [(n.split(".")[1] if "." in n else "__init__", n) for n in (a.name for a in node.names)
                if n.split(".")[0] == "workbench"]
    if not isinstance(node, ast.ImportFrom) or not node.module or node.level:
        return []
    if node.module == "workbench":  # a part, or a name of the package's own __init__
        return [(a.name if a.name in FLOORS else "__init__", f"workbench.{a.name}") for a in node.names]
    p = node.module.split(".")
    return [(p[1], node.module)] if p[0] == "workbench" else []


def upward(source: str, part: str) -> list[tuple[int, str]]:
    """(line, imported module) of every import in `source`, a module of workbench/`part`, into a higher floor, in
    line order; an import of a workbench part no floor names is reported too (every part must be placed)."""
    bad = set()
    for node in ast.walk(ast.parse(source)):
        for t, shown in _targets(node):
            if t not in FLOORS or FLOORS[t] > FLOORS[part]:
                bad.add((node.lineno, shown))
    return sorted(bad)


def test_every_part_of_the_package_has_a_floor():
    parts = {f.removesuffix(".py") for f in os.listdir(PACKAGE) if f.endswith(".py") or (
        os.path.isdir(os.path.join(PACKAGE, f)) and os.path.exists(os.path.join(PACKAGE, f, "__init__.py")))}
    assert parts - set(FLOORS) == set()


def test_no_import_runs_up_the_floors():
    found = set()
    for p in _modules():
        rel = os.path.relpath(p, REPO_ROOT)
        part = _part(rel)
        found |= {(rel.replace(os.sep, "/"), m) for _line, m in upward(open(p, encoding="utf-8").read(), part)}
    assert found - KNOWN_UPWARD == set(), "imports against the floors (tests/test_layout.py FLOORS)"
    assert KNOWN_UPWARD - found == set(), "gone: remove it from KNOWN_UPWARD"


def test_the_floor_checker_sees_an_upward_import():
    src = ("from workbench.measure import stats\n"          # down: allowed
           "from workbench.compare import gate\n"           # same floor: allowed
           "from workbench.report.tables import show\n"     # up
           "def f():\n    import workbench.opts.registry\n"  # up, inside a function
           "from workbench import analysis, errors\n"       # up (analysis), down (errors)
           "import workbench\n"                             # the package's own __init__: an entry point
           "from workbench.newfloor import x\n")            # a part no floor names
    assert upward(src, "savings") == [(3, "workbench.report.tables"), (5, "workbench.opts.registry"),
                                      (6, "workbench.analysis"), (7, "workbench"), (8, "workbench.newfloor")]
    assert upward("from workbench.errors import WorkbenchError\n", "cli") == []
    assert upward("from workbench.measure.results import write_fault\n", "cli") == [(1, "workbench.measure.results")]


def _runtime_imports(tree):
    """The import nodes of `tree` that run (those under `if TYPE_CHECKING:` never do)."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            skip |= {id(n) for b in node.body for n in ast.walk(b)}
    return [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) and id(n) not in skip]


def import_graph(sources: dict) -> dict:
    """{module: the workbench modules it imports} from {dotted module: source} (a package as its dotted name)."""
    def resolve(name):
        while name and name not in sources:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for mod, src in sources.items():
        names = []
        for n in _runtime_imports(ast.parse(src)):
            if isinstance(n, ast.Import):
                names += [a.name for a in n.names]
            elif n.module and n.level == 0:
                names += [f"{n.module}.{a.name}" for a in n.names]
        graph[mod] = {r for r in map(resolve, names) if r and r != mod}
    return graph


def cycles(graph: dict) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_between_modules():
    sources = {}
    for p in _modules():
        mod = os.path.relpath(p, REPO_ROOT)[:-3].replace(os.sep, ".").removesuffix(".__init__")
        sources[mod] = open(p, encoding="utf-8").read()
    assert cycles(import_graph(sources)) == []


def test_the_cycle_checker_sees_a_cycle():
    sources = {"workbench.a": "from workbench.b import f\n", "workbench.b": "def g():\n    import workbench.c\n",
               "workbench.c": "from workbench import a\n", "workbench.d": "from typing import TYPE_CHECKING\n"
               "if TYPE_CHECKING:\n    from workbench.a import x\n", "workbench.a.sub": "import workbench.d\n"}
    assert cycles(import_graph(sources)) == [["workbench.a", "workbench.b", "workbench.c"]]
    assert cycles(import_graph({"workbench.a": "import workbench.b\n", "workbench.b": "import os\n"})) == []


# --- no GPU UUID outside profiles/: tables and prose name a machine by `machine_label` ---------------------------
GPU_UUID = re.compile(r"GPU-[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){0,3}(?:-[0-9a-fA-F]{12})?")
"""A GPU UUID, full (`GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`) or as its short id (`GPU-` and 8 hex digits)."""


def _tracked(*pathspec) -> list[str]:
    r = subprocess.run(["git", "ls-files", "-z", "--", *pathspec], capture_output=True, text=True, cwd=REPO_ROOT,
                       check=True)
    return [p for p in r.stdout.split("\0") if p]


def real_uuids(text: str) -> list[str]:
    """The GPU UUIDs in `text`, but the synthetic ones tests use (8 times one hex digit: GPU-aaaaaaaa)."""
    return [m for m in GPU_UUID.findall(text) if len(set(m[4:12].lower())) > 1]


def test_no_tracked_file_outside_profiles_holds_a_gpu_uuid():
    found = {}
    for p in _tracked(".", ":!profiles"):
        try:
            with open(os.path.join(REPO_ROOT, p), encoding="utf-8", errors="ignore") as f:
                hits = real_uuids(f.read())
        except (FileNotFoundError, IsADirectoryError):  # deleted in the work tree; a submodule
            continue
        if hits:
            found[p] = sorted(set(hits))[:3]
    assert found == {}, "name the machine by workbench.measure.machine_label"


def test_the_uuid_checker_sees_a_planted_one():
    full = "GPU-" + "12ab34cd-5e6f-7a8b-9c0d-1e2f3a4b5c6d"
    short = "GPU-" + "12ab34cd"
    assert real_uuids(f"device {full} and ({short}), test GPU-aaaaaaaa, GPU-BBBBBBBB-0000") == [full, short]


def test_one_machine_one_label():
    from workbench.measure.machine_label import GPU_ID, machine_label
    ids = set()
    for p in _tracked("profiles"):
        if p.endswith((".json", ".csv", ".txt", ".md")):
            with open(os.path.join(REPO_ROOT, p), encoding="utf-8", errors="ignore") as f:
                ids |= {m.lower() for m in GPU_ID.findall(f.read())}
    labels = {machine_label(i) for i in ids}
    assert len(ids) > 10 and len(labels) == len(ids)
    assert all(not GPU_ID.search(x) for x in labels) and machine_label("unknown") == "unknown"
    assert machine_label("NVIDIA H100 80GB HBM3, GPU-" + "12ab34cd-5e6f") == machine_label("GPU-" + "12AB34CD")


HISTORY = re.compile(r"\b[Ii]ssues? #?\d+|\b20\d\d-\d\d-\d\d(?!_)")
"""A line of history in the code: an issue number, or a date that is not a run folder's name (those are data)."""
MAX_HISTORY_LINES = 10
MAX_README_LINES = 200


def history_lines(source: str) -> list[int]:
    """Line numbers of `source` that name an issue or a date, a `MODEL_REVISION` assignment's lines aside (a savings
    model's provenance is its version)."""
    revision = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "MODEL_REVISION" for t in node.targets):
            revision.update(range(node.lineno, node.end_lineno + 1))
    return [i for i, line in enumerate(source.splitlines(), 1) if i not in revision and HISTORY.search(line)]


def test_the_package_holds_little_history():
    found = {os.path.relpath(p, REPO_ROOT): history_lines(open(p, encoding="utf-8").read()) for p in _modules()}
    found = {p: lines for p, lines in found.items() if lines}
    assert sum(map(len, found.values())) <= MAX_HISTORY_LINES, found


def test_the_history_checker_sees_history():
    src = ('MODEL_REVISION = ("2026-11-26: a form,"\n    "its version")\n'
           'x = 1  # fixed in issue 60\ny = "profiles/2026-11-23_h100_engine/ab_aa"\nz = "since 2026-11-28"\n')
    assert history_lines(src) == [3, 5]


def test_the_readme_is_a_product_page():
    with open(os.path.join(REPO_ROOT, "README.md"), encoding="utf-8") as f:
        assert len(f.read().splitlines()) <= MAX_README_LINES
