"""Packed batches: document lengths from a source, best-fit-decreasing packing into a token budget.

    # T = packed tokens of a batch, D = documents in it

Length sources (`parse_lengths`): `fixed:N`, `uniform:LO:HI`, `lognormal:MU:SIGMA[:MIN]` (natural-log
parameters), `data:NAME` (a real corpus's lengths in data/, drawn with replacement, one longer than the budget
truncated to it: `workbench.step.length_data`), `json:PATH` (a JSON list of lengths), `jsonl:PATH:TOKENIZER_DIR` (a JSONL
of {"text": ...} tokenized with a local tokenizer). The default, `lognormal:5.5:0.8:16`, is synthetic. A
`PackedBatch` holds input_ids (1,T), position_ids restarting at 0 in every document, labels with each document's
first token set to -100 (no prediction across a boundary), and the document lengths. Everything is deterministic for
a seed; packing loses or duplicates no token.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import random

from workbench.step import length_data
from workbench.step.length_data import DEFAULT_LENGTHS, LENGTH_FORMS  # noqa: F401 - their one owner
from workbench.errors import WorkbenchError

IGNORE_INDEX = -100



@dataclasses.dataclass
class Document:
    tokens: list[int] | None
    """Token ids, or None for a synthetic document (ids drawn at packing time)."""
    length: int


@dataclasses.dataclass
class PackedBatch:
    input_ids: torch.Tensor
    """(1, T) token ids."""
    position_ids: torch.Tensor
    """(1, T) positions, restarting at 0 in each document."""
    labels: torch.Tensor
    """(1, T) = input_ids with each document's first token set to -100."""
    doc_lens: list[int]
    """Length of each document, in order; sums to T."""
    meta: dict = dataclasses.field(default_factory=dict)
    """Extra per-batch items an optimization precomputes at collate time (e.g. cu_seqlens)."""

    @property
    def tokens(self) -> int:
        return int(self.input_ids.shape[1])

    def to(self, device, non_blocking: bool = False) -> "PackedBatch":
        import torch

        def mv(x):
            return x.to(device, non_blocking=non_blocking) if isinstance(x, torch.Tensor) else x
        return PackedBatch(mv(self.input_ids), mv(self.position_ids), mv(self.labels), list(self.doc_lens),
                           {k: mv(v) for k, v in self.meta.items()})

    def documents(self) -> list[torch.Tensor]:
        """The token ids of each document (1-D tensors)."""
        import torch
        return list(torch.split(self.input_ids[0], self.doc_lens))


