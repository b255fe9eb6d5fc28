"""The audit's bounded-memory pass: every input read once in record batches, hash-partitioned.

Each of the release, the labels file and ``--input`` is read once in Arrow record batches
(through :mod:`mass.fs`: local disk or an object store) and its rows are split by id
(``mass.noise.row_seeds(id) mod P``) into ``P = ceil(max rows / partition_rows)`` partitions.
With ``P > 1`` the partitions are spilled as Arrow IPC files into a local scratch directory
(deleted afterwards); with ``P == 1`` the batches stay in memory. Equal ids always land in the
same partition, so the per-partition id join, duplicate check and id-set checks are exact over
the whole input, and memory is one partition of each input plus one batch, whatever the rows.
A global row number (file order) travels with every row so errors name the real row.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mass import fs
from mass.errors import InvalidValueError, SchemaError, first_null
from mass.io import common_schema, conform, decode_ids, expand_paths, parquet_batches, schema_of
from mass.noise import row_seeds
from mass.scratch import PrivateDir

ROW = "__mass_row"  # global row number in file order, carried through the spill
SPILL_PREFIX = "mass-audit-"
PARTITION_ROWS = 200_000  # rows of one input per partition (memory ~ this x row width x 2)
BATCH_ROWS = 65_536


def footer_rows(paths: list[str]) -> int:
    """Rows of the Parquet files from their footers (nothing else is read)."""
    n = 0
    for path in paths:
        with fs.open_input(path) as f:
            n += pq.ParquetFile(f).metadata.num_rows
    return n


@dataclass
class Partitioned:
    """One input split by id hash; :meth:`part` reads one partition back as a table."""

    source: str
    n_rows: int
    n_parts: int
    schema: pa.Schema  # the first file's schema (with its metadata)
    _mem: list[list[pa.RecordBatch]] = field(default_factory=list)
    _files: list[str] = field(default_factory=list)
    _mem_schema: pa.Schema | None = None

    def part(self, i: int) -> pa.Table:
        if self._mem:
            return pa.Table.from_batches(self._mem[i], schema=self._mem_schema)
        with pa.OSFile(self._files[i]) as src:
            return pa.ipc.open_file(src).read_all().combine_chunks()


def partition(
    spec: str,
    columns: list[str],
    *,
    id_col: str,
    n_parts: int,
    scratch: str | None,
    tag: str,
    on_batch=None,
) -> Partitioned:
    """Read ``columns`` of every file of ``spec`` once and split the rows by id hash.

    ``on_batch(path, batch, first_row)`` sees every batch first (label statistics).
    Null ids raise with the global row; files with other schemas raise naming the file.
    """
    paths = expand_paths(spec)
    first = schema_of(paths[0])
    missing = [c for c in columns if c not in first.names]
    if id_col in missing:
        raise SchemaError(
            f"{spec}: no id column '{id_col}' (columns: {first.names}); pass --id-col"
        )
    cols = [c for c in columns if c in first.names]
    out = Partitioned(source=spec, n_rows=0, n_parts=n_parts, schema=first)
    writers: list = []
    mem: list[list[pa.RecordBatch]] = [[] for _ in range(n_parts)] if n_parts == 1 else []
    row = 0
    # parts that differ only in a column's encoding read as values; any other difference is
    # refused naming both files and the column
    target = common_schema(spec, paths, [first, *(schema_of(p) for p in paths[1:])], cols)
    try:
        for path in paths:
            for batch in parquet_batches(path, columns=cols, batch_rows=BATCH_ROWS):
                batch = conform(batch, target)
                ids = decode_ids(batch.column(id_col), id_col, source=spec)
                if ids.null_count:
                    at = first_null(ids)
                    raise InvalidValueError(f"{spec}: id column '{id_col}' row {row + at} is null")
                if on_batch is not None:
                    on_batch(path, batch, row)
                arrays = [ids if n == id_col else batch.column(n) for n in batch.schema.names]
                arrays.append(pa.array(np.arange(row, row + batch.num_rows, dtype=np.int64)))
                names = [*batch.schema.names, ROW]
                full = pa.RecordBatch.from_arrays(arrays, names=names)
                row += batch.num_rows
                if n_parts == 1:
                    mem[0].append(full)
                    out._mem_schema = full.schema
                    continue
                if not writers:
                    writers = [pa.ipc.new_file(os.path.join(scratch, f"{tag}-{i:05d}.arrow"),
                                               full.schema) for i in range(n_parts)]  # fmt: skip
                which = np.mod(row_seeds(ids), n_parts)
                order = np.argsort(which, kind="stable")
                bounds = np.searchsorted(which[order], np.arange(n_parts + 1))
                taken = full.take(pa.array(order))
                for i in range(n_parts):
                    if bounds[i + 1] > bounds[i]:
                        writers[i].write_batch(taken.slice(bounds[i], bounds[i + 1] - bounds[i]))
    finally:
        for w in writers:
            w.close()
    out.n_rows = row
    if n_parts == 1:
        out._mem = mem
        if out._mem_schema is None:  # no rows at all
            sch = pa.schema([target.field(c) for c in cols]).append(pa.field(ROW, pa.int64()))
            out._mem_schema = sch
    elif writers:
        out._files = [os.path.join(scratch, f"{tag}-{i:05d}.arrow") for i in range(n_parts)]
    else:  # no rows: empty partitions
        sch = pa.schema([target.field(c) for c in cols]).append(pa.field(ROW, pa.int64()))
        out.n_parts, out._mem, out._mem_schema = n_parts, [[] for _ in range(n_parts)], sch
    return out


def check_unique(ids: pa.Array, rows: np.ndarray, *, id_col: str, source: str) -> None:
    """No duplicate id within one partition (= over the whole input: equal ids share a
    partition); the error names the id and its global rows."""
    if len(pc.unique(ids)) == len(ids):
        return
    counts = pc.value_counts(ids)
    dup = counts.filter(pc.greater(counts.field("counts"), 1))[0]["values"].as_py()
    at = np.sort(rows[pc.equal(ids, pa.scalar(dup, ids.type)).to_numpy(zero_copy_only=False)])
    raise InvalidValueError(
        f"{source}: id column '{id_col}' has duplicate id {dup!r} at rows {at[:5].tolist()}"
    )


class Scratch:
    """The spill directory (ids, labels, original embeddings: :class:`mass.scratch.PrivateDir`,
    ``$TMPDIR/mass-audit-<pid>-*``, 0700, removed on exit, SIGTERM included, and swept at the
    next run after a SIGKILL) and the partition count."""

    def __init__(self, n_rows: int, partition_rows: int):
        self.n_parts = max(1, math.ceil(n_rows / max(partition_rows, 1)))
        self._dir = PrivateDir(SPILL_PREFIX) if self.n_parts > 1 else None
        self.path: str | None = None

    def __enter__(self) -> Scratch:
        if self._dir is not None:
            self.path = str(self._dir.__enter__())
        return self

    def __exit__(self, *exc) -> None:
        if self._dir is not None:
            self._dir.__exit__(*exc)
            self.path = None
