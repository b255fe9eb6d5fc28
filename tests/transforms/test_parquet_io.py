from __future__ import annotations

import glob
import os

import apache_beam as beam
import numpy as np
import pyarrow.parquet as pq
import pytest
from apache_beam.testing.util import assert_that, equal_to

from mass.batches import parquet as batches_parquet
from mass.batches.parquet import plan_row_groups, read_row_group
from mass.errors import UnreadableInputError
from mass.testing.stand_ins import write_embeddings
from transforms.parquet_io import ReadArrowBatches
from transforms.parquet_write import WriteShardedParquet


def test_plan_row_groups_lists_every_row_group(tmp_path):
    write_embeddings(str(tmp_path / "a.parquet"), rows=1200, dim=4, row_group=500)
    specs = plan_row_groups(str(tmp_path), min_rows=1)
    assert [(s.row_group, s.num_rows, s.count) for s in specs] == [(0, 500, 1), (1, 500, 1),
                                                                   (2, 200, 1)]  # fmt: skip


def test_tiny_row_groups_are_planned_together_and_read_across_boundaries(tmp_path):
    write_embeddings(str(tmp_path / "a.parquet"), rows=1000, dim=4, row_group=10)
    specs = plan_row_groups(str(tmp_path), min_rows=300)
    assert [(s.row_group, s.count, s.num_rows) for s in specs] == [
        (0, 30, 300), (30, 30, 300), (60, 30, 300), (90, 10, 100)]  # fmt: skip
    batches = [b for s in specs for b in read_row_group(s, ["id"], 128)]
    assert [b.num_rows for b in batches[:3]] == [128, 128, 44]  # batches span row groups
    ids = [i for b in batches for i in b.column("id").to_pylist()]
    assert ids == list(range(1000))


def test_a_footer_is_parsed_once_per_process_and_reread_when_the_file_changes(tmp_path):
    import mass.batches.parquet as pio
    from mass.batches.validate import check_input

    path = str(tmp_path / "a.parquet")
    write_embeddings(path, rows=100, dim=4, row_group=10)
    parsed = []
    real = pq.read_metadata
    pio.pq.read_metadata = lambda p, *a, **k: parsed.append(p) or real(p, *a, **k)
    try:
        check_input(path, id_col="id", emb_col="emb", dim=4, index_dir=str(tmp_path / "ids"))
        specs = plan_row_groups(path, min_rows=1)
        rows = sum(b.num_rows for s in specs for b in read_row_group(s, None, 64))
        assert (len(specs), rows, parsed) == (10, 100, [path])  # validate, index, plan, read
        os.utime(path, ns=(1, 1))  # a rewritten file (new mtime) is parsed again
        plan_row_groups(path)
        assert parsed == [path, path]
    finally:
        pio.pq.read_metadata = real


def test_an_unreadable_page_names_its_row_group_inside_a_planned_run(tmp_path):
    path = tmp_path / "a.parquet"
    write_embeddings(str(path), rows=100, dim=4, row_group=10)
    meta = pq.ParquetFile(path).metadata
    col = meta.row_group(7).column(1)  # emb
    data = bytearray(path.read_bytes())
    data[col.data_page_offset : col.data_page_offset + 32] = b"\xff" * 32
    path.write_bytes(bytes(data))
    (spec,) = plan_row_groups(str(path))
    with pytest.raises(UnreadableInputError, match="row group 7 unreadable"):
        list(read_row_group(spec, None, 1000))


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
    parts = glob.glob(str(tmp_path / "o" / "part-*.parquet"))
    assert len(parts) == 2
    for f in parts:
        ids = pq.read_table(f).column("id").to_numpy()
        assert len(ids) and np.all(np.diff(ids) > 0)


def _spill_and_merge(tmp_path, tables, *, shards=1, verify=False):
    """Spill each table as its own runs, then merge every shard (no Beam: the pieces)."""
    from mass.batches.spill import ShardSpiller
    from transforms.parquet_write import _MergeShardFn

    out = str(tmp_path / "out")
    runs: dict[int, list[str]] = {}
    for t in tables:
        sp = ShardSpiller(out, id_col="id", num_shards=shards,
                            emb_col="emb" if verify else None,
                            verify_col="src" if verify else None)  # fmt: skip
        for b in t.to_batches():
            for s, path in sp.add(b):
                runs.setdefault(s, []).append(path)
        for s, path in sp.flush():
            runs.setdefault(s, []).append(path)
    fn = _MergeShardFn(out, id_col="id", num_shards=shards, schema=None,
                         verify_col="src" if verify else None)  # fmt: skip
    stats = [next(iter(fn.process((s, r)))) for s, r in sorted(runs.items())]
    return out, stats


