"""The step components, in one place: each one's name, group, colour, lever text and attention FLOP class (data only,
no torch).

A traced step is split by `workbench.traces.decompose` into busy time by kernel class (`BUSY`) and idle time by
cause (`IDLE`); `workbench.traces.lever_advice` names four more rows that are not part of that partition (`LEVER_ONLY`):
attention computed dense over the packed sequence, a gradient built slice by slice, the checkpointed layers'
recompute and the loss's pointwise work on the logits. Every figure that draws a
component (the README's PNGs, `workbench.report.figures`; the notebooks' plotly figures, `workbench.report.tables`)
takes its colour here, and `levers.py` its lever text, so a component looks and reads the same everywhere.

    from workbench.traces.components import COMPONENTS, colour
    colour("launch_gap")          # '#882255'
    COMPONENTS["copy"].lever      # what would move it

The colours are Okabe-Ito's and Paul Tol's colour-blind-safe sets: busy time in blues / greens / purples, idle time
in warm colours, one colour per component (`tests/test_components.py` checks that no two share one).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Component:
    """One component of a traced step."""

    name: str
    """As the decomposition and the tables spell it (`gemm`, `launch_gap`)."""
    group: str
    """`busy` (a kernel of this class runs), `idle` (no kernel runs, by cause) or `lever` (a row `levers()` names
    that is not a part of the step's partition)."""
    colour: str
    """Its colour in every figure (hex)."""
    lever: str | None = None
    """What would move it (`workbench.traces.lever_advice`); None for the useful matrix work."""
    attention_flops: str | None = None
    """The attention FLOP class (`workbench.step.flops.ATTENTION_MODES`) this component stands for, if any."""

    @property
    def label(self) -> str:
        """The name a legend shows: idle components say so."""
        return f"{self.name} (idle)" if self.group == "idle" else self.name


_ROWS = (
    Component("gemm", "busy", "#0072B2"),
    Component("attention", "busy", "#56B4E9", attention_flops="block_diagonal"),
    Component("glue", "busy", "#CC79A7",
              "metadata builds and MoE routing / permute kernels: build once per batch, fuse the permutation into "
              "the grouped GEMM"),
    Component("copy", "busy", "#332288",
              "device copies, mostly dtype casts (direct_copy / bfloat16_copy kernels: e.g. fp32 LoRA adapters on a "
              "bf16 base cast activations both ways in every layer): keep the adapters in the compute dtype, fuse "
              "the casts, avoid materializing layouts"),
    Component("norm_elementwise", "busy", "#009E73",
              "norms, activations and pointwise ops are memory-bound: fused kernels (e.g. fused RMSNorm / SwiGLU / "
              "cross-entropy) or torch.compile"),
    Component("optimizer", "busy", "#999933", "optimizer step: fused / foreach AdamW (already fused on CUDA here)"),
    Component("other", "busy", "#BBBBBB", "uncategorized kernels: see the top kernels"),
    Component("exposed_copy", "idle", "#E69F00",
              "host<->device copies not hidden: prefetch on a side stream (double buffering), or keep the tensors "
              "on the GPU when memory allows"),
    Component("sync_stall", "idle", "#D55E00",
              "host syncs drain the queue: remove the readbacks (cache metadata once per batch, count on the "
              "device, precompute on the CPU)"),
    Component("launch_gap", "idle", "#882255",
              "host-bound: the GPU waits for launches; fewer, larger kernels (fused / grouped ops, torch.compile) "
              "or CUDA graphs"),
    Component("attention (dense)", "lever", "#004488",
              "the backend computes attention over the whole packed sequence (T^2): a varlen / flash kernel "
              "computes only the documents' blocks", attention_flops="dense"),
    Component("slice gradients (fill + add)", "lever", "#FFAABB",
              "a gradient built slice by slice, as a per-expert loop over a fused LoRA-adapted expert weight does "
              "(each expert's w[e] back-propagates through a zero tensor of all experts' size): index every expert at "
              "once (transformers' grouped_mm experts, or the `grouped` arm)"),
    Component("recompute", "lever", "#EE8866",
              "checkpointed layers run their forward again in the backward: keep the activations (no checkpointing), "
              "save the GEMM outputs and recompute only the pointwise work (selective checkpointing), or move the "
              "saved activations to host memory (offload): the activations lever, the fastest arm that fits"),
    Component("loss (logits, non-GEMM)", "lever", "#661100",
              "the loss materializes the (T, V) logits and passes over them outside the GEMMs (fp32 cast, "
              "log-softmax, its backward, the cast back): a fused linear cross-entropy (Liger, Cut Cross-Entropy) "
              "computes the loss chunk by chunk without them"),
)

COMPONENTS: dict[str, Component] = {c.name: c for c in _ROWS}
"""Every component by name, busy first, then idle (the order figures stack them in), then the lever-only rows."""
BUSY = tuple(c.name for c in _ROWS if c.group == "busy")
IDLE = tuple(c.name for c in _ROWS if c.group == "idle")
STACKED = BUSY + IDLE
"""The components a step breakdown stacks, in order: the partition `decompose` computes."""
LEVER_ONLY = tuple(c.name for c in _ROWS if c.group == "lever")
COLOURS = {c.name: c.colour for c in _ROWS}
LEVERS = {c.name: c.lever for c in _ROWS if c.lever and c.group != "lever"}
"""The lever of each part of the step that has one (the useful matrix work has none)."""


def colour(name: str) -> str:
    """The colour of component `name` (KeyError for a name that is not a component)."""
    return COMPONENTS[name].colour


def attention_component(attention_flops: str | None) -> str | None:
    """The component that stands for attention of FLOP class `attention_flops` (None when none does)."""
    return next((c.name for c in _ROWS if c.attention_flops == attention_flops), None)
