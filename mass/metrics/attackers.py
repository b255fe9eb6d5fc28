"""The attackers: scikit-learn families retrained on a release (cross-validated
predictions, learning curves) and the frozen branch models trained on the original data."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from sklearn.base import ClassifierMixin
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.neighbors import KNeighborsClassifier
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import Normalizer, StandardScaler
from threadpoolctl import threadpool_limits

from mass.metrics.scores import ATTACKER_FAMILIES, table_predict
from mass.metrics.strata import cv_folds, early_stopping_ok
from mass.rows import seeded_rows

# the lookup attackers on released values (:func:`lookup_predictions`): judge names
LOOKUP = "lookup"
LOOKUP_BALANCED = "lookup_balanced"


def _attacker(family: str, seed: int, n_train: int, stop: bool = False) -> ClassifierMixin:
    # ``stop``: early stopping on a stratified 10 % hold-out, only where the rare-class rule
    # allows it (mass.metrics.strata.early_stopping_ok): sklearn raises on a class of one row.
    if family == "logreg":  # lbfgs fits the multinomial model for > 2 classes
        return make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=500))
    if family == "mlp":
        mlp = MLPClassifier(
            (256, 128), early_stopping=stop, max_iter=100, n_iter_no_change=5, random_state=seed
        )
        return make_pipeline(StandardScaler(), mlp)
    if family == "gboost":  # small trees, early-stopped: the audit runs on 2 shared cores
        return HistGradientBoostingClassifier(
            max_iter=40, max_leaf_nodes=8, max_bins=16, learning_rate=0.2,
            early_stopping=stop, validation_fraction=0.1, n_iter_no_change=5, random_state=seed,
        )  # fmt: skip
    if family == "knn":  # euclidean on unit vectors ranks neighbours as cosine does
        return make_pipeline(Normalizer(), KNeighborsClassifier(min(15, max(1, n_train))))
    raise ValueError(f"unknown attacker family {family!r}; choose from {ATTACKER_FAMILIES}")


def _subsample(x: np.ndarray, y: np.ndarray, max_rows: int | None, seed: int):
    keep = seeded_rows(len(y), max_rows, seed)
    return (x, y) if keep is None else (x[keep], y[keep])


def _fit_predict(family, seed, x_tr, y_tr, x_te) -> np.ndarray:
    if np.unique(y_tr).size < 2:  # one class left: the only sensible guess is that class
        return np.full(len(x_te), y_tr[0], dtype=y_tr.dtype)
    # One OpenMP/BLAS thread: on a shared, loaded box oversubscribed OpenMP spin-waits made
    # gradient boosting ~30x slower; these fits are small enough that one thread is fast.
    with threadpool_limits(limits=1):
        model = _attacker(family, seed, len(y_tr), early_stopping_ok(y_tr))
        return model.fit(x_tr, y_tr).predict(x_te)


def _fit_score(family, seed, x_tr, y_tr, x_te, y_te) -> int:
    return int((_fit_predict(family, seed, x_tr, y_tr, x_te) == y_te).sum())


def grouped_folds(
    y: np.ndarray, groups, folds: int, seed: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The (train, test) splits of :func:`cv_folds` run within each group, in row indices."""
    groups = np.asarray(groups)
    out = []
    for g in np.unique(groups):
        idx = np.flatnonzero(groups == g)
        out += [(idx[tr], idx[te]) for tr, te in cv_folds(y[idx], folds, seed)]
    return out


def _splits(y: np.ndarray, folds: int, seed: int, groups) -> list[tuple[np.ndarray, np.ndarray]]:
    return (
        list(cv_folds(y, folds, seed)) if groups is None else grouped_folds(y, groups, folds, seed)
    )


def _parts(tr: np.ndarray, fractions: tuple[float, ...], seed: int):
    """(fraction, the training rows it trains on): the first f of a seeded permutation of
    ``tr`` (nested: 25 % within 50 % within 100 %)."""
    order = np.random.default_rng(seed).permutation(tr)
    for f in fractions:
        yield f, tr if f >= 1.0 else order[: max(2, int(round(f * len(tr))))]


