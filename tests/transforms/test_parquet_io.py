from __future__ import annotations

import glob
import os

import apache_beam as beam
import numpy as np
import pyarrow.parquet as pq
from apache_beam.testing.util import assert_that, equal_to

from transforms.parquet_io import ReadArrowBatches, WriteShardedParquet, plan_row_groups
from transforms.testing import write_embeddings


def test_plan_row_groups_lists_every_row_group(tmp_path):
    write_embeddings(str(tmp_path / "a.parquet"), rows=1200, dim=4, row_group=500)
    specs = plan_row_groups(str(tmp_path))
    assert [(s.row_group, s.num_rows) for s in specs] == [(0, 500), (1, 500), (2, 200)]


def test_read_yields_bounded_batches_covering_every_row(tmp_path, beam_pipeline):
    write_embeddings(str(tmp_path / "a.parquet"), rows=1200, dim=4, row_group=500)
    write_embeddings(str(tmp_path / "b.parquet"), rows=300, dim=4, id_offset=5000)
    with beam_pipeline() as p:
        batches = p | ReadArrowBatches(str(tmp_path), columns=["id"], batch_rows=128)
        assert_that(
            batches
            | beam.Map(lambda b: b.num_rows <= 128 and b.schema.names == ["id"])
            | beam.Distinct(),
            equal_to([True]),
            label="bounded",
        )
        ids = batches | beam.FlatMap(lambda b: b.column("id").to_pylist())
        assert_that(ids, equal_to(list(range(1200)) + list(range(5000, 5300))), label="rows")


def _write(src: str, out: str, *, batch_rows: int, shards: int, beam_pipeline) -> list[bytes]:
    with beam_pipeline() as p:
        _ = (
            p
            | ReadArrowBatches(src, batch_rows=batch_rows)
            | WriteShardedParquet(out, id_col="id", num_shards=shards)
        )
    files = sorted(glob.glob(os.path.join(out, "part-*.parquet")))
    return [open(f, "rb").read() for f in files]


def test_shards_are_byte_identical_for_any_batch_size(tmp_path, beam_pipeline):
    src = str(tmp_path / "in.parquet")
    write_embeddings(src, rows=1000, dim=8, row_group=300)
    a = _write(src, str(tmp_path / "a"), batch_rows=64, shards=3, beam_pipeline=beam_pipeline)
    b = _write(src, str(tmp_path / "b"), batch_rows=999, shards=3, beam_pipeline=beam_pipeline)
    assert len(a) == 3 and a == b


def test_rows_are_sorted_by_id_within_a_shard(tmp_path, beam_pipeline):
    src = str(tmp_path / "in.parquet")
    write_embeddings(src, rows=700, dim=2, row_group=100)
    _write(src, str(tmp_path / "o"), batch_rows=50, shards=2, beam_pipeline=beam_pipeline)
    for f in glob.glob(str(tmp_path / "o" / "part-*.parquet")):
        ids = pq.read_table(f).column("id").to_numpy()
        assert len(ids) and np.all(np.diff(ids) > 0)
