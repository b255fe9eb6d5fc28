"""``ot_repair``'s cell fit steps: what finer than a cell is not released
(docs/calibration.md, "Cells: what a finite-sample repair leaves").

Two kinds of partition, one apply path: both are served by a chained
:class:`mass.modifiers.cells.CellsModifier` (kind ``cells``) after the transport, which reads
the row's group and releases its cell's vector:

- k-means cells (``cell_rows`` or ``cell_count``, ``cell_axes`` 0): the nearest of a few
  k-means centres of the repaired fit rows (rule ``nearest``); with ``cells_by_preserved`` the
  centres are fitted within each class of the preserved joint label and a linear predictor
  picks the class (docs/calibration.md, "Cells by R").
- rank cells (``cell_axes`` > 0): a row's cell is its bin along each of ``cell_axes`` axes of
  its group (a class of the preserved label, or one group), released as the cell's mean
  (rule ``grid``). ``cell_edges: common``: one partition per group, the same edges for every
  suppressed class, so a row's cell never depends on S and a released vector names one cell
  (docs/calibration.md, "One partition"). ``class`` (older specs): the edges of the row's
  *predicted* suppressed class, shrunk towards the group's by ``cell_prior_rows``
  (docs/calibration.md, "Rank cells"); the cell then depends on the transport's predicted
  class, so these stay inside :class:`mass.modifiers.sliced_repair.SlicedRepairModifier`,
  where older saved models of both kinds (and ``codebook`` chains) keep loading. ``cell_basis``: the group's
  principal axes (``pca``) or those of its covariance within the suppressed classes
  (``within_s``). Levels per axis: about ``cell_rows`` fit rows of each (group, suppressed
  class) pair per cell (at least 2), or ``cell_count`` cells in all, which calibration sets
  to what the release's rows can certify (:func:`mass.metrics.certificate.cells_allowed`).

Every step returns fitted values; nothing here writes into a modifier.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from mass.methods.ot_repair.params import RepairParams
from mass.methods.ot_repair.predictors import classes_present, linear_class_predictor
from mass.modifiers import l2_normalize
from mass.modifiers.cells import CellsFit, CellsModifier, CellsSpec
from mass.modifiers.sliced_repair import CellPartition, rank_cell

# ``cell_value: source``: a released vector pools at least this many input rows (else all)
SOURCE_MIN_ROWS = 10

# a class with fewer fit rows in a group than this many per bin takes the group's common edges
RANK_MIN_ROWS_PER_BIN = 2


def _kmeans(z: np.ndarray, cells: int, seed: int) -> np.ndarray:
    from sklearn.cluster import KMeans

    if cells <= 1:
        return z.mean(axis=0, keepdims=True)
    return KMeans(n_clusters=cells, n_init=3, random_state=seed).fit(z).cluster_centers_


def fit_cells(z: torch.Tensor, y: torch.Tensor, k: int, p: RepairParams,
              r: tuple[torch.Tensor, int] | None = None,
              scale: float = 1.0) -> CellsModifier:  # fmt: skip
    """The ``nearest`` cells of ``cell_rows``: k-means (k-means++, 3 starts, seeded) on the repaired
    fit rows ``z``, M = n / (cell_rows * classes present) centres, or M = ``cell_count``
    when set (at least 2, at most n); unit-normalised when the output is. ``r`` (the
    preserved joint label and its class count): the same rule within each class of it (with
    ``cell_count``, each class its share of M by its fit rows; at least 1 centre each), and
    a multinomial logistic regression on ``z`` stored to pick a row's class. ``scale``: the
    count of ``cell_rows`` is that of ``scale`` times the fit rows (``cell_resolution_rows``)."""
    zz = z.double().numpy()
    rr = None if r is None else r[0].numpy()
    classes = None if rr is None else np.unique(rr)
    groups = [zz] if classes is None else [zz[rr == c] for c in classes]
    least = 2 if rr is None else 1
    if p.cell_count:  # cells in all, shared among the groups by their fit rows
        want = [p.cell_count * len(g) / len(zz) for g in groups]
    else:
        want = [scale * len(g) / (p.cell_rows * classes_present(y, k)) for g in groups]
    parts = [_kmeans(g, int(min(len(g), max(least, round(m)))), p.seed)
             for g, m in zip(groups, want, strict=True)]  # fmt: skip
    centres = torch.from_numpy(np.vstack(parts)).float()
    centres = l2_normalize(centres) if p.renormalize else centres
    d = z.shape[1]
    if r is None:
        fit = CellsFit(centres, torch.zeros(1, d), torch.zeros(1),
                       torch.zeros(len(centres), dtype=torch.long))  # fmt: skip
        spec = CellsSpec(dim=d, cells=len(centres))
    else:
        owner = torch.from_numpy(np.repeat(classes, [len(c) for c in parts]).astype(np.int64))
        fit = CellsFit(centres, *linear_class_predictor(zz, rr, r[1]), centre_group=owner)
        spec = CellsSpec(dim=d, cells=len(centres), groups=r[1])
    mod = CellsModifier.from_fit(spec, fit)
    if p.cell_centre == "mean":
        return mod
    # the median of each k-means cluster's fit rows (their own group, the nearest centre), the
    # rows whose mean the centre is
    with torch.no_grad():
        cell = mod.cell_of(z.float(), None if r is None else r[0].long())
    values, _ = cell_means(z, cell, len(centres), centres.double(), p.renormalize, "median")
    fit = replace(fit, values=values.float())
    return CellsModifier.from_fit(replace(spec, values=True), fit)


def grid_cells(part: CellPartition, shape: dict[str, Any], centres: torch.Tensor) -> CellsModifier:
    """The ``grid`` cells of a one-partition rank cell fit (``cell_shared``): the partition
    ``part`` and every cell's vector ``centres`` [G, levels ** m, d]."""
    if not shape["cell_shared"]:
        raise ValueError("grid cells need one partition (cell_edges: common)")
    g, m, lv = shape["cell_groups"], shape["cell_axes"], shape["cell_levels"]
    spec = CellsSpec(dim=centres.shape[-1], cells=g * lv**m, groups=g, rule="grid", axes=m,
                     levels=lv)  # fmt: skip
    fit = CellsFit(centres.reshape(g * lv**m, -1), part.group_weight, part.group_bias,
                   group_mean=part.group_mean, axes=part.axes, edges=part.edges[:, 0])  # fmt: skip
    return CellsModifier.from_fit(spec, fit)


