"""Parquet in and out under the data contract (docs/architecture.md, 'Data contract').

Readers return Arrow-backed numpy views (no per-row Python objects) and validate up front:
every error names the file, the column and, where it applies, the first offending row.
"""

from __future__ import annotations

import logging
import os
import posixpath
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mass import fs
from mass.embeddings import embedding_matrix
from mass.errors import (
    InvalidValueError,
    LabelError,
    MissingInputError,
    SchemaError,
    UnreadableInputError,
    first_null,
)
from mass.formats import resolve_release

GLOB_CHARS = "*?["
log = logging.getLogger("mass.io")
_logged_skips: set[tuple[str, int, int]] = set()  # (spec, hidden, other): log each once


def _hidden(name: str) -> bool:
    """Spark/Hadoop/pyarrow convention: ``_``- and ``.``-prefixed names are not data
    (``_SUCCESS``, ``_temporary/``, ``_metadata``, ``.part-0.crc``, ``.hidden.parquet``)."""
    return name.startswith(("_", "."))


def _walk(root: str) -> tuple[list[str], int, int]:
    """``*.parquet`` files under directory ``root`` -> (files, hidden skipped, others skipped).

    Directories and files whose name starts with ``_`` or ``.`` are skipped (a skipped
    directory counts every file under it), as are files not named ``*.parquet``.
    """
    files, hidden, other = [], 0, 0
    for here, dirs, names in fs.walk(root):
        keep = sorted(d for d in dirs if not _hidden(d))
        for d in dirs:
            if _hidden(d):
                hidden += sum(len(n) for _, _, n in fs.walk(fs.join(here, d)))
        dirs[:] = keep
        for name in names:
            if _hidden(name):
                hidden += 1
            elif name.endswith(".parquet"):
                files.append(fs.join(here, name))
            else:
                other += 1
    return sorted(files), hidden, other


def _glob_root(spec: str) -> str:
    """The literal directory prefix of a glob (``data/2024/*/x.parquet`` -> ``data/2024``)."""
    sep = "/" if fs.is_remote(spec) else os.sep
    parts = spec.split(sep)
    for i, part in enumerate(parts):
        if any(ch in part for ch in GLOB_CHARS):
            return sep.join(parts[:i])
    return fs.dirname(spec)


def _below(match: str, root: str) -> list[str]:
    """``match``'s path components below the glob's literal ``root``."""
    if fs.is_remote(match):
        return posixpath.relpath(match, root).split("/")
    return os.path.relpath(match, root or ".").split(os.sep)


def expand_paths(spec: str) -> list[str]:
    """A file, a directory or a glob -> sorted file list (never empty).

    Rules (docs/contracts.md, 'Input paths'):

    * a ``spec`` that exists is literal, whatever characters its name holds: a file named
      ``scores[1].parquet`` is that file, never a glob;
    * a directory contributes its ``*.parquet`` files, recursively; names starting with ``_``
      or ``.`` (files and directories: Spark's ``_temporary/`` and ``_SUCCESS``, hidden files)
      are skipped as Spark, Hadoop and pyarrow skip them, and the number of skipped files is
      logged once (INFO);
    * only a ``spec`` that does not exist and holds ``*``, ``?`` or ``[`` is a glob
      (``**`` recursive); matches under a ``_``/``.``-prefixed name below the glob's literal
      prefix are skipped the same way, a matched directory is expanded as above.
    """
    hidden = other = 0
    committed = resolve_release(spec)
    if committed:  # an object-store release: exactly its committed version
        return committed
    if fs.isdir(spec):
        files, hidden, other = _walk(spec)
    elif fs.exists(spec):
        files = [spec]
    elif any(ch in spec for ch in GLOB_CHARS):
        root = _glob_root(spec)
        files = []
        for match in fs.glob(spec):
            below = _below(match, root)
            if any(_hidden(part) for part in below if part not in (".", "..")):
                hidden += 1
            elif fs.isdir(match):
                found, h, o = _walk(match)
                files += found
                hidden, other = hidden + h, other + o
            else:
                files.append(match)
        files = sorted(dict.fromkeys(files))
    else:
        raise MissingInputError(f"{spec}: no such file or directory; check the path")
    if (hidden or other) and (spec, hidden, other) not in _logged_skips:
        _logged_skips.add((spec, hidden, other))
        log.info(
            "%s: skipped %d file(s) under '_'/'.'-prefixed names and %d not named *.parquet",
            spec,
            hidden,
            other,
        )
    if not files:
        raise MissingInputError(
            f"{spec}: matches no Parquet file ({hidden} skipped under '_'/'.'-prefixed names, "
            f"{other} not named *.parquet); check the path or glob"
        )
    return files


