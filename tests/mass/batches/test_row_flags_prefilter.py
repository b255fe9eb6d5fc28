"""The writer's bypass flags skip float64 work on rows whose float32 cosine is far below the
threshold (mass.batches.spill.near_parallel); the flags must equal the float64 test applied to
every row, on ordinary rows and on the edge cases the prefilter has to keep."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from mass.batches.spill import BYPASS_COSINE, NONFINITE, UNMODIFIED, near_parallel, row_flags
from mass.embeddings import embedding_array


def _reference(out: np.ndarray, src: np.ndarray) -> np.ndarray:
    """The float64 test on every row (the writer's rule before the prefilter)."""
    n = len(out)
    finite = np.isfinite(out).all(axis=1)
    a = np.where(finite[:, None], out, 0.0).astype(np.float64)
    b = np.nan_to_num(src.astype(np.float64), nan=0.0, posinf=0.0, neginf=0.0)
    dot = np.einsum("ij,ij->i", a, b)
    norms = np.sqrt(np.einsum("ij,ij->i", a, a) * np.einsum("ij,ij->i", b, b))
    cos = np.divide(dot, norms, out=np.zeros(n), where=norms > 0)
    same = (cos > BYPASS_COSINE) | (out == src).all(axis=1)
    flags = np.where(same, UNMODIFIED, 0).astype(np.uint8)
    flags[~finite] |= NONFINITE
    return flags


def _flags(out: np.ndarray, src: np.ndarray) -> np.ndarray:
    batch = pa.RecordBatch.from_arrays([embedding_array(out), embedding_array(src)],
                                       names=["emb", "__src"])  # fmt: skip
    return row_flags(batch, "emb", "__src")


def _edge_rows(d: int, rng) -> tuple[np.ndarray, np.ndarray]:
    x = rng.standard_normal((1, d)).astype(np.float32)
    x /= np.linalg.norm(x)
    e = np.zeros((1, d), np.float32)
    e[0, 0] = 1.0
    rows = []  # (out, src)
    for eps in (0.0, 1e-7, 5e-7, 1e-6, 1.5e-6, 2e-6, 1e-5, 1e-4, 1e-3, 3e-3):
        # out rotated away from src by an angle with 1 - cos ~ eps (around the threshold)
        perp = rng.standard_normal((1, d)).astype(np.float32)
        perp -= (perp @ x.T) * x
        perp /= np.linalg.norm(perp)
        t = np.arccos(1 - eps)
        rows.append(((np.cos(t) * x + np.sin(t) * perp).astype(np.float32), x))
    rows += [(3 * x, x), (x * np.float32(1 + 1e-7), x), (x / 10, x), (-x, x), (x, x),
             (np.zeros_like(x), np.zeros_like(x)), (np.zeros_like(x), x),
             (x * 1e-30, x * 1e-30), (x * 1e-30, x), (x * 1e25, x * 1e25), (x * 1e25, x),
             (e, e * 1e-40), (np.full_like(x, np.nan), x), (np.full_like(x, np.inf), x),
             (x, np.full_like(x, np.inf))]  # fmt: skip
    nan_one, inf_both = x.copy(), x.copy()
    nan_one[0, 3] = np.nan
    inf_both[0, 5] = np.inf
    rows += [(nan_one, x), (x, nan_one), (inf_both, inf_both)]
    out, src = (np.concatenate(c).astype(np.float32) for c in zip(*rows, strict=True))
    return out, src


@pytest.mark.parametrize("d", [8, 16, 512, 4096])
def test_flags_equal_the_float64_test_on_every_row(d):
    rng = np.random.default_rng(d)
    out, src = _edge_rows(d, rng)
    got, want = _flags(out, src), _reference(out, src)
    np.testing.assert_array_equal(got, want)
    assert (want & UNMODIFIED).any() and (want & NONFINITE).any() and (want == 0).any()


def test_ordinary_modified_rows_skip_the_float64_work_and_keep_their_flags():
    rng = np.random.default_rng(0)
    src = rng.standard_normal((5000, 256)).astype(np.float32)
    out = (src + rng.standard_normal(src.shape).astype(np.float32)).astype(np.float32)
    out[:50] = src[:50] * 2.5  # bypassed rows among them
    kept = near_parallel(out, src)
    assert set(range(50)) <= set(kept.tolist()) and len(kept) < 100
    np.testing.assert_array_equal(_flags(out, src), _reference(out, src))


def test_random_near_threshold_rows_agree_with_the_float64_test():
    rng = np.random.default_rng(7)
    d = 64
    src = rng.standard_normal((4000, d)).astype(np.float32)
    noise = rng.standard_normal((4000, d)).astype(np.float32)
    scale = 10.0 ** rng.uniform(-5, -1, size=(4000, 1))  # 1 - cos from ~1e-10 to ~1e-2
    out = src + scale * noise * np.linalg.norm(src, axis=1, keepdims=True) / np.sqrt(d)
    out = out.astype(np.float32)
    want = _reference(out, src)
    assert 0 < (want & UNMODIFIED).sum() < 4000
    np.testing.assert_array_equal(_flags(out, src), want)