def rank_cell_shape(y: torch.Tensor, k: int, groups: int, p, scale: float = 1.0) -> dict[str, Any]:
    """The spec fields of rank cells: levels per axis such that a cell holds about
    ``cell_rows`` fit rows of each (group, suppressed class) pair, or (``cell_count``) such
    that the groups hold at most ``cell_count`` cells in all (a ceiling: the count a release
    can certify, which rounding up would exceed, e.g. 72 cells for 70); at least 2. ``scale``:
    ``cell_rows`` counted on ``scale`` times the fit rows (``cell_resolution_rows``)."""
    if p.cell_count:
        levels = math.floor((p.cell_count / groups) ** (1.0 / p.cell_axes) + 1e-9)
    else:
        per_group = scale * len(y) / (classes_present(y, k) * groups) / p.cell_rows
        levels = int(round(per_group ** (1.0 / p.cell_axes)))
    levels = max(2, levels)
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


def _edges(t: torch.Tensor, cls_g: torch.Tensor, classes: int, levels: int, shared: bool,
           p: RepairParams) -> torch.Tensor:  # fmt: skip
    """Bin edges [1 or classes, m, levels - 1] of one group from its rows' axis coordinates
    ``t`` [n, m]: the group's quantiles for every class (``shared``), or each predicted
    class's own, shrunk towards them by ``cell_prior_rows``."""
    qs = torch.linspace(0, 1, levels + 1, dtype=torch.float64)[1:-1]
    common = torch.quantile(t, qs, dim=0).T  # [m, levels - 1]
    if shared:
        return common.float()[None]
    out = []
    for c in range(classes):
        own = cls_g == c
        edges = common
        n = int(own.sum())
        if n >= RANK_MIN_ROWS_PER_BIN * levels:
            w = n / (n + p.cell_prior_rows)
            edges = w * torch.quantile(t[own], qs, dim=0).T + (1 - w) * common
        out.append(edges.float())
    return torch.stack(out)


def fit_partition(z: torch.Tensor, cls: torch.Tensor, y: torch.Tensor, group: torch.Tensor,
                  shape: dict[str, Any], classes: int, p: RepairParams) -> CellPartition:  # fmt: skip
    """The rank cells' partition of the repaired fit rows ``z`` (their predicted and true
    suppressed classes ``cls``, ``y``; their groups ``group``, the preserved joint label or
    zeros; ``shape`` from :func:`rank_cell_shape`): per group its mean, axes and bin edges,
    and a linear predictor of the group. A group without fit rows keeps zeros."""
    g_count, m, lv = shape["cell_groups"], shape["cell_axes"], shape["cell_levels"]
    d, zz = z.shape[1], z.double()
    mean_all, axes_all = torch.zeros(g_count, d), torch.zeros(g_count, m, d)
    edges_all = torch.zeros(g_count, 1 if shape["cell_shared"] else classes, m, lv - 1)
    for g in torch.unique(group).tolist():
        rows = group == g
        zg = zz[rows]
        mean = zg.mean(dim=0)
        axes = group_axes(zg, y[rows], m, p.cell_basis)
        edges_all[g] = _edges((zg - mean) @ axes.T, cls[rows], classes, lv,
                              shape["cell_shared"], p)  # fmt: skip
        mean_all[g], axes_all[g] = mean.float(), axes.float()
    weight, bias = linear_class_predictor(zz.numpy(), group.numpy(), g_count)
    return CellPartition(weight, bias, mean_all, axes_all, edges_all)


