"""Kind ``mass``: the data modifier G of MaSS (eq. 1), optionally stochastic (beyond the paper).

G(x) = n(x + n(MLP([x, z]))) where n() is L2 normalisation with n(0) = 0, inputs are
L2-normalised first, and z is per-row noise seeded from the row id (``noise_dim`` > 0 only).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn

from mass.modifiers.base import l2_normalize, mlp, register_modifier
from mass.noise import row_noise

# the output noise draws from another stream than the input noise: seed + this offset
OUTPUT_NOISE_OFFSET = 0x5EED


@dataclass(frozen=True)
class ModifierSpec:
    """Architecture of G; stored with the weights so export and serving rebuild it exactly."""

    dim: int
    hidden: tuple[int, ...] = (256, 128, 256)
    noise_dim: int = 0
    noise_scale: float = 1.0
    # x' = n(x + a * n(MLP)); a = 1 is eq. 1. a > 1 (adaptive mode) lets G outweigh x, which
    # eq. 1 cannot: with a = 1, x' always lies within 90 degrees of x.
    residual_scale: float = 1.0
    # x' = n(G(x) + sigma * z(seed) / sqrt(d)): release-time noise of norm ~sigma, seeded
    # from the row id (adaptive mode). It drowns the low-variance residue of s that a
    # standardising non-linear attacker would otherwise amplify. 0 = eq. 1 exactly.
    output_noise: float = 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["hidden"] = list(self.hidden)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> ModifierSpec:
        return cls(
            dim=int(d["dim"]),
            hidden=tuple(int(h) for h in d.get("hidden", (256, 128, 256))),
            noise_dim=int(d.get("noise_dim", 0)),
            noise_scale=float(d.get("noise_scale", 1.0)),
            residual_scale=float(d.get("residual_scale", 1.0)),
            output_noise=float(d.get("output_noise", 0.0)),
        )


@register_modifier("mass")
class DataModifier(nn.Module):
    """x' = G(x) = n(x + n(MLP(x))) (eq. 1); with ``noise_dim`` the MLP also sees z(seed)."""

    @classmethod
    def spec_from_dict(cls, d: dict) -> ModifierSpec:
        return ModifierSpec.from_dict(d)

    def __init__(self, spec: ModifierSpec) -> None:
        super().__init__()
        self.spec = spec
        self.mlp = mlp([spec.dim + spec.noise_dim, *spec.hidden, spec.dim])

    @property
    def stochastic(self) -> bool:
        return self.spec.noise_dim > 0 or self.spec.output_noise > 0

    def forward(self, x: torch.Tensor, seeds: torch.Tensor | None = None) -> torch.Tensor:
        x = l2_normalize(x)
        if self.stochastic and seeds is None:
            raise ValueError("stochastic modifier needs per-row seeds (mass.noise.keyed_row_seeds)")
        if self.spec.noise_dim > 0:
            z = row_noise(seeds, self.spec.noise_dim).to(x.device) * self.spec.noise_scale
            h = self.mlp(torch.cat([x, z], dim=1))
        else:
            h = self.mlp(x)
        out = l2_normalize(x + self.spec.residual_scale * l2_normalize(h))
        if self.spec.output_noise > 0:
            z = row_noise(seeds + OUTPUT_NOISE_OFFSET, self.spec.dim).to(x.device)
            out = l2_normalize(out + self.spec.output_noise * z / self.spec.dim**0.5)
        return out
