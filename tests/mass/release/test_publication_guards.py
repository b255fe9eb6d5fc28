"""publish_release's gate and manifest driven directly (the job's tests reach them only through
a full Beam run): a gate that refuses publishes nothing and keeps the previous release; the
manifest records the gate's verdict, and an ungated release as unaudited. Kills the mutants
publish-gate-skipped, publish-no-manifest and manifest-claims-audited."""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mass import formats as release_format
from mass.embeddings import embedding_array
from mass.errors import AuditFailedError
from mass.formats import shard_path
from mass.release import columns as release_columns
from mass.release import publish as R

INFO = {"name": "m", "version": 1, "sha256": "s", "method": "mass", "suppress": ["colour"],
        "preserve": ["digit"], "config_hash": "h"}  # fmt: skip
IDS = pa.array([0, 1, 2], pa.int64())


def _stage(tmp_path):
    stage = tmp_path / "OUT.tmp-x"
    stage.mkdir()
    emb = np.array([[0.6, 0.8], [0.8, 0.6], [0.0, 1.0]], np.float32)
    table = pa.table({"id": IDS, "emb": embedding_array(emb)}).replace_schema_metadata(
        release_columns.release_metadata(INFO)
    )
    pq.write_table(table, shard_path(str(stage), 0, 1))
    return str(stage), table.schema


def _publish(tmp_path, out, gate) -> None:
    stage, schema = _stage(tmp_path)
    R.publish_release(stage, str(out), expected_ids=IDS, id_col="id", emb_col="emb",
                      allow_columns=[], num_shards=1, schema=schema, gate=gate,
                      manifest=True)  # fmt: skip


def test_a_refusing_gate_sees_the_staged_release_and_nothing_is_published(tmp_path):
    out = tmp_path / "OUT"
    out.mkdir()
    (out / "previous.txt").write_text("v1")
    seen = []

    def gate(staged):
        seen.append(sorted(os.listdir(staged)))
        raise AuditFailedError("audit failed")

    with pytest.raises(AuditFailedError, match="audit failed"):
        _publish(tmp_path, out, gate)
    assert seen == [[os.path.basename(shard_path("", 0, 1))]]  # the complete staged rows
    assert sorted(os.listdir(out)) == ["previous.txt"]
    assert not os.path.exists(tmp_path / "OUT.tmp-x")


def test_the_manifest_records_the_gates_verdict_and_marks_the_release_ours(tmp_path):
    report = tmp_path / "report" / "audit.json"
    report.parent.mkdir()
    report.write_text(json.dumps({"pass": True, "attributes": {}}))
    verdict = {"verdict": "pass", "report": str(report), "policy": "default"}
    out = tmp_path / "OUT"
    _publish(tmp_path, out, lambda staged: verdict)
    doc = json.loads((out / release_format.RELEASE_MARKER).read_text())
    assert doc["audited"] is True and doc["audit"] == verdict and doc["rows"] == 3
    assert release_format.holds_marker(str(out), release_format.RELEASE_MARKER)


def test_an_ungated_release_is_recorded_as_unaudited(tmp_path):
    out = tmp_path / "OUT"
    _publish(tmp_path, out, None)
    doc = json.loads((out / release_format.RELEASE_MARKER).read_text())
    assert doc["audited"] is False and doc["audit"] is None
    assert release_format.holds_marker(str(out), release_format.RELEASE_MARKER)
