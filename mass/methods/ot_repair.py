"""``ot_repair``: label-conditional "total repair" by iterated sliced optimal transport.

Each class of the suppressed label is transported to one common distribution, the barycenter
of the classes (Gordaliza et al. ICML'19; Chzhen et al. NeurIPS'20: "total repair"), by the
sliced iterative scheme (Pitie et al. 2007): K times, a seeded random rotation shared by all
classes, then in every rotated coordinate each class's empirical quantile function is mapped
onto the class-weighted mean quantile function (the 1-D Wasserstein barycenter). As K grows
the repaired classes share one distribution, so no retrained attacker, linear or not, reads
the label from the release - without release noise, hence without resting on the owner key.
The map is deterministic and moves each row about as little as matching the classes allows,
so what the label does not explain (the structure nobody named) is kept.

Serving without the label: the served function must not take the sensitive label from the
release path, so the fitted modifier carries a class predictor p(s | x) trained here on the
training rows (linear, or one hidden layer: ``hidden``), and the transport is fitted and
applied on the *predicted* classes - the training rows' output is exactly the served output.
Rows the predictor gets wrong are moved with another class's map; what they leak is what a
further pass (``passes`` > 1: a new predictor on the repaired rows, a new repair) and the
audit's retrained attackers measure. ``FitResult.extra['predictor_accuracy']`` records each
pass's training accuracy (near chance at the last pass means little is left to read).
Several suppressed attributes are repaired jointly on their joint label.

``transductive``: fitted on exactly the rows it will release (`mass train --transductive`),
where the transport is exact; the modifier records those rows (:mod:`mass.fitrows`) and the
anonymize job refuses any other input. Exact matching leaves the audit's held-out folds
anti-learnable (docs/calibration.md, "transductive repair").

``cell_rows``: a repair fitted on a finite sample matches the classes at a coarse scale only;
out of sample, a row's nearest released neighbours still share its class (docs/calibration.md,
"Cells"). With ``cell_rows`` the release is the nearest of a
few k-means centres of the repaired fit rows (:mod:`mass.modifiers.codebook`), so what is
finer than a cell is not released (docs/calibration.md, "cells"). ``cells_by_preserved``:
the centres are fitted within each class of the preserved attributes' joint label and a
linear predictor on the repaired row picks the class at release time, so coarse cells no
longer average a preserved attribute away (docs/calibration.md, "Cells by R").

``cell_axes`` (rank cells, with ``cell_rows``; fitted by :mod:`mass.methods.rank_cells`):
instead of k-means centres, a row's cell is its bin along each of ``cell_axes`` axes of the
repaired fit rows (within its class of the preserved label with ``cells_by_preserved``), and
it is released as the cell's mean. ``cell_edges: common`` makes the bins one partition, the
same for every suppressed class, so a row's cell never depends on S ("one partition");
``class`` (the older specs) bins with the edges of the row's *predicted* suppressed class
("rank cells"). ``cell_basis: within_s`` takes the axes of the covariance within the
suppressed classes (docs/calibration.md). ``cell_balance`` (FARE-style): a share of the fit
rows is held out, released through the fitted chain, and neighbouring cells merge into
clusters whose held-out S counts match their group's (:func:`mass.methods.rank_cells.balance_cells`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from mass.errors import ConfigError
from mass.fitrows import ids_digest, rows_digest
from mass.methods import FitResult, Method, Params, register_method
from mass.methods._common import batches, check_attrs, label_tensors, n_classes, subset, unit_x
from mass.methods.base import knob
from mass.methods.rank_cells import (
    balance_cells,
    balance_split,
    classes_present,
    fit_rank_cells,
    linear_class_predictor,
    rank_cell_shape,
)
from mass.modifiers import AffineModifier, AffineSpec, ChainModifier, l2_normalize
from mass.modifiers.codebook import CodebookModifier, CodebookSpec
from mass.modifiers.sliced_repair import SlicedRepairModifier, SlicedRepairSpec, quantile_map

MAX_JOINT_CLASSES = 256


@dataclass(frozen=True)
class RepairParams(Params):
    steps: int = knob(30, lo=1, help="K: random rotations of the sliced transport")
    knots: int = knob(33, lo=3, help="Q: quantile levels per coordinate (0 and 1 included)")
    hidden: int = knob(64, lo=0, help="class predictor: 0 = linear, else one ReLU layer this wide")
    passes: int = knob(1, lo=1, help="predict-and-repair passes, each on the previous output")
    predictor_epochs: int = knob(40, lo=1, help="epochs of the class predictor")
    min_class_rows: int = knob(20, lo=2, help="a class with fewer training rows is never "
                               "predicted: its rows are moved with the predicted class's map")  # fmt: skip
    informed: bool = knob(
        True,
        help="every other step's basis: eigenvectors of the class "
        "mean and covariance differences (faster), else all random",
    )
    pre_leace: bool = knob(False, help="erase the linear information first (LEACE, chained)")
    renormalize: bool = knob(True, help="L2-normalise the output (the release's unit norm)")
    cell_rows: int = knob(0, lo=0, help="0: off; else release each row as the nearest of "
                          "M = n / (cell_rows * classes) k-means centres of the repaired "
                          "fit rows (about cell_rows rows of each class per cell), so what "
                          "is finer than a cell is not released (kind codebook)")  # fmt: skip
    cells_by_preserved: bool = knob(False, help="with cell_rows: centres within each class of "
                                    "the preserved attributes' joint label, the class read "
                                    "from the repaired row by a linear predictor")  # fmt: skip
    cell_axes: int = knob(0, lo=0, help="with cell_rows: 0 = k-means cells (kind codebook); "
                          "m >= 1 = rank cells: bins along the top m principal axes of the "
                          "repaired rows (within each preserved class with "
                          "cells_by_preserved), edges per predicted suppressed class, "
                          "about cell_rows rows of each class per cell")  # fmt: skip
    cell_edges: str = knob("class", choices=("class", "common"), help="rank cells: "
                           "'common' = one partition per group, the same bin edges for every "
                           "suppressed class (a row's cell never depends on S); 'class' = "
                           "edges per predicted suppressed class (older specs)")  # fmt: skip
    cell_basis: str = knob("pca", choices=("pca", "within_s"), help="rank cells' axes: the "
                           "group's principal axes, or those of its covariance within the "
                           "suppressed classes (where the rows vary for reasons other than S)")  # fmt: skip
    cell_prior_rows: int = knob(30, lo=0, help="rank cells: a class with n fit rows in a "
                                "group takes n / (n + this) of its own bin edges and the rest "
                                "of the group's common edges (0: its own only)")  # fmt: skip
    cell_count: int = knob(0, lo=0, help="rank cells: 0 = levels from cell_rows; else about "
                           "this many cells in all, (cell_count / groups) ** (1 / cell_axes) "
                           "levels per axis (at least 2): e.g. the cells a release of n rows "
                           "can certify (mass.metrics.certificate.cells_allowed)")  # fmt: skip
    cell_balance: float = knob(0.0, lo=0.0, help="rank cells: 0 = off; else this fraction "
                               "of the training rows (per preserved class and suppressed "
                               "class, seeded) is held out of the fit, released through the "
                               "fitted chain, and neighbouring cells merge until every "
                               "cluster's held-out S counts match its group's (FARE)")  # fmt: skip
    cell_balance_rows: int = knob(30, lo=1, help="cell_balance: the fewest held-out rows a "
                                  "cluster of cells may hold")  # fmt: skip
    transductive: bool = knob(False, help="the training rows ARE the release: the modifier "
                              "records their ids' digest and the anonymize job refuses any "
                              "other input (mass.fitrows)")  # fmt: skip


def joint_label(train, attrs: list[str], role: str = "suppressed") -> tuple[torch.Tensor, int]:
    """One label over the attributes' joint classes, and how many there are."""
    labels = label_tensors(train, attrs)
    code, k = torch.zeros(len(train.x), dtype=torch.long), 1
    for a in attrs:
        code, k = code * n_classes(train, a) + labels[a], k * n_classes(train, a)
    if k > MAX_JOINT_CLASSES:
        verb = "suppress" if role == "suppressed" else "preserve"
        raise ConfigError(f"ot_repair: the {role} attributes {attrs} have {k} joint "
                          f"classes (> {MAX_JOINT_CLASSES}); {verb} fewer attributes at once")  # fmt: skip
    return code, k


