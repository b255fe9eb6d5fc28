"""The external sort's sort step (mass/batches/spill.py): rows already in id order (a worker that
reads its row groups in order) are passed on without the take that copies every row."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from mass.batches.spill import _sorted, merge_sorted_spills, write_spill


def _table(ids) -> pa.Table:
    ids = np.asarray(ids, np.int64)
    return pa.table({"id": ids, "v": ids.astype(np.float32) * 2})


def test_rows_already_in_id_order_are_not_copied():
    table = pa.concat_tables([_table([1, 2, 5]), _table([5, 9])])  # two chunks, ties allowed
    assert _sorted(table, "id") is table


def test_rows_out_of_order_within_or_across_chunks_are_sorted():
    for table in (pa.concat_tables([_table([1, 3]), _table([2, 4])]), _table([3, 1, 2]),
                  pa.table({"id": pa.array(["b", "a"]), "v": [1.0, 2.0]})):  # fmt: skip
        got = _sorted(table, "id")
        ids = got.column("id").to_pylist()
        assert ids == sorted(ids) and got.num_rows == table.num_rows
        assert got.column("v").to_pylist() == [
            table.column("v")[i].as_py() for i in np.argsort(table.column("id").to_pylist())
        ]


def test_a_run_of_chunked_rows_reads_back_sorted(tmp_path):
    parts = [_table([7, 8]), _table([1, 2]), _table([9, 10])]
    path = write_spill(str(tmp_path), pa.concat_tables(parts), "id")
    out = pa.concat_tables(list(merge_sorted_spills([path], "id")))
    assert out.column("id").to_pylist() == [1, 2, 7, 8, 9, 10]
