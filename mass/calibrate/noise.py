"""Release-time noise: swapped into an already fitted modifier (no retraining), and its level
found by bisection over :data:`NOISE_LEVELS` against the validation audit."""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import numpy as np
import torch

# Norm of the release-time noise on the unit output (0 = none). Bisection runs over indices.
NOISE_LEVELS = (0.0, 0.01, 0.02, 0.03, 0.05, 0.08, 0.12, 0.2, 0.3, 0.5, 0.8, 1.2)


def with_output_noise(model: torch.nn.Module, level: float) -> torch.nn.Module:
    """The same fitted modifier with release-time noise of norm ``level`` (no retraining).

    A MaSS G (alone or last in a chain) gets its ``spec.output_noise`` replaced; any other
    modifier gets a ``gaussian_noise`` modifier with sigma = level / sqrt(d) chained after it.
    """
    from mass.modifiers import ChainModifier, DataModifier, GaussianNoiseModifier, NoiseSpec

    if isinstance(model, DataModifier):
        out = DataModifier(dataclasses.replace(model.spec, output_noise=float(level)))
        out.load_state_dict(model.state_dict())
        return out.eval()
    if isinstance(model, ChainModifier) and isinstance(model.parts[-1], DataModifier):
        return ChainModifier.of(*model.parts[:-1], with_output_noise(model.parts[-1], level))
    if level <= 0:
        return model
    dim = int(model.spec.dim)
    noise = GaussianNoiseModifier(NoiseSpec(dim, level / math.sqrt(dim)))
    parts = list(model.parts) if isinstance(model, ChainModifier) else [model]
    return ChainModifier.of(*parts, noise)  # flat: a chain's spec.dim reads its first part


def apply(model: torch.nn.Module, x: np.ndarray, seeds: np.ndarray, batch: int = 8192):
    model.eval()
    out = []
    with torch.no_grad():
        for i in range(0, len(x), batch):
            out.append(
                model(
                    torch.from_numpy(x[i : i + batch]), torch.from_numpy(seeds[i : i + batch])
                ).numpy()
            )
    return np.concatenate(out) if out else x.copy()


def release_of(parts, audit, level: float) -> np.ndarray:
    """The validation release at noise ``level``: each fitted model of ``parts`` ((modifier,
    rows) pairs) releases its own (unseen) rows of ``audit.x``."""
    return released(parts, audit.x, audit.seeds, level)


def released(parts, x: np.ndarray, seeds: np.ndarray, level: float) -> np.ndarray:
    """Each fitted model of ``parts`` ((modifier, rows) pairs) releases its own rows of the
    normalised ``x`` (their noise ``seeds``) at noise ``level``."""
    xp = np.empty_like(x)
    for model, rows in parts:
        xp[rows] = apply(with_output_noise(model, level), x[rows], seeds[rows])
    return xp


def bisect_noise(
    parts,
    audit,
    deadline: float,
    comfortable: float = 2.0,
    now=time.perf_counter,
    key_gate: bool = False,
    certificate_gate: bool = False,
) -> dict[str, Any]:
    """Smallest level of :data:`NOISE_LEVELS` whose release passes the privacy half, and whose
    next level passes too, found by bisection (privacy is taken to fall with noise), or a
    measured level above it with more privacy room where utility stays >= ``comfortable``;
    the chosen level is then measured whole. ``parts``: (fitted modifier, validation rows) pairs;
    ``deadline`` is read on the clock ``now`` (the search's budget clock).

    ``key_gate`` (the policy's ``gate_key_compromised``): the gate also judges the release with
    its noise removed, which for release noise is the level-0 release, so a candidate whose
    level 0 fails privacy is refused at once - no noise level can pass that gate. (A MaSS G
    with noise inputs has more noise than this; the gate judges its full key view.)
    ``certificate_gate`` (``audit.gate_certificate``) likewise: a noisy release has no
    certificate, so only level 0 can pass."""
    points: list[dict] = []
    cache: dict[int, dict] = {}

    def at(i: int, full: bool = False) -> dict:
        if i in cache and (cache[i]["complete"] or not full):
            return cache[i]
        t = now()
        xp = release_of(parts, audit, NOISE_LEVELS[i])
        prior = cache.get(i)
        m = audit.measure(xp, full=full, known=prior)
        m.update(noise=NOISE_LEVELS[i], seconds=now() - t + (prior["seconds"] if prior else 0.0))
        if prior is not None:
            points.remove(prior)
        cache[i] = m
        points.append(m)
        return m

    last = len(NOISE_LEVELS) - 1
    if at(0)["privacy_ok"]:
        hi = 0
    elif key_gate or certificate_gate:
        why = (
            "gates the key-compromised view (audit.gate_key_compromised)"
            if key_gate
            else "gates the certificate (audit.gate_certificate), which a noisy release has not"
        )
        reason = f"privacy fails without release noise, and the policy {why}: no noise level can pass"  # fmt: skip
        return {"points": points, "chosen": None, "key_view_failed": True, "reason": reason}
    elif now() > deadline:
        reason = "budget exhausted during the noise search"
        return {"points": points, "chosen": None, "reason": reason}
    elif not at(last)["privacy_ok"]:
        return {"points": points, "chosen": None, "max_noise_failed": True,
                "reason": f"privacy fails even at noise {NOISE_LEVELS[last]}"}  # fmt: skip
    else:
        lo, hi = 0, last
        while hi - lo > 1 and now() < deadline:
            mid = (lo + hi) // 2
            if at(mid)["privacy_ok"]:
                hi = mid
            else:
                lo = mid
            # the smallest passing level is borderline by construction: the next level up must
            # pass too, else that pass was noise and the search goes on above the failure
            if hi - lo <= 1 and hi < last and not at(hi + 1)["privacy_ok"]:
                lo, hi = hi + 1, last
    # The smallest private level is borderline by construction (the first to pass among noisy
    # measurements). Where a measured level above it also passes and still keeps utility to
    # spare (>= ``comfortable``; a partial measurement's fraction is a lower bound), take the
    # one with the most privacy room instead: the utility is not needed, the room is (why:
    # docs/journal/calibration-runs.md, "What the runs showed, and what changed because of it").
    spare = [i for i, m in cache.items() if i >= hi and m["privacy_ok"]
             and m["utility_ok"] and m["fraction"] >= comfortable]  # fmt: skip
    if spare:
        hi = min(spare, key=lambda i: (cache[i]["excess"], i))
    # complete the chosen level's utility for the report, unless the budget is spent (a
    # partial utility measurement already decides: it stops only once the fraction is kept)
    cut = hi > 0 and hi - lo > 1  # the bisection stopped at the deadline, not converged
    pt = at(hi, full=now() < deadline)
    if not pt["passed"]:
        reason = ("privacy failed when every family was measured" if not pt["privacy_ok"] else
                  f"utility {pt['fraction']:.3f} of the original at the smallest private noise "
                  f"{pt['noise']}" + (" measured: the budget ran out before the levels "
                                      f"between {NOISE_LEVELS[lo]} and {pt['noise']}"
                                      if cut else ""))  # fmt: skip
        return {"points": points, "chosen": None, "reason": reason}
    return {"points": points, "chosen": pt, "reason": f"passes at noise {pt['noise']}"}
