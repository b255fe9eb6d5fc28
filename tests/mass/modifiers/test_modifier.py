"""Data modifier G (eq. 1) and n(): zero-vector case, unit norms, row-seeded noise."""

from __future__ import annotations

import torch

from mass.modifiers import DataModifier, ModifierSpec, l2_normalize, load_modifier, save_modifier


def test_l2_normalize_maps_zero_to_zero_without_nan():
    v = torch.tensor([[0.0, 0.0, 0.0], [3.0, 0.0, 4.0]], requires_grad=True)
    out = l2_normalize(v)
    assert out[0].tolist() == [0.0, 0.0, 0.0]
    assert torch.allclose(out[1], torch.tensor([0.6, 0.0, 0.8]))
    out.sum().backward()
    assert torch.isfinite(v.grad).all()


def test_modifier_output_is_unit_norm_and_residual_of_input():
    torch.manual_seed(0)
    g = DataModifier(ModifierSpec(dim=6, hidden=(8,)))
    x = torch.randn(5, 6)
    out = g(x)
    assert torch.allclose(out.norm(dim=1), torch.ones(5), atol=1e-5)
    # with the MLP zeroed, n(MLP) = 0 and G(x) = n(x)
    for p in g.parameters():
        torch.nn.init.zeros_(p)
    assert torch.allclose(g(x), l2_normalize(x), atol=1e-6)


def test_stochastic_modifier_is_a_function_of_row_seed(tmp_path):
    torch.manual_seed(0)
    g = DataModifier(ModifierSpec(dim=4, hidden=(8,), noise_dim=3)).eval()
    x = torch.randn(3, 4)
    seeds = torch.tensor([11, 12, 13])
    a = g(x, seeds)
    b = g(x.flip(0), seeds.flip(0)).flip(0)
    assert torch.allclose(a, b, atol=1e-6)
    assert not torch.allclose(g(x, seeds), g(x, seeds + 1))
    save_modifier(g, str(tmp_path / "m.pt"), method="mass")
    assert torch.allclose(load_modifier(str(tmp_path / "m.pt"))(x, seeds), a, atol=1e-6)


def test_residual_scale_lets_modifier_outweigh_the_input():
    torch.manual_seed(0)
    x = torch.randn(200, 5)
    g1 = DataModifier(ModifierSpec(dim=5, hidden=(8,)))
    g4 = DataModifier(ModifierSpec(dim=5, hidden=(8,), residual_scale=4.0))
    g4.load_state_dict(g1.state_dict())
    cos1 = torch.nn.functional.cosine_similarity(g1(x), x)
    cos4 = torch.nn.functional.cosine_similarity(g4(x), x)
    assert (cos1 >= -1e-6).all()  # eq. 1: x' within 90 degrees of x
    assert (cos4 < 0).any()
    spec = ModifierSpec.from_dict(g4.spec.to_dict())
    assert spec.residual_scale == 4.0 and ModifierSpec.from_dict({"dim": 5}).residual_scale == 1.0


def test_output_noise_is_a_pure_function_of_the_row_seed():
    import torch

    from mass.modifiers import DataModifier, ModifierSpec

    torch.manual_seed(0)
    model = DataModifier(ModifierSpec(dim=16, output_noise=0.1)).eval()
    x = torch.randn(6, 16)
    seeds = torch.arange(6) * 7919
    full = model(x, seeds)
    # the same rows in another batch composition get the same noise (the MLP's matmul may
    # differ in the last bit between batch shapes, the noise itself does not)
    part = model(x[3:], seeds[3:])
    assert torch.allclose(full[3:], part, atol=1e-6)
    # the noise comes from the seeds, not from a global generator: a fresh copy of the
    # model under another global RNG state gives the same bytes
    torch.manual_seed(12345)
    again = DataModifier(ModifierSpec(dim=16, output_noise=0.1)).eval()
    again.load_state_dict(model.state_dict())
    assert torch.equal(again(x, seeds), full)
    # and the noise really moves the output, by about its norm
    quiet = DataModifier(ModifierSpec(dim=16, output_noise=0.0)).eval()
    quiet.load_state_dict(model.state_dict())
    gap = torch.linalg.vector_norm(full - quiet(x), dim=1)
    assert bool((gap > 0.02).all()) and bool((gap < 0.3).all())
    assert torch.allclose(torch.linalg.vector_norm(full, dim=1), torch.ones(6), atol=1e-6)


def test_output_noise_needs_seeds():
    import pytest
    import torch

    from mass.modifiers import DataModifier, ModifierSpec

    model = DataModifier(ModifierSpec(dim=8, output_noise=0.1))
    with pytest.raises(ValueError, match="seeds"):
        model(torch.randn(2, 8))


