"""The audit's rules in one place: suppression and preservation checks, the per-attribute
report (:class:`AttributeReport`) and :func:`attribute_report`, which the gate, `mass audit`
and calibration all call."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mass.metrics import growth
from mass.metrics.attackers import (
    attack_predictions,
    frozen_accuracy,
    frozen_predict,
    frozen_reader,
)
from mass.metrics.certificate import Certificate
from mass.metrics.scores import (
    ATTACKER_FAMILIES,
    FROZEN,
    Score,
    balanced_accuracy,
    chance_level,
    leakage_floor,
    majority_rate,
    remap_predictions,
    score,
    z_value,
)
from mass.metrics.strata import rare_named


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


def judge_limit(baseline: float, margin: float) -> float:
    """A suppression judge's limit on one scale: its baseline plus the policy's margin."""
    return baseline + margin


def suppressed_ok(accuracy: float, baseline: float, margin: float) -> bool:
    """The suppression rule: a judge may not beat its baseline by more than margin.

    The audit passes a judge's 95 % upper bound as ``accuracy`` (accuracy against
    max(majority, floor), balanced accuracy against max(1/k, balanced floor)).
    """
    return accuracy <= judge_limit(baseline, margin) + 1e-12


def judge_ok(
    ci_high: float,
    baseline: float,
    balanced_ci_high: float | None,
    balanced_baseline: float,
    margin: float,
) -> bool:
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


# A preserved attribute's frozen reading (a model trained on the original rows, applied
# unchanged to the release) must keep min_fraction - FROZEN_SLACK of what it reads on the
# original (docs/audit.md, "Preserved attributes": why 0.1).
FROZEN_SLACK = 0.1
FROZEN_READER = "logreg"  # the frozen reader fitted by the audit when no branch model is known


def frozen_kept_ok(frozen_xprime: float, frozen_x: float, min_fraction: float) -> bool:
    """The frozen reading of a preserved attribute keeps ``min_fraction - FROZEN_SLACK`` of
    the same frozen model's accuracy on the original rows."""
    return preserved_ok(frozen_xprime, frozen_x, min_fraction - FROZEN_SLACK)


REMAP = "_remap"  # judge-name suffix: the judge's predictions re-mapped on held-out rows
KEYED = "_key"  # judge-name suffix: family retrained on the release with the noise removed
CERTIFICATE = "certificate"  # judge name: the cell release's certified bound (any attacker)
COLUMN = "@"  # family@column: the family retrained on that released column alone
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
    # class name -> rows, for each class with fewer rows than folds (mass.metrics.strata)
    rare_classes: dict[str, int] = field(default_factory=dict)
    original_balanced: float | None = None  # best balanced accuracy on the original x
    # suppressed: the cell release's bound on any attacker (mass.metrics.certificate), judged
    # as the judge CERTIFICATE when ``margins`` holds it (audit.gate_certificate)
    certificate: Certificate | None = None
    # who the frozen judge is: "branch" (the run directory's model) or the family fitted on
    # the original rows out of fold (FROZEN_READER); "" when there is none
    frozen_by: str = ""
    # suppressed, projected to a larger release (mass.metrics.growth): the attackers' training
    # rows projected to, and judge -> how far its accuracy bound rose (in ``ci_high`` already)
    projected_rows: int | None = None
    growth: dict[str, float] = field(default_factory=dict)

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
    def frozen_kept(self) -> float | None:
        """The frozen judge's accuracy on x' over its accuracy on x (None: no frozen judge)."""
        if self.frozen_xprime is None or not self.frozen_x:
            return None
        return utility_retention(self.frozen_xprime, self.frozen_x)

    @property
    def retention(self) -> float | None:
        return None if self.original <= 0 else utility_retention(self.worst, self.original)

    def judge_ok(self, judge: str) -> bool:
        """Suppressed: the judge's upper bounds stay within both limits."""
        return judge_ok(self.ci_high.get(judge, self.accuracies[judge]), self.baseline,
                        self.balanced_ci_high.get(judge), self.balanced_baseline,
                        self.margins[judge])  # fmt: skip

    def certificate_ok(self) -> bool:
        """The certificate's bounds within the CERTIFICATE judge's limits (none: fails)."""
        c, margin = self.certificate, self.margins.get(CERTIFICATE)
        if margin is None:
            return True
        if c is None or c.accuracy is None or c.balanced is None:
            return False
        return judge_ok(c.accuracy, self.baseline, c.balanced, self.balanced_baseline, margin)

    @property
    def passed(self) -> bool:
        if self.role == "suppressed":
            return all(self.judge_ok(judge) for judge in self.accuracies) and (
                self.certificate_ok())  # fmt: skip
        fraction = self.min_fraction or 0.0
        frozen = self.frozen_xprime is None or frozen_kept_ok(
            self.frozen_xprime, self.frozen_x or 0.0, fraction
        )
        return preserved_ok(self.worst, self.original, fraction) and frozen


