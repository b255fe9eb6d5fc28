"""Parquet reading by row groups, without Beam: cached footers, work items of consecutive
row groups, bounded-memory batch reads, and the fixed writer settings of the byte-identical
output contract (the Beam read is :class:`transforms.parquet_io.ReadArrowBatches`)."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from mass import fs
from mass.errors import UnreadableInputError
from mass.io import expand_paths

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
    every row group made reading quadratic (docs/performance.md). Readers pass the cached
    metadata to ``pq.ParquetFile(path, metadata=...)``, which then skips the footer.
    """
    try:
        key = (path, *fs.stat_key(path))
        with _FOOTER_LOCK:
            meta = _FOOTER_CACHE.get(key)
        if meta is None:
            fs.trace("r", path)
            filesystem, where = fs.filesystem(path)
            meta = pq.read_metadata(where, filesystem=filesystem)
            with _FOOTER_LOCK:
                if len(_FOOTER_CACHE) >= _FOOTER_CACHE_SIZE:
                    _FOOTER_CACHE.pop(next(iter(_FOOTER_CACHE)))
                _FOOTER_CACHE[key] = meta
        return meta
    except (pa.ArrowInvalid, OSError) as e:
        raise UnreadableInputError.parquet(path, e) from e


def open_parquet(path: str) -> pq.ParquetFile:
    """``pq.ParquetFile`` over the cached footer (see :func:`footer`)."""
    meta = footer(path)
    try:
        return pq.ParquetFile(fs.open_input(path), metadata=meta)
    except (pa.ArrowInvalid, OSError) as e:
        raise UnreadableInputError.parquet(path, e) from e


def plan_row_groups(
    spec: str | list[str] | tuple[str, ...], *, min_rows: int = MIN_ITEM_ROWS
) -> list[RowGroupSpec]:
    """Read only the footers of ``spec``'s files (a spec or the expanded file list) -> work
    items of consecutive row groups of at least ``min_rows`` rows (a file's last item may
    be smaller); a row group of ``min_rows`` or more is an item alone.

    Planning tiny row groups together keeps the per-item costs (a model call, a spill
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
