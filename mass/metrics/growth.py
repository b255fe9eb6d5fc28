"""A leak that grows with the release: each retrained judge's upper bounds projected from the
rows its attackers trained on to the rows an attacker of the whole release trains on.

An audit that judges a sample of the release (``policy.max_rows``), and calibration, whose
out-of-fold attackers train within one fold's release, measure attackers trained on fewer
rows than the release gives anyone who holds it with labels; what those read, an attacker
with more rows reads better (docs/calibration.md, "What is validated, and how": "A leak
that grows with the release").

The model: a judge's accuracy on t training rows a(t) = a_inf - c / sqrt(t), the slowest
decay of the usual learning curves (an error that falls as 1/t reaches its limit sooner), so
the projection errs on the side of more growth. Two points of the measured curve, the judge
trained on half of each split's training rows and on all of them (the same held-out rows,
so their difference is paired), fix c: a(N) - a(t) = (a(t) - a(t/2)) (1 - sqrt(t/N)) /
(sqrt 2 - 1), at most 2.41 times the last step. A negative step (noise) projects nothing.

The step counts only from the judge's baseline up (``max(majority, floor)``, on the balanced
scale ``max(chance, balanced floor)``): a(t) - max(a(t/2), baseline). Without signal a
cross-validated attacker scores *below* its baseline on few rows and climbs back to it as its
rows grow (Jamalabadi et al. 2016, docs/calibration.md "A leak that grows with the release");
that climb is the fading of a small-sample bias, not a leak that grows past the baseline, and
projected as one it failed every cell release of a skewed S in calibration while the gate read
the releases within their limit (docs/journal/calibration-runs.md, session 16).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from mass.metrics.scores import Score, balanced_accuracy

HALF = 0.5  # the curve's other point: half of each split's training rows


def factor(trained: float, release: float) -> float:
    """How many times the last step (t/2 -> t) the curve still climbs from ``trained`` to
    ``release`` training rows (0 when the release gives no more rows)."""
    if trained <= 0 or release <= trained:
        return 0.0
    return (1.0 - math.sqrt(trained / release)) / (math.sqrt(2.0) - 1.0)


def trained_rows(n: int, folds: int, groups=None) -> float:
    """The training rows of one cross-validation split on ``n`` rows (within each of the
    ``groups``' classes when given, as :func:`mass.metrics.attackers.grouped_folds`)."""
    g = 1 if groups is None else max(1, int(np.unique(np.asarray(groups)).size))
    return n / g * (folds - 1) / folds


def steps(half: Mapping[str, np.ndarray], full: Mapping[str, np.ndarray], y: np.ndarray,
          baseline: tuple[float, float] = (0.0, 0.0)) -> dict[str, tuple[float, float]]:  # fmt: skip
    """judge -> (accuracy, balanced accuracy) gained from half to all of the training rows,
    counted from ``baseline`` (accuracy, balanced) up: a(t) - max(a(t/2), baseline), never
    below 0 (module docstring)."""
    out = {}
    for j, p in full.items():
        if j not in half:
            continue
        acc = float((p == y).mean()) - max(float((half[j] == y).mean()), baseline[0])
        bal = balanced_accuracy(y, p) - max(balanced_accuracy(y, half[j]), baseline[1])
        out[j] = (max(0.0, acc), max(0.0, float(bal)))
    return out


def project(scores: Mapping[str, Score], gained: Mapping[str, tuple[float, float]],
            k: float, judge_of) -> tuple[dict[str, Score], dict[str, float]]:  # fmt: skip
    """The scores with each judge's upper bounds raised by ``k`` times its measured step
    (``judge_of(name)``: whose step a judge takes, e.g. a re-mapped judge its own judge's),
    capped at 1; and judge -> the accuracy bound's rise (the judges that rose)."""
    out, rise = dict(scores), {}
    if k <= 0:
        return out, rise
    for name, s in scores.items():
        step = gained.get(judge_of(name))
        if step is None:
            continue
        up = min(1.0, s.ci_high + k * step[0])
        up_bal = min(1.0, s.balanced_ci_high + k * step[1])
        if up > s.ci_high or up_bal > s.balanced_ci_high:
            out[name] = replace(s, ci_high=up, balanced_ci_high=up_bal)
            rise[name] = round(up - s.ci_high, 4)
    return out, rise


def project_curves(scores: Mapping[str, Score], curves: Mapping[str, Mapping[float, np.ndarray]],
                   y: np.ndarray, k: float, judge_of, baseline: tuple[float, float] = (0.0, 0.0)
                   ) -> tuple[dict[str, Score], dict[str, float]]:  # fmt: skip
    """:func:`project` with each judge's step read from its predictions per fraction of the
    training rows (``curves``: judge -> fraction -> predictions; judges without ``HALF``
    have no step), counted from ``baseline`` up (:func:`steps`)."""
    half = {j: p[HALF] for j, p in curves.items() if HALF in p}
    full = {j: p[1.0] for j, p in curves.items()}
    return project(scores, steps(half, full, y, baseline), k, judge_of)