def family_of(judge: str) -> str:
    """The judge whose margin applies: ``gboost@id_remap`` -> ``gboost``."""
    return judge.removesuffix(REMAP).removesuffix(KEYED).split(COLUMN)[0]


def column_of(judge: str) -> str | None:
    """The released column a column-alone judge attacked (``gboost@id_remap`` -> ``id``)."""
    if COLUMN not in judge:
        return None
    return judge.removesuffix(REMAP).removesuffix(KEYED).split(COLUMN, 1)[1]


def _take(a, rows):
    return None if a is None else np.asarray(a)[rows]


def _sample_rows(n: int, max_rows: int | None, seed: int) -> np.ndarray:
    """The rows every judge sees: all, or ``max_rows`` of them (seeded, in order)."""
    if max_rows is not None and n > max_rows:
        return np.sort(np.random.default_rng(seed).choice(n, size=max_rows, replace=False))
    return np.arange(n)


def _column_judges(columns: Mapping[str, tuple], y: np.ndarray, kw: dict[str, Any],
                   fractions: tuple[float, ...] = (1.0,)):  # fmt: skip
    """Each family retrained on one released column alone: ``family@column`` -> fraction ->
    predictions."""
    judged: dict[str, dict[float, np.ndarray]] = {}
    for col, (dense, col_stats) in columns.items():
        cp = attack_predictions(dense, y, stats=col_stats, fractions=fractions, **kw)
        judged.update({f + COLUMN + col: p for f, p in cp.items()})
    return judged


def _retrained(feats, y, columns, stats, kw: dict[str, Any], *, sup: bool, curve: bool,
               project_rows: float | None):  # fmt: skip
    """The retrained judges: (each family's predictions per fraction of its training rows,
    the same with each released column judged alone added (suppressed), the fractions, the
    projection factor to ``project_rows`` (:func:`mass.metrics.growth.factor`, 0: none))."""
    fractions = CURVE_FRACTIONS if sup and curve else (1.0,)
    k = growth.factor(growth.trained_rows(y.size, kw["folds"], kw.get("groups")),
                      project_rows or 0.0) if sup else 0.0  # fmt: skip
    if k > 0 and growth.HALF not in fractions:
        fractions = (growth.HALF, 1.0)
    preds = attack_predictions(feats, y, fractions=fractions, stats=stats, **kw)
    curves = dict(preds)
    if sup:
        curves.update(_column_judges(columns, y, kw, fractions if k > 0 else (1.0,)))
    return preds, curves, fractions, k


def _scores(judged: Mapping[str, np.ndarray], y: np.ndarray, z: float, seed: int, *,
            remap: bool) -> dict[str, Score]:  # fmt: skip
    """Each judge's score and, with ``remap``, its re-mapped twin's (``<judge>_remap``)."""
    scores = {j: score(y, p, z) for j, p in judged.items()}
    if remap:
        for j, p in judged.items():
            acc = score(y, remap_predictions(y, p, seed=seed), z)
            bal = score(y, remap_predictions(y, p, seed=seed, balanced=True), z)
            scores[j + REMAP] = Score(acc.accuracy, bal.balanced, acc.ci_high,
                                      bal.balanced_ci_high)  # fmt: skip
    return scores