def fit_predictor(mod: SlicedRepairModifier, x, y, k: int, p: RepairParams, seed: int) -> None:
    """Train the modifier's class predictor (cross-entropy, Adam); rare classes masked off."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    params = [q for q in mod.parameters() if q.requires_grad]
    opt = torch.optim.Adam(params, lr=1e-2 if p.hidden == 0 else 2e-3, weight_decay=1e-5)
    mod.train()
    for _ in range(p.predictor_epochs):
        for idx in batches(len(x), 256, gen):
            opt.zero_grad()
            F.cross_entropy(mod.logits(x[idx]), y[idx]).backward()
            opt.step()
    rare = torch.bincount(y, minlength=k) < p.min_class_rows
    last = mod.pred_out if mod.pred_out is not None else mod.pred_in
    with torch.no_grad():
        last.bias[rare] = -1e9  # never predicted
    mod.eval()


def knots_of(y: torch.Tensor, q: int) -> torch.Tensor:
    """The empirical quantiles of every column of ``y`` [n, d] at q levels 0..1: [d, q]."""
    ys = y.sort(dim=0).values
    pos = torch.linspace(0, len(y) - 1, q, dtype=torch.float64)
    lo = pos.floor().long()
    hi = pos.ceil().long()
    t = (pos - lo).to(y.dtype)[:, None]
    return (ys[lo] * (1 - t) + ys[hi] * t).T.contiguous()


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


def fit_transport(mod: SlicedRepairModifier, x: torch.Tensor, cls: torch.Tensor,
                  gen: torch.Generator, p: RepairParams) -> torch.Tensor:  # fmt: skip
    """Fill the modifier's rotations and knots so every class of ``cls`` ends at the
    barycenter on the rows ``x``; returns those rows transported."""
    spec = mod.spec
    cur = x.double()
    counts = torch.bincount(cls, minlength=spec.classes)
    present = [c for c in range(spec.classes) if counts[c] > 0]
    weights = counts.double() / counts.sum()
    for j in range(spec.steps):
        informed = p.informed and j % 2 == 0
        rot = (
            discriminant_rotation(cur, cls, present, weights)
            if informed
            else rotation(spec.dim, gen)
        )
        rot = rot.flip(1) if informed else rot  # eigh sorts ascending: largest gap first
        y = cur @ rot
        per_class = {c: knots_of(y[cls == c], spec.knots) for c in present}
        center = sum(weights[c] * per_class[c] for c in present)
        out = torch.empty_like(y)
        for c in range(spec.classes):
            knots = per_class.get(c, center)  # an absent class is never predicted
            mod.class_knots[j, c] = knots.float()
            rows = cls == c
            if bool(rows.any()):
                out[rows] = quantile_map(y[rows].T.contiguous(), knots, center).T
        mod.rotations[j] = rot.float()
        mod.center_knots[j] = center.float()
        cur = out @ rot.T
    return cur.float()


def _kmeans(z: np.ndarray, cells: int, seed: int) -> np.ndarray:
    from sklearn.cluster import KMeans

    if cells <= 1:
        return z.mean(axis=0, keepdims=True)
    return KMeans(n_clusters=cells, n_init=3, random_state=seed).fit(z).cluster_centers_


def fit_cells(z: torch.Tensor, y: torch.Tensor, k: int, p: RepairParams,
              r: tuple[torch.Tensor, int] | None = None) -> CodebookModifier:  # fmt: skip
    """The codebook of ``cell_rows``: k-means (k-means++, 3 starts, seeded) on the repaired
    fit rows ``z``, M = n / (cell_rows * classes present) centres (at least 2, at most n);
    unit-normalised when the output is. ``r`` (the preserved joint label and its class
    count): the same rule within each class of it (at least 1 centre each), and a
    multinomial logistic regression on ``z`` stored to pick a row's class."""
    present = classes_present(y, k)
    zz = z.double().numpy()
    rr = None if r is None else r[0].numpy()
    classes = None if rr is None else np.unique(rr)
    groups = [zz] if classes is None else [zz[rr == c] for c in classes]
    least = 2 if rr is None else 1
    parts = [_kmeans(g, int(min(len(g), max(least, round(len(g) / (p.cell_rows * present))))),
                     p.seed) for g in groups]  # fmt: skip
    centres = torch.from_numpy(np.vstack(parts)).float()
    centres = l2_normalize(centres) if p.renormalize else centres
    if r is None:
        spec = CodebookSpec(dim=z.shape[1], cells=len(centres))
        return CodebookModifier(spec).set(centres).eval()
    owner = torch.from_numpy(np.repeat(classes, [len(c) for c in parts]).astype(np.int64))
    spec = CodebookSpec(dim=z.shape[1], cells=len(centres), classes=r[1])
    return CodebookModifier(spec).set(centres, owner, *linear_class_predictor(zz, rr, r[1])).eval()


