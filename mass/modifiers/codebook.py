"""Kind ``codebook``: each row becomes the nearest of M fixed centres (vector quantisation).

Chained after a total repair (:mod:`mass.methods.ot_repair`, ``cell_rows``): a repair fitted
on a finite sample matches the classes' distributions at a coarse scale only, and a row's
nearest released neighbours keep its class at a fine scale (measured on the demo: kNN reads
the suppressed digit at 0.23 after the repair alone, at chance level after it with cells;
docs/calibration.md, "cells"). Releasing the cell's centre instead of the row removes what is
finer than a cell: every row of a cell is released identical. Deterministic, tensors only.
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

    def to_dict(self) -> dict:
        return asdict(self)


def nearest(x: torch.Tensor, centres: torch.Tensor) -> torch.Tensor:
    """Index of the nearest centre of every row (squared Euclidean; ties to the lower index)."""
    d2 = (centres * centres).sum(dim=1)[None, :] - 2.0 * (x @ centres.T)
    return d2.argmin(dim=1)


@register_modifier("codebook")
class CodebookModifier(nn.Module):
    """x' = c_m, m = argmin_m ||x - c_m||: the release holds only the M centres."""

    @classmethod
    def spec_from_dict(cls, d: dict) -> CodebookSpec:
        return CodebookSpec(dim=int(d["dim"]), cells=int(d["cells"]))

    stochastic = False

    def __init__(self, spec: CodebookSpec) -> None:
        super().__init__()
        self.spec = spec
        self.register_buffer("centres", torch.zeros(spec.cells, spec.dim))

    def set(self, centres: torch.Tensor) -> CodebookModifier:
        self.centres.copy_(centres)
        return self

    def forward(self, x: torch.Tensor, seeds: torch.Tensor | None = None) -> torch.Tensor:
        return self.centres[nearest(x, self.centres)]
