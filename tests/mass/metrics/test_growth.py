"""A leak that grows with the release (mass.metrics.growth): the projection of each judge's
bounds from the rows its attackers trained on to the rows an attacker of the release has."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mass.metrics import growth
from mass.metrics.judges import attribute_report
from mass.metrics.scores import Score


def test_factor_by_hand():
    assert growth.factor(100, 100) == 0.0
    assert growth.factor(100, 50) == 0.0  # a smaller release: nothing to project
    assert growth.factor(0, 100) == 0.0
    # (1 - sqrt(100/400)) / (sqrt 2 - 1) = 0.5 / 0.41421 = 1.20711
    assert growth.factor(100, 400) == pytest.approx(1.20711, abs=1e-5)
    # the whole curve left: 1 / (sqrt 2 - 1) = 2.41421
    assert growth.factor(100, 1e12) == pytest.approx(2.41421, abs=1e-4)


@pytest.mark.parametrize("t,n", [(400, 1600), (1000, 50_000), (250, 260)])
def test_projection_recovers_a_curve_of_the_model(t, n):
    """On a curve a(t) = a_inf - c / sqrt(t) the projection from (t/2, t) lands on a(n)."""

    def a(rows):
        return 0.83 - 1.7 / math.sqrt(rows)

    step = a(t) - a(t / 2)
    assert a(t) + growth.factor(t, n) * step == pytest.approx(a(n), abs=1e-12)


def test_trained_rows_of_a_split():
    assert growth.trained_rows(1000, 10) == 900
    # out of fold: four groups, each cross-validated alone
    groups = np.repeat(np.arange(4), 250)
    assert growth.trained_rows(1000, 5, groups) == 200


def test_steps_never_fall_and_skip_judges_without_a_curve():
    y = np.array([0, 1] * 50)
    full = {"a": y.copy(), "b": 1 - y, "c": y}
    half = {"a": np.where(np.arange(100) < 20, 1 - y, y), "b": y}  # b fell; c has no half
    out = growth.steps(half, full, y)
    assert set(out) == {"a", "b"}
    assert out["a"][0] == pytest.approx(0.20) and out["a"][1] == pytest.approx(0.20)
    assert out["b"] == (0.0, 0.0)


def test_a_step_counts_only_from_the_baseline_up():
    """A judge that climbs from below its baseline to below it gains nothing (the fading
    bias of cross-validation without signal); one that climbs past it gains the part above."""
    y = np.array([0] * 86 + [1] * 14)  # skewed: majority 0.86

    def wrong(k):  # the first k rows (all of class 0) predicted wrong, the rest right
        return np.where(np.arange(100) < k, 1 - y, y)

    half, below, above = wrong(20), wrong(16), wrong(10)  # 0.80, 0.84, 0.90
    assert growth.steps({"j": half}, {"j": below}, y)["j"][0] == pytest.approx(0.04)
    assert growth.steps({"j": half}, {"j": below}, y, (0.86, 0.5))["j"][0] == 0.0
    acc, bal = growth.steps({"j": half}, {"j": above}, y, (0.86, 0.5))["j"]
    assert acc == pytest.approx(0.90 - 0.86)  # past the baseline: only the part above
    # balanced, above its baseline (0.5) at both sizes: the whole step, 0.942 - 0.884
    assert bal == pytest.approx((76 / 86 + 1) / 2 - (66 / 86 + 1) / 2)
    _, bal = growth.steps({"j": wrong(40)}, {"j": above}, y, (0.86, 0.88))["j"]
    assert bal == pytest.approx((76 / 86 + 1) / 2 - 0.88)


def test_project_raises_a_remapped_judge_by_its_own_judges_step_and_caps_at_one():
    scores = {"mlp": Score(0.6, 0.6, 0.62, 0.63), "mlp_remap": Score(0.6, 0.6, 0.61, 0.62),
              "frozen": Score(0.5, 0.5, 0.55, 0.55), "knn": Score(0.9, 0.9, 0.95, 0.95)}  # fmt: skip
    gained = {"mlp": (0.02, 0.03), "knn": (0.1, 0.1)}
    out, rise = growth.project(scores, gained, 2.0, lambda j: j.removesuffix("_remap"))
    assert out["mlp"].ci_high == pytest.approx(0.66)
    assert out["mlp"].balanced_ci_high == pytest.approx(0.69)
    assert out["mlp_remap"].ci_high == pytest.approx(0.65)  # mlp's step
    assert out["mlp"].accuracy == 0.6  # the point estimate stays what was measured
    assert out["frozen"] == scores["frozen"]  # not retrained: no curve, no projection
    assert out["knn"].ci_high == 1.0  # capped
    assert set(rise) == {"mlp", "mlp_remap", "knn"}
    same, none = growth.project(scores, gained, 0.0, lambda j: j)
    assert same == scores and none == {}


def _xor(seed: int, n: int, flip: float):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 8)).astype(np.float32)
    s = (x[:, 0] * x[:, 1] > 0).astype(np.int64)
    return x, np.where(rng.random(n) < flip, 1 - s, s)


def test_a_leak_that_grows_with_the_release_fails_once_projected():
    """A label the attackers read only with many rows: judged on a 1,500-row sample of a
    15,000-row release, gradient boosting stays within the limit, and the same attacker on
    every row is over it. Projected to the release's training rows, the sample fails too."""
    x, s = _xor(3, 15_000, 0.4)
    kw = dict(role="suppressed", families=("gboost",), folds=10, curve=False, margins=0.05)
    sample = attribute_report("S", s, x, x, max_rows=1500, **kw)
    projected = attribute_report("S", s, x, x, max_rows=1500, project_rows=13_500, **kw)
    whole = attribute_report("S", s, x, x, **kw)
    assert sample.passed and not whole.passed  # the leak the sample does not see
    assert not projected.passed
    assert projected.projected_rows == 13_500
    rise = projected.growth["gboost"]
    assert rise > 0 and projected.ci_high["gboost"] == pytest.approx(
        sample.ci_high["gboost"] + rise, abs=1e-4)  # fmt: skip
    assert projected.accuracies == sample.accuracies  # what was measured is kept as measured


def test_nothing_is_projected_when_the_judges_saw_the_whole_release():
    x, s = _xor(0, 600, 0.5)
    r = attribute_report("S", s, x, x, role="suppressed", families=("logreg",), folds=5,
                         curve=False, project_rows=600 * 4 / 5)  # fmt: skip
    assert r.projected_rows is None and r.growth == {}
    assert r.learning_curve == {}  # and no half-size attackers were trained


@pytest.mark.parametrize("seed", [1, 2])
def test_a_judge_at_its_baseline_without_signal_projects_no_growth(seed):
    """S skewed (14 %) and independent of x: logistic regression on half of each split's
    rows scores below the majority rate and climbs back to it on all of them. Projected to
    50,000 rows that climb is no leak: the report carries no growth (it did before the step
    was counted from the baseline up, docs/journal/calibration-runs.md session 16)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(1500, 30)).astype(np.float32)
    s = (rng.random(1500) < 0.14).astype(np.int64)
    r = attribute_report("S", s, x, x, role="suppressed", families=("logreg",), folds=5,
                         curve=False, margins=0.05, project_rows=50_000)  # fmt: skip
    assert r.projected_rows == 50_000
    assert r.attackers["logreg"] <= r.majority + 1e-9
    assert r.growth == {}
