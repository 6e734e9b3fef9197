"""Profiling-driven optimization workbench for LLM fine-tuning.

Entry points: `python -m workbench.run` (one instrumented run), `python -m workbench.ab` (A/B of the
optimizations). Library: `workbench.apply_optimizations(model, packing=..., offload=..., moe=...)`; profile
a Trainer / SFTTrainer run with `workbench.WorkbenchCallback(out_dir)` (`workbench.callback`).
"""

__version__ = "0.1.0"


def _savings_paths() -> dict:
    """{optimization: its SPEC's `savings` module path, or None}, in the registry's order: where `workbench.savings`
    finds each optimization's savings model. The registry (`workbench.opts`) is a floor above `workbench.savings`, so
    the package hands this lookup down (`savings.contract.use_finder`); it imports the registry on first use."""
    from workbench.opts import registry
    return {o: registry.savings_path(o) for o in registry.names()}


def _install_savings_finder() -> None:
    from workbench.savings import contract  # torch-free, imports nothing of the workbench
    contract.use_finder(_savings_paths)


_install_savings_finder()


def apply_optimizations(model, **kwargs):
    """Apply the workbench's optimizations to a user's HF model; returns a handle whose `revert()` undoes them.

    See `workbench.api.apply_optimizations` for the arguments.
    """
    from workbench.api import apply_optimizations as _apply
    return _apply(model, **kwargs)


def __getattr__(name):
    if name == "WorkbenchCallback":  # imported on use: transformers' TrainerCallback loads with it
        from workbench.callback import WorkbenchCallback
        return WorkbenchCallback
    raise AttributeError(f"module 'workbench' has no attribute {name!r}")
