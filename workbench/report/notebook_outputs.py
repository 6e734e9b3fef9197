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


def execute_notebooks(paths: list[str], timeout: int = 600, repo: str = REPO) -> None:
    """Execute each notebook against the committed profiles/ (nbclient, the `python3` kernel) and write it back with
    its outputs, normalized (`normalize_outputs`)."""
    import nbclient
    import nbformat

    env = {"WB_PLOTLY_RENDERER": NOTEBOOK_RENDERER, "WB_PROFILES": None, "WB_INCLUDE_CPU": None,
           "WB_INCLUDE_INCOMPLETE": None, "WB_PNG_DIR": None}
    with environ(env):
        for p in paths:
            nb = nbformat.read(p, as_version=4)
            nbclient.NotebookClient(nb, kernel_name="python3", timeout=timeout, record_timing=False,
                                    resources={"metadata": {"path": os.path.dirname(os.path.abspath(p))}}).execute()
            normalize_outputs(nb, repo)
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