def cell_means(
    z: torch.Tensor,
    key: torch.Tensor,
    slots: int,
    fallback: torch.Tensor,
    renormalize: bool,
    centre: str = "mean",
) -> tuple[torch.Tensor, torch.Tensor]:
    """(every slot of ``key``'s vector [slots, d], float64: the mean of its fit rows ``z``, or
    their coordinate-wise median (``centre``), unit-normalised when ``renormalize``; rows per
    slot): a slot without rows takes its ``fallback`` row."""
    zz = z.double()
    counts = torch.bincount(key, minlength=slots)
    if centre == "median":
        out = fallback.clone()
        order = torch.argsort(key, stable=True)
        bounds = torch.cumsum(counts, 0).tolist()
        for slot, (lo, hi) in enumerate(zip([0, *bounds[:-1]], bounds, strict=True)):
            if hi > lo:  # numpy's median: the two middle values' mean for an even count
                out[slot] = torch.from_numpy(np.median(zz[order[lo:hi]].numpy(), axis=0))
    else:
        sums = torch.zeros(slots, zz.shape[1], dtype=torch.float64)
        sums.index_add_(0, key, zz)
        out = torch.where(counts[:, None] > 0, sums / counts.clamp(min=1)[:, None], fallback)
    return (l2_normalize(out) if renormalize else out), counts


def fit_centres(z: torch.Tensor, cls: torch.Tensor, group: torch.Tensor, part: CellPartition,
                shape: dict[str, Any], renormalize: bool,
                centre: str = "mean") -> tuple[torch.Tensor, dict[str, int]]:  # fmt: skip
    """Every rank cell's centre [G, levels ** m, d] (float32): the mean (or median,
    ``centre``) of its fit rows ``z`` (unit-normalised when the output is), or its group's
    mean for an empty cell; and how many cells hold fit rows with the fewest, median and most
    fit rows such a cell holds."""
    g_count, size = shape["cell_groups"], shape["cell_levels"] ** shape["cell_axes"]
    _, cell = rank_cell(part, shape["cell_shared"], shape["cell_levels"], z, cls, group)
    fallback = part.group_mean.double().repeat_interleave(size, dim=0)
    centres, counts = cell_means(z, group * size + cell, g_count * size, fallback, renormalize,
                                 centre)  # fmt: skip
    held = counts[counts > 0]
    stats = {"cells": int(len(held)), "rows_min": int(held.min()),
             "rows_median": int(held.median()), "rows_max": int(held.max())}  # fmt: skip
    return centres.view(g_count, size, -1).float(), stats


def source_valued(book: CellsModifier, z: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
                  k: int, renormalize: bool) -> CellsModifier:  # fmt: skip
    """``book`` releasing, for each of its distinct released vectors, the mean of the fit rows
    it releases as they came in (``x``, the rows whose chain output ``z`` the cells read), each
    suppressed class ``y`` weighted by its share of all fit rows over the classes present
    (``cell_value: source``, docs/calibration.md, "What a cell releases"). Cells that released
    one vector release one vector still (merged clusters stay merged). A vector that pools
    fewer than :data:`SOURCE_MIN_ROWS` fit rows (none included) takes the class-weighted mean of
    all of them instead: no released vector is one input row, or an average of so few that
    it stands for them."""
    with torch.no_grad():
        released = book.values if book.spec.values else book.centres
        _, key_of_cell = torch.unique(released, dim=0, return_inverse=True)
        slots = int(key_of_cell.max()) + 1
        key = key_of_cell[book.cell_of(z.float())] * k + y.long()
    xx = x.double()
    counts = torch.bincount(key, minlength=slots * k).view(slots, k).double()
    sums = torch.zeros(slots * k, xx.shape[1], dtype=torch.float64).index_add_(0, key, xx)
    means = sums.view(slots, k, -1) / counts.clamp(min=1)[..., None]
    prior = counts.sum(dim=0) / counts.sum()
    weight = prior[None, :] * (counts > 0)
    class_means = sums.view(slots, k, -1).sum(dim=0) / counts.sum(dim=0).clamp(min=1)[:, None]
    overall = (prior[:, None] * class_means).sum(dim=0)
    total = weight.sum(dim=1, keepdim=True)
    pooled = counts.sum(dim=1, keepdim=True) >= SOURCE_MIN_ROWS
    value = torch.where(pooled, (weight[..., None] * means).sum(dim=1) / total.clamp(min=1e-12),
                        overall)  # fmt: skip
    value = l2_normalize(value) if renormalize else value
    state = {n: b for n, b in book.state_dict().items() if n != "values"}
    fit = CellsFit(**state, values=value[key_of_cell].float())
    return CellsModifier.from_fit(replace(book.spec, values=True), fit)
