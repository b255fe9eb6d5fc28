"""The data modifier G of MaSS (eq. 1), optionally stochastic (beyond the paper).

G(x) = n(x + n(MLP([x, z]))) where n() is L2 normalisation with n(0) = 0, inputs are
L2-normalised first, and z is per-row noise seeded from the row id (``noise_dim`` > 0 only).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn

from mass.noise import row_noise


def l2_normalize(v: torch.Tensor, eps: float = 0.0) -> torch.Tensor:
    """n(v) of eq. 1: v / ||v||, and exactly 0 where ||v|| == 0 (no NaN, no gradient blow-up)."""
    norm = torch.linalg.vector_norm(v, dim=-1, keepdim=True)
    safe = torch.where(norm > eps, norm, torch.ones_like(norm))
    return torch.where(norm > eps, v / safe, torch.zeros_like(v))


@dataclass(frozen=True)
class ModifierSpec:
    """Architecture of G; stored with the weights so export and serving rebuild it exactly."""

    dim: int
    hidden: tuple[int, ...] = (256, 128, 256)
    noise_dim: int = 0
    noise_scale: float = 1.0

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
        )


def mlp(sizes: list[int], *, batchnorm: bool = False) -> nn.Sequential:
    """Linear layers with ReLU (and optionally BatchNorm) between them, none after the last."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            if batchnorm:
                layers.append(nn.BatchNorm1d(b))
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DataModifier(nn.Module):
    """x' = G(x) = n(x + n(MLP(x))) (eq. 1); with ``noise_dim`` the MLP also sees z(seed)."""

    def __init__(self, spec: ModifierSpec) -> None:
        super().__init__()
        self.spec = spec
        self.mlp = mlp([spec.dim + spec.noise_dim, *spec.hidden, spec.dim])

    @property
    def stochastic(self) -> bool:
        return self.spec.noise_dim > 0

    def forward(self, x: torch.Tensor, seeds: torch.Tensor | None = None) -> torch.Tensor:
        x = l2_normalize(x)
        if self.stochastic:
            if seeds is None:
                raise ValueError("stochastic modifier needs per-row seeds (see mass.noise.row_seeds)")
            z = row_noise(seeds, self.spec.noise_dim).to(x.device) * self.spec.noise_scale
            h = self.mlp(torch.cat([x, z], dim=1))
        else:
            h = self.mlp(x)
        return l2_normalize(x + l2_normalize(h))


def save_modifier(model: DataModifier, path: str, **extra: object) -> None:
    torch.save({"spec": model.spec.to_dict(), "state_dict": model.state_dict(), **extra}, path)


def load_modifier(path: str) -> DataModifier:
    """Rebuild a modifier saved by :func:`save_modifier` (RUN_DIR/modifier.pt), in eval mode."""
    blob = torch.load(path, map_location="cpu", weights_only=False)
    model = DataModifier(ModifierSpec.from_dict(blob["spec"]))
    model.load_state_dict(blob["state_dict"])
    return model.eval()
