"""A vacuous policy's refusal names the release the user asked for, never the private staging
directory that is removed as the job ends (beam_pipelines.gate)."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beam_pipelines import anonymize
from mass.embeddings import embedding_array
from mass.errors import VacuousPolicyError
from mass.testing.stand_ins import PinDim
from transforms.inference.function import FunctionModelHandler

DIM, ROWS = 8, 400


PIN = PinDim(0, 5.0)


def test_a_vacuous_policy_names_the_release_not_the_staging(tmp_path):
    rng = np.random.default_rng(2)
    g = rng.integers(0, 2, ROWS)
    x = 0.3 * rng.normal(size=(ROWS, DIM))
    x[:, 1] += 3.0 * g
    src, out = tmp_path / "in.parquet", tmp_path / "release"
    pq.write_table(pa.table({"id": pa.array(rng.permutation(ROWS)), "g": pa.array(g),
                             "emb": embedding_array(x.astype(np.float32))}), str(src))  # fmt: skip
    (tmp_path / "policy.yaml").write_text(
        "audit:\n  folds: 3\n  curve: false\n  gate_key_compromised: false\n"
        "  attacker_margin: 0.9\n  frozen_margin: 0.9\n"
    )
    info = {"name": "v", "version": 1, "sha256": "abc", "method": "test", "dim": DIM,
            "suppress": ["g"], "preserve": [], "config_hash": "h"}  # fmt: skip
    handler = FunctionModelHandler(PIN, output_dim=DIM, keep_input_as=anonymize.INPUT_COPY)
    argv = ["--input", str(src), "--output", str(out), "--model", "v",
            "--policy", str(tmp_path / "policy.yaml"), "--report", str(tmp_path / "report")]  # fmt: skip
    with pytest.raises(VacuousPolicyError) as err:
        anonymize.run(argv, model_handler=handler, model_info=info)
    msg = str(err.value)
    assert msg.startswith(f"{out} (staged, not published): the audit policy cannot fail")
    named = [w.strip(":;,()") for w in msg.split() if w.startswith(str(tmp_path))]
    assert all(os.path.exists(p) or p == str(out) for p in named), named  # no removed path
    assert not out.exists()
