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
