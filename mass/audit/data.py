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

from mass import fs
from mass.embeddings import embedding_matrix, release_matrix
from mass.errors import LabelError
from mass.io import LabelEncoding, check_ids, decode_labels, expand_paths, read_table


@dataclass
class Release:
    source: str
    ids: pa.Array
    x: np.ndarray  # float32 [N, d]; NaN rows where the release has a null embedding
    columns: list[tuple[str, str]]  # (name, Arrow type) in file order
    metadata: dict[str, str]
    extra: dict[str, pa.Array] = field(default_factory=dict)  # every other released column

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


def read_release(spec: str, *, id_col: str = "id", emb_col: str = "emb") -> Release:
    """A release directory (or file/glob) of Parquet parts, with its mass.* metadata."""
    table = read_table(spec)
    with fs.open_input(expand_paths(spec)[0]) as f:  # local or object store (mass.fs)
        meta_raw = pq.read_schema(f).metadata or {}
    metadata = {
        k.decode(): v.decode(errors="replace")
        for k, v in meta_raw.items()
        if k.startswith(b"mass.")
    }
    ids = check_ids(table, id_col, source=spec)
    x = release_matrix(table, emb_col, source=spec)
    columns = [(f.name, str(f.type)) for f in table.schema]
    extra = {c: table.column(c).combine_chunks() for c in table.column_names
             if c not in (id_col, emb_col)}  # fmt: skip
    return Release(source=spec, ids=ids, x=x, columns=columns, metadata=metadata, extra=extra)


def _standardise(m: np.ndarray) -> np.ndarray:
    m = np.where(np.isfinite(m), m, np.nan)
    missing = np.isnan(m)
    mean = np.nanmean(np.where(missing.all(0), 0.0, m), axis=0) if m.size else m
    m = np.where(missing, mean, m)
    std = m.std(axis=0)
    out = (m - mean) / np.where(std > 0, std, 1.0)
    if missing.any():  # where a value is missing is itself released information
        out = np.hstack([out, missing[:, missing.any(0)].astype(np.float64)])
    return out


def _one_hot(values: np.ndarray, max_levels: int) -> np.ndarray:
    """One column per value (nulls are a value); beyond ``max_levels`` the rarer values
    share one "other" column."""
    uniq, inv, counts = np.unique(values, return_inverse=True, return_counts=True)
    if uniq.size > max_levels:
        top = np.argsort(-counts, kind="stable")[: max_levels - 1]
        remap = np.full(uniq.size, max_levels - 1)
        remap[top] = np.arange(top.size)
        inv, width = remap[inv], max_levels
    else:
        width = uniq.size
    return np.eye(width, dtype=np.float64)[inv.reshape(-1)]


def encode_columns(
    columns: dict[str, pa.Array], n_rows: int, *, max_levels: int = 32
) -> np.ndarray:
    """The released columns besides id and embedding as attacker features, float32 [N, m].

    Strings, booleans, dictionaries and integers with at most ``max_levels`` distinct values
    are one-hot encoded (a many-valued string keeps its ``max_levels - 1`` most frequent
    values); other numbers and lists of numbers (e.g. a copy of an embedding) are
    standardised per value, with a missing-value indicator where any is null. Anything else is
    one-hot encoded from its string form. Each column's block is scaled to unit mean squared
    row norm, so no column drowns the unit-norm embedding for a distance-based attacker.
    """
    blocks = []
    for name, arr in columns.items():
        typ = arr.type
        if pa.types.is_dictionary(typ):
            arr, typ = arr.cast(typ.value_type), typ.value_type
        n = len(arr)
        if (pa.types.is_list(typ) or pa.types.is_large_list(typ)
                or pa.types.is_fixed_size_list(typ)) and (
                pa.types.is_floating(typ.value_type) or pa.types.is_integer(typ.value_type)):  # fmt: skip
            m = release_matrix(pa.table({name: arr}), name, source=f"release column '{name}'")
            m = m.astype(np.float64)
            block = _standardise(m.reshape(n, -1))
        elif pa.types.is_floating(typ) or pa.types.is_integer(typ) or pa.types.is_temporal(typ):
            vals = arr.cast(pa.float64()) if not pa.types.is_temporal(typ) else \
                arr.cast(pa.int64()).cast(pa.float64())  # fmt: skip
            v = vals.to_numpy(zero_copy_only=False).astype(np.float64)
            if pa.types.is_integer(typ) and np.unique(v[np.isfinite(v)]).size <= max_levels:
                block = _one_hot(np.where(np.isfinite(v), v, np.inf), max_levels)
            else:
                block = _standardise(v.reshape(n, 1))
        else:
            try:
                strs = arr.cast(pa.string())
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                strs = pa.array([str(v) for v in arr.to_pylist()], pa.string())
            vals = np.asarray(pc.fill_null(strs, "\x00<null>").to_numpy(zero_copy_only=False))
            block = _one_hot(vals.astype(str), max_levels)
        scale = np.sqrt(np.mean(np.sum(block**2, axis=1))) if block.size else 0.0
        blocks.append(block / scale if scale > 0 else block)
    if not blocks:
        return np.zeros((n_rows, 0), dtype=np.float32)
    return np.hstack(blocks).astype(np.float32)


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
        given = LabelEncoding(attr, tuple(encodings[attr])) if encodings and attr in encodings else None
        labels[attr], enc = decode_labels(
            table, attr, source=spec, encoding=given, require_multiclass=False
        )
        if len(observed := np.unique(labels[attr])) < 2:
            # One observed class: every attacker scores 100% = majority, so suppression
            # would "pass" without measuring anything.
            raise LabelError(
                f"{spec}: label column '{attr}' has a single class "
                f"{[enc.classes[int(c)] for c in observed]}; the audit cannot measure it: use a "
                "held-out split with every class, or drop it from --suppress/--preserve"
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
