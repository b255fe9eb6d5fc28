"""`mass audit` of a release whose ids are keyed pseudonyms (`mass anonymize
--pseudonymize-ids`), as the README's "Using your own Parquet" audits it later: the owner's
labels and --input carry the original ids, the release the pseudonyms. With the owner key the
audit pseudonymizes the labels' ids the way the job did and judges every row; without it, or
with another key, it refuses naming --noise-key-file (before, it matched 0 rows and failed
every expectation on a release that had passed its gate)."""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beam_pipelines import anonymize
from mass.cli import parse_command, run_command
from mass.embeddings import embedding_array
from mass.errors import ConfigError, SchemaError
from mass.keys import NOISE_KEY_ENV, SIGNING_KEY_ENV
from mass.testing.stand_ins import PinDim
from transforms.inference.function import FunctionModelHandler

DIM, ROWS = 16, 2000
INFO = {"name": "ids", "version": 1, "sha256": "abc", "method": "test",
        "suppress": ["gender"], "preserve": [], "config_hash": "h", "dim": DIM}  # fmt: skip
POLICY = "audit:\n  folds: 3\n  curve: false\n  gate_key_compromised: false\n"


@pytest.fixture(scope="module")
def released(tmp_path_factory, key_file_of):
    """A pseudonymous release of rows whose original ids are random int64 (the stand-in
    overwrites the gender dimension: the gate passes) and the owner's labels file."""
    d = tmp_path_factory.mktemp("pseudo")
    rng = np.random.default_rng(3)
    gender = rng.integers(0, 2, ROWS)
    x = 0.3 * rng.normal(size=(ROWS, DIM))
    x[:, 0] += 3.0 * gender
    ids = rng.choice(10**9, ROWS, replace=False).astype(np.int64)
    pq.write_table(pa.table({"id": ids, "emb": embedding_array(x.astype(np.float32)),
                             "gender": gender}), str(d / "labels.parquet"))  # fmt: skip
    (d / "quick.yaml").write_text(POLICY)
    key = key_file_of(d / "owner.key", hashlib.sha256(b"test_audit_pseudonyms").digest())
    handler = FunctionModelHandler(PinDim(0, 5.0), output_dim=DIM,
                                   keep_input_as=anonymize.INPUT_COPY)  # fmt: skip
    anonymize.run(["--input", str(d / "labels.parquet"), "--output", str(d / "release"),
                   "--model", "ids", "--policy", str(d / "quick.yaml"), "--report",
                   str(d / "gate"), "--pseudonymize-ids", "--noise-key-file", key],
                  model_handler=handler, model_info=INFO)  # fmt: skip
    released_ids = pq.read_table(str(d / "release")).column("id").to_pylist()
    assert len(released_ids) == ROWS and not set(released_ids) & set(ids.tolist())
    return d, key


def _audit(d, report: str, *key_flags: str) -> int:
    argv = ["audit", "--release", str(d / "release"), "--labels", str(d / "labels.parquet"),
            "--suppress", "gender", "--params", str(d / "quick.yaml"), "--report",
            str(d / report), "--no-chart", *key_flags]  # fmt: skip
    args, beam = parse_command(argv)
    return run_command(args, beam)


@pytest.fixture()
def no_ambient_key(monkeypatch):
    for env in (NOISE_KEY_ENV, SIGNING_KEY_ENV):
        monkeypatch.delenv(env, raising=False)
    monkeypatch.setenv("MASS_LOCAL_CONFIG", "")


@pytest.mark.slow
def test_the_owner_key_joins_the_original_labels_to_the_pseudonyms(released, no_ambient_key):
    d, key = released
    assert _audit(d, "later", "--noise-key-file", key) == 0
    audit = json.loads((d / "later" / "audit.json").read_text())
    assert audit["pass"] is True
    assert audit["rows"]["release"] == audit["rows"]["audited"] == ROWS, audit["rows"]
    # the private copy with the pseudonymized labels is gone
    tmp = os.path.dirname(os.path.realpath(os.environ.get("TMPDIR", "/tmp")) + "/x")
    assert not [n for n in os.listdir(tmp) if n.startswith("mass-audit-ids-")]


def test_the_key_is_found_as_the_job_finds_it(released, monkeypatch, no_ambient_key):
    d, key = released
    monkeypatch.setenv(NOISE_KEY_ENV, key)
    assert _audit(d, "by_env") == 0


def test_without_the_key_the_audit_names_the_flag_it_has(released, no_ambient_key):
    d, _ = released
    with pytest.raises(ConfigError, match="keyed pseudonyms .*pass --noise-key-file FILE"):
        _audit(d, "keyless")
    assert not (d / "keyless").exists()


def test_another_key_is_refused_not_matched_to_nothing(released, key_file_of, no_ambient_key):
    d, _ = released
    other = key_file_of(d / "other.key", hashlib.sha256(b"another owner").digest())
    with pytest.raises(ConfigError, match="pseudonymized under key [0-9a-f]{16}, not under"):
        _audit(d, "other", "--noise-key-file", other)


def test_an_error_names_the_users_labels_file_not_the_private_copy(released, no_ambient_key):
    d, key = released
    argv = ["audit", "--release", str(d / "release"), "--labels", str(d / "labels.parquet"),
            "--suppress", "nosuch", "--params", str(d / "quick.yaml"), "--report",
            str(d / "bad"), "--no-chart", "--noise-key-file", key]  # fmt: skip
    args, beam = parse_command(argv)
    with pytest.raises(SchemaError) as info:
        run_command(args, beam)
    assert str(info.value).startswith(f"{d / 'labels.parquet'} (id pseudonymized): no label "
                                      "column 'nosuch'")  # fmt: skip
    assert "mass-audit-ids-" not in str(info.value)
