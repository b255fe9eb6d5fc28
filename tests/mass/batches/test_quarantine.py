from __future__ import annotations

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.testing.util import assert_that, equal_to

from mass.batches.quarantine import validate_batch
from mass.embeddings import embedding_array
from mass.errors import SchemaError


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
    """The job's DoFn sends valid rows to the model and the spills, bad rows to quarantine."""
    import pyarrow.parquet as pq

    from mass.batches.parquet import plan_row_groups
    from mass.testing.stand_ins import NumpyModifier
    from transforms.inference.function import FunctionModelHandler
    from transforms.modify import ModifyRowGroupFn, pick

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


def _fixed(rows: np.ndarray) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {"id": list(range(len(rows))), "emb": embedding_array(rows.astype(np.float32))}
    )


def test_degenerate_norms_are_quarantined_by_the_documented_bounds():
    from mass.batches.quarantine import NORM_MAX, NORM_MIN

    d = 16
    low = NORM_MIN * np.sqrt(d)
    unit = np.full(d, 1 / np.sqrt(d))
    rows = np.stack([
        unit,                      # 0 ok: a unit-norm embedding
        np.zeros(d),               # 1 zero-vector
        np.full(d, 1e-40),         # 2 denormal: its float32 squares underflow to 0
        unit * low * 0.5,          # 3 below the bound
        unit * low * 2,            # 4 just above: released
        np.eye(d)[0] * 3e38,       # 5 finite, but its float32 square overflows
        unit * NORM_MAX * 0.5,     # 6 large but under the bound: released
        unit * NORM_MAX * 2,       # 7 above the bound
        unit * 1e-20,              # 8 near zero (float32 squares underflow)
    ])  # fmt: skip
    good, bad = validate_batch(_fixed(rows), id_col="id", emb_col="emb", dim=d)
    assert good.column("id").to_pylist() == [0, 4, 6]
    assert dict(zip(bad.column("id").to_pylist(), bad.column("reason").to_pylist(),
                    strict=True)) == {1: "zero-vector", 2: "tiny-norm", 3: "tiny-norm",
                                      5: "huge-norm", 7: "huge-norm", 8: "tiny-norm"}  # fmt: skip


def test_a_null_cell_inside_a_fixed_size_list_is_quarantined_as_non_finite():
    x = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    values = pa.array(x.ravel().tolist()[:5] + [None] + x.ravel().tolist()[6:], pa.float32())
    batch = pa.RecordBatch.from_pydict(
        {"id": [0, 1, 2, 3], "emb": pa.FixedSizeListArray.from_arrays(values, 3)}
    )
    good, bad = validate_batch(batch, id_col="id", emb_col="emb", dim=3)
    assert good.column("id").to_pylist() == [0, 2, 3]
    assert bad.column("reason").to_pylist() == ["non-finite"] and bad.column("id")[0].as_py() == 1


def test_dictionary_encoded_ids_are_released_as_their_values():
    x = np.random.default_rng(0).normal(size=(3, 3)).astype(np.float32)
    batch = pa.RecordBatch.from_pydict(
        {"id": pa.array(["a", "b", "c"]).dictionary_encode(), "emb": embedding_array(x)}
    )
    good, _ = validate_batch(batch, id_col="id", emb_col="emb", dim=3)
    assert good.schema.field("id").type == pa.string()
    assert good.column("id").to_pylist() == ["a", "b", "c"]
