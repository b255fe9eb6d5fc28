"""Up-front input validation for the anonymize job: fail before any work, naming the culprit.

Everything that can be decided from the files' footers, the id column and one embedding row
is checked here, before a server is started or a pipeline built:

* the input resolves to files (:class:`MissingInputError`), every footer parses
  (:class:`UnreadableInputError` naming the file), every file has the id, embedding and
  allow-listed columns with the types of the first file (:class:`SchemaError` naming file
  and column);
* the embedding column is a list of floats whose length matches the model's dimension
  (fixed-size lists: the type; variable lists: row 0 of each file);
* ids are integers or strings, never null, never repeated, across all files
  (:class:`InvalidValueError` naming file, row and id).

Row-level value faults (NaN/Inf, all-zero, ragged or null embeddings) need every value read,
which is the job itself: they are quarantined by :mod:`transforms.quarantine` and fail the job
at the end (``--max-quarantined``, default 0) with nothing published.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mass.errors import SchemaError, UnreadableInputError
from mass.io import expand_paths
from transforms.id_index import IdIndex, build_id_index


@dataclass(frozen=True)
class CheckedInput:
    """What the job needs from a validated input: its files, schema, ids and row count."""

    spec: str
    files: tuple[str, ...]
    schema: pa.Schema
    rows: int
    index: IdIndex  # every id, external-sorted per release shard on disk


def _footer(path: str) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(path)
    except (pa.ArrowInvalid, OSError) as e:
        raise UnreadableInputError(
            f"{path}: not readable as Parquet ({e}); the file is truncated or not Parquet: "
            "re-export it or remove it from the input"
        ) from e


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
    ``index_dir`` (:mod:`transforms.id_index`), which the publisher checks the release with.
    """
    files = expand_paths(spec)
    footers = [_footer(p) for p in files]
    first = footers[0].schema_arrow
    needed = list(dict.fromkeys([id_col, emb_col, *columns]))
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
        if not (
            pa.types.is_integer(id_type)
            or pa.types.is_string(id_type)
            or pa.types.is_large_string(id_type)
        ):
            raise SchemaError(
                f"{path}: id column '{id_col}' has type {id_type}; ids must be integers or "
                "strings (they seed the per-row noise and key the release)"
            )
        _check_embedding_type(path, emb_col, schema.field(emb_col).type)
        if dim is not None:
            _check_dim(pf, path, emb_col, dim)
    index = build_id_index(files, id_col, num_shards, index_dir)
    return CheckedInput(spec, tuple(files), first, index.rows, index)


def check_dim(checked: CheckedInput, *, emb_col: str, dim: int) -> None:
    """The dimension check alone, once the model's dimension is known (server-only info)."""
    for path in checked.files:
        _check_dim(pq.ParquetFile(path), path, emb_col, dim)
