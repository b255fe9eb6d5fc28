"""Arrow-batch Parquet IO that every Beam runner can execute, DaskRunner included.

Beam's DaskRunner translates only Create, ParDo, GroupByKey and Flatten, so reading is
``Create(row-group specs) | ParDo(read)`` instead of ``ReadFromParquetBatched`` (a Read
source), and writing is ``ParDo(key by shard) | GroupByKey | ParDo(write shard)`` instead of
``WriteToParquetBatched`` (a Reshuffle + finalize sink). Rows go to shard
``row_seeds(id) % num_shards`` and are sorted by id inside a shard, so the files depend only
on the rows and the shard count: the same input gives byte-identical files on any runner,
batch size or input layout (what DVC needs to see an unchanged output).
"""

from __future__ import annotations

import copyreg
import json
import os
from dataclasses import dataclass

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mass.errors import UnreadableInputError
from mass.io import expand_paths
from mass.noise import row_seeds


def _restore_batch(buf) -> pa.RecordBatch:
    return pa.ipc.open_stream(buf).read_next_batch()


def _reduce_batch(batch: pa.RecordBatch):
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return _restore_batch, (sink.getvalue(),)


# Beam pickles RecordBatches between stages and, to estimate PCollection sizes, nearly every
# one inside a fused stage too. pyarrow's own pickle writes a slice's whole parent buffers
# (a to_batches() slice of a 64k-row group: 6x its size); Arrow IPC writes only the slice.
copyreg.pickle(pa.RecordBatch, _reduce_batch)

# Fixed writer settings: part of the byte-identical output contract.
WRITE_OPTIONS = dict(
    compression="zstd",
    compression_level=3,
    row_group_size=65536,
    write_statistics=True,
    use_dictionary=False,
)


@dataclass(frozen=True)
class RowGroupSpec:
    """One unit of read work: a row group of one file (picklable, runner-independent)."""

    path: str
    row_group: int
    num_rows: int


def plan_row_groups(spec: str) -> list[RowGroupSpec]:
    """Read only the footers of ``spec``'s files -> one work item per row group."""
    out: list[RowGroupSpec] = []
    for path in expand_paths(spec):
        try:
            meta = pq.ParquetFile(path).metadata
        except (pa.ArrowInvalid, OSError) as e:
            raise UnreadableInputError(
                f"{path}: not readable as Parquet ({e}); re-export the file or remove it"
            ) from e
        out.extend(
            RowGroupSpec(path, i, meta.row_group(i).num_rows) for i in range(meta.num_row_groups)
        )
    return out


def input_schema(spec: str) -> pa.Schema:
    """Schema of the first file of ``spec`` (files must agree; the reader checks each)."""
    return pq.read_schema(expand_paths(spec)[0])


class _ReadRowGroupFn(beam.DoFn):
    def __init__(self, columns: list[str] | None, batch_rows: int) -> None:
        self._columns = columns
        self._batch_rows = batch_rows

    def process(self, spec: RowGroupSpec):
        try:
            table = pq.ParquetFile(spec.path).read_row_group(spec.row_group, columns=self._columns)
        except (pa.ArrowInvalid, OSError) as e:
            raise UnreadableInputError(
                f"{spec.path}: row group {spec.row_group} unreadable ({e})"
            ) from e
        for batch in table.combine_chunks().to_batches(max_chunksize=self._batch_rows):
            if batch.num_rows:
                yield batch


class ReadArrowBatches(beam.PTransform):
    """Parquet ``spec`` -> PCollection of ``pa.RecordBatch`` of at most ``batch_rows`` rows."""

    def __init__(
        self, spec: str, *, columns: list[str] | None = None, batch_rows: int = 4096
    ) -> None:
        super().__init__()
        self._specs = plan_row_groups(spec)
        self._columns = columns
        self._batch_rows = int(batch_rows)

    def expand(self, pbegin):
        return (
            pbegin
            | "RowGroups" >> beam.Create(self._specs)
            | "ReadRowGroup" >> beam.ParDo(_ReadRowGroupFn(self._columns, self._batch_rows))
        )


def shard_path(directory: str, shard: int, num_shards: int) -> str:
    return os.path.join(directory, f"part-{shard:05d}-of-{num_shards:05d}.parquet")


def shard_of(ids: pa.Array, num_shards: int) -> np.ndarray:
    """Shard of each row: a pure function of its id (stable across processes and runners)."""
    return (row_seeds(ids) % num_shards).astype(np.int64)


class _KeyByShardFn(beam.DoFn):
    def __init__(
        self,
        id_col: str,
        num_shards: int,
        *,
        emb_col: str | None = None,
        verify_col: str | None = None,
    ) -> None:
        self._id_col = id_col
        self._num_shards = num_shards
        self._emb_col = emb_col
        self._verify_col = verify_col

    def process(self, batch: pa.RecordBatch):
        if self._verify_col is not None:
            # Compare before the shuffle and ship 1 flag byte per row instead of the whole
            # input embedding: halves what GroupByKey encodes, moves and holds (docs/performance.md)
            flags = _row_flags(batch, self._emb_col, self._verify_col)
            idx = batch.schema.get_field_index(self._verify_col)
            batch = batch.set_column(idx, self._verify_col, pa.array(flags))
        shards = shard_of(batch.column(self._id_col), self._num_shards)
        for s in np.unique(shards):
            yield int(s), batch.filter(pa.array(shards == s))


