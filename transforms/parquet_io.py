"""Arrow-batch Parquet IO that every Beam runner can execute, DaskRunner included.

Beam's DaskRunner translates only Create, ParDo, GroupByKey and Flatten, so reading is
``Create(row-group specs) | ParDo(read)`` instead of ``ReadFromParquetBatched`` (a Read
source), and writing is ``ParDo(spill sorted runs) | GroupByKey(shard -> run paths) |
ParDo(merge)`` instead of ``WriteToParquetBatched`` (a Reshuffle + finalize sink). Rows go to
shard ``row_seeds(id) % num_shards`` and are sorted by id inside a shard, so the files depend
only on the rows and the shard count: the same input gives byte-identical files on any
runner, batch size or input layout (what DVC needs to see an unchanged output). Rows never
travel through the GroupByKey (only run file paths do) and the merge holds one record batch
per open run, so memory stays bounded whatever the number of rows (an external sort).
"""

from __future__ import annotations

import contextlib
import copyreg
import errno
import json
import os
import shutil
import threading
import uuid
from dataclasses import dataclass

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mass.embeddings import fixed_view
from mass.errors import ReleaseError, UnreadableInputError
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
    """One unit of read work: ``count`` consecutive row groups of one file, from
    ``row_group`` (picklable, runner-independent)."""

    path: str
    row_group: int
    num_rows: int
    count: int = 1

    @property
    def row_groups(self) -> list[int]:
        return list(range(self.row_group, self.row_group + self.count))


MAX_SHARDS = 1024  # --shards cap: one open writer, sidecar and id-index file per shard
MIN_ITEM_ROWS = 65536  # tiny row groups are planned together up to this many rows per item
_FOOTER_CACHE: dict[tuple[str, int, int], pq.FileMetaData] = {}
_FOOTER_LOCK = threading.Lock()
_FOOTER_CACHE_SIZE = 256


def footer(path: str) -> pq.FileMetaData:
    """``path``'s parsed Parquet footer, read once per process (keyed by path, size, mtime).

    A file with thousands of row groups has a footer of hundreds of KB; parsing it again for
    every row group made reading quadratic (26 rows/s, issue 11). Readers pass the cached
    metadata to ``pq.ParquetFile(path, metadata=...)``, which then skips the footer.
    """
    try:
        st = os.stat(path)
        key = (path, st.st_size, st.st_mtime_ns)
        with _FOOTER_LOCK:
            meta = _FOOTER_CACHE.get(key)
        if meta is None:
            meta = pq.read_metadata(path)
            with _FOOTER_LOCK:
                if len(_FOOTER_CACHE) >= _FOOTER_CACHE_SIZE:
                    _FOOTER_CACHE.pop(next(iter(_FOOTER_CACHE)))
                _FOOTER_CACHE[key] = meta
        return meta
    except (pa.ArrowInvalid, OSError) as e:
        raise UnreadableInputError(
            f"{path}: not readable as Parquet ({e}); the file is truncated or not Parquet: "
            "re-export it or remove it from the input"
        ) from e


def open_parquet(path: str) -> pq.ParquetFile:
    """``pq.ParquetFile`` over the cached footer (see :func:`footer`)."""
    meta = footer(path)
    try:
        return pq.ParquetFile(path, metadata=meta)
    except (pa.ArrowInvalid, OSError) as e:
        raise UnreadableInputError(
            f"{path}: not readable as Parquet ({e}); re-export the file or remove it"
        ) from e


def plan_row_groups(
    spec: str | list[str] | tuple[str, ...], *, min_rows: int = MIN_ITEM_ROWS
) -> list[RowGroupSpec]:
    """Read only the footers of ``spec``'s files (a spec or the expanded file list) -> work
    items of consecutive row groups of at least ``min_rows`` rows (a file's last item may
    be smaller); a row group of ``min_rows`` or more is an item alone.

    Planning tiny row groups together keeps the per-item costs (a model call, a spill run
    per shard, a merge input) from dominating a file written with thousands of small row
    groups; the output does not depend on the plan (rows are sorted by id per shard).
    """
    files = expand_paths(spec) if isinstance(spec, str) else list(spec)
    out: list[RowGroupSpec] = []
    for path in files:
        meta = footer(path)
        start, rows = 0, 0
        for i in range(meta.num_row_groups):
            rows += meta.row_group(i).num_rows
            if rows >= min_rows or i == meta.num_row_groups - 1:
                out.append(RowGroupSpec(path, start, rows, i + 1 - start))
                start, rows = i + 1, 0
    return out


