"""Rates, confidence bounds and the leakage floor: what an attacker's predictions score
(accuracy, balanced accuracy, Wilson upper bounds, re-mapping, chance and floors)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from mass.metrics.strata import cv_folds
from mass.rows import joint_codes

ATTACKER_FAMILIES = ("logreg", "mlp", "gboost", "knn")
FROZEN = "frozen"  # judge name of the frozen branch model in reports and GX frames


def majority_rate(y) -> float:
    """Accuracy of always predicting the most frequent class (0.0 for no rows)."""
    y = np.asarray(y)
    if y.size == 0:
        return 0.0
    _, counts = np.unique(y, return_counts=True)
    return float(counts.max() / y.size)


def chance_level(y) -> float:
    """Balanced accuracy of any constant guess: 1/k for the k classes present in ``y``."""
    k = np.unique(np.asarray(y)).size
    return 1.0 / k if k else 0.0


def balanced_accuracy(y, pred) -> float:
    """Mean per-class recall over the classes present in ``y`` (0.0 for no rows)."""
    y, pred = np.asarray(y), np.asarray(pred)
    classes = np.unique(y)
    if classes.size == 0:
        return 0.0
    return float(np.mean([(pred[y == c] == c).mean() for c in classes]))


def z_value(confidence: float) -> float:
    """Two-sided normal quantile: 1.96 for a 95 % interval."""
    from scipy.stats import norm

    return float(norm.ppf(0.5 + confidence / 2.0))


def wilson_upper(correct: float, n: int, z: float = 1.96) -> float:
    """Upper end of the Wilson score interval of ``correct`` successes in ``n`` trials."""
    if n <= 0:
        return 1.0
    p = correct / n
    centre = p + z * z / (2 * n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return float(min(1.0, (centre + half) / (1 + z * z / n)))


def balanced_upper(y, pred, z: float = 1.96) -> float:
    """Upper end of a normal interval on balanced accuracy.

    Balanced accuracy is the mean of k per-class recalls r_c (n_c rows each), so its variance
    is sum(r_c (1 - r_c) / n_c) / k^2. Each r_c enters the variance Wilson-adjusted,
    (correct_c + z^2/2) / (n_c + z^2) over n_c + z^2 rows, so a class recall of exactly 0 or 1
    (a constant guess) still carries the uncertainty of its n_c rows.
    """
    y, pred = np.asarray(y), np.asarray(pred)
    classes = np.unique(y)
    if classes.size == 0:
        return 1.0
    n_c = np.array([(y == c).sum() for c in classes], dtype=np.float64)
    hit = np.array([(pred[y == c] == c).sum() for c in classes], dtype=np.float64)
    adj = (hit + z * z / 2) / (n_c + z * z)
    var = float(np.sum(adj * (1 - adj) / (n_c + z * z))) / classes.size**2
    return float(min(1.0, np.mean(hit / n_c) + z * np.sqrt(var)))


@dataclass(frozen=True)
class Score:
    """One judge's predictions summarised: point estimates and their 95 % upper bounds."""

    accuracy: float
    balanced: float
    ci_high: float
    balanced_ci_high: float


def clustered_se(y, pred, clusters, *, balanced: bool = False, strata=None) -> float:
    """Standard error of the accuracy (or, ``balanced``, the balanced accuracy) of ``pred``
    when the rows of one cluster are not independent: the cluster-robust (sandwich) variance
    of the rate's linearisation, summed per cluster, times m / (m - 1) for m clusters; 0.0
    for fewer than two clusters. ``strata`` (a code per row, e.g. the preserved classes,
    each cluster within one): each row's term is centred on its stratum's rate (its class's
    recall within the stratum, balanced), the stratified variance given the strata's sizes,
    so what the strata alone explain (the leakage floor's share) is not counted as noise.

    Rows released as one vector (a cell) share their judge's prediction, and a retrained
    judge learns that prediction from their cellmates' labels, so their outcomes correlate
    and the binomial error of independent rows under-states the rate's spread; this one
    measures it (docs/audit.md, "Rows that share a released vector")."""
    y, pred = np.asarray(y), np.asarray(pred)
    hit = (pred == y).astype(np.float64)
    _, g = np.unique(np.zeros(y.size) if strata is None else np.asarray(strata),
                     return_inverse=True)  # fmt: skip
    classes, yi = np.unique(y, return_inverse=True)
    k = classes.size if balanced else 1
    key = g * k + (yi if balanced else 0)  # stratum (x class): whose rate centres a row
    rate = np.bincount(key, weights=hit) / np.maximum(np.bincount(key), 1)
    weight = 1.0 / (k * np.bincount(yi)[yi]) if balanced else np.full(y.size, 1.0 / max(y.size, 1))
    u = (hit - rate[key]) * weight
    _, ci = np.unique(np.asarray(clusters), return_inverse=True)
    m = int(ci.max()) + 1 if ci.size else 0
    if m < 2:
        return 0.0
    per = np.bincount(ci, weights=u)
    return float(np.sqrt(m / (m - 1) * np.sum(per * per)))


