"""What a cell releases (``ot_repair``'s ``cell_centre``; docs/calibration.md, "What a cell
releases"): with ``median`` every row of a cell is released as the coordinate-wise median of
the cell's repaired fit rows (FARE's choice) instead of their mean. The partition, hence the
certificate and the lookups, is the mean's; only the cells' vectors change, and a model
released by its means saves the bytes it saved before."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mass.calibrate.space import PARTITION, SEARCH_SPACE
from mass.methods import get_method
from mass.methods._common import toy_dataset
from mass.methods.ot_repair.cells import SOURCE_MIN_ROWS, cell_means, source_valued
from mass.modifiers import CellsModifier, ChainModifier, load_modifier, save_modifier
from mass.modifiers.cells import CellsFit, CellsSpec

KMEANS = {"cell_rows": 10, "cells_by_preserved": True}
GRID = {"cell_rows": 10, "cell_axes": 1, "cells_by_preserved": True, "cell_edges": "common",
        "cell_basis": "within_s", "passes": 1}  # fmt: skip


@pytest.fixture(scope="module")
def data():
    return toy_dataset(1200, dim=12, classes={"s": 2, "r": 3}, seed=3)


def _fit(ds, params):
    torch.set_num_threads(1)
    return get_method("ot_repair").fit(ds, suppress=["s"], preserve=["r"], params=params,
                                       seed=0, progress=False).modifier  # fmt: skip


@torch.no_grad()
def _cells(mod: ChainModifier, x: np.ndarray, group=None):
    """(the rows' repaired vectors before the cells, their cells: as served, or within the
    given groups as the fit placed its own rows, the released vector of every cell)."""
    *before, cells = mod.parts
    z = torch.from_numpy(x)
    for part in before:
        z = part(z)
    table = cells.values if cells.spec.values else cells.centres
    return z, cells.cell_of(z, group), table


@pytest.mark.parametrize("params", [KMEANS, GRID], ids=["kmeans", "grid"])
def test_a_median_cell_releases_the_median_of_its_fit_rows_on_the_means_partition(data, params):
    mean = _fit(data, {**params, "cell_centre": "mean"})
    median = _fit(data, {**params, "cell_centre": "median"})
    r = torch.from_numpy(data.labels["r"])
    z, cell, table = _cells(median, data.x, r)  # the fit rows' own cells
    _, cell_m, table_m = _cells(mean, data.x, r)
    assert torch.equal(cell, cell_m)  # the same partition
    assert torch.equal(_cells(median, data.x)[1], _cells(mean, data.x)[1])  # also as served
    for c in torch.unique(cell).tolist():
        med = np.median(z[cell == c].double().numpy(), axis=0)
        assert np.allclose(table[c].numpy(), med / np.linalg.norm(med), atol=1e-5), c
    assert not torch.allclose(table, table_m, atol=1e-3)  # the means are other vectors
    with torch.no_grad():
        rel = median(torch.from_numpy(data.x)).numpy()
    served = _cells(median, data.x)[1].numpy()
    # one vector per cell, one cell per vector: what the certificate counts
    _, vec = np.unique(rel, axis=0, return_inverse=True)
    pairs = np.unique(np.c_[served, vec.ravel()], axis=0)
    assert len(pairs) == len(np.unique(served)) == vec.max() + 1


def test_a_median_model_saves_loads_and_a_mean_model_keeps_its_spec(tmp_path, data):
    median = _fit(data, {**KMEANS, "cell_centre": "median"})
    cells = median.parts[-1]
    assert cells.spec.values and cells.values.shape == cells.centres.shape
    save_modifier(median, str(tmp_path / "m.pt"), method="ot_repair")
    loaded = load_modifier(str(tmp_path / "m.pt"))
    x = torch.from_numpy(data.x)
    with torch.no_grad():
        assert torch.equal(loaded(x), median(x))
    mean = _fit(data, KMEANS).parts[-1]
    assert not mean.spec.values and "values" not in mean.spec.to_dict()
    assert "values" not in dict(mean.named_buffers())
    assert CellsModifier.spec_from_dict(mean.spec.to_dict()) == mean.spec  # older specs load


def test_a_values_spec_without_its_values_is_refused():
    spec = CellsSpec(dim=3, cells=2, values=True)
    mod = CellsModifier(spec)
    state = {k: v for k, v in mod.state_dict().items() if k != "values"}
    with pytest.raises(RuntimeError, match="values"):
        CellsModifier(spec).load_state_dict(state)


def test_median_of_a_slot_is_numpys_and_an_empty_slot_takes_its_fallback():
    z = torch.tensor([[1.0, 0.0], [3.0, 1.0], [2.0, 5.0], [9.0, 9.0]])
    key = torch.tensor([0, 0, 0, 2])
    fallback = torch.full((3, 2), -1.0, dtype=torch.float64)
    out, counts = cell_means(z, key, 3, fallback, False, "median")
    assert out.tolist() == [[2.0, 1.0], [-1.0, -1.0], [9.0, 9.0]] and counts.tolist() == [3, 0, 1]
    mean, _ = cell_means(z, key, 3, fallback, False)
    assert mean[0].tolist() == [2.0, 2.0]


def _cell_candidates() -> list:
    """Calibration's cell candidates (``ot_repair`` with cell_rows or cell_count)."""
    return [c for c in SEARCH_SPACE if c.method == "ot_repair"
            and (c.params.get("cell_rows") or c.params.get("cell_count"))]  # fmt: skip


