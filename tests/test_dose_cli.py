"""`python -m workbench.ab.dose`: the levels as the arms of one engine comparison per process, timed under the named
instrument, their syncs exact and linear in the dose; refused flags in one line (`workbench.ab.dose`)."""
import json
import os

import pytest

from workbench.ab import dose as dose_cli
from workbench.errors import WorkbenchError
from workbench.measure import engine
from workbench.savings import dose_fit as dose


def test_levels_are_even_over_the_units():
    assert dose_cli.dose_levels(15, 5) == [0, 4, 8, 11, 15]
    assert dose_cli.dose_levels(8, 5) == [0, 2, 4, 6, 8]
    assert dose_cli.dose_levels(3, 5) == [0, 1, 2, 3]


@pytest.mark.parametrize("argv, msg", [(["--opt", "packing", "--arms", "rebuild,cached"], "--arms"),
                                       (["--opt", "packing", "--timing", "none,perf"], "--timing"),
                                       (["--opt", "offload"], "no dose arm"),
                                       (["--opt", "packing", "--processes", "0"], "--processes")])
def test_flags_that_do_not_apply_are_refused(argv, msg):
    with pytest.raises(WorkbenchError, match=msg):
        dose_cli.main(argv)


def test_the_engine_refuses_a_profiler_it_was_not_asked_for_and_requires_the_one_it_was():
    import torch
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        with pytest.raises(engine.InstrumentActive):
            engine.assert_uninstrumented()
        engine.assert_uninstrumented("torch.profiler")
    with pytest.raises(engine.InstrumentActive, match="without it"):
        engine.assert_uninstrumented("torch.profiler")


def test_one_process_times_every_level_under_the_profiler_with_exact_syncs(tmp_path, capsys):
    out = str(tmp_path / "p")
    rc = dose_cli.main(["--opt", "packing", "--tokens", "128", "--batches", "1", "--reps", "1", "--steps", "1",
                        "--warmup", "1", "--warmup-max", "1", "--levels", "3", "--trace", "none", "--_child", "torch",
                        "--out", out])
    assert rc == 0
    with open(os.path.join(out, "dose.json")) as f:
        info = json.load(f)
    assert info["arms"] == {"u0": 0, "u2": 2, "u3": 3} and info["timing"] == "torch"
    with open(os.path.join(out, "meta.json")) as f:
        assert json.load(f)["protocol"]["instrument"] == "torch"
    syncs = dose.syncs_per_level(out)  # c = 3 per build (varlen), L*p - u builds per step
    assert syncs == {0: 12.0, 2: 6.0, 3: 3.0}
    pts = dose.process_points(out)
    assert sorted(u for u, _ in pts) == [0, 2, 3]
    with open(os.path.join(out, "summary.json")) as f:
        assert json.load(f)["comparisons"][0]["equivalent"] is True  # every level computes the baseline's function
