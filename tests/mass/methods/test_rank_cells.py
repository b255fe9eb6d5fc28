"""Rank cells of one partition (``cell_edges: common``): a row's cell never depends on its
suppressed class, a released vector names one cell, and the cells follow the rows
(issue 35 items 1 and 3; docs/calibration.md, "one partition")."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bench.cells_scale import lookup_attack, scale_case
from mass.calibrate.space import PARTITION
from mass.errors import ConfigError
from mass.methods import get_method
from mass.methods.ot_repair.balance import (
    BALANCE_ALPHA,
    _pvalues,
    balance_split,
    grid_pairs,
    merge_cells,
)
from mass.modifiers import (
    CellsModifier,
    ChainModifier,
    SlicedRepairModifier,
    load_modifier,
    save_modifier,
)

COMMON = {"cell_rows": 10, "cell_axes": 1, "cells_by_preserved": True, "cell_edges": "common"}


def _fit(n: int, params: dict, seed: int = 1):
    torch.set_num_threads(1)
    return get_method("ot_repair").fit(scale_case(n, seed=seed), suppress=["s"],
                                       preserve=["r"], seed=0, progress=False, params=params)  # fmt: skip


def served_cells(mod) -> tuple[list, SlicedRepairModifier, CellsModifier | None]:
    """(the parts before the last transport, the transport, its cells) of a fitted ot_repair
    modifier with rank cells: one partition's cells are a chained ``cells`` part; the older
    per-class edges' (None here) are held by the transport itself."""
    parts = list(mod.parts) if isinstance(mod, ChainModifier) else [mod]
    if isinstance(parts[-1], CellsModifier):
        return parts[:-2], parts[-2], parts[-1]
    return parts[:-1], parts[-1], None


