"""Parquet parts that differ only in how a column is encoded read as one table (training's
reader, mass.io.read_table); parts that differ in kind are refused naming both files and the
column (was pyarrow's schema dump)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mass.errors import SchemaError
from mass.io import load_embeddings, read_table


def _emb(n: int, d: int = 4):
    return pa.FixedSizeListArray.from_arrays(pa.array(np.ones(n * d, np.float32)), d)


def _part(path, ids, g, extra=None):
    pq.write_table(pa.table({"id": ids, "emb": _emb(len(ids)), "g": g, **(extra or {})}), path)


def test_dictionary_and_plain_text_int32_and_int64_parts_read_as_values(tmp_path):
    _part(tmp_path / "a.parquet", pa.array([1, 2], pa.int32()), pa.array(["x", "y"]))
    _part(tmp_path / "b.parquet", pa.array([3, 4], pa.int64()),
          pa.array(["y", "x"]).dictionary_encode())  # fmt: skip
    _part(tmp_path / "c.parquet", pa.array([5], pa.uint16()), pa.array(["x"], pa.large_string()))
    table = read_table(str(tmp_path))
    assert table.schema.field("id").type == pa.int64()
    assert table.schema.field("g").type == pa.large_string()
    assert table.column("g").to_pylist() == ["x", "y", "y", "x", "x"]
    ds = load_embeddings(str(tmp_path), label_cols=["g"])
    assert ds.ids.to_pylist() == [1, 2, 3, 4, 5]
    assert ds.labels["g"].tolist() == [0, 1, 1, 0, 0]


def test_float32_and_float64_labels_read_as_float64(tmp_path):
    _part(tmp_path / "a.parquet", pa.array([1, 2]), pa.array([0.0, 1.0], pa.float32()))
    _part(tmp_path / "b.parquet", pa.array([3, 4]), pa.array([1.0, 0.0], pa.float64()))
    assert read_table(str(tmp_path)).schema.field("g").type == pa.float64()


@pytest.mark.parametrize(
    "b_ids, b_g, b_extra, says",
    [
        (pa.array([3], pa.int64()), pa.array([1.5]), None,
         ["column 'g' is double in", "b.parquet", "but string in", "a.parquet"]),
        (pa.array([3], pa.uint64()), pa.array(["x"]), None,
         ["column 'id' is uint64 in", "b.parquet", "but int64 in", "a.parquet"]),
        (pa.array([3]), pa.array(["x"]), {"h": pa.array([1])},
         ["b.parquet has other columns than", "a.parquet", "only there: ['h']"]),
    ],
    ids=["text-against-float", "uint64-against-int64", "an-extra-column"],
)  # fmt: skip
def test_parts_that_differ_in_kind_are_refused_naming_both_files(tmp_path, b_ids, b_g,
                                                                 b_extra, says):  # fmt: skip
    _part(tmp_path / "a.parquet", pa.array([1, 2], pa.int64()), pa.array(["x", "y"]))
    _part(tmp_path / "b.parquet", b_ids, b_g, b_extra)
    with pytest.raises(SchemaError) as e:
        read_table(str(tmp_path))
    for text in says:
        assert text in str(e.value), str(e.value)


def test_calibrations_streamed_sample_reads_parts_of_two_encodings(tmp_path):
    """mass train's seeded sample (inputs over its row cap) reads the same parts as values."""
    from mass.calibrate.sampling import sample_table

    n = 400
    g = pa.array(np.where(np.arange(n) % 3 == 0, "x", "y"))
    _part(tmp_path / "a.parquet", pa.array(np.arange(n), pa.int32()), g)
    _part(tmp_path / "b.parquet", pa.array(np.arange(n, 2 * n), pa.int64()), g.dictionary_encode())
    table, note = sample_table(str(tmp_path), columns=["id", "g"], strata_cols=["g"],
                               max_rows=200, seed=0)  # fmt: skip
    assert note["input_rows"] == 2 * n and note["classes"] == {"g": ["x", "y"]}
    assert table.schema.field("id").type == pa.int64() and 150 < table.num_rows < 250
    assert set(table.column("g").to_pylist()) == {"x", "y"}