def attack_predictions(
    x,
    y,
    *,
    families: tuple[str, ...] | list[str] = ATTACKER_FAMILIES,
    folds: int = 10,
    seed: int = 0,
    fractions: tuple[float, ...] = (1.0,),
    stats=None,
    groups=None,
) -> dict[str, dict[float, np.ndarray]]:
    """Out-of-fold predictions of each family retrained on ``(x, y)``: family -> fraction ->
    one prediction per row.

    Stratified k-fold: each row is predicted once, by an attacker trained on the other
    (k-1)/k of the rows (90 % with 10 folds). A fraction f < 1 trains on the first f of a
    seeded permutation of that training part (nested: 25 % within 50 % within 100 %) and is
    scored on the same held-out fold, which gives the learning curve.

    ``stats`` (a :class:`mass.audit.columns.Statistics` of the same rows, or None): per-value
    label statistics of released columns, appended to ``x`` per split from the training
    rows' labels only (:meth:`~mass.audit.columns.Statistics.split`).

    ``groups`` (one code per row, or None): cross-validate within each group only, so every
    row is predicted by an attacker trained on rows of its own group - calibration's
    out-of-fold release, where each group is the output of another fitted model.
    """
    for fam in families:
        _attacker(fam, seed, 1)  # fail fast on a typo before any fitting
    x = np.asarray(x, dtype=np.float32)
    y = np.asarray(y)
    out = {fam: {f: np.empty_like(y) for f in fractions} for fam in families}
    use_stats = stats is not None and not stats.empty
    for i, (tr, te) in enumerate(_splits(y, folds, seed, groups)):
        for f, part in _parts(tr, fractions, seed + 1 + i):
            x_tr, x_te = x[part], x[te]
            if use_stats:
                s_tr, s_te = stats.split(y, part, te, folds=folds, seed=seed + i)
                x_tr, x_te = np.hstack([x_tr, s_tr]), np.hstack([x_te, s_te])
            for fam in families:
                out[fam][f][te] = _fit_predict(fam, seed, x_tr, y[part], x_te)
    return out


def lookup_predictions(
    cells: np.ndarray,
    y: np.ndarray,
    *,
    folds: int = 10,
    seed: int = 0,
    fractions: tuple[float, ...] = (1.0,),
    groups=None,
) -> dict[str, dict[float, np.ndarray]]:
    """Out-of-fold predictions of the lookup attackers on released values: per split, a table
    from each released value's code (``cells``, one per row: the exact released vector,
    :func:`mass.metrics.certificate.cells_of`) to the label, learned on the training rows
    and applied to the held-out ones, on the same splits and fractions as
    :func:`attack_predictions` (the same ``seed``, ``folds`` and ``groups`` give the same
    rows). Two tables: ``LOOKUP`` (the majority label per value, the accuracy-optimal rule)
    and ``LOOKUP_BALANCED`` (the label with the highest share of its own class's rows, the
    balanced-optimal rule). A value the training rows never saw gets their majority label.
    Returns judge -> fraction -> one prediction per row (labels as in ``y``).
    """
    y = np.asarray(y)
    classes, y_idx = np.unique(y, return_inverse=True)
    cells = np.asarray(cells, dtype=np.int64)
    n_cells = int(cells.max()) + 1 if cells.size else 0
    rules = {LOOKUP: False, LOOKUP_BALANCED: True}
    out = {j: {f: np.empty_like(y) for f in fractions} for j in rules}
    for i, (tr, te) in enumerate(_splits(y, folds, seed, groups)):
        for f, part in _parts(tr, fractions, seed + 1 + i):
            for judge, balanced in rules.items():
                idx = table_predict(cells[part], y_idx[part], cells[te], n_cells, classes.size,
                                    balanced=balanced)  # fmt: skip
                out[judge][f][te] = classes[idx]
    return out