@torch.no_grad()
def _cells(mod, x: np.ndarray, swap: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(group, cell within the group) of rows ``x`` as served; ``swap``: every row's predicted
    suppressed class moved to the next one where the cell reads it. One partition's cells
    take no class at all (kind ``cells`` sees only the repaired row)."""
    before, repair, cells = served_cells(mod)
    h = torch.from_numpy(x)
    for part in before:
        h = part(h)
    z, cls = repair.transport(h)
    if cells is None:
        return repair.cell_of(z, (cls + 1) % repair.spec.classes if swap else cls)
    g = cells.group_of(z)
    return g, cells.cell_of(z, g) - g * cells.spec.levels**cells.spec.axes


def _levels(mod) -> int:
    _, repair, cells = served_cells(mod)
    return repair.spec.cell_levels if cells is None else cells.spec.levels


def test_a_rows_cell_does_not_change_when_its_predicted_class_does():
    """One partition: swapping every row's predicted suppressed class leaves its (group,
    cell) as it was; with the per-class edges of older specs many rows change cell."""
    x = scale_case(3000, seed=7).x
    for edges, same in (("common", True), ("class", False)):
        mod = _fit(3000, {**COMMON, "cell_edges": edges}).modifier
        assert (served_cells(mod)[2] is not None) == same  # one partition: its own part
        (g0, c0), (g1, c1) = _cells(mod, x, False), _cells(mod, x, True)
        assert torch.equal(g0, g1)
        changed = float((c0 != c1).float().mean())
        assert (changed == 0.0) if same else (changed > 0.2), (edges, changed)


def test_every_row_of_a_cell_is_released_as_one_vector_and_a_vector_names_one_cell(tmp_path):
    """Fresh rows: the distinct released vectors are exactly the distinct (group, cell)
    keys, one each; the fit saves, loads (with cell_shared) and serves the same release."""
    fit = _fit(3000, {**COMMON, "cell_basis": "within_s", "cell_axes": 2})
    mod, x = fit.modifier, scale_case(4000, seed=8).x
    g, c = _cells(mod, x, False)
    key = (g * _levels(mod) ** 2 + c).numpy()
    with torch.no_grad():
        rel = mod(torch.from_numpy(x)).numpy()
    _, vec = np.unique(rel, axis=0, return_inverse=True)
    pairs = np.unique(np.c_[key, vec.ravel()], axis=0)
    assert len(pairs) == len(np.unique(key)) == len(np.unique(vec)), len(pairs)
    save_modifier(mod, str(tmp_path / "m.pt"), method="ot_repair")
    loaded = load_modifier(str(tmp_path / "m.pt"))
    cells = served_cells(loaded)[2]
    assert cells.spec.rule == "grid" and cells.edges.shape == (2, 2, _levels(mod) - 1)
    with torch.no_grad():
        assert torch.equal(loaded(torch.from_numpy(x)), mod(torch.from_numpy(x)))


def test_more_fit_rows_give_more_cells_of_as_many_rows():
    small, large = _fit(1500, COMMON), _fit(6000, COMMON, seed=2)
    assert _levels(large.modifier) >= 3 * _levels(small.modifier)
    assert large.extra["cells"] >= 3 * small.extra["cells"], (small.extra, large.extra)
    for fit in (small, large):  # the rows per cell stay at about cell_rows per S class (2)
        rows = fit.extra["rows_per_cell"]
        assert 15 <= rows["min"] and rows["max"] <= 25, rows


OLD_RANKS = {"cell_rows": 10, "cell_axes": 1, "cells_by_preserved": True}  # ot-repair+ranks|R


@pytest.mark.parametrize(
    "params",
    [
        pytest.param(PARTITION, id="partition"),
        pytest.param({**PARTITION, "cell_axes": 2}, id="partition2"),
        pytest.param({**PARTITION, "cell_axes": 2, "cell_balance": 0.3}, id="balanced2"),
        pytest.param(OLD_RANKS, id="old-per-class-edges",
                     marks=pytest.mark.xfail(strict=True, reason="the leak grows")),
    ],
)  # fmt: skip
@pytest.mark.slow
def test_the_leak_does_not_grow_from_2k_to_10k_fresh_rows(params):
    """One model fitted on 6,000 rows releases 2,000 and 10,000 fresh rows; the
    per-released-vector lookup (the Bayes rule of a cell release, learned on one half of
    the release) reads s (0.5 each) within 0.02 of chance on both with calibration's
    one-partition candidates. The per-class edges of the older candidate
    ``ot-repair+ranks|R`` read 0.524 on 2,000 and 0.536 on 10,000: it fails (strict xfail)."""
    mod = _fit(6000, params).modifier
    read = {}
    for n, seed in ((2000, 100), (10000, 101)):
        ds = scale_case(n, seed=seed)
        with torch.no_grad():
            rel = mod(torch.from_numpy(ds.x)).numpy()
        read[n] = lookup_attack(rel, ds.labels["s"])
    assert max(read.values()) <= 0.52, read


def test_an_old_spec_without_cell_shared_loads_as_the_per_class_edges_it_was_fitted_with():
    """Specs saved before ``cell_shared`` existed (runs/, signed exports) have no such key:
    they build the per-class edges buffer and serve exactly what they served."""
    from mass.modifiers.base import build

    mod = _fit(1500, {**COMMON, "cell_edges": "class"}).modifier
    old = mod.spec.to_dict()
    old.pop("cell_shared")
    rebuilt = build("sliced_repair", old)
    rebuilt.load_state_dict(mod.state_dict())
    x = torch.from_numpy(scale_case(500, seed=9).x)
    with torch.no_grad():
        assert not rebuilt.spec.cell_shared and torch.equal(rebuilt.eval()(x), mod(x))


BALANCED = {**PARTITION, "cell_balance": 0.3}  # ot-repair+balanced|R


def test_cell_balance_off_fits_the_modifier_of_today_byte_for_byte():
    """``cell_balance: 0`` (the default) holds no row out and merges nothing: the same
    tensors as a fit without the knob; on, the fit holds out 30 % and merges cells."""
    today, off = _fit(1500, PARTITION), _fit(1500, {**PARTITION, "cell_balance": 0.0})
    a, b = today.modifier.state_dict(), off.modifier.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert "clusters" not in off.extra
    on = _fit(1500, BALANCED)
    held, clusters = on.extra["held_rows"], on.extra["clusters"]
    assert abs(held - 450) <= 2 and clusters < on.extra["cells"], on.extra  # rounded per stratum


def test_a_merged_cluster_releases_one_vector_of_neighbouring_cells():
    """Cells merged into a cluster share one centre (identical bytes), a cluster is a run of
    neighbouring bins on the one axis, the distinct centres are the clusters the fit counts,
    and fresh rows are released as exactly as many vectors as the clusters they fall in."""
    fit = _fit(3000, BALANCED)
    mod, clusters = fit.modifier, 0
    first, last, cells = mod.parts  # passes: 2, then the cells
    centres = cells.centres.view(cells.spec.groups, cells.spec.levels, -1)  # one axis
    for g in range(cells.spec.groups):
        cen = centres[g].numpy()
        _, run = np.unique(cen, axis=0, return_inverse=True)
        run = run.ravel()
        starts = np.r_[True, run[1:] != run[:-1]]
        assert starts.sum() == len(np.unique(run)), "a cluster is not one run of bins"
        clusters += len(np.unique(run))
    assert clusters == fit.extra["clusters"], (clusters, fit.extra)
    assert fit.extra["held_rows_per_cluster"]["min"] >= 30
    x = torch.from_numpy(scale_case(4000, seed=8).x)
    with torch.no_grad():
        z, _ = last.transport(first(x))
        rel = mod(x).numpy()
        hit = np.unique(cells.centres[cells.cell_of(z)].numpy(), axis=0)
    assert len(np.unique(rel, axis=0)) == len(hit) <= clusters


def test_cells_merge_until_every_cluster_is_balanced_and_large_enough():
    """Held-out S counts of 6 bins: bins 1 and 2 are skewed opposite ways and merge with each
    other (the neighbour that balances); sparse bins join a neighbour; every cluster ends with
    ``min_rows`` held-out rows and passes the test against the group's proportions."""
    counts = np.array([[20, 20], [40, 5], [5, 40], [20, 21], [1, 2], [19, 20]], dtype=float)
    label = merge_cells(counts, grid_pairs(6, 1), min_rows=30)
    assert label[1] == label[2] and label[0] != label[1], label
    assert label[4] in (label[3], label[5]), label
    held = np.zeros((label.max() + 1, 2))
    np.add.at(held, label, counts)
    assert held.sum(axis=1).min() >= 30
    ref = counts.sum(axis=0) / counts.sum()
    assert _pvalues(held, ref).min() >= BALANCE_ALPHA / len(held), held