def score(y, pred, z: float = 1.96, clusters=None, strata=None) -> Score:
    """A judge's rates and their upper bounds: Wilson (accuracy) and the per-class normal
    bound (balanced) of independent rows; with ``clusters`` (a code per row: the released
    vector, when some vector is released for more than one row) each bound is at least the
    cluster-robust one, rate + z :func:`clustered_se` (centred within ``strata``)."""
    y, pred = np.asarray(y), np.asarray(pred)
    correct = float((pred == y).sum())
    accuracy, balanced = correct / max(y.size, 1), balanced_accuracy(y, pred)
    ci_high, balanced_ci_high = wilson_upper(correct, int(y.size), z), balanced_upper(y, pred, z)
    if clusters is not None and y.size:
        ci_high = max(
            ci_high, min(1.0, accuracy + z * clustered_se(y, pred, clusters, strata=strata))
        )
        balanced_ci_high = max(
            balanced_ci_high,
            min(1.0, balanced + z * clustered_se(y, pred, clusters, balanced=True, strata=strata)),
        )
    return Score(accuracy=accuracy, balanced=balanced, ci_high=ci_high,
                 balanced_ci_high=balanced_ci_high)  # fmt: skip


def remap_predictions(y, pred, *, seed: int = 0, balanced: bool = False) -> np.ndarray:
    """A judge's predictions re-mapped by what they reveal, scored honestly.

    An attacker far *below* chance is informative: its prediction tells the label, just not
    as "the same class". The rows are split in two halves (seeded); on each half the map
    predicted class -> label is learned from the *other* half (the label most often behind
    that prediction, or with ``balanced`` the one with the highest share of its class) and
    applied. A judge at chance gains nothing (the map is learned on independent rows); one
    that flips or permutes the labels is read back.
    """
    y, pred = np.asarray(y), np.asarray(pred)
    out = np.empty_like(y)
    if y.size < 2:
        return pred.copy()
    classes, y_idx = np.unique(y, return_inverse=True)
    p_vals, p_idx = np.unique(pred, return_inverse=True)
    half = np.zeros(y.size, dtype=bool)
    half[np.random.default_rng(seed).permutation(y.size)[: y.size // 2]] = True
    for test in (half, ~half):
        learn = ~test
        mapped = table_predict(p_idx[learn], y_idx[learn], p_idx[test], p_vals.size,
                               classes.size, balanced=balanced)  # fmt: skip
        out[test] = classes[mapped]
    return out


def table_predict(cell_train: np.ndarray, y_train: np.ndarray, cell_test: np.ndarray,
                  n_cells: int, n_classes: int, *, balanced: bool = False) -> np.ndarray:  # fmt: skip
    """A lookup table learned on ``(cell_train, y_train)`` (class indices), applied to
    ``cell_test``: per cell the majority class or, with ``balanced``, the class with the
    highest share of its own class's rows (the balanced-accuracy-optimal rule); a cell the
    training rows never saw gets their majority class."""
    counts = np.zeros((n_cells, n_classes), dtype=np.int64)
    np.add.at(counts, (cell_train, y_train), 1)
    totals = np.bincount(y_train, minlength=n_classes)
    weights = counts / np.maximum(totals, 1) if balanced else counts
    fallback = totals.argmax()
    return np.where(counts.sum(1) > 0, weights.argmax(1), fallback)[cell_test]


def leakage_floor(
    y_s, preserved: Mapping[str, np.ndarray], *, folds: int = 5, seed: int = 0,
    balanced: bool = False,
) -> float:  # fmt: skip
    """Cross-validated accuracy of predicting ``y_s`` from the preserved labels alone.

    The model is a lookup table (majority ``s`` per combination of preserved labels,
    the Bayes-optimal classifier on discrete inputs); unseen combinations fall back to the
    training fold's majority. With no preserved attribute this is :func:`majority_rate`.
    ``balanced``: the table picks, per combination, the class with the highest share of its
    own class's rows (the balanced-accuracy-optimal rule) and the result is the balanced
    accuracy; with no preserved attribute it is :func:`chance_level`.
    """
    y = np.asarray(y_s)
    if not preserved or y.size == 0:
        return chance_level(y) if balanced else majority_rate(y)
    _, y_idx = np.unique(y, return_inverse=True)
    cell = joint_codes(dict(preserved))
    n_cells, n_classes = int(cell.max()) + 1, int(y_idx.max()) + 1
    pred = np.empty_like(y_idx)
    for train, test in cv_folds(y_idx, folds, seed):
        pred[test] = table_predict(cell[train], y_idx[train], cell[test], n_cells, n_classes,
                                   balanced=balanced)  # fmt: skip
    if balanced:
        return balanced_accuracy(y_idx, pred)
    return float((pred == y_idx).sum() / y.size)
