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

from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from mass.methods import FitResult, Method, Params, register_method
from mass.methods._common import classifier, fit_inputs
from mass.methods.base import knob
from mass.minibatch import batches
from mass.modifiers.genfilter import GenFilterModifier, GenFilterSpec


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


@dataclass(frozen=True)
class GenFilterParams(Params):
    # a unit-norm embedding VAE has small posterior variances, so 1 nat barely moves a row
    budget: float = knob(20.0, lo=0.0, help="KL distortion budget per row, in nats")
    rho: float = knob(1.0, lo=0.0, help="weight of the utility classifiers' CE")
    latent: int = knob(16, lo=1, help="VAE latent width")
    hidden: int = knob(256, lo=1, help="VAE hidden width")
    noise_dim: int = knob(16, lo=1, help="noise inputs w of the filter")
    beta: float = knob(0.01, lo=0.0, help="weight of the VAE's KL to the prior")
    gamma: float = knob(0.1, lo=0.0, help="weight of the decoder's Lipschitz term (eq. 6)")
    vae_epochs: int = knob(60, lo=1, help="VAE training passes")
    filter_epochs: int = knob(60, lo=1, help="filter min-max training passes")
    label_source: str = knob("predicted", choices=("predicted", "none"),
                             help="feed the filter the predicted private label, or none")  # fmt: skip


class _GenFilterBase(Method):
    mode = "filter"
    Params = GenFilterParams

    def fit_params(self, train, p: GenFilterParams, *, suppress, preserve, val, progress, **_):
        x, gen, _, ks, labels = fit_inputs(train, suppress, preserve, seed=p.seed)
        use_labels = self.mode == "filter" and p.label_source == "predicted"
        spec = GenFilterSpec(
            dim=x.shape[1],
            latent=p.latent,
            hidden=p.hidden,
            noise_dim=p.noise_dim,
            label_classes=tuple(ks[a] for a in suppress) if use_labels else (),
            budget=p.budget,
            mode=self.mode,
        )
        model = GenFilterModifier(spec)
        history = train_vae(model, x, epochs=p.vae_epochs, beta=p.beta, gamma=p.gamma, gen=gen)
        for prm in [*model.encoder.parameters(), *model.decoder.parameters()]:
            prm.requires_grad_(False)  # "the VAE remains fixed for all ... private labels"
        with torch.no_grad():
            mu, logvar = model.encode(x)
            recon_cos = float(F.cosine_similarity(model.decoder(mu), x).mean())
        extra: dict[str, Any] = {"vae_recon_cosine": recon_cos, "budget": p.budget}
        if self.mode == "gaussian":
            sigma = gaussian_budget_sigma(logvar, p.budget)
            model.spec = spec = GenFilterSpec(
                **{**asdict(spec), "sigma": sigma, "label_classes": ()}
            )
            extra["latent_sigma"] = sigma
        else:
            if use_labels:
                acc = _fit_predictors(model, mu, [labels[a] for a in suppress], gen, 20)
                extra["predictor_accuracy"] = {suppress[i]: v for i, v in acc.items()}
            history += self._train_filter(
                model, mu, logvar, labels, suppress, preserve, ks, p, gen, use_labels
            )
        return FitResult(modifier=model.eval(), history=history, extra=extra)

    def _train_filter(self, model, mu, logvar, labels, suppress, preserve, ks, p, gen, use_labels):
        """Step 2: alternate adversary/utility updates with filter updates (eqs. 2-5)."""
        rho = p.rho
        advs = nn.ModuleList(classifier(model.spec.latent, ks[a]) for a in suppress)
        utils = nn.ModuleList(classifier(model.spec.latent, ks[a]) for a in preserve)
        opt_d = torch.optim.Adam([*advs.parameters(), *utils.parameters()], lr=1e-3)
        opt_f = torch.optim.Adam(model.filter.parameters(), lr=1e-3)
        history = []
        for _ in range(p.filter_epochs):
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
    """The filter of eqs. 2-5 in the latent of a fixed VAE (``GenFilterParams``)."""

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
    "kl_to_prior",
    "lipschitz_penalty",
    "vae_loss",
]
