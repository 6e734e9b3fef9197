import json

import pytest
import torch

from workbench.step.data import IGNORE_INDEX, LengthSource, batch_from_lengths, make_batches, pack_best_fit_decreasing
from workbench.errors import WorkbenchError


@pytest.mark.parametrize("spec", ["fixed:37", "uniform:5:90", "lognormal:4:1:3"])
def test_batches_are_well_formed_and_deterministic(spec):
    a = make_batches(spec, 512, 3, vocab_size=100, seed=7)
    b = make_batches(spec, 512, 3, vocab_size=100, seed=7)
    for x, y in zip(a, b):
        assert torch.equal(x.input_ids, y.input_ids) and x.doc_lens == y.doc_lens
    for batch in a:
        T = batch.tokens
        assert T <= 512 and sum(batch.doc_lens) == T
        expected_pos = torch.cat([torch.arange(n) for n in batch.doc_lens])
        assert torch.equal(batch.position_ids[0], expected_pos)
        starts = batch.position_ids[0] == 0
        assert torch.equal(batch.labels[0][starts], torch.full((len(batch.doc_lens),), IGNORE_INDEX))
        assert torch.equal(batch.labels[0][~starts], batch.input_ids[0][~starts])
    other = make_batches(spec, 512, 3, vocab_size=100, seed=8)
    assert any(not torch.equal(x.input_ids, y.input_ids) for x, y in zip(a, other))


def test_bfd_packs_every_document_exactly_once():
    lengths = [300, 200, 500, 100, 100, 400, 250, 150, 1000]
    bins = pack_best_fit_decreasing(lengths, 1000)
    flat = sorted(i for b in bins for i in b)
    assert flat == list(range(len(lengths)))
    assert all(sum(lengths[i] for i in b) <= 1000 for b in bins)
    assert len(bins) == 3  # 3000 tokens fit exactly into 3 bins: BFD finds it


def test_json_lengths_source_keeps_every_token(tmp_path):
    p = tmp_path / "lengths.json"
    lengths = [5, 17, 3, 64, 1, 40]
    p.write_text(json.dumps(lengths))
    batches = make_batches(f"json:{p}", 64, 3, vocab_size=50)  # 130 tokens: 3 bins
    assert sorted(n for b in batches for n in b.doc_lens) == sorted(lengths)


@pytest.mark.parametrize("spec, msg", [
    ("fixed:0", "positive"), ("uniform:9:3", "LO <= HI"), ("nope:3", "bad length source"),
    ("fixed:x", "integer"), ("json:/does/not/exist.json", "not found"),
])
def test_bad_length_sources(spec, msg):
    with pytest.raises(WorkbenchError, match=msg):
        LengthSource(spec)


def test_empty_length_file(tmp_path):
    p = tmp_path / "empty.json"
    p.write_text("[]")
    with pytest.raises(WorkbenchError, match="no documents"):
        LengthSource(f"json:{p}")


def test_document_longer_than_budget():
    with pytest.raises(WorkbenchError, match="longer than the token budget"):
        make_batches("fixed:600", 512, 1, vocab_size=10)


@pytest.mark.parametrize("tokens, n", [(0, 1), (-5, 1), (64, 0)])
def test_non_positive_sizes(tokens, n):
    with pytest.raises(WorkbenchError, match="positive"):
        make_batches("fixed:4", tokens, n, vocab_size=10)


def test_batch_from_lengths_edge_cases():
    b = batch_from_lengths([1, 1, 5], vocab_size=10)
    assert b.position_ids[0].tolist() == [0, 0, 0, 1, 2, 3, 4]
    assert (b.labels[0][:2] == IGNORE_INDEX).all()
