"""mass.metrics.attackers: the retrained attackers' cross-validation."""

from __future__ import annotations

import numpy as np


def test_grouped_folds_attack_each_models_release_on_its_own():
    """Calibration's out-of-fold release is four models' outputs. A leak each fit writes its
    own way (here s along one direction, with the sign of the group) cancels when attackers
    train across groups and is read within each: ``groups`` predicts every row once, from its
    own group's rows only."""
    from mass.metrics.attackers import attack_predictions, grouped_folds

    rng = np.random.default_rng(0)
    n = 2000
    s, groups = rng.integers(0, 2, n), np.repeat(np.arange(4), n // 4)
    x = rng.normal(size=(n, 8))
    x[:, 0] += 1.5 * (2 * s - 1) * np.where(groups % 2 == 0, 1, -1)
    splits = grouped_folds(s, groups, 5, 0)
    tested = np.concatenate([te for _, te in splits])
    assert np.array_equal(np.sort(tested), np.arange(n))
    assert all(len(np.unique(groups[np.concatenate([tr, te])])) == 1 for tr, te in splits)
    fams = ("logreg", "knn")
    pooled = attack_predictions(x, s, families=fams, folds=5, seed=0)
    within = attack_predictions(x, s, families=fams, folds=5, seed=0, groups=groups)
    for f in fams:
        assert (pooled[f][1.0] == s).mean() < 0.6
        assert (within[f][1.0] == s).mean() > 0.85


def test_lookup_tables_by_hand():
    """The lookup tables of the attackers on released values, small enough to check by hand."""
    from mass.metrics.scores import table_predict

    # value 0: labels a, a, b (majority a); value 1: b, b; value 2 never seen in training
    cells_tr, y_tr = np.array([0, 0, 0, 1, 1]), np.array([0, 0, 1, 1, 1])
    got = table_predict(cells_tr, y_tr, np.array([0, 1, 2]), 3, 2)
    assert got.tolist() == [0, 1, 1]  # unseen: the training majority (class 1, 3 of 5 rows)
    # balanced rule: per value, the class with the highest share of its own class's rows. A
    # value holding 2 of class 0's 6 rows (1/3) and class 1's only row (1/1) goes to class 1
    # under the balanced rule and to class 0 under the majority rule
    cells_tr, y_tr = np.array([0, 0, 0, 1, 1, 1, 1]), np.array([0, 0, 1, 0, 0, 0, 0])
    assert table_predict(cells_tr, y_tr, np.array([0]), 2, 2).tolist() == [0]
    assert table_predict(cells_tr, y_tr, np.array([0]), 2, 2, balanced=True).tolist() == [1]


def test_lookup_predictions_share_the_retrained_attackers_splits():
    """Each row predicted once, out of fold, from a table of the other folds' rows, on the
    same splits and nested fractions as :func:`attack_predictions`; labels come back as given."""
    from mass.metrics.attackers import LOOKUP, LOOKUP_BALANCED, lookup_predictions
    from mass.metrics.strata import cv_folds

    rng = np.random.default_rng(1)
    cells = rng.integers(0, 30, 600)
    y = np.where(rng.random(600) < 0.9, cells % 2, 1 - cells % 2) * 7 + 3  # labels 3 and 10
    out = lookup_predictions(cells, y, folds=5, seed=0, fractions=(0.5, 1.0))
    assert set(out) == {LOOKUP, LOOKUP_BALANCED}
    for judge in out:
        assert set(np.unique(out[judge][1.0])) <= {3, 10}
        assert (out[judge][1.0] == y).mean() > 0.85  # the parity of the value gives y
    # by hand on the first split: the majority label of each value among the training rows
    tr, te = next(iter(cv_folds(y, 5, 0)))
    for row in te[:20]:
        seen = y[tr][cells[tr] == cells[row]]
        vals, counts = np.unique(seen, return_counts=True)
        assert out[LOOKUP][1.0][row] == vals[counts.argmax()]
