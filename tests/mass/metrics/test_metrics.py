"""mass.metrics on synthetic data whose answer is known."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from mass.metrics import (
    ATTACKER_FAMILIES,
    AttributeReport,
    attribute_report,
    aum,
    balanced_accuracy,
    balanced_upper,
    chance_level,
    curve_climbing,
    frozen_accuracy,
    leakage_floor,
    majority_rate,
    remap_predictions,
    retrained_attackers,
    utility_retention,
    wilson_upper,
    z_value,
)


def _unit(x):
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def test_majority_rate_is_the_largest_class_share():
    assert majority_rate([0, 0, 0, 1]) == 0.75
    assert majority_rate(np.array(["a", "b"])) == 0.5
    assert majority_rate([]) == 0.0


def test_attackers_on_random_labels_stay_near_majority():
    rng = np.random.default_rng(0)
    x = _unit(rng.normal(size=(300, 16)))
    y = rng.integers(0, 2, 300)
    accs = retrained_attackers(x, y, folds=3)
    assert set(accs) == set(ATTACKER_FAMILIES)
    for fam, acc in accs.items():
        assert abs(acc - majority_rate(y)) < 0.1, (fam, acc)


def test_logreg_separates_linearly_separable_classes():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 3, 300)
    x = rng.normal(scale=0.1, size=(300, 8))
    x[np.arange(300), y] += 3.0
    cv = retrained_attackers(x, y, families=("logreg",), folds=3)
    holdout = retrained_attackers(x[:200], y[:200], x[200:], y[200:], families=("logreg",))
    assert cv["logreg"] > 0.98 and holdout["logreg"] > 0.98


def test_attackers_are_deterministic_given_seed_and_subsample_with_max_rows():
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(200, 8)), rng.integers(0, 2, 200)
    a = retrained_attackers(x, y, families=("mlp", "gboost"), folds=3, seed=5, max_rows=120)
    b = retrained_attackers(x, y, families=("mlp", "gboost"), folds=3, seed=5, max_rows=120)
    assert a == b
    # subsampled to 120 rows: every accuracy is a multiple of 1/120
    assert all(abs(v * 120 - round(v * 120)) < 1e-9 for v in a.values())


def test_unknown_family_is_rejected_before_fitting():
    with pytest.raises(ValueError, match="unknown attacker family 'svm'"):
        retrained_attackers(np.zeros((10, 2)), np.arange(10) % 2, families=("svm",))


def test_leakage_floor_is_one_when_s_is_a_function_of_r():
    rng = np.random.default_rng(3)
    r = rng.integers(0, 6, 500)
    assert leakage_floor(r % 2, {"r": r}) == 1.0


def test_leakage_floor_is_majority_when_independent_or_nothing_is_preserved():
    rng = np.random.default_rng(4)
    s, r = rng.integers(0, 2, 1000), rng.integers(0, 3, 1000)
    assert abs(leakage_floor(s, {"r": r}) - majority_rate(s)) < 0.05
    assert leakage_floor(s, {}) == majority_rate(s)


def test_leakage_floor_uses_the_joint_preserved_labels():
    rng = np.random.default_rng(5)
    a, b = rng.integers(0, 2, 800), rng.integers(0, 2, 800)
    s = a ^ b  # neither alone tells s; both together do
    assert leakage_floor(s, {"a": a}) < 0.6
    assert leakage_floor(s, {"a": a, "b": b}) == 1.0


class _Linear(nn.Module):
    def __init__(self, tuple_out: bool = False):
        super().__init__()
        self.fc = nn.Linear(2, 2, bias=False)
        with torch.no_grad():
            self.fc.weight.copy_(torch.eye(2))  # class = argmax of the coordinates
        self.tuple_out = tuple_out

    def forward(self, x):
        return (x, self.fc(x)) if self.tuple_out else self.fc(x)


class _HasLogits:
    def logits(self, x):
        return x * torch.tensor([1.0, -1.0])  # always class 0 for positive inputs


def test_frozen_accuracy_reads_logits_tuples_and_logits_method():
    x = np.array([[1, 0], [0, 1], [2, 1], [1, 3]], dtype=np.float32)
    y = np.array([0, 1, 0, 0])
    assert frozen_accuracy(_Linear(), x, y) == 0.75
    model = _Linear(tuple_out=True).train()
    assert frozen_accuracy(model, x, y, batch_size=3) == 0.75
    assert model.training  # the caller's mode is restored
    assert frozen_accuracy(_HasLogits(), x, y) == 0.75


def test_aum_reproduces_the_papers_table_1():
    # Efficient Attribute Unlearning, Table 1: (efficacy, fidelity) -> AUM
    assert aum(0.1352, 0.7950) == pytest.approx(0.8284, abs=1e-4)
    assert aum(0.1095, 0.9351) == pytest.approx(0.9123, abs=1e-4)
    assert aum(1.0, 0.0) == 0.0


def test_utility_retention_is_a_ratio_and_rejects_zero_original():
    assert utility_retention(0.45, 0.9) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="acc_original"):
        utility_retention(0.5, 0.0)


def _report(role, accs, **kw):
    base = dict(name="a", role=role, n=100, majority=0.5, floor=0.6, original=0.9,
                original_by_family={}, frozen_x=0.9, frozen_xprime=accs.pop("frozen", None),
                attackers=accs)  # fmt: skip
    return AttributeReport(**{**base, **kw})


def test_attribute_report_judges_against_max_of_majority_and_floor():
    margins = {"frozen": 0.05, "logreg": 0.05}
    ok = _report("suppressed", {"frozen": 0.64, "logreg": 0.65}, margins=margins)
    bad = _report("suppressed", {"frozen": 0.60, "logreg": 0.66}, margins=margins)
    assert ok.baseline == 0.6 and ok.passed and ok.worst == 0.65
    assert not bad.passed
    kept = _report("preserved", {"logreg": 0.82, "knn": 0.5}, min_fraction=0.9)
    lost = _report("preserved", {"logreg": 0.80}, min_fraction=0.9)
    assert kept.passed and kept.retention == pytest.approx(0.82 / 0.9)
    assert not lost.passed


def test_attribute_report_measures_identity_as_leaky():
    rng = np.random.default_rng(6)
    y = rng.integers(0, 2, 200)
    x = rng.normal(scale=0.2, size=(200, 8))
    x[:, 0] += np.where(y == 1, 1.0, -1.0)
    frozen = nn.Linear(8, 2, bias=False)
    with torch.no_grad():
        frozen.weight.zero_()
        frozen.weight[0, 0], frozen.weight[1, 0] = -1.0, 1.0  # the class is the sign of x0
    rep = attribute_report("s", y, x, x, role="suppressed", families=("logreg",), folds=3,
                           frozen=frozen, margins=0.05)  # fmt: skip
    assert rep.attackers["logreg"] > 0.95 and rep.original > 0.95
    assert rep.frozen_x == rep.frozen_xprime > 0.95
    assert set(rep.margins) == {"frozen", "logreg", "frozen_remap", "logreg_remap"}
    assert not rep.passed


def test_balanced_accuracy_is_mean_recall_and_constant_guess_is_chance():
    y = np.array([0] * 96 + [1] * 4)
    assert balanced_accuracy(y, np.zeros(100)) == 0.5 == chance_level(y)
    assert balanced_accuracy(y, y) == 1.0
    pred = y.copy()
    pred[:48] = 1  # half of class 0 wrong, class 1 right
    assert balanced_accuracy(y, pred) == pytest.approx(0.75)
    assert chance_level([0, 1, 2, 2]) == pytest.approx(1 / 3)


def test_wilson_upper_matches_the_textbook_interval():
    # Wilson 95 % for 50/100 is (0.4038, 0.5962); for 0/10 the upper end is 0.2775
    assert wilson_upper(50, 100) == pytest.approx(0.5962, abs=1e-4)
    assert wilson_upper(0, 10) == pytest.approx(0.2775, abs=1e-4)
    assert wilson_upper(100, 100) == pytest.approx(1.0) and wilson_upper(0, 0) == 1.0
    assert z_value(0.95) == pytest.approx(1.959964, abs=1e-6)


def test_balanced_upper_is_above_the_point_and_keeps_uncertainty_of_a_constant_guess():
    y = np.array([0] * 960 + [1] * 40)
    const = np.zeros(1000, dtype=int)
    high = balanced_upper(y, const)
    assert 0.5 < high < 0.55  # the 40 minority rows still leave room, but not 0.05
    assert balanced_upper(y[:100], const[:100] * 0) > 0.5  # one class only: recall 1 -> 1
    rng = np.random.default_rng(0)
    pred = np.where(rng.random(1000) < 0.7, y, 1 - y)
    assert balanced_upper(y, pred) > balanced_accuracy(y, pred)


def test_remap_reads_back_a_permuting_judge_and_gains_nothing_at_chance():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 3, 2000)
    flipped = (y + 1) % 3  # accuracy 0: far below chance, yet it names the class
    assert (flipped == y).mean() == 0.0
    assert (remap_predictions(y, flipped) == y).mean() == 1.0
    assert balanced_accuracy(y, remap_predictions(y, flipped, balanced=True)) == 1.0
    noise = rng.integers(0, 3, 2000)
    assert abs((remap_predictions(y, noise) == y).mean() - majority_rate(y)) < 0.04


def test_balanced_leakage_floor_covers_a_rare_attribute_read_from_preserved_labels():
    rng = np.random.default_rng(2)
    r = rng.integers(0, 50, 4000)
    s = (r == 0).astype(int)  # 2 % prevalence, a function of r
    assert leakage_floor(s, {"r": r}) == 1.0
    assert leakage_floor(s, {"r": r}, balanced=True) == 1.0
    # s = 1 in 30 % of r == 0 rows, 0.5 % elsewhere: never the majority of any r, so the
    # accuracy table always says 0 (balanced 0.5); the balanced table says 1 where r == 0
    hint = (rng.random(4000) < np.where(r == 0, 0.3, 0.005)).astype(int)
    assert leakage_floor(hint, {"r": r}) == pytest.approx(majority_rate(hint), abs=0.01)
    assert leakage_floor(hint, {"r": r}, balanced=True) > 0.7
    indep = (rng.random(4000) < 0.02).astype(int)
    assert leakage_floor(indep, {}, balanced=True) == 0.5
    assert leakage_floor(indep, {"r": r}, balanced=True) < 0.6


def test_learning_curve_flags_an_attacker_still_learning_and_not_a_flat_one():
    rng = np.random.default_rng(0)
    n, d = 1200, 128
    s = rng.integers(0, 2, n)
    x = rng.normal(size=(n, d)) + np.where(s == 1, 0.08, -0.08)[:, None]
    rep = attribute_report("s", s, x, x, role="suppressed", families=("logreg",), folds=3)
    curve = rep.learning_curve["logreg"]
    assert [f for f, _ in curve] == [0.25, 0.5, 1.0] and curve[-1][1] == rep.attackers["logreg"]
    assert rep.climbing == ("logreg",) and curve[-1][1] - curve[-2][1] > 0.05
    z = rng.normal(size=(n, d))
    flat = attribute_report("s", s, z, z, role="suppressed", families=("logreg",), folds=3)
    assert flat.climbing == () and not flat.curve_climbing
    assert not curve_climbing([[0.5, 0.70], [1.0, 0.715]], 1200, 0.02)
    assert curve_climbing([[0.5, 0.70], [1.0, 0.76]], 1200, 0.02)


def test_attribute_report_sees_extra_columns_and_judges_upper_bounds():
    rng = np.random.default_rng(7)
    y = rng.integers(0, 2, 600)
    x = _unit(rng.normal(size=(600, 8)))
    proxy = np.eye(2)[y].astype(np.float32)  # an encoded released column equal to y
    clean = attribute_report("s", y, x, x, role="suppressed", families=("logreg",), folds=3)
    leaky = attribute_report("s", y, x, x, role="suppressed", families=("logreg",), folds=3,
                             extra=proxy)  # fmt: skip
    assert clean.passed and clean.attackers["logreg"] < 0.6
    assert leaky.attackers["logreg"] == 1.0 and not leaky.passed
    # judged on the upper bound: a point estimate inside the limit can still fail
    rep = _report(
        "suppressed",
        {"logreg": 0.54},
        majority=0.5,
        floor=0.5,
        margins={"logreg": 0.05},
        ci_high={"logreg": 0.58},
    )
    assert not rep.passed
    ok = _report(
        "suppressed",
        {"logreg": 0.54},
        majority=0.5,
        floor=0.5,
        margins={"logreg": 0.05},
        ci_high={"logreg": 0.549},
    )
    assert ok.passed


def test_learning_curve_parts_too_small_for_early_stopping_still_fit():
    """A 25 % part of a 10-class attribute on a few hundred rows has fewer held-out rows than
    classes: the early-stopped attackers must fit without sklearn's stratified-split error."""
    from mass.metrics import attack_predictions

    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(10), 30)
    x = rng.normal(size=(300, 8)).astype(np.float32) + y[:, None] * 0.5
    out = attack_predictions(x, y, families=("gboost", "mlp"), folds=10, fractions=(0.25, 1.0))
    for fam in ("gboost", "mlp"):
        assert set(out[fam]) == {0.25, 1.0}
        assert (out[fam][1.0] == y).mean() > 0.15  # chance is 0.1: learnt something