def _margin_map(margins: Mapping[str, float] | float, judges: list[str], families, *,
                frozen: bool) -> dict[str, float]:  # fmt: skip
    """Each judge's margin: its family's (one margin for all, or per family and frozen)."""
    if isinstance(margins, Mapping):
        base = {j: float(margins[j]) for j in ((FROZEN,) if frozen else ()) + tuple(families)}
    else:
        base = dict.fromkeys((FROZEN, *families), float(margins))
    return {j: base[family_of(j)] for j in judges}


def _original(x: np.ndarray, y: np.ndarray, kw: dict[str, Any]) -> tuple[dict[str, float], float]:
    """Each family retrained on the original x: accuracies; the best balanced accuracy."""
    op = attack_predictions(x, y, **kw)
    original = {f: float((p[1.0] == y).mean()) for f, p in op.items()}
    return original, max(balanced_accuracy(y, p[1.0]) for p in op.values())


def _learning_curve(preds, fractions: tuple[float, ...], y: np.ndarray):
    """Each family's accuracy per fraction of its training set (none for one fraction)."""
    if len(fractions) <= 1:
        return {}
    return {f: [[fr, float((p[fr] == y).mean())] for fr in fractions] for f, p in preds.items()}


def _key_judges(key_x: np.ndarray, y: np.ndarray, z: float, kw: dict[str, Any], *, gate: bool):
    """Each family retrained on the release with the noise removed: its accuracy and, when
    the policy gates on it, its score as the judge ``<family>_key``."""
    kp = attack_predictions(key_x, y, **kw)
    accuracy = {f: float((p[1.0] == y).mean()) for f, p in kp.items()}
    return accuracy, ({f + KEYED: score(y, p[1.0], z) for f, p in kp.items()} if gate else {})


def _frozen_judge(frozen, family: str | None, x, x_prime, y, *, role: str, folds: int,
                  seed: int):  # fmt: skip
    """(the frozen judge's predictions on x' or None, its accuracy on x or None, who it is):
    the run directory's branch model when given, else (a preserved attribute, ``family``
    set) ``family`` fitted on the original rows out of fold (:func:`frozen_reader`)."""
    if frozen is not None:
        return frozen_predict(frozen, x_prime), frozen_accuracy(frozen, x, y), "branch"
    if family is None or role != "preserved":
        return None, None, ""
    on_x, on_xp = frozen_reader(x, x_prime, y, family=family, folds=folds, seed=seed)
    return on_xp, float((on_x == y).mean()), family


def _baselines(y: np.ndarray, preserved: Mapping[str, np.ndarray], folds: int,
               seed: int) -> dict[str, Any]:  # fmt: skip
    """The report's baselines: majority rate and chance, leakage floors on both scales."""
    return dict(
        majority=majority_rate(y),
        floor=leakage_floor(y, preserved, folds=folds, seed=seed),
        chance=chance_level(y),
        balanced_floor=leakage_floor(y, preserved, folds=folds, seed=seed, balanced=True),
    )


