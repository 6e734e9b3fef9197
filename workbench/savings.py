"""The analytic savings models, as pure functions; each docstring states its formula and inputs.

Sections: packing ((L-1)*s), offload ((L-1)*min(c,g)), MoE routing. Each returns a dict with at least
`formula`, `predicted_ms` and `inputs`; `measured_ms` is filled by the caller from the A/B runs.
"""
from __future__ import annotations

# --- packing ------------------------------------------------------------------------------------------------

# --- offload ------------------------------------------------------------------------------------------------

# --- moe ----------------------------------------------------------------------------------------------------
