"""A private copy of the job's input (and --labels) whose id column holds keyed pseudonyms
(:mod:`mass.pseudonym`), streamed batch by batch: the whole job then runs on it, so the
release is written, sorted, verified (ids unique, one-to-one with the input's), seeded and
audited on the pseudonyms, and no row order or part boundary follows the original ids."""

from __future__ import annotations

import os
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mass import fs
from mass.io import expand_paths, parquet_batches, schema_of
from mass.pseudonym import HEX_DIGITS, pseudonymize

BATCH_ROWS = 65536


def pseudonymized_copy(path: str, dest_dir: str, *, id_col: str, key, tag: str, label: str = "",
                       owner_map: str | None = None) -> tuple[str, dict[str, str]]:  # fmt: skip
    """Copy every file of ``path`` into ``dest_dir/<tag>-NNNNN.parquet`` with ``id_col``
    replaced by its pseudonyms in the scope ``label`` (row for row); returns (the glob of the
    copy, copy file -> the user's file, for error messages). ``owner_map``: a local path
    where the (id, pseudonym) pairs are written too, 0600 in a 0700 directory."""
    fs.makedirs(dest_dir)
    names: dict[str, str] = {}
    writer = None
    try:
        for i, src in enumerate(expand_paths(path)):
            writer = _copy_one(src, fs.join(dest_dir, f"{tag}-{i:05d}.parquet"), names,
                               id_col=id_col, key=key, label=label, owner_map=owner_map,
                               writer=writer)  # fmt: skip
    finally:
        if writer is not None:
            writer.close()
    return fs.join(dest_dir, f"{tag}-*.parquet"), names


def _map_writer(path: str, id_type: pa.DataType, label: str) -> pq.ParquetWriter:
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))  # 0600 from the start
    schema = pa.schema([pa.field("id", id_type, nullable=False),
                        pa.field("pseudonym", pa.string(), nullable=False)],
                       metadata={"mass.pseudonym_scope": label})  # fmt: skip
    return pq.ParquetWriter(path, schema)


def _copy_one(src, dest, names, *, id_col, key, label, owner_map, writer):
    schema = schema_of(src)  # an unreadable file: the same refusal as an unpseudonymized read
    at = schema.get_field_index(id_col)
    out_schema = schema.set(at, pa.field(id_col, pa.string(), nullable=False))
    names[dest] = src
    with fs.atomic_output(dest) as sink, pq.ParquetWriter(sink, out_schema) as w:
        for batch in parquet_batches(src, columns=None, batch_rows=BATCH_ROWS):
            cols = list(batch.columns)
            if at >= 0:
                ids = cols[at]
                cols[at] = pseudonymize(ids, key, label)
                if owner_map is not None:
                    if writer is None:
                        writer = _map_writer(owner_map, _id_type(ids), label)
                    writer.write_batch(_map_batch(ids, cols[at], writer.schema))
            w.write_batch(pa.RecordBatch.from_arrays(cols, schema=out_schema))
    return writer


def _id_type(ids: pa.Array) -> pa.DataType:
    return ids.type.value_type if pa.types.is_dictionary(ids.type) else ids.type


def _map_batch(ids: pa.Array, pseudonyms: pa.Array, schema: pa.Schema) -> pa.RecordBatch:
    if pa.types.is_dictionary(ids.type):
        ids = ids.dictionary_decode()
    return pa.RecordBatch.from_arrays([ids, pseudonyms], schema=schema)


def unmask(message: str, names: dict[str, str], id_col: str | None = None) -> str:
    """``message`` with each copy file named as the user's file it was made from (longest
    first), and the copy's glob as the user's path; with ``id_col``, each pseudonymous id it
    quotes (``id '<pseudonym>'``) also gets its row in the user's file, found in the copies
    (row for row as the user's files), which must still exist."""
    quoted = set(_QUOTED.findall(message)) if id_col else set()
    rows = _rows_of(quoted, names, id_col) if quoted else {}
    for copy in sorted(names, key=len, reverse=True):
        message = message.replace(copy, f"{names[copy]} (id pseudonymized)")
    for p, (src, row) in rows.items():
        message = message.replace(f"id '{p}'", f"id '{p}' (row {row} of {src})")
    return message


# a pseudonym quoted as an id in an error message
_QUOTED = re.compile(rf"id '([0-9a-f]{{{HEX_DIGITS}}})'")


def _rows_of(pseudonyms: set[str], names: dict[str, str], id_col: str) -> dict:
    """pseudonym -> (the user's file, row) for those found in the copy files of ``names``;
    a copy that cannot be read any more is skipped (the message keeps the pseudonym)."""
    import pyarrow.compute as pc

    wanted = pa.array(sorted(pseudonyms), pa.string())
    out: dict[str, tuple[str, int]] = {}
    for copy, src in names.items():
        if "*" in copy:
            continue
        try:
            with fs.open_input(copy) as f:
                ids = pq.read_table(f, columns=[id_col]).column(0).combine_chunks()
        except (pa.ArrowInvalid, OSError, KeyError):
            continue
        hits = pc.index_in(ids, value_set=wanted)
        for row in np.flatnonzero(hits.is_valid().to_numpy(zero_copy_only=False)):
            out.setdefault(ids[int(row)].as_py(), (src, int(row)))
    return out
