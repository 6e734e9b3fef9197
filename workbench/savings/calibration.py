"""What the savings-model verdicts know about their instrument and their unit, fixed before the runs they judge:
the validity precondition on each arm's trace, the calibrated factor θ on a model's traced input, and the process
component tau of a single run's measured saving (torch-free).

    workbench verdicts RUN_DIR --calibration CAL.json     # θ per model from a dose-response analysis
    workbench verdicts RUN_DIR --tau-from analysis.json   # tau per comparison (default: TAU_SOURCE)

- The precondition (`instrument_reason`): each judged arm's traced step (the mean `wb/step` window of its trace)
  lies within INSTRUMENT_TOL of its timed step, or the verdict reads NO_VERDICT_INSTRUMENT with both numbers.
- θ (`read_calibration`, `theta_for`): the instrument's factor on the model's traced input (dose-response slope /
  traced input: `{"packing": {"theta": x, "ci95": [lo, hi], "source": "dose-response RUN", "commit": sha}, ...}`).
  The prediction becomes p·θ; θ's CI enters the verdict as a shift with its own interval
  (`stats.band_ratio_test`), never in quadrature. A model with no entry is used as traced (input source
  `traced`, said so); an entry whose optional `shape` ({model, layers, tokens}) is the judged comparison's own
  reads `dose-response` (θ measured on this very shape: in-sample), any other `calibrated` (θ carried over).
- tau (`read_tau`): the between-process SD of the per-rep log ratio per comparison, from a replication campaign's
  analysis.json (`all_processes.tau`, df = its processes - 1); a single run's saving gets it added
  (`replication.with_process_component`, converted to ms by `replication.tau_ms`).
"""
from __future__ import annotations

import json
import math
import os

from workbench.errors import WorkbenchError

INSTRUMENT_TOL = 0.15
"""Each judged arm's traced step must lie within 15% of its timed step (|traced / timed - 1| <= 0.15), or the model
gets no verdict. Why 15%: the band a model must land in is [0.8, 1.25], a half width of log 1.25 = 0.22 on the log
scale; a step the instrument moves by more than log 1.15 = 0.14 (two thirds of that) is a different step from the
one timed, and the inputs a model reads from it (GPU idle, gaps: the terms a profiler moves most) cannot be taken
for the timed step's. Within it, the traced input is still not the timed one (the instrument's effect on
the idle terms is 4-25x its effect on the step), which is what θ is for; this precondition only refuses traces of a
step that did not run as timed. Fixed before any run judged with it."""
NO_VERDICT_INSTRUMENT = "no verdict: instrument"
"""The verdict of a model whose traces fail the precondition."""
INPUT_SOURCES = ("traced", "dose-response", "calibrated", "untraced")
"""Where a verdict's model input comes from: the run's traces as they are; θ measured by a dose-response on this very
shape; θ from a dose-response on another shape; no trace at all, the untimed dose slope per unit times the judged
shape's exact count (`workbench.savings.untraced`, `--dose`)."""
CURRENT_THETA = os.path.join("profiles", "calibration.json")
"""The one current θ per model (`--calibration` reads it like any calibration file): each entry names the dose-response
analysis it comes from. A calibration.json inside a run folder is what that run was judged with; superseded values
are listed in docs/FINDINGS.md."""
TAU_SOURCE = os.path.join("profiles", "2026-11-26_h100_replication", "analysis.json")
"""The committed replication campaign (H100, headline shapes) whose tau a single run's verdict adds by default."""
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def instrument_reason(arms: dict, tol: float = INSTRUMENT_TOL) -> str | None:
    """None when every arm's traced step lies within `tol` of its timed step; else the reason (each failing arm
    with both numbers). `arms`: {arm: (traced_step_ms, timed_step_ms)}; an arm whose traced or timed step is unknown
    fails (the precondition cannot be checked)."""
    bad = []
    for arm, (traced, timed) in arms.items():
        if not traced or not timed or traced != traced or timed != timed:
            bad.append(f"{arm}: traced step {_ms(traced)}, timed step {_ms(timed)} (cannot check)")
            continue
        d = float(traced) / float(timed) - 1.0
        if abs(d) > tol:
            bad.append(f"{arm}: traced step {float(traced):.1f} ms vs timed {float(timed):.1f} ms ({d:+.1%})")
    if not bad:
        return None
    return f"the traced step is not the timed one (|traced / timed - 1| > {tol:.0%}): " + "; ".join(bad)