def _positive_int(s: str, what: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise WorkbenchError(f"{what} must be an integer, got {s!r}") from None
    if v <= 0:
        raise WorkbenchError(f"{what} must be positive, got {v}")
    return v


def _float(s: str, what: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise WorkbenchError(f"{what} must be a number, got {s!r}") from None
    if not math.isfinite(v):
        raise WorkbenchError(f"{what} must be a finite number, got {s!r}")
    return v


class LengthSource:
    """Draws documents; `spec` is one of the forms in the module docstring."""

    def __init__(self, spec: str):
        self.spec = spec
        kind, _, rest = spec.partition(":")
        parts = rest.split(":") if rest else []
        self.kind = kind
        self._docs: list[Document] | None = None
        self.file = None
        """`file:` sources: the `workbench.step.length_files.FileLengths` read."""
        try:
            known = self._parse(kind, parts)
        except WorkbenchError as e:
            if kind in ("fixed", "uniform", "lognormal"):  # name the spec and its form with the problem
                raise WorkbenchError(f"bad length source {spec!r}: {e}; use {LENGTH_FORMS[kind]}") from None
            raise
        if not known:
            raise WorkbenchError(f"bad length source {spec!r}: use {', '.join(list(LENGTH_FORMS.values())[:-1])} "
                                 f"or {LENGTH_FORMS['jsonl']}")
        if self._docs is not None and not self._docs:
            raise WorkbenchError(f"length source {spec!r} holds no documents")

    def _parse(self, kind: str, parts: list[str]) -> bool:
        """Set the source's parameters (or read its documents); False when `spec` matches no form."""
        if kind == "fixed" and len(parts) == 1:
            self.n = _positive_int(parts[0], "fixed length")
        elif kind == "uniform" and len(parts) == 2:
            self.lo, self.hi = _positive_int(parts[0], "uniform low"), _positive_int(parts[1], "uniform high")
            if self.lo > self.hi:
                raise WorkbenchError(f"uniform lengths need LO <= HI, got {self.lo} > {self.hi}")
        elif kind == "lognormal" and len(parts) in (2, 3):
            self.mu, self.sigma = _float(parts[0], "lognormal mu"), _float(parts[1], "lognormal sigma")
            if self.sigma < 0:
                raise WorkbenchError(f"lognormal sigma must be >= 0, got {self.sigma}")
            self.min_len = _positive_int(parts[2], "lognormal min") if len(parts) == 3 else 1
        elif kind == "data" and len(parts) == 1:
            self.empirical = length_data.load(parts[0])
        elif kind == "json" and len(parts) >= 1 and ":".join(parts):
            self._docs = [Document(None, n) for n in length_data.read_json_lengths(":".join(parts))]
        elif kind == "jsonl" and len(parts) >= 2:
            self._docs = _read_jsonl_texts(parts[0], ":".join(parts[1:]))
        elif kind == "file":
            from workbench.step.length_files import FileLengths
            self.file = FileLengths(":".join(parts))
        else:
            return False
        return True

    @property
    def finite(self) -> bool:
        return self._docs is not None

    def provenance(self) -> dict | None:
        """Where the lengths come from, for meta.json's `lengths_source`: a `file:` source's file (path, size, sha256,
        column, tokenizer: `length_files`), a `data:NAME` distribution's file and provenance note; None for the
        synthetic forms (their spec says it all)."""
        if self.file is not None:
            return self.file.provenance()
        if self.kind == "data":
            name = self.spec.partition(":")[2]
            return {"kind": "data", "name": name, "path": length_data.length_path(name),
                    "provenance_file": length_data.provenance_path(name), "description": length_data.describe(name),
                    "documents": len(self.empirical)}
        return None

    def draw(self, total_tokens: int, max_len: int, rng: random.Random) -> list[Document]:
        """Documents summing to at least `total_tokens`; a finite source gives each of its documents once."""
        if self.file is not None and self.file.needs_tokenizer:
            raise WorkbenchError(f"--lengths {self.spec}: column {self.file.column!r} holds text and no tokenizer is "
                                 "named (file:PATH:COLUMN:TOKENIZER_DIR, or --model a local checkpoint directory)")
        if self._docs is not None:
            return list(self._docs)
        if self.file is not None:  # as data:NAME: rows drawn with replacement (seeded), longer ones truncated
            docs, got = [], 0
            while got < total_tokens:
                ids, n = rng.choice(self.file.docs)
                docs.append(Document(None if ids is None else ids[:max_len], min(n, max_len)))
                got += docs[-1].length
            return docs
        docs: list[Document] = []
        got = 0
        while got < total_tokens:
            d = Document(None, self._draw_length(rng, max_len))
            docs.append(d)
            got += d.length
        return docs

    def _draw_length(self, rng: random.Random, max_len: int) -> int:
        if self.kind == "fixed":
            return self.n
        if self.kind == "uniform":
            return rng.randint(self.lo, self.hi)
        if self.kind == "data":  # a real document longer than the budget is truncated to it
            return min(rng.choice(self.empirical), max_len)
        x = rng.gauss(self.mu, self.sigma)
        # clamp in log space: exp of a large draw overflows (an int of inf), and anything >= max_len is max_len anyway
        n = max_len if x >= math.log(max_len) else int(round(math.exp(x)))
        return max(self.min_len, min(n, max_len))


def _read_jsonl_texts(path: str, tokenizer_dir: str) -> list[Document]:
    if not os.path.isfile(path):
        raise WorkbenchError(f"text file not found: {path}; jsonl:PATH:TOKENIZER_DIR needs an existing JSONL file of "
                             "{\"text\": ...} objects")
    if not os.path.isdir(tokenizer_dir):
        raise WorkbenchError(f"tokenizer directory not found: {tokenizer_dir}; jsonl:PATH:TOKENIZER_DIR needs a local "
                             "directory with tokenizer files")
    from transformers import AutoTokenizer
    try:
        tok = AutoTokenizer.from_pretrained(tokenizer_dir, local_files_only=True)
    except (OSError, ValueError, KeyError, TypeError) as e:
        first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
        raise WorkbenchError(f"cannot load a tokenizer from {tokenizer_dir} ({first}); jsonl:PATH:TOKENIZER_DIR needs "
                             "a local directory with tokenizer files (tokenizer.json / tokenizer_config.json)") from None
    docs = []
    try:
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    text = json.loads(line)["text"]
                except (json.JSONDecodeError, KeyError, TypeError):
                    raise WorkbenchError(f"{path}:{lineno}: expected a JSON object with a \"text\" field") from None
                if not isinstance(text, str):
                    raise WorkbenchError(f"{path}:{lineno}: \"text\" must be a string, got {type(text).__name__}")
                ids = tok(text, add_special_tokens=True)["input_ids"]
                if ids:
                    docs.append(Document(list(ids), len(ids)))
    except (OSError, UnicodeDecodeError) as e:
        raise WorkbenchError(f"cannot read text file {path}: {e.strerror if isinstance(e, OSError) else e.reason}; "
                             "jsonl:PATH:TOKENIZER_DIR needs a readable UTF-8 JSONL file") from None
    return docs


_SOURCES: dict[str, LengthSource] = {}
"""Parsed length sources by spec: a spec is parsed (a json file read, a jsonl corpus tokenized) once per process."""


def parse_lengths(spec) -> LengthSource:
    """The `LengthSource` of a `--lengths` spec, parsed once per process (`_SOURCES`); a LengthSource is returned
    as is. Raises WorkbenchError with a one-line message naming the problem and the form to use."""
    if isinstance(spec, LengthSource):
        return spec
    if not isinstance(spec, str):
        raise WorkbenchError(f"--lengths must be a string, got {type(spec).__name__}")
    if spec not in _SOURCES:
        _SOURCES[spec] = LengthSource(spec)
    return _SOURCES[spec]


def check_lengths(spec: str) -> str:
    """Validate a `--lengths` spec without building a model (json / jsonl sources read their file, once:
    `parse_lengths`); returns it. Raises WorkbenchError with a one-line message naming the problem and the form."""
    parse_lengths(spec)
    return spec


def lengths_arg(spec: str) -> str:
    """`check_lengths` as an argparse `type=`: a WorkbenchError becomes argparse.ArgumentTypeError."""
    try:
        return check_lengths(spec)
    except WorkbenchError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def pack_best_fit_decreasing(lengths: list[int], budget: int) -> list[list[int]]:
    """Pack document indices into bins of at most `budget` tokens, best fit decreasing.

    Returns bins of indices into `lengths`; every index appears exactly once.
    """
    if budget <= 0:
        raise WorkbenchError(f"token budget must be positive, got {budget}")
    too_long = [n for n in lengths if n > budget]
    if too_long:
        raise WorkbenchError(f"a document of {too_long[0]} tokens is longer than the token budget ({budget})")
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    bins: list[list[int]] = []
    free: list[int] = []
    for i in order:
        n = lengths[i]
        best, best_free = -1, budget + 1
        for b, f in enumerate(free):  # tightest bin that still fits
            if n <= f < best_free:
                best, best_free = b, f
        if best < 0:
            bins.append([i])
            free.append(budget - n)
        else:
            bins[best].append(i)
            free[best] -= n
    return bins


def collate(docs: list[Document], vocab_size: int, rng: torch.Generator) -> PackedBatch:
    """One packed batch from documents in order."""
    import torch  # here, not at the top: the CLIs check --lengths (LengthSource) before torch is imported
    ids, pos, lens = [], [], []
    for d in docs:
        if d.tokens is not None and max(d.tokens) >= vocab_size:  # another tokenizer's ids (a file's input_ids)
            raise WorkbenchError(f"a document's token id {max(d.tokens)} is outside the model's vocabulary "
                                 f"({vocab_size}): the ids come from another tokenizer; use a length or text column")
        t = torch.tensor(d.tokens, dtype=torch.long) if d.tokens is not None else \
            torch.randint(0, vocab_size, (d.length,), generator=rng)
        ids.append(t)
        pos.append(torch.arange(d.length, dtype=torch.long))
        lens.append(d.length)
    input_ids = torch.cat(ids).unsqueeze(0)
    position_ids = torch.cat(pos).unsqueeze(0)
    labels = input_ids.clone()
    labels[position_ids == 0] = IGNORE_INDEX
    return PackedBatch(input_ids, position_ids, labels, lens)


def make_batches(lengths, tokens: int, n_batches: int, vocab_size: int, seed: int = 0,
                 max_doc_len: int | None = None) -> list[PackedBatch]:
    """`n_batches` packed batches of at most `tokens` tokens each (the fullest bins of a BFD packing); `lengths` is a
    spec or a parsed `LengthSource` (`parse_lengths`)."""
    if tokens <= 0:
        raise WorkbenchError(f"--tokens must be positive, got {tokens}")
    if n_batches <= 0:
        raise WorkbenchError(f"number of batches must be positive, got {n_batches}")
    src = parse_lengths(lengths)
    rng = random.Random(seed)
    max_len = min(max_doc_len or tokens, tokens)
    docs = src.draw(tokens * (n_batches + 1), max_len, rng)
    bins = pack_best_fit_decreasing([d.length for d in docs], tokens)
    # fullest bins first, so every batch is close to the budget; ties keep packing order
    bins = sorted(bins, key=lambda b: -sum(docs[i].length for i in b))[:n_batches]
    import torch
    gen = torch.Generator().manual_seed(seed)
    batches = [collate([docs[i] for i in sorted(b)], vocab_size, gen) for b in bins]
    while len(batches) < n_batches:  # a small finite source: reuse its batches
        batches.append(batches[len(batches) % len(bins)])
    return batches


def batch_from_lengths(doc_lens: list[int], vocab_size: int, seed: int = 0) -> PackedBatch:
    """A packed batch with exactly these document lengths (tests, edge cases)."""
    if not doc_lens or any(n <= 0 for n in doc_lens):
        raise WorkbenchError(f"document lengths must be positive and non-empty, got {doc_lens}")
    import torch
    return collate([Document(None, n) for n in doc_lens], vocab_size, torch.Generator().manual_seed(seed))


def to_device(batches: list[PackedBatch], device, prepare=None) -> list[PackedBatch]:
    """`prepare` each CPU batch (collate-time work of an optimization), then copy it to `device`
    (pinned + non-blocking on CUDA, as a DataLoader with pin_memory would)."""
    import torch as _t
    out = []
    cuda = _t.device(device).type == "cuda"
    for b in batches:
        if prepare is not None:
            b = prepare(b)
        if cuda:
            b = PackedBatch(b.input_ids.pin_memory(), b.position_ids.pin_memory(), b.labels.pin_memory(),
                            list(b.doc_lens), {k: (v.pin_memory() if isinstance(v, _t.Tensor) else v)
                                               for k, v in b.meta.items()})
            b = b.to(device, non_blocking=True)
        out.append(b)
    if cuda:
        _t.cuda.synchronize(device)
    return out
