from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mass.embeddings import embedding_array
from mass.errors import ReleaseError
from mass.formats import shard_path
from mass.release.columns import release_metadata, resolve_allow_columns
from mass.release.commit import swap_into_place
from mass.release.publish import publish_release

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("emb", pa.list_(pa.float32(), 2)),
        ("digit", pa.int64()),
        ("colour", pa.int64()),
        ("image", pa.list_(pa.uint8(), 4)),
        ("note", pa.string()),
    ]
)
INFO = {
    "name": "m",
    "version": 1,
    "sha256": "s",
    "method": "mass",
    "suppress": ["colour"],
    "preserve": ["digit"],
    "config_hash": "h",
}


def test_allow_list_refuses_suppressed_and_raw_media_columns():
    kw = dict(schema=SCHEMA, suppress=["colour"], id_col="id", emb_col="emb")
    assert resolve_allow_columns(["digit", "note"], **kw) == []
    with pytest.raises(ReleaseError, match="'colour', a suppressed attribute.*--force-allow"):
        resolve_allow_columns(["digit", "colour"], **kw)
    with pytest.raises(ReleaseError, match="'image', a raw media column"):
        resolve_allow_columns(["image"], **kw)
    assert resolve_allow_columns(["colour", "image"], force=True, **kw) == ["colour", "image"]


def test_metadata_records_provenance_and_forced_columns():
    meta = release_metadata(INFO, forced_columns=["colour"])
    assert meta[b"mass.suppress"] == b'["colour"]' and meta[b"mass.sha256"] == b"s"
    assert meta[b"mass.forced_columns"] == b'["colour"]'


def _stage(tmp_path, *, extra_col=False, ids=(0, 1, 2), meta=True):
    stage = tmp_path / "OUT.tmp-x"
    os.makedirs(stage)
    cols = {
        "id": pa.array(list(ids), pa.int64()),
        "emb": embedding_array(pa.array([0.6, 0.8] * len(ids)).to_numpy().reshape(-1, 2)),
    }
    if extra_col:
        cols["colour"] = pa.array([1] * len(ids))
    table = pa.table(cols)
    if meta:
        table = table.replace_schema_metadata(release_metadata(INFO))
    pq.write_table(table, shard_path(str(stage), 0, 1))
    return str(stage), table.schema


def _publish(stage, out, schema, ids=(0, 1, 2)):
    return publish_release(
        stage,
        out,
        expected_ids=pa.array(list(ids), pa.int64()),
        id_col="id",
        emb_col="emb",
        allow_columns=[],
        num_shards=1,
        schema=schema,
    )


def test_a_column_outside_the_allow_list_is_refused_and_nothing_published(tmp_path):
    stage, schema = _stage(tmp_path, extra_col=True)
    out = str(tmp_path / "OUT")
    with pytest.raises(ReleaseError, match=r"\['colour'\] are not allow-listed"):
        _publish(stage, out, schema)
    assert not os.path.exists(out) and not os.path.exists(stage)


@pytest.mark.parametrize(
    "kw, expected_ids, why",
    [
        (dict(meta=False), (0, 1, 2), "metadata .* missing"),
        (dict(ids=(0, 1)), (0, 1, 2), "2 rows released for 3"),
        (dict(ids=(0, 1, 1)), (0, 1, 2), "duplicate ids"),
        (dict(ids=(0, 1, 5)), (0, 1, 2), "ids differ"),
    ],
)
def test_broken_invariants_keep_the_previous_release(tmp_path, kw, expected_ids, why):
    out = tmp_path / "OUT"
    out.mkdir()
    (out / "previous.txt").write_text("v1")
    stage, schema = _stage(tmp_path, **kw)
    with pytest.raises(ReleaseError, match=why):
        _publish(stage, str(out), schema, ids=expected_ids)
    assert (out / "previous.txt").read_text() == "v1" and not os.path.exists(stage)


def test_publication_replaces_the_previous_release_whole(tmp_path):
    out = tmp_path / "OUT"
    out.mkdir()
    (out / "previous.txt").write_text("v1")
    stage, schema = _stage(tmp_path)
    assert _publish(stage, str(out), schema) == 3
    assert sorted(os.listdir(out)) == ["part-00000-of-00001.parquet"]
    assert [p for p in os.listdir(tmp_path) if p != "OUT"] == []  # no staging/old dirs left


def test_swap_into_a_fresh_location(tmp_path):
    (tmp_path / "s").mkdir()
    swap_into_place(str(tmp_path / "s"), str(tmp_path / "new"))
    assert os.path.isdir(tmp_path / "new") and not os.path.exists(tmp_path / "s")
