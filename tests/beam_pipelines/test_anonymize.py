"""The anonymize job end to end, in-process (a Python stand-in model) and on real Triton."""

from __future__ import annotations

import glob
import json
import os

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from beam_pipelines import anonymize
from mass.errors import QuarantineThresholdError, ReleaseError, ServingError
from mass.serving import free_port
from mass.testing.stand_ins import Bypass, NumpyModifier, write_embeddings
from transforms.inference.function import FunctionModelHandler

INFO = {
    "name": "np",
    "version": 3,
    "sha256": "abc",
    "method": "test",
    "suppress": ["digit"],
    "preserve": [],
    "config_hash": "h",
    "dim": 16,
}


def _handler(load=None):
    return FunctionModelHandler(
        load or NumpyModifier(), output_dim=16, keep_input_as=anonymize.INPUT_COPY
    )


def _run(src, out, *flags, load=None, audit=False):
    """The job with the stand-in model; unaudited unless ``audit`` (the gate has its own
    tests in test_publication_gate.py)."""
    argv = ["--input", src, "--output", out, "--model", "np", *flags]
    argv += [] if audit else ["--no-audit"]
    return anonymize.run(argv, model_handler=_handler(load), model_info=INFO)


def _files(out):
    return {
        os.path.basename(f): open(f, "rb").read()
        for f in sorted(glob.glob(os.path.join(out, "*.parquet")))
    }


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("in") / "emb.parquet")
    write_embeddings(path, rows=1000, dim=16, row_group=300)
    return path


def test_release_keeps_ids_drops_labels_and_records_provenance(src, tmp_path):
    out = str(tmp_path / "rel")
    summary = _run(src, out, "--shards", "2", "--batch-rows", "128")
    assert summary["rows_in"] == summary["rows_out"] == 1000 and summary["quarantined"] == 0
    table = pq.read_table(out)
    assert table.column_names == ["id", "emb"]  # digit is not allow-listed
    assert sorted(table.column("id").to_pylist()) == list(range(1000))
    meta = table.schema.metadata
    assert meta[b"mass.model"] == b"np" and json.loads(meta[b"mass.suppress"]) == ["digit"]
    assert sorted(_files(out)) == ["part-00000-of-00002.parquet", "part-00001-of-00002.parquet"]


def test_rerun_is_byte_identical_whatever_the_batch_size(src, tmp_path):
    _run(src, str(tmp_path / "a"), "--shards", "3", "--batch-rows", "100")
    _run(src, str(tmp_path / "b"), "--shards", "3", "--batch-rows", "1000")
    assert _files(str(tmp_path / "a")) == _files(str(tmp_path / "b"))


def test_a_bypassed_model_is_detected_and_the_previous_release_kept(src, tmp_path):
    out = str(tmp_path / "rel")
    _run(src, out)
    before = _files(out)
    with pytest.raises(ReleaseError, match="equal their input embedding"):
        _run(src, out, load=Bypass())
    assert _files(out) == before
    assert sorted(os.listdir(tmp_path)) == ["rel", "rel_quarantine"]  # no staging left


def test_a_suppressed_label_is_not_released_unless_forced(src, tmp_path):
    with pytest.raises(ReleaseError, match="'digit', a suppressed attribute"):
        _run(src, str(tmp_path / "r"), "--allow-columns", "digit")
    assert not os.path.exists(tmp_path / "r")
    _run(src, str(tmp_path / "r"), "--allow-columns", "digit", "--force-allow")
    table = pq.read_table(str(tmp_path / "r"))
    assert table.column_names == ["id", "emb", "digit"]
    assert json.loads(table.schema.metadata[b"mass.forced_columns"]) == ["digit"]


def test_quarantine_over_threshold_publishes_nothing(tmp_path):
    src = str(tmp_path / "bad.parquet")
    write_embeddings(src, rows=300, dim=16, nan_rows=(3, 100), zero_rows=(7,))
    out = str(tmp_path / "rel")
    with pytest.raises(QuarantineThresholdError, match="3 rows quarantined"):
        _run(src, out, "--max-quarantined", "2")
    assert not os.path.exists(out)
    q = pq.read_table(out + "_quarantine").sort_by("id")
    assert q.column("id").to_pylist() == [3, 7, 100]
    assert q.column("reason").to_pylist() == ["non-finite", "zero-vector", "non-finite"]
    summary = _run(src, out, "--max-quarantined", "3")
    assert (summary["rows_out"], summary["quarantined"]) == (297, 3)
    assert 7 not in pq.read_table(out).column("id").to_pylist()


def test_unreachable_server_fails_before_reading_data(src, tmp_path):
    out = str(tmp_path / "rel")
    with pytest.raises(ServingError, match="unreachable"):
        anonymize.run(
            [
                "--input",
                src,
                "--output",
                out,
                "--model",
                "m",
                "--repository",
                str(tmp_path),
                "--triton-url",
                f"127.0.0.1:{free_port()}",
            ]
        )
    assert not os.path.exists(out)


@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batch_rows=st.integers(1, 700), shards=st.integers(1, 5), rows=st.integers(1, 400))
def test_property_every_row_out_once_and_modified(tmp_path, batch_rows, shards, rows):
    case = tmp_path / f"{batch_rows}-{shards}-{rows}"
    case.mkdir(exist_ok=True)
    src = str(case / "in.parquet")
    table = write_embeddings(src, rows=rows, dim=16, row_group=97, seed=rows)
    out = str(case / "out")
    summary = _run(src, out, "--shards", str(shards), "--batch-rows", str(batch_rows))
    rel = pq.read_table(out)
    assert summary["rows_out"] == rel.num_rows == rows
    assert len(glob.glob(os.path.join(out, "*.parquet"))) == shards
    rel = rel.sort_by("id")
    assert rel.column("id").equals(table.column("id"))
    x = np.stack(table.column("emb").to_numpy(zero_copy_only=False))
    y = np.stack(rel.column("emb").to_numpy(zero_copy_only=False))
    assert np.all(np.any(x != y, axis=1))
