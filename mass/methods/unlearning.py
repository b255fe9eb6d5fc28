"""Attribute unlearning by representation detachment (Guo et al., "Efficient Attribute
Unlearning"), applied to a data modifier: h = G(x) with MaSS's DataModifier architecture.

The paper minimises the upper bound (Lemma 3.1, eq. 3)
    L_bar = -lambda_1 I(h, x) - lambda_2 I(h, y) + lambda_3 I(h, z)
with auxiliary networks estimating each term (Sec. 3.2.3): I(h, x) ~ H(x) - R(x|h) from a
decoder's reconstruction error, and I(h, y) ~ H(y) - CE(y|h), I(h, z) ~ H(z) - CE(z|h) from
classifiers. y are the preserved ("main task") labels, z the suppressed ones.

Two honest deviations, both because our inputs are unit-norm embeddings, not images:
- R is the squared L2 error (the paper's BCE assumes pixels in [0, 1]).
- Eq. 3 as printed has lambda_3 = alpha (beta - gamma) >= 0 multiplying -I(h, z), which would
  *reward* leakage; the text says the term is to be eliminated, so we penalise
  lambda_3 * max(H(z) - CE_z, 0): the estimated MI, floored at 0 so the modifier stops
  pushing once the classifier is no better than the prior (unbounded CE maximisation would
  just flip labels, which leaks them again).
The classifiers use cross-entropy (the paper mentions an extra contrastive term; omitted).
The AUM metric (eq. 5) lives in :func:`mass.metrics.aum`.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from mass.io import EmbeddingDataset
from mass.methods import FitResult, register_method
from mass.methods._common import (
    classifier,
    entropy_of,
    fit_inputs,
    param,
    train_with_aux,
)
from mass.modifier import DataModifier, ModifierSpec, mlp


def detachment_loss(
    recon_error: torch.Tensor,
    ce_preserve: list[torch.Tensor],
    ce_suppress: list[torch.Tensor],
    h_suppress: list[float],
    *,
    lam1: float,
    lam2: float,
    lam3: float,
) -> torch.Tensor:
    """Eq. 3 with the MI estimates of Sec. 3.2.3 (constants H(x), H(y) dropped):
    lam1 * R(x|h) + lam2 * sum CE_y + lam3 * sum max(H(z) - CE_z, 0)."""
    loss = lam1 * recon_error
    for ce in ce_preserve:
        loss = loss + lam2 * ce
    for ce, h in zip(ce_suppress, h_suppress, strict=True):
        loss = loss + lam3 * torch.clamp(h - ce, min=0.0)
    return loss


class _Aux(nn.Module):
    def __init__(self, dim: int, ks: dict[str, int]) -> None:
        super().__init__()
        self.decoder = mlp([dim, 256, dim])
        self.heads = nn.ModuleDict({a: classifier(dim, k) for a, k in ks.items()})


@register_method("unlearning")
class AttributeUnlearning:
    """``params``: lam1 (1.0), lam2 (1.0), lam3 (5.0), epochs (30), batch_size (128), lr (1e-3),
    hidden (list, MaSS default)."""

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
        x, gen, attrs, ks, labels = fit_inputs(train, suppress, preserve, seed=seed)
        entropy = {a: entropy_of(labels[a], ks[a]) for a in suppress}
        hidden = tuple(int(h) for h in params.get("hidden", (256, 128, 256)))
        modifier = DataModifier(ModifierSpec(dim=x.shape[1], hidden=hidden))
        aux = _Aux(x.shape[1], ks)
        lam = {
            k: param(params, k, d, lo=0.0) for k, d in (("lam1", 1.0), ("lam2", 1.0), ("lam3", 5.0))
        }

        def terms(h, xb, yb):
            recon = (aux.decoder(h) - xb).pow(2).sum(dim=1).mean()
            ce = {a: F.cross_entropy(aux.heads[a](h), yb[a]) for a in attrs}
            return recon, ce

        def aux_loss(h, xb, yb):
            recon, ce = terms(h, xb, yb)
            return recon + sum(ce.values())

        def mod_loss(h, xb, yb):
            recon, ce = terms(h, xb, yb)
            return detachment_loss(
                recon,
                [ce[a] for a in preserve],
                [ce[a] for a in suppress],
                [entropy[a] for a in suppress],
                **lam,
            )

        history = train_with_aux(
            modifier,
            aux,
            x,
            labels,
            aux_loss=aux_loss,
            mod_loss=mod_loss,
            epochs=param(params, "epochs", 30, lo=1),
            batch_size=param(params, "batch_size", 128, lo=2),
            lr=param(params, "lr", 1e-3),
            gen=gen,
        )
        return FitResult(
            modifier=modifier.eval(),
            history=history,
            seconds=time.perf_counter() - start,
            extra={"entropy": entropy},
        )
