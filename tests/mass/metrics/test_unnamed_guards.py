"""What a release keeps of the attributes nobody named (mass/metrics/unnamed.py, issue 37):
with several watch attributes the one number calibration ranks by is the WORST kept, and a
watch attribute released inside out (a binary label flipped) counts as lost to the frozen
reader the audit adds, however well retrained attackers read it."""

from __future__ import annotations

import numpy as np
import pytest

from mass.metrics.unnamed import unnamed_utility, watch_report


def test_several_watch_attributes_rank_by_the_worst_kept():
    watch = {"a": {"kept": 0.91}, "b": {"kept": 0.35}, "c": {"kept": None}, "d": {"kept": 0.7}}
    assert unnamed_utility(watch, {"knn_overlap": 1.0, "cka": 1.0, "dcor": 1.0}) == 0.35


@pytest.fixture(scope="module")
def flipped():
    """w (binary) lives in dims 0/1, v (binary) in dims 2/3; the release swaps dims 0 and 1."""
    rng = np.random.default_rng(4)
    n = 800
    w, v = rng.integers(0, 2, n), rng.integers(0, 2, n)
    x = rng.normal(scale=0.2, size=(n, 8))
    x[np.arange(n), w] += 1.0
    x[np.arange(n), 2 + v] += 1.0
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    rel = x.copy()
    rel[:, [0, 1]] = rel[:, [1, 0]]
    return x, rel, {"w": w, "v": v}


def test_a_watch_attribute_released_inside_out_is_lost_to_the_frozen_reader(flipped):
    x, rel, labels = flipped
    out = watch_report(x, rel, labels, {}, families=("logreg",), folds=3, max_rows=None,
                       frozen="logreg")  # fmt: skip
    w, v = out["w"], out["v"]
    assert w["retrained_kept"] > 0.95 and w["frozen_kept"] < -0.8 and w["kept"] < -0.8
    assert v["retrained_kept"] > 0.95 and v["frozen_kept"] > 0.95 and v["kept"] > 0.95
    assert unnamed_utility(out) == w["kept"]  # the worst of the two
    plain = watch_report(x, rel, labels, {}, families=("logreg",), folds=3, max_rows=None)
    assert plain["w"]["kept"] > 0.95 and "frozen_kept" not in plain["w"]  # retrained only
