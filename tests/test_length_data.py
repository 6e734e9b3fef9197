"""data/: real document-length distributions, their provenance, `--lengths data:NAME`."""
import collections
import json
import os
import subprocess
import sys

import pytest
import torch

from workbench.step import length_data
from workbench.step.data import LengthSource, make_batches, pack_best_fit_decreasing
from workbench.errors import WorkbenchError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMES = length_data.names()
BUDGET = 16384


def test_data_ships_at_least_three_distributions():
    assert len(NAMES) >= 3, NAMES
    assert {"chat", "code", "docs"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_every_data_file_loads(name):
    lengths = length_data.load(name)
    assert len(lengths) >= 50 and all(isinstance(n, int) and n > 0 for n in lengths)
    with open(length_data.length_path(name)) as f:
        assert json.load(f) == list(lengths)  # also a valid json:PATH file
    assert os.path.getsize(length_data.length_path(name)) < 64 * 1024  # kilobytes of lengths, not a corpus
    src = LengthSource(f"data:{name}")
    assert src.kind == "data" and not src.finite


@pytest.mark.parametrize("name", NAMES)
def test_provenance_exists_and_names_source_tokenizer_licence(name):
    path = length_data.provenance_path(name)
    assert os.path.isfile(path), f"{name}: no {os.path.basename(path)}"
    text = open(path, encoding="utf-8").read()
    assert text.startswith(f"# {name}: ")
    for field in ("**Source**", "**Licence**", "**Tokenizer**", "**How built**", "**Built**"):
        line = next((ln for ln in text.splitlines() if ln.lstrip("- ").startswith(field)), "")
        assert len(line.split(field, 1)[1].strip(" :")) > 10, f"{name}: {field} says nothing"
    assert "build_lengths.py" in text
    assert length_data.describe(name) and length_data.describe(name) in length_data.lengths_help()


def _check_preserved(lengths, bins, budget):
    """Every document in exactly one bin, no bin over the budget, the lengths' multiset unchanged."""
    flat = [i for b in bins for i in b]
    assert sorted(flat) == list(range(len(lengths))), "a document is lost or duplicated"
    assert all(sum(lengths[i] for i in b) <= budget for b in bins)
    assert collections.Counter(lengths[i] for i in flat) == collections.Counter(lengths)


@pytest.mark.parametrize("name", NAMES)
def test_packing_a_whole_distribution_preserves_every_document(name):
    lengths = [min(n, BUDGET) for n in length_data.load(name)]  # data:NAME truncates to the budget
    bins = pack_best_fit_decreasing(lengths, BUDGET)
    _check_preserved(lengths, bins, BUDGET)
    dropped = [b[1:] if i == 0 else b for i, b in enumerate(bins)]  # negative control: one document lost
    with pytest.raises(AssertionError, match="lost"):
        _check_preserved(lengths, dropped, BUDGET)


@pytest.mark.parametrize("name", NAMES)
def test_data_batches_draw_real_lengths_and_keep_every_token(name):
    real = set(length_data.load(name))
    batches = make_batches(f"data:{name}", 2048, 3, vocab_size=100, seed=3)
    again = make_batches(f"data:{name}", 2048, 3, vocab_size=100, seed=3)
    for b, c in zip(batches, again):
        assert b.doc_lens == c.doc_lens and torch.equal(b.input_ids, c.input_ids)  # deterministic for a seed
        assert sum(b.doc_lens) == b.tokens <= 2048
        assert all(n in real or n == 2048 for n in b.doc_lens)  # a real length, or one truncated to the budget
        assert [len(d) for d in b.documents()] == b.doc_lens
        assert torch.equal(b.position_ids[0], torch.cat([torch.arange(n) for n in b.doc_lens]))


def test_long_documents_are_truncated_to_the_budget():
    assert max(length_data.load("code")) > 1024
    lens = [n for b in make_batches("data:code", 1024, 4, vocab_size=100, seed=0) for n in b.doc_lens]
    assert max(lens) == 1024


def test_the_shapes_differ_in_documents_per_batch():
    def docs(spec):
        bs = make_batches(spec, BUDGET, 4, vocab_size=100, seed=0)
        return sum(len(b.doc_lens) for b in bs) / len(bs)
    chat, code, synthetic = docs("data:chat"), docs("data:code"), docs("lognormal:5.5:0.8:16")
    assert chat > 4 * synthetic and synthetic > 4 * code


def test_unknown_name_is_one_clear_error(tmp_path):
    with pytest.raises(WorkbenchError, match=r"no length distribution named 'NOPE'.*chat, code, docs"):
        LengthSource("data:NOPE")
    assert length_data.names(str(tmp_path / "missing")) == []
    with pytest.raises(WorkbenchError, match=r"\(none\)"):
        length_data.load("chat", str(tmp_path))


def test_a_custom_data_dir_is_read(tmp_path):
    (tmp_path / "tiny.json").write_text("[3, 5, 8]")
    (tmp_path / "tiny.provenance.md").write_text("# tiny: three documents\n")
    assert length_data.names(str(tmp_path)) == ["tiny"]
    assert length_data.load("tiny", str(tmp_path)) == (3, 5, 8)
    assert "tiny: three documents" in length_data.help_text(str(tmp_path))
    (tmp_path / "bad.json").write_text("[3, -1]")
    with pytest.raises(WorkbenchError, match="non-positive"):
        length_data.load("bad", str(tmp_path))


def early_start(tmp_path_factory, items):
    """test_cli_data_nope_is_one_line_rc_2's processes, started at collection (conftest's pytest_collection_finish)."""
    modules = [item.callspec.params["module"] for item in items
               if item.originalname == "test_cli_data_nope_is_one_line_rc_2"]
    if modules:
        from conftest import Started
        started = Started(tmp_path_factory)
        for module in modules:
            started.start(module, [sys.executable, "-m", module, "--lengths", "data:NOPE"], cwd=REPO)
        return started


@pytest.mark.parametrize("module", ["workbench.ab", "workbench.run"])
def test_cli_data_nope_is_one_line_rc_2(module):
    from conftest import early
    started = early(__name__)
    if started:
        r = started.result(module, timeout=120)
    else:
        r = subprocess.run([sys.executable, "-m", module, "--lengths", "data:NOPE"], capture_output=True, text=True,
                           cwd=REPO, timeout=120)
    assert r.returncode == 2
    lines = [ln for ln in (r.stderr + r.stdout).splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    assert "'NOPE'" in lines[0] and "chat, code, docs" in lines[0] and "Traceback" not in r.stderr


def test_ab_help_lists_the_names_and_says_the_default_is_synthetic(capsys, monkeypatch):
    from workbench import ab

    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit):
        ab.parse_args(["--help"])
    h = capsys.readouterr().out
    assert "data:NAME" in h and "synthetic" in h and "lognormal:5.5:0.8:16" in h
    for name in NAMES:
        assert f"{name}: " in h, name


def test_lengths_has_one_default_and_one_help_text():
    """Every CLI that takes --lengths shows the one help text (`length_data.lengths_help`) and the one default; ab's
    is per device (None until resolved): the GPU's is that default, the CPU's short documents."""
    from workbench import fidelity, run
    from workbench.ab import cli as ab_cli
    from workbench.ab.ab_config import ABConfig
    from workbench.step.config import DataConfig, RunConfig

    assert RunConfig().data.lengths == DataConfig().lengths == length_data.DEFAULT_LENGTHS
    assert ABConfig().data.lengths is None and ab_cli.GPU_DEFAULTS["_run"]["lengths"] == length_data.DEFAULT_LENGTHS
    parsers = {"ab": ab_cli.build_parser(), "run": run.build_parser(), "fidelity": fidelity.build_parser()}
    acts = {k: next(a for a in p._actions if "--lengths" in a.option_strings) for k, p in parsers.items()}
    assert acts.pop("ab").default is None
    assert {a.default for a in acts.values()} == {length_data.DEFAULT_LENGTHS}
    text = length_data.lengths_help()
    assert acts["fidelity"].help == text and text in ab_cli._epilog()
    assert text.removeprefix("document lengths: ").replace("), ", ")\n  ") in parsers["run"].epilog


def test_a_spec_is_parsed_once_per_process(tmp_path, monkeypatch):
    """A json: (or jsonl:) source reads (tokenizes) its file once, however often the run asks: the CLI's check, the
    planner's, each comparison's batches (`data.parse_lengths`); a negative control: a new spec reads again."""
    from workbench.step import data
    from workbench.step.config import DataConfig

    path = tmp_path / "lens.json"
    path.write_text("[5, 7, 9, 11]")
    reads = []
    real = length_data.read_json_lengths
    monkeypatch.setattr(length_data, "read_json_lengths", lambda p: reads.append(p) or real(p))
    spec = f"json:{path}"
    data.check_lengths(spec)
    cfg = DataConfig(lengths=spec, tokens=16, batches=2)
    cfg.make_batches(16, 100)
    cfg.make_batches(32, 100, batches=1)
    make_batches(spec, 16, 2, 100)
    assert cfg.source is data.parse_lengths(spec) and len(reads) == 1
    data.check_lengths(f"json:{tmp_path}/./lens.json")  # another spec string: parsed (read) again
    assert len(reads) == 2
