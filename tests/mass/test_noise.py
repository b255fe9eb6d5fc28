"""row_noise: standard normal, a function of all of the seed's bits (no 32-bit bottleneck)."""

from __future__ import annotations

import numpy as np
import torch

from mass.noise import _hash32, row_noise


def _seed(hi: int, lo: int) -> int:
    return (hi << 32) | lo


def test_seeds_that_shared_one_32_bit_state_get_different_noise():
    """Before the Feistel lanes, noise depended on lo ^ H(hi + c) only (32 bits): these pairs
    collided, so 2**32 candidates covered every row's noise whatever the key."""
    c = 0x9E3779B9
    h = lambda v: int(_hash32(torch.tensor([v], dtype=torch.int64))[0])  # noqa: E731
    rng = np.random.default_rng(0)
    pairs = []
    for _ in range(200):
        hi1, hi2, lo1 = (int(v) for v in rng.integers(0, 2**30, size=3))
        lo2 = lo1 ^ h(hi1 + c) ^ h(hi2 + c)
        assert (lo1 ^ h(hi1 + c)) == (lo2 ^ h(hi2 + c))  # the old state was equal
        pairs.append((_seed(hi1, lo1), _seed(hi2, lo2)))
    a = row_noise(torch.tensor([p[0] for p in pairs]), 16)
    b = row_noise(torch.tensor([p[1] for p in pairs]), 16)
    assert (a != b).any(dim=1).all()


def test_every_bit_of_the_seed_changes_the_noise():
    base = torch.tensor([0x2A5B_C3D4_E5F6_0718], dtype=torch.int64)
    z0 = row_noise(base, 8)
    for bit in range(62):
        assert not torch.equal(row_noise(base ^ (1 << bit), 8), z0), bit


def test_noise_is_standard_normal_and_uncorrelated():
    z = row_noise(torch.arange(20_000, dtype=torch.int64) * 7919, 16).double()
    assert z.mean().abs() < 0.02 and (z.std() - 1).abs() < 0.02
    corr = torch.corrcoef(z.T) - torch.eye(16, dtype=torch.float64)
    assert corr.abs().max() < 0.04
    again = row_noise(torch.arange(20_000, dtype=torch.int64) * 7919, 16).double()
    assert torch.equal(z, again)  # a pure function of the seed


def _meta(model, sha: str = "sha-x") -> dict:
    import json

    spec = {"kind": model.kind, "spec": model.spec.to_dict()}
    return {b"mass.sha256": sha.encode(), b"mass.modifier": json.dumps(spec).encode()}


def test_the_key_holder_removes_exactly_the_noise_a_release_added():
    """remove_release_noise (the owner's key-compromised view) recovers the noiseless output;
    another key recovers nothing like it. Exact for every row whose noise has norm <= 1;
    beyond, exact where y.a > -1 (else the normalisation has two unit solutions)."""
    from mass.keys import OwnerKey
    from mass.modifiers import (
        AffineModifier,
        AffineSpec,
        ChainModifier,
        DataModifier,
        GaussianNoiseModifier,
        ModifierSpec,
        NoiseSpec,
        l2_normalize,
    )
    from mass.noise import keyed_row_seeds, release_noise, remove_release_noise

    key, other = OwnerKey(bytes(range(32))), OwnerKey(bytes(range(1, 33)))
    ids = np.arange(300, dtype=np.int64) * 13
    x = torch.from_numpy(np.random.default_rng(0).normal(size=(300, 16)).astype(np.float32))
    torch.manual_seed(0)
    noisy = DataModifier(ModifierSpec(16, hidden=(8,), output_noise=0.5)).eval()
    clean = DataModifier(ModifierSpec(16, hidden=(8,))).eval()
    clean.load_state_dict(noisy.state_dict())
    affine = AffineModifier(AffineSpec(16)).set(torch.eye(16) * 2, torch.ones(16)).eval()
    cases = [
        (noisy, clean(x), True),
        (GaussianNoiseModifier(NoiseSpec(16, 0.15)), l2_normalize(x), True),
        (ChainModifier.of(affine, GaussianNoiseModifier(NoiseSpec(16, 0.15))), affine(x), True),
        (GaussianNoiseModifier(NoiseSpec(16, 2.0)), l2_normalize(x), False),  # |a| ~ 8
    ]
    with torch.no_grad():
        for model, expected, small in cases:
            meta, y = _meta(model), expected.numpy().astype(np.float64)
            seeds = keyed_row_seeds(ids, key, "sha-x")
            released = model(x, torch.from_numpy(seeds)).numpy()
            a = release_noise(seeds, {"kind": model.kind, "spec": model.spec.to_dict()})
            unique = (y * a).sum(1) > -1
            assert unique.all() == small and unique.mean() > 0.6
            got = remove_release_noise(released, ids, key, meta)
            # near y.a = -1 the two roots meet and float32 rounding of the release is amplified
            well = (y * a).sum(1) > -0.5
            np.testing.assert_allclose(got[well], y[well], atol=1e-4 if small else 1e-3)
            wrong = remove_release_noise(released, ids, other, meta)
            assert (np.abs(wrong - y).max(axis=1) > 0.1).mean() > 0.95
    input_noise_only = DataModifier(ModifierSpec(16, hidden=(8,), noise_dim=4))
    assert remove_release_noise(x.numpy(), ids, key, _meta(input_noise_only)) is None
