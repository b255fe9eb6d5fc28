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
