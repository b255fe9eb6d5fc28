"""``ot_repair``'s ``cell_resolution_rows``: a fit on part of the training rows gets the cells
of a fit on more rows, not a coarser partition whose cells pool more rows and read S less.
Calibration does not use it yet (docs/calibration.md, "The release model's cells": matching
the count halves the rows per cell of the release-shaped check, which then under-reads)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mass.errors import ConfigError
from mass.methods import get_method
from mass.methods._common import subset, toy_dataset
from tests.mass.methods.test_cell_centre import GRID, KMEANS


@pytest.fixture(scope="module")
def data():
    return toy_dataset(2400, dim=12, classes={"s": 2, "r": 3}, seed=5)


def _cells(ds, params) -> int:
    torch.set_num_threads(1)
    fit = get_method("ot_repair").fit(ds, suppress=["s"], preserve=["r"], params=params,
                                      seed=0, progress=False)  # fmt: skip
    with torch.no_grad():
        out = fit.modifier(torch.from_numpy(ds.x)).numpy()
    return len(np.unique(out, axis=0))


@pytest.mark.parametrize("params", [KMEANS, GRID], ids=["kmeans", "grid"])
def test_a_half_fit_at_the_full_resolution_has_the_full_fits_cells(data, params):
    half = subset(data, np.random.default_rng(0).permutation(len(data.x))[: len(data.x) // 2])
    full, coarse = _cells(data, params), _cells(half, params)
    same = _cells(half, {**params, "cell_resolution_rows": len(data.x)})
    assert coarse < 0.8 * full  # the half's own count is coarser: what calibration judged
    assert abs(same - full) <= 0.1 * full, (full, coarse, same)


def test_the_knob_needs_cell_rows(data):
    with pytest.raises(ConfigError, match="cell_resolution_rows=100 needs cell_rows"):
        _cells(data, {"cell_resolution_rows": 100})