def parquet_batches(path: str, *, columns: list[str] | None, batch_rows: int):
    """Record batches of one Parquet file (local or object store, :mod:`mass.fs`) in bounded
    memory. ``pre_buffer=False``: with pyarrow's default pre-buffering, ``iter_batches`` keeps
    the coalesced reads of the whole file, so memory grows with the file (docs/performance.md,
    "Memory of mass train and mass audit, and of mass anonymize"). A file whose footer or
    pages do not read is refused naming it."""
    with fs.open_input(path) as f:
        try:
            it = pq.ParquetFile(f, pre_buffer=False).iter_batches(
                batch_size=batch_rows, columns=columns
            )
            while (batch := next(it, None)) is not None:
                yield batch
        except (pa.ArrowInvalid, OSError) as e:
            raise UnreadableInputError.parquet(path, e) from e


def schema_of(path: str) -> pa.Schema:
    """``path``'s Arrow schema from its footer, refused by name when it is not Parquet."""
    try:
        with fs.open_input(path) as f:
            return pq.read_schema(f)
    except (pa.ArrowInvalid, OSError) as e:
        raise UnreadableInputError.parquet(path, e) from e


def _common_type(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    """The type both of two files' encodings of one column read as, or None (they differ in
    kind): a dictionary is its values, string and large_string are text, integers of one
    sign (or unsigned under 64 bits beside signed) are int64/uint64, floats float64."""
    a = a.value_type if pa.types.is_dictionary(a) else a
    b = b.value_type if pa.types.is_dictionary(b) else b
    if a == b:
        return a
    text = (pa.types.is_string, pa.types.is_large_string)
    if any(f(a) for f in text) and any(f(b) for f in text):
        return pa.large_string()
    ints = [t for t in (a, b) if pa.types.is_integer(t)]
    if len(ints) == 2:
        unsigned = [t for t in ints if pa.types.is_unsigned_integer(t)]
        if len(unsigned) == 2:
            return pa.uint64()
        if any(t.bit_width == 64 for t in unsigned):
            return None  # uint64 beside signed: no type holds both exactly
        return pa.int64()
    if pa.types.is_floating(a) and pa.types.is_floating(b):
        return pa.float64()
    return None


def common_schema(spec: str, files: list[str], schemas: list[pa.Schema],
                  columns: list[str] | None = None) -> pa.Schema:  # fmt: skip
    """One schema for the ``columns`` (None: every column) of files that differ only in how a
    column is encoded (a dictionary page against plain values, int32 against int64: parts
    written by different writers), in the first file's order; any other difference is a
    :class:`SchemaError` naming both files, the column and both types."""
    first = schemas[0]
    cols = list(first.names) if columns is None else [c for c in columns if c in first.names]
    fields = {c: first.field(c) for c in cols}
    for path, schema in zip(files[1:], schemas[1:], strict=True):
        if columns is None and sorted(schema.names) != sorted(first.names):
            extra = sorted(set(schema.names) - set(first.names))
            lost = sorted(set(first.names) - set(schema.names))
            raise SchemaError(f"{spec}: {path} has other columns than {files[0]} (only there: "
                              f"{extra}; missing there: {lost}); every file needs one schema")  # fmt: skip
        for c in cols:
            if c not in schema.names:
                raise SchemaError(f"{spec}: {path} has no column '{c}' ({files[0]} has it); "
                                  "every file needs one schema")  # fmt: skip
            typ = _common_type(fields[c].type, schema.field(c).type)
            if typ is None:
                raise SchemaError(f"{spec}: column '{c}' is {schema.field(c).type} in {path} "
                                  f"but {first.field(c).type} in {files[0]}; every file needs "
                                  "one schema")  # fmt: skip
            if typ != fields[c].type:
                fields[c] = fields[c].with_type(typ)
    return pa.schema(list(fields.values()), metadata=first.metadata)


def conform(data, schema: pa.Schema):
    """``data`` (a table or record batch) cast to ``schema``'s types, columns in its order."""
    data = data.select(schema.names)
    if data.schema.remove_metadata().equals(schema.remove_metadata()):
        return data
    try:
        return data.cast(schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise SchemaError(f"cannot read columns {schema.names} as {schema}: {e}") from e


def read_table(spec: str, columns: list[str] | None = None) -> pa.Table:
    """Read every file of ``spec`` into one table, naming the file that fails to parse; parts
    that differ only in a column's encoding read as values (:func:`common_schema`)."""
    tables = []
    paths = expand_paths(spec)
    for path in paths:
        try:
            with fs.open_input(path) as f:
                tables.append(pq.read_table(f, columns=columns))
        except (pa.ArrowInvalid, OSError) as e:
            if isinstance(e, KeyError):
                raise
            msg = str(e)
            if columns and ("No match for FieldRef" in msg or "not found" in msg.lower()):
                raise SchemaError(f"{path}: missing column(s) among {columns}: {msg}") from e
            raise UnreadableInputError.parquet(path, e) from e
    schemas = [t.schema for t in tables]
    if any(not sc.remove_metadata().equals(schemas[0].remove_metadata()) for sc in schemas):
        target = common_schema(spec, paths, schemas)
        tables = [conform(t, target) for t in tables]
    return pa.concat_tables(tables, promote_options="none")


def decode_ids(ids: pa.Array, column: str, *, source: str) -> pa.Array:
    """An id column decoded when dictionary-encoded (a pandas ``category`` of strings is
    strings); ids must be integers or strings."""
    if pa.types.is_dictionary(ids.type):
        ids = ids.dictionary_decode()
    typ = ids.type
    if not (pa.types.is_integer(typ) or pa.types.is_string(typ) or pa.types.is_large_string(typ)):
        raise SchemaError(
            f"{source}: id column '{column}' has type {typ}; ids must be integers or strings"
        )
    return ids


def check_ids(table: pa.Table, column: str, *, source: str) -> pa.Array:
    """The id column must exist, hold no nulls and no duplicates; returns the ids, decoded
    when dictionary-encoded (a pandas ``category`` of strings is strings)."""
    if column not in table.column_names:
        raise SchemaError(
            f"{source}: no id column '{column}' (columns: {table.column_names}); pass --id-col"
        )
    ids = decode_ids(table.column(column).combine_chunks(), column, source=source)
    if ids.null_count:
        row = first_null(ids)
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
        if pa.types.is_dictionary(values.type):  # a pandas 'category' column: its values
            values = values.dictionary_decode()
        lookup = pa.array(list(self.classes), type=values.type)
        idx = pc.index_in(values, value_set=lookup)
        if idx.null_count:
            row = first_null(idx)
            raise LabelError(
                f"{source}: label column '{self.name}' row {row} has value "
                f"{values[row].as_py()!r}, unseen at training time (known: "
                f"{some_classes(self.classes)})"
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


def some_classes(classes, limit: int = 12) -> str:
    """A class list for a message: all of it, or its first ``limit`` and how many there are."""
    classes = list(classes)
    if len(classes) <= limit:
        return repr(classes)
    return f"{classes[:limit]!r} and {len(classes) - limit} more, {len(classes)} in all"


def refuse_label_type(values: pa.Array, col: str, *, source: str) -> None:
    """A label is one class per row: a nested value (list, struct, map) is refused naming the
    column and its type, and so is a float column that is no class
    (:func:`refuse_continuous_labels`)."""
    t = values.type
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_nested(t):
        raise LabelError(f"{source}: label column '{col}' is {t}: a label is one class per row "
                         "(an int, string or boolean); flatten or pick one value per row")  # fmt: skip
    refuse_continuous_labels(values, col, source=source)


def refuse_continuous_labels(values: pa.Array, col: str, *, source: str) -> None:
    """A float label column is a class only where every value is a whole number: a
    measurement (0.37, NaN) would become thousands of one-row classes; refused naming a row."""
    if not pa.types.is_floating(values.type):
        return
    v = values.to_numpy(zero_copy_only=False)
    bad = (~np.isfinite(v) | (v != np.round(v))) & ~values.is_null().to_numpy(zero_copy_only=False)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise LabelError(
            f"{source}: label column '{col}' is {values.type} with {int(bad.sum())} values that "
            f"are not whole numbers (first at row {row}: {v[row]!r}); labels are classes "
            "(ints, strings or booleans): bin a measurement into classes before naming it"
        )


def refuse_null_labels(values: pa.Array, col: str, *, source: str) -> None:
    """A label column with a null value is refused naming its first row (a row without a class
    is neither trained on nor judged)."""
    if values.null_count:
        row = first_null(values)
        raise InvalidValueError(
            f"{source}: label column '{col}' has {values.null_count} null"
            f"{'s' if values.null_count > 1 else ''} (first at row {row})"
        )


def decode_labels(
    table: pa.Table,
    col: str,
    *,
    source: str,
    encoding: LabelEncoding | None = None,
    require_multiclass: bool = True,
    hint: str = "check --suppress/--preserve",
    single_class_hint: str = "it cannot be suppressed or preserved",
) -> tuple[np.ndarray, LabelEncoding]:
    """The one decoder of a label column: (codes, encoding); every refusal names source and column.

    ``encoding`` (from a training run) fixes the class order and makes unseen values an error;
    without it classes are sorted and, with ``require_multiclass``, a single class is refused.
    """
    if col not in table.column_names:
        raise SchemaError(
            f"{source}: no label column '{col}' (columns: {table.column_names}); {hint}"
        )
    values = table.column(col).combine_chunks()
    refuse_null_labels(values, col, source=source)
    refuse_label_type(values, col, source=source)
    if encoding is None:
        classes = sorted(pc.unique(values).to_pylist())
        if require_multiclass and len(classes) < 2:
            raise LabelError(
                f"{source}: label column '{col}' has a single class {classes}; {single_class_hint}"
            )
        encoding = LabelEncoding(col, tuple(classes))
    return encoding.encode(values, source=source), encoding


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
    if not table.num_rows:
        raise MissingInputError(f"{spec}: holds no rows (every file is empty); check the input")
    ids = check_ids(table, id_col, source=spec)
    x = embedding_matrix(table, emb_col, source=spec, expected_dim=expected_dim)
    labels: dict[str, np.ndarray] = {}
    encs: dict[str, LabelEncoding] = {}
    for col in label_cols:
        labels[col], encs[col] = decode_labels(
            table, col, source=spec, encoding=(encodings or {}).get(col),
            require_multiclass=require_multiclass, hint="fix suppress/preserve in the config",
            single_class_hint="it cannot be suppressed or preserved",
        )  # fmt: skip
    return EmbeddingDataset(ids=ids, x=x, labels=labels, encodings=encs, source=spec)
