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


def _folds(y: np.ndarray, folds: int, seed: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Stratified folds when every class has >= 2 rows, else plain shuffled folds."""
    _, counts = np.unique(y, return_counts=True)
    k = int(min(folds, counts.min())) if counts.size else 0
    if k >= 2:
        yield from StratifiedKFold(k, shuffle=True, random_state=seed).split(y, y)
    else:
        k = max(2, min(folds, y.size))
        yield from KFold(k, shuffle=True, random_state=seed).split(y)


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


def score(y, pred, z: float = 1.96) -> Score:
    y, pred = np.asarray(y), np.asarray(pred)
    correct = float((pred == y).sum())
    return Score(
        accuracy=correct / max(y.size, 1),
        balanced=balanced_accuracy(y, pred),
        ci_high=wilson_upper(correct, int(y.size), z),
        balanced_ci_high=balanced_upper(y, pred, z),
    )


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
        counts = np.zeros((p_vals.size, classes.size), dtype=np.float64)
        np.add.at(counts, (p_idx[learn], y_idx[learn]), 1.0)
        totals = np.bincount(y_idx[learn], minlength=classes.size).astype(np.float64)
        weights = counts / np.maximum(totals, 1.0) if balanced else counts
        fallback = int(totals.argmax())
        mapping = np.where(counts.sum(1) > 0, weights.argmax(1), fallback)
        out[test] = classes[mapping[p_idx[test]]]
    return out


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
    for train, test in _folds(y_idx, folds, seed):
        counts = np.zeros((n_cells, n_classes), dtype=np.int64)
        np.add.at(counts, (cell[train], y_idx[train]), 1)
        totals = np.bincount(y_idx[train], minlength=n_classes)
        weights = counts / np.maximum(totals, 1) if balanced else counts
        fallback = totals.argmax()
        pred[test] = np.where(counts.sum(1) > 0, weights.argmax(1), fallback)[cell[test]]
    if balanced:
        return balanced_accuracy(y_idx, pred)
    return float((pred == y_idx).sum() / y.size)


def _attacker(family: str, seed: int, n_train: int, n_classes: int = 2) -> ClassifierMixin:
    # Early stopping holds out a stratified 10 %: it needs a row of every class there (sklearn
    # raises otherwise), which small learning-curve parts of many-class attributes lack.
    stop = n_train * 0.1 >= 2 * n_classes
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
    if max_rows is None or len(y) <= max_rows:
        return x, y
    keep = np.sort(np.random.default_rng(seed).choice(len(y), size=max_rows, replace=False))
    return x[keep], y[keep]


def _fit_predict(family, seed, x_tr, y_tr, x_te) -> np.ndarray:
    if np.unique(y_tr).size < 2:  # one class left: the only sensible guess is that class
        return np.full(len(x_te), y_tr[0], dtype=y_tr.dtype)
    # One OpenMP/BLAS thread: on a shared, loaded box oversubscribed OpenMP spin-waits made
    # gradient boosting ~30x slower; these fits are small enough that one thread is fast.
    with threadpool_limits(limits=1):
        model = _attacker(family, seed, len(y_tr), np.unique(y_tr).size)
        return model.fit(x_tr, y_tr).predict(x_te)


def _fit_score(family, seed, x_tr, y_tr, x_te, y_te) -> int:
    return int((_fit_predict(family, seed, x_tr, y_tr, x_te) == y_te).sum())


def attack_predictions(
    x,
    y,
    *,
    families: tuple[str, ...] | list[str] = ATTACKER_FAMILIES,
    folds: int = 10,
    seed: int = 0,
    fractions: tuple[float, ...] = (1.0,),
) -> dict[str, dict[float, np.ndarray]]:
    """Out-of-fold predictions of each family retrained on ``(x, y)``: family -> fraction ->
    one prediction per row.

    Stratified k-fold: each row is predicted once, by an attacker trained on the other
    (k-1)/k of the rows (90 % with 10 folds). A fraction f < 1 trains on the first f of a
    seeded permutation of that training part (nested: 25 % within 50 % within 100 %) and is
    scored on the same held-out fold, which gives the learning curve.
    """
    for fam in families:
        _attacker(fam, seed, 1)  # fail fast on a typo before any fitting
    x = np.asarray(x, dtype=np.float32)
    y = np.asarray(y)
    splits = list(_folds(y, folds, seed))
    out: dict[str, dict[float, np.ndarray]] = {}
    for fam in families:
        preds = {f: np.empty_like(y) for f in fractions}
        for i, (tr, te) in enumerate(splits):
            order = np.random.default_rng(seed + 1 + i).permutation(tr)
            for f in fractions:
                part = tr if f >= 1.0 else order[: max(2, int(round(f * len(tr))))]
                preds[f][te] = _fit_predict(fam, seed, x[part], y[part], x[te])
        out[fam] = preds
    return out


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
    """The suppression rule: a judge may not beat its baseline by more than margin.

    The audit passes a judge's 95 % upper bound as ``accuracy`` (accuracy against
    max(majority, floor), balanced accuracy against max(1/k, balanced floor)).
    """
    return accuracy <= baseline + margin + 1e-12


def judge_ok(ci_high: float, baseline: float, balanced_ci_high: float | None,
             balanced_baseline: float, margin: float) -> bool:
    """One suppression judge on both scales (the rule of docs/audit.md, in one place): the
    upper bound of its accuracy within ``baseline`` + margin and, when measured, of its
    balanced accuracy within ``balanced_baseline`` + margin. A NaN bound fails."""
    ok = suppressed_ok(ci_high, baseline, margin)
    if balanced_ci_high is not None:
        ok = ok and suppressed_ok(balanced_ci_high, balanced_baseline, margin)
    return bool(ok)


def preserved_ok(accuracy: float, original: float, min_fraction: float) -> bool:
    """The preservation rule: keep at least ``min_fraction`` of the original accuracy."""
    return original <= 0 or utility_retention(accuracy, original) >= min_fraction - 1e-12


REMAP = "_remap"  # judge-name suffix: the judge's predictions re-mapped on held-out rows
KEYED = "_key"  # judge-name suffix: family retrained on the release with the noise removed
CURVE_FRACTIONS = (0.25, 0.5, 1.0)


def curve_climbing(curve: list[list[float]], n: int, tol: float) -> bool:
    """A learning curve is still climbing when its last step (50 % -> 100 % of the attack
    training set) gains more than ``tol`` and more than one standard error of the
    difference of two accuracies on ``n`` rows, sqrt(2 p (1 - p) / n)."""
    if len(curve) < 2 or n <= 0:
        return False
    (_, before), (_, last) = curve[-2], curve[-1]
    return last - before > max(tol, float(np.sqrt(2 * last * (1 - last) / n)))


@dataclass(frozen=True)
class AttributeReport:
    """One attribute's audit row; ``accuracies`` holds every judge's accuracy on x'.

    Judges: the frozen branch model ("frozen"), each retrained family, each of those
    re-mapped on held-out rows ("<judge>_remap", suppressed only) and, when the policy gates
    on it, each family retrained on the key-stripped release ("<family>_key").
    ``balanced``, ``ci_high`` and ``balanced_ci_high`` hold the same judges' balanced
    accuracy and 95 % upper bounds; a suppressed attribute is judged on the upper bounds.
    """

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
    extra_judges: dict[str, float] = field(default_factory=dict)  # remap (and key) judges
    chance: float = 0.0  # 1/k
    balanced_floor: float = 0.0
    balanced: dict[str, float] = field(default_factory=dict)
    ci_high: dict[str, float] = field(default_factory=dict)
    balanced_ci_high: dict[str, float] = field(default_factory=dict)
    learning_curve: dict[str, list[list[float]]] = field(default_factory=dict)
    climbing: tuple[str, ...] = ()  # families whose curve is still climbing
    key_compromised: dict[str, float] | None = None  # family -> accuracy, noise removed
    confidence: float = 0.95

    @property
    def baseline(self) -> float:
        return max(self.majority, self.floor)

    @property
    def balanced_baseline(self) -> float:
        return max(self.chance, self.balanced_floor)

    @property
    def curve_climbing(self) -> bool:
        return bool(self.climbing)

    @property
    def accuracies(self) -> dict[str, float]:
        judges = {} if self.frozen_xprime is None else {FROZEN: self.frozen_xprime}
        return {**judges, **self.attackers, **self.extra_judges}

    @property
    def worst(self) -> float:
        """Suppressed: the strongest judge on x'. Preserved: the best retrained attacker."""
        accs = self.accuracies if self.role == "suppressed" else self.attackers
        return max(accs.values()) if accs else float("nan")

    @property
    def retention(self) -> float | None:
        return None if self.original <= 0 else utility_retention(self.worst, self.original)

    def judge_ok(self, judge: str) -> bool:
        """Suppressed: the judge's upper bounds stay within both limits."""
        return judge_ok(self.ci_high.get(judge, self.accuracies[judge]), self.baseline,
                        self.balanced_ci_high.get(judge), self.balanced_baseline,
                        self.margins[judge])  # fmt: skip

    @property
    def passed(self) -> bool:
        if self.role == "suppressed":
            return all(self.judge_ok(judge) for judge in self.accuracies)
        return preserved_ok(self.worst, self.original, self.min_fraction or 0.0)


