"""Deterministic per-row noise: the same row id gives the same noise in any batch, shard or run.

The stochastic modifier draws its noise input from the row's seed, not from a global RNG, so
re-running a job (or splitting it differently across workers) yields identical bytes.
Counter-based hashing keeps every intermediate product below 2**63 so int64 never overflows.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pyarrow as pa
import torch

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
    base = _hash32(lo ^ _hash32(hi + 0x9E3779B9))
    a = _hash32(base + j * 2 + 1)
    b = _hash32(a ^ _hash32(base + j * 2 + 2))
    u1 = ((a & _MASK31).to(torch.float64) + 1.0) / (2.0**31 + 1.0)
    u2 = (b & _MASK31).to(torch.float64) / 2.0**31
    r = torch.sqrt(-2.0 * torch.log(u1))
    z = torch.cat([r * torch.cos(2 * math.pi * u2), r * torch.sin(2 * math.pi * u2)], dim=1)
    return z[:, :dim].to(torch.float32)
