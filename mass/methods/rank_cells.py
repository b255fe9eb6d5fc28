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
class) pair per cell, at least 2, so more rows give finer cells; or ``cell_count`` cells in
all, which calibration sets to what the release's rows can certify
(:func:`mass.metrics.certificate.cells_allowed`).
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
    ``cell_rows`` fit rows of each (group, suppressed class) pair, or (``cell_count``) such
    that the groups hold about ``cell_count`` cells in all; at least 2."""
    if p.cell_count:
        per_group = p.cell_count / groups
    else:
        per_group = len(y) / (classes_present(y, k) * groups) / p.cell_rows
    levels = max(2, int(round(per_group ** (1.0 / p.cell_axes))))
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


# S-balanced clusters (``cell_balance``): a cluster's held-out S counts must not differ from
# its group's at this level (chi-square, Bonferroni over the group's clusters)
BALANCE_ALPHA = 0.05


def balance_split(y: torch.Tensor, group: torch.Tensor, frac: float,
                  seed: int) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """(fit rows, held-out rows): ``frac`` of each (group, suppressed class) stratum held out,
    seeded; a stratum too small to give one row keeps all of them for the fit."""
    rng = np.random.default_rng(seed)
    stratum = (group * (int(y.max()) + 1) + y).numpy()
    held = np.zeros(len(stratum), dtype=bool)
    for s in np.unique(stratum):
        rows = np.flatnonzero(stratum == s)
        held[rng.permutation(rows)[: int(round(frac * len(rows)))]] = True
    return np.flatnonzero(~held), np.flatnonzero(held)


def grid_pairs(levels: int, axes: int) -> np.ndarray:
    """[P, 2] the neighbouring cells of a group's grid: adjacent bins along each axis."""
    idx = np.arange(levels**axes).reshape((levels,) * axes)
    pairs = []
    for a in range(axes):  # cell index = sum_a bin_a * levels**a: axis a is array axis -1-a
        lo = np.take(idx, np.arange(levels - 1), axis=axes - 1 - a).ravel()
        hi = np.take(idx, np.arange(1, levels), axis=axes - 1 - a).ravel()
        pairs.append(np.c_[lo, hi])
    return np.vstack(pairs)


def _pvalues(counts: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Chi-square p-values of each row of held-out S ``counts`` [C, k] against the group's
    proportions ``ref`` (the classes the group holds); a row without rows gets 1."""
    from scipy.stats import chi2

    live = ref > 0
    n = counts.sum(axis=1, keepdims=True)
    expected = n * ref[live]
    stat = ((counts[:, live] - expected) ** 2 / np.where(expected > 0, expected, 1)).sum(axis=1)
    return np.where(n[:, 0] > 0, chi2.sf(stat, max(int(live.sum()) - 1, 1)), 1.0)


def merge_cells(counts: np.ndarray, pairs: np.ndarray, min_rows: int) -> np.ndarray:
    """Cluster label of every cell of one group from its held-out S ``counts`` [C, k]:
    neighbouring clusters merge until every cluster holds ``min_rows`` held-out rows and its S
    counts pass the chi-square test against the group's at ``BALANCE_ALPHA`` / clusters. The
    smallest cluster below ``min_rows`` (else the least balanced) merges first, into the
    neighbour that leaves the merged cluster most balanced."""
    ref = counts.sum(axis=0) / max(counts.sum(), 1)
    label = np.arange(len(counts))
    while True:
        ids, inv = np.unique(label, return_inverse=True)
        if len(ids) == 1:
            return inv
        held = np.zeros((len(ids), counts.shape[1]))
        np.add.at(held, inv, counts)
        n, pval = held.sum(axis=1), _pvalues(held, ref)
        small = n < min_rows
        if small.any():
            worst = int(np.flatnonzero(small)[np.argmin(n[small])])
        elif pval.min() < BALANCE_ALPHA / len(ids):
            worst = int(np.argmin(pval))
        else:
            return inv
        a, b = inv[pairs[:, 0]], inv[pairs[:, 1]]
        near = np.unique(np.r_[b[a == worst], a[b == worst]])
        near = near[near != worst]
        merged = _pvalues(held[near] + held[worst], ref)
        best = near[np.lexsort((n[near], -merged))[0]]  # most balanced, then the smallest
        label = np.where(inv == worst, best, inv)


def balance_cells(mod: SlicedRepairModifier, z: torch.Tensor, cls: torch.Tensor,
                  group: torch.Tensor, held: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
                  p) -> dict[str, Any]:  # fmt: skip
    """Merge the rank cells of ``mod`` into S-balanced clusters measured on held-out rows:
    ``held`` = their (served group, served cell, true suppressed class). A cluster releases
    one vector, the mean of its fit rows ``z`` (repaired, before the cells; ``cls`` their
    predicted classes, ``group`` their groups), unit-normalised when the output is; a cluster
    without fit rows releases its group's mean. Returns the clusters count and the fewest,
    median and most held-out rows a cluster holds."""
    spec = mod.spec
    g_count, size, k = spec.cell_groups, spec.cell_levels**spec.cell_axes, spec.classes
    hg, hc, hy = (t.numpy() for t in held)
    counts = np.zeros((g_count, size, k))
    np.add.at(counts, (hg, hc, hy), 1)
    pairs = grid_pairs(spec.cell_levels, spec.cell_axes)
    labels = np.stack([merge_cells(counts[g], pairs, p.cell_balance_rows)
                       for g in range(g_count)])  # fmt: skip
    zz = z.double()
    _, cell = mod.cell_of(z, cls, group)
    key = torch.from_numpy(labels)[group, cell] + group * size  # the fit row's cluster
    sums = torch.zeros(g_count * size, zz.shape[1], dtype=torch.float64)
    sums.index_add_(0, key, zz)
    n_fit = torch.bincount(key, minlength=len(sums))
    means = torch.where(n_fit[:, None] > 0, sums / n_fit.clamp(min=1)[:, None],
                        mod.group_mean.double().repeat_interleave(size, dim=0))  # fmt: skip
    means = l2_normalize(means) if spec.renormalize else means
    flat = (torch.from_numpy(labels) + torch.arange(g_count)[:, None] * size).view(-1)
    mod.centres.copy_(means[flat].view(g_count, size, -1).float())
    per = counts.sum(axis=2)
    rows = np.concatenate([np.bincount(labels[g], per[g]) for g in range(g_count)])
    return {"clusters": int(len(rows)), "held_rows": int(len(hg)),
            "held_rows_per_cluster": {"min": int(rows.min()), "median": int(np.median(rows)),
                                      "max": int(rows.max())}}  # fmt: skip
