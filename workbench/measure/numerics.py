"""Arms that change the numerics on purpose (bf16 adapters): judged by their deviation from the fp32 reference,
with the baseline's own deviation as the yardstick, instead of by equality with the baseline.

An optimization whose optimized arms legitimately compute in another precision says so with a module-level
`NUMERICS_CHANGE: str` (one sentence: what changes; `workbench.opts.numerics_change` collects them). For an arm
that applies such an optimization (any arm of it but its BASELINE), `workbench.ab` runs the baseline arm once more
with every parameter in fp32 and without autocast on the same batch (`equivalence.reference_fp32`), and reports, per LoRA gradient tensor and for the loss, the relative
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

Arms that compute a DIFFERENT FUNCTION by design (forced-balanced routing: tokens go to other experts) can meet no
tolerance against the baseline or fp32. Their optimization says so before any run with a module-level
`DIFFERENT_FUNCTION = {"why": sentence, "off": {option: value}}` (`workbench.opts.protocol`): `apply(model, arm,
**off)` runs the arm's own code path with the change switched off. Such an arm is judged by `judge_different`, a
criterion that can still fail, fixed here before any run:

    (a) plumbing: the arm with the change off is equivalent to the baseline under the normal criterion
        (`workbench.measure.equivalence`, or the numerics criterion above where the arm also changes precision);
    (b) sanity: the arm's loss is finite; it fills the same LoRA gradient tensors as the baseline, every one finite,
        and each one the baseline's step fills non-zero is non-zero (no gradient path cut).

It is reported as "different function (stated): <why>", never as equivalent (`equivalent` stays False) and never as
failed while (a) and (b) hold (`accepted`); the run completes.
"""
from __future__ import annotations

K = 3.0
"""An arm may deviate from fp32 at most K x the baseline's own deviation (or K x FLOOR, the larger)."""
FLOOR = 1e-2
"""The deviation below which the baseline's is taken as FLOOR (a fp32 baseline deviates 0 from itself)."""


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


DIFFERENT = "different function (stated)"
"""How the tables name an arm that computes a different function by design and passed `judge_different`."""
DIFFERENT_CELL = "different fn (stated)"
"""DIFFERENT in a table cell."""
DIFFERENT_FAILED_CELL = "NO (different fn)"
"""A table cell for a stated different-function arm whose `judge_different` checks failed."""


def equiv_cell(equivalent, different_passed=None, bitwise=None) -> str:
    """An arm's equivalence in a table cell, from what its run wrote (summary.json's `equivalent` and
    `different_function.passed`, results.csv's `different_function_passed`), never re-derived: a stated
    different-function arm reads DIFFERENT_CELL when its checks passed and DIFFERENT_FAILED_CELL when they failed
    (neither equivalent nor an ordinary "NO"); any other arm "bitwise" / "yes" / "NO", "-" where it was not judged
    (None or NaN)."""
    if different_passed is not None and different_passed == different_passed:
        return DIFFERENT_CELL if bool(different_passed) else DIFFERENT_FAILED_CELL
    if equivalent is None or equivalent != equivalent:
        return "-"
    return "bitwise" if bitwise and bitwise == bitwise else ("yes" if bool(equivalent) else "NO")


def off_options(different: dict, options: dict) -> dict:
    """`options` ({opt: apply kwargs}) with each different-function optimization's `off` switch added."""
    o = dict(options)
    for opt, d in different.items():
        o[opt] = {**o.get(opt, {}), **d["off"]}
    return o


def sanity(out: dict, base: dict) -> list[str]:
    """Check (b) of one arm's {"loss", "grads"} against the baseline's: what fails (empty: it holds)."""
    import math

    import torch

    bad = []
    if not math.isfinite(out["loss"]):
        bad.append(f"loss {out['loss']}")
    for n, gb in base["grads"].items():
        g = out["grads"].get(n)
        if (g is None) != (gb is None) or (g is not None and g.shape != gb.shape):
            bad.append(f"gradient {n} missing or of another shape")
        elif g is None:
            continue
        elif not bool(torch.isfinite(g).all()):
            bad.append(f"gradient {n} not finite")
        elif bool(gb.any()) and not bool(g.any()):
            bad.append(f"gradient {n} zero (the baseline's is not)")
    if base["grads"] and not any(g is not None and bool(g.any()) for g in out["grads"].values()):
        bad.append("every LoRA gradient zero")
    return bad


def judge_different(out: dict, base: dict, off: dict, why: str) -> dict:
    """A different-function arm: `out` its {"loss", "grads"}, `base` the baseline's, `off` the normal judgement (the
    equivalence dict) of the arm with the change switched off. Returns the keys of `equivalence.compare` (arm vs
    baseline, for the tables: the difference the change makes) with `equivalent` False and `different_function`:
    {why, off_path_equivalent, off_path (its judgement's figures), problems, passed}."""
    import math

    import torch

    from workbench.measure.equivalence import compare

    direct = compare(out, base, torch.float32)
    problems = sanity(out, base)
    if not off["equivalent"]:
        problems.insert(0, f"with the change off it differs from the baseline (loss diff {off['loss_abs_diff']:.3g}, "
                           f"grad max rel L2 {off['grad_max_rel_l2']:.3g})")
    keep = ("bitwise", "loss_abs_diff", "grad_max_rel_l2", "worst_grad", "judged_by", "ref_worst_ratio")
    df = {"why": why, "criterion": "(a) the arm with the change off is equivalent to the baseline under the normal "
                                   "criterion; (b) the arm's loss is finite, its LoRA gradients finite, and non-zero "
                                   "wherever the baseline's are",
          "off_path_equivalent": bool(off["equivalent"]), "off_path": {k: off[k] for k in keep if k in off},
          "loss_finite": math.isfinite(out["loss"]), "problems": problems, "passed": not problems}
    return {**direct, "equivalent": False, "different_function": df}


def accepted(e: dict) -> bool:
    """An arm's judgement passes: equivalent to the baseline, or a stated different function whose checks hold."""
    return bool(e.get("equivalent") or (e.get("different_function") or {}).get("passed"))


def different_line(df: dict) -> str:
    """One line for the progress log, the tables and the failure message."""
    off = "equivalent to" if df["off_path_equivalent"] else "DIFFERS from"
    checks = "loss and LoRA gradients finite and non-zero: passed" if df["passed"] else \
        "FAILED: " + "; ".join(df["problems"][:3])
    return f"{DIFFERENT}: {df['why']} Checks: change off {off} the baseline; {checks}"
