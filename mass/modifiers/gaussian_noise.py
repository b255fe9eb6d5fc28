"""Kind ``gaussian_noise``: x' = n(n(x) + sigma * eps(seed)), the feature-noise baseline."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn

from mass.modifiers.base import l2_normalize, register_modifier
from mass.noise import row_noise


@dataclass(frozen=True)
class NoiseSpec:
    dim: int
    sigma: float

    def to_dict(self) -> dict:
        return asdict(self)


@register_modifier("gaussian_noise")
class GaussianNoiseModifier(nn.Module):
    """x' = n(n(x) + sigma * eps(seed)): the feature-noise baseline (MaSS Table 5, row 1)."""

    @classmethod
    def spec_from_dict(cls, d: dict) -> NoiseSpec:
        return NoiseSpec(dim=int(d["dim"]), sigma=float(d["sigma"]))

    stochastic = True  # eps comes from ROW_SEED: the release needs the owner's noise key

    def __init__(self, spec: NoiseSpec) -> None:
        super().__init__()
        self.spec = spec

    def forward(self, x: torch.Tensor, seeds: torch.Tensor | None = None) -> torch.Tensor:
        if seeds is None:
            raise ValueError("gaussian_noise modifier needs per-row seeds (keyed_row_seeds)")
        eps = row_noise(seeds, self.spec.dim).to(x.device)
        return l2_normalize(l2_normalize(x) + self.spec.sigma * eps)
