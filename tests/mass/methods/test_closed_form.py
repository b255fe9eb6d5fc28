import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression

from mass.errors import ConfigError
from mass.methods import get_method
from mass.methods._common import (
    classifier_mutual_information,
    knn_mutual_information,
    subset,
    toy_dataset,
    unit_x,
)
from mass.methods.inlp import nullspace_projection
from mass.modifiers import GaussianNoiseModifier, NoiseSpec, load_modifier, save_modifier


@pytest.fixture(scope="module")
def toy():
    full = toy_dataset(600, seed=7)
    return subset(full, np.arange(400)), subset(full, np.arange(400, 600))


def probe(mod, tr, te, attr):
    with torch.no_grad():
        a = mod(torch.as_tensor(tr.x), torch.arange(len(tr))).numpy()
        b = mod(torch.as_tensor(te.x), torch.arange(len(tr), len(tr) + len(te))).numpy()
    return LogisticRegression(max_iter=500).fit(a, tr.labels[attr]).score(b, te.labels[attr])


@pytest.mark.parametrize("name", ["leace", "leace_quadratic", "inlp", "leace_project"])
def test_erasers_remove_linear_signal_and_keep_the_other_attribute(name, toy, tmp_path):
    tr, te = toy
    res = get_method(name).fit(tr, suppress=["a"], preserve=["b"], params={})
    assert probe(res.modifier, tr, te, "a") < 0.55  # 3 classes: chance ~0.33, clean ~0.99
    assert probe(res.modifier, tr, te, "b") > 0.6
    path = str(tmp_path / "m.pt")
    save_modifier(res.modifier, path, method=name)
    x = torch.as_tensor(te.x)
    assert torch.equal(load_modifier(path)(x), res.modifier(x))


def test_leace_affine_equals_the_package_eraser(toy):
    from concept_erasure import LeaceEraser

    tr, _ = toy
    res = get_method("leace").fit(tr, suppress=["a"], preserve=[], params={})
    x = unit_x(tr).double()
    codes = torch.nn.functional.one_hot(torch.as_tensor(tr.labels["a"])).double()
    ref = LeaceEraser.fit(x, codes)(x)
    ref = ref / ref.norm(dim=1, keepdim=True)
    assert torch.allclose(res.modifier(x.float()), ref.float(), atol=1e-4)


def test_leace_erases_several_attributes_at_once(toy):
    tr, te = toy
    res = get_method("leace").fit(tr, suppress=["a", "b"], preserve=[], params={})
    assert probe(res.modifier, tr, te, "a") < 0.55 and probe(res.modifier, tr, te, "b") < 0.5


def test_nullspace_projection_is_idempotent_and_kills_directions():
    d = np.array([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0]])
    p = nullspace_projection(d, 3)
    assert np.allclose(p @ p, p) and np.allclose(p @ d.T, 0.0)
    assert np.isclose(np.trace(p), 1.0)


def test_gaussian_noise_is_a_pure_function_of_the_row_seed():
    mod = GaussianNoiseModifier(NoiseSpec(dim=4, sigma=0.5))
    x = torch.eye(4)
    seeds = torch.tensor([3, 4, 5, 6])
    torch.manual_seed(1)
    np.random.seed(1)
    first = mod(x, seeds)
    torch.manual_seed(2)  # not drawn from a global generator: another global state, same noise
    np.random.seed(2)
    fresh = GaussianNoiseModifier(NoiseSpec(dim=4, sigma=0.5))
    assert torch.equal(first, fresh(x, seeds))
    assert (first - x).norm(dim=1).min() > 0.05  # and there is noise
    assert not torch.equal(mod(x, seeds), mod(x, seeds + 1))
    assert torch.equal(mod(x[2:], seeds[2:]), mod(x, seeds)[2:])  # batch-independent
    assert torch.allclose(mod(x, seeds).norm(dim=1), torch.ones(4))


def test_gaussian_method_rejects_zero_sigma(toy):
    with pytest.raises(ConfigError, match="sigma"):
        get_method("gaussian").fit(toy[0], suppress=["a"], preserve=[], params={"sigma": 0.0})


def test_leace_project_keeps_only_the_preserved_directions(toy):
    """The release spans sum(k_r - 1) directions (k_r classes of b), and without a preserved
    attribute there is nothing to keep: a ConfigError, not a constant release."""
    tr, te = toy
    res = get_method("leace_project").fit(tr, suppress=["a"], preserve=["b"], params={})
    k = len(np.unique(tr.labels["b"]))
    assert res.extra["kept_dims"] == k - 1 < tr.x.shape[1]
    with torch.no_grad():
        out = res.modifier(torch.as_tensor(te.x)).double()
    assert torch.linalg.matrix_rank(out, atol=1e-5) == k - 1
    with pytest.raises(ConfigError, match="--preserve"):
        get_method("leace_project").fit(tr, suppress=["a"], preserve=[], params={})


def test_unknown_attribute_is_a_config_error(toy):
    with pytest.raises(ConfigError, match="'zz'"):
        get_method("leace").fit(toy[0], suppress=["zz"], preserve=[], params={})


def test_knn_mi_is_log2_for_separated_binary_and_zero_for_independent():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 400)
    x_sep = rng.normal(size=(400, 2)) * 0.1 + 10.0 * y[:, None]
    assert knn_mutual_information(x_sep, y) == pytest.approx(np.log(2), abs=0.05)
    assert knn_mutual_information(rng.normal(size=(400, 2)), y) < 0.05


def test_classifier_mi_bound_is_between_zero_and_entropy():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, 400)
    x = rng.normal(size=(400, 2)) * 0.1 + 10.0 * y[:, None]
    mi = classifier_mutual_information(x[:200], y[:200], x[200:], y[200:])
    assert 0.6 < mi <= np.log(2) + 1e-9
