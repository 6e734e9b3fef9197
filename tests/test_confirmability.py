"""A verdict row says what its rule can decide: "cannot confirm" (and the size that would) where the band test cannot
confirm at the row's size, "inconclusive" only where it could (`workbench.savings.verdicts.confirmability`); the
README's savings rows are judged again from their run folders with today's code (`report.headline`; its test, with
the check's negative control, is in tests/test_readme_results.py, beside the check whose judgements it reuses)."""
import math

from workbench.measure import stats
from workbench.savings import verdicts

BAND_W = math.log(verdicts.BAND[1] / verdicts.BAND[0])


def _row(se_m, n_units=4, se_p=0.0, n_steps=None, theta=None, population="within this run", verdict="inconclusive"):
    return {"measured_ms": 100.0, "measured_se_ms": se_m, "measured_df": n_units - 1, "measured_n_units": n_units,
            "predicted_ms": 100.0, "predicted_se_ms": se_p, "n_steps": n_steps, "theta_ci95": theta,
            "measured_population": population, "verdict": verdict}


def _width(row, units):
    """The reference: the band test's own 90% CI at `units` (measured variance scaled by n_units / units)."""
    scale = math.sqrt(row["measured_n_units"] / units)
    ci = stats.band_ratio_test(row["measured_ms"], row["measured_se_ms"] * scale, units - 1, row["predicted_ms"],
                               row["predicted_se_ms"], verdicts.predicted_df(row), theta_ci=row["theta_ci95"],
                               band=verdicts.BAND, alpha=verdicts.ALPHA)[4]
    return math.log(ci[1] / ci[0])


def test_a_decidable_row_stays_inconclusive_and_a_decided_one_keeps_its_verdict():
    row = _row(se_m=3.0)  # a CI of about +-9%: could confirm at this size
    assert _width(row, 4) < BAND_W and verdicts.confirmability(row) is None
    assert verdicts.shown_verdict(row) == "inconclusive"
    assert verdicts.shown_verdict({**_row(se_m=30.0), "verdict": "refuted"}) == "refuted"


def test_a_row_too_small_to_confirm_names_the_size_that_would():
    row = _row(se_m=20.0, n_units=4)
    why, k = verdicts.confirmability(row)
    assert why == "cannot confirm at this size" and k is not None
    assert _width(row, 4) >= BAND_W and _width(row, k) < BAND_W <= _width(row, k - 1)  # the smallest such size
    assert verdicts.shown_verdict(row) == f"cannot confirm at this size (needs {k} reps)"
    tau = _row(se_m=20.0, n_units=8, population="single run + tau (a rerun's process component)")
    assert verdicts.shown_verdict(tau).endswith("processes)")


def test_a_theta_wider_than_the_band_can_never_confirm():
    row = _row(se_m=0.5, theta=[0.425, 0.744])  # ratio 1.75 > 1.5625
    assert verdicts.confirmability(row) == (verdicts.CANNOT_CONFIRM_THETA, None)
    assert "inconclusive" not in verdicts.shown_verdict(row)
    assert verdicts.confirmability(_row(se_m=0.5, theta=[0.9, 1.05])) is None  # a narrow theta: decidable


def test_a_prediction_wider_than_the_band_cannot_be_helped_by_measuring_more():
    row = _row(se_m=1.0, se_p=20.0, n_steps=2)
    assert verdicts.confirmability(row) == (verdicts.CANNOT_CONFIRM_PREDICTION, None)


def test_the_published_form_is_shown_by_its_own_prediction_not_the_model_s():
    """The published form is judged against the same measurement with its own prediction, se and df: a decidable
    model row beside a published form whose prediction's interval is wider than the band shows that reason for the
    form; a zero prediction names the L sweep's test; no published form, nothing."""
    row = {**_row(se_m=3.0), "published_verdict": "inconclusive", "published_ms": 100.0, "published_se_ms": 20.0,
           "published_df": 1}
    assert verdicts.shown_verdict(row) == "inconclusive"  # the model's row: decidable at this size
    assert verdicts.shown_published(row) == verdicts.CANNOT_CONFIRM_PREDICTION
    assert verdicts.shown_published({**row, "published_se_ms": 0.0}) == "inconclusive"  # the control: decidable
    assert verdicts.shown_published({**row, "published_ms": 0.0}).startswith("predicts no saving")
    assert verdicts.shown_published(_row(se_m=3.0)) is None
