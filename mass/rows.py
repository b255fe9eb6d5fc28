"""Row-wise primitives on numpy embeddings and labels (numpy only: no torch, no pyarrow).

:func:`normalize_rows` is n() of eq. 1 on numpy rows (its torch twin is
:func:`mass.modifiers.l2_normalize`); :func:`joint_codes` names each row's combination of labels;
:func:`entropy_bits` is the plug-in entropy of codes.
"""

from __future__ import annotations

import numpy as np


def normalize_rows(x: np.ndarray, dtype: type = np.float32) -> np.ndarray:
    """n() of eq. 1 on numpy rows: x / ||x|| per row, exactly 0 where ||x|| == 0 or is NaN
    (zero rows stay zero), as ``dtype``. What G, the branches and every judge see."""
    x = np.asarray(x)
    norm = np.linalg.norm(x, axis=1, keepdims=True)
    return np.where(norm > 0, x / np.where(norm > 0, norm, 1), 0).astype(dtype, copy=False)


def joint_codes(labels: dict[str, np.ndarray], attrs: list[str] | None = None) -> np.ndarray:
    """One int64 per row naming the combination of the ``attrs`` labels (default: all of
    ``labels``): the strata / cells of calibration, the leakage floor and conditional erasure.

    Codes are dense (0 .. cells - 1) in lexicographic order of the label values; any label
    dtype works (each column is ranked first). No attribute: every row is cell 0.
    """
    attrs = list(labels) if attrs is None else list(attrs)
    if not attrs:
        return np.zeros(len(next(iter(labels.values()))), dtype=np.int64)
    cols = [np.unique(np.asarray(labels[a]), return_inverse=True)[1].reshape(-1) for a in attrs]
    _, cell = np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)
    return cell.reshape(-1).astype(np.int64)


def entropy_bits(codes) -> float:
    """The plug-in entropy in bits of the values in ``codes`` (0 for none or one value)."""
    _, counts = np.unique(np.asarray(codes).ravel(), return_counts=True)
    if counts.size <= 1:
        return 0.0
    p = counts / counts.sum()
    return float(-(p * np.log2(p)).sum())


def seeded_rows(n: int, max_rows: int | None, seed: int) -> np.ndarray | None:
    """Sorted indices of a seeded uniform sample of ``max_rows`` of ``n`` rows, or None when
    every row is kept (``max_rows`` None or >= ``n``): the cap of the retrained attackers, the
    frozen judges and the validation audit - the same seed picks the same rows."""
    if max_rows is None or n <= max_rows:
        return None
    return np.sort(np.random.default_rng(seed).choice(n, size=max_rows, replace=False))
