"""A finite-sample certificate for a cell release: an upper bound on what ANY attacker can
read of a suppressed attribute S from the released vector (docs/audit.md,
"Certificate").

A cell release maps every row to one of finitely many vectors; a released vector names its
cell (exact bytes). On n audited rows drawn i.i.d. like the rows an attacker targets and NOT
used to fit the cells, with labels s_i, let n(c, s) count rows of cell c and class s.

- Accuracy. The Bayes-optimal predictor h*(c) = argmax_s P(s | c) is a fixed function, so its
  hits on the n rows are Binomial(n, A*), A* its accuracy, which no classifier of the release
  beats. The plug-in h^(c) = argmax_s n(c, s) maximises the hits on these rows over every
  function of the cell, hence hits(h*) <= m = sum_c max_s n(c, s), and the one-sided
  Clopper-Pearson upper bound at m (monotone in m) bounds A* with probability >= 1 - delta.
- Balanced accuracy over the k classes present. g*(c) = argmax_s P(c | s) is a fixed
  function; given the labels, its per-row hits are independent and the class-weighted mean
  B(g*) = (1/k) sum_s hits_s(g*) / n_s has expectation B*, its balanced accuracy (the best of
  any classifier). The plug-in g^(c) = argmax_s n(c, s) / n_s maximises that weighted mean, so
  B(g*) <= B^ = (1/k) sum_c max_s n(c, s) / n_s, and Hoeffding's inequality for a sum of terms
  in [0, 1 / (k n_s)] gives B* <= B^ + sqrt(ln(1/delta) sum_s (1/n_s) / (2 k^2)).

Multi-class S needs no pairs: both arguments hold for any k. Unseen cells need no budget: the
plug-in's optimism covers them. Bounds are clipped to 1. A release with more distinct
vectors than ``rows / min_rows_per_cell`` is continuous (a vector per row is an identity map
and certifies nothing): it gets no certificate, with the reason.

Pure numpy/scipy: the audit (mass.audit.runner) calls :func:`certify_cells` on its audited
rows, with the codes of :func:`cells_of` it also hands to the cell capacity.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.stats import beta, norm

MIN_ROWS_PER_CELL = 2  # fewer rows per distinct vector on average: continuous, no certificate


def is_continuous(cells: int, rows: int, min_rows_per_cell: int = MIN_ROWS_PER_CELL) -> bool:
    """Whether ``cells`` distinct released vectors on ``rows`` rows are a continuous release
    (more than one vector per ``min_rows_per_cell`` rows): no certificate, no cell capacity."""
    return cells * min_rows_per_cell > rows


@dataclass(frozen=True)
class Certificate:
    """The bounds (``None`` with ``reason`` when the release has none) and what they rest on."""

    rows: int
    cells: int  # distinct released vectors (each names one cell)
    classes: int  # classes of S present among the rows
    delta: float  # each bound fails with probability at most delta
    accuracy: float | None = None  # upper bound on any attacker's accuracy
    balanced: float | None = None  # upper bound on any attacker's balanced accuracy
    plugin_accuracy: float | None = None  # the plug-in predictor's accuracy on these rows
    plugin_balanced: float | None = None
    rows_per_cell: dict[str, float] = field(default_factory=dict)  # min / median / max
    reason: str | None = None  # why there is no certificate
    class_rows: tuple[int, ...] = ()  # audited rows of each class present (for :func:`plan`)

    @property
    def certified(self) -> bool:
        return self.reason is None

    def to_dict(self) -> dict:
        """The audit.json ``certificate`` block (rounded like the rest of audit.json)."""

        def r(v):
            return None if v is None else round(float(v), 6)

        return {"certified": self.certified, "accuracy": r(self.accuracy),
                "balanced": r(self.balanced), "plugin_accuracy": r(self.plugin_accuracy),
                "plugin_balanced": r(self.plugin_balanced), "rows": self.rows,
                "cells": self.cells, "classes": self.classes, "delta": self.delta,
                "rows_per_cell": dict(self.rows_per_cell), "reason": self.reason}  # fmt: skip


def cells_of(x: np.ndarray) -> np.ndarray:
    """Cell code per row: rows with byte-identical vectors (in ``x``'s dtype) share a code."""
    x = np.ascontiguousarray(x)
    if x.ndim != 2:
        raise ValueError(f"released vectors must be 2-d [rows, dim], got shape {x.shape}")
    if x.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    keys = x.view(np.dtype((np.void, x.dtype.itemsize * x.shape[1]))).ravel()
    return np.unique(keys, return_inverse=True)[1].ravel().astype(np.int64)


def accuracy_bound(hits: int, n: int, delta: float) -> float:
    """One-sided Clopper-Pearson upper bound on a success rate from ``hits`` of ``n``."""
    if n <= 0:
        return 1.0
    return 1.0 if hits >= n else float(beta.ppf(1.0 - delta, hits + 1, n - hits))


def balanced_bound(plugin: float, class_rows: np.ndarray, delta: float) -> float:
    """Hoeffding upper bound on the Bayes-optimal balanced accuracy from the plug-in's
    ``plugin`` and the rows per class (module docstring)."""
    n_s = np.asarray(class_rows, dtype=np.float64)
    k = n_s.size
    if k == 0:
        return 1.0
    slack = np.sqrt(np.log(1.0 / delta) * float(np.sum(1.0 / n_s)) / (2.0 * k * k))
    return float(min(1.0, plugin + slack))


def _plugin(cells: np.ndarray, s: np.ndarray, k: int) -> tuple[int, float, np.ndarray]:
    """(max_s n(c, s) summed over cells, the plug-in balanced accuracy, rows per class),
    from the occupied (cell, class) pairs only: no cells x classes table."""
    pair, count = np.unique(cells * k + s, return_counts=True)
    cell, cls = pair // k, pair % k
    class_rows = np.bincount(s, minlength=k)
    n_cells = int(cells.max()) + 1
    best = np.zeros(n_cells, dtype=np.int64)
    np.maximum.at(best, cell, count)
    best_rate = np.zeros(n_cells, dtype=np.float64)
    np.maximum.at(best_rate, cell, count / class_rows[cls])
    return int(best.sum()), float(best_rate.sum() / k), class_rows


def certify_cells(cells, s, *, confidence: float = 0.95,
                  min_rows_per_cell: int = MIN_ROWS_PER_CELL) -> Certificate:  # fmt: skip
    """The certificate from cell codes (any hashable per row) and S labels (any values)."""
    cells, s = np.asarray(cells).ravel(), np.asarray(s).ravel()
    if cells.size != s.size:
        raise ValueError(f"{cells.size} cell codes for {s.size} labels: one per row")
    delta = round(1.0 - float(confidence), 12)
    if not 0.0 < delta < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    n = int(s.size)
    if n == 0:
        return Certificate(0, 0, 0, delta, reason="no audited rows")
    cells = np.unique(cells, return_inverse=True)[1].ravel().astype(np.int64)
    s = np.unique(s, return_inverse=True)[1].ravel().astype(np.int64)
    n_cells, k = int(cells.max()) + 1, int(s.max()) + 1
    per_cell = np.bincount(cells)
    spread = {"min": int(per_cell.min()), "median": float(np.median(per_cell)),
              "max": int(per_cell.max())}  # fmt: skip
    if is_continuous(n_cells, n, min_rows_per_cell):
        why = (f"continuous release: {n_cells} distinct vectors for {n} rows (a certificate "
               f"needs at most one distinct vector per {min_rows_per_cell} rows)")  # fmt: skip
        return Certificate(n, n_cells, k, delta, rows_per_cell=spread, reason=why)
    hits, plugin_bal, class_rows = _plugin(cells, s, k)
    return Certificate(
        rows=n, cells=n_cells, classes=k, delta=delta,
        accuracy=accuracy_bound(hits, n, delta),
        balanced=balanced_bound(plugin_bal, class_rows, delta),
        plugin_accuracy=hits / n, plugin_balanced=plugin_bal, rows_per_cell=spread,
        class_rows=tuple(int(v) for v in class_rows),
    )  # fmt: skip


def certify(x: np.ndarray, s, *, confidence: float = 0.95,
            min_rows_per_cell: int = MIN_ROWS_PER_CELL) -> Certificate:  # fmt: skip
    """The certificate of released vectors ``x`` [rows, dim] for S labels ``s`` (one per row):
    each distinct vector is a cell (:func:`cells_of`)."""
    return certify_cells(cells_of(x), s, confidence=confidence,
                         min_rows_per_cell=min_rows_per_cell)  # fmt: skip


# --- planning: the cells a release of n rows can certify, the rows C cells need -------------


def expected_max_normal(k: int) -> float:
    """E[max of k independent standard normals] (0 for k = 1; 0.564 for k = 2)."""
    if k <= 1:
        return 0.0
    z = np.linspace(-8.0, 8.0, 4001)
    density = k * norm.pdf(z) * norm.cdf(z) ** (k - 1)
    return float(np.trapz(z * density, z))


def expected_excess(rows: int, cells: int, shares, *, confidence: float = 0.95) -> float:
    """About how far the balanced bound of an ideal cell release - ``cells`` equally likely
    cells, S independent of the cell, classes in proportions ``shares`` - lies above chance
    (1/k) on ``rows`` audited rows: the plug-in's optimism plus the Hoeffding term.

    Each class's share of a cell, X(c, s) = n(c, s) / n_s, is about Normal(1/C, (1/C)(1 - 1/C)
    / n_s); the plug-in takes (1/k) sum_c max_s X(c, s), whose expectation exceeds 1/k by
    (e_k / k) sqrt(C - 1) mean_s(1 / sqrt(n_s)), e_k = E[max of k standard normals]. On top of
    chance the release's own floor (what R reveals) adds to both sides alike, so this is the
    certificate's cost of resolution alone (bench/certificate.py checks it by simulation)."""
    shares = np.asarray(shares, dtype=np.float64)
    shares = shares[shares > 0] / shares[shares > 0].sum()
    k = shares.size
    if k < 2 or rows <= 0:
        return 0.0 if k < 2 else float("inf")
    n_s = np.maximum(shares * rows, 1.0)
    optimism = expected_max_normal(k) / k * np.sqrt(max(cells, 1) - 1) * float(np.mean(n_s**-0.5))
    delta = 1.0 - float(confidence)
    slack = np.sqrt(np.log(1.0 / delta) * float(np.sum(1.0 / n_s)) / (2.0 * k * k))
    return float(optimism + slack)


def cells_allowed(rows: int, shares, margin: float, *, confidence: float = 0.95) -> int:
    """The most cells an ideal release of ``rows`` audited rows can have with its expected
    certificate within ``margin`` of chance (:func:`expected_excess`); 0 when even one cell
    cannot (too few rows for the Hoeffding term alone)."""
    if expected_excess(rows, 1, shares, confidence=confidence) > margin:
        return 0
    lo, hi = 1, 2
    while expected_excess(rows, hi, shares, confidence=confidence) <= margin and hi < 1 << 40:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if expected_excess(rows, mid, shares, confidence=confidence) <= margin:
            lo = mid
        else:
            hi = mid
    return lo


def rows_needed(cells: int, shares, margin: float, *, confidence: float = 0.95) -> int:
    """The fewest audited rows with which an ideal release of ``cells`` cells expects its
    certificate within ``margin`` of chance (:func:`expected_excess`)."""
    if margin <= 0:
        raise ValueError(f"margin must be > 0, got {margin}")
    lo, hi = 1, 2
    while expected_excess(hi, cells, shares, confidence=confidence) > margin:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if expected_excess(mid, cells, shares, confidence=confidence) > margin:
            lo = mid
        else:
            hi = mid
    return hi


def plan(cert: Certificate, margin: float) -> dict | None:
    """What a certificate within ``margin`` of chance would take, for a certified release:
    the rows its ``cells`` need and the most cells its ``rows`` allow (ideal cells, S
    independent of the cell: a floor from R adds to both sides); None without classes."""
    if not cert.class_rows or cert.cells <= 0 or margin <= 0:
        return None
    shares = np.asarray(cert.class_rows, dtype=np.float64)
    return {"margin": margin, "rows_needed": rows_needed(cert.cells, shares, margin),
            "cells_allowed": cells_allowed(cert.rows, shares, margin)}  # fmt: skip
