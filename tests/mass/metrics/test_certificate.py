"""The cell-release certificate (mass.metrics.certificate): hand-computed numbers, the plug-in
argument checked by brute force, coverage on a known distribution, refusal of continuous
releases, and real data shapes reaching a verdict."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.stats import beta

from mass.metrics.certificate import certify, certify_cells


def _cells(table: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Rows from a cells x classes count table."""
    cells, s = [], []
    for c, row in enumerate(table):
        for k, m in enumerate(row):
            cells += [c] * m
            s += [k] * m
    return np.array(cells), np.array(s)


def test_hand_computed_certificate():
    # cell 0: 4 of class a, 2 of class b; cell 1: 1 a, 5 b. n = 12, n_a = 5, n_b = 7.
    cells, s = _cells([[4, 2], [1, 5]])
    cert = certify_cells(cells, np.where(s == 0, "a", "b"), confidence=0.95)
    # accuracy: the plug-in hits 4 + 5 = 9 of 12; one-sided Clopper-Pearson at delta 0.05
    assert cert.plugin_accuracy == pytest.approx(9 / 12)
    assert cert.accuracy == pytest.approx(beta.ppf(0.95, 10, 3))
    assert 0.9 < cert.accuracy < 0.95  # 0.9288 by scipy: the bound is well above 0.75
    # balanced: (max(4/5, 2/7) + max(1/5, 5/7)) / 2, plus Hoeffding with sum 1/n_s = 1/5 + 1/7
    plugin = (4 / 5 + 5 / 7) / 2
    assert cert.plugin_balanced == pytest.approx(plugin)
    slack = np.sqrt(np.log(20) * (1 / 5 + 1 / 7) / 8)
    assert cert.balanced == pytest.approx(min(1.0, plugin + slack))
    assert (cert.rows, cert.cells, cert.classes, cert.delta) == (12, 2, 2, 0.05)
    assert cert.rows_per_cell == {"min": 6, "median": 6.0, "max": 6}


def test_plugin_is_the_best_function_of_the_cell():
    """The bound rests on the plug-in maximising the empirical (balanced) accuracy over every
    map cell -> class: checked against all 3^4 maps."""
    rng = np.random.default_rng(3)
    cells, s = rng.integers(0, 4, 60), rng.integers(0, 3, 60)
    cert = certify_cells(cells, s)
    n_s = np.bincount(s)
    best_acc = best_bal = 0.0
    for f in itertools.product(range(3), repeat=4):
        pred = np.asarray(f)[cells]
        best_acc = max(best_acc, float((pred == s).mean()))
        best_bal = max(best_bal, float(np.mean([(pred[s == k] == k).sum() / n_s[k]
                                                for k in range(3)])))  # fmt: skip
    assert cert.plugin_accuracy == pytest.approx(best_acc)
    assert cert.plugin_balanced == pytest.approx(best_bal)


def test_bounds_cover_the_bayes_optimum_on_a_known_distribution():
    """Rows drawn from a known P(cell, s) with clear majorities (where the plug-in alone falls
    below the truth about half the time): each bound holds in >= 95 % of 300 draws."""
    joint = np.array([[0.20, 0.04, 0.02], [0.03, 0.15, 0.04], [0.02, 0.03, 0.12],
                      [0.10, 0.09, 0.08], [0.01, 0.01, 0.06]])  # fmt: skip
    joint /= joint.sum()
    acc_star = joint.max(axis=1).sum()
    bal_star = (joint / joint.sum(axis=0)).max(axis=1).sum() / 3
    rng = np.random.default_rng(0)
    miss_acc = miss_bal = plugin_below = 0
    for _ in range(300):
        flat = rng.choice(joint.size, size=400, p=joint.ravel())
        cert = certify_cells(flat // 3, flat % 3)
        miss_acc += cert.accuracy < acc_star
        miss_bal += cert.balanced < bal_star
        plugin_below += cert.plugin_accuracy < acc_star
    assert miss_acc <= 15 and miss_bal <= 15
    assert plugin_below >= 60  # the test can tell a bound without its confidence term


def test_skewed_cell_raises_the_bound():
    even, s = _cells([[250, 250]] * 10)
    base = certify_cells(even, s)
    skewed, s2 = _cells([[250, 250]] * 9 + [[400, 100]])
    cert = certify_cells(skewed, s2)
    assert cert.accuracy > base.accuracy + 0.02
    assert cert.balanced > base.balanced + 0.02


def test_more_rows_of_the_same_balanced_cells_lower_the_bound():
    bounds = []
    for per in (50, 500, 5000):
        cells, s = _cells([[per, per]] * 10)
        c = certify_cells(cells, s)
        bounds.append((c.accuracy, c.balanced))
    assert bounds[0][0] > bounds[1][0] > bounds[2][0] > 0.5
    assert bounds[0][1] > bounds[1][1] > bounds[2][1] > 0.5
    # 10,000 rows in 10 balanced cells, balanced binary S: within 0.02 of chance
    assert bounds[1][1] < 0.52


def test_continuous_release_gets_no_certificate():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(200, 8)).astype(np.float32)
    cert = certify(x, rng.integers(0, 2, 200))
    assert not cert.certified and cert.accuracy is None and cert.balanced is None
    assert cert.reason.startswith("continuous release: 200 distinct vectors for 200 rows")
    assert cert.to_dict()["certified"] is False


