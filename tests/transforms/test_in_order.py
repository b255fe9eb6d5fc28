"""The single-process in-order writer (transforms.in_order): the same release, byte for byte,
as the spill + merge path, on ordered and shuffled input, on FnApiRunner and DaskRunner; rows
out of order are refused and leave no part behind."""

from __future__ import annotations

import glob
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beam_pipelines import anonymize
from mass.embeddings import embedding_array
from mass.errors import InvalidValueError, ReleaseError
from transforms import in_order
from transforms.id_index import build_id_index
from transforms.in_order import InOrderWriter
from transforms.inference.function import FunctionModelHandler
from transforms.parquet_io import WRITE_OPTIONS
from transforms.testing import NumpyModifier, write_embeddings

INFO = {"name": "np", "version": 3, "sha256": "abc", "method": "test", "suppress": ["digit"],
        "preserve": [], "config_hash": "h", "dim": 16}  # fmt: skip


def _run(src, out, *flags):
    argv = ["--input", src, "--output", out, "--model", "np", "--no-audit",
            "--batch-rows", "100", "--max-quarantined", "5",
            "--allow-columns", "note,score", *flags]  # fmt: skip
    handler = FunctionModelHandler(NumpyModifier(), output_dim=16,
                                   keep_input_as=anonymize.INPUT_COPY)  # fmt: skip
    return anonymize.run(argv, model_handler=handler, model_info=INFO)


def _files(out):
    """Every file of the release (parts, manifest, datasheet) and its quarantine, as bytes."""
    names = sorted(glob.glob(os.path.join(out, "*")) + glob.glob(f"{out}_quarantine/*"))
    return {os.path.relpath(f, os.path.dirname(out)).replace(os.path.basename(out), "OUT", 1):
            open(f, "rb").read() for f in names if os.path.isfile(f)}  # fmt: skip


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """The same 1,000 rows (two bad ones: quarantined; a string column and an integer one with
    nulls allow-listed) in id order over two files, and shuffled."""
    d = tmp_path_factory.mktemp("in")
    table = write_embeddings(str(d / "whole.parquet"), rows=1000, dim=16, nan_rows=(5, 611),
                             label=False)  # fmt: skip
    table = table.append_column("note", pa.array([f"n{i % 7}" * (i % 3) for i in range(1000)]))
    score = pa.array([None if i % 11 == 0 else i * 3 for i in range(1000)], pa.int64())
    table = table.append_column("score", score)
    os.makedirs(d / "ordered")
    pq.write_table(table.slice(0, 400), d / "ordered" / "a.parquet", row_group_size=150)
    pq.write_table(table.slice(400), d / "ordered" / "b.parquet", row_group_size=150)
    rng = np.random.default_rng(1)
    pq.write_table(table.take(rng.permutation(1000)), d / "shuffled.parquet", row_group_size=150)
    return str(d / "ordered"), str(d / "shuffled.parquet")