def test_calibration_releases_its_cell_candidates_by_their_means():
    """The median made `alcohol`'s k-means cells readable to a retrained logistic regression
    on validation (docs/calibration.md, "What a cell releases"): calibration keeps the mean."""
    assert "cell_centre" not in PARTITION
    cells = _cell_candidates()
    assert len(cells) >= 8 and all(c.params.get("cell_centre", "mean") == "mean" for c in cells)


def test_calibration_releases_every_cell_candidate_by_its_source_mean():
    """On the text sets a frozen reader of the original rows read the repaired means of the
    certified partition inside out (`words`' word length -0.41, `names`' vowel ending -0.33)
    and their source means at 0.53 and 0.08, S and R unchanged (docs/calibration.md, "What a
    cell releases"): every cell candidate releases its cells' source means."""
    cells = _cell_candidates()
    assert len(cells) >= 8 and all(c.params.get("cell_value") == "source" for c in cells)


def test_a_median_without_cells_is_refused_naming_the_knob(data):
    from mass.errors import ConfigError

    with pytest.raises(ConfigError, match="cell_centre=median needs cells"):
        _fit(data, {"cell_centre": "median"})
    with pytest.raises(ConfigError, match="cell_centre"):
        _fit(data, {**KMEANS, "cell_centre": "mode"})


BALANCED_GRID = {**GRID, "cell_balance": 0.3, "cell_balance_rows": 10}


@pytest.mark.parametrize("params", [KMEANS, GRID, BALANCED_GRID],
                         ids=["kmeans", "grid", "balanced"])  # fmt: skip
def test_a_source_cell_releases_its_fit_rows_source_mean_each_class_at_its_share(data, params):
    """``cell_value: source``: the same partition (so the same certificate), and every
    distinct released vector is the mean of the fit rows it releases as they came in, each
    suppressed class weighted by its share of all fit rows, hand-computed here; merged
    clusters (cell_balance) stay one vector."""
    repaired = _fit(data, params)
    source = _fit(data, {**params, "cell_value": "source"})
    x = torch.from_numpy(data.x)
    with torch.no_grad():
        rel_r, rel_s = repaired(x).numpy(), source(x).numpy()
    _, vec_r = np.unique(rel_r, axis=0, return_inverse=True)
    _, vec_s = np.unique(rel_s, axis=0, return_inverse=True)
    pairs = np.unique(np.c_[vec_r.ravel(), vec_s.ravel()], axis=0)
    # each cell releases one vector (cells too small to stand for their rows all release the
    # same overall mean, so there may be fewer source vectors: checked by hand below)
    assert len(pairs) == vec_r.max() + 1
    if "cell_balance" in params:
        return  # the fit rows are a seeded part of the data: the hand check below is the others'
    unit = data.x / np.linalg.norm(data.x, axis=1, keepdims=True)
    s = data.labels["s"]
    prior = np.bincount(s) / len(s)
    overall = sum(prior[c] * unit[s == c].mean(axis=0) for c in np.unique(s))
    few = 0
    for v in np.unique(vec_r):
        rows = vec_r.ravel() == v
        present = [c for c in np.unique(s) if (rows & (s == c)).any()]
        w = np.array([prior[c] for c in present])
        mean = (
            sum(wi * unit[rows & (s == c)].mean(axis=0) for wi, c in zip(w, present, strict=True))
            / w.sum()
        )
        if rows.sum() < SOURCE_MIN_ROWS:  # too few rows to stand for: all of them instead
            mean, few = overall, few + 1
        got = rel_s[rows][0]
        assert np.allclose(got, mean / np.linalg.norm(mean), atol=1e-5), v
    assert few < len(np.unique(vec_r)) / 4
    assert not np.allclose(rel_s, rel_r, atol=1e-3)


def test_a_source_model_saves_and_loads(tmp_path, data):
    source = _fit(data, {**GRID, "cell_value": "source"})
    assert source.parts[-1].spec.values
    save_modifier(source, str(tmp_path / "m.pt"), method="ot_repair")
    x = torch.from_numpy(data.x)
    with torch.no_grad():
        assert torch.equal(load_modifier(str(tmp_path / "m.pt"))(x), source(x))


def test_source_values_without_served_cells_are_refused_naming_the_knob(data):
    from mass.errors import ConfigError

    with pytest.raises(ConfigError, match="cell_value=source needs cells"):
        _fit(data, {"cell_value": "source"})
    with pytest.raises(ConfigError, match="cell_value=source needs cells of kind"):
        _fit(data, {**GRID, "cell_edges": "class", "cell_value": "source"})


def test_no_source_vector_is_one_input_row():
    """A cell holding fewer than SOURCE_MIN_ROWS fit rows releases the class-weighted mean of
    every fit row, never its own few rows (nothing unmodified reaches the release)."""
    centres = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    book = CellsModifier.from_fit(CellsSpec(dim=2, cells=3), CellsFit(
        centres, torch.zeros(1, 2), torch.zeros(1), torch.zeros(3, dtype=torch.long)))  # fmt: skip
    lone = torch.tensor([[-1.0, 0.1]])  # the only row of cell 2
    x = torch.cat([torch.tensor([[1.0, 0.2]] * 12 + [[0.1, 1.0]] * 12), lone])
    y = torch.tensor([0, 1] * 12 + [1])
    with torch.no_grad():
        released = source_valued(book, x, x, y, 2, renormalize=False)(x)
    assert torch.allclose(released[0], torch.tensor([1.0, 0.2]))  # cell 0: its 12 rows
    overall = 12 / 25 * x[y == 0].mean(0) + 13 / 25 * x[y == 1].mean(0)
    assert torch.allclose(released[-1], overall, atol=1e-6)
    assert not torch.allclose(released[-1], lone[0])
