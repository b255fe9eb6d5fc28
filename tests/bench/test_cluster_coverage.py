"""bench/cluster_coverage.py: the three errors of one draw, by hand where they can be; a
summary's coverage counts the draws whose bound reaches the mean."""

import numpy as np
import pytest

from bench.cluster_coverage import draw, main, reading, summary
from mass.metrics.scores import clustered_se


def test_one_draw_reads_the_three_errors():
    v, code, y = draw(600, 30, "xor", 0.2, seed=3)
    assert v.shape == (30, 16) and code.shape == y.shape == (600,)
    assert set(np.unique(y)) == {0, 1}
    r = reading("lookup", v, code, y, folds=5)
    acc = r["accuracy"]
    assert r["binomial"] == pytest.approx(np.sqrt(acc * (1 - acc) / 600))
    assert r["jackknife"] >= r["binomial"]  # binomial plus the fold models' spread
    # the lookup's out-of-fold predictions rebuilt: the cluster error is clustered_se's
    from mass.metrics.attackers import LOOKUP, lookup_predictions

    pred = lookup_predictions(code, y, folds=5, seed=0)[LOOKUP][1.0]
    assert float((pred == y).mean()) == pytest.approx(acc)
    assert r["cluster"] == pytest.approx(clustered_se(y, pred, code))


def test_the_summary_counts_the_draws_whose_bound_reaches_the_mean():
    rows = [
        {"accuracy": a, "binomial": 0.01, "cluster": 0.05, "jackknife": 0.0}
        for a in (0.50, 0.52, 0.54, 0.56)
    ]  # mean 0.53
    s = summary(rows)
    assert s["mean"] == pytest.approx(0.53)
    assert s["binomial"]["coverage"] == 0.75  # 0.50 + 0.0196 falls short of 0.53
    assert s["cluster"]["coverage"] == 1.0 and s["jackknife"]["coverage"] == 0.5


def test_a_share_outside_its_range_is_refused(capsys):
    with pytest.raises(SystemExit):
        main(["--share", "0.5", "--draws", "1"])
    assert "--share 0.5: must be in [0, 0.5)" in capsys.readouterr().err
