"""Synthetic inputs of the throughput benchmark: unit-norm embeddings and a random modifier."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

MODEL = "bench_modifier"  # the model name the modifier is exported and served under


def write_dataset(path: Path, *, rows: int, dim: int, seed: int, chunk: int = 65536) -> Path:
    """Unit-norm float32 rows in row groups of ``chunk``, written chunk by chunk (bounded RAM)."""
    from mass.batches.parquet import WRITE_OPTIONS
    from mass.embeddings import embedding_array

    if path.exists():
        return path
    rng = np.random.default_rng(seed)
    schema = pa.schema([("id", pa.int64()), ("emb", pa.list_(pa.float32(), dim))])
    opts = {k: v for k, v in WRITE_OPTIONS.items() if k != "row_group_size"}
    tmp = path.with_suffix(".tmp")
    with pq.ParquetWriter(tmp, schema, **opts) as writer:
        for start in range(0, rows, chunk):
            n = min(chunk, rows - start)
            x = rng.standard_normal((n, dim), dtype=np.float32)
            x /= np.linalg.norm(x, axis=1, keepdims=True)
            ids = pa.array(np.arange(start, start + n, dtype=np.int64))
            writer.write_table(pa.table({"id": ids, "emb": embedding_array(x)}, schema=schema))
    tmp.rename(path)
    return path


def make_run(run_dir: Path, *, dim: int, noise_dim: int, seed: int) -> Path:
    """A seeded random MaSS DataModifier (default hidden sizes) saved as RUN_DIR/modifier.pt."""
    import torch

    from mass.modifiers import DataModifier, ModifierSpec, save_modifier

    run_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    model = DataModifier(ModifierSpec(dim=dim, noise_dim=noise_dim))
    save_modifier(
        model,
        str(run_dir / "modifier.pt"),
        method="mass",
        suppress=["s"],
        preserve=[],
        config_hash="bench",
    )
    return run_dir / "modifier.pt"


def owner_key(work: Path) -> None:
    """Exports are signed and the job verifies them: without ``MASS_SIGNING_KEY_FILE`` set,
    a throw-away owner key in ``work`` signs (and seeds) this benchmark's runs; child
    processes (Dask workers) inherit it."""
    from mass.keys import NOISE_KEY_ENV, SIGNING_KEY_ENV, write_key

    if os.environ.get(SIGNING_KEY_ENV):
        return
    path = work / "bench-owner.key"
    if not path.exists():
        write_key(str(path))
    os.environ[SIGNING_KEY_ENV] = str(path)
    os.environ.setdefault(NOISE_KEY_ENV, str(path))


def matrix(batch: pa.RecordBatch | pa.Table, col: str) -> np.ndarray:
    """Fixed-size-list column -> [n, d] float32 numpy view over the Arrow buffer."""
    arr = batch.column(col)
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    d = arr.type.list_size
    return arr.values.slice(arr.offset * d, len(arr) * d).to_numpy().reshape(len(arr), d)


def _tensor(a: np.ndarray):
    """Zero-copy torch view of a read-only Arrow-backed array (torch only reads it)."""
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(a)


def reference(weights: Path, table: pa.Table, seeds) -> np.ndarray:
    """The in-process modifier's output for ``table`` (checks what other parts write).

    ``seeds(ids) -> int64[n]``: the ROW_SEED source the checked part used.
    """
    import torch

    from mass.modifiers import load_modifier

    x = np.ascontiguousarray(matrix(table, "emb"))
    s = np.ascontiguousarray(seeds(table.column("id").combine_chunks()).reshape(-1))
    with torch.inference_mode():
        model = load_modifier(str(weights))
        return model(torch.from_numpy(x), torch.from_numpy(s)).numpy()
