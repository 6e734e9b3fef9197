"""A user's own dataset as the document lengths of a run: `--lengths file:PATH[:COLUMN[:TOKENIZER_DIR]]`.

    # n = documents (rows) in the file

PATH is a dataset on disk: JSONL (`.jsonl` / `.json`, one object per line), Parquet (`.parquet`) or Arrow (`.arrow` /
`.feather`: the IPC file or stream format, as `datasets.Dataset.save_to_disk` writes). One column gives each row's
document, by its type:

- integers: the document's length in tokens (a `length` column);
- lists of integers: its token ids (`input_ids`: the ids are packed as they are);
- strings: its text (`text`), tokenized with the model's tokenizer: TOKENIZER_DIR, else the `--model` directory
  (`with_model_tokenizer` fills it in, so meta.json's `args.lengths` names the tokenizer used); a preset model has
  no tokenizer files, and is refused in one line.

COLUMN defaults to the first of `AUTO_COLUMNS` the file has. Each row is one document; a run draws rows with
replacement (seeded), truncating one longer than the batch's token budget, as `data:NAME` does. `provenance` is what the run records in meta.json (`lengths_source`): the file's absolute path, size and
sha256, its format, the column and its kind, the documents and tokens read, and the tokenizer.
"""
from __future__ import annotations

import hashlib
import json
import os

from workbench.errors import WorkbenchError

FORM = "file:PATH[:COLUMN[:TOKENIZER_DIR]]"
AUTO_COLUMNS = ("length", "lengths", "num_tokens", "input_ids", "text")
"""The columns `file:PATH` takes without COLUMN, in this order."""
FORMATS = {".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet", ".arrow": "arrow", ".feather": "arrow"}


def split_spec(rest: str) -> tuple[str, str | None, str | None]:
    """(path, column or None, tokenizer dir or None) of what follows `file:`."""
    parts = rest.split(":")
    return parts[0], (parts[1] or None) if len(parts) > 1 else None, ":".join(parts[2:]) or None


def _format(path: str) -> str:
    ext = os.path.splitext(path)[1].lower()
    if ext not in FORMATS:
        raise WorkbenchError(f"--lengths file:{path}: unknown format {ext or '(no extension)'!r}; {FORM} reads "
                             + ", ".join(sorted(FORMATS)))
    return FORMATS[ext]


def _columns(path: str, fmt: str) -> dict:
    """{column: list of values} of the file (every column for JSONL; pyarrow for Parquet / Arrow)."""
    if fmt == "jsonl":
        rows = []
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if line.strip():
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError:
                        raise WorkbenchError(f"{path}:{lineno}: not a JSON object (JSONL: one object per line)") from None
                    if not isinstance(row, dict):
                        raise WorkbenchError(f"{path}:{lineno}: not a JSON object (JSONL: one object per line)")
                    rows.append(row)
        names = list(dict.fromkeys(k for r in rows for k in r))
        return {k: [r.get(k) for r in rows] for k in names}
    import pyarrow as pa
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq
            table = pq.read_table(path)
        else:
            try:
                with pa.memory_map(path) as src:
                    table = pa.ipc.open_file(src).read_all()
            except pa.ArrowInvalid:
                with pa.memory_map(path) as src:
                    table = pa.ipc.open_stream(src).read_all()
    except (pa.ArrowInvalid, OSError) as e:
        raise WorkbenchError(f"cannot read {path} as {fmt}: {' '.join(str(e).split())[:200]}") from None
    return {name: table.column(name).to_pylist() for name in table.column_names}


def _kind(values: list, path: str, column: str) -> str:
    """lengths / ids / text: what the column holds (every row the same kind, none missing)."""
    def of(v):
        if isinstance(v, bool):
            return None
        if isinstance(v, int):
            return "lengths"
        if isinstance(v, str):
            return "text"
        if isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
            return "ids"
        return None
    kinds = {of(v) for v in values}
    if len(kinds) != 1 or None in kinds:
        bad = next((v for v in values if of(v) is None), None)
        raise WorkbenchError(f"--lengths file:{path}: column {column!r} must hold, in every row, a length (integer), "
                             f"token ids (list of integers) or text (string); found {type(bad).__name__} "
                             f"{str(bad)[:40]!r}" if bad is not None or len(kinds) == 1 else
                             f"--lengths file:{path}: column {column!r} mixes lengths, token ids and text")
    return kinds.pop()


