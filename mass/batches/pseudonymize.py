"""A private copy of the job's input (and --labels) whose id column holds keyed pseudonyms
(:mod:`mass.pseudonym`), streamed batch by batch: the whole job then runs on it, so the
release is written, sorted, verified (ids unique, one-to-one with the input's), seeded and
audited on the pseudonyms, and no row order or part boundary follows the original ids."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from mass import fs
from mass.io import expand_paths
from mass.pseudonym import pseudonymize

BATCH_ROWS = 65536


def pseudonymized_copy(path: str, dest_dir: str, *, id_col: str, key,
                       tag: str) -> tuple[str, dict[str, str]]:  # fmt: skip
    """Copy every file of ``path`` into ``dest_dir/<tag>-NNNNN.parquet`` with ``id_col``
    replaced by its pseudonyms (row for row); returns (the glob of the copy, copy file ->
    the user's file, for error messages)."""
    fs.makedirs(dest_dir)
    names: dict[str, str] = {}
    for i, src in enumerate(expand_paths(path)):
        with fs.open_input(src) as f:
            pf = pq.ParquetFile(f)
            schema = pf.schema_arrow
            at = schema.get_field_index(id_col)
            out_schema = schema.set(at, pa.field(id_col, pa.string(), nullable=False))
            dest = fs.join(dest_dir, f"{tag}-{i:05d}.parquet")
            names[dest] = src
            with fs.atomic_output(dest) as sink, pq.ParquetWriter(sink, out_schema) as w:
                for batch in pf.iter_batches(batch_size=BATCH_ROWS):
                    cols = list(batch.columns)
                    if at >= 0:
                        cols[at] = pseudonymize(cols[at], key)
                    w.write_batch(pa.RecordBatch.from_arrays(cols, schema=out_schema))
    return fs.join(dest_dir, f"{tag}-*.parquet"), names


def unmask(message: str, names: dict[str, str]) -> str:
    """``message`` with each copy file named as the user's file it was made from (longest
    first), and the copy's glob as the user's path."""
    for copy in sorted(names, key=len, reverse=True):
        message = message.replace(copy, f"{names[copy]} (id pseudonymized)")
    return message
