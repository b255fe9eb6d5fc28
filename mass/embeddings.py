"""Embedding columns (Arrow lists of numbers) <-> numpy matrices: one decoder, small policies.

:func:`decode` reads a fixed-size-list or list column into float32 ``[n, d]``; its
:class:`Policy` says what a null row, a row of another length and a NaN/Inf value do:

* :data:`STRICT` (training, calibration and audit inputs, :func:`embedding_matrix`): each is
  an error naming the source, the column and the first bad row;
* :data:`KEEP` (a release under audit, ``mass.audit.data.release_matrix``): null rows become
  NaN rows and NaN/Inf stay, so the audit judges what was released; a ragged column is an
  error;
* :data:`PER_ROW` (the job's quarantine, ``mass.batches.quarantine.validate_batch``): null rows
  and rows of the wrong length become NaN rows, marked in :attr:`Decoded.right_dim`; the caller
  quarantines them.

:func:`fixed_view` is the zero-copy read of a fixed-size-list column (the hot path: a model's
input tensors, the writer's bypass check); :func:`embedding_array` is the way back.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mass.errors import InvalidValueError, SchemaError, first_null


@dataclass(frozen=True)
class Policy:
    null_rows: str  # "error" | "nan"
    wrong_length: str  # "error" (a ragged column) | "nan" (rows marked, not fatal)
    nonfinite: str  # "error" | "keep"
    writable: bool = False  # always return a fresh array (the caller may write into it)


STRICT = Policy(null_rows="error", wrong_length="error", nonfinite="error")
KEEP = Policy(null_rows="nan", wrong_length="error", nonfinite="keep", writable=True)
PER_ROW = Policy(null_rows="nan", wrong_length="nan", nonfinite="keep")


@dataclass(frozen=True)
class Decoded:
    x: np.ndarray  # float32 [n, d]
    right_dim: np.ndarray  # bool [n]: False for list rows of another length, or null ones


def is_list_type(typ: pa.DataType) -> bool:
    return pa.types.is_fixed_size_list(typ) or pa.types.is_list(typ) or pa.types.is_large_list(typ)


def fixed_view(arr: pa.Array | pa.ChunkedArray, dtype=np.float32) -> np.ndarray:
    """Fixed-size-list column -> ``[n, d]`` numpy over the Arrow values buffer (no copy when
    the dtype matches or is None; a sliced array's offset is respected)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    d, n = arr.type.list_size, len(arr)
    values = arr.values.slice(arr.offset * d, n * d).to_numpy(zero_copy_only=False)
    return (values if dtype is None else values.astype(dtype, copy=False)).reshape(n, d)


def embedding_array(x: np.ndarray) -> pa.FixedSizeListArray:
    """float32 ``[N, d]`` -> Arrow fixed-size-list column, zero-copy over the numpy buffer."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    return pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), x.shape[1])


def decode(
    arr: pa.Array | pa.ChunkedArray,
    *,
    column: str,
    source: str = "",
    dim: int | None = None,
    policy: Policy = STRICT,
) -> Decoded:
    """The embedding column ``arr`` (named ``column`` of ``source``) as float32 ``[n, d]``.

    ``dim`` is what the model expects: a column of another fixed size is a
    :class:`SchemaError`; under :data:`PER_ROW` (where ``dim`` is required) list rows of
    another length are NaN rows with ``right_dim`` False. Every error names the source, the
    column and, where it applies, the first offending row.
    """
    where = f"{source}: " if source else ""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    typ, n = arr.type, len(arr)
    if not is_list_type(typ):
        raise SchemaError(f"{where}column '{column}' has type {typ}; expected a list of floats")
    if not (pa.types.is_floating(typ.value_type) or pa.types.is_integer(typ.value_type)):
        raise SchemaError(
            f"{where}column '{column}' holds {typ.value_type}; expected float32 or float64"
        )
    null = arr.is_null().to_numpy(zero_copy_only=False) if arr.null_count else None
    if null is not None and policy.null_rows == "error":
        raise InvalidValueError(
            f"{where}column '{column}' row {int(np.flatnonzero(null)[0])} is null"
        )
    right = np.ones(n, bool)
    if pa.types.is_fixed_size_list(typ):
        d = typ.list_size
        _check_dim(where, column, d, dim)
        values = arr.values.slice(arr.offset * d, n * d)
    else:
        lengths = pc.fill_null(pc.list_value_length(arr), -1).to_numpy(zero_copy_only=False)
        if policy.wrong_length == "nan":
            if dim is None:
                raise ValueError("decode(policy=PER_ROW) needs the model's dim")
            d, right = dim, lengths == dim
        else:
            valid = lengths >= 0
            first = int(np.flatnonzero(valid)[0]) if valid.any() else 0
            d = int(lengths[first]) if valid.any() else 0
            bad = np.flatnonzero(valid & (lengths != d))
            if bad.size:
                raise InvalidValueError(
                    f"{where}column '{column}' is ragged: row {int(bad[0])} has "
                    f"{int(lengths[bad[0]])} values, row {first} has {d}"
                )
            _check_dim(where, column, d, dim)
            right = valid if null is not None else right
        taken = arr if right.all() else arr.filter(pa.array(right))
        values = taken.flatten() if len(taken) else pa.array([], type=pa.float32())
    if values.null_count and policy.nonfinite == "error":
        pos = first_null(values)
        raise InvalidValueError(f"{where}column '{column}' row {pos // max(d, 1)} has a null value")
    if values.null_count:
        values = pc.fill_null(values.cast(pa.float32()), np.nan)
    flat = values.to_numpy(zero_copy_only=False).astype(np.float32, copy=False)
    if right.all():
        x = flat.reshape(n, d)
        if policy.writable or (null is not None and null.any()):
            x = x.copy()
    else:
        x = np.full((n, d), np.nan, np.float32)
        x[right] = flat.reshape(-1, d)
    if null is not None:
        x[null] = np.nan
    if policy.nonfinite == "error":
        finite = np.isfinite(x).all(axis=1)
        if not finite.all():
            row = int(np.flatnonzero(~finite)[0])
            raise InvalidValueError(
                f"{where}column '{column}' row {row} has NaN or Inf; clean or drop it"
            )
    return Decoded(np.ascontiguousarray(x), right)


def _check_dim(where: str, column: str, got: int, dim: int | None) -> None:
    if dim is not None and got != dim:
        raise SchemaError(
            f"{where}column '{column}' has dimension {got}, the model expects {dim}; pass the "
            "embedding column that matches the model"
        )


def embedding_matrix(
    table: pa.Table, column: str, *, source: str, expected_dim: int | None = None
) -> np.ndarray:
    """Column of fixed-size lists or lists of floats -> C-contiguous float32 ``[N, d]``
    (:data:`STRICT`: ragged lists, nulls, non-float values, NaN/Inf and a dimension other
    than ``expected_dim`` are refused, naming ``source``, ``column`` and the first bad row)."""
    return decode(_column(table, column, source), column=column, source=source, dim=expected_dim).x


def release_matrix(table: pa.Table, column: str, *, source: str) -> np.ndarray:
    """Embedding column -> float32 [N, d], keeping NaN/Inf and mapping null rows to NaN
    (:data:`KEEP`)."""
    return decode(_column(table, column, source), column=column, source=source, policy=KEEP).x


def _column(table: pa.Table, column: str, source: str) -> pa.ChunkedArray:
    if column not in table.column_names:
        raise SchemaError(
            f"{source}: no embedding column '{column}' (columns: {table.column_names}); "
            "pass --emb-col"
        )
    return table.column(column)
