"""Can a held-out rule fail? Its power against a machine with no effect, and whether its interval may be published.

    from workbench.measure import heldout_power
    heldout_power.no_effect_power(prediction, null)          # {"power", "pass_rate", "M", "true_speedup", ...}
    heldout_power.publishable(prediction, null, claim="faster")  # {"publish", "power", "why"}

A prediction interval for one process on another machine is a claim only if the held-out rule that tests it can
fail. The rule (`replication_spread.spread_check` for a design whose machines each have their own process SD,
`replication.heldout_new_machine_check` for the one-SD design) is applied, unchanged, to M simulated processes of one
new machine whose true speedup is `true_speedup` (1.000: the optimization does nothing there), the processes
scattered as the design's fit says a new machine scatters:

- own-SD design: log tau_new^2 ~ N(lambda-hat, eta-hat^2), process means log(true_speedup) + tau_new z;
- one-SD design: process means log(true_speedup) + sqrt(MSW) z.

power = the share of those machines the rule fails (seeded: the same inputs give the same number). An interval is
published only when that power is at least `POWER_FLOOR` and, for a "faster" claim, the interval excludes 1
(`publishable`); otherwise the headline states the machine-to-machine spread instead (`machine_spread_text`).
"""
from __future__ import annotations

import json
import math

import numpy as np

POWER_FLOOR = 0.8
"""The least power against a no-effect machine (true speedup 1.000) a published prediction interval's rule needs."""
SIMS = 2000


def _own_sd(prediction: dict) -> bool:
    return "lam" in prediction and "eta" in prediction


def _draw(prediction: dict, M: int, true_speedup: float, rng) -> np.ndarray:
    """M process means (log) of one simulated machine whose true speedup is `true_speedup`."""
    if _own_sd(prediction):
        tau = math.exp((float(prediction["lam"]) + float(prediction["eta"]) * rng.standard_normal()) / 2)
    else:
        tau = math.sqrt(float(prediction["msw"]))
    return math.log(true_speedup) + tau * rng.standard_normal(M)


def _passes(prediction: dict, means: np.ndarray, null: dict) -> bool:
    if _own_sd(prediction):
        from workbench.measure.replication_spread import spread_check
        return spread_check(prediction, means, null)["ok"]
    from workbench.measure.replication import heldout_new_machine_check
    return heldout_new_machine_check(prediction, means, null=null)["ok"]


def _plain(value):
    """A numpy value as JSON writes it, in full (an array's repr elides the middle of a long one)."""
    return value.tolist() if hasattr(value, "tolist") else repr(value)


_POWERS: dict = {}
"""`no_effect_power`'s results by their inputs (seeded, so the same inputs give the same number): a page and the
README's block ask for the same few rules' power many times."""


def no_effect_power(prediction: dict, null: dict, *, true_speedup: float = 1.0, sims: int = SIMS,
                    seed: int = 0) -> dict:
    """The share of simulated machines of true speedup `true_speedup` that the committed rule (`prediction`, its
    `null` with M) fails. Returns {"power", "pass_rate", "M", "true_speedup", "sims", "seed"}."""
    key = json.dumps([prediction, null, true_speedup, sims, seed], sort_keys=True, default=_plain)
    if key not in _POWERS:
        _POWERS[key] = _no_effect_power(prediction, null, true_speedup, sims, seed)
    return dict(_POWERS[key])


def _no_effect_power(prediction: dict, null: dict, true_speedup: float, sims: int, seed: int) -> dict:
    M = int(null["M"])
    rng = np.random.default_rng(seed)
    passed = sum(_passes(prediction, _draw(prediction, M, true_speedup, rng), null) for _ in range(sims))
    return {"power": 1 - passed / sims, "pass_rate": passed / sims, "M": M, "true_speedup": true_speedup,
            "sims": sims, "seed": seed}


def publishable(prediction: dict, null: dict, *, claim: str = "faster", sims: int = SIMS, seed: int = 0) -> dict:
    """Whether `prediction`'s interval may be published: its rule's power against a no-effect machine is at least
    `POWER_FLOOR`, and a "faster" claim's interval excludes 1. Returns {"publish", "power", "M", "excludes_1",
    "why" (None when published)}."""
    pw = no_effect_power(prediction, null, sims=sims, seed=seed)
    lo, hi = prediction["pi95"]
    excludes = lo > 1 if claim == "faster" else (hi < 1 if claim == "slower" else True)
    why = []
    if pw["power"] < POWER_FLOOR:
        why.append(f"its held-out rule fails a no-effect machine (speedup 1.000) with probability {pw['power']:.2f} "
                   f"at M = {pw['M']}, below {POWER_FLOOR:.1f}")
    if not excludes:
        why.append(f"the interval [{lo:.3f}, {hi:.3f}] does not exclude 1")
    return {"publish": not why, "power": pw["power"], "M": pw["M"], "excludes_1": excludes,
            "why": "; ".join(why) or None}


def machine_spread_text(prediction: dict) -> str:
    """The machines' own speedups, said descriptively: "machine means 1.08x-1.17x over 6 machines"."""
    d = [math.exp(float(v)) for v in prediction.get("machine_means_log") or []]
    if len(d) < 2:
        return "one machine: no machine-to-machine spread measured"
    return f"machine means {min(d):.3f}x-{max(d):.3f}x over {len(d)} machines"
