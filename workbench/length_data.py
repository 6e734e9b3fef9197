"""Real document-length distributions shipped in the repository's `data/` (`--lengths data:NAME`).

    # n = documents in a corpus, T = the token budget of a batch

`data/NAME.json` is a JSON list of token counts, one per document of a real corpus; `data/NAME.provenance.md` says
where it comes from, with which tokenizer and under which licence, and its first line (`# NAME: description`) is the
one-line description `--help` shows. `data/build_lengths.py` rebuilds every file. A `data:NAME` source draws
documents with replacement from the n lengths (seeded), truncating one longer than T to T.
"""
from __future__ import annotations

import functools
import os

from workbench.errors import WorkbenchError

DATA_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")
"""The repository's top-level data/ folder."""
PROVENANCE_SUFFIX = ".provenance.md"


def names(data_dir: str = DATA_DIR) -> list[str]:
    """The distributions in `data_dir`: every NAME with a NAME.json, sorted."""
    if not os.path.isdir(data_dir):
        return []
    return sorted(f[:-len(".json")] for f in os.listdir(data_dir) if f.endswith(".json"))


def length_path(name: str, data_dir: str = DATA_DIR) -> str:
    return os.path.join(data_dir, f"{name}.json")


def provenance_path(name: str, data_dir: str = DATA_DIR) -> str:
    return os.path.join(data_dir, f"{name}{PROVENANCE_SUFFIX}")


def describe(name: str, data_dir: str = DATA_DIR) -> str:
    """The one-line description from the provenance file's first line (`# NAME: description`); '' without one."""
    try:
        with open(provenance_path(name, data_dir), encoding="utf-8") as f:
            first = f.readline().strip()
    except OSError:
        return ""
    return first.lstrip("#").strip().removeprefix(f"{name}:").strip()


@functools.lru_cache(maxsize=None)
def load(name: str, data_dir: str = DATA_DIR) -> tuple[int, ...]:
    """The document lengths of distribution `name`; a WorkbenchError naming the known ones if there is none."""
    from workbench.data import _read_json_lengths

    known = names(data_dir)
    if name not in known:
        raise WorkbenchError(f"no length distribution named {name!r} in {data_dir}; data:NAME takes one of "
                             f"{', '.join(known) or '(none)'}")
    return tuple(_read_json_lengths(length_path(name, data_dir)))


def help_text(data_dir: str = DATA_DIR) -> str:
    """`data:NAME` with the names and their descriptions, for --help."""
    items = [f"{n}: {describe(n, data_dir)}" if describe(n, data_dir) else n for n in names(data_dir)]
    return "data:NAME (a real corpus's lengths in data/; " + ("; ".join(items) or "none installed") + ")"
