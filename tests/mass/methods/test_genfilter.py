import math

import numpy as np
import pytest
import torch

from mass.methods import get_method
from mass.methods._common import subset, toy_dataset
from mass.methods.genfilter import (
    filter_loss,
    gaussian_budget_sigma,
    kl_to_prior,
    lipschitz_penalty,
    vae_loss,
)
from mass.modifiers import load_modifier, save_modifier
from mass.modifiers.genfilter import kl_distortion, project_to_budget

T = torch.tensor


def test_kl_to_prior_matches_hand_value():
    # 0.5 * [(1 + 1 - 1 - 0) + (1 + 0 - 1 - 0)] = 0.5
    assert float(kl_to_prior(T([[1.0, 0.0]]), T([[0.0, 0.0]]))) == pytest.approx(0.5)


def test_lipschitz_penalty_is_squared_output_gap_over_squared_latent_gap():
    val = lipschitz_penalty(T([[1.0, 0.0]]), T([[0.0, 0.0]]), T([[2.0, 0.0]]), T([[0.0, 0.0]]))
    assert float(val) == pytest.approx(0.25)


def test_vae_loss_sums_reconstruction_kl_and_lipschitz_terms():
    loss = vae_loss(
        T([[1.0, 0.0]]),
        T([[0.0, 0.0]]),
        T([[1.0, 0.0]]),
        T([[0.0, 0.0]]),
        T(0.25),
        beta=2.0,
        gamma=4.0,
    )
    assert float(loss) == pytest.approx(1.0 + 2.0 * 0.5 + 4.0 * 0.25)


def test_kl_distortion_weights_offsets_by_inverse_posterior_variance():
    assert float(kl_distortion(T([[1.0, 2.0]]), T([[0.0, math.log(4.0)]]))) == pytest.approx(1.0)


def test_projection_scales_only_rows_outside_the_budget():
    delta = T([[2.0, 0.0], [0.5, 0.0]])
    out = project_to_budget(delta, torch.zeros(2, 2), 0.5)
    assert torch.allclose(out, T([[1.0, 0.0], [0.5, 0.0]]))
    assert float(kl_distortion(out[:1], torch.zeros(1, 2))) == pytest.approx(0.5)


def test_filter_loss_rewards_adversary_error_and_penalises_utility_error():
    adv, util = torch.zeros(1, 2), torch.zeros(1, 4)
    loss = filter_loss([adv], [T([0])], [util], [T([1])], rho=2.0)
    assert float(loss) == pytest.approx(-math.log(2) + 2 * math.log(4))


def test_gaussian_sigma_spends_the_same_expected_budget():
    assert gaussian_budget_sigma(torch.zeros(10, 4), 2.0) == pytest.approx(1.0)


@pytest.fixture(scope="module")
def toy():
    full = toy_dataset(450, seed=3)
    return subset(full, np.arange(300)), subset(full, np.arange(300, 450))


def test_filter_beats_gaussian_at_the_same_budget_on_toy_data(toy, tmp_path):
    """Both halves of the claim, averaged over two seeds: at the same KL budget the learned
    filter keeps MORE of b than latent Gaussian noise AND leaks no more of a (retrained probes).

    Measured (logreg, 150 test rows, mean of seeds 0 and 1), budget 10, with the 62-bit
    row_noise: a 0.657 vs 0.660, b 0.787 vs 0.727. (With the earlier 32-bit row_noise a was
    0.640 vs 0.697: on 150 rows the privacy advantage is within the noise of the draw, so the
    test asserts "no worse" on a, with 0.02 of slack, and a clear win on b.)"""
    from sklearn.linear_model import LogisticRegression

    tr, te = toy
    params = {"vae_epochs": 25, "filter_epochs": 25, "budget": 10.0}
    accs = {}
    for name in ("genfilter", "gaussian_budget"):
        torch.set_num_threads(1)
        per_seed = []
        for seed in (0, 1):
            res = get_method(name).fit(tr, suppress=["a"], preserve=["b"], params=params,
                                       seed=seed)  # fmt: skip
            with torch.no_grad():
                a = res.modifier(torch.as_tensor(tr.x), torch.arange(300)).numpy()
                b = res.modifier(torch.as_tensor(te.x), torch.arange(300, 450)).numpy()
            assert np.allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-5)
            per_seed.append([
                LogisticRegression(max_iter=500).fit(a, tr.labels[k]).score(b, te.labels[k])
                for k in ("a", "b")
            ])  # fmt: skip
        accs[name] = dict(zip(("a", "b"), np.mean(per_seed, axis=0), strict=True))
        path = str(tmp_path / f"{name}.pt")
        save_modifier(res.modifier, path, method=name)
        again = load_modifier(path)
        seeds = torch.arange(300, 450)
        x = torch.as_tensor(te.x)
        with torch.no_grad():
            got, want = again(x, seeds), res.modifier(x, seeds)
        assert torch.equal(got, want) and not torch.equal(want, torch.nn.functional.normalize(x))
    # privacy-utility: the learned filter keeps b better AND leaks no more of a
    assert accs["genfilter"]["b"] > accs["gaussian_budget"]["b"] + 0.03, accs
    assert accs["genfilter"]["a"] <= accs["gaussian_budget"]["a"] + 0.02, accs


def test_genfilter_needs_seeds(toy):
    tr, _ = toy
    res = get_method("gaussian_budget").fit(
        tr, suppress=["a"], preserve=["b"], params={"vae_epochs": 1}
    )
    with pytest.raises(ValueError, match="seeds"):
        res.modifier(torch.as_tensor(tr.x))