def _judge_fields(scores: Mapping[str, Score], families) -> dict[str, Any]:
    """The report's per-judge fields, read from the judges' scores on x'."""
    return dict(
        frozen_xprime=scores[FROZEN].accuracy if FROZEN in scores else None,
        attackers={f: scores[f].accuracy for f in families},
        extra_judges={
            j: s.accuracy for j, s in scores.items() if j != FROZEN and j not in families
        },
        balanced={j: s.balanced for j, s in scores.items()},
        ci_high={j: s.ci_high for j, s in scores.items()},
        balanced_ci_high={j: s.balanced_ci_high for j, s in scores.items()},
    )


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
    stats=None,
    columns: Mapping[str, Any] | None = None,
    class_names=None,
    original_balanced: float | None = None,
    groups=None,
    frozen_family: str | None = None,
    project_rows: float | None = None,
) -> AttributeReport:
    """Audit one attribute: baselines, frozen judge on x and x', attackers retrained on x'.

    ``preserved`` (labels of the preserved attributes, same rows) sets the leakage floors of
    a suppressed attribute; ``frozen`` is its branch model, if a run directory is known.
    ``margins`` is one margin or a mapping judge -> margin (``"frozen"`` and each family).
    ``extra`` (float [N, m]) are the other released columns, encoded: the retrained attackers
    see ``[x', extra]``. ``key_x`` are the features of the release with its noise removed
    (owner's key): families retrained on them give ``key_compromised``, judged when
    ``gate_key``. ``max_rows`` subsamples the rows once (seeded) for every judge.
    ``stats`` (:class:`mass.audit.columns.Statistics`) are the per-value label statistics of
    those columns, computed per attacker split from its training rows only. ``columns``
    (name -> :class:`mass.audit.columns.Released`) are released columns judged ALONE, ids
    included: each family retrained on one column is a judge named ``family@column``, held
    to the family's margin. ``frozen_family`` (preserved, no ``frozen``): that family fitted
    on the original rows, out of fold, is the frozen judge. ``groups`` (a code per row):
    attackers cross-validated within each group only (``original`` is measured without).
    ``project_rows`` (suppressed): the rows an attacker of the whole release trains on; when
    more than each split's training rows, every retrained judge's upper bounds are projected
    there along its learning curve (:mod:`mass.metrics.growth`) before they are judged.
    Classes with fewer rows than ``folds`` are judged by the rare-class rule
    (:mod:`mass.metrics.strata`) and listed in ``rare_classes`` (by ``class_names[code]``).
    """
    if role not in ("suppressed", "preserved"):
        raise ValueError(f"role must be 'suppressed' or 'preserved', got {role!r}")
    y = np.asarray(y)
    rows = _sample_rows(y.size, max_rows, seed)
    y, x, x_prime = y[rows], np.asarray(x)[rows], np.asarray(x_prime)[rows]
    extra, key_x = _take(extra, rows), _take(key_x, rows)
    stats = None if stats is None else stats.take(rows)
    columns = {c: (np.asarray(r.dense)[rows], r.stats.take(rows))
               for c, r in (columns or {}).items()}  # fmt: skip
    preserved = {k: np.asarray(v)[rows] for k, v in (preserved or {}).items()}
    z = z_value(confidence)
    sup = role == "suppressed"
    kw: dict[str, Any] = dict(families=families, folds=folds, seed=seed)
    if original is None:
        original, original_balanced = _original(x, y, kw)
    kw.update({} if groups is None else {"groups": np.asarray(groups)[rows]})
    feats = x_prime if extra is None or extra.shape[1] == 0 else np.hstack([x_prime, extra])
    preds, curves, fractions, k = _retrained(feats, y, columns, stats, kw, sup=sup,
                                             curve=curve, project_rows=project_rows)  # fmt: skip
    on_xp, frozen_x, frozen_by = _frozen_judge(frozen, frozen_family, x, x_prime, y, role=role,
                                               folds=folds, seed=seed)  # fmt: skip
    judged: dict[str, np.ndarray] = {} if on_xp is None else {FROZEN: on_xp}
    judged.update({j: p[1.0] for j, p in curves.items()})
    scores = _scores(judged, y, z, seed, remap=sup)
    scores, rise = growth.project_curves(scores, curves, y, k, lambda j: j.removesuffix(REMAP))
    key_compromised = None
    if key_x is not None:
        key_compromised, keyed = _key_judges(key_x, y, z, kw, gate=sup and gate_key)
        scores.update(keyed)
    learning_curve = _learning_curve(preds, fractions, y)
    climbing = tuple(f for f, c in learning_curve.items() if curve_climbing(c, y.size, curve_tol))
    margin_map = _margin_map(margins, list(scores), families, frozen=on_xp is not None)
    if not sup:  # preserved: only the direct judges are reported
        scores = {j: s for j, s in scores.items() if j == FROZEN or j in families}
    return AttributeReport(
        name=name, role=role, n=int(y.size),
        **_baselines(y, preserved, folds, seed),
        original=max(original.values()), original_by_family=dict(original),
        frozen_x=frozen_x, frozen_by=frozen_by,
        **_judge_fields(scores, families),
        margins=margin_map if sup else {}, min_fraction=None if sup else min_fraction,
        learning_curve=learning_curve, climbing=climbing,
        key_compromised=key_compromised, confidence=confidence,
        rare_classes=rare_named(y, folds, class_names),
        original_balanced=original_balanced,
        projected_rows=int(project_rows) if k > 0 and project_rows else None,
        growth=rise,
    )  # fmt: skip
