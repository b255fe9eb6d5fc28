"""Bounded-memory train sampling and audit streaming read through mass.fs: an S3-compatible
store (moto's server on 127.0.0.1) gives the same rows and verdicts as local disk."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from mass import fs
from mass.calibrate.sampling import load_training
from mass.synthetic import block_attributes, make_synthetic, to_table
from mass.training import check_columns
from tests.mass.audit.test_audit import D, N, _audit, _drop_s, _write
from transforms.services import moto_s3

BUCKET = "mass-stream"


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    with moto_s3(str(tmp_path_factory.mktemp("moto")), BUCKET) as env:
        yield env


def _upload(local, uri: str) -> str:
    fs.write_bytes(uri, local.read_bytes())
    return uri


def test_train_sample_streams_from_the_store(s3, tmp_path):
    ds = make_synthetic(n=3000, dim=8, s_classes=3, u_classes=2, seed=4)
    local = tmp_path / "big.parquet"
    pq.write_table(to_table(ds), str(local), row_group_size=500)
    _upload(local, f"s3://{BUCKET}/train/big.parquet")
    kw = dict(id_col="id", emb_col="emb", label_cols=["s", "u"], max_rows=600, seed=1)
    remote, note = load_training(f"s3://{BUCKET}/train/", **kw)
    here, _ = load_training(str(local), **kw)
    assert note["input_rows"] == 3000 and 450 < len(remote) < 750
    assert np.array_equal(remote.ids.to_numpy(), here.ids.to_numpy())
    assert np.array_equal(remote.x, here.x)
    check_columns(f"s3://{BUCKET}/train/", ["s"], ["u"])  # reads the schema from the store
    with pytest.raises(Exception, match="nope"):
        check_columns(f"s3://{BUCKET}/train/", ["nope"], [])


def test_audit_streams_a_release_from_the_store(s3, tmp_path):
    data = block_attributes(N, D)
    release, labels = _write(tmp_path, data, x=_drop_s(data["x"]), parts=2)
    for part in sorted((tmp_path / "release").iterdir()):
        _upload(part, f"s3://{BUCKET}/rel/{part.name}")
    _upload(tmp_path / "labels.parquet", f"s3://{BUCKET}/labels.parquet")
    here = _audit(tmp_path, release, labels, partition_rows=150)
    remote = _audit(tmp_path, f"s3://{BUCKET}/rel/", f"s3://{BUCKET}/labels.parquet",
                    partition_rows=150)  # fmt: skip
    assert remote.success == here.success and remote.counts == here.counts
    assert [r.accuracies for r in remote.reports] == [r.accuracies for r in here.reports]
