"""Bounded-memory id checks: external-sorted id index and the streaming release comparison."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mass.batches import spill as R
from mass.batches.id_index import build_id_index
from mass.errors import InvalidValueError, ReleaseError
from mass.formats import shard_path
from mass.release.verify import verify_against_index


def _write(path, ids, row_group=50):
    pq.write_table(pa.table({"id": ids}), path, row_group_size=row_group)
    return str(path)


@pytest.fixture
def small_spills(monkeypatch):
    """Many small runs merged in several passes. The merge reads these from mass.batches.spill
    (patching the names parquet_io re-exports changed nothing: the cases never ran)."""
    monkeypatch.setattr(R, "FAN_IN", 2)
    monkeypatch.setattr(R, "SPILL_BATCH_BYTES", 64)  # 256-row record batches (the floor)
    monkeypatch.setattr(R, "SPILL_BYTES", 2000)  # a run every ~250 ids
    passes = []
    real = R.merge_sorted_spills

    def counted(paths, id_col):
        passes.append(len(paths))
        return real(paths, id_col)

    monkeypatch.setattr(R, "merge_sorted_spills", counted)
    return passes


def test_index_holds_every_id_sorted_per_shard(tmp_path, small_spills):
    rng = np.random.default_rng(0)
    ids = rng.permutation(1000)
    files = [_write(tmp_path / "a.parquet", ids[:600]), _write(tmp_path / "b.parquet", ids[600:])]
    index = build_id_index(files, "id", 3, str(tmp_path / "idx"))
    assert index.rows == 1000
    seen = []
    for s in range(3):
        got = np.concatenate([a.to_numpy() for a in index.sorted_ids(s)] or [np.array([], int)])
        assert np.all(np.diff(got) > 0)
        assert np.all(R.shard_of(pa.array(got), 3) == s)
        seen += got.tolist()
    assert sorted(seen) == list(range(1000))
    assert len(small_spills) > 3  # the multi-pass merge really ran (intermediate merges)


def test_duplicate_across_files_names_both_places(tmp_path, small_spills):
    a = _write(tmp_path / "a.parquet", np.arange(0, 300))
    b = _write(tmp_path / "b.parquet", np.array([500, 501, 123, 502]))
    with pytest.raises(
        InvalidValueError, match=r"duplicate id 123 at .*a.parquet row 123, .*b.parquet row 2"
    ):
        build_id_index([a, b], "id", 2, str(tmp_path / "idx"))


def test_a_duplicate_split_across_two_merge_chunks_is_found(tmp_path, small_spills):
    """One run, sorted: 255 at positions 255 and 256, either side of its first 256-row record
    batch, so the two copies leave the merge in different chunks (kills
    ids-duplicate-across-chunks)."""
    ids = np.concatenate([np.arange(600), [255]])
    a = _write(tmp_path / "a.parquet", np.random.default_rng(3).permutation(ids), row_group=601)
    with pytest.raises(InvalidValueError, match=r"duplicate id 255 at .*a.parquet row"):
        build_id_index([a], "id", 1, str(tmp_path / "idx"))


def test_duplicate_string_id_and_null_id(tmp_path):
    a = _write(tmp_path / "a.parquet", pa.array(["x", "y", "z", "y"]))
    with pytest.raises(InvalidValueError, match=r"duplicate id 'y' at .*row 1, .*row 3"):
        build_id_index([a], "id", 1, str(tmp_path / "i1"))
    n = _write(tmp_path / "n.parquet", pa.array([1, 2, None, 4]), row_group=2)
    with pytest.raises(InvalidValueError, match=r"n.parquet: id column 'id' row 2 is null"):
        build_id_index([n], "id", 1, str(tmp_path / "i2"))


def _stage(tmp_path, ids, shards):
    stage = tmp_path / "stage"
    stage.mkdir(parents=True)
    ids = pa.array(ids)
    for s in range(shards):
        part = ids.filter(pa.array(R.shard_of(ids, shards) == s))
        pq.write_table(pa.table({"id": pa.array(sorted(part.to_pylist()), ids.type)}),
                       shard_path(str(stage), s, shards), row_group_size=7)  # fmt: skip
    return str(stage)


def test_verify_accepts_exactly_the_valid_ids_and_nothing_else(tmp_path):
    src = _write(tmp_path / "in.parquet", np.arange(200))
    index = build_id_index([src], "id", 3, str(tmp_path / "idx"))
    bad = pa.array([5, 77])
    valid = [i for i in range(200) if i not in (5, 77)]
    assert verify_against_index(_stage(tmp_path / "ok", valid, 3), index, id_col="id",
                                quarantined=bad) == 198  # fmt: skip
    swapped = [*valid[:-1], 1000]  # same count, one id replaced
    with pytest.raises(ReleaseError, match="released ids differ"):
        verify_against_index(_stage(tmp_path / "sw", swapped, 3), index, id_col="id",
                             quarantined=bad)  # fmt: skip
    with pytest.raises(ReleaseError, match="199 rows released for 198"):
        verify_against_index(_stage(tmp_path / "ex", [*valid, 5], 3), index, id_col="id",
                             quarantined=bad)  # fmt: skip