BALANCE_EXTRA = ("clusters", "held_rows", "held_rows_per_cluster")


def _balance(parts: list, mod: SlicedRepairModifier, held, y_held: torch.Tensor,
             out: torch.Tensor, cls: torch.Tensor, group: torch.Tensor, p: RepairParams) -> dict:  # fmt: skip
    """The held-out rows pushed through the fitted chain as served (every earlier part, then
    ``mod``'s transport and cells, the group predicted), and ``mod``'s cells merged into
    S-balanced clusters on them (:func:`mass.methods.rank_cells.balance_cells`)."""
    h = unit_x(held)
    for part in parts:
        h = part(h)
    z, h_cls = mod.transport(h)
    h_group, h_cell = mod.cell_of(z, h_cls)
    return balance_cells(mod, out, cls, group, (h_group, h_cell, y_held), p)


@register_method("ot_repair")
class OtRepair(Method):
    """Total repair of the suppressed label by sliced OT; see the module docstring."""

    Params = RepairParams

    def fit_params(self, train, p: RepairParams, *, suppress, preserve, val, progress, **_):
        check_attrs(train, suppress, preserve)
        if p.cell_axes and not (p.cell_rows or p.cell_count):
            raise ConfigError("ot_repair: cell_axes needs cell_rows (rows per cell) or "
                              "cell_count (cells in all) > 0")  # fmt: skip
        if p.cell_balance and not (p.cell_axes and p.cell_balance < 1):
            raise ConfigError(f"ot_repair: cell_balance={p.cell_balance} needs rank cells "
                              "(cell_axes > 0) and a held-out fraction below 1")  # fmt: skip
        y, k = joint_label(train, suppress)
        if int((torch.bincount(y, minlength=k) >= p.min_class_rows).sum()) < 2:
            raise ConfigError(f"ot_repair: fewer than two classes of {suppress} have "
                              f">= {p.min_class_rows} training rows; nothing to repair")  # fmt: skip
        gen = torch.Generator().manual_seed(p.seed)
        bound = (
            {
                "fit_rows": len(train),
                "fit_ids_sha256": ids_digest(train.ids),
                "fit_rows_sha256": rows_digest(train.ids, train.x),
            }
            if p.transductive
            else {}
        )
        by_r = p.cells_by_preserved and bool(preserve)  # cells within R's classes
        group, cells = (
            joint_label(train, preserve, "preserved") if by_r else (torch.zeros_like(y), 1)
        )
        held = None
        if p.cell_balance:  # the held-out rows judge the cells' S balance (FARE)
            fit_rows, held_rows = balance_split(y, group, p.cell_balance, p.seed)
            held, y_held = subset(train, held_rows), y[held_rows]
            train, y, group = subset(train, fit_rows), y[fit_rows], group[fit_rows]
            if int((torch.bincount(y, minlength=k) >= p.min_class_rows).sum()) < 2:
                raise ConfigError(f"ot_repair: with cell_balance={p.cell_balance} held out, "
                                  f"fewer than two classes of {suppress} keep "
                                  f">= {p.min_class_rows} fit rows; hold out less")  # fmt: skip
        cur, parts, accuracy, moved = unit_x(train), [], [], []
        ranks = rank_cell_shape(y, k, cells, p) if p.cell_axes else {}
        extra_cells: dict[str, int] = {}
        if p.pre_leace:
            from mass.methods.leace import leace_affine

            onehot = F.one_hot(y, k).float()
            weight, bias = leace_affine(cur, onehot)
            parts.append(AffineModifier(AffineSpec(dim=cur.shape[1])).set(weight, bias).eval())
            with torch.no_grad():
                cur = parts[0](cur)
        for i in range(p.passes):
            last = ranks if i == p.passes - 1 else {}
            spec = SlicedRepairSpec(dim=cur.shape[1], classes=k, steps=p.steps, knots=p.knots,
                                    hidden=p.hidden, renormalize=p.renormalize, **bound,
                                    **last)  # fmt: skip
            torch.manual_seed(p.seed + i)  # the predictor's initial weights: reproducible fits
            mod = SlicedRepairModifier(spec)
            fit_predictor(mod, cur, y, k, p, seed=p.seed + i)
            with torch.no_grad():
                cls = mod.predict(cur)
                accuracy.append(float((cls == y).float().mean()))
                out = fit_transport(mod, cur, cls, gen, p)
                out = l2_normalize(out) if p.renormalize else out
                if last:
                    extra_cells = fit_rank_cells(mod, out, cls, y, group, p)
                    if held is not None:
                        extra_cells.update(_balance(parts, mod, held, y_held, out, cls, group, p))
                    out = mod.centres[mod.cell_of(out, cls)]  # as served: group predicted
            moved.append(float(torch.linalg.vector_norm(out - cur, dim=1).mean()))
            parts.append(mod.eval())
            cur = l2_normalize(out)  # the next part normalises its input
        extra = {"predictor_accuracy": accuracy, "mean_displacement": moved,
                 "chance": float(np.bincount(y.numpy()).max() / len(y))}  # fmt: skip
        if p.cell_axes:
            extra["cells"] = extra_cells["cells"]
            extra["rows_per_cell"] = {k[5:]: v for k, v in extra_cells.items()
                                      if k.startswith("rows_")}  # fmt: skip
            extra.update({k: v for k, v in extra_cells.items() if k in BALANCE_EXTRA})
        elif p.cell_rows:
            r = (group, cells) if by_r else None
            book = fit_cells(out, y, k, p, r)  # the last part's output, as served
            parts.append(book)
            extra["cells"] = book.spec.cells
        modifier = parts[0] if len(parts) == 1 else ChainModifier.of(*parts)
        return FitResult(modifier=modifier.eval(), extra=extra)
