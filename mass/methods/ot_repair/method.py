"""The ``ot_repair`` Method: composes the pure fit steps of this package (label and
predictor, transport, cells, balance) into the served chain; every modifier is built from
the fitted values through its constructor or ``from_fit`` (see the package docstring)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from mass.errors import ConfigError
from mass.fitrows import ids_digest, rows_digest
from mass.methods import FitResult, Method, register_method
from mass.methods._common import check_attrs, subset, unit_x
from mass.methods.ot_repair.balance import balance_cells, balance_split
from mass.methods.ot_repair.cells import (
    fit_cells,
    fit_centres,
    fit_partition,
    grid_cells,
    rank_cell_shape,
    source_valued,
)
from mass.methods.ot_repair.params import RepairParams, check_knobs
from mass.methods.ot_repair.predictors import fit_predictor, joint_label
from mass.methods.ot_repair.reuse import fitted_pass, pass_key, served_rows
from mass.methods.ot_repair.transport import fit_transport
from mass.modifiers import AffineModifier, AffineSpec, ChainModifier, l2_normalize
from mass.modifiers.cells import CellsModifier
from mass.modifiers.sliced_repair import (
    CellPartition,
    SlicedRepairModifier,
    SlicedRepairSpec,
    predictor_logits,
    rank_cell,
)

BALANCE_EXTRA = ("clusters", "held_rows", "held_rows_per_cluster")


def _enough_classes(y: torch.Tensor, k: int, p: RepairParams) -> bool:
    return int((torch.bincount(y, minlength=k) >= p.min_class_rows).sum()) >= 2


def _bound(train, p: RepairParams) -> dict[str, Any]:
    """The spec fields binding a transductive fit to its rows (:mod:`mass.fitrows`)."""
    if not p.transductive:
        return {}
    return {"fit_rows": len(train), "fit_ids_sha256": ids_digest(train.ids),
            "fit_rows_sha256": rows_digest(train.ids, train.x)}  # fmt: skip


def _served(spec: SlicedRepairSpec, shape: dict[str, Any], predictor, transport,
            part: CellPartition, centres: torch.Tensor) -> list[nn.Module]:  # fmt: skip
    """The last pass's served modules: with one partition (``cell_shared``) the transport,
    then its cells (kind ``cells``, the one apply path of every partition independent of S);
    with per-class edges (older specs) one ``sliced_repair`` holding its cells, whose cell
    depends on the transport's predicted class."""
    if shape["cell_shared"]:
        plain = replace(spec, cell_axes=0, cell_levels=0, cell_groups=0, cell_shared=False)
        return [SlicedRepairModifier.from_fit(plain, predictor, transport),
                grid_cells(part, shape, centres)]  # fmt: skip
    return [SlicedRepairModifier.from_fit(spec, predictor, transport, part, centres)]


def _rank_cells(spec: SlicedRepairSpec, fitted: tuple, out: torch.Tensor, y: torch.Tensor,
                group: torch.Tensor, parts: list, held: tuple | None,
                p: RepairParams) -> tuple[list[nn.Module], dict]:  # fmt: skip
    """The last pass's modules (:func:`_served`) with rank cells fitted on its repaired rows
    ``out``, and what the fit recorded; with ``held`` (held-out rows, their suppressed classes) the
    cells merged into S-balanced clusters measured on those rows pushed through the chain as
    served (``parts``, then the transport, their group predicted)."""
    predictor, transport, cls = fitted
    shape = {f: getattr(spec, f) for f in ("cell_axes", "cell_levels", "cell_groups")}
    shape["cell_shared"] = spec.cell_shared
    part = fit_partition(out, cls, y, group, shape, spec.classes, p)
    centres, extra = fit_centres(out, cls, group, part, shape, spec.renormalize, p.cell_centre)
    mods = _served(spec, shape, predictor, transport, part, centres)
    if held is not None:
        h = unit_x(held[0])
        for earlier in parts:
            h = earlier(h)
        z, h_cls = mods[0].transport(h)
        h_group, h_cell = rank_cell(part, spec.cell_shared, spec.cell_levels, z, h_cls)
        centres, balance = balance_cells(out, cls, group, (h_group, h_cell, held[1]), part,
                                         shape, spec.classes, spec.renormalize, p)  # fmt: skip
        extra.update(balance)
        mods = _served(spec, shape, predictor, transport, part, centres)
    return mods, extra


def _source_cells(parts: list[nn.Module], x: torch.Tensor, y: torch.Tensor, k: int,
                  p: RepairParams, keys: list) -> CellsModifier:  # fmt: skip
    """The last part (the cells) releasing its fit rows' class-weighted source means
    (:func:`mass.methods.ot_repair.cells.source_valued`); the rows it reads are the fit rows
    ``x`` through every earlier part, as served (shared by fits of the same passes ``keys``:
    :func:`mass.methods.ot_repair.reuse.served_rows`)."""
    book = parts[-1]
    if not isinstance(book, CellsModifier):
        raise ConfigError("ot_repair: cell_value=source needs cells of kind 'cells' (k-means "
                          "cells, or rank cells with cell_edges: common)")  # fmt: skip

    z = served_rows([] if p.pre_leace else keys, x, parts[:-1])  # pre-LEACE's input: not keyed
    return source_valued(book, z, x, y, k, p.renormalize)


