"""The committed notebooks executed against profiles/ (`workbench readme_results --notebooks`), their
outputs normalized so a re-run on another machine writes the same files."""
from __future__ import annotations

import contextlib
import os
import re

from workbench.paths import REPO_ROOT as REPO

from workbench.report.tables import STATIC_RENDERER as NOTEBOOK_RENDERER  # the committed notebooks' renderer
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def normalize_outputs(nb, repo: str = REPO) -> None:
    """Make an executed notebook's outputs stable across runs and machines: plotly's random div ids become
    numbered ones, the checkout's absolute path becomes `.`, stderr (library warnings) is dropped, consecutive stdout
    streams are one, no execution timings, execution counts from 1."""
    ids: dict = {}

    def fix(text: str) -> str:
        text = _UUID.sub(lambda m: ids.setdefault(m.group(0), f"00000000-0000-4000-8000-{len(ids) + 1:012d}"), text)
        return text.replace(repo + os.sep, "").replace(repo, ".")

    n = 0
    for c in nb.cells:
        c.metadata.pop("execution", None)
        if c.cell_type != "code":
            continue
        n += 1
        c.execution_count = n if c.get("outputs") is not None else None
        c.outputs = [o for o in c.get("outputs", []) if not (o.get("output_type") == "stream"
                                                              and o.get("name") == "stderr")]  # warnings: not results
        merged = []
        for o in c.outputs:  # one stream per run of prints, however the kernel happened to flush it
            if merged and o.get("output_type") == "stream" and merged[-1].get("output_type") == "stream" \
                    and merged[-1].get("name") == o.get("name"):
                merged[-1]["text"] += o["text"]
            else:
                merged.append(o)
        c.outputs = merged
        for o in c.outputs:
            if "execution_count" in o:
                o["execution_count"] = n
            if "text" in o:
                o["text"] = fix(o["text"])
            for k, v in list((o.get("data") or {}).items()):
                if isinstance(v, str):
                    o["data"][k] = fix(v)


INPUTS_KEY = "workbench_inputs"
"""The executed notebook's metadata entry: the digest of the data it ran on (`inputs_digest`)."""
INPUT_FOLDERS = ("profiles", os.path.join("tests", "data"))
"""What the notebooks read: the committed profiles/ (tests/data: the tiny dose run they fall back to)."""


def inputs_digest(repo: str = REPO) -> dict:
    """{"files", "sha256"} of the data the notebooks run on: sha256 over each tracked file of `INPUT_FOLDERS` (its
    path and its content's sha256, in path order), as the working tree holds it."""
    import hashlib
    import subprocess

    names = subprocess.run(["git", "ls-files", "-z", "--", *INPUT_FOLDERS], cwd=repo, capture_output=True,
                           check=True).stdout.decode().split("\0")
    h, n = hashlib.sha256(), 0
    for name in sorted(x for x in names if x and os.path.isfile(os.path.join(repo, x))):
        with open(os.path.join(repo, name), "rb") as f:
            h.update(name.encode() + b"\0" + hashlib.sha256(f.read()).hexdigest().encode() + b"\n")
        n += 1
    return {"files": n, "sha256": h.hexdigest()}


def _outputs(nb) -> list:
    return [c.get("outputs") for c in nb.cells if c.cell_type == "code"]


def _sources(nb) -> list:
    return [c.source for c in nb.cells]


def reexecuted_without_new_data(old, new) -> bool:
    """Whether `new` is `old` executed again on the same data: both record their inputs (`INPUTS_KEY`), the same,
    their cells' sources are the same, and the outputs differ. A notebook is committed executed only when its data or
    its own cells change; an older version that records no inputs is no evidence either way."""
    before, after = old.metadata.get(INPUTS_KEY), new.metadata.get(INPUTS_KEY)
    return (before is not None and before == after and _sources(old) == _sources(new)
            and _outputs(old) != _outputs(new))


def execute_notebooks(paths: list[str], timeout: int = 600, repo: str = REPO) -> None:
    """Execute each notebook against the committed profiles/ (nbclient, the `python3` kernel) and write it back with
    its outputs, normalized (`normalize_outputs`), and the digest of the data it ran on (`inputs_digest`)."""
    import nbclient
    import nbformat

    env = {"WB_PLOTLY_RENDERER": NOTEBOOK_RENDERER, "WB_PROFILES": None, "WB_INCLUDE_CPU": None,
           "WB_INCLUDE_INCOMPLETE": None, "WB_PNG_DIR": None}
    digest = inputs_digest(repo)  # the notebooks only read the data: one digest serves every one of them
    with environ(env):
        for p in paths:
            nb = nbformat.read(p, as_version=4)
            nbclient.NotebookClient(nb, kernel_name="python3", timeout=timeout, record_timing=False,
                                    resources={"metadata": {"path": os.path.dirname(os.path.abspath(p))}}).execute()
            normalize_outputs(nb, repo)
            nb.metadata[INPUTS_KEY] = digest
            nbformat.write(nb, p)
            print(f"executed {p}")


@contextlib.contextmanager
def environ(overrides: dict):
    """Set environment variables for the duration (a None value unsets one); restore them after."""
    def put(values: dict) -> None:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    old = {k: os.environ.get(k) for k in overrides}
    try:
        put(overrides)
        yield
    finally:
        put(old)


def _at(repo: str, rev: str, rel: str):
    """The notebook `rel` as commit `rev` holds it (None where git has no such version)."""
    import subprocess

    import nbformat

    r = subprocess.run(["git", "show", f"{rev}:{rel}"], cwd=repo, capture_output=True)
    return nbformat.reads(r.stdout.decode(), as_version=4) if r.returncode == 0 else None


def reexecution_problems(paths: list[str], repo: str = REPO, rev: str = "HEAD") -> list[str]:
    """One line per notebook of `paths` (as the working tree holds it) that is its version at `rev` executed again
    on the same data (`reexecuted_without_new_data`)."""
    import nbformat

    out = []
    for p in paths:
        rel = os.path.relpath(os.path.abspath(p), repo)
        old = _at(repo, rev, rel)
        if old is not None and reexecuted_without_new_data(old, nbformat.read(p, as_version=4)):
            out.append(f"{rel}: executed again on the data its {rev} version ran on (outputs changed, its data and "
                       f"cells not): commit an executed notebook only with a change to its data or cells (git checkout "
                       f"{rev} -- {rel})")
    return out
