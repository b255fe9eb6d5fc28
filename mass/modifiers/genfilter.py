"""Kind ``genfilter``: the generative adversarial filter's release map (Chen et al.).

x' = n(Dec(mu(x) + delta)), delta = proj_b(W [w(seed); onehot(predicted s)]) (``filter`` mode)
or s * w(seed) (``gaussian`` mode, the eq. 12 baseline); the label is *predicted* from the
latent by a linear classifier stored inside (serving never sees labels). Fitted by
:mod:`mass.methods.genfilter`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from mass.modifiers.base import l2_normalize, mlp, register_modifier
from mass.noise import row_noise


def kl_distortion(delta: torch.Tensor, logvar: torch.Tensor) -> torch.Tensor:
    """Per-row KL(N(mu + delta, S) || N(mu, S)) = 1/2 sum_j delta_j^2 / sigma_j^2 (eq. 10)."""
    return 0.5 * (delta.pow(2) * (-logvar).exp()).sum(dim=1)


def project_to_budget(delta: torch.Tensor, logvar: torch.Tensor, budget: float) -> torch.Tensor:
    """Scale each row's offset onto the KL ball {KL <= budget} (the constraint of eq. 5)."""
    kl = kl_distortion(delta, logvar)
    scale = torch.sqrt(budget / kl.clamp_min(1e-12)).clamp(max=1.0)
    return delta * scale.unsqueeze(1)


@dataclass(frozen=True)
class GenFilterSpec:
    dim: int
    latent: int = 16
    hidden: int = 256
    noise_dim: int = 16
    label_classes: tuple[int, ...] = ()  # classes of each suppressed attribute fed to the filter
    budget: float = 1.0
    mode: str = "filter"  # "filter" | "gaussian"
    sigma: float = 0.0  # latent noise std of the gaussian mode

    def to_dict(self) -> dict:
        d = asdict(self)
        d["label_classes"] = list(self.label_classes)
        return d


@register_modifier("genfilter")
class GenFilterModifier(nn.Module):
    """x' = n(Dec(mu(x) + delta)), delta = proj_b(W [w(seed); onehot(predicted s)]) or s * w."""

    @classmethod
    def spec_from_dict(cls, d: dict) -> GenFilterSpec:
        return GenFilterSpec(**{**d, "label_classes": tuple(d.get("label_classes", ()))})

    def __init__(self, spec: GenFilterSpec) -> None:
        super().__init__()
        self.spec = spec
        self.encoder = mlp([spec.dim, spec.hidden, 2 * spec.latent])
        self.decoder = mlp([spec.latent, spec.hidden, spec.dim])
        self.filter = nn.Linear(spec.noise_dim + sum(spec.label_classes), spec.latent)
        self.predictors = nn.ModuleList(nn.Linear(spec.latent, k) for k in spec.label_classes)

    @property
    def stochastic(self) -> bool:
        """Noise w(ROW_SEED) reaches the output (the release then needs the noise key)."""
        if self.spec.mode == "gaussian":
            return self.spec.sigma > 0 and self.spec.latent > 0
        return self.spec.noise_dim > 0

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mu, logvar = self.encoder(l2_normalize(x)).chunk(2, dim=1)
        return mu, logvar.clamp(-12.0, 6.0)

    def offset(self, w: torch.Tensor, onehots: list[torch.Tensor], logvar: torch.Tensor):
        if self.spec.mode == "gaussian":
            return self.spec.sigma * w
        delta = self.filter(torch.cat([w, *onehots], dim=1))
        return project_to_budget(delta, logvar, self.spec.budget)

    def forward(self, x: torch.Tensor, seeds: torch.Tensor | None = None) -> torch.Tensor:
        if seeds is None:
            raise ValueError("genfilter modifier needs per-row seeds (keyed_row_seeds)")
        mu, logvar = self.encode(x)
        width = self.spec.latent if self.spec.mode == "gaussian" else self.spec.noise_dim
        w = row_noise(seeds, width).to(x.device)
        onehots = [
            F.one_hot(p(mu).argmax(dim=1), k).float()
            for p, k in zip(self.predictors, self.spec.label_classes, strict=True)
        ]
        return l2_normalize(self.decoder(mu + self.offset(w, onehots, logvar)))