class FileLengths:
    """The documents of one `file:` spec: `docs` ([(token ids or None, length)]), or, for a text column without a
    tokenizer yet, `needs_tokenizer` (the CLI fills in the model's: `with_model_tokenizer`)."""

    def __init__(self, rest: str):
        self.path, column, self.tokenizer = split_spec(rest)
        if not self.path:
            raise WorkbenchError(f"--lengths file: needs a path: {FORM}")
        if not os.path.isfile(self.path):
            raise WorkbenchError(f"--lengths file:{self.path}: no such file; {FORM} takes a JSONL, Parquet or Arrow "
                                 "file on disk")
        self.format = _format(self.path)
        cols = _columns(self.path, self.format)
        if column is None:
            column = next((c for c in AUTO_COLUMNS if c in cols), None)
            if column is None:
                raise WorkbenchError(f"--lengths file:{self.path}: none of the columns {', '.join(AUTO_COLUMNS)}; name "
                                     f"one ({FORM}); the file has {', '.join(cols) or 'no columns'}")
        elif column not in cols:
            raise WorkbenchError(f"--lengths file:{self.path}: no column {column!r}; the file has "
                                 f"{', '.join(cols) or 'no columns'}")
        self.column = column
        values = cols[column]
        if not values:
            raise WorkbenchError(f"--lengths file:{self.path}: no rows")
        self.kind = _kind(values, self.path, column)
        self._texts = None
        self.docs: list[tuple[list[int] | None, int]] | None = None
        if self.kind == "lengths":
            bad = [v for v in values if v <= 0]
            if bad:
                raise WorkbenchError(f"--lengths file:{self.path}: column {column!r} holds a non-positive length "
                                     f"({bad[0]}); every length must be > 0")
            self.docs = [(None, int(v)) for v in values]
        elif self.kind == "ids":
            self.docs = [(list(v), len(v)) for v in values if v]
        elif self.tokenizer is not None:
            self.docs = _tokenize(values, self.tokenizer, self.path)
        else:
            self._texts = values
        if self.docs is not None and not self.docs:
            raise WorkbenchError(f"--lengths file:{self.path}: column {column!r} holds no non-empty document")

    @property
    def needs_tokenizer(self) -> bool:
        return self.docs is None

    def provenance(self) -> dict:
        """What meta.json records of the file (`lengths_source`)."""
        h = hashlib.sha256()
        with open(self.path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        docs = self.docs or []
        return {"kind": "file", "path": os.path.abspath(self.path), "bytes": os.path.getsize(self.path),
                "sha256": h.hexdigest(), "format": self.format, "column": self.column, "column_kind": self.kind,
                "tokenizer": os.path.abspath(self.tokenizer) if self.tokenizer else None,
                "documents": len(docs), "tokens": sum(n for _, n in docs)}


def _tokenize(texts: list[str], tokenizer_dir: str, path: str) -> list[tuple[list[int], int]]:
    if not os.path.isdir(tokenizer_dir):
        raise WorkbenchError(f"--lengths file:{path}: tokenizer directory not found: {tokenizer_dir}")
    from transformers import AutoTokenizer
    try:
        tok = AutoTokenizer.from_pretrained(tokenizer_dir, local_files_only=True)
    except (OSError, ValueError, KeyError, TypeError) as e:
        first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
        raise WorkbenchError(f"--lengths file:{path}: cannot load a tokenizer from {tokenizer_dir} ({first})") from None
    out = []
    for t in texts:
        ids = tok(t, add_special_tokens=True)["input_ids"]
        if ids:
            out.append((list(ids), len(ids)))
    return out


def _has_tokenizer(d: str) -> bool:
    return os.path.isdir(d) and any(os.path.isfile(os.path.join(d, f)) for f in
                                    ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json"))


def with_model_tokenizer(spec: str | None, model: str | None) -> str | None:
    """`spec` with the model's tokenizer named, where it is a `file:` spec whose column holds text and names no
    tokenizer: `file:PATH:COLUMN:MODEL_DIR` for a local checkpoint directory with tokenizer files; any other spec as
    given. A preset model (random weights from a config: no tokenizer) is refused in one line."""
    if not spec or not spec.startswith("file:"):
        return spec
    src = FileLengths(spec[len("file:"):])
    if not src.needs_tokenizer:
        return spec
    if model is None or not _has_tokenizer(model):
        raise WorkbenchError(f"--lengths {spec}: column {src.column!r} holds text, which needs the model's tokenizer, "
                             f"and --model {model or '(the default preset)'} has no tokenizer files; give --model a "
                             "local checkpoint directory, name a tokenizer directory (file:PATH:COLUMN:TOKENIZER_DIR), "
                             "or use a token-ids or length column")
    return f"file:{src.path}:{src.column}:{model}"
