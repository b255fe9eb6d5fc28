"""Loss terms of MaSS (Section 3.2, eqs. 2-9) plus the adaptive-mode terms (beyond the paper).

Each function takes tensors and weights and returns a scalar (or per-row values for the
``*_sim`` similarity measures); the trainer composes them. Frozen models are the caller's
business: these functions never touch parameters.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from mass.config import SIM_TYPES


def cos_sim(z_mod: torch.Tensor, z_orig: torch.Tensor) -> torch.Tensor:
    """sim_cos^s(x', x) = cos(z_x'^s, z_x^s) per row (eq. 2, first variant)."""
    return F.cosine_similarity(z_mod, z_orig, dim=-1, eps=1e-8)


def kl_sim(p_mod: torch.Tensor, p_orig: torch.Tensor) -> torch.Tensor:
    """sim_KL^s(x', x) = -D_KL(p_x' || p_x) per row, p = softmax of the logits (eq. 2)."""
    logq_mod = F.log_softmax(p_mod, dim=-1)
    logq_orig = F.log_softmax(p_orig, dim=-1)
    return -(logq_mod.exp() * (logq_mod - logq_orig)).sum(dim=-1)


def ce_sim(p_mod: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """sim_CE^s(x', x) = -CE(p_x', s_x) = log softmax(p_x')[s_x] per row (eq. 2).

    The paper writes it as -D_KL(p_x' || 1_s); against a one-hot target the finite form of
    that divergence is the cross-entropy, so the similarity is the true label's log-prob.
    """
    return F.log_softmax(p_mod, dim=-1).gather(1, y.long().view(-1, 1)).squeeze(1)


def similarity(
    kind: str,
    *,
    z_mod: torch.Tensor | None = None,
    z_orig: torch.Tensor | None = None,
    p_mod: torch.Tensor | None = None,
    p_orig: torch.Tensor | None = None,
    y: torch.Tensor | None = None,
) -> torch.Tensor:
    """Dispatch to one of the three similarity measures of eq. 2 by name."""
    if kind == "cos":
        return cos_sim(z_mod, z_orig)
    if kind == "kl":
        return kl_sim(p_mod, p_orig)
    if kind == "ce":
        return ce_sim(p_mod, y)
    raise ValueError(f"unknown similarity {kind!r}; choose one of {SIM_TYPES}")


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """H(p) of the softmax of ``logits`` per row, in nats (the entropy term of eq. 3)."""
    logp = F.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp).sum(dim=-1)


def suppression_loss(
    sim: torch.Tensor, logits_mod: torch.Tensor, *, w_s: float, h_s: float
) -> torch.Tensor:
    """L^s = w^s mean sim^s(x', x) - h^s mean H(p_x'^s) (eqs. 2-3)."""
    return w_s * sim.mean() - h_s * entropy(logits_mod).mean()


def reconstruction_loss(x_mod: torch.Tensor, x: torch.Tensor, *, w_rec: float) -> torch.Tensor:
    """L_rec = w_rec mean ||x' - x||_2 (eq. 4): the norm itself, not its square."""
    return w_rec * torch.linalg.vector_norm(x_mod - x, dim=-1).mean()


def nt_xent_loss(p_a: torch.Tensor, p_b: torch.Tensor, *, tau: float) -> torch.Tensor:
    """Symmetric NT-Xent over the 2N samples {p_a, p_b}: mean of eqs. 5 and 6 (eq. 7 without w).

    Row i of ``p_a`` (x) and row i of ``p_b`` (x') are the positive pair. For anchor x the
    denominator sums e^{cos/tau} over every x'_y (its positive included) and every x_y with
    y != x, i.e. all 2N - 1 other samples: the standard SimCLR loss, which is what eqs. 5-6
    mean (their typeset denominator repeats p_y where one term is p'_y). Returns
    (1/2N) sum_x (l_x + l_x').
    """
    n = p_a.shape[0]
    h = F.normalize(torch.cat([p_a, p_b], dim=0), dim=-1)
    logits = h @ h.t() / tau
    eye = torch.eye(2 * n, dtype=torch.bool, device=h.device)
    logits = logits.masked_fill(eye, float("-inf"))
    target = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]).to(h.device)
    return F.cross_entropy(logits, target)


