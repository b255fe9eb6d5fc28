"""_RELEASE.md + _release.json beside a release's parts; a publisher's manifest is kept."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from mass.errors import ReleaseError
from mass.report import write_datasheet

AUDIT = {
    "pass": True,
    "attributes": {
        "s": {
            "role": "suppressed",
            "majority": 0.38,
            "floor": 0.36,
            "baseline": 0.38,
            "worst": 0.37,
            "limit": 0.43,
            "pass": True,
        },
        "r": {"role": "preserved", "retention": 1.0, "worst": 1.0, "pass": True},
    },  # fmt: skip
    "failed_expectations": [],
    "lineage": {"input": "data/features/test", "quarantined": 0},
}


@pytest.fixture
def release(tmp_path, synthetic_release):
    rel, _labels, _params = synthetic_release(tmp_path)
    meta = pq.read_schema(next(rel.glob("*.parquet"))).metadata
    meta = {**meta, b"mass.noise_key_fingerprint": b"abcd1234",
            b"mass.modifier": b'{"kind": "mass", "spec": {"dim": 24, "noise_dim": 4}}'}  # fmt: skip
    return rel, meta


def test_datasheet_says_what_the_release_is_and_how_to_cite_it(release):
    rel, meta = release
    write_datasheet(
        str(rel),
        metadata=meta,
        audit=AUDIT,
        report_path="reports/audit/report.html",
        name="release",
    )
    md = (rel / "_RELEASE.md").read_text()
    for needle in ("mass_modifier version 1", "1600 rows in 1 Parquet part", "columns id, emb",
                   "Suppressed: s", "Preserved: r", "Verdict: **PASSED**",
                   "reports/audit/report.html", "limit 0.430", "## Threat model", "retrains any classifier",
                   "owner's secret key", "git rev-parse HEAD", "dvc get <repo-url> release --rev", "abcd1234"):  # fmt: skip
        assert needle in md, needle
    sheet = json.loads((rel / "_release.json").read_text())["datasheet"]
    assert sheet["suppressed"] == ["s"] and sheet["preserved"] == ["r"]
    assert sheet["audit"]["verdict"] == "passed"
    assert sheet["audit"]["attributes"]["s"]["limit"] == 0.43
    assert sheet["provenance"]["modifier"] == {"kind": "mass", "spec": {"dim": 24, "noise_dim": 4}}
    assert sheet["lineage"]["input"] == "data/features/test"
    assert sheet["embedding"]["rows"] == 1600 and len(sheet["threat_model"]) == 2


def test_a_release_that_keeps_only_the_preserved_directions_says_so(release):
    rel, meta = release
    plain = {**meta, b"mass.method": b"mass"}
    write_datasheet(str(rel), metadata=plain, audit=AUDIT, report_path=None)
    assert "not useful for tasks beyond" not in (rel / "_RELEASE.md").read_text()
    write_datasheet(str(rel), metadata={**meta, b"mass.method": b"leace_project"}, audit=AUDIT,
                    report_path=None)  # fmt: skip
    md = (rel / "_RELEASE.md").read_text()
    assert "(method leace_project)" in md and "not useful for tasks beyond the preserved" in md


def test_an_existing_release_json_keeps_its_fields(release):
    rel, meta = release
    manifest = {"published": "2026-11-23T10:00:00Z", "parts": {"part-0.parquet": "sha"}}
    (rel / "_release.json").write_text(json.dumps(manifest))
    write_datasheet(str(rel), metadata=meta, audit=None, report_path=None)
    out = json.loads((rel / "_release.json").read_text())
    assert {k: out[k] for k in manifest} == manifest
    assert out["datasheet"]["audit"]["verdict"] == "not audited"
    assert "Verdict: **NOT AUDITED**" in (rel / "_RELEASE.md").read_text()


def test_unreadable_manifest_or_missing_directory_is_a_release_error(release, tmp_path):
    rel, meta = release
    (rel / "_release.json").write_text("{not json")
    with pytest.raises(ReleaseError, match="_release.json: not readable JSON"):
        write_datasheet(str(rel), metadata=meta, audit=AUDIT, report_path=None)
    assert (rel / "_release.json").read_text() == "{not json"  # left as found
    with pytest.raises(ReleaseError, match="not a release directory"):
        write_datasheet(str(tmp_path / "nowhere"), metadata=meta, audit=None, report_path=None)


def test_writing_a_datasheet_does_not_load_the_attackers():
    """The anonymize job writes the datasheet of every release: importing it must not pull in
    scikit-learn (mass.metrics' attackers), ~1 CPU-s of the job's time at 200k rows."""
    import subprocess
    import sys

    code = ("import sys, mass.report.datasheet as d; d.write_datasheet; "
            "sys.exit('sklearn' in sys.modules or 'matplotlib' in sys.modules)")  # fmt: skip
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
