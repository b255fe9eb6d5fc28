"""Parquet in and out under the data contract (docs/architecture.md, 'Data contract').

Readers return Arrow-backed numpy views (no per-row Python objects) and validate up front:
every error names the file, the column and, where it applies, the first offending row.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mass.errors import (
    InvalidValueError,
    LabelError,
    MissingInputError,
    SchemaError,
    UnreadableInputError,
)


def expand_paths(spec: str) -> list[str]:
    """A file, a directory of ``*.parquet`` or a glob -> sorted file list (never empty)."""
    if "://" in spec:  # remote filesystems are resolved by pyarrow / Beam, not here
        return [spec]
    if os.path.isdir(spec):
        files = sorted(glob.glob(os.path.join(spec, "**", "*.parquet"), recursive=True))
    elif any(ch in spec for ch in "*?["):
        files = sorted(glob.glob(spec, recursive=True))
    elif os.path.exists(spec):
        files = [spec]
    else:
        raise MissingInputError(f"{spec}: no such file or directory; check the --input/--data path")
    if not files:
        raise MissingInputError(f"{spec}: matches no Parquet file; check the path or glob")
    return files


def read_table(spec: str, columns: list[str] | None = None) -> pa.Table:
    """Read every file of ``spec`` into one table, naming the file that fails to parse."""
    tables = []
    for path in expand_paths(spec):
        try:
            tables.append(pq.read_table(path, columns=columns))
        except (pa.ArrowInvalid, OSError) as e:
            if isinstance(e, KeyError):
                raise
            msg = str(e)
            if columns and ("No match for FieldRef" in msg or "not found" in msg.lower()):
                raise SchemaError(f"{path}: missing column(s) among {columns}: {msg}") from e
            raise UnreadableInputError(
                f"{path}: not readable as Parquet ({msg}); re-export the file or remove it"
            ) from e
    try:
        return pa.concat_tables(tables, promote_options="none")
    except pa.ArrowInvalid as e:
        raise SchemaError(f"{spec}: files have different schemas ({e})") from e


def embedding_matrix(
    table: pa.Table, column: str, *, source: str, expected_dim: int | None = None
) -> np.ndarray:
    """Column of fixed-size lists or lists of floats -> C-contiguous float32 ``[N, d]``.

    Rejects ragged lists, nulls, non-float values, NaN/Inf and a dimension other than
    ``expected_dim``; each message names ``source``, ``column`` and the first bad row.
    """
    if column not in table.column_names:
        raise SchemaError(
            f"{source}: no embedding column '{column}' (columns: {table.column_names}); "
            "pass --emb-col"
        )
    arr = table.column(column).combine_chunks()
    typ = arr.type
    if not (
        pa.types.is_fixed_size_list(typ) or pa.types.is_list(typ) or pa.types.is_large_list(typ)
    ):
        raise SchemaError(f"{source}: column '{column}' has type {typ}; expected a list of floats")
    if not (pa.types.is_floating(typ.value_type) or pa.types.is_integer(typ.value_type)):
        raise SchemaError(
            f"{source}: column '{column}' holds {typ.value_type}; expected float32 or float64"
        )
    n = len(arr)
    if arr.null_count:
        row = int(np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))[0])
        raise InvalidValueError(f"{source}: column '{column}' row {row} is null")
    if pa.types.is_fixed_size_list(typ):
        dim = typ.list_size
    else:
        lengths = pc.list_value_length(arr).to_numpy(zero_copy_only=False)
        dim = int(lengths[0]) if n else 0
        bad = np.flatnonzero(lengths != dim)
        if bad.size:
            raise InvalidValueError(
                f"{source}: column '{column}' is ragged: row {int(bad[0])} has "
                f"{int(lengths[bad[0]])} values, row 0 has {dim}"
            )
    if expected_dim is not None and dim != expected_dim:
        raise SchemaError(
            f"{source}: column '{column}' has dimension {dim}, the model expects {expected_dim}"
        )
    flat = arr.flatten() if n else pa.array([], type=pa.float32())
    if flat.null_count:
        pos = int(np.flatnonzero(flat.is_null().to_numpy(zero_copy_only=False))[0])
        raise InvalidValueError(
            f"{source}: column '{column}' row {pos // max(dim, 1)} has a null value"
        )
    values = flat.to_numpy(zero_copy_only=False).astype(np.float32, copy=False)
    mat = values.reshape(n, dim)
    finite = np.isfinite(mat).all(axis=1)
    if not finite.all():
        row = int(np.flatnonzero(~finite)[0])
        raise InvalidValueError(
            f"{source}: column '{column}' row {row} has NaN or Inf; clean or drop it"
        )
    return np.ascontiguousarray(mat)


def check_ids(table: pa.Table, column: str, *, source: str) -> pa.Array:
    """The id column must exist, hold no nulls and no duplicates."""
    if column not in table.column_names:
        raise SchemaError(
            f"{source}: no id column '{column}' (columns: {table.column_names}); pass --id-col"
        )
    ids = table.column(column).combine_chunks()
    if ids.null_count:
        row = int(np.flatnonzero(ids.is_null().to_numpy(zero_copy_only=False))[0])
        raise InvalidValueError(f"{source}: id column '{column}' row {row} is null")
    uniq = pc.unique(ids)
    if len(uniq) != len(ids):
        counts = pc.value_counts(ids)
        dup = counts.filter(pc.greater(counts.field("counts"), 1))[0]["values"].as_py()
        rows = np.flatnonzero(
            pc.equal(ids, pa.scalar(dup, ids.type)).to_numpy(zero_copy_only=False)
        )
        raise InvalidValueError(
            f"{source}: id column '{column}' has duplicate id {dup!r} at rows {rows[:5].tolist()}"
        )
    return ids


@dataclass(frozen=True)
class LabelEncoding:
    """Class values of one attribute, in a fixed order; index = integer label."""

    name: str
    classes: tuple

    def encode(self, values: pa.Array, *, source: str) -> np.ndarray:
        lookup = pa.array(list(self.classes), type=values.type)
        idx = pc.index_in(values, value_set=lookup)
        if idx.null_count:
            row = int(np.flatnonzero(idx.is_null().to_numpy(zero_copy_only=False))[0])
            raise LabelError(
                f"{source}: label column '{self.name}' row {row} has value "
                f"{values[row].as_py()!r}, unseen at training time (known: {list(self.classes)})"
            )
        return idx.to_numpy(zero_copy_only=False).astype(np.int64)


@dataclass
class EmbeddingDataset:
    """In-memory training/audit data: ids, float32 embeddings and integer labels."""

    ids: pa.Array
    x: np.ndarray
    labels: dict[str, np.ndarray] = field(default_factory=dict)
    encodings: dict[str, LabelEncoding] = field(default_factory=dict)
    source: str = ""

    def __len__(self) -> int:
        return int(self.x.shape[0])

    def num_classes(self, attr: str) -> int:
        return len(self.encodings[attr].classes)


def load_embeddings(
    spec: str,
    *,
    id_col: str = "id",
    emb_col: str = "emb",
    label_cols: list[str] | tuple[str, ...] = (),
    encodings: dict[str, LabelEncoding] | None = None,
    expected_dim: int | None = None,
    require_multiclass: bool = True,
) -> EmbeddingDataset:
    """Read and validate a Parquet embedding dataset for training or audit.

    ``encodings`` (from a training run) fixes the class order; values unseen there are an
    error. Without it, classes are sorted and a label with a single class is an error.
    """
    table = read_table(spec)
    ids = check_ids(table, id_col, source=spec)
    x = embedding_matrix(table, emb_col, source=spec, expected_dim=expected_dim)
    labels: dict[str, np.ndarray] = {}
    encs: dict[str, LabelEncoding] = {}
    for col in label_cols:
        if col not in table.column_names:
            raise SchemaError(
                f"{spec}: no label column '{col}' (columns: {table.column_names}); "
                "fix suppress/preserve in the config"
            )
        values = table.column(col).combine_chunks()
        if values.null_count:
            row = int(np.flatnonzero(values.is_null().to_numpy(zero_copy_only=False))[0])
            raise LabelError(f"{spec}: label column '{col}' row {row} is null")
        if encodings and col in encodings:
            enc = encodings[col]
        else:
            classes = sorted(pc.unique(values).to_pylist())
            if require_multiclass and len(classes) < 2:
                raise LabelError(
                    f"{spec}: label column '{col}' has a single class {classes}; "
                    "it cannot be suppressed or preserved"
                )
            enc = LabelEncoding(col, tuple(classes))
        labels[col] = enc.encode(values, source=spec)
        encs[col] = enc
    return EmbeddingDataset(ids=ids, x=x, labels=labels, encodings=encs, source=spec)


def embedding_array(x: np.ndarray) -> pa.FixedSizeListArray:
    """float32 ``[N, d]`` -> Arrow fixed-size-list column, zero-copy over the numpy buffer."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    return pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), x.shape[1])
