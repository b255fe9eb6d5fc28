"""Every output path the job writes is proven writable before any work
(mass.release.writable): ``--report /proc/self/x`` (or an --output/--quarantine there) fails
up front naming the flag, with no quarantine published and no traceback after the job."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beam_pipelines import anonymize
from mass.embeddings import embedding_array
from mass.errors import OutputPathError
from mass.testing.stand_ins import PinDim
from transforms.inference.function import FunctionModelHandler

DIM, ROWS = 8, 200
INFO = {"name": "m", "version": 1, "sha256": "abc", "method": "test", "suppress": ["g"],
        "preserve": [], "config_hash": "h", "dim": DIM}  # fmt: skip


PIN = PinDim(0, 5.0)


@pytest.fixture
def src(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(ROWS, DIM)).astype(np.float32)
    x[5] = np.nan  # one bad row: a quarantine the old job published before the report failed
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": pa.array(np.arange(ROWS)), "emb": embedding_array(x),
                             "g": pa.array(rng.integers(0, 2, ROWS))}), str(path))  # fmt: skip
    return str(path)


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--report", "/proc/self/x"), ("--report", "/proc/self/x/y"),
     ("--output", "/proc/self/rel"), ("--quarantine", "/proc/self/q")],
)  # fmt: skip
def test_an_unwritable_output_path_fails_before_any_work(src, tmp_path, flag, value):
    (tmp_path / "quick.yaml").write_text("audit:\n  folds: 3\n  curve: false\n"
                                         "  gate_key_compromised: false\n")  # fmt: skip
    out = tmp_path / "rel"
    argv = ["--input", src, "--output", str(out), "--model", "m",
            "--policy", str(tmp_path / "quick.yaml"), "--max-quarantined", "5",
            "--report", str(tmp_path / "report"), flag, value]  # fmt: skip
    handler = FunctionModelHandler(PIN, output_dim=DIM, keep_input_as=anonymize.INPUT_COPY)
    with pytest.raises(OutputPathError, match=rf"^{flag} {value}: cannot write under /proc/self"):
        anonymize.run(argv, model_handler=handler, model_info=INFO)
    assert sorted(os.listdir(tmp_path)) == ["in.parquet", "quick.yaml"]  # no release, quarantine