def _fit_pass(cur: torch.Tensor, y: torch.Tensor, k: int, gen: torch.Generator,
              p: RepairParams, i: int) -> tuple[tuple, tuple | None]:  # fmt: skip
    """Pass ``i``'s fitted (predictor, predicted classes, transport, transported rows) on the
    rows ``cur``, and its key (:mod:`mass.methods.ot_repair.reuse`: the same pass of an
    earlier fit is reused inside ``shared_fits``)."""
    key = pass_key(cur, y, k, p.seed + i, gen, p)

    def fit() -> tuple:
        predictor = fit_predictor(cur, y, k, p, seed=p.seed + i)
        with torch.no_grad():
            cls = predictor_logits(predictor, cur).argmax(dim=1)
            transport, out = fit_transport(cur, cls, k, gen, p)
        return predictor, cls, transport, out

    return fitted_pass(key, gen, fit), key


@register_method("ot_repair")
class OtRepair(Method):
    """Total repair of the suppressed label by sliced OT; see :mod:`mass.methods.ot_repair`."""

    Params = RepairParams

    def fit_params(self, train, p: RepairParams, *, suppress, preserve, val, progress, **_):
        check_attrs(train, suppress, preserve)
        check_knobs(p)
        y, k = joint_label(train, suppress)
        if not _enough_classes(y, k, p):
            raise ConfigError(f"ot_repair: fewer than two classes of {suppress} have "
                              f">= {p.min_class_rows} training rows; nothing to repair")  # fmt: skip
        gen = torch.Generator().manual_seed(p.seed)
        bound = _bound(train, p)
        by_r = p.cells_by_preserved and bool(preserve)  # cells within R's classes
        group, cells = (
            joint_label(train, preserve, "preserved") if by_r else (torch.zeros_like(y), 1)
        )
        # cell_resolution_rows: cells counted as on that many training rows (held out or not)
        scale = p.cell_resolution_rows / len(train) if p.cell_resolution_rows else 1.0
        held = None
        if p.cell_balance:  # the held-out rows judge the cells' S balance (FARE)
            fit_rows, held_rows = balance_split(y, group, p.cell_balance, p.seed)
            held = (subset(train, held_rows), y[held_rows])
            train, y, group = subset(train, fit_rows), y[fit_rows], group[fit_rows]
            if not _enough_classes(y, k, p):
                raise ConfigError(f"ot_repair: with cell_balance={p.cell_balance} held out, "
                                  f"fewer than two classes of {suppress} keep "
                                  f">= {p.min_class_rows} fit rows; hold out less")  # fmt: skip
        cur, parts, accuracy, moved, keys = unit_x(train), [], [], [], []
        ranks = rank_cell_shape(y, k, cells, p, scale) if p.cell_axes else {}
        extra_cells: dict[str, Any] = {}
        if p.pre_leace:
            from mass.methods.leace import leace_affine

            weight, bias = leace_affine(cur, F.one_hot(y, k).float())
            parts.append(AffineModifier(AffineSpec(dim=cur.shape[1])).set(weight, bias).eval())
            with torch.no_grad():
                cur = parts[0](cur)
        for i in range(p.passes):
            last = ranks if i == p.passes - 1 else {}
            spec = SlicedRepairSpec(dim=cur.shape[1], classes=k, steps=p.steps, knots=p.knots,
                                    hidden=p.hidden, renormalize=p.renormalize, **bound,
                                    **last)  # fmt: skip
            (predictor, cls, transport, out), key = _fit_pass(cur, y, k, gen, p, i)
            keys.append(key)
            with torch.no_grad():
                accuracy.append(float((cls == y).float().mean()))
                out = l2_normalize(out) if p.renormalize else out
                if last:
                    mods, extra_cells = _rank_cells(spec, (predictor, transport, cls), out, y,
                                                    group, parts, held, p)  # fmt: skip
                    # as served: group predicted
                    out = (mods[-1](out) if spec.cell_shared
                           else mods[0].centres[mods[0].cell_of(out, cls)])  # fmt: skip
                else:
                    mods = [SlicedRepairModifier.from_fit(spec, predictor, transport)]
            moved.append(float(torch.linalg.vector_norm(out - cur, dim=1).mean()))
            parts += mods
            cur = l2_normalize(out)  # the next part normalises its input
        extra = {"predictor_accuracy": accuracy, "mean_displacement": moved,
                 "chance": float(np.bincount(y.numpy()).max() / len(y))}  # fmt: skip
        if p.cell_axes:
            extra["cells"] = extra_cells["cells"]
            extra["rows_per_cell"] = {k[5:]: v for k, v in extra_cells.items()
                                      if k.startswith("rows_")}  # fmt: skip
            extra.update({k: v for k, v in extra_cells.items() if k in BALANCE_EXTRA})
        elif p.cell_rows or p.cell_count:  # k-means cells
            r = (group, cells) if by_r else None
            book = fit_cells(out, y, k, p, r, scale)  # the last part's output, as served
            parts.append(book)
            extra["cells"] = book.spec.cells
        if p.cell_value == "source":
            parts[-1] = _source_cells(parts, unit_x(train), y, k, p, keys)
        modifier = parts[0] if len(parts) == 1 else ChainModifier.of(*parts)
        return FitResult(modifier=modifier.eval(), extra=extra)
