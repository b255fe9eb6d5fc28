"""Kind ``cells``: each row is released as its cell's vector, the one apply path of
``ot_repair``'s cells (k-means and rank cells alike; :mod:`mass.methods.ot_repair.cells`).

Chained after the transport (:class:`mass.modifiers.sliced_repair.SlicedRepairModifier`), it
reads a row's *group* (a class of the preserved joint label, or one group) from the repaired
row with a stored linear predictor, finds the row's cell within that group by the spec's
``rule``, and releases ``centres[cell]``:

- ``nearest``: the nearest of the group's centres (k-means cells; squared Euclidean, ties to
  the lower index);
- ``grid``: the row's bin along each of the group's ``axes`` axes, ``levels`` bins per axis
  with the group's edges - the same edges for every suppressed class, so a row's cell never
  depends on S (docs/calibration.md, "One partition"); cell ``group * levels ** axes + sum_a
  bin_a * levels ** a``.

Nothing finer than a cell is released and every row of a cell is released as the same
vector, so a released vector names one cell (what the certificate counts: docs/audit.md,
"Certificate"). With ``values`` the cell's released vector is stored apart from the centre
that finds it (``cell_centre: median``: the median of the cell's fit rows,
docs/calibration.md, "What a cell releases"). Deterministic, tensors only.

Older saved models keep their own kinds and load as they were: k-means cells as ``codebook``
(:mod:`mass.modifiers.codebook`), rank cells inside ``sliced_repair`` (``cell_axes`` > 0;
the only home of the older per-class edges, ``cell_edges: class``, whose cell depends on the
transport's predicted class).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn

from mass.modifiers.base import fitted_state, register_modifier
from mass.modifiers.codebook import nearest

RULES = ("nearest", "grid")


@dataclass(frozen=True)
class CellsSpec:
    dim: int
    cells: int  # released vectors (grid: groups * levels ** axes)
    groups: int = 1  # classes of the preserved joint label the group predictor reads (1: none)
    rule: str = "nearest"
    axes: int = 0  # grid: axes per group
    levels: int = 0  # grid: bins per axis
    # True: the cells release ``values`` (e.g. their fit rows' medians), the centres only find
    # the cell (``nearest``); False: the centres are released (every model before it)
    values: bool = False

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ValueError(f"cells: rule {self.rule!r} is not one of {RULES}")
        if self.rule == "grid" and (self.axes < 1 or self.levels < 2
                                    or self.cells != self.groups * self.levels**self.axes):  # fmt: skip
            raise ValueError(f"cells: a grid needs axes >= 1, levels >= 2 and groups * "
                             f"levels ** axes cells (spec {self.to_dict()})")  # fmt: skip

    def to_dict(self) -> dict:
        d = asdict(self)
        if not self.values:  # the spec of a model released by its centres, as saved before
            del d["values"]
        return d


@dataclass(frozen=True)
class CellsFit:
    """A cells modifier's fitted values (float32 unless said): every cell's vector
    ``centres`` [cells, d]; the group predictor ``group_weight`` [G, d], ``group_bias`` [G];
    ``nearest``: each centre's group ``centre_group`` [cells] (int64); ``grid``: each group's
    mean ``group_mean`` [G, d], ``axes`` [G, m, d] and ``edges`` [G, m, levels - 1];
    ``values`` [cells, d]: what each cell releases when the spec says so."""

    centres: torch.Tensor
    group_weight: torch.Tensor
    group_bias: torch.Tensor
    centre_group: torch.Tensor | None = None
    group_mean: torch.Tensor | None = None
    axes: torch.Tensor | None = None
    edges: torch.Tensor | None = None
    values: torch.Tensor | None = None


def grid_cell(group_mean: torch.Tensor, axes: torch.Tensor, row_edges: torch.Tensor,
              levels: int, z: torch.Tensor, group: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """The cell within its group of rows ``z`` whose groups are ``group``: the row's bin along
    each of the group's axes (``row_edges`` [N, m, levels - 1]: each row's bin edges),
    numbered sum_a bin_a * levels ** a. Also the cell of the older rank cells inside
    ``sliced_repair`` (:func:`mass.modifiers.sliced_repair.rank_cell`)."""
    t = torch.einsum("nd,nmd->nm", z - group_mean[group], axes[group])
    bins = (row_edges < t[..., None]).sum(dim=-1)  # [N, axes]
    powers = levels ** torch.arange(axes.shape[1], device=bins.device)
    return (bins * powers).sum(dim=1)


@register_modifier("cells")
class CellsModifier(nn.Module):
    """x' = centres[cell(x)] (or values[cell(x)]): the release holds only the cells' vectors."""

    stochastic = False

    @classmethod
    def spec_from_dict(cls, d: dict) -> CellsSpec:
        return CellsSpec(dim=int(d["dim"]), cells=int(d["cells"]), groups=int(d.get("groups", 1)),
                         rule=str(d.get("rule", "nearest")), axes=int(d.get("axes", 0)),
                         levels=int(d.get("levels", 0)),
                         values=bool(d.get("values", False)))  # fmt: skip

    def __init__(self, spec: CellsSpec) -> None:
        super().__init__()
        self.spec = spec
        d, g = spec.dim, spec.groups
        self.register_buffer("centres", torch.zeros(spec.cells, d))
        self.register_buffer("group_weight", torch.zeros(g, d))
        self.register_buffer("group_bias", torch.zeros(g))
        if spec.rule == "nearest":
            self.register_buffer("centre_group", torch.zeros(spec.cells, dtype=torch.long))
        else:
            self.register_buffer("group_mean", torch.zeros(g, d))
            self.register_buffer("axes", torch.zeros(g, spec.axes, d))
            self.register_buffer("edges", torch.zeros(g, spec.axes, spec.levels - 1))
        if spec.values:
            self.register_buffer("values", torch.zeros(spec.cells, d))

    @classmethod
    def from_fit(cls, spec: CellsSpec, fit: CellsFit) -> CellsModifier:
        """The modifier of fitted values, every buffer loaded whole (strict: a value the rule
        needs that is missing or misshapen, or one it does not use, is an error), in eval
        mode."""
        mod = cls(spec)
        mod.load_state_dict(fitted_state(fit))
        return mod.eval()

    def group_of(self, z: torch.Tensor) -> torch.Tensor:
        """The group of every row (the predictor's argmax; 0 with one group)."""
        if self.spec.groups == 1:
            return torch.zeros(len(z), dtype=torch.long, device=z.device)
        return (z @ self.group_weight.T + self.group_bias).argmax(dim=1)

    def cell_of(self, z: torch.Tensor, group: torch.Tensor | None = None) -> torch.Tensor:
        """The cell (index into ``centres``) of every row; its group predicted unless given."""
        group = self.group_of(z) if group is None else group
        if self.spec.rule == "nearest":
            allowed = (
                None if self.spec.groups == 1 else self.centre_group[None, :] == group[:, None]
            )
            return nearest(z, self.centres, allowed)
        size = self.spec.levels**self.spec.axes
        return group * size + grid_cell(self.group_mean, self.axes, self.edges[group],
                                         self.spec.levels, z, group)  # fmt: skip

    def forward(self, x: torch.Tensor, seeds: torch.Tensor | None = None) -> torch.Tensor:
        released = self.values if self.spec.values else self.centres
        return released[self.cell_of(x)]
