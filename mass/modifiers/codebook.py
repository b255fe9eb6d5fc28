"""Kind ``codebook``: each row becomes the nearest of M fixed centres (vector quantisation).

Chained after a total repair (:mod:`mass.methods.ot_repair`, ``cell_rows``): a repair fitted
on a finite sample matches the classes' distributions at a coarse scale only, and a row's
nearest released neighbours keep its class at a fine scale (docs/calibration.md, "Cells").
Releasing the cell's centre instead of the row removes what is finer than a cell: every row
of a cell is released identical. Deterministic, tensors only.

With ``classes`` (> 0) the codebook is stratified by a preserved label: every centre belongs
to one class of it, a stored linear predictor reads the row's class from its input (the
repaired row, where the preserved label stays readable) and the row becomes the nearest
centre *of that class*. The release then keeps the preserved label at the predictor's
accuracy however coarse the cells are (``ot_repair`` ``cells_by_preserved``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn

from mass.modifiers.base import register_modifier


@dataclass(frozen=True)
class CodebookSpec:
    dim: int
    cells: int  # M centres
    classes: int = 0  # > 0: centres per class of a preserved label, chosen by a predictor

    def to_dict(self) -> dict:
        return asdict(self)


def nearest(x: torch.Tensor, centres: torch.Tensor,
            allowed: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
    """Index of the nearest centre of every row (squared Euclidean; ties to the lower index);
    ``allowed`` (bool [rows, centres]): only those centres compete."""
    d2 = (centres * centres).sum(dim=1)[None, :] - 2.0 * (x @ centres.T)
    if allowed is not None:
        d2 = d2.masked_fill(~allowed, float("inf"))
    return d2.argmin(dim=1)


@register_modifier("codebook")
class CodebookModifier(nn.Module):
    """x' = c_m, m = argmin_m ||x - c_m||: the release holds only the M centres."""

    @classmethod
    def spec_from_dict(cls, d: dict) -> CodebookSpec:
        return CodebookSpec(dim=int(d["dim"]), cells=int(d["cells"]),
                            classes=int(d.get("classes", 0)))  # fmt: skip

    stochastic = False

    def __init__(self, spec: CodebookSpec) -> None:
        super().__init__()
        self.spec = spec
        self.register_buffer("centres", torch.zeros(spec.cells, spec.dim))
        if spec.classes:
            self.register_buffer("centre_class", torch.zeros(spec.cells, dtype=torch.long))
            self.register_buffer("class_weight", torch.zeros(spec.classes, spec.dim))
            self.register_buffer("class_bias", torch.zeros(spec.classes))

    def set(self, centres: torch.Tensor, centre_class: torch.Tensor | None = None,
            weight: torch.Tensor | None = None, bias: torch.Tensor | None = None) -> CodebookModifier:  # fmt: skip
        """The centres and, for a stratified codebook, each centre's class and the linear
        predictor (``weight`` [classes, dim], ``bias`` [classes]) that picks a row's class;
        a class without a centre must never be predicted (a very low bias)."""
        self.centres.copy_(centres)
        if self.spec.classes:
            if centre_class is None or weight is None or bias is None:
                raise ValueError("a stratified codebook needs centre_class, weight and bias")
            self.centre_class.copy_(centre_class)
            self.class_weight.copy_(weight)
            self.class_bias.copy_(bias)
        return self

    def forward(self, x: torch.Tensor, seeds: torch.Tensor | None = None) -> torch.Tensor:
        if not self.spec.classes:
            return self.centres[nearest(x, self.centres)]
        cls = (x @ self.class_weight.T + self.class_bias).argmax(dim=1)
        return self.centres[nearest(x, self.centres, self.centre_class[None, :] == cls[:, None])]
