"""The savings-model contract (`workbench.savings.contract`): every registered model conforms, the loader refuses one
that does not in one line, and the dose analysis reads the traced input through the model's hook."""
import types

import pytest

from workbench.errors import WorkbenchError
from workbench.opts import registry
from workbench.savings import common, contract


def test_every_registered_savings_model_conforms():
    modelled = common.modelled()
    assert modelled, "no optimization names a savings model"
    for opt in modelled:
        mod = common.module(opt)
        assert contract.problems(mod) == [], opt
        assert mod.__name__ == registry.savings_path(opt)


def _model(**over):
    m = types.SimpleNamespace(FORMULA="n * s", MODEL_TERMS=("glue",), TRACED_ARMS=("baseline",),
                              MODEL_REVISION="a model", from_run=lambda *a, **k: {})
    for k, v in over.items():
        if v is None:
            delattr(m, k)
        else:
            setattr(m, k, v)
    return m


@pytest.mark.parametrize("over, msg", [
    ({}, None),
    ({"from_run": None}, "lacks from_run"),
    ({"FORMULA": ""}, "FORMULA is not a non-empty str"),
    ({"MODEL_TERMS": ["glue"]}, "MODEL_TERMS is not a non-empty tuple"),
    ({"TRACED_ARMS": ("optimized",)}, "TRACED_ARMS must name"),
    ({"from_run": "f"}, "from_run is not callable"),
    ({"UNTRACED_FORMULA": "n * u"}, "an untraced form needs all of"),
    ({"dose_traced_input": 3}, "dose_traced_input is not callable"),
])
def test_the_checker_names_what_a_model_gets_wrong(over, msg):
    got = contract.problems(_model(**over))
    assert (got == []) if msg is None else any(msg in p for p in got), got


def test_the_loader_refuses_a_model_that_breaks_the_contract(monkeypatch):
    import sys
    bad = types.ModuleType("wb_bad_savings")
    bad.FORMULA = "x"
    monkeypatch.setitem(sys.modules, "wb_bad_savings", bad)
    monkeypatch.setattr(registry, "savings_path", lambda opt: "wb_bad_savings")
    monkeypatch.setattr(registry, "names", lambda: ("fake",))
    common._checked.cache_clear()
    try:
        with pytest.raises(WorkbenchError, match="wb_bad_savings: lacks MODEL_TERMS"):
            common.module("fake")
    finally:
        common._checked.cache_clear()


def test_the_dose_analysis_asks_the_models_hook_and_refuses_a_model_without_one(tmp_path, monkeypatch):
    from workbench.savings import dose_fit
    seen = {}
    hooked = _model(dose_traced_input=lambda ev, units, syncs, tracer: seen.update(units=units) or {"value_ms": 2.0})
    monkeypatch.setattr(common, "module", lambda opt: hooked if opt == "x" else _model())
    monkeypatch.setattr(dose_fit, "_json", lambda p: {"comparison": "c", "arms": {"a0": 0, "a4": 4}, "opt": "x",
                                                       "args": {"trace": "torch"}} if not p.endswith("summary.json")
                        else {"comparisons": [{"name": "c", "baseline": {"arm": "a0", "syncs_per_step": 9},
                                               "optimized": {"arm": "a4", "syncs_per_step": 1}}]})
    import workbench.traces.events as events
    monkeypatch.setattr(events, "events_path", lambda d, c, a: f"{d}/{a}")
    monkeypatch.setattr(events, "load_events", lambda p: p)
    assert dose_fit.traced_c(str(tmp_path))["value_ms"] == 2.0 and seen["units"] == {"a0": 0, "a4": 4}
    monkeypatch.setattr(common, "module", lambda opt: _model())
    with pytest.raises(WorkbenchError, match="no dose_traced_input"):
        dose_fit.traced_c(str(tmp_path))