@pytest.mark.parametrize(
    ("group", "shards"),
    [(None, 3), (64, 3), (64, 1)],
    ids=["default-row-groups", "64-row-groups", "64-row-groups-1-shard"],
)
def test_in_order_and_merge_paths_write_the_same_bytes(inputs, tmp_path, monkeypatch, group,
                                                       shards):  # fmt: skip
    """With 64-row row groups the in-order writer cuts its pending batches mid-way."""
    if group is not None:
        monkeypatch.setitem(WRITE_OPTIONS, "row_group_size", group)
    ordered, shuffled = inputs
    flags = ("--shards", str(shards))
    direct = _run(ordered, str(tmp_path / "direct" / "rel"), *flags)
    assert direct["writer"] == "in_order" and direct["rows_out"] == 998
    assert _run(shuffled, str(tmp_path / "shuffled" / "rel"), *flags)["writer"] == "merge"
    monkeypatch.setattr(in_order, "IN_ORDER_BYTES", 0)  # too little memory: spill + merge
    assert _run(ordered, str(tmp_path / "merged" / "rel"), *flags)["writer"] == "merge"
    a = _files(str(tmp_path / "direct" / "rel"))
    assert len([n for n in a if n.endswith(".parquet")]) == shards + 1  # + the quarantine
    assert "OUT/_release.json" in a
    assert a == _files(str(tmp_path / "merged" / "rel"))
    assert a == _files(str(tmp_path / "shuffled" / "rel"))
    part = pq.ParquetFile(str(tmp_path / "direct" / "rel" / f"part-00000-of-0000{shards}.parquet"))
    groups = 1 if group is None else -(-part.metadata.num_rows // group)
    assert part.metadata.num_row_groups == groups > (0 if group is None else 4)
    assert part.schema_arrow.names == ["id", "emb", "note", "score"]


@pytest.mark.slow
def test_dask_runner_merges_the_same_bytes_as_the_in_order_writer(inputs, tmp_path):
    from dask.distributed import LocalCluster

    ordered, _ = inputs
    assert _run(ordered, str(tmp_path / "fnapi" / "rel"), "--shards", "3")["writer"] == "in_order"
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster:  # fmt: skip
        dask = _run(ordered, str(tmp_path / "dask" / "rel"), "--shards", "3", "--runner=DaskRunner",
                    f"--dask_client_address={cluster.scheduler_address}")  # fmt: skip
    assert dask["writer"] == "merge"
    assert _files(str(tmp_path / "fnapi" / "rel")) == _files(str(tmp_path / "dask" / "rel"))


def _batch(ids):
    x = np.ones((len(ids), 4), np.float32)
    return pa.RecordBatch.from_arrays(
        [pa.array(ids, pa.int64()), embedding_array(x), embedding_array(x * 0.5 + 1)],
        names=["id", "emb", "src"],
    )


@pytest.mark.parametrize("second", [[3, 9], [2, 11], [6, 7, 7]], ids=["back", "repeat", "dup"])
def test_rows_out_of_order_are_refused_and_leave_no_part(tmp_path, second):
    schema = pa.schema([("id", pa.int64()), ("emb", pa.list_(pa.float32(), 4))])
    with pytest.raises(ReleaseError, match="out of id order"):  # noqa: PT012
        with InOrderWriter(str(tmp_path), id_col="id", emb_col="emb", num_shards=2,
                           schema=schema, verify_col="src") as w:  # fmt: skip
            w.add(_batch([0, 1, 2, 5]), None)
            w.add(_batch(second), None)
    assert os.listdir(tmp_path) == []


def test_rows_in_order_make_every_part_and_sidecar(tmp_path):
    schema = pa.schema([("id", pa.int64()), ("emb", pa.list_(pa.float32(), 4))])
    with InOrderWriter(str(tmp_path), id_col="id", emb_col="emb", num_shards=3, schema=schema,
                       verify_col="src") as w:  # fmt: skip
        w.add(_batch([0, 1, 2, 5]), None)
        w.add(_batch([6, 9]), None)
    names = sorted(os.listdir(tmp_path))
    assert names == [f"_part-0000{s}.json" for s in range(3)] + [
        f"part-0000{s}-of-00003.parquet" for s in range(3)]  # fmt: skip
    ids = pq.read_table(str(tmp_path), columns=["id"]).column("id").to_pylist()
    assert sorted(ids) == [0, 1, 2, 5, 6, 9]


def _ids_file(path, ids, row_group):
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64())}), path, row_group_size=row_group)
    return str(path)


def test_the_id_index_knows_whether_the_read_order_is_ascending(tmp_path):
    a = _ids_file(tmp_path / "a.parquet", range(0, 50), 20)
    b = _ids_file(tmp_path / "b.parquet", range(50, 90), 20)
    back = _ids_file(tmp_path / "c.parquet", [*range(100, 110), 95, *range(111, 130)], 20)
    assert build_id_index([a, b], "id", 2, str(tmp_path / "i1")).in_order
    assert not build_id_index([b, a], "id", 2, str(tmp_path / "i2")).in_order  # files swapped
    assert not build_id_index([a, back], "id", 2, str(tmp_path / "i3")).in_order
    strings = tmp_path / "s.parquet"
    pq.write_table(pa.table({"id": ["a", "b", "c"]}), strings)
    assert not build_id_index([str(strings)], "id", 1, str(tmp_path / "i4")).in_order
    dup = _ids_file(tmp_path / "d.parquet", [0, 1, 2, 2, 3], 2)
    with pytest.raises(InvalidValueError, match="duplicate id 2"):
        build_id_index([dup], "id", 1, str(tmp_path / "i5"))
