"""Importable stand-ins for tests and examples (Beam workers unpickle them by reference).

Each class is a zero-argument "loader" for :class:`transforms.inference.function.FunctionModelHandler`
returning ``infer(tensors) -> float32[n, d]``, the same contract as a Triton modifier.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mass.embeddings import embedding_array
from mass.rows import normalize_rows as _unit
from mass.serving.contract import EMBEDDING, ROW_SEED


class NumpyModifier:
    """n(x + n(roll(x) + 0.1 * seed noise)): shaped like eq. 1, deterministic per ROW_SEED
    (in a release the keyed seed of the row id, so a stand-in for a stochastic modifier)."""

    def __call__(self):
        def infer(t):
            x = _unit(np.asarray(t[EMBEDDING], np.float32))
            seeds = t[ROW_SEED][:, 0].astype(np.uint64)
            noise = (
                (seeds[:, None] * np.uint64(2654435761) + np.arange(x.shape[1], dtype=np.uint64))
                % np.uint64(1000)
            ).astype(np.float32) / 1000.0
            return _unit(x + _unit(np.roll(x, 1, axis=1) + 0.1 * noise))

        return infer


class ZeroDims:
    """Zeroes the embedding dimensions ``dims`` and renormalises: erases what lives there."""

    def __init__(self, dims) -> None:
        self.dims = tuple(int(d) for d in dims)

    def __call__(self):
        def infer(t):
            x = np.array(t[EMBEDDING], np.float32)
            x[:, list(self.dims)] = 0.0
            return _unit(x)

        return infer


class PinDim:
    """Overwrites dimension ``index`` with ``value`` and renormalises: whatever lived only
    there (a suppressed attribute planted in it) is gone from the embedding."""

    def __init__(self, index: int = 0, value: float = 5.0) -> None:
        self.index, self.value = index, value

    def __call__(self):
        def infer(t):
            x = np.array(t[EMBEDDING], np.float32)
            x[:, self.index] = self.value
            return _unit(x)

        return infer


class RandomRotation:
    """A seeded random rotation of the dimensions ``dims`` (default all) among themselves: far
    from the input, yet what lives there stays readable to an attacker retrained on the
    release (and what lives elsewhere stays where a frozen reader looks for it)."""

    def __init__(self, dim: int, seed: int = 7, dims=None) -> None:
        self.dim, self.seed = dim, seed
        self.dims = list(range(dim)) if dims is None else [int(d) for d in dims]

    def __call__(self):
        k = len(self.dims)
        q, _ = np.linalg.qr(np.random.default_rng(self.seed).normal(size=(k, k)))
        q = q.astype(np.float32)

        def infer(t):
            x = np.array(t[EMBEDDING], np.float32)
            x[:, self.dims] = x[:, self.dims] @ q
            return _unit(x)

        return infer


class Bypass:
    """Returns its input unchanged: what a misconfigured model would do."""

    def __call__(self):
        return lambda t: np.array(t[EMBEDDING], np.float32)


class WrongWidth:
    """Returns one column too many: a response the handler must refuse."""

    def __call__(self):
        return lambda t: np.zeros((len(t[EMBEDDING]), t[EMBEDDING].shape[1] + 1), np.float32)


def write_embeddings(
    path: str,
    *,
    rows: int,
    dim: int,
    seed: int = 0,
    row_group: int = 500,
    label: bool = True,
    id_offset: int = 0,
    nan_rows: tuple[int, ...] = (),
    zero_rows: tuple[int, ...] = (),
) -> pa.Table:
    """A small embedding dataset (id, emb, digit) written with fixed row groups."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, dim)).astype(np.float32)
    x[list(nan_rows), 0] = np.nan
    x[list(zero_rows)] = 0.0
    cols = {"id": pa.array(np.arange(rows, dtype=np.int64) + id_offset), "emb": embedding_array(x)}
    if label:
        cols["digit"] = pa.array(rng.integers(0, 10, rows))
    table = pa.table(cols)
    pq.write_table(table, path, row_group_size=row_group)
    return table


def transductive_repair(where: str, *, rows: int, dim: int, row_group: int, steps: int,
                        epochs: int) -> tuple[str, str, dict]:  # fmt: skip
    """A small ``ot_repair`` fitted transductively on embeddings written to ``where``:
    (the input it was fitted on, its modifier.pt, the model info export.json records)."""
    import os

    from mass.io import load_embeddings
    from mass.methods import get_method
    from mass.modifiers import save_modifier

    src = os.path.join(where, "rows.parquet")
    write_embeddings(src, rows=rows, dim=dim, row_group=row_group)
    ds = load_embeddings(src, label_cols=["digit"])
    params = {"transductive": True, "steps": steps, "predictor_epochs": epochs, "hidden": 0}
    fit = get_method("ot_repair").fit(ds, suppress=["digit"], preserve=[], params=params,
                                      progress=False)  # fmt: skip
    path = os.path.join(where, "modifier.pt")
    save_modifier(fit.modifier, path, method="ot_repair")
    info = {"name": "repair", "version": 1, "sha256": "abc", "method": "ot_repair",
            "suppress": ["digit"], "preserve": [], "config_hash": "h", "dim": dim,
            "stochastic": False, "modifier": {"kind": fit.modifier.kind,
                                              "spec": fit.modifier.spec.to_dict()}}  # fmt: skip
    return src, path, info