def input_schema(spec: str) -> pa.Schema:
    """Schema of the first file of ``spec`` (files must agree; the reader checks each)."""
    pf = open_parquet(expand_paths(spec)[0])
    try:
        return pf.schema_arrow
    finally:
        pf.close()


class _ReadRowGroupFn(beam.DoFn):
    def __init__(self, columns: list[str] | None, batch_rows: int) -> None:
        self._columns = columns
        self._batch_rows = batch_rows

    def process(self, spec: RowGroupSpec):
        for batch in read_row_group(spec, self._columns, self._batch_rows):
            yield decode_dictionaries(batch)


def decode_dictionaries(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Dictionary-encoded columns (a pandas ``category``) -> plain columns of their values."""
    for i, field in enumerate(batch.schema):
        if pa.types.is_dictionary(field.type):
            batch = batch.set_column(i, field.name, batch.column(i).dictionary_decode())
    return batch


def read_row_group(spec: RowGroupSpec, columns: list[str] | None, batch_rows: int):
    """Stream the item's row groups as RecordBatches of at most ``batch_rows`` rows (batches
    span row-group boundaries); an unreadable page names its row group."""
    pf = open_parquet(spec.path)
    try:
        for batch in pf.iter_batches(batch_size=batch_rows, row_groups=spec.row_groups,
                                     columns=columns, use_threads=False):  # fmt: skip
            if batch.num_rows:
                yield batch
    except (pa.ArrowInvalid, OSError) as e:
        raise UnreadableInputError(
            f"{spec.path}: row group {_bad_row_group(pf, spec, columns)} unreadable ({e}); "
            "re-export the file or remove it from the input"
        ) from e
    finally:
        pf.close()


def _bad_row_group(pf: pq.ParquetFile, spec: RowGroupSpec, columns) -> int | str:
    """The first row group of ``spec`` that fails to read alone (for the error message)."""
    for rg in spec.row_groups:
        try:
            pf.read_row_group(rg, columns=columns, use_threads=False)
        except (pa.ArrowInvalid, OSError):
            return rg
    return f"{spec.row_group}..{spec.row_group + spec.count - 1}"


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


DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


@contextlib.contextmanager
def disk_full(path: str, what: str):
    """Turn ``ENOSPC``/``EDQUOT`` while writing under ``path`` into a :class:`ReleaseError`
    naming the path (the callers' staging is removed by the job; nothing is published)."""
    try:
        yield
    except OSError as e:
        if e.errno not in DISK_FULL and not any(
            f"[errno {n}]" in str(e) for n in DISK_FULL
        ):  # pyarrow's IOError carries the errno in its text
            raise
        raise ReleaseError(
            f"{path}: no space left on the device while writing {what} ({e}); free space "
            "there or point --output at another filesystem; nothing published"
        ) from e


def shard_path(directory: str, shard: int, num_shards: int) -> str:
    return os.path.join(directory, f"part-{shard:05d}-of-{num_shards:05d}.parquet")


def shard_of(ids: pa.Array, num_shards: int) -> np.ndarray:
    """Shard of each row: a pure function of its id (stable across processes and runners)."""
    return (row_seeds(ids) % num_shards).astype(np.int64)


IDS_DIR = "_ids"  # the input's id index (transforms.id_index), inside the staging directory
RUNS_DIR = "_runs"  # sorted spill runs inside the staging directory (removed before publishing)
RUN_BYTES = 1 << 20  # bytes per record batch of a run file: what the merge holds per open run
FAN_IN = 32  # runs merged at once; more are first merged into longer runs (bounded memory)
SPILL_BYTES = 64 << 20  # rows a writer buffers per worker before it spills sorted runs


def _sorted(table: pa.Table, id_col: str) -> pa.Table:
    return table.take(pc.sort_indices(table, sort_keys=[(id_col, "ascending")]))


def _chunk_rows(table: pa.Table) -> int:
    row = max(1, table.nbytes // max(1, table.num_rows)) if table.num_rows else 1
    return max(256, RUN_BYTES // row)


def write_run(directory: str, table: pa.Table, id_col: str) -> str:
    """Sort ``table`` by id and write it as one Arrow IPC run file; return its path."""
    table = _sorted(table.combine_chunks(), id_col)
    path = os.path.join(directory, f"run-{uuid.uuid4().hex}.arrow")
    with disk_full(directory, "a sorted spill run"):
        os.makedirs(directory, exist_ok=True)
        with pa.OSFile(path + ".part", "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
            w.write_table(table, max_chunksize=_chunk_rows(table))
    os.replace(path + ".part", path)  # a run is referenced only once complete
    return path


class ShardSpiller:
    """Buffers a worker's rows per shard and spills them as id-sorted run files.

    Memory is bounded by ``budget`` bytes whatever the number of rows; each spilled run is
    reported as ``(shard, path)`` for the merge. With ``verify_col`` (the model input
    carried next to the output), the comparison happens here and one flag byte per row
    replaces the input copy (see :func:`_row_flags`).
    """

    def __init__(
        self,
        directory: str,
        *,
        id_col: str,
        num_shards: int,
        emb_col: str | None = None,
        verify_col: str | None = None,
        budget: int = SPILL_BYTES,
    ) -> None:
        self._dir = os.path.join(directory, RUNS_DIR)
        self._id_col, self._n = id_col, num_shards
        self._emb_col, self._verify_col = emb_col, verify_col
        self._budget = budget
        self._buf: dict[int, list[pa.RecordBatch]] = {}
        self._bytes = 0

    def add(self, batch: pa.RecordBatch) -> list[tuple[int, str]]:
        if self._verify_col is not None:
            flags = _row_flags(batch, self._emb_col, self._verify_col)
            idx = batch.schema.get_field_index(self._verify_col)
            batch = batch.set_column(idx, self._verify_col, pa.array(flags))
        shards = shard_of(batch.column(self._id_col), self._n)
        for s in np.unique(shards):
            part = batch if self._n == 1 else batch.filter(pa.array(shards == s))
            self._buf.setdefault(int(s), []).append(part)
        self._bytes += batch.nbytes
        return self.flush() if self._bytes >= self._budget else []

    def flush(self) -> list[tuple[int, str]]:
        out = []
        for s, parts in sorted(self._buf.items()):
            out.append((s, write_run(self._dir, pa.Table.from_batches(parts), self._id_col)))
        self._buf, self._bytes = {}, 0
        return out


class _Cursor:
    """Read position in one sorted run file (one record batch in memory at a time)."""

    def __init__(self, path: str, id_col: str) -> None:
        self._file = pa.OSFile(path, "rb")
        self._reader = pa.ipc.open_file(self._file)
        self._next, self._id_col = 0, id_col
        self.batch: pa.RecordBatch | None = None
        self._load()

    def _load(self) -> None:
        self.batch = None
        while self.batch is None and self._next < self._reader.num_record_batches:
            b = self._reader.get_batch(self._next)
            self._next += 1
            self.batch = b if b.num_rows else None
        if self.batch is None:
            self._file.close()

    def last_id(self):
        return self.batch.column(self._id_col)[-1].as_py()

    def take_upto(self, bound) -> pa.RecordBatch:
        """Rows with id <= ``bound`` (a prefix: the run is sorted); loads the next batch."""
        ids = self.batch.column(self._id_col)
        k = pc.sum(pc.less_equal(ids, pa.scalar(bound, ids.type))).as_py() or 0
        head = self.batch.slice(0, k)
        self.batch = self.batch.slice(k)
        if not self.batch.num_rows:
            self._load()
        return head


def merge_sorted_runs(paths: list[str], id_col: str):
    """k-way merge of id-sorted runs: yields id-sorted tables, holding one batch per run."""
    cursors = [c for c in (_Cursor(p, id_col) for p in paths) if c.batch is not None]
    while cursors:
        # every row <= the smallest "last id" of the loaded batches is final: none can follow
        bound = min(c.last_id() for c in cursors)
        pieces = [c.take_upto(bound) for c in cursors]
        table = pa.Table.from_batches([p for p in pieces if p.num_rows])
        yield _sorted(table, id_col)
        cursors = [c for c in cursors if c.batch is not None]


def _reduce_runs(paths: list[str], directory: str, id_col: str) -> list[str]:
    """Merge runs FAN_IN at a time until at most FAN_IN remain (multi-pass external sort)."""
    while len(paths) > FAN_IN:
        merged = []
        for i in range(0, len(paths), FAN_IN):
            group = paths[i : i + FAN_IN]
            if len(group) == 1:
                merged.append(group[0])
                continue
            out = os.path.join(directory, f"run-{uuid.uuid4().hex}.arrow")
            writer = None
            with pa.OSFile(out + ".part", "wb") as sink:
                for table in merge_sorted_runs(group, id_col):
                    if writer is None:
                        writer = pa.ipc.new_file(sink, table.schema)
                    writer.write_table(table, max_chunksize=_chunk_rows(table))
                if writer is not None:
                    writer.close()
            os.replace(out + ".part", out)
            for p in group:
                os.remove(p)
            merged.append(out)
        paths = merged
    return paths


class _ShardSink:
    """Writes a shard's sorted rows as exactly ``row_group_size``-row row groups, so the file
    is byte-identical to ``pq.write_table`` of the whole sorted shard."""

    def __init__(self, path: str, schema: pa.Schema | None) -> None:
        self._path, self._schema = path, schema
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
    """Merge a shard's sorted runs into its part file (drops and checks ``verify_col``).

    With ``verify_col`` the merge counts rows whose output is the input up to scale (cosine
    similarity > :data:`BYPASS_COSINE`: a bypassed model) or is not finite, and leaves those counts in a ``_part-*.json`` sidecar for the
    publisher; the column is never written.
    """

    def __init__(
        self,
        directory: str,
        *,
        id_col: str,
        num_shards: int,
        schema: pa.Schema | None,
        verify_col: str | None,
    ) -> None:
        self._dir = directory
        self._id_col = id_col
        self._n = num_shards
        self._schema = schema
        self._verify_col = verify_col

    def process(self, element):
        with disk_full(self._dir, f"shard {int(element[0])}"):
            yield from self._merge(element)

    def _merge(self, element):
        shard, runs = element
        shard = int(shard)
        paths = _reduce_runs(sorted(runs), os.path.join(self._dir, RUNS_DIR), self._id_col)
        path = shard_path(self._dir, shard, self._n)
        sink = _ShardSink(path + ".part", self._schema)
        stats = {"shard": shard, "rows": 0}
        counts = {"unmodified": 0, "first_unmodified_id": None,
                  "nonfinite": 0, "first_nonfinite_id": None}  # fmt: skip
        first_schema = None
        for table in merge_sorted_runs(paths, self._id_col):
            if self._verify_col is not None:
                _count_flags(counts, table, self._id_col, self._verify_col)
                table = table.drop_columns([self._verify_col])
            if self._schema is not None:  # fixed column order, types and metadata
                table = table.select(self._schema.names).cast(self._schema)
            first_schema = first_schema or table.schema
            stats["rows"] += table.num_rows
            sink.write(table)
        sink.close(self._schema or first_schema or pa.schema([]))
        os.replace(path + ".part", path)
        for p in paths:
            os.remove(p)
        if self._verify_col is not None:
            stats.update(counts)
        with open(os.path.join(self._dir, f"_part-{shard:05d}.json"), "w") as f:
            json.dump(stats, f)
        yield stats


UNMODIFIED, NONFINITE = 1, 2  # bits of the per-row flags that replace the input copy
# A released row whose cosine similarity to its input exceeds this is the input (up to scale
# and float rounding: a bypassed model, one that returns n(x) or x * (1 + 1e-7)): refused.
# 1 - cos ~ angle**2 / 2, so this is an angle of ~0.08 degrees; any real modifier moves a
# row much further (MaSS adds a unit vector to a unit vector: cos <= 0.71 unless aligned).
BYPASS_COSINE = 1.0 - 1e-6


def _row_flags(batch: pa.RecordBatch, emb_col: str | None, verify_col: str) -> np.ndarray:
    """uint8 per row: UNMODIFIED if the output is the carried input up to scale (cosine
    similarity > :data:`BYPASS_COSINE`, computed in float64), NONFINITE if not finite."""
    n = batch.num_rows
    out = fixed_view(batch.column(emb_col))
    src = fixed_view(batch.column(verify_col), None)
    finite = np.isfinite(out).all(axis=1)
    same = np.zeros(n, bool)
    if src.shape == out.shape:
        a = np.where(finite[:, None], out, 0.0).astype(np.float64)
        b = np.nan_to_num(src.astype(np.float64), nan=0.0, posinf=0.0, neginf=0.0)
        dot = np.einsum("ij,ij->i", a, b)
        norms = np.sqrt(np.einsum("ij,ij->i", a, a) * np.einsum("ij,ij->i", b, b))
        cos = np.divide(dot, norms, out=np.zeros(n), where=norms > 0)
        # an exact copy is a bypass whatever its norm (a zero row is quarantined upstream)
        same = (cos > BYPASS_COSINE) | (out == src).all(axis=1)
    flags = np.where(same, UNMODIFIED, 0).astype(np.uint8)
    flags[~finite] |= NONFINITE
    return flags


def _count_flags(counts: dict, table: pa.Table, id_col: str, verify_col: str) -> None:
    """Add one sorted chunk's flags to ``counts`` (first ids are the smallest: runs are sorted)."""
    flags = table.column(verify_col).combine_chunks().to_numpy(zero_copy_only=False)
    ids = table.column(id_col)
    for key, bit in (("unmodified", UNMODIFIED), ("nonfinite", NONFINITE)):
        mask = (flags & bit) > 0
        if mask.any():
            counts[key] += int(mask.sum())
            if counts[f"first_{key}_id"] is None:
                counts[f"first_{key}_id"] = ids[int(np.flatnonzero(mask)[0])].as_py()


class _SpillFn(beam.DoFn):
    """Each element's rows -> one sorted run per shard it touches.

    Runs are emitted from ``process`` (never ``finish_bundle``: DaskRunner drops what
    ``finish_bundle`` emits); the merge copes with many small runs (see :data:`FAN_IN`).
    """

    def __init__(self, directory: str, **spiller) -> None:
        self._dir, self._spiller_args = directory, spiller

    def process(self, batch: pa.RecordBatch):
        spiller = ShardSpiller(self._dir, **self._spiller_args)
        yield from spiller.add(batch)
        yield from spiller.flush()


class MergeShards(beam.PTransform):
    """PCollection of ``(shard, run path)`` -> ``directory/part-XXXXX-of-NNNNN.parquet``.

    Only run paths travel through the GroupByKey, never rows: every runner (FnApiRunner keeps
    a GroupByKey's input in memory) stays within bounded memory whatever the row count.
    """

    def __init__(self, directory: str, *, id_col: str, num_shards: int,
                 schema: pa.Schema | None = None, verify_col: str | None = None) -> None:  # fmt: skip
        super().__init__()
        self._fn = _MergeShardFn(directory, id_col=id_col, num_shards=int(num_shards),
                                 schema=schema, verify_col=verify_col)  # fmt: skip

    def expand(self, runs):
        return runs | "GroupRuns" >> beam.GroupByKey() | "MergeShard" >> beam.ParDo(self._fn)


class WriteShardedParquet(beam.PTransform):
    """PCollection of RecordBatch -> ``directory/part-XXXXX-of-NNNNN.parquet`` (+ sidecars).

    Each worker spills id-sorted runs per shard (bounded buffer); one merge per shard streams
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
    ) -> None:
        super().__init__()
        self._dir = directory
        self._id_col = id_col
        self._n = int(num_shards)
        self._schema = schema
        self._emb_col = emb_col
        self._verify_col = verify_col

    def expand(self, pcoll):
        spill = _SpillFn(self._dir, id_col=self._id_col, num_shards=self._n,
                         emb_col=self._emb_col, verify_col=self._verify_col)  # fmt: skip
        return (
            pcoll
            | "SpillRuns" >> beam.ParDo(spill)
            | MergeShards(
                self._dir,
                id_col=self._id_col,
                num_shards=self._n,
                schema=self._schema,
                verify_col=self._verify_col,
            )  # fmt: skip
        )


def fill_empty_shards(directory: str, schema: pa.Schema, num_shards: int) -> None:
    """Write the shards that got no row as empty files, so the file set is always complete."""
    with disk_full(directory, "an empty shard"):
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
    """Drop the writer's bookkeeping (sidecars, and spill runs of retried bundles)."""
    shutil.rmtree(os.path.join(directory, RUNS_DIR), ignore_errors=True)
    shutil.rmtree(os.path.join(directory, IDS_DIR), ignore_errors=True)
    for name in os.listdir(directory):
        if name.startswith("_part-") and name.endswith(".json"):
            os.remove(os.path.join(directory, name))
