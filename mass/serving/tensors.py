"""Arrow record batches <-> the named numpy tensors a model takes and returns.

Input builders are picklable callables ``RecordBatch -> {tensor name: array}`` (names from
:mod:`mass.serving.contract`); :func:`check_response` refuses an output that is not float32
``[rows, d]`` and finite; :func:`with_output_column` writes it back as a fixed-size-list
column. No per-row Python objects except for text, which gRPC sends as bytes objects.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from mass.embeddings import embedding_array, fixed_view
from mass.errors import ResponseShapeError
from mass.noise import KeyedSeeds
from mass.serving.contract import EMBEDDING, IMAGE, ROW_SEED, TEXT

Tensors = dict[str, np.ndarray]


class ModifierInputs:
    """Modifier tensors: ``EMBEDDING`` float32 ``[n, d]`` and ``ROW_SEED`` int64 ``[n, 1]``.

    ``ROW_SEED`` is ``seeds(ids)``, the owner-keyed PRF of each row id
    (:class:`mass.noise.KeyedSeeds`: ``keyed_row_seeds(ids, key, context)``), so the noise a
    stochastic modifier draws from it cannot be recomputed from the released ids. Without
    ``seeds`` every ROW_SEED is 0: only for deterministic modifiers, which ignore it (the
    anonymize job refuses a stochastic or unknown modifier without a key). Never the public
    :func:`mass.noise.row_seeds`, which anyone can recompute from the released ids.
    """

    def __init__(
        self, *, id_col: str = "id", emb_col: str = "emb", seeds: KeyedSeeds | None = None
    ) -> None:
        self.id_col, self.emb_col, self.seeds = id_col, emb_col, seeds

    def with_seeds(self, seeds: KeyedSeeds | None) -> ModifierInputs:
        return ModifierInputs(id_col=self.id_col, emb_col=self.emb_col, seeds=seeds)

    def __call__(self, batch: pa.RecordBatch) -> Tensors:
        if self.seeds is None:
            seeds = np.zeros((batch.num_rows, 1), dtype=np.int64)
        else:
            seeds = self.seeds(batch.column(self.id_col)).reshape(-1, 1)
        return {EMBEDDING: fixed_view(batch.column(self.emb_col), np.float32), ROW_SEED: seeds}


class ImageInputs:
    """Extractor tensor ``IMAGE`` uint8 ``[n, 2352]`` from a fixed-size-list<uint8> column."""

    def __init__(self, *, raw_col: str = "image", name: str = IMAGE) -> None:
        self.raw_col, self.name = raw_col, name

    def __call__(self, batch: pa.RecordBatch) -> Tensors:
        return {self.name: fixed_view(batch.column(self.raw_col), np.uint8)}


class TextInputs:
    """Extractor tensor ``TEXT`` BYTES ``[n, 1]`` (strings must cross as objects for gRPC)."""

    def __init__(self, *, raw_col: str = "text", name: str = TEXT) -> None:
        self.raw_col, self.name = raw_col, name

    def __call__(self, batch: pa.RecordBatch) -> Tensors:
        col = batch.column(self.raw_col).to_numpy(zero_copy_only=False)
        return {self.name: np.asarray([s.encode() for s in col], dtype=object).reshape(-1, 1)}


def check_response(out, *, rows: int, dim: int | None, model: str) -> np.ndarray:
    """Refuse a response that is not float32 ``[rows, dim]`` and finite."""
    if (
        not isinstance(out, np.ndarray)
        or out.dtype != np.float32
        or out.ndim != 2
        or out.shape[0] != rows
        or (dim is not None and out.shape[1] != dim)
    ):
        got = (getattr(out, "shape", None), getattr(out, "dtype", type(out).__name__))
        raise ResponseShapeError(
            f"model '{model}' returned {got} for {rows} rows; expected float32 [{rows}, "
            f"{dim if dim is not None else 'd'}]; check the model's config.pbtxt output dims"
        )
    if not np.isfinite(out).all():
        row = int(np.flatnonzero(~np.isfinite(out).all(axis=1))[0])
        raise ResponseShapeError(
            f"model '{model}' returned NaN/Inf at batch row {row}; "
            "the batch is refused; check the exported model"
        )
    return out


def with_output_column(
    batch: pa.RecordBatch,
    out: np.ndarray,
    *,
    output_col: str,
    keep_input_as: str | None = None,
    input_col: str | None = None,
) -> pa.RecordBatch:
    """``batch`` with ``output_col`` set to ``out`` (replaced or appended), and the model's
    input column copied to ``keep_input_as`` first when asked (the writer's bypass check)."""
    result = batch
    if keep_input_as:
        result = result.append_column(keep_input_as, batch.column(input_col or output_col))
    col = embedding_array(out)
    if output_col in result.schema.names:
        return result.set_column(result.schema.get_field_index(output_col), output_col, col)
    return result.append_column(output_col, col)
