"""Privacy/utility metrics of the audit (docs/contracts.md, 'Audit library signatures').

Privacy is judged by attackers: the frozen branch models trained on the original data and
scikit-learn classifiers *retrained* on the modified data (the adaptive attacker the paper's
threat model allows). An attacker cannot do better than chance on a perfectly suppressed
attribute, but "chance" is not the majority rate when a preserved attribute correlates with
it: :func:`leakage_floor` is the accuracy reachable from the preserved labels alone, which
any modifier that keeps those labels must leak.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from sklearn.base import ClassifierMixin
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import KFold, StratifiedKFold
from sklearn.neighbors import KNeighborsClassifier
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import Normalizer, StandardScaler
from threadpoolctl import threadpool_limits

ATTACKER_FAMILIES = ("logreg", "mlp", "gboost", "knn")
FROZEN = "frozen"  # judge name of the frozen branch model in reports and GX frames


def majority_rate(y) -> float:
    """Accuracy of always predicting the most frequent class (0.0 for no rows)."""
    y = np.asarray(y)
    if y.size == 0:
        return 0.0
    _, counts = np.unique(y, return_counts=True)
    return float(counts.max() / y.size)


def _folds(y: np.ndarray, folds: int, seed: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Stratified folds when every class has >= 2 rows, else plain shuffled folds."""
    _, counts = np.unique(y, return_counts=True)
    k = int(min(folds, counts.min())) if counts.size else 0
    if k >= 2:
        yield from StratifiedKFold(k, shuffle=True, random_state=seed).split(y, y)
    else:
        k = max(2, min(folds, y.size))
        yield from KFold(k, shuffle=True, random_state=seed).split(y)


def leakage_floor(
    y_s, preserved: Mapping[str, np.ndarray], *, folds: int = 5, seed: int = 0
) -> float:
    """Cross-validated accuracy of predicting ``y_s`` from the preserved labels alone.

    The model is a lookup table (majority ``s`` per combination of preserved labels,
    the Bayes-optimal classifier on discrete inputs); unseen combinations fall back to the
    training fold's majority. With no preserved attribute this is :func:`majority_rate`.
    """
    y = np.asarray(y_s)
    if not preserved or y.size == 0:
        return majority_rate(y)
    _, y_idx = np.unique(y, return_inverse=True)
    cols = [np.unique(np.asarray(v), return_inverse=True)[1] for v in preserved.values()]
    _, cell = np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)
    cell = cell.reshape(-1)
    n_cells, n_classes = int(cell.max()) + 1, int(y_idx.max()) + 1
    correct = 0
    for train, test in _folds(y_idx, folds, seed):
        counts = np.zeros((n_cells, n_classes), dtype=np.int64)
        np.add.at(counts, (cell[train], y_idx[train]), 1)
        fallback = np.bincount(y_idx[train], minlength=n_classes).argmax()
        pred = np.where(counts.sum(1) > 0, counts.argmax(1), fallback)[cell[test]]
        correct += int((pred == y_idx[test]).sum())
    return correct / y.size


def _attacker(family: str, seed: int, n_train: int) -> ClassifierMixin:
    if family == "logreg":  # lbfgs fits the multinomial model for > 2 classes
        return make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=500))
    if family == "mlp":
        mlp = MLPClassifier(
            (256, 128), early_stopping=True, max_iter=100, n_iter_no_change=5, random_state=seed
        )
        return make_pipeline(StandardScaler(), mlp)
    if family == "gboost":  # small trees, early-stopped: the audit runs on 2 shared cores
        return HistGradientBoostingClassifier(
            max_iter=40, max_leaf_nodes=8, max_bins=16, learning_rate=0.2,
            early_stopping=True, validation_fraction=0.1, n_iter_no_change=5, random_state=seed,
        )  # fmt: skip
    if family == "knn":  # euclidean on unit vectors ranks neighbours as cosine does
        return make_pipeline(Normalizer(), KNeighborsClassifier(min(15, max(1, n_train))))
    raise ValueError(f"unknown attacker family {family!r}; choose from {ATTACKER_FAMILIES}")


def _subsample(x: np.ndarray, y: np.ndarray, max_rows: int | None, seed: int):
    if max_rows is None or len(y) <= max_rows:
        return x, y
    keep = np.sort(np.random.default_rng(seed).choice(len(y), size=max_rows, replace=False))
    return x[keep], y[keep]


def _fit_score(family, seed, x_tr, y_tr, x_te, y_te) -> int:
    if np.unique(y_tr).size < 2:  # one class left: the only sensible guess is that class
        return int((y_te == y_tr[0]).sum())
    # One OpenMP/BLAS thread: on a shared, loaded box oversubscribed OpenMP spin-waits made
    # gradient boosting ~30x slower; these fits are small enough that one thread is fast.
    with threadpool_limits(limits=1):
        model = _attacker(family, seed, len(y_tr)).fit(x_tr, y_tr)
        return int((model.predict(x_te) == y_te).sum())


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
    splits = list(_folds(y, folds, seed))
    for fam in families:
        correct = sum(_fit_score(fam, seed, x[tr], y[tr], x[te], y[te]) for tr, te in splits)
        out[fam] = correct / max(len(y), 1)
    return out