def _table(ids, dim=3, seed=0):
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    emb = rng.standard_normal((len(ids), dim)).astype(np.float32)
    return pa.table({"id": ids, "emb": pa.FixedSizeListArray.from_arrays(emb.ravel(), dim)})


def test_merge_is_byte_identical_to_writing_the_sorted_shard_at_once(tmp_path, monkeypatch):
    import pyarrow as pa

    from mass.batches import spill as R

    # small row groups and many tiny runs: several row groups and a multi-pass merge
    monkeypatch.setitem(batches_parquet.WRITE_OPTIONS, "row_group_size", 100)
    # the merge reads these from mass.batches.spill (patching parquet_io's re-exports did nothing)
    monkeypatch.setattr(R, "FAN_IN", 3)
    monkeypatch.setattr(R, "SPILL_BATCH_BYTES", 200)  # a few rows per run record batch
    ids = np.random.default_rng(1).permutation(1000)
    full = _table(ids)
    pieces = [full.slice(i, 73) for i in range(0, 1000, 73)]
    out, stats = _spill_and_merge(tmp_path, pieces)
    got = open(os.path.join(out, "part-00000-of-00001.parquet"), "rb").read()
    ref = str(tmp_path / "ref.parquet")
    pq.write_table(full.take(pa.compute.sort_indices(full, [("id", "ascending")])), ref,
                   **batches_parquet.WRITE_OPTIONS)  # fmt: skip
    assert got == open(ref, "rb").read()
    assert stats[0]["rows"] == 1000
    assert pq.ParquetFile(ref).metadata.num_row_groups == 10
    assert os.listdir(os.path.join(out, R.SPILLS_DIR)) == []  # merged runs are removed


def test_merge_handles_string_ids_and_duplicate_free_interleaving(tmp_path, monkeypatch):
    from mass.batches import spill as R

    monkeypatch.setattr(R, "FAN_IN", 2)
    ids = [f"user-{i:05d}" for i in np.random.default_rng(2).permutation(500)]
    out, _ = _spill_and_merge(tmp_path, [_table(ids[i : i + 37]) for i in range(0, 500, 37)],
                              shards=3)  # fmt: skip
    got = []
    for f in sorted(glob.glob(os.path.join(out, "part-*.parquet"))):
        col = pq.read_table(f).column("id").to_pylist()
        assert col == sorted(col)
        got += col
    assert sorted(got) == sorted(ids)


def test_merge_counts_unmodified_and_nonfinite_rows_with_the_smallest_ids(tmp_path):
    import pyarrow as pa

    t = _table(np.arange(50)[::-1].copy())
    emb = t.column("emb").combine_chunks()
    vals = emb.values.to_numpy().reshape(50, 3).copy()
    src = vals.copy()
    src[10] = vals[10]  # id 39: output == input (bypassed)
    src[40] = vals[40]  # id 9
    src[~np.isin(np.arange(50), [10, 40])] += 1.0
    vals[45, 0] = np.nan  # id 4: not finite
    t = pa.table({"id": t.column("id"),
                  "emb": pa.FixedSizeListArray.from_arrays(vals.ravel(), 3),
                  "src": pa.FixedSizeListArray.from_arrays(src.ravel(), 3)})  # fmt: skip
    out, stats = _spill_and_merge(tmp_path, [t.slice(0, 20), t.slice(20)], verify=True)
    s = stats[0]
    assert (s["unmodified"], s["first_unmodified_id"]) == (2, 9)
    assert (s["nonfinite"], s["first_nonfinite_id"]) == (1, 4)
    assert "src" not in pq.read_schema(os.path.join(out, "part-00000-of-00001.parquet")).names


def test_read_arrow_batches_decodes_dictionary_columns(tmp_path, beam_pipeline):
    import pyarrow as pa

    pq.write_table(pa.table({"id": pa.array(["a", "b", "a2"]).dictionary_encode(),
                             "x": pa.array([1, 2, 3])}), str(tmp_path / "a.parquet"))  # fmt: skip
    with beam_pipeline() as p:
        batches = p | ReadArrowBatches(str(tmp_path), batch_rows=2)
        assert_that(batches | beam.Map(lambda b: str(b.schema.field("id").type)) | beam.Distinct(),
                    equal_to(["string"]))  # fmt: skip
