"""Kind ``sliced_repair``: label-free "total repair" by iterated sliced optimal transport.

A stored class predictor gives each row a class c = argmax p(s | x) (the served model never
sees a label), then K steps move the row: rotate by a fixed orthonormal R_j, map every
coordinate through class c's quantile function onto the barycentric quantile function (the
class-weighted mean of the class quantile functions; piecewise linear between Q knots, shifted
beyond the outer knots), rotate back. Fitted so that on the fit rows every class of the
predicted label ends with one common distribution (:mod:`mass.methods.ot_repair`). Tensors
only (``torch.searchsorted``, gathers), so Triton's python backend serves it as it is.

Rank cells (``cell_axes`` > 0; ``ot_repair`` ``cell_axes``): the repaired row is released as
the centre of its cell. A stored linear predictor reads the row's group (a class of the
preserved label, or one group) from the repaired row; the cell is the row's bin, among
``cell_levels`` per axis, along each of the group's ``cell_axes`` axes. With ``cell_shared``
the bin edges are the group's, the same for every suppressed class: one partition, a row's
cell never depends on its class (docs/calibration.md, "one partition"); models fitted since
the one cell apply path hold such cells in a chained :mod:`mass.modifiers.cells` part
instead, and these specs are the older models', still loaded and served. Without it they are
the edges of the row's *predicted suppressed class* (the class the transport used;
docs/calibration.md, "rank cells"), which only this modifier can serve. Nothing finer than a
cell is released.

The fit (:mod:`mass.methods.ot_repair`) returns plain values - the predictor's layers, a
:class:`Transport`, a :class:`CellPartition` and the cells' centres - and the modifier is built
from them by :meth:`SlicedRepairModifier.from_fit`; the fit and the served model assign cells
with the same function, :func:`rank_cell`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass

import torch
from torch import nn

from mass.modifiers.base import fitted_state, l2_normalize, register_modifier
from mass.modifiers.cells import grid_cell


@dataclass(frozen=True)
class SlicedRepairSpec:
    dim: int
    classes: int  # classes of the repaired (joint) label
    steps: int  # K rotations
    knots: int  # Q quantile levels, 0 and 1 included
    hidden: int = 0  # class predictor: 0 = linear, else one hidden ReLU layer this wide
    renormalize: bool = True  # L2-normalise the output (the release contract's unit norm)
    # a transductive fit (mass.fitrows): the rows it was fitted on, the only rows it may release
    fit_rows: int = 0
    fit_ids_sha256: str = ""
    fit_rows_sha256: str = ""  # ids and embedding bytes (mass.fitrows.rows_digest)
    # rank cells: principal axes per group, bins per axis, groups (0: no cells)
    cell_axes: int = 0
    cell_levels: int = 0
    cell_groups: int = 0
    # one partition: every suppressed class binned with the same edges (absent in older specs:
    # edges per predicted class)
    cell_shared: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Transport:
    """The fitted sliced transport: per step j a rotation [K, d, d], every class's knots
    [K, classes, d, Q] and the barycenter's knots [K, d, Q] (float32, as stored)."""

    rotations: torch.Tensor
    class_knots: torch.Tensor
    center_knots: torch.Tensor


@dataclass(frozen=True)
class CellPartition:
    """Rank cells' partition: the group predictor (weight [G, d], bias [G]), each group's mean
    [G, d] and axes [G, m, d], and bin edges [G, 1 or classes, m, levels - 1] (float32)."""

    group_weight: torch.Tensor
    group_bias: torch.Tensor
    group_mean: torch.Tensor
    axes: torch.Tensor
    edges: torch.Tensor


def class_predictor(dim: int, classes: int, hidden: int) -> tuple[nn.Linear, nn.Linear | None]:
    """The class predictor's layers, freshly initialised (torch's default init, drawn from the
    global generator in this order): linear, or one hidden ReLU layer ``hidden`` wide."""
    pred_in = nn.Linear(dim, hidden or classes)
    return pred_in, (nn.Linear(hidden, classes) if hidden else None)


