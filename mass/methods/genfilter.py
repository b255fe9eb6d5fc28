"""Generative adversarial filter (Chen et al., "Distributed generation of privacy preserving
data with user customization") and its additive-Gaussian baseline at the same budget.

Three steps, as the paper's Sec. 2:
1. A VAE trained once on the embeddings gives a compact latent (mu, log sigma^2); its loss
   adds a Lipschitz term so the decoder stays sane off the learned manifold (eq. 6).
2. A small linear filter maps [noise w ; one-hot private labels] to a latent offset delta
   (eq. 23), kept inside a KL distortion budget KL(N(mu+delta, S) || N(mu, S)) <= b
   (eqs. 3-5 with eq. 10's Gaussian form), trained min-max against one adversary per
   suppressed attribute and one utility classifier per preserved attribute, both on the
   latent (eq. 2).
3. The release is the decoded perturbed latent, renormalised: x' = n(Dec(mu + delta)).

Serving: the paper's filter runs on the data owner's device, which knows the private label.
Our serving model sees only EMBEDDING and ROW_SEED, so the exported modifier feeds the filter
the label *predicted* from the latent by a linear classifier stored inside it (trained on the
clean latents; ``extra['predictor_accuracy']``); the filter itself is trained with the true
labels, as in the paper. ``label_source: none`` trains and serves a label-free filter
(noise only). The noise w comes from :func:`mass.noise.row_noise` of the row's seed.

``gaussian_budget``: the paper's differential-privacy baseline (Sec. 6.3, eq. 12): latent
noise N(0, s^2 I) with s chosen so the expected KL distortion equals the same budget b.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from mass.errors import ConfigError
from mass.io import EmbeddingDataset
from mass.methods import FitResult, register_method
from mass.methods._common import (
    batches,
    classifier,
    fit_inputs,
    param,
)
from mass.modifier import l2_normalize, mlp, register_modifier
from mass.noise import row_noise


def kl_to_prior(mu: torch.Tensor, logvar: torch.Tensor) -> torch.Tensor:
    """KL(N(mu, diag e^logvar) || N(0, I)) averaged over rows (the VAE term of eq. 1)."""
    return 0.5 * (logvar.exp() + mu.pow(2) - 1.0 - logvar).sum(dim=1).mean()


def lipschitz_penalty(
    dec_a: torch.Tensor, dec_b: torch.Tensor, z_a: torch.Tensor, z_b: torch.Tensor
) -> torch.Tensor:
    """Mean ||Dec(z_a) - Dec(z_b)||^2 / ||z_a - z_b||^2: the decoder-robustness term of eq. 6."""
    num = (dec_a - dec_b).pow(2).sum(dim=1)
    den = (z_a - z_b).pow(2).sum(dim=1).clamp_min(1e-8)
    return (num / den).mean()


def vae_loss(
    x: torch.Tensor,
    recon: torch.Tensor,
    mu: torch.Tensor,
    logvar: torch.Tensor,
    lip: torch.Tensor,
    *,
    beta: float,
    gamma: float,
) -> torch.Tensor:
    """Eq. 6: squared-L2 reconstruction + beta * KL to the prior + gamma * Lipschitz term."""
    return (x - recon).pow(2).sum(dim=1).mean() + beta * kl_to_prior(mu, logvar) + gamma * lip


def kl_distortion(delta: torch.Tensor, logvar: torch.Tensor) -> torch.Tensor:
    """Per-row KL(N(mu + delta, S) || N(mu, S)) = 1/2 sum_j delta_j^2 / sigma_j^2 (eq. 10)."""
    return 0.5 * (delta.pow(2) * (-logvar).exp()).sum(dim=1)


def project_to_budget(delta: torch.Tensor, logvar: torch.Tensor, budget: float) -> torch.Tensor:
    """Scale each row's offset onto the KL ball {KL <= budget} (the constraint of eq. 5)."""
    kl = kl_distortion(delta, logvar)
    scale = torch.sqrt(budget / kl.clamp_min(1e-12)).clamp(max=1.0)
    return delta * scale.unsqueeze(1)


