"""Data, not code: where the runs live, which cut-off runs are still reported, the articles' claims, and the
numbers the tables and notebooks are shown with."""
from __future__ import annotations

from workbench.paths import PROFILES_DIR, REPO_ROOT


REPO = REPO_ROOT
DEFAULT_PROFILES = PROFILES_DIR
KEEP_FROM_INCOMPLETE = ("nvtx_cost", "packing_sweep_llama")
"""Cut-off runs whose complete comparisons the README and the notebooks report (`include_incomplete_comparisons`):
profiles/2026-11-23_h100_engine/nvtx_cost was killed in its 4th comparison (nvtx:all, re-run as nvtx_cost_all); its
first three are complete in its summary.json (COMMAND.txt says so). profiles/2026-11-23_h100_verdicts/
packing_sweep_llama says "failed": its timings, counted pass and traces completed, then its verdicts step failed on
the device; its verdicts were computed afterwards from the committed events (that folder's COMMAND.txt says so)."""
NOT_A_MEASUREMENT = "not a measurement"
"""A campaign job status (commands.json) for a run that is left out of every table: a deliberately slowed run (the
gate's detection check, `workbench.step.inject`; newer runs say so in meta.json's `injected`)."""
SWEEP_CONFIDENCE = 0.90
"""The equivalence tests at L = 1 use the fit's 90% CI (two one-sided tests at 5%)."""
PREVIEW_ROWS = 15
"""A notebook table shows at most this many rows; the whole table is on the results page (profiles/RESULTS.md) and
in the DataFrame the cell keeps."""
RECIPE = "autocast"
"""The precision a headline reports where a comparison has runs of it (the CUDA default: Trainer's bf16=True); runs
from before `--precision` timed fp32 adapters and are reported only where nothing newer exists."""
_NAN = float("nan")
CLAIMS = (
    ("packing", "unsloth #4243", "qwen3-14b", None, "fwd", 43.3, 43.3, None, "Qwen3-14B QLoRA SFT: forward +43.3%"),
    ("packing", "unsloth #4243", "qwen3-14b", None, "bwd", 5.8, 5.8, None, "backward +5.8%"),
    ("packing", "unsloth #4243", "qwen3-14b", None, "step", 14.3, 14.3, None, "per batch +14.3%"),
    ("packing", "unsloth #4243", None, "Blackwell", "mask_ms", _NAN, _NAN, "13.7 ms",
     "a packed SDPA mask rebuild costs ~13.7 ms"),
    ("packing", "unsloth #4243", "llama-3.2-1b", None, "model", 11.5, 11.5, "L=16",
     "(L-1)*m predicts +11.5% for Llama-3.2-1B (16 layers)"),
    ("packing", "unsloth #4243", "qwen3-0.6b", None, "model", 14.8, 14.8, "L=28",
     "(L-1)*m predicts +14.8% for Qwen3-0.6B (28 layers)"),
    ("offload", "unsloth-zoo #534", "8B", "B200", "step", 8.40, 8.40, "+0.37 GB VRAM",
     "8B +8.40% steps/s (+0.37 GB VRAM)"),
    ("offload", "unsloth-zoo #534", "14B", "B200", "step", 6.70, 6.70, "+0.47 GB VRAM",
     "14B +6.70% (+0.47 GB)"),
    ("offload", "unsloth-zoo #534", "32B", "B200", "step", 4.61, 4.61, "+0.23 GB VRAM",
     "32B +4.61% (+0.23 GB)"),
    ("moe", "unsloth-zoo #535", "gpt-oss-20b", None, "step", 10.0, 15.0, None, "end-to-end +10-15%"),
    ("moe", "unsloth-zoo #535", "gpt-oss-20b", None, "hotspot_fwd", 23.0, 23.0, None, "hotspot forward +23%"),
    ("moe", "unsloth-zoo #535", "gpt-oss-20b", None, "hotspot_bwd", 13.0, 13.0, None, "hotspot backward +13%"),
    ("moe", "unsloth-zoo #535", "gpt-oss-20b", None, "syncs", _NAN, _NAN, "num_experts -> 1 dynamic queries",
     "dynamic queries num_experts -> 1 (each CUDA bincount reads back twice more: ~3 per layer)"),
    ("all", "all three", None, None, "step", 25.0, 25.0, None,
     "\"~25%\", not additive; varies with model, backend, GPU memory"),
)
"""The Unsloth / NVIDIA articles' claims (README, "The claims we check"), one row per claim in the columns of
`claims.CLAIM_COLUMNS`: opt, upstream, model, gpu, scope, claimed low / high %, claimed extra, the claim."""

from workbench.step.length_data import DEFAULT_LENGTHS  # noqa: E402 - its one owner
"""The default document-length distribution (every CLI's `--lengths` default): the headline reports runs that packed
it; another distribution is another comparison (`workbench.analysis.lengths`)."""
