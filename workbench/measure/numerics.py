"""Arms that change the numerics on purpose (bf16 adapters): judged by their deviation from the fp32 reference,
with the baseline's own deviation as the yardstick, instead of by equality with the baseline.

An optimization whose optimized arms legitimately compute in another precision says so with a module-level
`NUMERICS_CHANGE: str` (one sentence: what changes). For an arm that applies such an optimization (any arm of it but
its BASELINE), `workbench.ab` runs the baseline arm once more with every parameter in fp32 and without autocast on
the same batch (`equivalence.reference_fp32`), and reports, per LoRA gradient tensor and for the loss, the relative
deviation of the arm and of the baseline from that reference:

    dev(x) = ||g_x - g_fp32|| / ||g_fp32||        (the loss: |l_x - l_fp32| / |l_fp32|)

The criterion, fixed before any run (K and FLOOR below, written into the comparison's JSON with every judgement):
the arm is within tolerance when, for the loss and for every gradient tensor,

    dev(arm) <= K * max(dev(baseline), FLOOR)

K = 3: an arm may round three times as far from fp32 as the baseline's own rounding does. FLOOR = 1e-2: a baseline
that computes in fp32 (a CPU run) deviates 0 from the reference, and a few bf16 roundings (unit roundoff 2^-8 = 3.9e-3)
of an arm that changes precision stay under 1e-2; without a floor no precision change could pass there.
An arm beyond it is reported as not equivalent (the comparison's `equivalent` is False and the run fails), with its
deviations next to the baseline's.
"""
from __future__ import annotations

K = 3.0
"""An arm may deviate from fp32 at most K x the baseline's own deviation (or K x FLOOR, the larger)."""
FLOOR = 1e-2
"""The deviation below which the baseline's is taken as FLOOR (a fp32 baseline deviates 0 from itself)."""


def change_of(arms: dict) -> str | None:
    """The NUMERICS_CHANGE sentences of the optimizations `arms` ({opt: arm}) applies other than at their BASELINE,
    joined; None when the arms compute the baseline's function exactly."""
    from workbench import opts
    from workbench.opts.protocol import hook

    said = []
    for opt, arm in arms.items():
        mod = opts.module(opt)
        what = hook(mod, "NUMERICS_CHANGE")
        if what and arm != mod.BASELINE:
            said.append(f"{opt}: {what}")
    return "; ".join(said) or None


def describe() -> dict:
    return {"criterion": "dev(arm) <= k x max(dev(baseline), floor) for the loss and every LoRA gradient tensor, "
                         "dev = relative L2 against an fp32 run of the baseline arm on the same batch",
            "k": K, "floor": FLOOR}


def judge(out: dict, base: dict, ref32: dict, what: str) -> dict:
    """One numerics-changing arm's {"loss", "grads"} and the baseline's against the fp32 reference's. Returns the
    keys of `equivalence.compare` (arm vs baseline, for the tables) with `equivalent` = within tolerance, and
    `numerics_change`: the deviations side by side and the verdict."""
    from workbench.measure.equivalence import _rel, compare, rel_l2
    import torch

    direct = compare(out, base, torch.float32)
    l32 = ref32["loss"]
    loss_arm, loss_base = _rel(out["loss"], l32), _rel(base["loss"], l32)
    ok = loss_arm <= K * max(loss_base, FLOOR)
    g_arm, g_base, worst, worst_ratio = 0.0, 0.0, None, 0.0
    for n, g32 in ref32["grads"].items():
        g, gb = out["grads"].get(n), base["grads"].get(n)
        if g32 is None or g is None or gb is None or g.shape != g32.shape:
            if not (g32 is None and g is None and gb is None):
                ok = False
            continue
        ea, eb = rel_l2(g, g32), rel_l2(gb, g32)
        g_arm, g_base = max(g_arm, ea), max(g_base, eb)
        ratio = ea / max(eb, FLOOR)
        ok = ok and ea <= K * max(eb, FLOOR)
        if worst is None or ratio > worst_ratio:
            worst, worst_ratio = n, ratio
    nc = {"what": what, **describe(), "ref_chunks": ref32.get("chunks"),
          "loss_rel_dev": loss_arm, "loss_rel_dev_baseline": loss_base,
          "grad_max_rel_dev": g_arm, "grad_max_rel_dev_baseline": g_base,
          "worst_grad": worst, "worst_ratio": worst_ratio, "within_tolerance": bool(ok)}
    return {**direct, "equivalent": bool(ok), "numerics_change": nc}


def line(nc: dict) -> str:
    """One line for the progress log and the failure message."""
    return (f"numerics change ({nc['what']}): against fp32, loss dev {nc['loss_rel_dev']:.3g} vs the baseline's "
            f"{nc['loss_rel_dev_baseline']:.3g}, grad max rel dev {nc['grad_max_rel_dev']:.3g} vs "
            f"{nc['grad_max_rel_dev_baseline']:.3g} (k={nc['k']:g}, floor {nc['floor']:g}): "
            + ("within tolerance" if nc["within_tolerance"] else "BEYOND TOLERANCE"))