def filter_loss(
    adv_logits: list[torch.Tensor],
    adv_y: list[torch.Tensor],
    util_logits: list[torch.Tensor],
    util_y: list[torch.Tensor],
    *,
    rho: float,
) -> torch.Tensor:
    """Filter's side of eq. 2: -sum_s CE(adversary_s) + rho * sum_u CE(utility_u)."""
    loss = sum(
        (-F.cross_entropy(lg, y) for lg, y in zip(adv_logits, adv_y, strict=True)), torch.zeros(())
    )
    return loss + rho * sum(
        (F.cross_entropy(lg, y) for lg, y in zip(util_logits, util_y, strict=True)), torch.zeros(())
    )


def gaussian_budget_sigma(logvar: torch.Tensor, budget: float) -> float:
    """s with E[KL(N(mu + s w, S) || N(mu, S))] = budget for w ~ N(0, I): the eq. 12 baseline."""
    inv_var = (-logvar).exp().sum(dim=1).mean()
    return float(torch.sqrt(2.0 * budget / inv_var))


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


def train_vae(
    model: GenFilterModifier,
    x: torch.Tensor,
    *,
    epochs: int,
    beta: float,
    gamma: float,
    gen: torch.Generator,
) -> list[dict[str, float]]:
    """Step 1: VAE with the eq. 6 Lipschitz term on points between the posterior and prior."""
    params = [*model.encoder.parameters(), *model.decoder.parameters()]
    opt = torch.optim.Adam(params, lr=1e-3)
    history = []
    for _ in range(epochs):
        total = 0.0
        for idx in batches(len(x), 128, gen):
            mu, logvar = model.encode(x[idx])
            z = mu + (0.5 * logvar).exp() * torch.randn(mu.shape, generator=gen)
            t = torch.rand(len(idx), 1, generator=gen)
            z_mid = z + t * (torch.randn(mu.shape, generator=gen) - z)
            recon = model.decoder(z)
            lip = lipschitz_penalty(model.decoder(z_mid), recon, z_mid, z)
            loss = vae_loss(x[idx], recon, mu, logvar, lip, beta=beta, gamma=gamma)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(idx)
        history.append({"vae_loss": total / len(x)})
    return history


def _fit_predictors(
    model: GenFilterModifier,
    mu: torch.Tensor,
    ys: list[torch.Tensor],
    gen: torch.Generator,
    epochs: int,
) -> dict[int, float]:
    acc = {}
    for i, (pred, y) in enumerate(zip(model.predictors, ys, strict=True)):
        opt = torch.optim.Adam(pred.parameters(), lr=1e-2)
        for _ in range(epochs):
            for idx in batches(len(mu), 256, gen):
                opt.zero_grad()
                F.cross_entropy(pred(mu[idx]), y[idx]).backward()
                opt.step()
        acc[i] = float((pred(mu).argmax(dim=1) == y).float().mean())
    return acc


