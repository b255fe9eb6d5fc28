"""Read a release and its held-out labels, and join them by id with Arrow.

Unlike :func:`mass.io.embedding_matrix`, the release reader does not reject NaN/Inf or bad
norms: those are audit findings that the GX suite must report, not reasons to stop early.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mass.errors import InvalidValueError, LabelError, SchemaError
from mass.io import LabelEncoding, check_ids, embedding_matrix, expand_paths, read_table


@dataclass
class Release:
    source: str
    ids: pa.Array
    x: np.ndarray  # float32 [N, d]; NaN rows where the release has a null embedding
    columns: list[tuple[str, str]]  # (name, Arrow type) in file order
    metadata: dict[str, str]

    def __len__(self) -> int:
        return int(self.x.shape[0])


@dataclass
class Labels:
    source: str
    ids: pa.Array
    labels: dict[str, np.ndarray]  # integer-encoded
    encodings: dict[str, LabelEncoding]
    columns: list[str]
    x: np.ndarray | None = None  # the original embeddings, when the file holds them
    extra: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.ids)


def release_matrix(table: pa.Table, column: str, *, source: str) -> np.ndarray:
    """Embedding column -> float32 [N, d], keeping NaN/Inf and mapping null rows to NaN."""
    if column not in table.column_names:
        raise SchemaError(
            f"{source}: no embedding column '{column}' (columns: {table.column_names}); "
            "pass --emb-col"
        )
    arr = table.column(column).combine_chunks()
    typ = arr.type
    if pa.types.is_fixed_size_list(typ):
        dim = typ.list_size
        vals = arr.values.slice(arr.offset * dim, len(arr) * dim)
    elif pa.types.is_list(typ) or pa.types.is_large_list(typ):
        lengths = pc.fill_null(pc.list_value_length(arr), 0).to_numpy(zero_copy_only=False)
        valid = ~arr.is_null().to_numpy(zero_copy_only=False)
        dim = int(lengths[valid][0]) if valid.any() else 0
        bad = np.flatnonzero(valid & (lengths != dim))
        if bad.size:
            raise InvalidValueError(
                f"{source}: column '{column}' is ragged: row {int(bad[0])} has "
                f"{int(lengths[bad[0]])} values, others {dim}"
            )
        arr = pc.if_else(arr.is_null(), pa.scalar([np.nan] * dim, typ), arr)
        vals = arr.flatten()
    else:
        raise SchemaError(f"{source}: column '{column}' has type {typ}; expected a list of floats")
    if not (pa.types.is_floating(vals.type) or pa.types.is_integer(vals.type)):
        raise SchemaError(f"{source}: column '{column}' holds {vals.type}; expected floats")
    x = vals.to_numpy(zero_copy_only=False).astype(np.float32).reshape(len(arr), dim)
    if arr.null_count:
        x[arr.is_null().to_numpy(zero_copy_only=False)] = np.nan
    return x


def read_release(spec: str, *, id_col: str = "id", emb_col: str = "emb") -> Release:
    """A release directory (or file/glob) of Parquet parts, with its mass.* metadata."""
    table = read_table(spec)
    meta_raw = pq.read_schema(expand_paths(spec)[0]).metadata or {}
    metadata = {
        k.decode(): v.decode(errors="replace")
        for k, v in meta_raw.items()
        if k.startswith(b"mass.")
    }
    ids = check_ids(table, id_col, source=spec)
    x = release_matrix(table, emb_col, source=spec)
    columns = [(f.name, str(f.type)) for f in table.schema]
    return Release(source=spec, ids=ids, x=x, columns=columns, metadata=metadata)


def read_labels(
    spec: str,
    attrs: list[str],
    *,
    id_col: str = "id",
    emb_col: str = "emb",
    encodings: dict[str, list] | None = None,
) -> Labels:
    """Held-out labels (+ original embeddings if present); class order from ``encodings``."""
    table = read_table(spec)
    ids = check_ids(table, id_col, source=spec)
    labels, encs = {}, {}
    for attr in attrs:
        if attr not in table.column_names:
            raise SchemaError(
                f"{spec}: no label column '{attr}' (columns: {table.column_names}); "
                "check --suppress/--preserve"
            )
        values = table.column(attr).combine_chunks()
        if values.null_count:
            raise InvalidValueError(f"{spec}: label column '{attr}' has {values.null_count} nulls")
        if encodings and attr in encodings:
            enc = LabelEncoding(attr, tuple(encodings[attr]))
        else:
            enc = LabelEncoding(attr, tuple(sorted(pc.unique(values).to_pylist())))
        labels[attr] = enc.encode(values, source=spec)
        if len(pc.unique(values)) < 2:
            # One observed class: every attacker scores 100% = majority, so suppression
            # would "pass" without measuring anything.
            raise LabelError(
                f"{spec}: label column '{attr}' has a single class "
                f"{pc.unique(values).to_pylist()}; the audit cannot measure it: use a held-out "
                "split with every class, or drop it from --suppress/--preserve"
            )
        counts = np.bincount(labels[attr], minlength=len(enc.classes))
        if (rare := np.flatnonzero((counts > 0) & (counts < 2))).size:
            # Stratified splits need two rows per class: name it instead of sklearn's ValueError.
            row = int(np.flatnonzero(labels[attr] == rare[0])[0])
            raise LabelError(
                f"{spec}: label column '{attr}' class {enc.classes[rare[0]]!r} has a single row "
                f"(row {row}); the audit's stratified splits need >= 2 per class: add rows of "
                "that class or drop them"
            )
        encs[attr] = enc
    x = embedding_matrix(table, emb_col, source=spec) if emb_col in table.column_names else None
    columns = [c for c in table.column_names if c not in (id_col, emb_col)]
    return Labels(source=spec, ids=ids, labels=labels, encodings=encs, columns=columns, x=x)


def read_original(spec: str, *, id_col: str = "id", emb_col: str = "emb"):
    """The --input embeddings: (ids, x) validated by :mod:`mass.io`."""
    table = read_table(spec, columns=[id_col, emb_col])
    return check_ids(table, id_col, source=spec), embedding_matrix(table, emb_col, source=spec)


def positions(ids: pa.Array, reference: pa.Array) -> np.ndarray:
    """Row of each ``ids`` value in ``reference`` (-1 where absent), by Arrow hash lookup."""
    if ids.type != reference.type:
        try:
            reference = reference.cast(ids.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return np.full(len(ids), -1, dtype=np.int64)  # incomparable ids match nothing
    idx = pc.index_in(ids, value_set=reference)
    return pc.fill_null(idx, -1).to_numpy(zero_copy_only=False).astype(np.int64)


def parse_json_list(metadata: dict[str, str], key: str) -> list:
    """A JSON-list metadata value; a missing or malformed one reads as [] (the metadata
    expectation reports absence; a report must not crash on it)."""
    try:
        value = json.loads(metadata.get(key, "[]"))
    except json.JSONDecodeError:
        return []
    return value if isinstance(value, list) else [value]