def _take(a, rows):
    return None if a is None else np.asarray(a)[rows]


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
    extra=None,
    confidence: float = 0.95,
    curve: bool = True,
    curve_tol: float = 0.02,
    key_x=None,
    gate_key: bool = False,
    original: Mapping[str, float] | None = None,
) -> AttributeReport:
    """Audit one attribute: baselines, frozen judge on x and x', attackers retrained on x'.

    ``preserved`` (labels of the preserved attributes, same rows) sets the leakage floors of
    a suppressed attribute; ``frozen`` is its branch model, if a run directory is known.
    ``margins`` is one margin or a mapping judge -> margin (``"frozen"`` and each family).
    ``extra`` (float [N, m]) are the other released columns, encoded: the retrained attackers
    see ``[x', extra]``. ``key_x`` are the features of the release with its noise removed
    (owner's key): families retrained on them give ``key_compromised``, judged when
    ``gate_key``. ``max_rows`` subsamples the rows once (seeded) for every judge.
    """
    if role not in ("suppressed", "preserved"):
        raise ValueError(f"role must be 'suppressed' or 'preserved', got {role!r}")
    y = np.asarray(y)
    rows = np.arange(y.size)
    if max_rows is not None and y.size > max_rows:
        rows = np.sort(np.random.default_rng(seed).choice(y.size, size=max_rows, replace=False))
    y, x, x_prime = y[rows], np.asarray(x)[rows], np.asarray(x_prime)[rows]
    extra, key_x = _take(extra, rows), _take(key_x, rows)
    preserved = {k: np.asarray(v)[rows] for k, v in (preserved or {}).items()}
    z = z_value(confidence)
    sup = role == "suppressed"
    kw: dict[str, Any] = dict(families=families, folds=folds, seed=seed)
    if original is None:
        original = {f: float((p[1.0] == y).mean())
                    for f, p in attack_predictions(x, y, **kw).items()}  # fmt: skip
    feats = x_prime if extra is None or extra.shape[1] == 0 else np.hstack([x_prime, extra])
    fractions = CURVE_FRACTIONS if sup and curve else (1.0,)
    preds = attack_predictions(feats, y, fractions=fractions, **kw)
    judged: dict[str, np.ndarray] = {}
    if frozen is not None:
        judged[FROZEN] = frozen_predict(frozen, x_prime)
    judged.update({f: p[1.0] for f, p in preds.items()})
    scores = {j: score(y, p, z) for j, p in judged.items()}
    if sup:
        for j, p in list(judged.items()):
            acc = score(y, remap_predictions(y, p, seed=seed), z)
            bal = score(y, remap_predictions(y, p, seed=seed, balanced=True), z)
            scores[j + REMAP] = Score(acc.accuracy, bal.balanced, acc.ci_high,
                                      bal.balanced_ci_high)  # fmt: skip
    key_compromised = None
    if key_x is not None:
        kp = attack_predictions(key_x, y, **kw)
        key_compromised = {f: float((p[1.0] == y).mean()) for f, p in kp.items()}
        if sup and gate_key:
            scores.update({f + KEYED: score(y, p[1.0], z) for f, p in kp.items()})
    learning_curve = {}
    if len(fractions) > 1:
        learning_curve = {f: [[fr, float((p[fr] == y).mean())] for fr in fractions]
                          for f, p in preds.items()}  # fmt: skip
    climbing = tuple(f for f, c in learning_curve.items() if curve_climbing(c, y.size, curve_tol))
    judges = list(scores)
    if isinstance(margins, Mapping):
        base = {j: float(margins[j]) for j in ((FROZEN,) if frozen is not None else ())
                + tuple(families)}  # fmt: skip
    else:
        base = dict.fromkeys((FROZEN, *families), float(margins))
    margin_map = {j: base[j.removesuffix(REMAP).removesuffix(KEYED)] for j in judges}
    if not sup:  # preserved: only the direct judges are reported
        scores = {j: s for j, s in scores.items() if j == FROZEN or j in families}
    return AttributeReport(
        name=name,
        role=role,
        n=int(y.size),
        majority=majority_rate(y),
        floor=leakage_floor(y, preserved, folds=folds, seed=seed),
        original=max(original.values()),
        original_by_family=dict(original),
        frozen_x=None if frozen is None else frozen_accuracy(frozen, x, y),
        frozen_xprime=scores[FROZEN].accuracy if FROZEN in scores else None,
        attackers={f: scores[f].accuracy for f in families},
        margins=margin_map if sup else {},
        min_fraction=None if sup else min_fraction,
        extra_judges={
            j: s.accuracy for j, s in scores.items() if j != FROZEN and j not in families
        },  # fmt: skip
        chance=chance_level(y),
        balanced_floor=leakage_floor(y, preserved, folds=folds, seed=seed, balanced=True),
        balanced={j: s.balanced for j, s in scores.items()},
        ci_high={j: s.ci_high for j, s in scores.items()},
        balanced_ci_high={j: s.balanced_ci_high for j, s in scores.items()},
        learning_curve=learning_curve,
        climbing=climbing,
        key_compromised=key_compromised,
        confidence=confidence,
    )
