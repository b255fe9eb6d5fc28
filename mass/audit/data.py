"""Audit data helpers: label statistics gathered while streaming, the id join, and the
released columns encoded as attacker features. The streaming pass is :mod:`mass.audit.scan`."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mass.embeddings import release_matrix
from mass.errors import InvalidValueError, LabelError, first_null
from mass.io import LabelEncoding, refuse_label_type


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


def _value_codes(arr: pa.Array) -> np.ndarray:
    """The rank of each integer value of ``arr`` among its distinct values, exact at any width
    (uint64 included), null after every value."""
    missing = arr.is_null().to_numpy(zero_copy_only=False)
    v = pc.fill_null(arr, 0).to_numpy(zero_copy_only=False)
    codes = np.unique(v[~missing], return_inverse=True)[1].reshape(-1)
    out = np.full(len(arr), codes.max(initial=-1) + 1, dtype=np.int64)
    out[~missing] = codes
    return out


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
        elif pa.types.is_integer(typ) and pc.count_distinct(arr).as_py() <= max_levels:
            block = _one_hot(_value_codes(arr), max_levels)  # exact, ids past 2**53 included
        elif pa.types.is_floating(typ) or pa.types.is_integer(typ) or pa.types.is_temporal(typ):
            # an integer past 2**53 (hashed ids) is standardised at float64's precision
            vals = arr.cast(pa.float64(), safe=False) if not pa.types.is_temporal(typ) else \
                arr.cast(pa.int64()).cast(pa.float64())  # fmt: skip
            block = _standardise(vals.to_numpy(zero_copy_only=False).astype(np.float64)
                                 .reshape(n, 1))  # fmt: skip
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


class LabelStats:
    """Classes, counts, nulls and first rows of the label columns, batch by batch (the
    ``on_batch`` of :func:`mass.audit.stream.partition`); :meth:`encodings` then checks them:
    no nulls and >= 2 classes (rare classes: mass.metrics.strata)."""

    def __init__(self, spec: str, attrs: list[str], encodings: dict[str, list] | None):
        self.spec, self.attrs, self.given = spec, attrs, encodings or {}
        self.nulls = dict.fromkeys(attrs, 0)
        self.first_null: dict[str, int] = {}
        self.seen: dict[str, dict] = {a: {} for a in attrs}  # value -> [count, first row]

    def __call__(self, path: str, batch: pa.RecordBatch, first_row: int) -> None:
        rows = pa.array(np.arange(first_row, first_row + batch.num_rows, dtype=np.int64))
        for attr in self.attrs:
            col = batch.column(attr)
            refuse_label_type(col, attr, source=path)
            if col.null_count and attr not in self.first_null:
                self.first_null[attr] = first_row + first_null(col)
            self.nulls[attr] += col.null_count
            g = pa.table({"v": col, "r": rows}).group_by("v").aggregate(
                [("r", "min"), ("r", "count")])  # fmt: skip
            seen = self.seen[attr]
            for v, lo, n in zip(g.column("v").to_pylist(), g.column("r_min").to_pylist(),
                                g.column("r_count").to_pylist(), strict=True):  # fmt: skip
                if v is None:
                    continue
                if v in seen:
                    seen[v][0] += n
                else:
                    seen[v] = [n, lo]

    def encodings(self) -> dict[str, LabelEncoding]:
        spec, encs = self.spec, {}
        for attr in self.attrs:
            if n := self.nulls[attr]:  # as mass.io.decode_labels words it
                raise InvalidValueError(f"{spec}: label column '{attr}' has {n} null"
                                        f"{'s' if n > 1 else ''} (first at row "
                                        f"{self.first_null[attr]})")  # fmt: skip
            seen = self.seen[attr]
            if attr in self.given:
                enc = LabelEncoding(attr, tuple(self.given[attr]))
                unseen = [(first, v) for v, (_n, first) in seen.items() if v not in enc.classes]
                if unseen:
                    row, value = min(unseen)
                    raise LabelError(
                        f"{spec}: label column '{attr}' row {row} has value {value!r}, unseen "
                        f"at training time (known: {list(enc.classes)})"
                    )
            else:
                enc = LabelEncoding(attr, tuple(sorted(seen)))
            if len(seen) < 2:
                # One observed class: every attacker scores 100% = majority, so suppression
                # would "pass" without measuring anything.
                raise LabelError(
                    f"{spec}: label column '{attr}' has a single class {list(seen)}; the audit "
                    "cannot measure it: use a held-out split with every class, or drop it from "
                    "--suppress/--preserve"
                )
            # rare classes (even of one row) are judged by mass.metrics.strata's rule
            encs[attr] = enc
        return encs


def _textual(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_dictionary(t)


def positions(ids: pa.Array, reference: pa.Array) -> np.ndarray:
    """Row of each ``ids`` value in ``reference`` (-1 where absent), by Arrow hash lookup.
    Ids of another type are compared as their text when either side is text (the integer 7
    is the string "7", never "007" or " 7"), else cast to ``ids``' type."""
    if ids.type != reference.type:
        try:
            if _textual(ids.type) or _textual(reference.type):
                ids, reference = ids.cast(pa.string()), reference.cast(pa.string())
            else:
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
