"""The reconstruction attack (mass.reconstruction) that `bench/compare.py` reports."""

import numpy as np

from mass.reconstruction import reconstruction_attack


def test_reconstruction_attack_inverts_a_fixed_rotation_but_not_noise():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 8)).astype(np.float32)
    q, _ = np.linalg.qr(rng.normal(size=(8, 8)))
    rot = (x @ q).astype(np.float32)
    inv = reconstruction_attack(rot[:300], x[:300], rot[300:], x[300:], hidden=(64,), epochs=100)
    noise = rng.normal(size=x.shape).astype(np.float32)
    blind = reconstruction_attack(
        noise[:300], x[:300], noise[300:], x[300:], hidden=(64,), epochs=30
    )
    assert inv.cosine > 0.9 and blind.cosine < 0.3
    assert inv.identity_cosine < 0.5  # the release itself is not the original
