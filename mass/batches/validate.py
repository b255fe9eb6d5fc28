"""Up-front input validation for the anonymize job: fail before any work, naming the culprit.

Everything that can be decided from the files' footers, the id column and one embedding row
is checked here, before a server is started or a pipeline built:

* the input resolves to files (:class:`MissingInputError`), every footer parses
  (:class:`UnreadableInputError` naming the file), every file has the id, embedding and
  allow-listed columns with the types of the first file (:class:`SchemaError` naming file
  and column);
* the embedding column is a list of floats whose length matches the model's dimension
  (fixed-size lists: the type; variable lists: row 0 of each file);
* ids are integers or strings (dictionary-encoded ones are decoded: a pandas ``category``
  or Spark dictionary page of strings is strings), never null, never repeated, across all
  files (:class:`InvalidValueError` naming file, row and id);
* the input holds at least one row (:class:`MissingInputError`: only empty files);
* no column the job reads is named like a column the job adds (:data:`RESERVED_COLUMNS`,
  :class:`SchemaError` naming file and column);
* a full disk while the id index is staged is a :class:`ReleaseError` naming the path
  (:func:`disk_full`), never a raw ``OSError``.

:func:`release_schema` builds the release's schema from the checked input: the user's field
and schema metadata are dropped (they may hold anything: notes, pandas index, lineage), only
``mass.*`` keys written by the job are kept.

Row-level value faults (NaN/Inf, degenerate norms, ragged or null embeddings) need every
value read, which is the job itself: they are quarantined by :mod:`mass.batches.quarantine` and
fail the job at the end (``--max-quarantined``, default 0) with nothing published.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mass.batches.id_index import FILE, ROW, IdIndex, build_id_index
from mass.batches.parquet import open_parquet
from mass.batches.spill import disk_full
from mass.errors import MissingInputError, SchemaError
from mass.io import expand_paths

# Columns the job adds next to the user's: the model input carried to the writer for the
# bypass check (beam_pipelines.anonymize.INPUT_COPY, and any other "__mass" name), the id
# index's file/row columns, and the quarantine's reason. A column the job reads may not
# carry one of these names (it would be overwritten or duplicated).
RESERVED_PREFIX = "__mass"
RESERVED_COLUMNS = (FILE, ROW)
QUARANTINE_COLUMNS = ("reason",)


@dataclass(frozen=True)
class CheckedInput:
    """What the job needs from a validated input: its files, schema, ids and row count."""

    spec: str
    files: tuple[str, ...]
    schema: pa.Schema
    rows: int
    index: IdIndex  # every id, external-sorted per release shard on disk


def is_id_type(typ: pa.DataType) -> bool:
    """Integers or strings, plain or dictionary-encoded."""
    if pa.types.is_dictionary(typ):
        typ = typ.value_type
    return pa.types.is_integer(typ) or pa.types.is_string(typ) or pa.types.is_large_string(typ)


def plain_field(field: pa.Field) -> pa.Field:
    """``field`` without its metadata (nested fields' too), dictionaries replaced by their
    value type."""
    return pa.field(field.name, _plain_type(field.type), field.nullable)


def _plain_type(typ: pa.DataType) -> pa.DataType:
    if pa.types.is_dictionary(typ):
        return _plain_type(typ.value_type)
    if pa.types.is_fixed_size_list(typ):
        return pa.list_(plain_field(typ.value_field), typ.list_size)
    if pa.types.is_large_list(typ):
        return pa.large_list(plain_field(typ.value_field))
    if pa.types.is_list(typ):
        return pa.list_(plain_field(typ.value_field))
    if pa.types.is_map(typ):
        return pa.map_(plain_field(typ.key_field), plain_field(typ.item_field))
    if pa.types.is_struct(typ):
        return pa.struct([plain_field(typ.field(i)) for i in range(typ.num_fields)])
    return typ


def check_column_names(path: str, *, id_col: str, emb_col: str, columns=()) -> None:
    """No column the job reads is named like one it adds (see :data:`RESERVED_COLUMNS`)."""
    for col in dict.fromkeys([id_col, emb_col, *columns]):
        clash = col.startswith(RESERVED_PREFIX) or col in RESERVED_COLUMNS
        if clash or (col == id_col and col in QUARANTINE_COLUMNS):
            raise SchemaError(
                f"{path}: column '{col}' collides with a column the job adds "
                f"('{RESERVED_PREFIX}*', {', '.join(map(repr, RESERVED_COLUMNS))}, and "
                "'reason' next to the id in the quarantine); rename it in the input"
            )
    if id_col == emb_col:
        raise SchemaError(f"{path}: --id-col and --emb-col both name '{id_col}'; pass two columns")


def _check_embedding_type(path: str, col: str, typ: pa.DataType) -> None:
    is_list = (
        pa.types.is_fixed_size_list(typ) or pa.types.is_list(typ) or pa.types.is_large_list(typ)
    )
    if not is_list or not pa.types.is_floating(typ.value_type):
        raise SchemaError(
            f"{path}: embedding column '{col}' has type {typ}; expected a (fixed-size) list of "
            "float32/float64; convert the column or pass the right --emb-col"
        )


def _check_dim(pf: pq.ParquetFile, path: str, col: str, dim: int) -> None:
    typ = pf.schema_arrow.field(col).type
    if pa.types.is_fixed_size_list(typ):
        got, where = typ.list_size, "its type"
    else:  # variable-length lists: row 0 decides; later ragged rows are quarantined
        if pf.metadata.num_rows == 0:
            return
        first = next(pf.iter_batches(batch_size=1, columns=[col])).column(0)
        if first.null_count:
            return  # a null row is a row-level fault (quarantined), not a schema one
        got, where = int(pc.list_value_length(first)[0].as_py()), "row 0"
    if got != dim:
        raise SchemaError(
            f"{path}: embedding column '{col}' has dimension {got} ({where}) but the model "
            f"expects {dim}; extract with the extractor this model was trained on or pick "
            "the matching --model"
        )


def check_input(
    spec: str,
    *,
    id_col: str,
    emb_col: str,
    columns: list[str] | tuple[str, ...] = (),
    dim: int | None = None,
    index_dir: str,
    num_shards: int = 1,
) -> CheckedInput:
    """Validate ``spec`` for the anonymize job (see the module docstring); read ids only.

    The ids are not kept in memory: they are external-sorted per release shard into
    ``index_dir`` (:mod:`mass.batches.id_index`), which the publisher checks the release with.
    """
    files = expand_paths(spec)
    check_column_names(spec, id_col=id_col, emb_col=emb_col, columns=columns)
    footers = [open_parquet(p) for p in files]
    first = footers[0].schema_arrow
    needed = list(dict.fromkeys([id_col, emb_col, *columns]))
    if not sum(pf.metadata.num_rows for pf in footers):
        raise MissingInputError(
            f"{spec}: holds no rows ({len(files)} file(s), every one empty: "
            f"{', '.join(files[:3])}{', ...' if len(files) > 3 else ''}); check the input "
            "or the step that wrote it"
        )
    for path, pf in zip(files, footers, strict=True):
        schema = pf.schema_arrow
        for col in needed:
            if col not in schema.names:
                flag = {id_col: "--id-col", emb_col: "--emb-col"}.get(col, "--allow-columns")
                raise SchemaError(
                    f"{path}: no column '{col}' (columns: {schema.names}); fix {flag} or the input"
                )
            if col in first.names and schema.field(col).type != first.field(col).type:
                raise SchemaError(
                    f"{path}: column '{col}' is {schema.field(col).type} but "
                    f"{files[0]} has {first.field(col).type}; every input file needs one schema"
                )
        id_type = schema.field(id_col).type
        if not is_id_type(id_type):
            raise SchemaError(
                f"{path}: id column '{id_col}' has type {id_type}; ids must be integers or "
                "strings (they seed the per-row noise and key the release)"
            )
        _check_embedding_type(path, emb_col, schema.field(emb_col).type)
        if dim is not None:
            _check_dim(pf, path, emb_col, dim)
    for pf in footers:
        pf.close()
    with disk_full(index_dir, "the input's id index"):
        index = build_id_index(files, id_col, num_shards, index_dir)
    schema = first.set(first.get_field_index(id_col), plain_field(first.field(id_col)))
    return CheckedInput(spec, tuple(files), schema, index.rows, index)


def check_dim(checked: CheckedInput, *, emb_col: str, dim: int) -> None:
    """The dimension check alone, once the model's dimension is known (server-only info)."""
    for path in checked.files:
        pf = open_parquet(path)
        try:
            _check_dim(pf, path, emb_col, dim)
        finally:
            pf.close()