class _WriteShardFn(beam.DoFn):
    """Concatenate a shard's batches, sort by id, write; optionally drop and check a column.

    With ``verify_col`` (the model's input embedding carried along), the writer counts rows
    whose output equals the input (a bypassed model) or is not finite, and leaves those
    counts in a ``_part-*.json`` sidecar for the publisher; the column is never written.
    """

    def __init__(
        self,
        directory: str,
        *,
        id_col: str,
        num_shards: int,
        schema: pa.Schema | None,
        emb_col: str | None,
        verify_col: str | None,
    ) -> None:
        self._dir = directory
        self._id_col = id_col
        self._n = num_shards
        self._schema = schema
        self._emb_col = emb_col
        self._verify_col = verify_col

    def process(self, element):
        shard, batches = element
        table = pa.Table.from_batches(list(batches)).combine_chunks()
        table = table.take(pc.sort_indices(table, sort_keys=[(self._id_col, "ascending")]))
        stats = {"shard": int(shard), "rows": table.num_rows}
        if self._verify_col is not None:
            stats.update(_compare(table, self._id_col, self._emb_col, self._verify_col))
            table = table.drop_columns([self._verify_col])
        if self._schema is not None:  # fixed column order, types and metadata
            table = table.select(self._schema.names).cast(self._schema)
        os.makedirs(self._dir, exist_ok=True)
        path = shard_path(self._dir, int(shard), self._n)
        pq.write_table(table, path, **WRITE_OPTIONS)
        with open(os.path.join(self._dir, f"_part-{int(shard):05d}.json"), "w") as f:
            json.dump(stats, f)
        yield stats


UNMODIFIED, NONFINITE = 1, 2  # bits of the per-row flags that replace the input copy


def _row_flags(batch: pa.RecordBatch, emb_col: str | None, verify_col: str) -> np.ndarray:
    """uint8 per row: UNMODIFIED if the output equals the carried input, NONFINITE if not finite."""
    n = batch.num_rows
    dim = batch.schema.field(emb_col).type.list_size
    out = batch.column(emb_col).flatten().to_numpy().reshape(n, dim)
    src = batch.column(verify_col).flatten().to_numpy().reshape(n, -1)
    same = (out == src).all(axis=1) if src.shape == out.shape else np.zeros(n, bool)
    flags = np.where(same, UNMODIFIED, 0).astype(np.uint8)
    flags[~np.isfinite(out).all(axis=1)] |= NONFINITE
    return flags


def _compare(table: pa.Table, id_col: str, emb_col: str | None, verify_col: str) -> dict:
    flags = table.column(verify_col).combine_chunks().to_numpy(zero_copy_only=False)
    same, bad = (flags & UNMODIFIED) > 0, (flags & NONFINITE) > 0
    ids = table.column(id_col)
    first = lambda m: ids[int(np.flatnonzero(m)[0])].as_py() if m.any() else None  # noqa: E731
    return {
        "unmodified": int(same.sum()),
        "first_unmodified_id": first(same),
        "nonfinite": int(bad.sum()),
        "first_nonfinite_id": first(bad),
    }


class WriteShardedParquet(beam.PTransform):
    """PCollection of RecordBatch -> ``directory/part-XXXXX-of-NNNNN.parquet`` (+ sidecars)."""

    def __init__(
        self,
        directory: str,
        *,
        id_col: str,
        num_shards: int,
        schema: pa.Schema | None = None,
        emb_col: str | None = None,
        verify_col: str | None = None,
    ) -> None:
        super().__init__()
        self._dir = directory
        self._id_col = id_col
        self._n = int(num_shards)
        self._schema = schema
        self._emb_col = emb_col
        self._verify_col = verify_col

    def expand(self, pcoll):
        return (
            pcoll
            | "KeyByShard"
            >> beam.ParDo(
                _KeyByShardFn(
                    self._id_col, self._n, emb_col=self._emb_col, verify_col=self._verify_col
                )
            )
            | "GroupShards" >> beam.GroupByKey()
            | "WriteShard"
            >> beam.ParDo(
                _WriteShardFn(
                    self._dir,
                    id_col=self._id_col,
                    num_shards=self._n,
                    schema=self._schema,
                    emb_col=self._emb_col,
                    verify_col=self._verify_col,
                )
            )
        )


def fill_empty_shards(directory: str, schema: pa.Schema, num_shards: int) -> None:
    """Write the shards that got no row as empty files, so the file set is always complete."""
    os.makedirs(directory, exist_ok=True)
    for s in range(num_shards):
        path = shard_path(directory, s, num_shards)
        if not os.path.exists(path):
            pq.write_table(schema.empty_table(), path, **WRITE_OPTIONS)


def read_sidecars(directory: str) -> list[dict]:
    out: list[dict] = []
    for name in sorted(os.listdir(directory)):
        if name.startswith("_part-") and name.endswith(".json"):
            with open(os.path.join(directory, name)) as f:
                out.append(json.load(f))
    return out


def remove_sidecars(directory: str) -> None:
    for name in os.listdir(directory):
        if name.startswith("_part-") and name.endswith(".json"):
            os.remove(os.path.join(directory, name))
