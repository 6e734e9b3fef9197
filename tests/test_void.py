"""VOID.json: a run folder's comparisons declared void after the run (`workbench.measure.results.void_comparisons`),
honoured by every reader: the analysis frames, repeats, verdicts, the README headline and the results page, `python -m
workbench.report DIR`, the straggler verdict and its projection inputs, the lengths table. Each check has its negative
control: the same folders without the file (or an unmarked comparison) are read as before."""
from __future__ import annotations

import json
import os

import pytest

from workbench import analysis as an
from workbench.analysis import lengths
from workbench.cli import run_main
from workbench.errors import WorkbenchError
from workbench.measure import results
from workbench.report import readme as rr
from workbench.report.__main__ import main as report_main
from workbench.savings import straggler

from test_analysis import arm, comparison, packing, vs, with_verdict, write_run
from test_straggler import _folder, _inputs

REASON = "FSDP2 with the offload checkpoint computed no LoRA gradients: the step measured is not the training step"


def _void(folder, comparisons, found_by="issue 41", commit="eaf0076"):
    with open(os.path.join(folder, results.VOID_FILE), "w") as f:
        json.dump({"comparisons": comparisons, "found_by": found_by, "commit": commit}, f)


def _profiles(tmp_path):
    """A traced run (packing, offload, moe with savings-model verdicts; 6 reps) and a repeat of packing (4 reps)."""
    prof = tmp_path / "profiles"
    off = comparison("offload", arm("sync_reload", 1400.0), arm("double_buffer", 1380.0, v=vs(1.014, 1.012, 1.016)))
    moe = comparison("moe", arm("eager", 1700.0), arm("sort_bincount", 1600.0, v=vs(1.06, 1.05, 1.07)))
    write_run(str(prof / "camp" / "ab"), [with_verdict(packing(), 9.5, [8.0, 11.0], 10.0, [9.0, 11.5]),
                                          with_verdict(off, 5.0, [4.5, 5.5], 20.0, [18.0, 22.0]),
                                          with_verdict(moe, 90.0, [80.0, 100.0], 100.0, [95.0, 105.0])], reps=6)
    write_run(str(prof / "camp" / "again"), [packing()])
    return prof


def _frames(prof) -> dict:
    """{frame: the (folder job, comparison) pairs it holds} for every loader frame a void comparison must leave."""
    job = lambda f: os.path.basename(str(f))  # noqa: E731
    c = an.comparisons(str(prof))
    return {"comparisons": set(zip(c["folder"].map(job), c["name"])),
            "steps": set(zip(an.steps(str(prof))["folder"].map(job), an.steps(str(prof))["comparison"])),
            "verdicts": set(zip(an.verdicts(str(prof))["folder"].map(job), an.verdicts(str(prof))["comparison"])),
            "decomposition": set(zip(an.decomposition(str(prof))["folder"].map(job),
                                     an.decomposition(str(prof))["comparison"])),
            "breakdown": set(zip(an.breakdown(str(prof))["folder"].map(job), an.breakdown(str(prof))["comparison"])),
            "instrument_cost": set(zip(an.instrument_cost(str(prof))["folder"].map(job),
                                       an.instrument_cost(str(prof))["comparison"]))}


def test_a_void_comparison_leaves_every_frame_and_an_unmarked_one_stays(tmp_path):
    prof = _profiles(tmp_path)
    before = _frames(prof)
    assert all(("ab", "offload") in v for v in before.values())  # the frames hold it before the file is written
    assert an.voided(str(prof)).empty
    _void(str(prof / "camp" / "ab"), {"offload": REASON})  # after a first read: the cache sees the new file
    after = _frames(prof)
    for name, pairs in after.items():
        assert before[name] - pairs == {("ab", "offload")}, name  # exactly the void one is gone
    v = an.voided(str(prof))
    assert v[["comparison", "baseline", "arm", "void_reason", "void_found_by", "void_commit"]].values.tolist() == [
        ["offload", "sync_reload", "double_buffer", REASON, "issue 41", "eaf0076"]]
    assert v["file"].iloc[0] == os.path.join("profiles", "camp", "ab", "VOID.json")
    every = an.comparisons(str(prof), include_void=True)
    assert set(every[every["void_reason"].notna()]["name"]) == {"offload"}
    assert every[every["name"] != "offload"]["void_reason"].isna().all()  # negative control: unmarked rows
    assert an.comparisons(str(prof))["void_reason"].isna().all()
    runs = an.discover(str(prof)).set_index("job")
    assert runs.loc["ab", "void_comparisons"] == ["offload"] and runs.loc["again", "void_comparisons"] == []


def test_a_star_voids_every_comparison_of_the_folder(tmp_path):
    prof = _profiles(tmp_path)
    _void(str(prof / "camp" / "ab"), {"*": REASON})
    assert set(an.voided(str(prof))["comparison"]) == {"packing", "offload", "moe"}
    assert set(an.comparisons(str(prof))["folder"].map(os.path.basename)) == {"again"}


