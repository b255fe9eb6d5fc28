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
from mass.methods.ot_repair.cells import cell_means
from mass.modifiers import CellsModifier, ChainModifier, load_modifier, save_modifier
from mass.modifiers.cells import CellsSpec

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


def test_calibration_releases_its_cell_candidates_by_their_means():
    """The median made `alcohol`'s k-means cells readable to a retrained logistic regression
    on validation (docs/calibration.md, "What a cell releases"): calibration keeps the mean."""
    assert "cell_centre" not in PARTITION
    cells = [c for c in SEARCH_SPACE if c.method == "ot_repair"
             and (c.params.get("cell_rows") or c.params.get("cell_count"))]  # fmt: skip
    assert len(cells) >= 8 and all(c.params.get("cell_centre", "mean") == "mean" for c in cells)


def test_a_median_without_cells_is_refused_naming_the_knob(data):
    from mass.errors import ConfigError

    with pytest.raises(ConfigError, match="cell_centre=median needs cells"):
        _fit(data, {"cell_centre": "median"})
    with pytest.raises(ConfigError, match="cell_centre"):
        _fit(data, {**KMEANS, "cell_centre": "mode"})
