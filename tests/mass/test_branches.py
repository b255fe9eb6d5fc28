"""Branch models: attribute classifiers, agnostic SimCLR model, freezing, save/load."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mass import branch_models, branches
from mass.synthetic import make_synthetic


@pytest.fixture(scope="module")
def data():
    return make_synthetic(n=400, dim=12, s_classes=3, seed=0)


def test_classifier_learns_separable_attribute_and_comes_back_frozen(data):
    m = branches.train_classifier(data.x, data.labels["s"], 3, epochs=5, seed=0)
    assert not m.training and all(not p.requires_grad for p in m.parameters())
    z, logits = m(torch.as_tensor(data.x))
    assert z.shape == (400, 256) and logits.shape == (400, 3)
    acc = (logits.argmax(1).numpy() == data.labels["s"]).mean()
    assert acc > 0.9


def test_agnostic_model_keeps_rows_apart_better_than_init(data):
    x = torch.as_tensor(data.x)
    torch.manual_seed(0)
    init = branch_models.freeze(branch_models.AgnosticModel(12, proj_dim=16))
    gen = torch.Generator().manual_seed(5)
    a = branches.embedding_augment(x, noise_std=0.05, drop_prob=0.2, generator=gen)
    b = branches.embedding_augment(x, noise_std=0.05, drop_prob=0.2, generator=gen)
    from mass.losses import nt_xent_loss

    before = nt_xent_loss(init(a)[1], init(b)[1], tau=0.07).item()
    m = branches.train_agnostic(data.x, epochs=5, proj_dim=16, seed=0)
    after = nt_xent_loss(m(a)[1], m(b)[1], tau=0.07).item()
    assert after < before


def test_agnostic_accepts_precomputed_views_and_checks_their_shape(data):
    m = branches.train_agnostic(data.x, views=(data.x, data.x[::-1].copy()), epochs=1, seed=0)
    assert m.proj_dim == 128
    with pytest.raises(ValueError, match="views"):
        branches.train_agnostic(data.x, views=(data.x[:10], data.x[:10]), epochs=1)


def test_embedding_augment_rows_are_unit_or_zero():
    gen = torch.Generator().manual_seed(0)
    x = torch.nn.functional.normalize(torch.randn(50, 8), dim=1)
    v = branches.embedding_augment(x, noise_std=0.1, drop_prob=0.3, generator=gen)
    norms = v.norm(dim=1)
    assert torch.all((norms - 1).abs() < 1e-5)
    assert not torch.allclose(v, x)


def test_save_and_load_branches_round_trip(tmp_path, data):
    c = branches.train_classifier(data.x, data.labels["u"], 2, epochs=1, seed=0)
    a = branches.train_agnostic(data.x, epochs=1, proj_dim=8, seed=0)
    path = str(tmp_path / "branches.pt")
    branch_models.save_branches(path, {"u": c}, a)
    cs, a2 = branch_models.load_branches(path)
    x = torch.as_tensor(data.x[:7])
    assert torch.allclose(cs["u"](x)[1], c(x)[1])
    assert torch.allclose(a2(x)[1], a(x)[1])
    assert all(not p.requires_grad for p in cs["u"].parameters())


def test_classifier_training_is_deterministic_given_seed(data):
    m1 = branches.train_classifier(data.x, data.labels["s"], 3, epochs=1, seed=3)
    m2 = branches.train_classifier(data.x, data.labels["s"], 3, epochs=1, seed=3)
    x = torch.as_tensor(data.x)
    assert np.array_equal(m1(x)[1].numpy(), m2(x)[1].numpy())
