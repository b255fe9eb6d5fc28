import math

import numpy as np
import pytest
import torch

from mass.methods import get_method
from mass.methods._common import toy_dataset
from mass.methods.end import disentangle_loss, entangle_loss, gram
from mass.methods.unlearning import detachment_loss

T = torch.tensor


def test_detachment_loss_penalises_only_the_positive_mi_estimate():
    h = math.log(2.0)
    leaky = detachment_loss(T(0.5), [T(1.0)], [T(0.3)], [h], lam1=2.0, lam2=3.0, lam3=4.0)
    assert float(leaky) == pytest.approx(2 * 0.5 + 3 * 1.0 + 4 * (h - 0.3))
    ce = T(1.0, requires_grad=True)  # CE above H(z): classifier no better than the prior
    clean = detachment_loss(T(0.5), [], [ce], [h], lam1=1.0, lam2=1.0, lam3=4.0)
    assert float(clean.detach()) == pytest.approx(0.5)
    clean.backward()
    assert float(ce.grad) == 0.0


def test_disentangle_loss_counts_same_private_label_pairs():
    h = T([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    assert float(disentangle_loss(gram(h), T([0, 0, 1]))) == pytest.approx(1.0)
    # one bias class: pairs (1,0)=1, (2,0)=0, (2,1)=0 -> |1| / 3
    assert float(disentangle_loss(gram(h), T([0, 0, 0]))) == pytest.approx(1 / 3)


def test_disentangle_loss_takes_abs_of_each_class_sum():
    h = T([[1.0, 0.0], [-1.0, 0.0], [1.0, 0.0]])
    # class 0 pairs: (1,0)=-1, (2,0)=1, (2,1)=-1 -> |-1| / 3
    assert float(disentangle_loss(gram(h), T([0, 0, 0]))) == pytest.approx(1 / 3)


def test_entangle_loss_uses_same_target_different_bias_pairs():
    h = T([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    # pairs (1,0): K=0 -> 0.5, (2,0): K=1 -> 1.0; (2,1) shares the bias -> excluded
    val = entangle_loss(gram(h), T([0, 0, 0]), T([0, 1, 1]))
    assert float(val) == pytest.approx(1 - 0.75)
    assert float(entangle_loss(gram(h), T([0, 1, 2]), T([0, 1, 1]))) == 0.0


@pytest.mark.parametrize("name", ["unlearning", "end"])
def test_modifier_methods_fit_and_release_unit_rows(name):
    torch.set_num_threads(1)
    tr = toy_dataset(120, seed=5)
    res = get_method(name).fit(tr, suppress=["a"], preserve=["b"], params={"epochs": 2})
    assert len(res.history) == 2 and all(np.isfinite(list(h.values())).all() for h in res.history)
    out = res.modifier(torch.as_tensor(tr.x))
    assert torch.allclose(out.norm(dim=1), torch.ones(len(tr)), atol=1e-5)
    assert res.modifier.kind == "mass"  # same architecture and export path as MaSS