def test_attribute_report_reuses_a_given_original_accuracy():
    """Calibration judges many releases of the same rows: the original accuracy it measured
    once gives the same report as measuring it again."""
    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, 300)
    x = rng.normal(size=(300, 6)) + y[:, None] * 0.8
    xp = rng.normal(size=(300, 6))
    kw = dict(role="suppressed", families=("logreg",), folds=3, curve=False)
    fresh = attribute_report("s", y, x, xp, **kw)
    given = attribute_report("s", y, x, xp, original=fresh.original_by_family,
                             original_balanced=fresh.original_balanced, **kw)  # fmt: skip
    assert given == fresh
    fake = attribute_report("s", y, x, xp, original={"logreg": 0.123}, **kw)
    assert fake.original == 0.123 and fake.passed == fresh.passed


# -- the rare-class rule (mass.metrics.strata) -------------------------------------------------
def test_rare_classes_are_pooled_for_stratification_only():
    from mass.metrics.strata import cv_folds, rare_classes, stratification_codes

    y = np.array([0] * 20 + [1] * 20 + [2] + [3] * 4)  # classes 2 (1 row) and 3 (4 rows) rare
    assert rare_classes(y, 5) == {2: 1, 3: 4}
    codes = stratification_codes(y, 5)
    assert codes[40] == codes[41] != codes[0]  # 2 and 3 share one stratum of 5 rows
    tested = np.concatenate([te for _, te in cv_folds(y, 5, 0)])
    assert sorted(tested) == list(range(y.size))  # every row, rare ones included, tested once
    tiny = np.array([0] * 20 + [1])  # a pool smaller than the folds joins the largest class
    assert len(set(stratification_codes(tiny, 5))) == 1


