"""Loss terms of MaSS (eqs. 2-9): hand-computed values on tiny tensors."""

from __future__ import annotations

import math

import pytest
import torch

from mass import losses


def test_cos_sim_of_orthogonal_and_parallel_rows():
    a = torch.tensor([[1.0, 0.0], [2.0, 0.0]])
    b = torch.tensor([[0.0, 3.0], [5.0, 0.0]])
    assert losses.cos_sim(a, b).tolist() == pytest.approx([0.0, 1.0])


def test_kl_sim_is_minus_kl_of_modified_to_original():
    p_mod = torch.log(torch.tensor([[0.5, 0.5]]))
    p_orig = torch.log(torch.tensor([[0.25, 0.75]]))
    expected = -(0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75))
    assert losses.kl_sim(p_mod, p_orig).item() == pytest.approx(expected, abs=1e-6)
    assert losses.kl_sim(p_orig, p_orig).item() == pytest.approx(0.0, abs=1e-7)


def test_ce_sim_is_log_prob_of_true_label():
    logits = torch.log(torch.tensor([[0.2, 0.8], [0.6, 0.4]]))
    y = torch.tensor([1, 1])
    assert losses.ce_sim(logits, y).tolist() == pytest.approx([math.log(0.8), math.log(0.4)])


def test_entropy_of_uniform_and_one_hot_like():
    u = torch.zeros(1, 4)
    assert losses.entropy(u).item() == pytest.approx(math.log(4))
    peaked = torch.tensor([[100.0, 0.0, 0.0]])
    assert losses.entropy(peaked).item() == pytest.approx(0.0, abs=1e-6)


def test_suppression_loss_combines_similarity_and_entropy_eq3():
    sim = torch.tensor([0.5, 1.0])
    logits = torch.zeros(2, 2)  # H = log 2 per row
    out = losses.suppression_loss(sim, logits, w_s=5.0, h_s=1.0)
    assert out.item() == pytest.approx(5 * 0.75 - math.log(2))


def test_reconstruction_is_mean_norm_not_squared_eq4():
    x = torch.zeros(2, 2)
    xm = torch.tensor([[3.0, 4.0], [0.0, 1.0]])
    assert losses.reconstruction_loss(xm, x, w_rec=2.0).item() == pytest.approx(2 * (5 + 1) / 2)


def test_nt_xent_matches_hand_computed_two_pairs():
    # Two pairs, unit vectors: a0=(1,0) b0=(1,0) a1=(0,1) b1=(0,1); tau=1.
    a = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    b = a.clone()
    # Anchor a0: positive b0 cos=1; negatives a1 (0), b1 (0). Same for every anchor.
    per = -math.log(math.e / (math.e + 1 + 1))
    assert losses.nt_xent_loss(a, b, tau=1.0).item() == pytest.approx(per, abs=1e-6)


def test_nt_xent_is_symmetric_and_scale_invariant():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(5, 3, generator=g), torch.randn(5, 3, generator=g)
    l1 = losses.nt_xent_loss(a, b, tau=0.5)
    assert l1.item() == pytest.approx(losses.nt_xent_loss(b, a, tau=0.5).item(), abs=1e-6)
    assert l1.item() == pytest.approx(losses.nt_xent_loss(3 * a, b, tau=0.5).item(), abs=1e-5)


def test_nt_xent_against_explicit_eq5_eq6_loop():
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(4, 3, generator=g), torch.randn(4, 3, generator=g)
    tau = 0.3

    def c(u, v):
        return torch.nn.functional.cosine_similarity(u, v, dim=0) / tau

    total = 0.0
    for anchor, other in ((a, b), (b, a)):
        for i in range(4):
            den = sum(torch.exp(c(anchor[i], other[j])) for j in range(4))
            den = den + sum(torch.exp(c(anchor[i], anchor[j])) for j in range(4) if j != i)
            total += -(c(anchor[i], other[i]) - torch.log(den)).item()
    assert losses.nt_xent_loss(a, b, tau=tau).item() == pytest.approx(total / 8, abs=1e-5)
    w = losses.agnostic_preservation_loss(a, b, w_rstar=40.0, tau=tau)
    assert w.item() == pytest.approx(40 * total / 8, abs=1e-3)


def test_preservation_loss_is_negative_weighted_mean_eq8():
    assert losses.preservation_loss(torch.tensor([-0.2, -0.4]), w_r=2.0).item() == pytest.approx(
        0.6
    )


def test_total_loss_sums_terms_eq9():
    terms = {"rec": torch.tensor(1.0), "s:a": torch.tensor(2.0), "r*": torch.tensor(-0.5)}
    assert losses.total_loss(terms).item() == pytest.approx(2.5)


def test_similarity_dispatch_rejects_unknown_kind():
    with pytest.raises(ValueError, match="unknown similarity"):
        losses.similarity("dot", z_mod=torch.zeros(1, 2), z_orig=torch.zeros(1, 2))


def test_prior_kl_is_zero_at_prior_and_positive_elsewhere():
    prior = torch.tensor([0.25, 0.75])
    at_prior = torch.log(prior).repeat(3, 1)
    assert losses.prior_kl_loss(at_prior, prior).item() == pytest.approx(0.0, abs=1e-6)
    assert losses.prior_kl_loss(torch.tensor([[5.0, -5.0]]), prior).item() > 0.5


def test_group_matching_zero_for_identical_groups_positive_for_shifted():
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    same = torch.tensor([0, 0, 1, 1])
    for kind in ("mmd", "mean"):
        assert losses.group_matching_loss(x, same, kind=kind).item() == pytest.approx(0, abs=1e-6)
    split = torch.tensor([0, 1, 0, 1])
    for kind in ("mmd", "mean"):
        assert losses.group_matching_loss(x, split, kind=kind).item() > 0.1


def test_group_matching_within_strata_ignores_between_strata_differences():
    # Stratum 0 rows sit at (1,0), stratum 1 rows at (0,1); within each, groups coincide.
    x = torch.tensor(
        [
            [1.0, 0.0],
            [1.0, 0.0],
            [1.0, 0.0],
            [1.0, 0.0],
            [0.0, 1.0],
            [0.0, 1.0],
            [0.0, 1.0],
            [0.0, 1.0],
        ]
    )
    groups = torch.tensor([0, 0, 1, 1, 0, 0, 1, 1])
    strata = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    uncond = losses.group_matching_loss(x, groups, kind="mmd")
    cond = losses.group_matching_loss(x, groups, kind="mmd", strata=strata)
    assert cond.item() == pytest.approx(0.0, abs=1e-6)
    assert uncond.item() == pytest.approx(0.0, abs=1e-6)  # groups balanced across strata
    skew = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    assert losses.group_matching_loss(x, skew, kind="mmd").item() > 0.1


def test_reconstruction_gradient_finite_at_zero_difference():
    x = torch.ones(2, 3)
    xm = x.clone().requires_grad_(True)
    losses.reconstruction_loss(xm, x, w_rec=1.0).backward()
    assert torch.isfinite(xm.grad).all()
