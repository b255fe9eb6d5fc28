"""Judging one attribute: :func:`attribute_report` samples the rows once, retrains every
attacker family on the release (and on each released column alone, and on the keyed release),
reads the frozen judge, scores and projects each judge and returns the
:class:`mass.metrics.rules.AttributeReport` that the gate, `mass audit` and calibration read."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from mass.metrics import growth
from mass.metrics.attackers import (
    LOOKUP,
    LOOKUP_BALANCED,
    attack_predictions,
    frozen_accuracy,
    frozen_predict,
    frozen_reader,
    lookup_predictions,
)
from mass.metrics.certificate import cells_of
from mass.metrics.rules import (
    COLUMN,
    CURVE_FRACTIONS,
    KEYED,
    REMAP,
    AttributeReport,
    baseline_of,
    curve_climbing,
    family_of,
)
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
from mass.rows import joint_codes

LOOKUPS = (LOOKUP, LOOKUP_BALANCED)


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


def _retrained(x_prime: np.ndarray, extra, y, columns, stats, kw: dict[str, Any], *, sup: bool,
               curve: bool, project_rows: float | None):  # fmt: skip
    """The retrained judges of ``x_prime`` beside the ``extra`` released columns: (each
    family's predictions per fraction of its training rows, the same with each released
    column judged alone and the lookups on the released vectors (``x_prime`` alone) added
    (suppressed), the fractions, the projection factor to ``project_rows``
    (:func:`mass.metrics.growth.factor`, 0: none), the released vectors' codes when some
    repeat (suppressed; :func:`shared_vectors`), else None)."""
    fractions = CURVE_FRACTIONS if sup and curve else (1.0,)
    k = growth.factor(growth.trained_rows(y.size, kw["folds"], kw.get("groups")),
                      project_rows or 0.0) if sup else 0.0  # fmt: skip
    if k > 0 and growth.HALF not in fractions:
        fractions = (growth.HALF, 1.0)
    feats = x_prime if extra is None or extra.shape[1] == 0 else np.hstack([x_prime, extra])
    preds = attack_predictions(feats, y, fractions=fractions, stats=stats, **kw)
    curves = dict(preds)
    cells = shared_vectors(x_prime) if sup else None
    if sup:
        curves.update(_column_judges(columns, y, kw, fractions if k > 0 else (1.0,)))
        curves.update(_lookup_judges(cells, y, kw, fractions))
    return preds, curves, fractions, k, cells


def _lookup_judges(cells: np.ndarray | None, y: np.ndarray, kw: dict[str, Any],
                   fractions: tuple[float, ...]) -> dict[str, dict[float, np.ndarray]]:  # fmt: skip
    """The lookup attackers on the released vectors (:func:`lookup_predictions`), when some
    vector is released for more than one row (cells, or duplicate rows; ``cells``: their codes,
    :func:`shared_vectors`, None when none repeats): a table from the exact vector to S is
    what an attacker holding the release tabulates first."""
    if cells is None:
        return {}
    return lookup_predictions(cells, y, folds=kw["folds"], seed=kw["seed"], fractions=fractions,
                              groups=kw.get("groups"))  # fmt: skip


def shared_vectors(x_prime: np.ndarray) -> np.ndarray | None:
    """The released vector of each row (:func:`cells_of`) when some vector is released for
    more than one row, else None: the clusters of :func:`mass.metrics.scores.score`."""
    cells = cells_of(np.asarray(x_prime, dtype=np.float32))
    return None if cells.size == 0 or int(cells.max()) + 1 >= cells.size else cells


def _cells(cells: np.ndarray | None, preserved: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """The keywords of :func:`score` for the retrained judges on a release whose vectors
    repeat (``cells``: their codes, :func:`shared_vectors`; None: none repeats, nothing to
    add): the vectors as clusters, centred within the preserved classes (the floor's share is
    not noise)."""
    if cells is None:
        return {}
    return {"clusters": cells, "strata": joint_codes(dict(preserved)) if preserved else None}


def _judge_score(judge: str, y: np.ndarray, pred: np.ndarray, z: float,
                 cells: Mapping[str, Any] | None) -> Score:  # fmt: skip
    """``judge``'s score; a retrained judge's bounds at least cluster-robust on ``cells``
    (:func:`_cells`): it learns the prediction its cell's rows share from their labels, the
    lookups per cell, a family and its re-mapped twin from the cells near it (docs/audit.md,
    "Rows that share a released vector"). The frozen judge, fitted on other rows, keeps the
    binomial bounds."""
    return score(y, pred, z, **(dict(cells or {}) if judge.removesuffix(REMAP) != FROZEN else {}))


def _scores(judged: Mapping[str, np.ndarray], y: np.ndarray, z: float, seed: int, *,
            remap: bool, cells: Mapping[str, Any] | None = None) -> dict[str, Score]:  # fmt: skip
    """Each judge's score and, with ``remap``, its re-mapped twin's (``<judge>_remap``);
    ``cells`` (:func:`_cells`): the retrained judges' bounds at least cluster-robust
    (:func:`_judge_score`)."""
    scores = {j: _judge_score(j, y, p, z, cells) for j, p in judged.items()}
    if remap:
        for j, p in judged.items():
            if j in LOOKUPS:  # already the best rule per released value: nothing to re-map
                continue
            acc = _judge_score(j + REMAP, y, remap_predictions(y, p, seed=seed), z, cells)
            bal = _judge_score(j + REMAP, y, remap_predictions(y, p, seed=seed, balanced=True),
                               z, cells)  # fmt: skip
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
    strictest = min(base.values())  # the lookups on released values: no margin of their own
    return {j: strictest if family_of(j) in LOOKUPS else base[family_of(j)] for j in judges}


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


def _key_judges(key_x: np.ndarray, y: np.ndarray, z: float, kw: dict[str, Any], *, gate: bool,
                dim: int, preserved: Mapping[str, np.ndarray]):  # fmt: skip
    """Each family retrained on the release with the noise removed (and the lookups on its
    first ``dim`` columns, the stripped embedding, when a vector repeats): its accuracy and,
    when the policy gates on it, its score as the judge ``<family>_key``."""
    kp = attack_predictions(key_x, y, **kw)
    cells = shared_vectors(key_x[:, :dim])
    kp.update(_lookup_judges(cells, y, kw, (1.0,)))
    accuracy = {f: float((p[1.0] == y).mean()) for f, p in kp.items()}
    if not gate:
        return accuracy, {}
    cl = _cells(cells, preserved)
    return accuracy, {f + KEYED: _judge_score(f, y, p[1.0], z, cl) for f, p in kp.items()}


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


def _projected(scores: Mapping[str, Score], curves, y: np.ndarray, k: float,
               base: Mapping[str, Any]) -> tuple[dict[str, Score], dict[str, float]]:  # fmt: skip
    """The retrained judges' bounds projected ``k`` steps along their curves
    (:func:`mass.metrics.growth.project_curves`), each step counted from the report's
    baseline up (a re-mapped judge takes its own judge's step)."""
    baseline = (baseline_of(base["majority"], base["floor"]),
                baseline_of(base["chance"], base["balanced_floor"]))  # fmt: skip
    return growth.project_curves(scores, curves, y, k, lambda j: j.removesuffix(REMAP), baseline)


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
    z, sup = z_value(confidence), role == "suppressed"
    kw: dict[str, Any] = dict(families=families, folds=folds, seed=seed)
    if original is None:
        original, original_balanced = _original(x, y, kw)
    kw.update({} if groups is None else {"groups": np.asarray(groups)[rows]})
    preds, curves, fractions, k, cells = _retrained(x_prime, extra, y, columns, stats, kw,
                                                    sup=sup, curve=curve, project_rows=project_rows)  # fmt: skip
    on_xp, frozen_x, frozen_by = _frozen_judge(frozen, frozen_family, x, x_prime, y, role=role,
                                               folds=folds, seed=seed)  # fmt: skip
    judged: dict[str, np.ndarray] = {} if on_xp is None else {FROZEN: on_xp}
    judged.update({j: p[1.0] for j, p in curves.items()})
    scores = _scores(judged, y, z, seed, remap=sup, cells=_cells(cells, preserved))
    base = _baselines(y, preserved, folds, seed)
    scores, rise = _projected(scores, curves, y, k, base)
    key_compromised = None
    if key_x is not None:
        key_compromised, keyed = _key_judges(key_x, y, z, kw, gate=sup and gate_key,
                                               dim=x_prime.shape[1], preserved=preserved)  # fmt: skip
        scores.update(keyed)
    learning_curve = _learning_curve(preds, fractions, y)
    climbing = tuple(f for f, c in learning_curve.items() if curve_climbing(c, y.size, curve_tol))
    margin_map = _margin_map(margins, list(scores), families, frozen=on_xp is not None)
    if not sup:  # preserved: only the direct judges are reported
        scores = {j: s for j, s in scores.items() if j == FROZEN or j in families}
    return AttributeReport(
        name=name, role=role, n=int(y.size), **base,
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
