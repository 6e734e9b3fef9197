"""Every notebook runs headless (nbclient, a python3 kernel of this interpreter) against (a) the committed profiles
and (b) a fresh tiny CPU A/B run with a torch trace made here (WB_INCLUDE_CPU=1); each starts with the command that
produced its data, and is committed executed (`workbench readme_results --notebooks`): its outputs are
there, current with profiles/, and hold no path of the machine that ran them."""
from __future__ import annotations

import glob
import json
import os
import sys

import re
import subprocess
import time

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROFILES = os.path.join(ROOT, "profiles")
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")))
NAMES = [os.path.basename(p) for p in NOTEBOOKS]


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def _kernel_dir(tmp_path_factory):
    """A `python3` kernelspec that runs this interpreter: the folder to put first on JUPYTER_PATH."""
    d = tmp_path_factory.mktemp("jupyter")
    spec = d / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (workbench tests)", "language": "python"}))
    return d


def _kernel_vars(d) -> dict:
    """The kernel's environment: the kernelspec first on JUPYTER_PATH, PYTHONPATH with the checkout."""
    return {"JUPYTER_PATH": str(d), "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
            "WB_PLOTLY_RENDERER": "plotly_mimetype",  # the committed figures' JSON, no PNG (kaleido)
            "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def kernel_env(tmp_path_factory, monkeypatch_module):
    """A `python3` kernelspec that runs this interpreter, first on JUPYTER_PATH, and PYTHONPATH with the checkout."""
    d = _kernel_dir(tmp_path_factory)
    for k, v in _kernel_vars(d).items():
        monkeypatch_module.setenv(k, v)
    return d


def _execute(path: str, env: dict) -> "nbformat.NotebookNode":
    from workbench.report.notebook_outputs import environ

    with environ(env):
        nb = nbformat.read(path, as_version=4)
        nbclient.NotebookClient(nb, kernel_name="python3", timeout=300,
                                resources={"metadata": {"path": os.path.dirname(path)}}).execute()
        return nb


def _committed_env() -> dict:
    return {"WB_PROFILES": os.path.join(ROOT, "profiles"), "WB_INCLUDE_CPU": "0"}


def _fresh_env(fresh: str) -> dict:
    return {"WB_PROFILES": fresh, "WB_INCLUDE_CPU": "1"}


class _Background:
    """Every notebook execution below, in one background process started at collection (conftest's
    pytest_collection_finish), one after another (tests/fixtures/execute_notebooks.py): on the committed profiles,
    each in a kernel of its own, then on conftest's shared packing trace run once it is ready, all four in ONE kernel
    (each from an empty namespace): what a notebook would take from the ones before it there (a module's state) the
    committed-profile runs, in fresh kernels and checked output for output, would show. The tests read what it
    wrote."""

    def __init__(self, tmp_path_factory, wanted):
        from conftest import lower_priority, packing_trace_paths
        d = tmp_path_factory.mktemp("notebooks_bg")
        out, ready = packing_trace_paths(tmp_path_factory)
        self.fresh = str(out.parent)
        jobs, self.outs = [], {}
        for kind, env, wait in (("committed", _committed_env(), None), ("fresh", _fresh_env(self.fresh), str(ready))):
            for name in NAMES:
                if (kind, name) not in wanted:
                    continue
                self.outs[kind, name] = str(d / f"{kind}_{name}")
                jobs.append({"path": os.path.join(ROOT, "notebooks", name), "out": self.outs[kind, name],
                             "env": env, "wait_for": wait, "kernel": "fresh" if kind == "fresh" else None})
        (d / "jobs.json").write_text(json.dumps(jobs))
        env = {**os.environ, **_kernel_vars(_kernel_dir(tmp_path_factory))}
        self.log = d / "log"
        with open(self.log, "w") as log:
            script = os.path.join(ROOT, "tests", "fixtures", "execute_notebooks.py")
            self.proc = subprocess.Popen([sys.executable, script, str(d / "jobs.json")], env=env, stdout=log,
                                         stderr=subprocess.STDOUT, preexec_fn=lower_priority(15))

    def result(self, kind: str, name: str) -> "nbformat.NotebookNode":
        out = self.outs[kind, name]
        while not (os.path.exists(out) or os.path.exists(out + ".error")):
            if self.proc.poll() is not None and not (os.path.exists(out) or os.path.exists(out + ".error")):
                raise AssertionError(f"the notebook process ended (rc {self.proc.returncode}) before {kind} {name}: "
                                     + self.log.read_text()[-3000:])
            time.sleep(0.2)
        if os.path.exists(out + ".error"):
            raise AssertionError(open(out + ".error").read())
        return nbformat.read(out, as_version=4)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def early_start(tmp_path_factory, items):
    kinds = {"test_notebook_runs_on_committed_profiles": "committed", "test_notebook_runs_on_a_fresh_cpu_run": "fresh"}
    wanted = {(kinds[item.originalname], item.callspec.params["name"]) for item in items
              if item.originalname in kinds}
    return _Background(tmp_path_factory, wanted) if wanted else None


def _stdout(nb) -> str:
    """Every stdout stream, concatenated: a kernel under load may split one cell's output into several streams."""
    return "".join(o["text"] for c in nb.cells for o in c.get("outputs", [])
                   if o.get("output_type") == "stream" and o.get("name") == "stdout")


def _figures(nb) -> list:
    """Each figure's data and layout (the PNG beside it is drawn from them)."""
    figs = [o["data"]["application/vnd.plotly.v1+json"] for c in nb.cells for o in c.get("outputs", [])
            if "application/vnd.plotly.v1+json" in (o.get("data") or {})]
    return [json.loads(json.dumps({"data": f["data"], "layout": f["layout"]})) for f in figs]


def _tables(nb) -> list:
    return [str(o["data"]["text/html"]) for c in nb.cells for o in c.get("outputs", [])
            if "text/html" in (o.get("data") or {})]


def _text(nb) -> str:
    out = []
    for c in nb.cells:
        for o in c.get("outputs", []):
            if "text" in o:
                out.append(o["text"])
            out += [str(v) for k, v in (o.get("data") or {}).items() if k in ("text/plain", "text/markdown")]
    return "\n".join(out)


def test_notebooks_exist_and_first_cell_names_the_command():
    assert NAMES == ["01_speedup_tables.ipynb", "02_savings_models.ipynb", "03_sync_anatomy.ipynb",
                     "04_traces.ipynb"]
    for p in NOTEBOOKS:
        nb = nbformat.read(p, as_version=4)
        nbformat.validate(nb)
        first = nb.cells[0]
        assert first.cell_type == "markdown"
        assert "**Data:**" in first.source and "python -m workbench.ab" in first.source, p
        assert "python -m workbench.campaign" in first.source, p
        params = nb.cells[1]
        assert "WB_PROFILES" in params.source and "PROFILES =" in params.source and "WB_INCLUDE_CPU" in params.source
        assert "parameters" in params.metadata.get("tags", [])
        setup = nb.cells[2].source  # the shared setup: one module, one short cell
        assert "notebook_setup import setup" in setup and len(setup.splitlines()) <= 5, p
        assert not any("an.left_out(" in c.source or "pd.set_option(" in c.source for c in nb.cells), p
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), p  # committed executed, in order
        assert "result folders in profiles" in _stdout(nb), p
        for c in nb.cells:
            assert "execution" not in c.metadata, p  # no timings
            for o in c.get("outputs", []):
                assert o.get("output_type") != "error", p
                assert not (o.get("output_type") == "stream" and o.get("name") == "stderr"), p
        raw = open(p).read()
        for bad in (ROOT, "/tmp/", "/home/", "/root/"):
            assert bad not in raw, (p, bad)
        ids = set(re.findall(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", raw))
        assert all(i.startswith("00000000-0000-4000-8000-") for i in ids), p  # plotly's div ids, numbered
        for c in nb.cells:  # the old formats' loaders are gone
            assert not any(x in c.source for x in ("bench_frames", "overhead_table", "three_witnesses",
                                                   "workbench.bench.")), p


@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs_on_committed_profiles(name, kernel_env):
    from conftest import early
    bg = early(__name__)
    nb = bg.result("committed", name) if bg else _execute(os.path.join(ROOT, "notebooks", name), _committed_env())
    text = _text(nb)
    assert "result folders in profiles" in text and "left out" in text
    from workbench import analysis as an
    from workbench.report.notebook_outputs import normalize_outputs
    normalize_outputs(nb)
    committed = nbformat.read(os.path.join(ROOT, "notebooks", name), as_version=4)
    assert _stdout(nb) == _stdout(committed), "committed outputs are stale: workbench readme_results " \
                                              "--notebooks"
    for what, fresh, old in (("figure", _figures(nb), _figures(committed)), ("table", _tables(nb), _tables(committed))):
        stale = [i for i, (x, y) in enumerate(zip(fresh, old)) if x != y]  # indices only: the outputs are large
        assert len(fresh) == len(old) and not stale, \
            f"committed {what}s {stale} of {len(old)} (fresh: {len(fresh)}) are stale: python -m " \
            "workbench.report.readme --notebooks"
    if name.startswith("01"):
        assert "qwen3-0.6b" in text and "rebuild#2" in text  # ab_all and the A/A run
    if name.startswith("02"):
        assert "(L-1) form" in text and "slope_ms" in text  # the L sweep fits and their L = 1 test
        v = an.verdicts(PROFILES, include_incomplete_comparisons=an.KEEP_FROM_INCOMPLETE)
        if len(v):  # one row per model and configuration, as a table (no sentences printed)
            assert f"{len(v)} savings-model verdicts" in text and len(an.verdict_table(v)) == len(v)
            assert not re.search(r"-> (confirmed|refuted|inconclusive)", _stdout(nb))
        else:
            assert "no data for savings-model verdicts" in text
    if name.startswith("03"):
        assert "build_meta" in text and "nvtx ranges" in text
    if name.startswith("04"):
        if an.breakdown(PROFILES, include_incomplete_comparisons=an.KEEP_FROM_INCOMPLETE).empty:
            assert "no data for step breakdowns" in text and "no data for step decompositions" in text
        else:
            assert "gemm" in text and "saved_ms" in text and "launch_gap" in text
        if not glob.glob(os.path.join(PROFILES, "**", "traces", "*", "*.events.*"), recursive=True):
            assert "0 traced arms" in text and "no data for traces" in text


@pytest.fixture(scope="module")
def fresh_run(packing_trace_run, kernel_env):
    """A tiny CPU A/B run of packing with a torch trace (one timed step per arm and rep; conftest's shared one)."""
    return str(packing_trace_run[0].parent)


@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs_on_a_fresh_cpu_run(name, fresh_run):
    from conftest import early
    bg = early(__name__)
    if bg:
        assert bg.fresh == fresh_run
    nb = bg.result("fresh", name) if bg else _execute(os.path.join(ROOT, "notebooks", name), _fresh_env(fresh_run))
    text = _text(nb)
    assert "1 result folders in" in text
    if name.startswith("01"):
        assert "rebuild" in text and "cached" in text and "no data for an A/A run" in text
    if name.startswith("02"):
        assert "no trace" in text  # a CPU trace has no GPU events: the verdict (a table row) says so
    if name.startswith("03"):
        assert "build_meta" in text
    if name.startswith("04"):
        assert "3 traced arms" in text and "builds_per_step" in text
        assert "no data for a traced baseline" not in text and "no data for trace events" not in text


def test_normalize_outputs_merges_split_streams_and_drops_stderr():
    """A kernel under load may flush one cell's prints as several streams; the committed file holds one."""
    from workbench.report.notebook_outputs import normalize_outputs

    v4 = nbformat.v4
    nb = v4.new_notebook(cells=[v4.new_code_cell("print('a'); print('b')", outputs=[
        v4.new_output("stream", name="stdout", text="a\n"), v4.new_output("stream", name="stderr", text="warn\n"),
        v4.new_output("stream", name="stdout", text="b\n"),
        v4.new_output("display_data", data={"text/plain": "x"}), v4.new_output("stream", name="stdout", text="c\n")])])
    normalize_outputs(nb)
    outs = nb.cells[0].outputs
    assert [o.get("text") for o in outs] == ["a\nb\n", None, "c\n"] and nb.cells[0].execution_count == 1


def test_a_notebook_executed_again_on_the_same_data_is_refused(tmp_path):
    """`reexecuted_without_new_data`: outputs changed under the same recorded inputs and cells is a re-execution without
    a data change (refused); changed inputs, a changed cell, unchanged outputs, or an old version that records no
    inputs are not (the controls). `reexecution_problems` says so of a working-tree notebook against its committed
    version."""
    from workbench.report.notebook_outputs import INPUTS_KEY, reexecuted_without_new_data, reexecution_problems

    def nb(out: str, inputs, code: str = "print(1)"):
        n = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code, outputs=[
            nbformat.v4.new_output("stream", name="stdout", text=out)])])
        if inputs is not None:
            n.metadata[INPUTS_KEY] = inputs
        return n

    a, b = {"files": 2, "sha256": "a" * 64}, {"files": 2, "sha256": "b" * 64}
    assert reexecuted_without_new_data(nb("1\n", a), nb("2\n", a))
    assert not reexecuted_without_new_data(nb("1\n", a), nb("2\n", b))  # the data changed
    assert not reexecuted_without_new_data(nb("1\n", a), nb("1\n", a))  # nothing changed
    assert not reexecuted_without_new_data(nb("1\n", None), nb("2\n", a))  # no record before
    assert not reexecuted_without_new_data(nb("1\n", a), nb("2\n", a, "print(2)"))  # its own cell changed
    repo = tmp_path / "repo"
    (repo / "notebooks").mkdir(parents=True)
    path = repo / "notebooks" / "x.ipynb"
    nbformat.write(nb("1\n", a), str(path))
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "x"], check=True)
    assert reexecution_problems([str(path)], str(repo)) == []
    nbformat.write(nb("2\n", a), str(path))
    assert "executed again on the data" in reexecution_problems([str(path)], str(repo))[0]
    nbformat.write(nb("2\n", b), str(path))
    assert reexecution_problems([str(path)], str(repo)) == []


def test_each_committed_notebook_changed_its_outputs_only_with_its_data():
    """The last commit that changed each notebook against its parent: outputs changed under the same recorded
    inputs would be a re-execution without a data change (`reexecution_problems`)."""
    from workbench.report.notebook_outputs import _at, reexecuted_without_new_data

    for p in NOTEBOOKS:
        rel = os.path.relpath(p, ROOT)
        r = subprocess.run(["git", "log", "-1", "--format=%H", "--", rel], cwd=ROOT, capture_output=True, text=True)
        if r.returncode != 0 or not r.stdout.strip():
            pytest.skip("no git history here")
        last = r.stdout.strip()
        new, old = _at(ROOT, last, rel), _at(ROOT, last + "^", rel)
        if old is None:  # a shallow clone: no parent to compare with
            continue
        assert not reexecuted_without_new_data(old, new), f"{rel} at {last[:10]}: executed again on the same data"
