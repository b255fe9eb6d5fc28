"""Rare classes: the one rule every split, stratification, fold and early-stopping hold-out
of the product follows (docs/audit.md, "Rare classes").

Real labels have rare classes (a small group, a rare status; a combination of suppressed and
preserved labels held by one row). Stratified splitters refuse a class with fewer rows than
folds, and a rare class is exactly where leakage is easiest, so it must be judged, not dropped:

1. **Stratification only.** A class with fewer rows than ``n_folds`` is *rare*. For
   stratifying, all rare classes share one pooled stratum (:func:`stratification_codes`);
   should that pool itself hold fewer than ``n_folds`` rows it joins the largest stratum.
   Labels are never merged: attackers train on and are scored against the true classes.
2. **Folds.** :func:`cv_folds` is stratified k-fold on those codes; only when the data hold
   fewer rows than folds does it fall back to plain shuffled k-fold with one fold per row.
3. **Early stopping.** An attacker's internal stratified 10 % hold-out is used only when every
   class of its training part has >= 2 rows and the hold-out holds >= 2 rows per class
   (:func:`early_stopping_ok`); otherwise it trains its fixed number of iterations.
4. **How a rare class is judged.** Each of its rows is predicted by attackers trained on the
   other folds (which may hold none of that class: then no attacker can name it, as in the
   release), and it enters balanced accuracy as its own class with the Wilson-adjusted
   variance of its few rows, so its upper bound widens instead of narrowing
   (:func:`mass.metrics.balanced_upper`). The audit and calibration reports list the rare
   classes of each attribute (:func:`rare_classes`).

Anything still impossible (fewer than two rows, one class) is a named
:class:`mass.errors.RareClassError` / :class:`mass.errors.LabelError`, never a traceback.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from sklearn.model_selection import KFold, StratifiedKFold

from mass.errors import RareClassError

RULE = (
    "classes with fewer rows than the fold count are pooled into one stratum for "
    "stratified splits only (labels unchanged); attackers skip early stopping when a class "
    "of their training part has < 2 rows; each rare row is predicted out of fold and counts "
    "as its own class in balanced accuracy (docs/audit.md, 'Rare classes')"
)


def rare_classes(y, n_folds: int) -> dict:
    """Class -> rows, for every class of ``y`` with fewer than ``n_folds`` rows (sorted by
    class value)."""
    values, counts = np.unique(np.asarray(y), return_counts=True)
    return {v.item() if hasattr(v, "item") else v: int(c)
            for v, c in zip(values, counts, strict=True) if c < n_folds}  # fmt: skip


def stratification_codes(y, n_folds: int) -> np.ndarray:
    """int64 stratum per row (rule 1 of the module doc): each class with >= ``n_folds`` rows
    is its own stratum, the rare ones share one pooled stratum, and a pool still smaller than
    ``n_folds`` joins the largest stratum."""
    _, idx, counts = np.unique(np.asarray(y), return_inverse=True, return_counts=True)
    idx = idx.reshape(-1).astype(np.int64)
    rare = counts < n_folds
    if not rare.any():
        return idx
    pool = int(counts.size)  # a code of its own
    codes = np.where(rare[idx], pool, idx)
    if int(counts[rare].sum()) < n_folds and not rare.all():
        codes[codes == pool] = int(np.argmax(np.where(rare, -1, counts)))
    return codes


def cv_folds(y, n_folds: int, seed: int, *, attr: str = "labels"
             ) -> Iterator[tuple[np.ndarray, np.ndarray]]:  # fmt: skip
    """(train, test) row indices of k-fold cross-validation under the rare-class rule: every
    row is tested once. Stratified on :func:`stratification_codes`; with fewer rows than
    ``n_folds``, one fold per row. Fewer than two rows: :class:`RareClassError`."""
    y = np.asarray(y)
    if y.size < 2:
        raise RareClassError(
            f"attribute '{attr}': {y.size} row(s) cannot be cross-validated (an attacker "
            "needs a row to train on and one to be judged on): audit more rows"
        )
    if y.size < n_folds:
        yield from KFold(int(y.size), shuffle=True, random_state=seed).split(y)
        return
    codes = stratification_codes(y, n_folds)
    yield from StratifiedKFold(n_folds, shuffle=True, random_state=seed).split(codes, codes)


def early_stopping_ok(y_train, fraction: float = 0.1) -> bool:
    """Rule 3: may an attacker hold out a stratified ``fraction`` of ``y_train`` for early
    stopping? Needs >= 2 rows in every class and >= 2 hold-out rows per class."""
    _, counts = np.unique(np.asarray(y_train), return_counts=True)
    if counts.size < 2:
        return False
    return bool(counts.min() >= 2 and len(y_train) * fraction >= 2 * counts.size)


def _name(value, names) -> str:
    if names is not None and 0 <= int(value) < len(names):
        return str(names[int(value)])
    return str(value)


def rare_named(y, n_folds: int, names=None) -> dict[str, int]:
    """:func:`rare_classes` keyed by class *name* (``names[code]`` for integer-coded labels,
    else the value as text): what reports show."""
    return {_name(v, names) if names is not None else str(v): c
            for v, c in rare_classes(y, n_folds).items()}  # fmt: skip


def rare_report(labels: dict, n_folds: int, names: dict | None = None,
                joint: list[str] | None = None) -> dict:  # fmt: skip
    """The rare classes of each attribute of ``labels`` (attribute -> class name -> rows) and,
    with ``joint`` (e.g. suppressed + preserved), the rare combinations of those labels
    ("s=a, r=b" -> rows), with the rule that judged them: calibration.json and audit.json."""
    from mass.rows import joint_codes

    names = names or {}
    out: dict = {"folds": int(n_folds), "rule": RULE,
                 "classes": {a: rare_named(y, n_folds, names.get(a))
                             for a, y in labels.items()}}  # fmt: skip
    if joint and len(joint) > 1 and len(next(iter(labels.values()))):
        cell = joint_codes(labels, joint)
        cells = {}
        for code, count in rare_classes(cell, n_folds).items():
            row = int(np.flatnonzero(cell == code)[0])
            key = ", ".join(f"{a}={_name(labels[a][row], names.get(a))}" for a in joint)
            cells[key] = count
        out["joint"] = cells
    return out
