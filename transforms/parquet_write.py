"""The sharded Parquet writer every Beam runner can execute: spill id-sorted rows per shard,
GroupByKey(shard -> spill paths), merge each shard into its part file with fixed writer settings
(byte-identical output on any runner; see :mod:`transforms.parquet_io` for the contract and
:mod:`mass.batches.spill` for the external sort). Also the per-part sidecars the publisher reads.
"""

from __future__ import annotations

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq

from mass import fs
from mass.batches.parquet import WRITE_OPTIONS
from mass.batches.spill import (
    FLAG_NAMES,
    SPILLS_DIR,
    ShardSpiller,
    count_flags,
    disk_full,
    merge_sorted_spills,
    reduce_spills,
)
from mass.formats import shard_path
from mass.release.staged import write_sidecar


class _ShardSink:
    """Writes a shard's sorted rows as exactly ``row_group_size``-row row groups, so the file
    is byte-identical to ``pq.write_table`` of the whole sorted shard."""

    def __init__(self, sink, schema: pa.Schema | None) -> None:
        self._path, self._schema = sink, schema  # an output stream (mass.fs.atomic_output)
        self._rows = WRITE_OPTIONS["row_group_size"]
        self._pending: list[pa.Table] = []
        self._n = 0
        self._writer: pq.ParquetWriter | None = None

    def write(self, table: pa.Table) -> None:
        self._pending.append(table)
        self._n += table.num_rows
        while self._n >= self._rows:
            self._flush(self._rows)

    def _flush(self, rows: int) -> None:
        table = pa.concat_tables(self._pending).combine_chunks()
        head, rest = table.slice(0, rows), table.slice(rows)
        self._pending, self._n = ([rest] if rest.num_rows else []), rest.num_rows
        if self._writer is None:
            opts = {k: v for k, v in WRITE_OPTIONS.items() if k != "row_group_size"}
            self._writer = pq.ParquetWriter(self._path, head.schema, **opts)
        self._writer.write_table(head, row_group_size=self._rows)

    def close(self, empty_schema: pa.Schema) -> None:
        if self._n:
            self._flush(self._n)
        if self._writer is None:
            pq.write_table(empty_schema.empty_table(), self._path, **WRITE_OPTIONS)
        else:
            self._writer.close()


class _MergeShardFn(beam.DoFn):
    """Merge a shard's sorted spills into its part file (drops and checks ``verify_col``).

    With ``verify_col`` the merge counts each flag of :data:`mass.batches.spill.FLAG_NAMES` (rows
    whose output is the input up to scale: a bypassed model; not finite; the modifier's own
    near-identity rows; rows that differ from the signed modifier's in-process output) and
    leaves those counts in a ``_part-*.json`` sidecar for the publisher; the column is never
    written.
    """

    def __init__(
        self,
        directory: str,
        *,
        id_col: str,
        num_shards: int,
        schema: pa.Schema | None,
        verify_col: str | None,
        spills: str | None = None,
    ) -> None:
        self._dir = directory
        self._spills = spills or directory
        self._id_col = id_col
        self._n = num_shards
        self._schema = schema
        self._verify_col = verify_col

    def process(self, element):
        with disk_full(self._dir, f"shard {int(element[0])}"):
            yield from self._merge(element)

    def _merge(self, element):
        shard, spills = element
        shard = int(shard)
        paths = reduce_spills(sorted(spills), fs.join(self._spills, SPILLS_DIR), self._id_col)
        stats = {"shard": shard, "rows": 0}
        counts = {
            k: v for name, _ in FLAG_NAMES for k, v in ((name, 0), (f"first_{name}_id", None))
        }
        first_schema = None
        with fs.atomic_output(shard_path(self._dir, shard, self._n)) as out:
            sink = _ShardSink(out, self._schema)
            for table in merge_sorted_spills(paths, self._id_col):
                if self._verify_col is not None:
                    count_flags(counts, table, self._id_col, self._verify_col)
                    table = table.drop_columns([self._verify_col])
                if self._schema is not None:  # fixed column order, types and metadata
                    table = table.select(self._schema.names).cast(self._schema)
                first_schema = first_schema or table.schema
                stats["rows"] += table.num_rows
                sink.write(table)
            sink.close(self._schema or first_schema or pa.schema([]))
        for p in paths:
            fs.remove(p)
        if self._verify_col is not None:
            stats.update(counts)
        write_sidecar(self._dir, shard, stats)
        yield stats


class _SpillFn(beam.DoFn):
    """Each element's rows -> one sorted spill per shard it touches.

    Spills are emitted from ``process`` (never ``finish_bundle``: DaskRunner drops what
    ``finish_bundle`` emits); the merge copes with many small spills (see :data:`FAN_IN`).
    """

    def __init__(self, directory: str, **spiller) -> None:
        self._dir, self._spiller_args = directory, spiller

    def process(self, batch: pa.RecordBatch):
        spiller = ShardSpiller(self._dir, **self._spiller_args)
        yield from spiller.add(batch)
        yield from spiller.flush()


class MergeShards(beam.PTransform):
    """PCollection of ``(shard, spill path)`` -> ``directory/part-XXXXX-of-NNNNN.parquet``.

    Only spill paths travel through the GroupByKey, never rows: every runner (FnApiRunner keeps
    a GroupByKey's input in memory) stays within bounded memory whatever the row count.
    """

    def __init__(self, directory: str, *, id_col: str, num_shards: int,
                 schema: pa.Schema | None = None, verify_col: str | None = None,
                 spills: str | None = None) -> None:  # fmt: skip
        super().__init__()
        self._fn = _MergeShardFn(directory, id_col=id_col, num_shards=int(num_shards),
                                 schema=schema, verify_col=verify_col, spills=spills)  # fmt: skip

    def expand(self, spills):
        return spills | "GroupSpills" >> beam.GroupByKey() | "MergeShard" >> beam.ParDo(self._fn)


class WriteShardedParquet(beam.PTransform):
    """PCollection of RecordBatch -> ``directory/part-XXXXX-of-NNNNN.parquet`` (+ sidecars).

    Each worker spills id-sorted rows per shard (bounded buffer); one merge per shard streams
    them into the part file. Files depend only on the rows and the shard count.
    """

    def __init__(
        self,
        directory: str,
        *,
        id_col: str,
        num_shards: int,
        schema: pa.Schema | None = None,
        emb_col: str | None = None,
        verify_col: str | None = None,
        spills: str | None = None,
    ) -> None:
        super().__init__()
        self._dir = directory
        self._spills = spills or directory
        self._id_col = id_col
        self._n = int(num_shards)
        self._schema = schema
        self._emb_col = emb_col
        self._verify_col = verify_col

    def expand(self, pcoll):
        spill = _SpillFn(self._spills, id_col=self._id_col, num_shards=self._n,
                         emb_col=self._emb_col, verify_col=self._verify_col)  # fmt: skip
        return (
            pcoll
            | "Spill" >> beam.ParDo(spill)
            | MergeShards(
                self._dir,
                id_col=self._id_col,
                num_shards=self._n,
                schema=self._schema,
                verify_col=self._verify_col,
                spills=self._spills,
            )  # fmt: skip
        )
