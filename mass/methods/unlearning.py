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

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from mass.methods import FitResult, Method, Params, register_method
from mass.methods._common import classifier, entropy_of, fit_inputs, train_with_aux
from mass.methods.base import knob
from mass.modifiers import DataModifier, ModifierSpec, mlp


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


@dataclass(frozen=True)
class UnlearningParams(Params):
    lam1: float = knob(1.0, lo=0.0, help="weight of the reconstruction term R(x|h)")
    lam2: float = knob(1.0, lo=0.0, help="weight of the preserved attributes' CE")
    lam3: float = knob(5.0, lo=0.0, help="weight of the suppressed attributes' estimated MI")
    epochs: int = knob(30, lo=1, help="passes over the training rows")
    batch_size: int = knob(128, lo=2, help="rows per step")
    lr: float = knob(1e-3, help="Adam learning rate")
    hidden: tuple[int, ...] = knob((256, 128, 256), help="hidden widths of G (MaSS's default)")


@register_method("unlearning")
class AttributeUnlearning(Method):
    """G = MaSS's DataModifier trained by representation detachment (eq. 3)."""

    Params = UnlearningParams

    def fit_params(self, train, p: UnlearningParams, *, suppress, preserve, val, progress, **_):
        x, gen, attrs, ks, labels = fit_inputs(train, suppress, preserve, seed=p.seed)
        entropy = {a: entropy_of(labels[a], ks[a]) for a in suppress}
        modifier = DataModifier(ModifierSpec(dim=x.shape[1], hidden=p.hidden))
        aux = _Aux(x.shape[1], ks)
        lam = {"lam1": p.lam1, "lam2": p.lam2, "lam3": p.lam3}

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
            epochs=p.epochs,
            batch_size=p.batch_size,
            lr=p.lr,
            gen=gen,
        )
        return FitResult(modifier=modifier.eval(), history=history, extra={"entropy": entropy})
