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

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from mass.methods import FitResult, Method, Params, register_method
from mass.methods._common import classifier, fit_inputs, train_with_aux
from mass.methods.base import knob
from mass.modifiers import DataModifier, ModifierSpec


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


@dataclass(frozen=True)
class EndParams(Params):
    alpha: float = knob(1.0, lo=0.0, help="weight of the disentangling term R_perp")
    beta: float = knob(0.5, lo=0.0, help="weight of the entangling term R_par")
    epochs: int = knob(30, lo=1, help="passes over the training rows")
    batch_size: int = knob(256, lo=2, help="rows per step (pairs are formed within a batch)")
    lr: float = knob(1e-3, help="Adam learning rate")
    hidden: tuple[int, ...] = knob((256, 128, 256), help="hidden widths of G (MaSS's default)")


@register_method("end")
class EnD(Method):
    """G = MaSS's DataModifier trained with the EnD regulariser and target heads."""

    Params = EndParams

    def fit_params(self, train, hp: EndParams, *, suppress, preserve, val, progress, **_):
        x, gen, attrs, ks, labels = fit_inputs(train, suppress, preserve, seed=hp.seed)
        modifier = DataModifier(ModifierSpec(dim=x.shape[1], hidden=hp.hidden))
        # The target heads train with G (EnD regularises a model trained on its task).
        heads = nn.ModuleDict({p: classifier(x.shape[1], ks[p]) for p in preserve})
        alpha, beta = hp.alpha, hp.beta

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
            epochs=hp.epochs,
            batch_size=hp.batch_size,
            lr=hp.lr,
            gen=gen,
        )
        return FitResult(modifier=modifier.eval(), history=history)
