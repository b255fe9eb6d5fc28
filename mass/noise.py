"""Deterministic per-row noise: the same row seed gives the same noise in any batch, shard or run.

The stochastic modifier draws its noise from the row's seed, not from a global RNG, so
re-running a job (or splitting it differently across workers) yields identical bytes.
Counter-based hashing keeps every intermediate product below 2**63 so int64 never overflows.

Two seed functions, for two different jobs:
- :func:`keyed_row_seeds` (release time): SipHash-2-4, a keyed PRF, of the row id under the
  owner's noise subkey (:mod:`mass.keys`), bound to the released modifier (``context``, its
  weights' sha256: two different modifiers never share a row's noise, which an attacker
  holding both releases could otherwise cancel). Without the key the seeds, and so the noise,
  are unpredictable even to an attacker who holds the code and every id. Every ROW_SEED sent
  to a served modifier comes from here; :func:`release_row_seeds` recomputes them for a
  release from its metadata (the owner's "key compromised" audit).
- :func:`row_seeds` (public): a fixed mix of the id, for shard assignment, training-time noise
  and benchmarks. Never for release noise: anyone can recompute it from the released ids.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa
import torch

from mass.keys import OwnerKey

_MASK32 = 0xFFFFFFFF
_MASK31 = 0x7FFFFFFF


def row_seeds(ids: pa.Array | np.ndarray) -> np.ndarray:
    """Row ids (ints or strings) -> int64 seeds, stable across processes and platforms."""
    if isinstance(ids, (pa.Array, pa.ChunkedArray)):
        if pa.types.is_integer(ids.type):
            values = ids.to_numpy(zero_copy_only=False).astype(np.int64)
            return _mix_np(values)
        values = np.asarray(ids.to_numpy(zero_copy_only=False))
    else:
        values = np.asarray(ids)
        if values.dtype.kind in "iu":
            return _mix_np(values.astype(np.int64))
    hashed = pd.util.hash_array(values.astype(object), categorize=False)
    return (hashed & np.uint64(0x3FFFFFFFFFFFFFFF)).astype(np.int64)


def keyed_row_seeds(ids: pa.Array | np.ndarray, key: OwnerKey, context: str = "") -> np.ndarray:
    """Row ids -> int64 seeds in [0, 2**62): SipHash-2-4 of the id under the noise subkey.

    Integer ids are hashed as their 8 little-endian bytes; string ids first go through the
    public 64-bit fingerprint of :func:`row_seeds` (a collision only makes two rows share
    noise; the secrecy comes from the keyed PRF on top). Vectorised over the whole batch.
    ``context`` (a release: the modifier's sha256, release metadata ``mass.sha256``) derives
    an independent PRF key per context; "" uses the noise subkey itself.
    """
    return _siphash_seeds(ids, noise_subkey(key, context))


def release_row_seeds(ids: pa.Array | np.ndarray, key: OwnerKey, metadata: dict) -> np.ndarray:
    """The ROW_SEEDs ``mass anonymize`` sent for these released ids, from the release's schema
    metadata (bytes or str keys; the context is ``mass.sha256``). Needs the owner's key."""
    meta = {(k.decode() if isinstance(k, bytes) else k): v for k, v in (metadata or {}).items()}
    sha = meta.get("mass.sha256", b"")
    return keyed_row_seeds(ids, key, sha.decode() if isinstance(sha, bytes) else str(sha))


def noise_subkey(key: OwnerKey, context: str = "") -> bytes:
    """16-byte SipHash key: the owner's noise subkey, or one derived from it per ``context``."""
    sub = key.subkey("noise", 16)
    if not context:
        return sub
    mac = hashlib.blake2b(context.encode(), key=sub, digest_size=16, person=b"noise-context")
    return mac.digest()


def _siphash_seeds(ids: pa.Array | np.ndarray, sub: bytes) -> np.ndarray:
    if isinstance(ids, (pa.Array, pa.ChunkedArray)) and pa.types.is_integer(ids.type):
        msg = ids.to_numpy(zero_copy_only=False).astype(np.int64).view(np.uint64)
    elif not isinstance(ids, (pa.Array, pa.ChunkedArray)) and np.asarray(ids).dtype.kind in "iu":
        msg = np.asarray(ids).astype(np.int64).view(np.uint64)
    else:
        msg = row_seeds(ids).view(np.uint64)
    k0 = int.from_bytes(sub[:8], "little")
    k1 = int.from_bytes(sub[8:], "little")
    return (siphash24_u64(k0, k1, msg) & np.uint64(0x3FFFFFFFFFFFFFFF)).astype(np.int64)


@dataclass(frozen=True)
class KeyedSeeds:
    """Picklable ROW_SEED source for Beam workers: ``keyed_row_seeds(ids, key, context)``.

    A Beam job pickles its DoFns (this object inside them) and a runner stages that pickle
    (Dataflow: ``--staging_location``/``--temp_location``; Dask: the scheduler). By default
    the pickle carries the 16-byte PRF key of this release only, never the owner key (a
    leaked pickle lets its holder denoise releases of this modifier, not others, and not sign
    exports), so protect the runner's staging like the key. With ``key_file``
    (``mass anonymize --noise-key-on-worker``) the pickle holds nothing secret: each worker
    reads the key file itself (it must exist at that path on every worker) and refuses a key
    whose fingerprint differs from the launcher's.
    """

    fingerprint: str
    subkey: bytes | None = field(default=None, repr=False)
    key_file: str | None = None
    context: str = ""

    @classmethod
    def of(cls, key: OwnerKey, *, context: str = "", read_on_worker: bool = False) -> KeyedSeeds:
        if read_on_worker:
            return cls(key.fingerprint, key_file=os.path.abspath(key.source), context=context)
        return cls(key.fingerprint, subkey=noise_subkey(key, context), context=context)

    def __call__(self, ids: pa.Array | np.ndarray) -> np.ndarray:
        sub = self.subkey
        if sub is None:
            sub = _worker_noise_subkey(str(self.key_file), self.fingerprint, self.context)
        return _siphash_seeds(ids, sub)


@functools.lru_cache(maxsize=4)
def _worker_noise_subkey(path: str, fingerprint: str, context: str) -> bytes:
    """The release PRF key from the key file at ``path`` (read once per worker process)."""
    from mass.errors import ConfigError
    from mass.keys import read_key

    key = read_key(path)
    if key.fingerprint != fingerprint:
        raise ConfigError(
            f"{path}: this worker's key has fingerprint {key.fingerprint}, the job was started "
            f"with {fingerprint}; give every worker the same key file (nothing is published)"
        )
    return noise_subkey(key, context)


def _rotl(x: np.ndarray, b: int) -> np.ndarray:
    return (x << np.uint64(b)) | (x >> np.uint64(64 - b))


def siphash24_u64(k0: int, k1: int, m: np.ndarray) -> np.ndarray:
    """SipHash-2-4 (Aumasson & Bernstein) of each 8-byte little-endian message in ``m``.

    ``m`` is uint64; the result equals the reference implementation on those 8 bytes
    (checked against the paper's test vector in tests/mass/test_noise.py).
    """
    m = np.ascontiguousarray(m, dtype=np.uint64)
    n = m.shape[0]
    v0 = np.full(n, k0 ^ 0x736F6D6570736575, dtype=np.uint64)
    v1 = np.full(n, k1 ^ 0x646F72616E646F6D, dtype=np.uint64)
    v2 = np.full(n, k0 ^ 0x6C7967656E657261, dtype=np.uint64)
    v3 = np.full(n, k1 ^ 0x7465646279746573, dtype=np.uint64)

    def rounds(v0, v1, v2, v3, count):
        for _ in range(count):
            v0 += v1
            v1 = _rotl(v1, 13)
            v1 ^= v0
            v0 = _rotl(v0, 32)
            v2 += v3
            v3 = _rotl(v3, 16)
            v3 ^= v2
            v0 += v3
            v3 = _rotl(v3, 21)
            v3 ^= v0
            v2 += v1
            v1 = _rotl(v1, 17)
            v1 ^= v2
            v2 = _rotl(v2, 32)
        return v0, v1, v2, v3

    with np.errstate(over="ignore"):
        for block in (m, np.full(n, 8 << 56, dtype=np.uint64)):  # data, then the length block
            v3 ^= block
            v0, v1, v2, v3 = rounds(v0, v1, v2, v3, 2)
            v0 ^= block
        v2 ^= np.uint64(0xFF)
        v0, v1, v2, v3 = rounds(v0, v1, v2, v3, 4)
    return v0 ^ v1 ^ v2 ^ v3


def _mix_np(values: np.ndarray) -> np.ndarray:
    return values & np.int64(0x3FFFFFFFFFFFFFFF)


def _hash32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer mixer (lowbias32-style) on int64 tensors holding values < 2**32."""
    x = x & _MASK32
    x = ((x ^ (x >> 16)) * 0x7FEB352D) & _MASK32
    x = ((x ^ (x >> 15)) * 0x846CA68B) & _MASK32
    return (x ^ (x >> 16)) & _MASK32


def row_noise(seeds: torch.Tensor, dim: int) -> torch.Tensor:
    """Standard normal noise ``[N, dim]`` that is a pure function of each row's seed."""
    seeds = seeds.to(torch.int64).reshape(-1, 1)
    half = (dim + 1) // 2
    j = torch.arange(half, dtype=torch.int64, device=seeds.device).reshape(1, -1)
    lo = seeds & _MASK32
    hi = (seeds >> 32) & _MASK32
    # Three Feistel rounds: a bijection of the seed's 64 bits onto two 32-bit lanes, and every
    # value below depends on both. A single 32-bit state would let an attacker enumerate all
    # 2**32 possible noise vectors of a row whatever the key (docs/threat-model.md).
    hi = hi ^ _hash32(lo + 0x9E3779B9)
    lo = lo ^ _hash32(hi + 0x85EBCA6B)
    hi = hi ^ _hash32(lo + 0xC2B2AE35)
    a = _hash32(lo ^ _hash32(hi + j * 2 + 1))
    b = _hash32(a ^ _hash32(hi ^ _hash32(lo + j * 2 + 2)))
    u1 = ((a & _MASK31).to(torch.float64) + 1.0) / (2.0**31 + 1.0)
    u2 = (b & _MASK31).to(torch.float64) / 2.0**31
    r = torch.sqrt(-2.0 * torch.log(u1))
    z = torch.cat([r * torch.cos(2 * math.pi * u2), r * torch.sin(2 * math.pi * u2)], dim=1)
    return z[:, :dim].to(torch.float32)


def release_noise(seeds: np.ndarray, modifier: dict) -> np.ndarray | None:
    """The vector ``a`` a released modifier added to each row before its final normalisation.

    ``modifier`` is the release's ``mass.modifier`` metadata (kind and spec). ``mass`` with
    ``output_noise``: ``o * row_noise(seed + 0x5EED) / sqrt(d)``; ``gaussian_noise``:
    ``sigma * row_noise(seed)``; a ``chain``: its last part. None where the noise is not
    additive at the output (MaSS input noise only, the generative filter's latent noise).
    """
    kind, spec = modifier.get("kind"), modifier.get("spec") or {}
    if kind == "chain":
        return release_noise(seeds, spec["parts"][-1]) if spec.get("parts") else None
    s = torch.from_numpy(np.ascontiguousarray(seeds, dtype=np.int64))
    if kind == "mass" and float(spec.get("output_noise", 0.0)) > 0:
        dim = int(spec["dim"])
        z = row_noise(s + 0x5EED, dim).numpy().astype(np.float64)
        return float(spec["output_noise"]) * z / dim**0.5
    if kind == "gaussian_noise":
        return float(spec["sigma"]) * row_noise(s, int(spec["dim"])).numpy().astype(np.float64)
    return None


def remove_release_noise(
    x: np.ndarray, ids: pa.Array | np.ndarray, key: OwnerKey, metadata: dict
) -> np.ndarray | None:
    """Released rows ``x`` with their noise removed: what an attacker holding the key sees.

    ``x' = n(y + a)`` with unit ``y``: the ``c > 0`` with ``||c x' - a|| = 1`` undoes the
    normalisation, then ``y = c x' - a`` (:func:`subtract_noise`). For the owner's "key
    compromised" audit; None where :func:`release_noise` is None. ``metadata``: the release's
    schema metadata (``mass.sha256``, ``mass.modifier``).
    """
    meta = {(k.decode() if isinstance(k, bytes) else k): v for k, v in (metadata or {}).items()}
    raw = meta.get("mass.modifier") or b"{}"
    modifier = json.loads(raw.decode() if isinstance(raw, bytes) else raw)
    a = release_noise(release_row_seeds(ids, key, metadata), modifier)
    return None if a is None else subtract_noise(x, a)


def subtract_noise(x: np.ndarray, a: np.ndarray) -> np.ndarray:
    """``y`` from ``x' = n(y + a)`` and ``a``, for unit ``y`` (float64 ``[N, d]``).

    ``c`` solves ``c**2 - 2 c (x'.a) + |a|**2 - 1 = 0``; the larger root is taken. It is the
    true one whenever ``y.a > -1`` (always when ``|a| <= 1``); beyond, a row whose ``y``
    points against its noise has a second unit solution and gets the wrong one.
    """
    x = np.asarray(x, dtype=np.float64)
    xa = (x * a).sum(1, keepdims=True)
    c = xa + np.sqrt(np.maximum(xa**2 - (a * a).sum(1, keepdims=True) + 1.0, 0.0))
    return c * x - a
