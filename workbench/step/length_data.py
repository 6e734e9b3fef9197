"""Real document-length distributions shipped in the repository's `data/` (`--lengths data:NAME`).

    # n = documents in a corpus, T = the token budget of a batch

`data/NAME.json` is a JSON list of token counts, one per document of a real corpus; `data/NAME.provenance.md` says
where it comes from, with which tokenizer and under which licence, and its first line (`# NAME: description`) is the
one-line description `--help` shows. `data/build_lengths.py` rebuilds every file. A `data:NAME` source draws
documents with replacement from the n lengths (seeded), truncating one longer than T to T.
"""
from __future__ import annotations

import functools
import json
import os

from workbench.errors import WorkbenchError

from workbench.paths import DATA_DIR
"""The repository's top-level data/ folder."""
PROVENANCE_SUFFIX = ".provenance.md"

DEFAULT_LENGTHS = "lognormal:5.5:0.8:16"
"""The `--lengths` default of every CLI (synthetic; `workbench.step.config.DataConfig.lengths`)."""
LENGTH_FORMS = {"fixed": "fixed:N", "uniform": "uniform:LO:HI", "lognormal": "lognormal:MU:SIGMA[:MIN]",
                "data": "data:NAME", "json": "json:PATH", "file": "file:PATH[:COLUMN[:TOKENIZER_DIR]]",
                "jsonl": "jsonl:PATH:TOKENIZER_DIR"}
"""The `--lengths` forms, by kind (`workbench.step.data.LengthSource` parses them)."""


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
    known = names(data_dir)
    if name not in known:
        raise WorkbenchError(f"no length distribution named {name!r} in {data_dir}; data:NAME takes one of "
                             f"{', '.join(known) or '(none)'}")
    return tuple(read_json_lengths(length_path(name, data_dir)))


def help_text(data_dir: str = DATA_DIR) -> str:
    """`data:NAME` with the names and their descriptions, for --help."""
    items = [f"{n}: {describe(n, data_dir)}" if describe(n, data_dir) else n for n in names(data_dir)]
    return "data:NAME (a real corpus's lengths in data/; " + ("; ".join(items) or "none installed") + ")"


def lengths_help(data_dir: str = DATA_DIR) -> str:
    """The one help text of `--lengths` (every CLI that takes it): the forms, the default, the data:NAME names."""
    return ("document lengths: fixed:N (every document N tokens), uniform:LO:HI (integers, LO <= HI), "
            f"lognormal:MU:SIGMA[:MIN] (natural-log mean and spread, lengths at least MIN; the default {DEFAULT_LENGTHS} "
            "is synthetic), " + help_text(data_dir) + ", json:PATH (a JSON list of lengths), file:PATH[:COLUMN[:TOKENIZER_DIR]] "
            "(your own dataset: JSONL, Parquet or Arrow; a length, token-ids or text column, text tokenized with the "
            "model's tokenizer; workbench/step/length_files.py), jsonl:PATH:TOKENIZER_DIR "
            "(JSONL of {\"text\": ...}, tokenized with a local tokenizer, once per process); checked before any model "
            "is built")


def read_json_lengths(path: str) -> list[int]:
    """A JSON file's list of positive document lengths (`json:PATH`, and every `data:NAME`); one clear error otherwise."""
    if not os.path.isfile(path):
        raise WorkbenchError(f"length file not found: {path}; json:PATH needs an existing file holding a JSON list "
                             "of document lengths")
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except json.JSONDecodeError as e:
        raise WorkbenchError(f"length file {path} is not JSON: {e.msg} (line {e.lineno}); json:PATH needs a JSON "
                             "list of positive integers") from None
    except (OSError, UnicodeDecodeError) as e:
        raise WorkbenchError(f"cannot read length file {path}: {e.strerror if isinstance(e, OSError) else e.reason}; "
                             "json:PATH needs a readable JSON list of positive integers") from None
    if not isinstance(raw, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in raw):
        raise WorkbenchError(f"length file {path} must hold a JSON list of integers, e.g. [512, 37, 2048]")
    bad = [x for x in raw if x <= 0]
    if bad:
        raise WorkbenchError(f"length file {path} holds non-positive lengths, e.g. {bad[0]}; every length must be > 0")
    return raw
