"""EnD: entangling and disentangling regulariser (Tartaglione et al. 2021; used for privacy in
Barbano et al., "Bridging the gap between debiasing and privacy"), as a modifier objective.

On the normalised features h = G(x) (MaSS's DataModifier, already unit-norm) with Gram matrix
K = h h^T, per batch and over the pairs i > j:
- disentangle (R_perp): for each private class c, |sum_{b_i = b_j = c} K_ij|, summed over c
  and divided by the number of such pairs -> same-private-label rows become orthogonal;
- entangle (R_par): 1 - mean over pairs with t_i = t_j and b_i != b_j of (1 + K_ij) / 2 ->
  same-utility-label rows from different private classes become parallel.
G minimises sum_p CE(head_p(h), t_p) + alpha * sum_s R_perp(s) + beta * sum_{s,p} R_par(p, s),
the target loss plus the regulariser as in EnD. The reference code counts a cross pair only
when the later row has the smaller private class; we count every pair (same expectation).
The paper's attacks (a linear probe for the private label; a decoder that reconstructs the
input) are in the compare bench and :mod:`mass.reconstruction`.
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
    fit_inputs,
    param,
    train_with_aux,
)
from mass.modifier import DataModifier, ModifierSpec


def gram(h: torch.Tensor) -> torch.Tensor:
    return (h @ h.T).clamp(-1.0, 1.0)


def disentangle_loss(k: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """R_perp = sum_c |sum_{i>j, b_i=b_j=c} K_ij| / #{i>j, b_i=b_j} (EnD, eq. 3)."""
    one_hot = F.one_hot(bias).to(k.dtype)  # [N, C]
    lower = torch.tril(k, diagonal=-1)
    per_class = ((one_hot.T @ lower) * one_hot.T).sum(dim=1)  # sum over i>j pairs in class c
    counts = one_hot.sum(dim=0)
    pairs = (counts * (counts - 1) / 2).sum()
    if pairs == 0:
        return k.new_zeros(())
    return per_class.abs().sum() / pairs


def entangle_loss(k: torch.Tensor, target: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """R_par = 1 - mean_{i>j, t_i=t_j, b_i!=b_j} (1 + K_ij) / 2 (EnD, eq. 4)."""
    mask = (target[:, None] == target[None, :]) & (bias[:, None] != bias[None, :])
    mask = torch.tril(mask, diagonal=-1)
    if not mask.any():
        return k.new_zeros(())
    return 1.0 - ((1.0 + k[mask]) / 2.0).mean()


@register_method("end")
class EnD:
    """``params``: alpha (1.0), beta (0.5), epochs (30), batch_size (256), lr (1e-3), hidden."""

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
        hidden = tuple(int(h) for h in params.get("hidden", (256, 128, 256)))
        modifier = DataModifier(ModifierSpec(dim=x.shape[1], hidden=hidden))
        # The target heads train with G (EnD regularises a model trained on its task).
        heads = nn.ModuleDict({p: classifier(x.shape[1], ks[p]) for p in preserve})
        alpha = param(params, "alpha", 1.0, lo=0.0)
        beta = param(params, "beta", 0.5, lo=0.0)

        class _Joint(nn.Module):
            def __init__(self):
                super().__init__()
                self.g, self.heads = modifier, heads

            def forward(self, xb):
                return self.g(xb)

        joint = _Joint()

        def mod_loss(h, xb, yb):
            kmat = gram(h)
            loss = sum((F.cross_entropy(heads[p](h), yb[p]) for p in preserve), h.new_zeros(()))
            for s in suppress:
                loss = loss + alpha * disentangle_loss(kmat, yb[s])
                for p in preserve:
                    loss = loss + beta * entangle_loss(kmat, yb[p], yb[s])
            return loss

        history = train_with_aux(
            joint,
            nn.Module(),
            x,
            labels,
            aux_loss=None,
            mod_loss=mod_loss,
            epochs=param(params, "epochs", 30, lo=1),
            batch_size=param(params, "batch_size", 256, lo=2),
            lr=param(params, "lr", 1e-3),
            gen=gen,
        )
        return FitResult(
            modifier=modifier.eval(), history=history, seconds=time.perf_counter() - start
        )
