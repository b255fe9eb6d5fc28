"""transforms.api: Anonymize and AuditGate in a user's own pipeline, through a real tritonserver.

The rows come from JSONL (not Parquet); the model is a Suppressor fitted and exported by the
Python API; the gate runs the publication audit before the user's sink.
"""

from __future__ import annotations

import json
import os

import apache_beam as beam
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from mass.api import Suppressor
from mass.audit import policy_from_dict
from mass.errors import ConfigError
from mass.synthetic import block_attributes
from transforms.api import Anonymize, AuditGate

pytestmark = pytest.mark.triton
N, D = 3000, 24
HELD = slice(1500, N)  # fitted on the first half, released and audited on the second
POLICY = policy_from_dict({"families": ["logreg", "knn"], "folds": 3})


@pytest.fixture(scope="module")
def data():
    return block_attributes(N, D, seed=5)


def _erase_run(run) -> None:
    """RUN/modifier.pt: a hand-set modifier that zeroes dims 0-7, where s lives."""
    import torch

    from mass.modifiers import save_modifier
    from mass.modifiers.affine import AffineModifier, AffineSpec

    run.mkdir()
    keep = torch.ones(D)
    keep[:8] = 0.0
    erase = AffineModifier(AffineSpec(D)).set(torch.diag(keep), torch.zeros(D))
    save_modifier(erase, str(run / "modifier.pt"), method="hand-set", suppress=["s"],
                  preserve=["r"], config_hash="h")  # fmt: skip


@pytest.fixture(scope="module")
def models(data, tmp_path_factory):
    """A repository with "erase" (hand-set: zeroes dims 0-7, where s lives) and "noise" (a
    Suppressor fitted with Gaussian release noise, which leaves s readable)."""
    from mass.serving.export import export_modifier

    base = tmp_path_factory.mktemp("api")
    repo, run = base / "repo", base / "run"
    _erase_run(run)
    export_modifier(run, repo, "erase")
    sup = Suppressor(suppress="s", preserve="r", method="gaussian")
    sup.fit(data["x"][:1500], {"s": data["s"][:1500], "r": data["r"][:1500]})
    sup.export(str(repo), "noise")
    return repo, {"noise": sup}


@pytest.fixture(scope="module")
def server(models, triton_server_factory):
    return triton_server_factory(models[0])


