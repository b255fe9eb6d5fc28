"""The input's ids, external-sorted per release shard on disk: fail-closed id checks in bounded
memory.

Before any inference, :func:`build_id_index` streams every row group's id column, rejects
null ids (naming file and row), spills id-sorted rows per release shard (the shard is a
function of the id, :func:`mass.batches.spill.shard_of`) and merges each shard's spills into
one sorted file, rejecting repeated ids on the way (equal ids are adjacent after the merge;
the error names the files and rows). After the job the publisher checks each staged part
against it (:func:`mass.release.verify.verify_against_index`). Memory stays at a few record batches whatever
the number of rows; the old path held every id (plus hash tables and sort copies).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mass import fs
from mass.batches.parquet import open_parquet
from mass.batches.spill import (
    SPILLS_DIR,
    ShardSpiller,
    chunk_rows,
    merge_sorted_spills,
    reduce_spills,
)
from mass.errors import InvalidValueError, UnreadableInputError, first_null

FILE, ROW = "__file", "__row"


@dataclass(frozen=True)
class IdIndex:
    directory: str
    num_shards: int
    rows: int
    id_type: pa.DataType

    def shard_file(self, shard: int) -> str:
        return fs.join(self.directory, f"ids-{shard:05d}.arrow")

    def sorted_ids(self, shard: int) -> Iterator[pa.Array]:
        with fs.open_input(self.shard_file(shard)) as f:
            reader = pa.ipc.open_file(f)
            for i in range(reader.num_record_batches):
                yield reader.get_batch(i).column(0)


def build_id_index(files: list[str], id_col: str, num_shards: int, directory: str) -> IdIndex:
    """Stream ``files``' ids into ``directory`` (see the module docstring)."""
    spiller = ShardSpiller(directory, id_col=id_col, num_shards=num_shards)
    spills: dict[int, list[str]] = {}
    id_type = None
    for fi, path in enumerate(files):
        offset = 0
        try:
            pf = open_parquet(path)  # the footer cached by the input check
            for rg in range(pf.metadata.num_row_groups):
                ids = pf.read_row_group(rg, columns=[id_col]).column(0).combine_chunks()
                if pa.types.is_dictionary(ids.type):  # a pandas category: its values key
                    ids = ids.dictionary_decode()
                if ids.null_count:
                    row = offset + first_null(ids)
                    raise InvalidValueError(
                        f"{path}: id column '{id_col}' row {row} is null; every row needs a "
                        "unique id"
                    )
                id_type = id_type or ids.type
                n = len(ids)
                batch = pa.RecordBatch.from_arrays(
                    [ids, pa.array(np.full(n, fi, np.int32)),
                     pa.array(np.arange(offset, offset + n, dtype=np.int64))],
                    names=[id_col, FILE, ROW],
                )  # fmt: skip
                offset += n
                for s, spill in spiller.add(batch):
                    spills.setdefault(s, []).append(spill)
        except (pa.ArrowInvalid, OSError) as e:
            raise UnreadableInputError(
                f"{path}: id column '{id_col}' unreadable ({e}); re-export the file"
            ) from e
    for s, spill in spiller.flush():
        spills.setdefault(s, []).append(spill)
    total = 0
    for shard in range(num_shards):
        total += _merge_shard(files, id_col, spills.get(shard, []), directory, shard, id_type)
    return IdIndex(directory, num_shards, total, id_type or pa.int64())


def _merge_shard(files, id_col, spills, directory, shard, id_type) -> int:
    spills = reduce_spills(sorted(spills), fs.join(directory, SPILLS_DIR), id_col)
    path = fs.join(directory, f"ids-{shard:05d}.arrow")
    schema = pa.schema([(id_col, id_type or pa.int64())])
    rows, last = 0, None
    with fs.atomic_output(path) as sink, pa.ipc.new_file(sink, schema) as writer:
        for table in merge_sorted_spills(spills, id_col):
            ids = table.column(id_col).combine_chunks()
            if len(ids) and (
                (last is not None and ids[0].as_py() == last[0])
                or pc.any(pc.equal(ids.slice(1), ids.slice(0, len(ids) - 1))).as_py()
            ):
                _raise_duplicate(files, id_col, table, last)
            last = (ids[-1].as_py(), table.slice(len(table) - 1)) if len(ids) else last
            rows += len(ids)
            out = pa.table({id_col: ids})
            writer.write_table(out, max_chunksize=chunk_rows(out))
    for p in spills:
        fs.remove(p)
    return rows


def _raise_duplicate(files, id_col, table: pa.Table, last) -> None:
    if last is not None:
        table = pa.concat_tables([last[1], table])
    ids = table.column(id_col).combine_chunks()
    same = pc.equal(ids.slice(1), ids.slice(0, len(ids) - 1)).to_numpy(zero_copy_only=False)
    dup = ids[int(np.flatnonzero(same)[0]) + 1]
    hits = table.filter(pc.equal(table.column(id_col), dup))
    where = [  # in input order (the merge's order of equal ids depends on its spill names)
        f"{files[f]} row {r}"
        for f, r in sorted(
            zip(hits.column(FILE).to_pylist(), hits.column(ROW).to_pylist(), strict=True)
        )  # fmt: skip
    ]
    raise InvalidValueError(
        f"id column '{id_col}': duplicate id {dup.as_py()!r} at {', '.join(where[:4])}; "
        "ids must be unique across the input: deduplicate the rows"
    )


IDS_DIR = "_ids"  # the input's id index (mass.batches.id_index), inside the staging directory
