"""Rank cells of ``ot_repair`` (``cell_axes`` > 0): the fit step that partitions the repaired
rows into cells, released as each cell's mean (served by :mod:`mass.modifiers.sliced_repair`).

Groups are the classes of the preserved joint label (one group without
``cells_by_preserved``), read at release time by a stored multinomial logistic regression on the
repaired row. Within a group a row's cell is its bin along each of ``cell_axes`` axes.

- ``cell_edges: common``: one partition per group, the same bin edges for every suppressed
  class, so a row's cell never depends on its (predicted) suppressed class and a released
  vector names exactly one cell (docs/calibration.md, "one partition").
- ``cell_edges: class`` (the older specs): the edges of the row's *predicted* suppressed
  class, shrunk towards the group's common ones by ``cell_prior_rows``; kept so that saved
  modifiers load and serve as they did (docs/calibration.md, "rank cells").
- ``cell_basis``: ``pca``, the group's top principal axes of the repaired rows; ``within_s``,
  the top axes of the pooled covariance *within* the suppressed classes (each class centred
  on its own mean), so the resolution goes where the rows vary for reasons other than S.

Levels per axis follow the fit rows: about ``cell_rows`` rows of each (group, suppressed
class) pair per cell, at least 2, so more rows give finer cells.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from mass.modifiers import l2_normalize
from mass.modifiers.sliced_repair import SlicedRepairModifier

# a class with fewer fit rows in a group than this many per bin takes the group's common edges
RANK_MIN_ROWS_PER_BIN = 2


def classes_present(y: torch.Tensor, k: int) -> int:
    """How many of the ``k`` classes of ``y`` have fit rows (at least 1)."""
    return max(int((torch.bincount(y, minlength=k) > 0).sum()), 1)


def linear_class_predictor(z: np.ndarray, r: np.ndarray, k: int) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """(weight [k, dim], bias [k]) of a multinomial logistic regression of ``r`` on ``z``;
    a class absent from ``r`` gets bias -1e9 (never predicted)."""
    from sklearn.linear_model import LogisticRegression

    weight, bias = torch.zeros(k, z.shape[1]), torch.full((k,), -1e9)
    seen = torch.as_tensor(np.unique(r))
    if len(seen) == 1:
        bias[seen] = 0.0
        return weight, bias
    lr = LogisticRegression(max_iter=1000).fit(z, r)
    coef, icpt = lr.coef_, lr.intercept_
    if len(seen) == 2:  # sklearn's binary form: one logit for the second class
        coef, icpt = np.vstack([np.zeros_like(coef), coef]), np.r_[0.0, icpt]
    weight[seen], bias[seen] = torch.from_numpy(coef).float(), torch.from_numpy(icpt).float()
    return weight, bias


def rank_cell_shape(y: torch.Tensor, k: int, groups: int, p) -> dict[str, Any]:
    """The spec fields of rank cells: levels per axis such that a cell holds about
    ``cell_rows`` fit rows of each (group, suppressed class) pair, at least 2."""
    present = classes_present(y, k)
    per_pair = len(y) / (present * groups)
    levels = max(2, int(round((per_pair / p.cell_rows) ** (1.0 / p.cell_axes))))
    return {"cell_axes": p.cell_axes, "cell_levels": levels, "cell_groups": groups,
            "cell_shared": p.cell_edges == "common"}  # fmt: skip


def group_axes(zg: torch.Tensor, yg: torch.Tensor, m: int, basis: str) -> torch.Tensor:
    """The ``m`` axes [m, dim] of a group's repaired rows ``zg`` (float64): its top principal
    axes (``pca``) or those of the pooled covariance within the suppressed classes ``yg``
    (``within_s``); zero rows where the group has fewer directions."""
    centred = zg - zg.mean(dim=0)
    if basis == "within_s":
        for c in torch.unique(yg).tolist():
            own = yg == c
            centred[own] = zg[own] - zg[own].mean(dim=0)
    vh = torch.linalg.svd(centred, full_matrices=False).Vh[:m]
    axes = torch.zeros(m, zg.shape[1], dtype=torch.float64)
    axes[: len(vh)] = vh
    return axes


def _edges(mod: SlicedRepairModifier, g: int, t: torch.Tensor, cls_g: torch.Tensor, p) -> None:
    """Bin edges of group ``g`` from its rows' axis coordinates ``t`` [n, m]: the group's
    quantiles for every class (shared), or each predicted class's own, shrunk towards them."""
    lv = mod.spec.cell_levels
    levels = torch.linspace(0, 1, lv + 1, dtype=torch.float64)[1:-1]
    common = torch.quantile(t, levels, dim=0).T  # [m, levels - 1]
    if mod.spec.cell_shared:
        mod.edges[g, 0] = common.float()
        return
    for c in range(mod.spec.classes):
        own = cls_g == c
        edges = common
        n = int(own.sum())
        if n >= RANK_MIN_ROWS_PER_BIN * lv:
            w = n / (n + p.cell_prior_rows)
            edges = w * torch.quantile(t[own], levels, dim=0).T + (1 - w) * common
        mod.edges[g, c] = edges.float()


def fit_rank_cells(mod: SlicedRepairModifier, z: torch.Tensor, cls: torch.Tensor,
                   y: torch.Tensor, group: torch.Tensor, p) -> dict[str, int]:  # fmt: skip
    """Fill the rank cells of ``mod`` from its repaired fit rows ``z``, their predicted and
    true suppressed classes ``cls``, ``y`` and their groups (the preserved joint label, or
    zeros): per group its mean, axes and bin edges, a linear predictor of the group and the
    centre (mean, unit-normalised when the output is) of every cell; an empty cell releases
    its group's mean. Returns how many cells hold fit rows and the fewest, median and most
    fit rows such a cell holds."""
    spec = mod.spec
    m, lv, zz = spec.cell_axes, spec.cell_levels, z.double()
    for g in torch.unique(group).tolist():
        rows = group == g
        zg = zz[rows]
        mean = zg.mean(dim=0)
        axes = group_axes(zg, y[rows], m, p.cell_basis)
        _edges(mod, g, (zg - mean) @ axes.T, cls[rows], p)
        mod.group_mean[g], mod.axes[g] = mean.float(), axes.float()
    weight, bias = linear_class_predictor(zz.numpy(), group.numpy(), spec.cell_groups)
    mod.group_weight.copy_(weight)
    mod.group_bias.copy_(bias)
    _, cell = mod.cell_of(z, cls, group)
    key = group * lv**m + cell
    sums = torch.zeros(spec.cell_groups * lv**m, zz.shape[1], dtype=torch.float64)
    sums.index_add_(0, key, zz)
    counts = torch.bincount(key, minlength=len(sums))
    centres = torch.where(counts[:, None] > 0, sums / counts.clamp(min=1)[:, None],
                          mod.group_mean.double().repeat_interleave(lv**m, dim=0))  # fmt: skip
    centres = l2_normalize(centres) if spec.renormalize else centres
    mod.centres.copy_(centres.view(spec.cell_groups, lv**m, -1).float())
    held = counts[counts > 0]
    return {"cells": int(len(held)), "rows_min": int(held.min()),
            "rows_median": int(held.median()), "rows_max": int(held.max())}  # fmt: skip
