"""Bounded-memory train sampling reads through mass.fs: an S3-compatible store (moto's server
on 127.0.0.1, the ``s3`` fixture) gives the same rows as local disk. (The audit's streaming
from a store: tests/mass/audit/test_stream_store.py.)"""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from mass import fs
from mass.calibrate.sampling import load_training
from mass.synthetic import make_synthetic, to_table
from mass.training import check_columns

TRAIN = "s3://mass-test/train/"


def test_train_sample_streams_from_the_store(s3, tmp_path):
    ds = make_synthetic(n=3000, dim=8, s_classes=3, u_classes=2, seed=4)
    local = tmp_path / "big.parquet"
    pq.write_table(to_table(ds), str(local), row_group_size=500)
    fs.write_bytes(f"{TRAIN}big.parquet", local.read_bytes())
    kw = dict(id_col="id", emb_col="emb", label_cols=["s", "u"], max_rows=600, seed=1)
    remote, note = load_training(TRAIN, **kw)
    here, _ = load_training(str(local), **kw)
    assert note["input_rows"] == 3000 and 450 < len(remote) < 750
    assert np.array_equal(remote.ids.to_numpy(), here.ids.to_numpy())
    assert np.array_equal(remote.x, here.x)
    check_columns(TRAIN, ["s"], ["u"])  # reads the schema from the store
    with pytest.raises(Exception, match="nope"):
        check_columns(TRAIN, ["nope"], [])