def _ms(v) -> str:
    return "unknown" if v is None or v != v else f"{float(v):.1f} ms"


# --- θ: the calibrated factor on a model's traced input --------------------------------------------------------

def _read_json(path: str, error: str):
    """The JSON in `path`; an unreadable or malformed file is one line: `error (the exception)`."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise WorkbenchError(f"{error} ({type(e).__name__}: {e})") from None


def read_calibration(path: str | None) -> dict:
    """{model (opt): entry} from a calibration file (None: {}). A usable entry has `theta` > 0 and `ci95` [lo, hi]
    with 0 < lo <= theta <= hi < inf; `source`, `commit`, `decision`, `shape` and anything else are kept. An entry
    without a usable θ (theta or ci95 null, an unbounded or non-positive CI: Fieller's interval when the traced input
    is not clearly above 0) is left out and named under the key None ({None: {opt: why}}), so its model is used as
    traced and says why; a key that is not an entry (not a dict) is ignored. An unreadable file, or a θ outside its
    own CI, is a one-line error."""
    if not path:
        return {}
    raw = _read_json(path, f"--calibration {path}: cannot read it as JSON")
    if not isinstance(raw, dict):
        raise WorkbenchError(f"--calibration {path}: expected an object {{model: {{theta, ci95, source, commit}}}}")
    out, unusable = {}, {}
    for opt, e in raw.items():
        if not isinstance(e, dict):
            continue
        try:
            th, (lo, hi) = float(e["theta"]), (float(x) for x in e["ci95"])
        except (KeyError, TypeError, ValueError):
            unusable[opt] = f"{path}: {opt} has no theta with a ci95 [lo, hi] ({e.get('decision') or 'no decision'})"
            continue
        if not (lo > 0 and math.isfinite(hi) and math.isfinite(th)):
            unusable[opt] = f"{path}: {opt}'s θ CI [{lo:.3g}, {hi:.3g}] is not a positive, bounded interval"
            continue
        if not lo <= th <= hi:
            raise WorkbenchError(f"--calibration {path}: {opt}: need ci95[0] <= theta <= ci95[1], got theta {th} "
                                 f"ci95 [{lo}, {hi}]")
        out[opt] = {**e, "theta": th, "ci95": [lo, hi], "file": path}
    if unusable:
        out[None] = unusable
    return out


def theta_for(calibration: dict, opt: str, comparison: dict | None = None) -> tuple[dict | None, str]:
    """(θ entry or None, input source) for a model on a comparison (its summary.json dict: model, layers,
    tokens): no entry -> (None, "traced"); an entry whose `shape` matches the comparison -> "dose-response"
    (in-sample); else "calibrated"."""
    e = calibration.get(opt)
    if e is None:
        return None, "traced"  # the reason, where the file had an unusable entry: calibration[None][opt]
    shape = e.get("shape")
    if shape and comparison and all(str(comparison.get(k)) == str(v) for k, v in shape.items()):
        return e, "dose-response"
    return e, "calibrated"


# --- tau: the process component of a single run's saving -------------------------------------------------------

def read_tau(path: str | None = TAU_SOURCE) -> dict:
    """{comparison: {"tau_log", "df", "processes", "source"}} from a replication campaign's analysis.json
    (`comparisons[].all_processes`: tau by REML over every process, df = processes - 1). None or "none": {}; a
    relative path is read from the repository root when it is not found from the working directory; the default
    TAU_SOURCE missing (an installed copy without profiles/) gives {} (each row then says "no tau"), any other
    unreadable file is a one-line error."""
    if not path or path == "none":
        return {}
    p = path if os.path.exists(path) or os.path.isabs(path) else os.path.join(_ROOT, path)
    if path == TAU_SOURCE and not os.path.exists(p):  # an installed copy without profiles/: no tau, said per row
        return {}
    raw = _read_json(p, f"--tau-from {path}: cannot read it")
    out = {}
    for c in raw.get("comparisons") or []:
        a = c.get("all_processes") or {}
        if a.get("tau") is None or not a.get("K"):
            continue
        out[c["comparison"]] = {"tau_log": float(a["tau"]), "df": int(a["K"]) - 1, "processes": int(a["K"]),
                                "source": path}
    return out
