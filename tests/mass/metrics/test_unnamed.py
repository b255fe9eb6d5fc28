"""Unnamed utility (mass.metrics.unnamed): a watch attribute independent of S is kept by a
method that keeps structure (plain LEACE) and lost by the last resort (leace_project)."""

import numpy as np
import pytest
import torch

from mass.methods import get_method
from mass.methods._common import toy_dataset
from mass.metrics.unnamed import (
    cell_capacity,
    cramers_v,
    distance_correlation,
    knn_overlap,
    last_resort_release,
    linear_cka,
    normalised_kept,
    structure_kept,
    structure_reference,
    unnamed_utility,
    watch_report,
)


@pytest.fixture(scope="module")
def releases():
    ds = toy_dataset(600, dim=16, classes={"s": 2, "r": 3, "w": 3}, seed=3)
    res = get_method("leace").fit(ds, suppress=["s"], preserve=["r"], params={}, progress=False)
    with torch.no_grad():
        leace = res.modifier(torch.as_tensor(ds.x)).numpy()
    last = last_resort_release(ds.x, {"s": ds.labels["s"]}, {"r": ds.labels["r"]})
    return ds, leace, last


def test_watch_kept_by_leace_and_lost_by_the_last_resort(releases):
    ds, leace, last = releases
    kw = dict(seed=0, max_rows=600, families=("logreg", "knn"))
    watch, sup = {"w": ds.labels["w"]}, {"s": ds.labels["s"]}
    kept = watch_report(ds.x, leace, watch, sup, **kw)["w"]
    lost = watch_report(ds.x, last, watch, sup, **kw)["w"]
    assert kept["original"] > 0.9 and kept["learnable"]
    assert kept["kept"] > 0.9 and lost["kept"] < 0.2
    assert kept["dependence"]["s"]["cramers_v"] < 0.1  # w was drawn independently of s
    assert kept["explained_by_s"] < 0.1  # the loss is not one S explains
    assert unnamed_utility(watch={"w": kept}) > unnamed_utility(watch={"w": lost})


def test_structure_places_leace_between_identity_and_the_last_resort(releases):
    ds, leace, last = releases
    s = ds.labels["s"]
    ref = structure_reference(ds.x, {"s": s}, {"r": ds.labels["r"]}, seed=0)
    assert ref["identity"]["knn_overlap"] == 1.0
    assert ref["identity"]["cka"] == pytest.approx(1.0) == ref["identity"]["dcor"]
    got = structure_kept(ds.x, leace, s, seed=0)
    assert got["knn_overlap"] > 0.7 > 0.3 > ref["last_resort"]["knn_overlap"]
    assert got["cka"] > ref["last_resort"]["cka"] and got["dcor"] > ref["last_resort"]["dcor"]
    assert np.isclose(ref["last_resort"]["knn_overlap"],
                      structure_kept(ds.x, last, s, seed=0)["knn_overlap"])  # fmt: skip


def test_removing_s_is_not_a_structure_loss():
    """A release that only moves each S class (what erasing S's means does) keeps every
    within-S measure at 1; neighbourhoods across S classes are not compared."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 8))
    s = rng.integers(0, 2, 300)
    moved = x + np.where(s[:, None] == 1, 5.0, -5.0) * np.eye(8)[0]
    got = structure_kept(x, moved, s, seed=0)
    assert got["cka"] > 0.999 and got["dcor"] > 0.999 and got["knn_overlap"] == 1.0
    assert knn_overlap(x, moved, np.zeros(300, np.int64)) < 0.9  # across classes it would
    assert structure_kept(x, moved, None, seed=0)["cka"] < 0.9  # globally it looks like a loss


def test_measures_on_known_cases():
    rng = np.random.default_rng(1)
    a = rng.integers(0, 3, 2000)
    assert cramers_v(a, a) == pytest.approx(1.0)
    assert cramers_v(a, rng.integers(0, 3, 2000)) < 0.06
    x = rng.normal(size=(200, 5))
    q, _ = np.linalg.qr(rng.normal(size=(5, 5)))
    assert linear_cka(x, 3.0 * x @ q) == pytest.approx(1.0)
    assert distance_correlation(x, x @ q) == pytest.approx(1.0)
    assert linear_cka(x, rng.normal(size=(200, 5))) < 0.15
    assert linear_cka(x, np.zeros((200, 5))) == 0.0
    assert normalised_kept(0.5, 0.51, 0.5) is None  # nothing learnable: undefined
    assert normalised_kept(0.75, 1.0, 0.5) == pytest.approx(0.5)
    assert unnamed_utility() is None
    assert unnamed_utility(structure={"knn_overlap": 0.4, "cka": 0.6, "dcor": 0.8}) == 0.6


def test_cell_capacity_by_hand():
    """4 cells used equally carry log2 4 = 2 bits; a balanced binary holds 1 bit, a 1:3 one
    h(1/4) = 0.811278 bits: together within 2 bits, three balanced binaries are not."""
    cells = np.repeat(np.arange(4), 4)  # 16 rows, 4 per cell
    half = np.tile([0, 1], 8)
    quarter = np.array([1, 0, 0, 0] * 4)
    cap = cell_capacity(cells, {"a": half, "b": quarter})
    assert cap["cells"] == 4 and cap["rows"] == 16
    assert cap["bits_max"] == pytest.approx(2.0) and cap["bits_rows"] == pytest.approx(2.0)
    assert cap["watch_bits"] == {"a": pytest.approx(1.0), "b": pytest.approx(0.811278, abs=1e-6)}
    assert cap["watch_bits_total"] == pytest.approx(1.811278, abs=1e-6) and cap["watch_fits"]
    third = np.repeat([0, 1], 8)
    over = cell_capacity(cells, {"a": half, "b": np.tile([0, 0, 1, 1], 4), "c": third})
    assert over["watch_bits_total"] == pytest.approx(3.0) and not over["watch_fits"]
    # skewed use of the same 4 cells: fewer bits on these rows, the same log2 M
    skew = cell_capacity(np.array([0] * 13 + [1, 2, 3]), {"a": half})
    assert skew["bits_max"] == pytest.approx(2.0) and skew["bits_rows"] < 1.0


def test_cell_capacity_is_none_for_a_continuous_release_or_no_watch():
    w = {"a": np.tile([0, 1], 8)}
    assert cell_capacity(np.arange(16), w) is None  # one vector per row: no cells
    assert cell_capacity(np.repeat(np.arange(9), 2)[:16], w) is not None  # 8 cells, 2 rows each
    assert cell_capacity(np.arange(16) // 2, {}) is None