def _one_of_each_kind(dim: int = 6) -> dict:
    from mass.modifiers import (
        AffineModifier,
        AffineSpec,
        ChainModifier,
        CodebookModifier,
        CodebookSpec,
        GaussianNoiseModifier,
        GenFilterModifier,
        GenFilterSpec,
        NoiseSpec,
        QuadraticErasureModifier,
        QuadraticSpec,
        SlicedRepairModifier,
        SlicedRepairSpec,
    )
    from mass.modifiers.cells import CellsFit, CellsModifier, CellsSpec

    torch.manual_seed(0)
    affine = AffineModifier(AffineSpec(dim)).set(torch.randn(dim, dim), torch.randn(dim))
    kinds = {
        "mass": DataModifier(ModifierSpec(dim, hidden=(8,), noise_dim=2, output_noise=0.1)),
        "affine": affine,
        "gaussian_noise": GaussianNoiseModifier(NoiseSpec(dim, 0.3)),
        "quadratic_erasure": QuadraticErasureModifier(QuadraticSpec(dim, (2, 3))),
        "genfilter": GenFilterModifier(
            GenFilterSpec(dim, latent=3, hidden=8, noise_dim=2, label_classes=(2,))
        ),  # fmt: skip
    }
    repair = SlicedRepairModifier(SlicedRepairSpec(dim, classes=2, steps=2, knots=5, hidden=4))
    repair.class_knots.copy_(torch.randn(2, 2, dim, 5).sort(dim=-1).values)
    repair.center_knots.copy_(torch.randn(2, dim, 5).sort(dim=-1).values)
    repair.rotations.copy_(torch.linalg.qr(torch.randn(2, dim, dim)).Q)
    kinds["sliced_repair"] = repair
    kinds["codebook"] = CodebookModifier(CodebookSpec(dim, cells=3)).set(torch.randn(3, dim))
    grid = CellsSpec(dim, cells=2 * 3**2, groups=2, rule="grid", axes=2, levels=3)
    kinds["cells"] = CellsModifier.from_fit(grid, CellsFit(
        torch.randn(18, dim), torch.randn(2, dim), torch.randn(2), group_mean=torch.randn(2, dim),
        axes=torch.randn(2, 2, dim), edges=torch.randn(2, 2, 2).sort(dim=-1).values))  # fmt: skip
    kinds["chain"] = ChainModifier.of(kinds["affine"], kinds["mass"])
    return kinds


def test_every_kind_round_trips_through_modifier_pt(tmp_path):
    """save -> load gives the same function for every registered kind (the stored kind names
    are the contract of existing runs and signed exports)."""
    from mass.modifiers import MODIFIER_KINDS

    kinds = _one_of_each_kind()
    assert set(kinds) == set(MODIFIER_KINDS)
    x, seeds = torch.randn(7, 6), torch.arange(7, dtype=torch.int64) * 31
    for kind, model in kinds.items():
        path = str(tmp_path / f"{kind}.pt")
        save_modifier(model.eval(), path, method=kind)
        back = load_modifier(path)
        assert type(back) is type(model) and back.kind == kind
        with torch.no_grad():
            assert torch.equal(back(x, seeds), model(x, seeds)), kind


def test_a_modifier_pt_without_kind_loads_as_mass(tmp_path):
    """The first modifier.pt format had no "kind": it is a MaSS G."""
    g = DataModifier(ModifierSpec(dim=4, hidden=(8,))).eval()
    torch.save({"spec": g.spec.to_dict(), "state_dict": g.state_dict(), "meta": {}},
               tmp_path / "old.pt")  # fmt: skip
    x = torch.randn(3, 4)
    assert torch.equal(load_modifier(str(tmp_path / "old.pt"))(x), g(x))


def test_an_unknown_kind_is_refused_naming_it(tmp_path):
    import pytest

    torch.save({"kind": "nope", "spec": {"dim": 4}, "state_dict": {}}, tmp_path / "m.pt")
    with pytest.raises(ValueError, match="unknown modifier kind 'nope'"):
        load_modifier(str(tmp_path / "m.pt"))


SERVED_IMPORTS = r"""
import sys, types
pb = types.ModuleType("triton_python_backend_utils")  # exists only inside Triton's python backend
sys.modules["triton_python_backend_utils"] = pb
import mass.serving.adapters.modifier  # the served model's module, as model.py loads it
from mass.modifiers import load_modifier
for path in sys.argv[1:]:
    load_modifier(path)
training = sorted(m for m in sys.modules if m.split(".")[:2] in (
    ["mass", "methods"], ["mass", "trainer"], ["mass", "losses"], ["mass", "branches"],
    ["mass", "calibrate"], ["mass", "training"]))
print("TRAINING:" + ",".join(training))
"""


def test_the_served_model_imports_nothing_from_training(tmp_path):
    """A fresh interpreter importing the Triton modifier adapter and
    loading every kind never imports the training stack (methods, trainer, losses, branches)."""
    import os
    import subprocess
    import sys

    paths = []
    for kind, model in _one_of_each_kind().items():
        paths.append(str(tmp_path / f"{kind}.pt"))
        save_modifier(model.eval(), paths[-1])
    env = {**os.environ, "PYTHONPATH": os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-c", SERVED_IMPORTS, *paths], capture_output=True,
                         text=True, env=env, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "TRAINING:\n" in out.stdout, out.stdout
