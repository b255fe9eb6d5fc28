from __future__ import annotations

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.testing.util import assert_that, equal_to

from mass.errors import SchemaError
from transforms.quarantine import validate_batch


def _batch():
    rows = [
        [1.0, 2.0, 3.0],
        [float("nan"), 0.0, 1.0],
        [0.0, 0.0, 0.0],
        [1.0, 2.0],
        None,
        [0.5, float("inf"), 1.0],
        [3.0, 2.0, 1.0],
    ]
    return pa.RecordBatch.from_pydict(
        {"id": list(range(7)), "emb": pa.array(rows, pa.list_(pa.float64()))}
    )


def test_bad_rows_are_split_out_with_their_reason():
    good, bad = validate_batch(_batch(), id_col="id", emb_col="emb", dim=3)
    assert good.column("id").to_pylist() == [0, 6]
    assert good.schema.field("emb").type == pa.list_(pa.float32(), 3)
    assert good.column("emb").to_pylist() == [[1, 2, 3], [3, 2, 1]]
    assert dict(
        zip(bad.column("id").to_pylist(), bad.column("reason").to_pylist(), strict=True)
    ) == {
        1: "non-finite",
        2: "zero-vector",
        3: "wrong-dimension",
        4: "null",
        5: "non-finite",
    }
    assert bad.schema.names == ["id", "reason"]  # the raw embedding stays out of quarantine


def test_fixed_size_column_of_the_wrong_dimension_is_a_schema_error():
    x = np.ones((2, 4), np.float32)
    batch = pa.RecordBatch.from_pydict(
        {"id": [0, 1], "emb": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), 4)}
    )
    with pytest.raises(SchemaError, match="dimension 4.*expects 3"):
        validate_batch(batch, id_col="id", emb_col="emb", dim=3)


def test_modify_fn_routes_each_row_once(beam_pipeline, tmp_path):
    """The job's DoFn sends valid rows to the model and the spill runs, bad rows to quarantine."""
    import pyarrow.parquet as pq

    from transforms.modify import ModifyRowGroupFn, pick
    from transforms.parquet_io import plan_row_groups
    from transforms.testing import NumpyModifier
    from transforms.triton_handler import FunctionModelHandler

    src = str(tmp_path / "in.parquet")
    pq.write_table(pa.Table.from_batches([_batch()]), src)
    handler = FunctionModelHandler(NumpyModifier(), output_dim=3, keep_input_as="__src")
    fn = ModifyRowGroupFn(handler, stage=str(tmp_path / "stage"), columns=["id", "emb"],
                          batch_rows=4, id_col="id", emb_col="emb", dim=3, num_shards=2,
                          verify_col="__src")  # fmt: skip
    with beam_pipeline() as p:
        tagged = p | beam.Create(plan_row_groups(src)) | beam.ParDo(fn)
        assert_that(
            tagged
            | "v" >> beam.FlatMap(pick, "run")
            | beam.FlatMap(lambda r: pa.ipc.open_file(r[1]).read_all().column("id").to_pylist()),
            equal_to([0, 6]),
            label="valid",
        )
        assert_that(
            tagged
            | "b" >> beam.FlatMap(pick, "bad")
            | beam.FlatMap(lambda b: b.column("id").to_pylist()),
            equal_to([1, 2, 3, 4, 5]),
            label="bad",
        )
