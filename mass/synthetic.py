"""Synthetic embedding data with a sensitive and a utility attribute, for fast tests.

Each row draws a sensitive label s and a utility label u; with probability ``rho`` u is
copied from s (mod its class count), otherwise it is drawn independently, so ``rho``
controls the s/u correlation. The embedding is ``sep_s * e_s + sep_u * e_u + noise`` with
random unit class directions e_s, e_u, then L2-normalised, so both labels are linearly
decodable and a modifier can remove one while keeping the other.

``spread_s`` > 0 adds a second-order signal: rows of sensitive class c get extra noise of
scale ``spread_s`` in the class's own ``spread_dims``-dim subspace (orthogonal across classes),
so the classes differ in covariance, not in mean or norm: s stays recoverable by a non-linear
attacker after every class mean has been equalised.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mass.embeddings import embedding_array
from mass.io import EmbeddingDataset, LabelEncoding
from mass.rows import normalize_rows


def make_synthetic(
    n: int = 512,
    dim: int = 16,
    *,
    s_classes: int = 2,
    u_classes: int = 2,
    rho: float = 0.0,
    sep_s: float = 1.0,
    sep_u: float = 1.0,
    noise: float = 0.3,
    seed: int = 0,
    s_name: str = "s",
    u_name: str = "u",
    spread_s: float = 0.0,
    spread_dims: int = 4,
) -> EmbeddingDataset:
    """N rows of dimension ``dim`` with labels ``s_name`` and ``u_name`` (ints from 0)."""
    rng = np.random.default_rng(seed)
    s = rng.integers(0, s_classes, size=n)
    u_free = rng.integers(0, u_classes, size=n)
    u = np.where(rng.random(n) < rho, s % u_classes, u_free)
    dirs_s = rng.standard_normal((s_classes, dim))
    dirs_u = rng.standard_normal((u_classes, dim))
    dirs_s, dirs_u = normalize_rows(dirs_s, np.float64), normalize_rows(dirs_u, np.float64)
    x = sep_s * dirs_s[s] + sep_u * dirs_u[u] + noise * rng.standard_normal((n, dim))
    if spread_s > 0:  # drawn after everything else: spread_s=0 leaves the data unchanged
        if s_classes * spread_dims > dim:
            raise ValueError(f"spread_dims={spread_dims} x {s_classes} classes > dim={dim}")
        basis = np.linalg.qr(rng.standard_normal((dim, dim)))[0]
        sub = basis[:, : s_classes * spread_dims].T.reshape(s_classes, spread_dims, dim)
        z = rng.standard_normal((n, spread_dims))
        x += spread_s * np.einsum("nk,nkd->nd", z, sub[s])
    x = normalize_rows(x, np.float64)
    labels = {s_name: s.astype(np.int64), u_name: u.astype(np.int64)}
    encodings = {
        s_name: LabelEncoding(s_name, tuple(range(s_classes))),
        u_name: LabelEncoding(u_name, tuple(range(u_classes))),
    }
    return EmbeddingDataset(
        ids=pa.array(np.arange(n, dtype=np.int64)),
        x=np.ascontiguousarray(x, dtype=np.float32),
        labels=labels,
        encodings=encodings,
        source=f"synthetic(n={n}, dim={dim}, rho={rho}, seed={seed})",
    )


def block_attributes(n: int, dim: int, *, seed: int = 0) -> dict[str, np.ndarray]:
    """Unit rows where ``s`` (3 classes) lives in dims 0-7 and ``r`` (2 classes) in dims 8-15,
    the rest noise: an attribute a modifier can drop by zeroing a block (audit tests)."""
    rng = np.random.default_rng(seed)
    s, r = rng.integers(0, 3, n), rng.integers(0, 2, n)
    x = rng.normal(scale=0.15, size=(n, dim))
    x[np.arange(n), s] += 1.0
    x[np.arange(n), 8 + r] += 1.0
    x = normalize_rows(x)
    return {"id": np.arange(n, dtype=np.int64) + 1000, "s": s, "r": r, "x": x}


def to_table(ds: EmbeddingDataset, *, id_col: str = "id", emb_col: str = "emb") -> pa.Table:
    """An :class:`EmbeddingDataset` as an Arrow table (id, emb fixed_size_list, labels)."""
    cols = {id_col: ds.ids, emb_col: embedding_array(ds.x)}
    for name, y in ds.labels.items():
        cols[name] = pa.array(y)
    return pa.table(cols)


def write_synthetic(path: str, **kwargs) -> EmbeddingDataset:
    """Generate with :func:`make_synthetic` (same keywords) and write Parquet to ``path``."""
    ds = make_synthetic(**kwargs)
    pq.write_table(to_table(ds), path)
    return ds
