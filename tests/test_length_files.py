"""`--lengths file:PATH[:COLUMN[:TOKENIZER_DIR]]`: a user's JSONL / Parquet / Arrow dataset as the run's documents, its
provenance recorded, one-line refusals."""
import json
import random

import pytest

from workbench.errors import WorkbenchError
from workbench.step.data import LengthSource
from workbench.step.length_files import with_model_tokenizer

pa = pytest.importorskip("pyarrow")


def _tokenizer_dir(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    t = Tokenizer(models.WordLevel({"[UNK]": 0, **{w: i + 1 for i, w in enumerate("the a cat dog sat ran".split())}},
                                   unk_token="[UNK]"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    d = tmp_path / "model"
    PreTrainedTokenizerFast(tokenizer_object=t, unk_token="[UNK]").save_pretrained(str(d))
    return d


TEXTS = ["the cat sat", "a dog ran the cat", "dog"]


def test_jsonl_text_column_tokenized_with_the_model_tokenizer(tmp_path):
    p = tmp_path / "mine.jsonl"
    p.write_text("".join(json.dumps({"text": t, "id": i}) + "\n" for i, t in enumerate(TEXTS)))
    tok = _tokenizer_dir(tmp_path)
    with pytest.raises(WorkbenchError, match="tokenizer") as e:  # a preset has no tokenizer files
        with_model_tokenizer(f"file:{p}", "tiny-qwen3")
    assert "\n" not in str(e.value)
    spec = with_model_tokenizer(f"file:{p}", str(tok))
    assert spec == f"file:{p}:text:{tok}"
    src = LengthSource(spec)
    assert sorted({d.length for d in src.draw(200, 100, random.Random(0))}) == sorted(len(t.split()) for t in TEXTS)
    prov = src.provenance()
    assert prov["column"] == "text" and prov["column_kind"] == "text" and prov["documents"] == 3
    assert prov["tokens"] == 9 and prov["format"] == "jsonl" and len(prov["sha256"]) == 64


def test_parquet_length_and_token_id_columns(tmp_path):
    import pyarrow.parquet as pq
    p = tmp_path / "mine.parquet"
    pq.write_table(pa.table({"input_ids": [[1, 2, 3], [4, 5], [6]], "n": [7, 9, 11]}), str(p))
    ids = LengthSource(f"file:{p}")  # the first of the automatic columns the file has
    got = {(tuple(d.tokens), d.length) for d in ids.draw(100, 100, random.Random(0))}
    assert got == {((1, 2, 3), 3), ((4, 5), 2), ((6,), 1)}
    assert {(tuple(d.tokens), d.length) for d in ids.draw(100, 2, random.Random(0))} == {((1, 2), 2), ((4, 5), 2),
                                                                                         ((6,), 1)}  # truncated
    lens = LengthSource(f"file:{p}:n")
    assert {d.length for d in lens.draw(200, 100, random.Random(0))} == {7, 9, 11}
    assert lens.provenance()["column_kind"] == "lengths" and lens.provenance()["tokens"] == 27
    assert with_model_tokenizer(f"file:{p}:n", None) == f"file:{p}:n"  # no text: nothing to bind


def test_arrow_stream_as_datasets_saves_it(tmp_path):
    p = tmp_path / "data-00000-of-00001.arrow"
    table = pa.table({"length": [5, 6]})
    with pa.OSFile(str(p), "wb") as f, pa.ipc.new_stream(f, table.schema) as w:
        w.write_table(table)
    assert {d.length for d in LengthSource(f"file:{p}").draw(100, 100, random.Random(0))} == {5, 6}


@pytest.mark.parametrize("spec, says", [("file:{d}/none.parquet", "no such file"),
                                        ("file:{d}/mine.parquet:nope", "no column 'nope'; the file has n"),
                                        ("file:{d}/mine.parquet:s", "must hold"),
                                        ("file:{d}/mine.csv", "unknown format")])
def test_bad_input_is_one_line(tmp_path, spec, says):
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"n": [1, 2], "s": [1.5, 2.5]}), str(tmp_path / "mine.parquet"))
    (tmp_path / "mine.csv").write_text("n\n1\n")
    with pytest.raises(WorkbenchError, match=says) as e:
        LengthSource(spec.format(d=tmp_path))
    assert "\n" not in str(e.value)


def test_ab_cli_refuses_a_missing_column_in_one_line(tmp_path):
    import pyarrow.parquet as pq
    from workbench.ab.cli import parse_args
    pq.write_table(pa.table({"n": [1, 2]}), str(tmp_path / "x.parquet"))
    with pytest.raises(WorkbenchError, match="no column 'length'") as e:
        parse_args(["--lengths", f"file:{tmp_path}/x.parquet:length"])
    assert "\n" not in str(e.value)
    assert parse_args(["--lengths", f"file:{tmp_path}/x.parquet:n"]).data.lengths == f"file:{tmp_path}/x.parquet:n"


def test_token_ids_outside_the_vocabulary_are_refused():
    from workbench.step.data import Document, collate
    import torch
    with pytest.raises(WorkbenchError, match="outside the model's vocabulary"):
        collate([Document([1, 300], 2)], 256, torch.Generator())