def test_two_axes_neighbours_are_the_grid_neighbours():
    pairs = {tuple(p) for p in grid_pairs(3, 2).tolist()}  # cell = b0 + 3 b1
    assert pairs == {(0, 1), (1, 2), (3, 4), (4, 5), (6, 7), (7, 8),
                     (0, 3), (3, 6), (1, 4), (4, 7), (2, 5), (5, 8)}  # fmt: skip


def test_the_held_out_split_is_seeded_and_stratified():
    y = torch.from_numpy(np.r_[np.zeros(100), np.ones(40), np.zeros(1)].astype(np.int64))
    group = torch.from_numpy(np.r_[np.zeros(140), np.ones(1)].astype(np.int64))
    fit, held = balance_split(y, group, 0.3, seed=0)
    assert np.array_equal(held, balance_split(y, group, 0.3, seed=0)[1])
    assert sorted(np.r_[fit, held].tolist()) == list(range(141))
    assert (y[held] == 0).sum() == 30 and (y[held] == 1).sum() == 12 and 140 in fit


def test_a_skewed_small_set_reaches_a_model_and_too_few_fit_rows_a_clear_error():
    """600 rows, s at 93 % (40 minority rows), r with a class of one row: the balanced fit
    gives a model that releases; holding out so much that the minority class keeps fewer than
    ``min_class_rows`` fit rows is refused by name."""
    ds = scale_case(600, seed=3)
    s = np.zeros(600, dtype=np.int64)
    s[:40] = 1
    r = ds.labels["r"].copy()
    r[0] = 2
    ds.labels.update(s=s, r=r)
    ds.encodings["r"] = type(ds.encodings["r"])("r", (0, 1, 2))
    fit = get_method("ot_repair").fit(ds, suppress=["s"], preserve=["r"], seed=0,
                                      progress=False, params={**BALANCED, "cell_axes": 2})  # fmt: skip
    with torch.no_grad():
        rel = fit.modifier(torch.from_numpy(ds.x))
    assert torch.isfinite(rel).all() and fit.extra["clusters"] >= 1
    with pytest.raises(ConfigError, match="cell_balance=0.6 held out"):
        get_method("ot_repair").fit(ds, suppress=["s"], preserve=["r"], seed=0, progress=False,
                                    params={**BALANCED, "cell_balance": 0.6})  # fmt: skip


@pytest.mark.xfail(strict=True, reason="on scale_case the held-out merge does not stop it")
def test_the_balanced_partition_reads_within_a_point_of_the_majority_on_10k_fresh_rows():
    """The aim of ``cell_balance`` (issue 35): fitted on 6,000 rows, the two-axis balanced
    partition's lookup on 10,000 fresh rows within +0.01 of the majority (0.5032). Measured
    0.5174 (+0.014; partition2|R without it 0.512): the residual S skew of this case is
    smooth along the cells' axes, neighbouring cells share it, and 30-50 held-out rows per
    cluster cannot see a skew of 0.02 (docs/journal/cells-2026-11-28.md). On `labsup` the
    same candidate read +0.003 at 10k (real data, not available to the tests)."""
    mod = _fit(6000, {**PARTITION, "cell_axes": 2, "cell_balance": 0.3}).modifier
    ds = scale_case(10000, seed=101)
    with torch.no_grad():
        rel = mod(torch.from_numpy(ds.x)).numpy()
    s = ds.labels["s"]
    assert lookup_attack(rel, s) <= np.bincount(s).max() / len(s) + 0.01


@pytest.mark.parametrize(
    "count,groups,axes,levels",
    [
        (70, 2, 2, 5),  # 35 per group: sqrt 5.92 rounded to 6 gave 72 cells, over the 70 asked
        (72, 2, 2, 6),  # exactly 6 x 6 per group
        (54, 1, 2, 7),  # 7.35 -> 7 (49 cells)
        (3, 2, 2, 2),  # fewer than 2 x 2 per group: the 2-level minimum
        (27, 1, 3, 3),  # a cube root that floating point leaves just under 3
    ],
)
def test_a_cell_count_is_a_ceiling_the_partition_never_exceeds(count, groups, axes, levels):
    """``cell_count`` is what a release can certify: the partition takes the most levels per
    axis whose cells stay within it (only the 2-level minimum may exceed it)."""
    from mass.methods.ot_repair.cells import rank_cell_shape
    from mass.methods.ot_repair.params import RepairParams

    p = RepairParams(cell_count=count, cell_axes=axes)
    shape = rank_cell_shape(torch.zeros(100, dtype=torch.long), 2, groups, p)
    assert shape["cell_levels"] == levels
    assert groups * levels**axes <= count or levels == 2