class _GenFilterBase:
    mode = "filter"

    def fit(
        self,
        train: EmbeddingDataset,
        *,
        suppress: list[str],
        preserve: list[str],
        params: dict[str, Any],
        val: EmbeddingDataset | None = None,
        seed: int = 0,
        progress: bool = True,
    ) -> FitResult:
        start = time.perf_counter()
        x, gen, _, ks, labels = fit_inputs(train, suppress, preserve, seed=seed)
        budget = param(params, "budget", 20.0, lo=0.0)
        label_source = str(params.get("label_source", "predicted"))
        if label_source not in ("predicted", "none"):
            raise ConfigError(f"params.label_source={label_source!r}: choose 'predicted' or 'none'")
        use_labels = self.mode == "filter" and label_source == "predicted"
        spec = GenFilterSpec(
            dim=x.shape[1],
            latent=param(params, "latent", 16, lo=1),
            hidden=param(params, "hidden", 256, lo=1),
            noise_dim=param(params, "noise_dim", 16, lo=1),
            label_classes=tuple(ks[a] for a in suppress) if use_labels else (),
            budget=budget,
            mode=self.mode,
        )
        model = GenFilterModifier(spec)
        history = train_vae(
            model,
            x,
            epochs=param(params, "vae_epochs", 60, lo=1),
            beta=param(params, "beta", 0.01, lo=0.0),
            gamma=param(params, "gamma", 0.1, lo=0.0),
            gen=gen,
        )
        for p in [*model.encoder.parameters(), *model.decoder.parameters()]:
            p.requires_grad_(False)  # "the VAE remains fixed for all ... private labels"
        with torch.no_grad():
            mu, logvar = model.encode(x)
            recon_cos = float(F.cosine_similarity(model.decoder(mu), x).mean())
        extra: dict[str, Any] = {"vae_recon_cosine": recon_cos, "budget": budget}
        if self.mode == "gaussian":
            sigma = gaussian_budget_sigma(logvar, budget)
            model.spec = spec = GenFilterSpec(
                **{**asdict(spec), "sigma": sigma, "label_classes": ()}
            )
            extra["latent_sigma"] = sigma
        else:
            if use_labels:
                acc = _fit_predictors(model, mu, [labels[a] for a in suppress], gen, 20)
                extra["predictor_accuracy"] = {suppress[i]: v for i, v in acc.items()}
            history += self._train_filter(
                model, mu, logvar, labels, suppress, preserve, ks, params, gen, use_labels
            )
        return FitResult(
            modifier=model.eval(), history=history, seconds=time.perf_counter() - start, extra=extra
        )

    def _train_filter(
        self, model, mu, logvar, labels, suppress, preserve, ks, params, gen, use_labels
    ):
        """Step 2: alternate adversary/utility updates with filter updates (eqs. 2-5)."""
        rho = param(params, "rho", 1.0, lo=0.0)
        advs = nn.ModuleList(classifier(model.spec.latent, ks[a]) for a in suppress)
        utils = nn.ModuleList(classifier(model.spec.latent, ks[a]) for a in preserve)
        opt_d = torch.optim.Adam([*advs.parameters(), *utils.parameters()], lr=1e-3)
        opt_f = torch.optim.Adam(model.filter.parameters(), lr=1e-3)
        history = []
        for _ in range(param(params, "filter_epochs", 60, lo=1)):
            total = 0.0
            for idx in batches(len(mu), 128, gen):
                w = torch.randn(len(idx), model.spec.noise_dim, generator=gen)
                onehots = (
                    [F.one_hot(labels[a][idx], ks[a]).float() for a in suppress]
                    if use_labels
                    else []
                )
                z = mu[idx] + model.offset(w, onehots, logvar[idx])
                ys_s = [labels[a][idx] for a in suppress]
                ys_u = [labels[a][idx] for a in preserve]
                zd = z.detach()
                d_loss = sum(
                    F.cross_entropy(m(zd), y)
                    for m, y in zip([*advs, *utils], ys_s + ys_u, strict=True)
                )
                opt_d.zero_grad()
                d_loss.backward()
                opt_d.step()
                loss = filter_loss([m(z) for m in advs], ys_s, [m(z) for m in utils], ys_u, rho=rho)
                opt_f.zero_grad()
                loss.backward()
                opt_f.step()
                total += float(loss.detach()) * len(idx)
            history.append({"filter_loss": total / len(mu)})
        return history


@register_method("genfilter")
class GenFilter(_GenFilterBase):
    """``params``: budget (KL nats per row, 20.0; a unit-norm embedding VAE has small posterior
    variances, so 1 nat barely moves a row), rho (1.0), latent (16), hidden (256),
    noise_dim (16), beta (0.01), gamma (0.1), vae_epochs (60), filter_epochs (60),
    label_source ("predicted" | "none")."""

    mode = "filter"


@register_method("gaussian_budget")
class GaussianBudget(_GenFilterBase):
    """Additive Gaussian mechanism in the same VAE latent at the same KL budget (eq. 12)."""

    mode = "gaussian"


__all__ = [
    "GenFilter",
    "GaussianBudget",
    "GenFilterModifier",
    "filter_loss",
    "gaussian_budget_sigma",
    "kl_distortion",
    "kl_to_prior",
    "lipschitz_penalty",
    "project_to_budget",
    "vae_loss",
]
