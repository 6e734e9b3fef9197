"""The contract of a savings model, executable: what an optimization's savings module must hold, its optional hooks
with their defaults, and the checker `workbench.savings.common.module` runs on every module it loads.

An optimization with a savings model names its module in its SPEC (`"savings": "workbench.opts.<name>_savings"`).
That module is torch-free (the tables and the verdicts import it without torch). One model per optimization: a
change of its formula or of an input is a new `MODEL_REVISION` of the same module, never a second module.
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Protocol

_finder: Callable[[], dict] | None = None


def use_finder(finder: Callable[[], dict]) -> None:
    """Install where the savings models are found: `finder()` -> {optimization: the dotted path of its savings
    module, or None}, in the optimizations' order. The package installs the optimization registry's (each SPEC's
    `savings`, `workbench/__init__.py`): the registry sits on the floor above this one, so it is handed down, never
    imported from here."""
    global _finder
    _finder = finder


def savings_paths() -> dict:
    """{optimization: the dotted path of its savings module, or None}, from the installed finder (`use_finder`)."""
    if _finder is None:
        raise RuntimeError("no savings-model finder installed (workbench/__init__.py installs the registry's)")
    return _finder()


class SavingsModel(Protocol):
    """The required members (`REQUIRED`), as a typing Protocol for readers and type checkers; the optional ones
    are `HOOKS`."""

    FORMULA: str
    """The model as judged, e.g. "(L*p - b) * s"."""
    MODEL_TERMS: tuple[str, ...]
    """The decomposition components the model accounts for (the rest are candidates for the term a refuted model
    lacks)."""
    TRACED_ARMS: tuple[str, ...]
    """The arms whose traces its inputs come from: "baseline", and "arm" (the optimized)."""
    def from_run(self, traced: dict, c: dict, meta: dict, *, baseline: str, arm: str) -> dict:
        """The model from a run's traces ({arm: events frame}), the comparison's summary.json dict and meta.json:
        predicted_ms, its se, CI and n_steps, plus formula, inputs ({name: {value, source}}) and terms ({term: ms});
        raises `common.InputCheckFailed` when two sources of an input disagree."""


REQUIRED = {"FORMULA": str, "MODEL_TERMS": tuple, "TRACED_ARMS": tuple, "from_run": Callable}
"""The members every savings module has, with their types."""


class Hook(NamedTuple):
    name: str
    default: object
    signature: str
    doc: str


HOOKS = {h.name: h for h in (
    Hook("MODEL_REVISION", None, "str | None",
         "what the model is and what changed, set in the commit that changes FORMULA or an input, before the runs "
         "that judge it; each verdict row names it and the commit that set it (None: \"none stated\")."),
    Hook("UNTRACED_FORMULA", None, "str | None",
         "the untraced form of the model (`workbench.savings.untraced`): a count per step times the untimed dose "
         "slope per unit. With it, `untraced_count` and `count_per_dose_unit` are required too."),
    Hook("untraced_count", None, "(c: dict, meta: dict, *, arm: str) -> (float, str)",
         "the untraced form's count per step of a comparison and its source (exact, from the run's records)."),
    Hook("count_per_dose_unit", None, "(entry: dict) -> (float | None, str)",
         "the count one dose unit removes, and what that is, from a dose folder's analysis entry."),
    Hook("dose_traced_input", None,
         "(events: {arm: frame}, units: {arm: u}, syncs: {u: syncs per step}, tracer: str | None) -> dict",
         "the model's traced input per dose unit from one dose process's traces of every level (value_ms, se_ms, "
         "df, ci95, n_steps, per_level, source): what `workbench.savings.dose_fit` holds the untimed slope "
         "against (theta). None: the dose analysis has no traced input for this optimization."),
)}
"""The optional members, by name, with their defaults."""

UNTRACED_GROUP = ("UNTRACED_FORMULA", "untraced_count", "count_per_dose_unit")
"""The untraced form: all three members or none."""


def member(mod, name: str):
    """Optional member `name` of savings module `mod` (`HOOKS`), or its declared default. An undeclared name is a
    KeyError: every hook the workbench reads is declared here."""
    return getattr(mod, name, HOOKS[name].default)


def problems(mod) -> list[str]:
    """What savings module `mod` gets wrong against the contract (empty: it conforms)."""
    out = [f"lacks {m}" for m in REQUIRED if not hasattr(mod, m)]
    for m, kind in REQUIRED.items():
        if not hasattr(mod, m):
            continue
        v = getattr(mod, m)
        if kind is Callable:
            if not callable(v):
                out.append(f"{m} is not callable")
        elif not isinstance(v, kind) or (kind is str and not v.strip()):
            out.append(f"{m} is not a non-empty {kind.__name__}: {v!r}")
        elif kind is tuple and not all(isinstance(x, str) for x in v):
            out.append(f"{m} holds a non-string: {v!r}")
    if isinstance(getattr(mod, "TRACED_ARMS", None), tuple):
        bad = [a for a in mod.TRACED_ARMS if a not in ("baseline", "arm")]
        if bad or not mod.TRACED_ARMS:
            out.append(f"TRACED_ARMS must name 'baseline' and/or 'arm': {mod.TRACED_ARMS!r}")
    rev = member(mod, "MODEL_REVISION")
    if rev is not None and not (isinstance(rev, str) and rev.strip()):
        out.append(f"MODEL_REVISION is not a non-empty str: {rev!r}")
    present = [m for m in UNTRACED_GROUP if member(mod, m) is not None]
    if present and len(present) < len(UNTRACED_GROUP):
        out.append(f"an untraced form needs all of {', '.join(UNTRACED_GROUP)}; it has only {', '.join(present)}")
    for name in ("untraced_count", "count_per_dose_unit", "dose_traced_input"):
        if member(mod, name) is not None and not callable(member(mod, name)):
            out.append(f"{name} is not callable")
    return out
