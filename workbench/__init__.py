"""Profiling-driven optimization workbench for LLM fine-tuning.

Entry points: `python -m workbench.run` (one instrumented run), `python -m workbench.ab` (A/B of the
optimizations). Library: `workbench.apply_optimizations(model, packing=..., offload=..., moe=...)`.
"""

__version__ = "0.1.0"


def apply_optimizations(model, **kwargs):
    """Apply the workbench's optimizations to a user's HF model; returns a handle whose `revert()` undoes them.

    See `workbench.api.apply_optimizations` for the arguments.
    """
    from workbench.api import apply_optimizations as _apply
    return _apply(model, **kwargs)