def test_fewer_rows_than_folds_and_a_single_row():
    from mass.errors import RareClassError
    from mass.metrics.strata import cv_folds

    assert len(list(cv_folds(np.array([0, 1, 1]), 10, 0))) == 3
    with pytest.raises(RareClassError, match="attribute 'colour'"):
        list(cv_folds(np.array([1]), 5, 0, attr="colour"))


def test_attackers_judge_a_singleton_class_without_sklearn_errors():
    from mass.metrics import attack_predictions

    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 200)
    y[3] = 7  # one row: early stopping's stratified hold-out would raise in sklearn
    x = rng.normal(size=(200, 4)) + y[:, None]
    preds = attack_predictions(x, y, families=("mlp", "gboost"), folds=5,
                               fractions=(0.25, 1.0))  # fmt: skip
    assert all(p[1.0].shape == y.shape for p in preds.values())


def _small_cells(n_cells: int = 600, per: int = 4, seed: int = 0):
    """A cell release (``per`` rows per random vector) whose cells carry S 3 to 1: the cells
    are too small and too scattered for kNN's 15 neighbours or a smooth model to read."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(n_cells, 16)).astype(np.float32)
    cell = np.repeat(np.arange(n_cells), per)
    s = np.repeat(np.arange(n_cells) % 2, per)
    s = np.where(np.tile([0, 0, 0, 1], n_cells).astype(bool), 1 - s, s)
    xp = centres[cell]
    return s, xp + rng.normal(size=xp.shape).astype(np.float32), xp


def test_attribute_report_looks_up_released_values():
    """The guide's attackers include a lookup on released values: the majority S per exact
    released vector, learned out of fold. On a cell release the retrained families read at
    chance, the lookups read the cells' 3-to-1 skew, and the attribute fails on them, held to
    the strictest family's margin."""
    s, x, xp = _small_cells()
    r = attribute_report("S", s, x, xp, role="suppressed", families=("logreg", "knn", "gboost"),
                         folds=5, margins={"logreg": 0.05, "knn": 0.04, "gboost": 0.06})  # fmt: skip
    for fam in ("logreg", "knn", "gboost"):
        assert r.judge_ok(fam), fam
    for judge in ("lookup", "lookup_balanced"):
        assert r.accuracies[judge] > 0.6 and not r.judge_ok(judge)
        assert r.margins[judge] == 0.04
        assert judge + "_remap" not in r.accuracies  # the rule per value is already the best
    assert not r.passed
    # released with noise over the same cells: the attacker holding the key strips it and
    # looks the cells up (the key judges' lookups, on the stripped embedding)
    noisy = xp + np.random.default_rng(1).normal(size=xp.shape).astype(np.float32)
    k = attribute_report("S", s, x, noisy, role="suppressed", families=("logreg",), folds=5,
                         key_x=np.hstack([xp, np.zeros((len(xp), 2), np.float32)]),
                         gate_key=True)  # fmt: skip
    assert "lookup" not in k.accuracies and not k.judge_ok("lookup_key") and not k.passed
    assert k.margins["lookup_balanced_key"] == 0.05
    # the same rows released as distinct vectors: no value repeats, no lookup judge
    cont = attribute_report("S", s, x, x + 1.0, role="suppressed", families=("logreg",), folds=5)
    assert "lookup" not in cont.accuracies
    # a preserved attribute is not judged by lookups
    kept = attribute_report("S", s, x, xp, role="preserved", families=("logreg",), folds=5)
    assert "lookup" not in kept.accuracies