@pytest.fixture(scope="module")
def jsonl(data, tmp_path_factory):
    """The held-out rows as JSON lines (id, emb, s, r), one row with a 5-d embedding."""
    path = tmp_path_factory.mktemp("jsonl") / "rows.jsonl"
    with open(path, "w") as f:
        for i in range(HELD.start, N):
            row = {"id": int(data["id"][i]), "emb": data["x"][i].tolist(),
                   "s": int(data["s"][i]), "r": int(data["r"][i])}  # fmt: skip
            f.write(json.dumps(row) + "\n")
        f.write(json.dumps({"id": -1, "emb": [0.5] * 5, "s": 0, "r": 0}) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def labels(data, tmp_path_factory):
    path = tmp_path_factory.mktemp("labels") / "heldout.parquet"
    pd.DataFrame({"id": data["id"][HELD], "emb": list(data["x"][HELD].astype(np.float32)),
                  "s": data["s"][HELD], "r": data["r"][HELD]}).to_parquet(path)  # fmt: skip
    return str(path)


def _read(p, path):
    return p | "Read" >> beam.io.ReadFromText(path) | "Parse" >> beam.Map(json.loads)


def test_anonymize_dicts_from_jsonl_through_triton(models, server, jsonl, data):
    """Privatized rows are the Python API's transform of the same rows (same key, ids,
    model), carry only id and emb, and the bad row goes to the dead-letter output."""
    repo, fitted = models
    expected = fitted["noise"].transform(data["x"][HELD], ids=data["id"][HELD])
    want = dict(zip(data["id"][HELD].tolist(), expected, strict=True))

    def check(rows):
        assert len(rows) == len(want)
        for row in rows:
            assert set(row) == {"id", "emb"}  # the labels never pass
            np.testing.assert_allclose(row["emb"], want[row["id"]], atol=1e-5)

    with TestPipeline() as p:
        out = _read(p, jsonl) | Anonymize("noise", repository=str(repo),
                                          triton_url=server.grpc_url)  # fmt: skip
        assert_that(out.rows, check)
        assert_that(out.quarantined | beam.Map(lambda r: (r["id"], r["reason"])),
                    equal_to([(-1, "wrong-dimension")]), label="DeadLetters")  # fmt: skip


def test_the_gate_passes_the_rows_of_a_release_that_holds(models, server, jsonl, labels,
                                                          tmp_path):  # fmt: skip
    repo, _ = models
    anon = Anonymize("erase", repository=str(repo), triton_url=server.grpc_url)
    schema = pa.schema([("id", pa.int64()), ("emb", pa.list_(pa.float32()))])
    with TestPipeline() as p:
        rows = (_read(p, jsonl) | anon).rows
        gated = rows | AuditGate(labels, POLICY, anonymize=anon,
                                 report_dir=str(tmp_path / "report"))  # fmt: skip
        _ = gated | beam.io.WriteToParquet(str(tmp_path / "out" / "part"), schema)
    written = pd.read_parquet(tmp_path / "out")
    assert len(written) == N - HELD.start
    assert (tmp_path / "report" / "report.html").exists()


def test_a_failing_audit_fails_the_pipeline_before_its_sink_writes(models, server, jsonl,
                                                                   labels, tmp_path):  # fmt: skip
    repo, _ = models
    anon = Anonymize("noise", repository=str(repo), triton_url=server.grpc_url)
    schema = pa.schema([("id", pa.int64()), ("emb", pa.list_(pa.float32()))])
    with pytest.raises(Exception, match="AuditGate: the audit of"):
        with TestPipeline() as p:
            rows = (_read(p, jsonl) | anon).rows
            gated = rows | AuditGate(labels, POLICY, anonymize=anon)
            _ = gated | beam.io.WriteToParquet(str(tmp_path / "out" / "part"), schema)
    written = [f for _, _, fs in os.walk(tmp_path / "out") for f in fs] if (
        tmp_path / "out").exists() else []  # fmt: skip
    assert not any(f.startswith("part") for f in written), written


def test_anonymize_refuses_a_stochastic_model_without_the_key(models, monkeypatch):
    repo, _ = models
    monkeypatch.delenv("MASS_NOISE_KEY_FILE")
    with pytest.raises(ConfigError, match="noise_key_file="):
        Anonymize("noise", repository=str(repo), triton_url="127.0.0.1:1")


def test_anonymize_refuses_the_newest_when_a_newer_signed_version_was_removed(tmp_path):
    """Rollback, as `mass anonymize` refuses it (tests/failclosed/test_rollback.py; one check,
    mass.serving.staging.checked_export): with version 2 deleted, "the newest" on disk is
    version 1 and the signed record says 2; naming version 1 serves it on purpose."""
    import shutil

    from mass.errors import ModelRollbackError
    from mass.serving.export import export_modifier

    repo, run = tmp_path / "repo", tmp_path / "run"
    _erase_run(run)
    export_modifier(run, repo, "erase")
    export_modifier(run, repo, "erase")
    shutil.rmtree(repo / "erase" / "2")
    with pytest.raises(ModelRollbackError, match="newest signed export is version 2"):
        Anonymize("erase", repository=str(repo), triton_url="127.0.0.1:1")
    assert Anonymize("erase", repository=str(repo), triton_url="127.0.0.1:1",
                     version="1").info["version"] == 1  # fmt: skip


def test_anonymize_refuses_a_row_without_an_id(models, server, data):
    """A row with a null id has no seed and no join: refused naming the column and its row in
    the batch, as `mass anonymize` refuses one (before: it passed to the gate, which named a
    private file it had written)."""
    from mass.errors import InvalidValueError

    repo, _ = models
    rows = [{"id": int(data["id"][i]), "emb": data["x"][i].tolist()} for i in range(5)]
    rows[3]["id"] = None
    with pytest.raises(InvalidValueError, match=r"id column 'id' is null in row \d+ of a batch"):
        with TestPipeline() as p:
            _ = p | beam.Create(rows) | Anonymize("erase", repository=str(repo),
                                                  triton_url=server.grpc_url)  # fmt: skip
