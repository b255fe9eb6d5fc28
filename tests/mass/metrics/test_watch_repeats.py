"""Watch attributes read over several fold orders (mass.metrics.unnamed.watch_report
``repeats``, ``audit.watch_repeats``): one fold draw moves a watch figure by about as much as
a target's distance on the demo (bench/watch_folds.py), so the audit reports the mean over
seeded orders and the range of one order's reading."""

from __future__ import annotations

import numpy as np
import pytest

from mass.metrics.unnamed import REPEAT_STRIDE, watch_report


@pytest.fixture(scope="module")
def noisy():
    """w (3 classes) read through heavy noise, so that each fold order reads it differently."""
    rng = np.random.default_rng(11)
    n = 600
    w, s = rng.integers(0, 3, n), rng.integers(0, 2, n)
    x = rng.normal(size=(n, 6))
    x[np.arange(n), w] += 0.8
    x[:, 5] += 1.5 * s
    rel = x + rng.normal(scale=0.8, size=x.shape)
    return x.astype(np.float32), rel.astype(np.float32), {"w": w}, {"s": s}


def test_repeated_reading_is_the_mean_of_single_orders_and_its_range(noisy):
    x, rel, watch, sup = noisy
    kw = dict(families=("logreg", "knn"), folds=3, max_rows=None, frozen="logreg")
    singles = [watch_report(x, rel, watch, sup, seed=7 + r * REPEAT_STRIDE, **kw)["w"]
               for r in range(3)]  # fmt: skip
    rep = watch_report(x, rel, watch, sup, seed=7, repeats=3, **kw)["w"]
    assert rep["repeats"] == 3 and singles[0]["repeats"] == 1
    for key in ("original_by_family", "release_by_family"):
        for fam in ("logreg", "knn"):
            assert rep[key][fam] == pytest.approx(np.mean([s[key][fam] for s in singles]))
    assert rep["frozen_release"] == pytest.approx(np.mean([s["frozen_release"] for s in singles]))
    kepts = [s["kept"] for s in singles]
    assert len(set(np.round(kepts, 6))) > 1  # the orders do read differently here
    assert rep["kept_range"] == pytest.approx([min(kepts), max(kepts)])
    assert singles[0]["kept_range"] == pytest.approx([kepts[0], kepts[0]])
    # the first order is the single reading's: repeats=1 is the reading calibration ranks by
    assert watch_report(x, rel, watch, sup, seed=7, **kw)["w"]["kept"] == kepts[0]
    # the mean reading lies within what single orders read (kept: the lower of two readings)
    assert min(kepts) - 0.05 <= rep["kept"] <= max(kepts) + 0.05


@pytest.mark.parametrize("bad", [0, -1, True, 2.0])
def test_repeats_must_be_a_positive_integer(noisy, bad):
    x, rel, watch, sup = noisy
    with pytest.raises(ValueError, match="repeats"):
        watch_report(x, rel, watch, sup, families=("logreg",), folds=3, repeats=bad)
