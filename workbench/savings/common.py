"""The savings models' generic machinery; each optimization's own model lives beside it.

An optimization with a savings model names its module in its SPEC (`"savings": "workbench.opts.<name>_savings"`,
`workbench.opts.registry`, handed down to this floor as `contract.savings_paths`); `workbench.savings.contract`
states what that module holds (FORMULA, MODEL_TERMS, TRACED_ARMS, MODEL_REVISION, from_run, and optional hooks with
defaults) and `module` checks it on load.
`workbench.savings.verdicts` feeds the models in-situ inputs from traces, propagates the inputs' spread, and judges
them against the engine's measured saving.
"""
from __future__ import annotations

import functools
import importlib
import os

import numpy as np
import pandas as pd

from workbench.measure import stats
from workbench.savings import contract

AGREE_TOL = 0.20
"""Two sources of the same input may differ by at most this fraction; more fails the check (loudly)."""


class InputCheckFailed(Exception):
    """Two sources of one model input disagree, or a count differs from what the model assumes."""


def module(opt: str):
    """The savings-model module of an optimization (its SPEC's `savings`), None when it has none (or `opt` is not
    an optimization: `all`, an A/A or NVTX comparison)."""
    path = contract.savings_paths().get(opt)
    return _checked(path) if path else None


@functools.lru_cache(maxsize=None)
def _checked(path: str):
    """The savings module at `path`, refused in one line when it breaks `workbench.savings.contract`."""
    from workbench.errors import WorkbenchError

    mod = importlib.import_module(path)
    bad = contract.problems(mod)
    if bad:
        raise WorkbenchError(f"{path}: {'; '.join(bad)} (the savings-model contract: workbench/savings/contract.py)")
    return mod


def modelled() -> tuple[str, ...]:
    """The optimizations with a savings model, in their order."""
    return tuple(o for o, path in contract.savings_paths().items() if path)


def formula(opt: str) -> str | None:
    mod = module(opt)
    return mod.FORMULA if mod else None


def model_terms(opt: str) -> tuple[str, ...]:
    mod = module(opt)
    return tuple(mod.MODEL_TERMS) if mod else ()


def model_revision(opt: str) -> dict:
    """{"revision": the module's MODEL_REVISION (None: "none stated"), "commit": the short sha of the commit that set
    that value (`git log -S` on the module's file; "uncommitted" when HEAD's file lacks it, None outside a git
    checkout)}."""
    return module_revision(module(opt))


def module_revision(mod) -> dict:
    """`model_revision` of a module itself (a savings module, or another form of a model: `savings.untraced`)."""
    rev = getattr(mod, "MODEL_REVISION", None) if mod else None
    return {"revision": rev, "commit": _revision_commit(mod.__file__, rev) if rev else None}


@functools.lru_cache(maxsize=64)
def _revision_commit(path: str, rev: str) -> str | None:
    import subprocess

    d = os.path.dirname(os.path.abspath(path))
    lit = next((line for line in open(path).read().splitlines() if line.startswith("MODEL_REVISION")), None)
    if lit is None:
        return None
    try:
        top = subprocess.run(["git", "-C", d, "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                             timeout=10)
        if top.returncode:
            return None
        root = top.stdout.strip()
        rel = os.path.relpath(os.path.abspath(path), root)
        head = subprocess.run(["git", "-C", root, "show", f"HEAD:{rel}"], capture_output=True, text=True, timeout=10)
        if head.returncode or lit not in head.stdout:
            return "uncommitted"
        r = subprocess.run(["git", "-C", root, "log", "-n", "1", "--format=%h", "-S", lit, "--", rel],
                           capture_output=True, text=True, timeout=20)
        return r.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


# --- helpers of the models' input extractors ------------------------------------------------------------------

def predicted(f, X) -> dict:
    """f(mean of the per-step inputs X) with its se by the delta method (`stats.delta_method`): predicted_ms,
    predicted_se_ms, predicted_ci95, n_steps."""
    d = stats.delta_method(f, X)
    return {"predicted_ms": d["estimate"], "predicted_se_ms": d["se"], "predicted_ci95": d["ci95"], "n_steps": d["n"]}


def step_of(events: pd.DataFrame, windows: pd.DataFrame) -> np.ndarray:
    """Step index of each event by its start (-1 outside every window)."""
    out = np.full(len(events), -1, dtype=int)
    st = events["start_ns"].to_numpy()
    for w in windows.itertuples():
        out[(st >= w.start_ns) & (st < w.end_ns)] = w.step
    return out


def gpu_busy(events: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The merged union of all GPU work (kernels and copies, any stream) and its prefix lengths, for
    `decompose.covered_ns`."""
    from workbench.traces import decompose

    gpu = events[events["kind"].isin(("kernel", "memcpy"))]
    return decompose.union_with_prefix(gpu[["start_ns", "end_ns"]].to_numpy(dtype=np.int64))