def test_vectors_name_cells_by_their_exact_bytes():
    """Two vectors one ulp apart are two cells (an attacker tells them apart); the same
    vectors repeated are one cell each."""
    base = np.eye(3, dtype=np.float32)
    nudged = base[0].copy()
    nudged[0] = np.nextafter(np.float32(1), np.float32(2))
    x = np.vstack([np.repeat(base, 10, axis=0), np.repeat(nudged[None], 10, axis=0)])
    s = np.r_[[0] * 10, [1] * 20, [0] * 10]
    cert = certify(x, s)
    assert cert.cells == 4 and cert.rows_per_cell == {"min": 10, "median": 10.0, "max": 10}
    # the nudged rows share cell 0's class: merged they would look less pure, not more
    assert cert.plugin_accuracy == 1.0


def test_multiclass_bounds_are_at_least_the_plugin_and_at_most_one():
    rng = np.random.default_rng(2)
    cells, s = rng.integers(0, 6, 3000), rng.integers(0, 5, 3000)
    cert = certify_cells(cells, s)
    assert cert.classes == 5 and cert.cells == 6
    assert cert.plugin_accuracy < cert.accuracy < 0.3  # majority ~0.2
    assert cert.plugin_balanced < cert.balanced < 0.3


@pytest.mark.parametrize("counts", [[[1, 999]], [[1, 499], [0, 500]], [[2, 1998], [1, 1999]]])
def test_singleton_class_and_huge_majority_reach_a_verdict(counts):
    cells, s = _cells(counts)
    cert = certify_cells(cells, s)
    assert cert.certified
    assert 0.99 < cert.accuracy <= 1.0  # majority 0.999: the bound says so, no more
    # a class of 1-3 rows certifies (almost) nothing on the balanced scale
    smallest = int(np.bincount(s).min())
    assert cert.balanced == 1.0 if smallest == 1 else cert.balanced > 0.9


def test_one_class_and_no_rows():
    assert certify_cells([0, 0, 1, 1], ["x"] * 4).accuracy == 1.0
    empty = certify(np.zeros((0, 4), np.float32), [])
    assert not empty.certified and empty.reason == "no audited rows"


def test_expected_excess_hand_computed_and_against_simulation():
    """The planning formula (mass.metrics.certificate.expected_excess): a hand-computed value,
    and the mean certified excess of simulated ideal releases (S independent of the cell)
    within 10 % of it, balanced and skewed S alike."""
    from mass.metrics.certificate import expected_excess

    n_s = 5000
    hand = 0.5641896 / 2 * np.sqrt(99) / np.sqrt(n_s) + np.sqrt(np.log(20) * (2 / n_s) / 8)
    assert expected_excess(10_000, 100, [0.5, 0.5]) == pytest.approx(hand, rel=1e-5)
    rng = np.random.default_rng(0)
    for n, cells, shares in [(10_000, 100, [0.5, 0.5]), (2000, 50, [0.8, 0.2]),
                             (5000, 30, [0.5, 0.3, 0.15, 0.05])]:  # fmt: skip
        got = []
        for _ in range(100):
            s = rng.choice(len(shares), size=n, p=shares)
            cert = certify_cells(rng.integers(0, cells, n), s)
            got.append(cert.balanced - 1 / len(shares))
        assert np.mean(got) == pytest.approx(expected_excess(n, cells, shares), rel=0.1)


def test_cells_allowed_and_rows_needed_invert_each_other():
    from mass.metrics.certificate import cells_allowed, expected_excess, rows_needed

    shares, margin = [0.7, 0.3], 0.05
    need = rows_needed(200, shares, margin)
    assert expected_excess(need, 200, shares) <= margin < expected_excess(need - 1, 200, shares)
    assert cells_allowed(need, shares, margin) >= 200
    assert cells_allowed(need - 1, shares, margin) < 200
    # more rows allow more cells; a wider margin allows more cells; too few rows allow none
    assert cells_allowed(50_000, shares, margin) > cells_allowed(10_000, shares, margin)
    assert cells_allowed(10_000, shares, 0.10) > cells_allowed(10_000, shares, margin)
    assert cells_allowed(100, shares, 0.05) == 0
    with pytest.raises(ValueError, match="margin"):
        rows_needed(10, shares, 0.0)