@torch.no_grad()
def frozen_accuracy(model, x, y, *, batch_size: int = 8192) -> float:
    """Accuracy of ``argmax`` of a frozen model's logits on ``x``.

    ``model`` is an ``nn.Module`` returning logits, or an object with ``.logits(x)``; a tuple
    output (e.g. ``(z, logits)``) is read as its last element.
    """
    y = np.asarray(y)
    fn: Callable = model.logits if hasattr(model, "logits") else model
    was_training = getattr(model, "training", False)
    if hasattr(model, "eval"):
        model.eval()
    try:
        correct = 0
        xt = torch.as_tensor(np.asarray(x, dtype=np.float32))
        for i in range(0, len(y), batch_size):
            out = fn(xt[i : i + batch_size])
            logits = out[-1] if isinstance(out, tuple | list) else out
            correct += int((logits.argmax(-1).cpu().numpy() == y[i : i + batch_size]).sum())
    finally:
        if was_training:
            model.train()
    return correct / max(len(y), 1)


def utility_retention(acc_modified: float, acc_original: float) -> float:
    """Fraction of the original accuracy kept after modification (may exceed 1)."""
    if acc_original <= 0:
        raise ValueError(f"acc_original must be > 0 to measure retention, got {acc_original}")
    return float(acc_modified) / float(acc_original)


def aum(efficacy: float, fidelity: float) -> float:
    """Attribute Unlearning Measure (Guo et al., 'Efficient Attribute Unlearning', eq. 5).

    AUM = 2 * E * F / (E + F): the harmonic mean of the efficacy score and the fidelity.
    ``efficacy`` is the attacker's accuracy on the unlearnt attribute (lower is better) and
    enters as E = 1 - efficacy: that reading reproduces the paper's Table 1 (efficacy
    0.1352, fidelity 0.7950 -> AUM 0.8284). ``fidelity`` is the main-task accuracy.
    """
    e, f = 1.0 - float(efficacy), float(fidelity)
    return 0.0 if e + f <= 0 else 2.0 * e * f / (e + f)


def suppressed_ok(accuracy: float, baseline: float, margin: float) -> bool:
    """The suppression rule: a judge may not beat max(majority, floor) by more than margin."""
    return accuracy <= baseline + margin + 1e-12


def preserved_ok(accuracy: float, original: float, min_fraction: float) -> bool:
    """The preservation rule: keep at least ``min_fraction`` of the original accuracy."""
    return original <= 0 or utility_retention(accuracy, original) >= min_fraction - 1e-12


@dataclass(frozen=True)
class AttributeReport:
    """One attribute's audit row; ``accuracies`` holds every judge's accuracy on x'."""

    name: str
    role: str  # "suppressed" | "preserved"
    n: int
    majority: float
    floor: float
    original: float  # best retrained attacker on the original x
    original_by_family: dict[str, float]
    frozen_x: float | None
    frozen_xprime: float | None
    attackers: dict[str, float]
    margins: dict[str, float] = field(default_factory=dict)  # suppressed: judge -> margin
    min_fraction: float | None = None  # preserved

    @property
    def baseline(self) -> float:
        return max(self.majority, self.floor)

    @property
    def accuracies(self) -> dict[str, float]:
        judges = {} if self.frozen_xprime is None else {FROZEN: self.frozen_xprime}
        return {**judges, **self.attackers}

    @property
    def worst(self) -> float:
        """Suppressed: the strongest judge on x'. Preserved: the best retrained attacker."""
        accs = self.accuracies if self.role == "suppressed" else self.attackers
        return max(accs.values()) if accs else float("nan")

    @property
    def retention(self) -> float | None:
        return None if self.original <= 0 else utility_retention(self.worst, self.original)

    @property
    def passed(self) -> bool:
        if self.role == "suppressed":
            return all(
                suppressed_ok(acc, self.baseline, self.margins[judge])
                for judge, acc in self.accuracies.items()
            )
        return preserved_ok(self.worst, self.original, self.min_fraction or 0.0)


def attribute_report(
    name: str,
    y,
    x,
    x_prime,
    *,
    role: str,
    preserved: Mapping[str, np.ndarray] | None = None,
    frozen=None,
    margins: Mapping[str, float] | float = 0.05,
    min_fraction: float = 0.9,
    families: tuple[str, ...] | list[str] = ATTACKER_FAMILIES,
    folds: int = 5,
    seed: int = 0,
    max_rows: int | None = None,
) -> AttributeReport:
    """Audit one attribute: baselines, frozen judge on x and x', attackers retrained on x'.

    ``preserved`` (labels of the preserved attributes, same rows) sets the leakage floor of
    a suppressed attribute; ``frozen`` is its branch model, if a run directory is known.
    ``margins`` is one margin or a mapping judge -> margin (``"frozen"`` and each family).
    """
    if role not in ("suppressed", "preserved"):
        raise ValueError(f"role must be 'suppressed' or 'preserved', got {role!r}")
    y = np.asarray(y)
    kw: dict[str, Any] = dict(families=families, folds=folds, seed=seed, max_rows=max_rows)
    original = retrained_attackers(x, y, **kw)
    attackers = retrained_attackers(x_prime, y, **kw)
    judges = ((FROZEN,) if frozen is not None else ()) + tuple(families)
    if isinstance(margins, Mapping):
        margin_map = {j: float(margins[j]) for j in judges}
    else:
        margin_map = dict.fromkeys(judges, float(margins))
    return AttributeReport(
        name=name,
        role=role,
        n=int(y.size),
        majority=majority_rate(y),
        floor=leakage_floor(y, preserved or {}, folds=folds, seed=seed),
        original=max(original.values()),
        original_by_family=original,
        frozen_x=None if frozen is None else frozen_accuracy(frozen, x, y),
        frozen_xprime=None if frozen is None else frozen_accuracy(frozen, x_prime, y),
        attackers=attackers,
        margins=margin_map if role == "suppressed" else {},
        min_fraction=min_fraction if role == "preserved" else None,
    )