def agnostic_preservation_loss(
    p_orig: torch.Tensor, p_mod: torch.Tensor, *, w_rstar: float, tau: float = 0.07
) -> torch.Tensor:
    """L^{r*} = w^{r*} (1/2N) sum_x (l_x^{r*} + l_x'^{r*}) (eq. 7)."""
    return w_rstar * nt_xent_loss(p_orig, p_mod, tau=tau)


def preservation_loss(sim: torch.Tensor, *, w_r: float) -> torch.Tensor:
    """L^r = -w^r mean sim^r(x', x) (eq. 8); KL similarity by default (App. B.3)."""
    return -w_r * sim.mean()


def total_loss(terms: dict[str, torch.Tensor]) -> torch.Tensor:
    """L = sum_s L^s + L_rec + L^{r*} + sum_r L^r (eq. 9), plus any adaptive terms given."""
    return torch.stack(list(terms.values())).sum()


# --- adaptive mode (beyond the paper) -----------------------------------------------------


def prior_kl_loss(logits: torch.Tensor, prior: torch.Tensor) -> torch.Tensor:
    """mean_x D_KL(prior || softmax(adversary(x'))): 0 iff the adversary outputs the prior.

    Used instead of maximising the adversary's CE: maximising CE only flips labels, which
    a retrained attacker decodes again; matching the class prior leaves nothing to decode.
    """
    logp = F.log_softmax(logits, dim=-1)
    prior = prior.to(logits.dtype).clamp_min(1e-12)
    return (prior * (prior.log() - logp)).sum(dim=-1).mean()


def _rbf_mmd2(a: torch.Tensor, b: torch.Tensor, bandwidths: tuple[float, ...]) -> torch.Tensor:
    """Biased MMD^2 between samples ``a`` and ``b`` with a sum of RBF kernels."""
    xy = torch.cat([a, b], dim=0)
    d2 = torch.cdist(xy, xy).pow(2)
    k = sum(torch.exp(-d2 / (2 * bw * bw)) for bw in bandwidths)
    na = a.shape[0]
    return k[:na, :na].mean() + k[na:, na:].mean() - 2 * k[:na, na:].mean()


def group_matching_loss(
    x_mod: torch.Tensor,
    groups: torch.Tensor,
    *,
    kind: str = "mmd",
    strata: torch.Tensor | None = None,
    bandwidths: tuple[float, ...] = (0.25, 0.5, 1.0),
    min_count: int = 2,
) -> torch.Tensor:
    """Make x' distributed alike across values of s (``groups``), within each stratum.

    For each group g: distance between x'[s == g] and x'[s != g]. ``kind`` "mean" uses the
    squared distance of means plus the Frobenius distance of covariances; "mmd" the RBF MMD^2.
    ``strata`` (e.g. the joint value of the preserved attributes) restricts each comparison
    to rows with the same stratum, so information about r that is correlated with s survives.
    Groups with fewer than ``min_count`` rows in a stratum are skipped.
    """
    if strata is None:
        strata = torch.zeros_like(groups)
    losses = []
    for st in torch.unique(strata):
        in_st = strata == st
        for g in torch.unique(groups[in_st]):
            a = x_mod[in_st & (groups == g)]
            b = x_mod[in_st & (groups != g)]
            if a.shape[0] < min_count or b.shape[0] < min_count:
                continue
            if kind == "mmd":
                losses.append(_rbf_mmd2(a, b, bandwidths))
            elif kind == "mean":
                dm = (a.mean(0) - b.mean(0)).pow(2).sum()
                dc = (torch.cov(a.t()) - torch.cov(b.t())).pow(2).sum()
                losses.append(dm + dc)
            else:
                raise ValueError(f"unknown matching kind {kind!r}; choose 'mmd' or 'mean'")
    if not losses:
        return x_mod.sum() * 0.0
    return torch.stack(losses).mean()


def uniform_entropy(num_classes: int) -> float:
    """Entropy of the uniform distribution over ``num_classes`` (the maximum of eq. 3's H)."""
    return math.log(num_classes)
