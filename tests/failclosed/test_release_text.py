"""What `_RELEASE.md` and `_release.json` say protects a release is true of that release
(mass.report.protection): a deterministic modifier's release never claims "noise keyed by the
data owner's secret key", with or without a key on the command line; a stochastic keyed one
does."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beam_pipelines import anonymize
from mass.embeddings import embedding_array
from mass.testing.stand_ins import PinDim
from transforms.inference.function import FunctionModelHandler

DIM, ROWS = 8, 200
KEYED = "noise keyed by the data owner's secret key"


PIN = PinDim(0, 5.0)


@pytest.mark.parametrize(
    ("modifier", "stochastic", "key", "says"),
    [
        ({"kind": "sliced_repair", "spec": {}}, False, True, "deterministic and draws no noise"),
        ({"kind": "affine", "spec": {}}, False, False, "deterministic and draws no noise"),
        ({"kind": "gaussian_noise", "spec": {"sigma": 0.1}}, True, True, KEYED),
    ],
    ids=["deterministic with a key", "deterministic", "stochastic keyed"],
)
def test_the_release_says_what_protects_it(tmp_path, key_file_of, modifier, stochastic, key, says):
    src, out = tmp_path / "in.parquet", tmp_path / "rel"
    rng = np.random.default_rng(0)
    pq.write_table(pa.table({"id": pa.array(np.arange(ROWS)),
                             "emb": embedding_array(rng.normal(size=(ROWS, DIM)).astype(np.float32)),
                             "g": pa.array(rng.integers(0, 2, ROWS))}), str(src))  # fmt: skip
    info = {"name": "m", "version": 1, "sha256": "abc", "method": "test", "suppress": ["g"],
            "preserve": [], "config_hash": "h", "dim": DIM, "stochastic": stochastic,
            "modifier": modifier}  # fmt: skip
    argv = ["--input", str(src), "--output", str(out), "--model", "m", "--no-audit"]
    if key:
        secret = hashlib.sha256(b"test_release_text").digest()
        argv += ["--noise-key-file", key_file_of(tmp_path / "owner.key", secret)]
    handler = FunctionModelHandler(PIN, output_dim=DIM, keep_input_as=anonymize.INPUT_COPY)
    anonymize.run(argv, model_handler=handler, model_info=info)
    text = (out / "_RELEASE.md").read_text()
    sheet = json.loads((out / "_release.json").read_text())["datasheet"]
    assert says in text and says in " ".join(sheet["threat_model"])
    if not stochastic:
        assert KEYED not in text and "secret key" not in " ".join(sheet["threat_model"][:1])
