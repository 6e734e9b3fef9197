"""Which optimizations exist, and what the CLIs say of them, without importing one (no torch: `--help` is instant).
It never imports an optimization (their modules import torch).

An optimization is a module with a module-level `SPEC` dict literal (read here with `ast`, never executed) and the
members `workbench.opts.protocol.Optimization` names (ARMS, BASELINE, OPTIMIZED, unsupported, apply). The registry
holds:

- every module of `workbench/opts/` that has a SPEC, ordered by its `order`;
- the modules named in $WORKBENCH_OPTS (comma-separated dotted paths, importable from sys.path): a user's own
  optimization, or a test's, added without touching any file of the workbench.

The contract (required members, optional hooks, SPEC keys and their types) is `workbench.opts.protocol`; a SPEC
that breaks it is refused here in one line.
"""
from __future__ import annotations

import ast
import functools
import importlib.util
import os

from workbench.errors import WorkbenchError
from workbench.opts.protocol import spec_problems

ENV = "WORKBENCH_OPTS"


def _spec_of_source(path: str) -> dict | None:
    """The SPEC literal of a module's source, None when it has none."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "SPEC" for t in node.targets):
            spec = ast.literal_eval(node.value)
            bad = spec_problems(spec) if isinstance(spec, dict) else ["SPEC is not a dict"]
            if bad:
                raise WorkbenchError(f"{path}: {'; '.join(bad)} (workbench/opts/protocol.py)")
            _check_lever(path, spec)
            return spec
    return None


def _check_lever(path: str, spec: dict) -> None:
    from workbench.traces.lever_advice import LEVER_COMPONENTS  # no torch: levers.py imports nothing heavy

    if "lever" in spec and spec["lever"] not in LEVER_COMPONENTS:
        raise WorkbenchError(f"{path}: SPEC lever {spec['lever']!r} is no component of workbench.traces.lever_advice; choose "
                             f"from {', '.join(sorted(LEVER_COMPONENTS))}")


@functools.lru_cache(maxsize=None)
def _found(extra: str) -> dict:
    """{name: (dotted module path, SPEC)} of the package's modules with a SPEC and of $WORKBENCH_OPTS."""
    here = os.path.dirname(os.path.abspath(__file__))
    out = {}
    for fn in sorted(os.listdir(here)):
        if fn.endswith(".py") and not fn.startswith("_"):
            spec = _spec_of_source(os.path.join(here, fn))
            if spec is not None:
                out[fn[:-3]] = (f"workbench.opts.{fn[:-3]}", spec)
    for dotted in (x.strip() for x in extra.split(",") if x.strip()):
        try:
            found = importlib.util.find_spec(dotted)
        except ModuleNotFoundError:  # a missing parent package of a dotted path
            found = None
        if found is None or not found.origin:
            raise WorkbenchError(f"{ENV}: cannot find module {dotted!r} on the Python path")
        spec = _spec_of_source(found.origin)
        if spec is None:
            raise WorkbenchError(f"{ENV}: {dotted} has no SPEC dict (see workbench/opts/registry.py)")
        out[dotted.rsplit(".", 1)[-1]] = (dotted, spec)
    return dict(sorted(out.items(), key=lambda kv: (kv[1][1]["order"], kv[0])))


def found() -> dict:
    return _found(os.environ.get(ENV, ""))


def names() -> tuple[str, ...]:
    """The optimizations, in their order."""
    return tuple(found())


def spec(opt: str) -> dict:
    if opt not in found():
        raise WorkbenchError(f"unknown optimization {opt!r}; choose from {', '.join(names())} (or all)")
    return found()[opt][1]


def module_path(opt: str) -> str:
    spec(opt)
    return found()[opt][0]


def savings_path(opt: str) -> str | None:
    """The dotted path of the optimization's savings-model module (SPEC `savings`), None when it has none."""
    return spec(opt).get("savings")


def lever(opt: str) -> str | None:
    """The `workbench.traces.lever_advice` component `opt` addresses (its SPEC's `lever`), None for an optimization that is no
    lever."""
    return spec(opt).get("lever")


def levers() -> tuple[str, ...]:
    """The lever optimizations (SPEC with a `lever`), in their order."""
    return tuple(o for o in names() if lever(o) is not None)


def in_all_names() -> tuple[str, ...]:
    """The optimizations `--opt all` runs and combines, in their order: those whose SPEC does not say
    `in_all: False` (the levers)."""
    return tuple(o for o in names() if in_all(o))


def in_all(opt: str) -> bool:
    """Whether `--opt all` runs `opt` (SPEC `in_all`, default True)."""
    return bool(spec(opt).get("in_all", True))


def families(opt: str) -> tuple[str, ...] | None:
    """The model families `opt` applies to (SPEC `families`), None for every family."""
    fams = spec(opt).get("families")
    return tuple(fams) if fams is not None else None
