"""The release noise's binding to the modifier (``context``) under the owner's key, checked
against an independent construction: BLAKE2b of the context keyed by the noise subkey, then
SipHash-2-4. Kills the mutants noise-context-ignored, noise-context-unkeyed and
worker-seeds-drop-context (tests/mutation/mutants.py)."""

from __future__ import annotations

import hashlib
import struct

import numpy as np
import pyarrow as pa

from mass.keys import OwnerKey, write_key
from mass.noise import KeyedSeeds, keyed_row_seeds, release_row_seeds
from tests.mass.test_noise_reference import siphash24

SHA_A, SHA_B = "a" * 64, "b" * 64  # two modifiers' weights sha256 (release mass.sha256)
IDS = [0, 1, 2, 41, 2**40 + 7, -3]


def _reference(secret: bytes, context: str, ids: list[int]) -> list[int]:
    sub = hashlib.blake2b(b"", key=secret, person=b"noise", digest_size=16).digest()
    prf = hashlib.blake2b(context.encode(), key=sub, digest_size=16,
                          person=b"noise-context").digest()  # fmt: skip
    return [siphash24(prf, struct.pack("<q", i)) & ((1 << 62) - 1) for i in ids]


def test_context_seeds_equal_the_reference_construction():
    secret = bytes(range(32, 64))
    key = OwnerKey(secret)
    got = keyed_row_seeds(pa.array(IDS, pa.int64()), key, SHA_A)
    assert got.tolist() == _reference(secret, SHA_A, IDS)
    # the release recomputes the same seeds from its metadata (bytes keys, as Parquet gives)
    meta = {b"mass.sha256": SHA_A.encode()}
    assert release_row_seeds(pa.array(IDS, pa.int64()), key, meta).tolist() == got.tolist()


def test_two_modifiers_get_independent_seeds_and_both_need_the_key():
    ids = np.arange(1000)
    a, b = OwnerKey(b"a" * 32), OwnerKey(b"b" * 32)
    seeds = {(k, c): keyed_row_seeds(ids, key, c)
             for k, key in (("a", a), ("b", b)) for c in ("", SHA_A, SHA_B)}  # fmt: skip
    for c in ("", SHA_A, SHA_B):  # another key: every seed differs, context or not
        assert (seeds["a", c] != seeds["b", c]).all()
    for k in "ab":  # another modifier: every seed differs
        assert (seeds[k, SHA_A] != seeds[k, SHA_B]).all()
        assert (seeds[k, SHA_A] != seeds[k, ""]).all()


def test_keyed_seeds_for_workers_carry_the_context(tmp_path):
    key = write_key(str(tmp_path / "owner.key"))
    ids = pa.array(IDS, pa.int64())
    want = keyed_row_seeds(ids, key, SHA_A).tolist()
    assert KeyedSeeds.of(key, context=SHA_A)(ids).tolist() == want
    assert KeyedSeeds.of(key, context=SHA_A, read_on_worker=True)(ids).tolist() == want
    assert KeyedSeeds.of(key, context=SHA_B)(ids).tolist() != want
