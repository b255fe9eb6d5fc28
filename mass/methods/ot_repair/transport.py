"""``ot_repair``'s transport fit step: the iterated sliced optimal transport (Pitie et al.
2007) that sends every class of a label to the class-weighted barycenter (docs/calibration.md,
"`ot_repair`: suppression without release noise"). Pure: takes rows, classes and knobs,
returns the fitted :class:`mass.modifiers.sliced_repair.Transport` and the rows transported.
"""

from __future__ import annotations

import numpy as np
import torch

from mass.methods.ot_repair.params import RepairParams
from mass.modifiers.sliced_repair import Transport, class_runs, map_class_runs, run_slices


def knots_of(y: torch.Tensor, q: int) -> torch.Tensor:
    """The empirical quantiles of every column of ``y`` [n, d] at q levels 0..1: [d, q]."""
    return knots_along_rows(y.T, q)


def knots_along_rows(yt: torch.Tensor, q: int) -> torch.Tensor:
    """The empirical quantiles of every row of ``yt`` [d, n] at q levels 0..1: [d, q]. Sorted
    by numpy along contiguous rows: the values of torch's sort along strided columns, at a
    fraction of its CPU time (docs/performance.md, "Calibration's fits")."""
    ys = np.sort(np.ascontiguousarray(yt.detach().cpu().numpy()), axis=1)
    ys = torch.from_numpy(ys).to(yt.device)
    pos = torch.linspace(0, yt.shape[1] - 1, q, dtype=torch.float64)
    lo = pos.floor().long()
    hi = pos.ceil().long()
    t = (pos - lo).to(yt.dtype)
    return ys[:, lo] * (1 - t) + ys[:, hi] * t


def rotation(d: int, gen: torch.Generator) -> torch.Tensor:
    q, r = torch.linalg.qr(torch.randn(d, d, generator=gen, dtype=torch.float64))
    return q * torch.sign(torch.diagonal(r))[None, :]


def discriminant_rotation(y: torch.Tensor, cls: torch.Tensor, present: list[int],
                          weights: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """An orthonormal basis ordered by how much the classes differ along it: eigenvectors of
    sum_c w_c [(mu_c - mu)(mu_c - mu)^T + (S_c - S)^2] (means and covariances)."""
    mu = torch.zeros(y.shape[1], dtype=y.dtype)
    stats = {}
    for c in present:
        yc = y[cls == c]
        m = yc.mean(dim=0)
        stats[c] = (m, (yc - m).T @ (yc - m) / max(len(yc) - 1, 1))
        mu = mu + weights[c] * m
    pooled = sum(weights[c] * stats[c][1] for c in present)
    gap = sum(weights[c] * (torch.outer(stats[c][0] - mu, stats[c][0] - mu)
                            + (stats[c][1] - pooled) @ (stats[c][1] - pooled)) for c in present)  # fmt: skip
    return torch.linalg.eigh(gap).eigenvectors


def fit_transport(x: torch.Tensor, cls: torch.Tensor, classes: int, gen: torch.Generator,
                  p: RepairParams) -> tuple[Transport, torch.Tensor]:  # fmt: skip
    """The transport that sends every one of the ``classes`` classes of ``cls`` to the
    barycenter on the rows ``x`` (``p.steps`` rotations, ``p.knots`` knots; every other basis
    discriminant when ``p.informed``, else drawn from ``gen``), and those rows transported. An
    absent class gets the barycenter's knots (it is never predicted)."""
    cur = x.double()
    d, q = x.shape[1], p.knots
    rotations = torch.empty(p.steps, d, d)
    class_knots = torch.empty(p.steps, classes, d, q)
    center_knots = torch.empty(p.steps, d, q)
    counts = torch.bincount(cls, minlength=classes)
    present = [c for c in range(classes) if counts[c] > 0]
    weights = counts.double() / counts.sum()
    # the rows grouped by class once: every step maps contiguous runs of its transpose
    order, ends = class_runs(cls, classes)
    for j in range(p.steps):
        informed = p.informed and j % 2 == 0
        rot = discriminant_rotation(cur, cls, present, weights) if informed else rotation(d, gen)
        rot = rot.flip(1) if informed else rot  # eigh sorts ascending: largest gap first
        yt = (cur @ rot)[order].T.contiguous()  # [d, n], each class one run of columns
        per_class = {c: knots_along_rows(yt[:, a:b], q) for c, a, b in run_slices(ends)}
        center = sum(weights[c] * per_class[c] for c in present)
        knots = [per_class.get(c, center) for c in range(classes)]
        class_knots[j] = torch.stack(knots).float()
        out = torch.empty_like(cur)
        out[order] = map_class_runs(yt, ends, knots, center).T
        rotations[j], center_knots[j] = rot.float(), center.float()
        cur = out @ rot.T
    return Transport(rotations, class_knots, center_knots), cur.float()
