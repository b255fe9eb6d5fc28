"""keyed_row_seeds against an independent, byte-level SipHash-2-4 (written from the paper,
not from mass.noise) under the key's BLAKE2b "noise" subkey: a change of subkey purpose, key
halves, message byte order, rounds or the 62-bit mask changes every seed and fails here."""

from __future__ import annotations

import hashlib
import struct

import numpy as np
import pyarrow as pa

from mass.keys import OwnerKey
from mass.noise import keyed_row_seeds

M64 = (1 << 64) - 1


def _rotl(x: int, b: int) -> int:
    return ((x << b) | (x >> (64 - b))) & M64


def siphash24(key: bytes, msg: bytes) -> int:
    """SipHash-2-4 of ``msg`` under the 16-byte ``key`` (Aumasson & Bernstein 2012, sec. 2)."""
    k0, k1 = struct.unpack("<QQ", key)
    v = [k0 ^ 0x736F6D6570736575, k1 ^ 0x646F72616E646F6D,
         k0 ^ 0x6C7967656E657261, k1 ^ 0x7465646279746573]  # fmt: skip

    def sipround():
        v[0] = (v[0] + v[1]) & M64
        v[1] = _rotl(v[1], 13) ^ v[0]
        v[0] = _rotl(v[0], 32)
        v[2] = (v[2] + v[3]) & M64
        v[3] = _rotl(v[3], 16) ^ v[2]
        v[0] = (v[0] + v[3]) & M64
        v[3] = _rotl(v[3], 21) ^ v[0]
        v[2] = (v[2] + v[1]) & M64
        v[1] = _rotl(v[1], 17) ^ v[2]
        v[2] = _rotl(v[2], 32)

    tail = len(msg) % 8
    blocks = [struct.unpack_from("<Q", msg, i)[0] for i in range(0, len(msg) - tail, 8)]
    last = (len(msg) & 0xFF) << 56
    for i, byte in enumerate(msg[len(msg) - tail :]):
        last |= byte << (8 * i)
    for m in [*blocks, last]:
        v[3] ^= m
        sipround()
        sipround()
        v[0] ^= m
    v[2] ^= 0xFF
    for _ in range(4):
        sipround()
    return v[0] ^ v[1] ^ v[2] ^ v[3]


def test_reference_siphash_matches_the_paper_vector():
    # appendix A: key 00..0f, message 00..0e (15 bytes) -> a129ca6149be45e5
    assert siphash24(bytes(range(16)), bytes(range(15))) == 0xA129CA6149BE45E5
    assert siphash24(bytes(range(16)), bytes(range(8))) == 0x93F5F5799A932462


def test_keyed_row_seeds_equal_the_reference_construction():
    secret = bytes(range(32, 64))
    key = OwnerKey(secret)
    sub = hashlib.blake2b(b"", key=secret, person=b"noise", digest_size=16).digest()
    ids = [0, 1, 2, 41, 2**40 + 7, -3]
    want = [siphash24(sub, struct.pack("<q", i)) & ((1 << 62) - 1) for i in ids]
    got = keyed_row_seeds(pa.array(ids, pa.int64()), key)
    assert got.dtype == np.int64 and got.tolist() == want
    assert keyed_row_seeds(np.array(ids, dtype=np.int64), key).tolist() == want


def test_row_noise_uses_every_seed_bit_and_is_standard_normal():
    import torch

    from mass.noise import row_noise

    base = 12345
    seeds = torch.tensor([base, base + 2**32, base + 2**40, base + 2**61, base + 1])
    z = row_noise(seeds, 8)
    for i in range(len(seeds)):  # seeds differing only in their high bits: other noise
        for j in range(i):
            assert not torch.allclose(z[i], z[j]), (i, j)
    many = row_noise(torch.as_tensor(keyed_row_seeds(np.arange(20_000), OwnerKey(b"k" * 32))), 6)
    assert abs(float(many.mean())) < 0.02 and abs(float(many.std()) - 1.0) < 0.02
    corr = np.corrcoef(many.numpy().T)  # coordinates independent of each other
    assert np.abs(corr - np.eye(6)).max() < 0.05
