"""Kind ``affine``: x' = n(W n(x) + b), the form of every closed-form eraser (LEACE, INLP)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn

from mass.modifiers.base import l2_normalize, register_modifier


@dataclass(frozen=True)
class AffineSpec:
    dim: int

    def to_dict(self) -> dict:
        return asdict(self)


@register_modifier("affine")
class AffineModifier(nn.Module):
    """x' = n(W n(x) + b): the closed-form erasers (LEACE, INLP) as one servable kind."""

    @classmethod
    def spec_from_dict(cls, d: dict) -> AffineSpec:
        return AffineSpec(dim=int(d["dim"]))

    stochastic = False  # draws no noise; export.json records it, so no key is required

    def __init__(self, spec: AffineSpec) -> None:
        super().__init__()
        self.spec = spec
        self.register_buffer("weight", torch.eye(spec.dim))
        self.register_buffer("bias", torch.zeros(spec.dim))

    def set(self, weight: torch.Tensor, bias: torch.Tensor) -> AffineModifier:
        self.weight.copy_(weight.to(torch.float32))
        self.bias.copy_(bias.to(torch.float32))
        return self

    def forward(self, x: torch.Tensor, seeds: torch.Tensor | None = None) -> torch.Tensor:
        return l2_normalize(l2_normalize(x) @ self.weight.T + self.bias)
