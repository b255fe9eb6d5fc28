"""Release guards that only matter when something upstream already went wrong (a bypassed or
broken model, a lost shard, a failed rename): each is driven directly here, so a guard that
stops working fails a test even though the normal path never reaches it."""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mass.batches.spill import NONFINITE, UNMODIFIED, row_flags
from mass.embeddings import embedding_array
from mass.errors import ReleaseError
from mass.formats import shard_path
from mass.release import columns as release_columns
from mass.release import commit as P
from mass.release import publish as R
from mass.release.verify import verify_release

INFO = {"name": "m", "version": 1, "sha256": "s", "method": "mass", "suppress": ["colour"],
        "preserve": ["digit"], "config_hash": "h"}  # fmt: skip


def _stage(tmp_path, sidecar: dict | None = None):
    stage = tmp_path / "OUT.tmp-x"
    stage.mkdir()
    table = pa.table({
        "id": pa.array([0, 1, 2], pa.int64()),
        "emb": embedding_array(np.tile(np.array([[0.6, 0.8]], np.float32), (3, 1))),
    }).replace_schema_metadata(release_columns.release_metadata(INFO))  # fmt: skip
    pq.write_table(table, shard_path(str(stage), 0, 1))
    if sidecar is not None:
        (stage / "_part-00000.json").write_text(json.dumps({"shard": 0, "rows": 3, **sidecar}))
    return str(stage), table.schema


def _publish(stage, out, schema):
    return R.publish_release(stage, out, expected_ids=pa.array([0, 1, 2], pa.int64()),
                             id_col="id", emb_col="emb", allow_columns=[], num_shards=1,
                             schema=schema)  # fmt: skip


def _previous(tmp_path):
    out = tmp_path / "OUT"
    out.mkdir()
    (out / "previous.txt").write_text("v1")
    return out


@pytest.mark.parametrize(
    "sidecar, why",
    [
        ({"unmodified": 2, "first_unmodified_id": 1, "nonfinite": 0, "first_nonfinite_id": None},
         r"2 released row\(s\) equal their input embedding up to scale \(cosine similarity "
         r"> 1 - 1e-6; first id 1\)"),
        ({"unmodified": 0, "first_unmodified_id": None, "nonfinite": 1, "first_nonfinite_id": 2},
         r"1 row\(s\) with NaN/Inf \(first id 2\)"),
    ],
)  # fmt: skip
def test_writer_flags_block_publication_and_keep_the_previous_release(tmp_path, sidecar, why):
    out = _previous(tmp_path)
    stage, schema = _stage(tmp_path, sidecar)
    with pytest.raises(ReleaseError, match=why):
        _publish(stage, str(out), schema)
    assert (out / "previous.txt").read_text() == "v1" and not os.path.exists(stage)


def test_clean_flags_publish(tmp_path):
    stage, schema = _stage(tmp_path, {"unmodified": 0, "first_unmodified_id": None,
                                      "nonfinite": 0, "first_nonfinite_id": None})  # fmt: skip
    assert _publish(stage, str(tmp_path / "OUT"), schema) == 3


def test_a_missing_part_file_is_refused(tmp_path):
    stage, _ = _stage(tmp_path)
    with pytest.raises(ReleaseError, match="1 part files, expected 2"):
        verify_release(stage, expected_ids=pa.array([0, 1, 2], pa.int64()), id_col="id",
                         emb_col="emb", allow_columns=[], num_shards=2)  # fmt: skip


def test_a_failed_rename_keeps_the_previous_release(tmp_path, monkeypatch):
    """No atomic exchange available and the final rename fails: the previous release must
    still be there (it is displaced only after the new one is in place, and put back)."""
    out = _previous(tmp_path)
    stage, schema = _stage(tmp_path)
    real_replace = os.replace

    def failing_replace(src, dst):
        if os.fspath(src) == stage:
            raise OSError(28, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(P, "_exchange", lambda a, b: False)  # the commit lives in publish
    monkeypatch.setattr(R.os, "replace", failing_replace)
    with pytest.raises(ReleaseError, match="previous release is kept"):
        _publish(stage, str(out), schema)
    assert (out / "previous.txt").read_text() == "v1"
    assert sorted(os.listdir(tmp_path)) == ["OUT"]  # no staging or displaced copy left


def test_media_columns_are_refused_by_name_as_well_as_by_type():
    schema = pa.schema([("id", pa.int64()), ("emb", pa.list_(pa.float32(), 2)),
                        ("text", pa.string()), ("note", pa.string())])  # fmt: skip
    kw = dict(schema=schema, suppress=[], id_col="id", emb_col="emb")
    with pytest.raises(ReleaseError, match="'text', a raw media column"):
        release_columns.resolve_allow_columns(["text"], **kw)
    assert release_columns.resolve_allow_columns(["note"], **kw) == []


def test_row_flags_mark_unmodified_and_non_finite_outputs():
    src = np.array([[1, 0], [0, 1], [0.6, 0.8]], np.float32)
    out = np.array([[1, 0], [np.nan, 1], [0.8, 0.6]], np.float32)
    batch = pa.RecordBatch.from_pydict({"emb": embedding_array(out),
                                        "__src": embedding_array(src)})  # fmt: skip
    assert row_flags(batch, "emb", "__src").tolist() == [UNMODIFIED, NONFINITE, 0]