def test_repeats_headline_and_page_leave_out_a_void_run(tmp_path):
    prof = _profiles(tmp_path)
    assert an.repeats(an.comparisons(str(prof))).attrs["n"] == 2  # negative control: the packing runs pair (2 arms)
    md = rr.results_markdown(str(prof), repo=str(tmp_path))
    pk = next(r for r in md.splitlines() if r.startswith("| packing: "))
    assert "camp/ab/summary.json" in pk  # the 6-rep run is the reported one while it counts
    assert any(r.startswith("| packing savings model") for r in md.splitlines())
    _void(str(prof / "camp" / "ab"), {"packing": REASON})
    assert an.repeats(an.comparisons(str(prof))).attrs["n"] == 0
    md = rr.results_markdown(str(prof), repo=str(tmp_path))
    pk = next(r for r in md.splitlines() if r.startswith("| packing: "))
    assert "camp/again/summary.json" in pk and "camp/ab" not in pk
    assert not any(r.startswith("| packing savings model") for r in md.splitlines())  # its verdict was the void run's
    page = rr.page_markdown(str(prof), repo=str(tmp_path))
    speed = page[page.index("## Speedups"): page.index("## Void")]
    assert not [r for r in speed.splitlines() if r.startswith("| packing |") and "camp/ab/" in r]
    assert [r for r in speed.splitlines() if r.startswith("| offload |") and "camp/ab/" in r]  # unmarked: stays
    void = page[page.index("## Void"): page.index("## Savings models")]
    (row,) = [r for r in void.splitlines() if r.startswith("| packing |")]
    assert f"| rebuild -> cached | void: {REASON} | issue 41 | eaf0076 | [`profiles/camp/ab/VOID.json`]" in row
    ver = page[page.index("## Savings models"): page.index("## Where each traced saving")]
    assert "| packing |" not in ver and "| offload |" in ver


def test_report_cli_says_void_in_one_line_instead_of_the_table(tmp_path, capsys):
    prof = _profiles(tmp_path)
    d = str(prof / "camp" / "ab")
    assert report_main([d]) == 0
    plain = capsys.readouterr().out
    assert "offload: void" not in plain and "sync_reload" in plain  # negative control
    _void(d, {"offload": REASON})
    assert report_main([d]) == 0
    out = capsys.readouterr().out
    (line,) = [x for x in out.splitlines() if x.startswith("offload:")]
    assert line == f"offload: void: {REASON} (found by issue 41; fixed in eaf0076; {d}/VOID.json)"
    assert "sync_reload" not in out and "sort_bincount" in out  # no table of the void one; the others as before


def test_straggler_refuses_a_void_comparison(tmp_path, capsys):
    one = _folder(tmp_path / "one", "c", {"b": [100, 101, 99, 100], "o": [90, 91, 89, 90]})
    two = _folder(tmp_path / "two", "c", {"b": [110, 111, 109, 110], "o": [95, 96, 94, 95]}, ranks=2)
    _inputs(tmp_path / "two", 8.0, 3.0)
    assert straggler.compare(one, two)[0]["verdict"] != "void"  # negative control
    assert straggler.measured_at_ranks([two], "c", "b", "o")["mean"] == pytest.approx(15.0)
    _void(two, {"c": REASON})
    (r,) = straggler.compare(one, two)
    assert r["verdict"] == "void" and r["projection"] == [] and r["reason"] == f"void: {REASON} ({two}/VOID.json)"
    assert straggler.table([r]).splitlines()[1] == f"c | void: {REASON} ({two}/VOID.json)"
    for call in (lambda: straggler.measured_at_ranks([two], "c", "b", "o"),
                 lambda: straggler._saving(two, "c", "b", "o")):
        with pytest.raises(WorkbenchError, match="gives no saving: void: FSDP2"):
            call()
    _void(one, {"c": REASON})  # void on the one-GPU side too
    os.remove(os.path.join(two, results.VOID_FILE))
    assert straggler.compare(one, two)[0]["verdict"] == "void"


def test_lengths_table_leaves_out_a_void_comparison(tmp_path):
    prof = _profiles(tmp_path)
    d = str(prof / "camp" / "ab")
    assert set(lengths.table([d])["comparison"]) == {"packing", "offload", "moe"}
    _void(d, {"moe": REASON})
    assert set(lengths.table([d])["comparison"]) == {"packing", "offload"}


@pytest.mark.parametrize("text, says", [
    ("{not json", "not readable JSON"),
    ('["offload"]', "needs exactly the keys"),
    ('{"comparisons": {"offload": "x"}, "found_by": "issue 41"}', "needs exactly the keys"),
    ('{"comparisons": {"offload": "x"}, "found_by": "a", "commit": "b", "reason": "c"}', "needs exactly the keys"),
    ('{"comparisons": {}, "found_by": "a", "commit": "b"}', "'comparisons' must map"),
    ('{"comparisons": ["offload"], "found_by": "a", "commit": "b"}', "'comparisons' must map"),
    ('{"comparisons": {"offload": ""}, "found_by": "a", "commit": "b"}', "reason of 'offload'"),
    ('{"comparisons": {"offload": "x"}, "found_by": "a", "commit": 7}', "'commit' must be"),
    ('{"comparisons": {"ofload": "x"}, "found_by": "a", "commit": "b"}', "names 'ofload', which the run does not"),
])
def test_a_malformed_void_file_is_one_error_line(tmp_path, capsys, text, says):
    prof = _profiles(tmp_path)
    d = prof / "camp" / "ab"
    (d / results.VOID_FILE).write_text(text)
    with pytest.raises(WorkbenchError, match=says) as e:
        results.void_comparisons(str(d))
    assert "\n" not in str(e.value) and str(d / "VOID.json") in str(e.value)
    with pytest.raises(WorkbenchError, match=says):
        an.comparisons(str(prof))
    readme = tmp_path / "README.md"
    readme.write_text("# x\n<!-- results -->\n<!-- /results -->\n")
    capsys.readouterr()
    assert run_main(rr.main, ["--readme", str(readme), "--profiles", str(prof), "--check"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {d / 'VOID.json'}: ") and says in err[0]
