"""``ot_repair``'s ``cell_balance`` fit step (FARE-style, Jovanovic et al. 2023): a share of
the fit rows is held out, released through the fitted chain, and neighbouring rank cells
merge into clusters whose held-out S counts match their group's (docs/calibration.md,
"Certified cells"). Returns every cell's new centre; nothing here writes into a modifier.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from mass.methods.ot_repair.cells import cell_means
from mass.methods.ot_repair.params import RepairParams
from mass.modifiers.sliced_repair import CellPartition, rank_cell

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


def balance_cells(z: torch.Tensor, cls: torch.Tensor, group: torch.Tensor,
                  held: tuple[torch.Tensor, torch.Tensor, torch.Tensor], part: CellPartition,
                  shape: dict[str, Any], classes: int, renormalize: bool,
                  p: RepairParams) -> tuple[torch.Tensor, dict[str, Any]]:  # fmt: skip
    """Rank cells merged into S-balanced clusters measured on held-out rows: ``held`` = their
    (served group, served cell, true suppressed class). Returns every cell's centre
    [G, levels ** m, d] (float32), its cluster's vector: the mean (or median, ``cell_centre``)
    of the cluster's fit rows
    ``z`` (repaired, before the cells; ``cls`` their predicted classes, ``group`` their
    groups; unit-normalised when ``renormalize``), or its group's mean for a cluster without
    fit rows; and the clusters count and the fewest, median and most held-out rows a cluster
    holds."""
    g_count, levels, m = shape["cell_groups"], shape["cell_levels"], shape["cell_axes"]
    size = levels**m
    hg, hc, hy = (t.numpy() for t in held)
    counts = np.zeros((g_count, size, classes))
    np.add.at(counts, (hg, hc, hy), 1)
    pairs = grid_pairs(levels, m)
    labels = np.stack([merge_cells(counts[g], pairs, p.cell_balance_rows)
                       for g in range(g_count)])  # fmt: skip
    _, cell = rank_cell(part, shape["cell_shared"], levels, z, cls, group)
    key = torch.from_numpy(labels)[group, cell] + group * size  # the fit row's cluster
    fallback = part.group_mean.double().repeat_interleave(size, dim=0)
    means, _ = cell_means(z, key, g_count * size, fallback, renormalize, p.cell_centre)
    flat = (torch.from_numpy(labels) + torch.arange(g_count)[:, None] * size).view(-1)
    per = counts.sum(axis=2)
    rows = np.concatenate([np.bincount(labels[g], per[g]) for g in range(g_count)])
    stats = {"clusters": int(len(rows)), "held_rows": int(len(hg)),
             "held_rows_per_cluster": {"min": int(rows.min()), "median": int(np.median(rows)),
                                       "max": int(rows.max())}}  # fmt: skip
    return means[flat].view(g_count, size, -1).float(), stats
