"""The audit streams a release through mass.fs: on an S3-compatible store (moto's server on
127.0.0.1, the ``s3`` fixture) it gives the same verdicts as on local disk. (Train sampling
from a store: tests/mass/calibrate/test_sampling_store.py.)"""

from __future__ import annotations

import pytest

from mass import fs
from mass.synthetic import block_attributes
from tests.mass.audit.test_audit import D, N, _audit, _drop_s, _write

BUCKET = "s3://mass-test"


def _upload(local, uri: str) -> str:
    fs.write_bytes(uri, local.read_bytes())
    return uri


@pytest.mark.slow
def test_audit_streams_a_release_from_the_store(s3, tmp_path):
    data = block_attributes(N, D)
    release, labels = _write(tmp_path, data, x=_drop_s(data["x"]), parts=2)
    for part in sorted((tmp_path / "release").iterdir()):
        _upload(part, f"{BUCKET}/rel/{part.name}")
    _upload(tmp_path / "labels.parquet", f"{BUCKET}/labels.parquet")
    here = _audit(tmp_path, release, labels, partition_rows=150)
    remote = _audit(tmp_path, f"{BUCKET}/rel/", f"{BUCKET}/labels.parquet", partition_rows=150)
    assert remote.success == here.success and remote.counts == here.counts
    assert [r.accuracies for r in remote.reports] == [r.accuracies for r in here.reports]