def frozen_reader(
    x, x_prime, y, *, family: str = "logreg", folds: int = 10, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """What a model trained on the ORIGINAL rows reads in the release, out of fold.

    Stratified k-fold: per split, ``family`` is fitted on the original ``x`` of the training
    rows and applied unchanged to the held-out rows of ``x`` and of the release ``x_prime``
    (same rows, same order). Returns (predictions on x, predictions on x'), one per row. A
    release that keeps an attribute only up to a relabelling (a binary label flipped, rows
    moved into another class's cells) reads well to attackers retrained on it and badly here.
    """
    _attacker(family, seed, 1)  # fail fast on a typo before any fitting
    x = np.asarray(x, dtype=np.float32)
    xp = np.asarray(x_prime, dtype=np.float32)
    y = np.asarray(y)
    if x.shape != xp.shape:
        raise ValueError(f"frozen reader: original {x.shape} and release {xp.shape} differ")
    on_x, on_xp = np.empty_like(y), np.empty_like(y)
    for tr, te in cv_folds(y, folds, seed):
        both = _fit_predict(family, seed, x[tr], y[tr], np.vstack([x[te], xp[te]]))
        on_x[te], on_xp[te] = both[: te.size], both[te.size :]
    return on_x, on_xp


def retrained_attackers(
    x_train,
    y_train,
    x_test=None,
    y_test=None,
    *,
    families: tuple[str, ...] | list[str] = ATTACKER_FAMILIES,
    folds: int = 5,
    seed: int = 0,
    max_rows: int | None = None,
) -> dict[str, float]:
    """Accuracy of each attacker family retrained on ``(x_train, y_train)``.

    Holdout accuracy on ``(x_test, y_test)`` when given, else pooled stratified k-fold
    cross-validated accuracy. ``max_rows`` subsamples each split (seeded) to bound runtime.
    """
    for fam in families:
        _attacker(fam, seed, 1)  # fail fast on a typo before any fitting
    x = np.asarray(x_train, dtype=np.float32)
    y = np.asarray(y_train)
    x, y = _subsample(x, y, max_rows, seed)
    out: dict[str, float] = {}
    if x_test is not None and y_test is not None:
        xt, yt = _subsample(
            np.asarray(x_test, dtype=np.float32), np.asarray(y_test), max_rows, seed
        )
        for fam in families:
            out[fam] = _fit_score(fam, seed, x, y, xt, yt) / max(len(yt), 1)
        return out
    splits = list(cv_folds(y, folds, seed))
    for fam in families:
        correct = sum(_fit_score(fam, seed, x[tr], y[tr], x[te], y[te]) for tr, te in splits)
        out[fam] = correct / max(len(y), 1)
    return out


@torch.no_grad()
def frozen_predict(model, x, *, batch_size: int = 8192) -> np.ndarray:
    """``argmax`` of a frozen model's logits on ``x``.

    ``model`` is an ``nn.Module`` returning logits, or an object with ``.logits(x)``; a tuple
    output (e.g. ``(z, logits)``) is read as its last element.
    """
    fn: Callable = model.logits if hasattr(model, "logits") else model
    was_training = getattr(model, "training", False)
    if hasattr(model, "eval"):
        model.eval()
    try:
        xt = torch.as_tensor(np.asarray(x, dtype=np.float32))
        parts = []
        for i in range(0, len(xt), batch_size):
            out = fn(xt[i : i + batch_size])
            logits = out[-1] if isinstance(out, tuple | list) else out
            parts.append(logits.argmax(-1).cpu().numpy())
    finally:
        if was_training:
            model.train()
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def frozen_accuracy(model, x, y, *, batch_size: int = 8192) -> float:
    """Accuracy of :func:`frozen_predict` on ``(x, y)``."""
    y = np.asarray(y)
    pred = frozen_predict(model, x, batch_size=batch_size)
    return int((pred == y).sum()) / max(len(y), 1)