def predictor_logits(predictor: tuple[nn.Linear, nn.Linear | None], x: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """The class predictor's logits of rows ``x`` (its layers from :func:`class_predictor`)."""
    pred_in, pred_out = predictor
    h = pred_in(x)
    return h if pred_out is None else pred_out(torch.relu(h))


def rank_cell(part: CellPartition, shared: bool, levels: int, z: torch.Tensor,
              cls: torch.Tensor, group: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """(group, cell within the group) of repaired rows ``z`` whose suppressed class is ``cls``
    (unused when ``shared``: one partition for every class); the group is predicted from ``z``
    unless given (the fit's own labels). A cell is the row's bin along each of the group's
    axes, numbered sum_a bin_a * levels ** a."""
    if group is None:
        group = (z @ part.group_weight.T + part.group_bias).argmax(dim=1)
    edges = part.edges[group, 0] if shared else part.edges[group, cls]
    return group, grid_cell(part.group_mean, part.axes, edges, levels, z, group)


def class_runs(cls: torch.Tensor, classes: int) -> tuple[torch.Tensor, list[int]]:
    """Rows ordered by class (stable) and where each class's run ends: one host read per batch
    (``tolist``), where a boolean mask per class and step made the device wait steps x classes
    times (docs/performance.md, "On a GPU")."""
    order = torch.argsort(cls, stable=True)
    return order, torch.bincount(cls, minlength=classes).cumsum(0).tolist()


def run_slices(ends: list[int]) -> Iterator[tuple[int, int, int]]:
    """(class, start, end) of every non-empty run of :func:`class_runs`' ``ends``."""
    start = 0
    for c, end in enumerate(ends):
        if end > start:
            yield c, start, end
        start = end


def map_class_runs(ys: torch.Tensor, ends: list[int], class_knots, center: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """Columns ``ys`` [d, N] grouped by class (:func:`class_runs`), each class's run mapped
    from its knots ``class_knots[c]`` [d, Q] onto ``center`` [d, Q] (:func:`quantile_map`): one
    map per class (k small), where one gather of every row's knots would be [N, d, Q]. The
    fit and the served step both map this way (:mod:`mass.methods.ot_repair.transport`)."""
    mapped = torch.empty_like(ys)
    for c, a, b in run_slices(ends):
        mapped[:, a:b] = quantile_map(ys[:, a:b].contiguous(), class_knots[c], center)
    return mapped


def quantile_map(v: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    """Map ``v`` [d, n] coordinate-wise from the knots ``src`` [d, Q] (increasing) to ``dst``
    [d, Q], linearly between knots; beyond the outer knots shifted by the end offset."""
    q = src.shape[1]
    inside = torch.minimum(torch.maximum(v, src[:, :1]), src[:, -1:])
    hi = torch.searchsorted(src, inside).clamp(1, q - 1)
    lo = hi - 1
    s_lo, s_hi = src.gather(1, lo), src.gather(1, hi)
    d_lo, d_hi = dst.gather(1, lo), dst.gather(1, hi)
    gap = s_hi - s_lo
    t = torch.where(gap > 0, (inside - s_lo) / torch.where(gap > 0, gap, 1.0), 0.5)
    return d_lo + t * (d_hi - d_lo) + (v - inside)


@register_modifier("sliced_repair")
class SlicedRepairModifier(nn.Module):
    """c = argmax predictor(n(x)); K times: y = x R_j, y_k <- B_jk(F_jck^-1 ... ), x = y R_j^T."""

    @classmethod
    def spec_from_dict(cls, d: dict) -> SlicedRepairSpec:
        return SlicedRepairSpec(
            dim=int(d["dim"]), classes=int(d["classes"]), steps=int(d["steps"]),
            knots=int(d["knots"]), hidden=int(d.get("hidden", 0)),
            renormalize=bool(d.get("renormalize", True)), fit_rows=int(d.get("fit_rows", 0)),
            fit_ids_sha256=str(d.get("fit_ids_sha256", "")),
            fit_rows_sha256=str(d.get("fit_rows_sha256", "")),
            cell_axes=int(d.get("cell_axes", 0)), cell_levels=int(d.get("cell_levels", 0)),
            cell_groups=int(d.get("cell_groups", 0)),
            cell_shared=bool(d.get("cell_shared", False)),
        )  # fmt: skip

    stochastic = False  # draws no noise; export.json records it, so no key is required

    def __init__(self, spec: SlicedRepairSpec) -> None:
        super().__init__()
        self.spec = spec
        d, k, steps, q = spec.dim, spec.classes, spec.steps, spec.knots
        self.register_buffer("rotations", torch.eye(d).repeat(steps, 1, 1))
        self.register_buffer("class_knots", torch.zeros(steps, k, d, q))
        self.register_buffer("center_knots", torch.zeros(steps, d, q))
        self.pred_in, self.pred_out = class_predictor(d, k, spec.hidden)
        if spec.cell_axes:
            g, m, lv = spec.cell_groups, spec.cell_axes, spec.cell_levels
            self.register_buffer("group_weight", torch.zeros(g, d))
            self.register_buffer("group_bias", torch.zeros(g))
            self.register_buffer("group_mean", torch.zeros(g, d))
            self.register_buffer("axes", torch.zeros(g, m, d))
            self.register_buffer("edges", torch.zeros(g, 1 if spec.cell_shared else k, m, lv - 1))
            self.register_buffer("centres", torch.zeros(g, lv**m, d))

    @classmethod
    def from_fit(cls, spec: SlicedRepairSpec, predictor: tuple[nn.Linear, nn.Linear | None],
                 transport: Transport, cells: CellPartition | None = None,
                 centres: torch.Tensor | None = None) -> SlicedRepairModifier:  # fmt: skip
        """The modifier of fitted values (:mod:`mass.methods.ot_repair`): the predictor's
        layers, the transport and, with rank cells, the partition and every cell's centre
        [G, levels ** m, d]. Every buffer is loaded whole (strict: a missing or misshapen value
        is an error), in eval mode."""
        mod = cls(spec)
        pred_in, pred_out = predictor
        state = {f"pred_in.{k}": v for k, v in pred_in.state_dict().items()}
        if pred_out is not None:
            state.update({f"pred_out.{k}": v for k, v in pred_out.state_dict().items()})
        state.update(fitted_state(transport))
        if spec.cell_axes:
            if cells is None or centres is None:
                raise ValueError("sliced_repair: rank cells need their partition and centres")
            state.update(fitted_state(cells), centres=centres)
        mod.load_state_dict(state)
        return mod.eval()

    def partition(self) -> CellPartition:
        """The stored rank cells' partition (views of the buffers)."""
        return CellPartition(self.group_weight, self.group_bias, self.group_mean, self.axes,
                             self.edges)  # fmt: skip

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return predictor_logits((self.pred_in, self.pred_out), x)

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        return self.logits(x).argmax(dim=1)

    def step(self, j: int, x: torch.Tensor, runs: tuple[torch.Tensor, list[int]]) -> torch.Tensor:
        """Step j of the transport for rows ``x`` grouped by their predicted classes
        (``runs``: :func:`class_runs`, computed once per batch by :meth:`transport`)."""
        order, ends = runs
        rot = self.rotations[j]
        y = (x @ rot).T.contiguous()  # [d, N]: searchsorted runs along the last axis
        ys = y[:, order]  # columns grouped by class: each class one contiguous run
        out = torch.empty_like(y)
        out[:, order] = map_class_runs(ys, ends, self.class_knots[j], self.center_knots[j])
        return out.T @ rot.T

    def cell_of(self, z: torch.Tensor, cls: torch.Tensor,
                group: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        """(group, cell within the group) of repaired rows ``z``: :func:`rank_cell` on the
        stored partition."""
        return rank_cell(self.partition(), self.spec.cell_shared, self.spec.cell_levels, z, cls,
                         group)  # fmt: skip

    def transport(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(repaired rows, their predicted classes): the release before any rank cells."""
        x = l2_normalize(x)
        cls = self.predict(x)
        runs = class_runs(cls, self.spec.classes)
        for j in range(self.spec.steps):
            x = self.step(j, x, runs)
        return (l2_normalize(x) if self.spec.renormalize else x), cls

    def forward(self, x: torch.Tensor, seeds: torch.Tensor | None = None) -> torch.Tensor:
        x, cls = self.transport(x)
        if not self.spec.cell_axes:
            return x
        group, cell = self.cell_of(x, cls)
        return self.centres[group, cell]
