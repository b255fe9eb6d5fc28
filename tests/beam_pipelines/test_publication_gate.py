"""The publication gate of `mass anonymize`: the STAGED release is audited before it is
published; a failing audit publishes nothing (a previous release stays byte-identical), the
report is written and the error names the attribute; without labels the job refuses unless
--no-audit, which the release records. Plus the cosine bypass invariant.

In-process (FunctionModelHandler stand-ins, real Beam, real GX audit), no server.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from beam_pipelines import anonymize
from mass.embeddings import embedding_array
from mass.errors import AuditFailedError, ConfigError, ReleaseError
from mass.formats import RELEASE_MARKER
from mass.testing.stand_ins import RandomRotation, ZeroDims
from transforms.inference.function import FunctionModelHandler

DIM, ROWS = 16, 2000  # the audit judges 95% upper bounds: 600 rows cannot pass a clean release
INFO = {"name": "gate", "version": 1, "sha256": "abc", "method": "test",
        "suppress": ["digit"], "preserve": ["colour"], "config_hash": "h", "dim": DIM}  # fmt: skip


def _unit(v):
    n = np.linalg.norm(v, axis=1, keepdims=True)
    return (v / np.where(n > 0, n, 1)).astype(np.float32)


# Drops the digit dimensions (0-4), keeps colour (5-7) and the rest: passes the audit.
ERASE = ZeroDims(range(5))
# A random rotation of the digit dimensions (0-4): far from the input, yet digit is read back
# perfectly by retrained attackers; colour (5-7) stays where a frozen reader looks for it.
ROTATE = RandomRotation(DIM, dims=range(5))


class Scale:
    """Returns the input times ``factor``: equal to it up to scale, a bypass."""

    def __init__(self, factor: float | None) -> None:
        self.factor = factor

    def __call__(self):
        def infer(t):
            x = np.asarray(t["EMBEDDING"], np.float32)
            return _unit(x) if self.factor is None else (x * np.float32(self.factor))

        return infer


def _write(path, *, rows=ROWS, seed=0, labels=True):
    """digit (5 classes) in dims 0-4, colour (3 classes) in dims 5-7, noise everywhere."""
    rng = np.random.default_rng(seed)
    digit, colour = rng.integers(0, 5, rows), rng.integers(0, 3, rows)
    x = 0.3 * rng.normal(size=(rows, DIM))
    x[np.arange(rows), digit] += 3.0
    x[np.arange(rows), 5 + colour] += 2.0
    cols = {"id": pa.array(np.arange(rows, dtype=np.int64)),
            "emb": embedding_array(x.astype(np.float32))}  # fmt: skip
    if labels:
        cols.update(digit=pa.array(digit), colour=pa.array(colour))
    pq.write_table(pa.table(cols), str(path))
    return str(path)


# The default audit fits 4 families x 10 folds x 3 learning-curve fractions per attribute.
# Tests about the gate's mechanics (what is published, staged, reported, read) run the same
# rule with 3 folds and no curve - a tenth of the fits; the first test runs the defaults.
QUICK = {"path": None}
# The stand-ins name no modifier (INFO has none): the release carries no mass.modifier, so its
# key-compromised view cannot be computed and the built-in policy refuses it (fail closed);
# the tests of the gate's mechanics turn that view off. The first test declares its modifier.
NO_KEY_VIEW = "  gate_key_compromised: false\n"


@pytest.fixture(scope="module", autouse=True)
def _quick_policy(tmp_path_factory):
    QUICK["path"] = tmp_path_factory.mktemp("policy") / "quick.yaml"
    QUICK["path"].write_text("audit:\n  folds: 3\n  curve: false\n" + NO_KEY_VIEW)


def _run(src, out, load, *flags, info=INFO, quick=True):
    handler = FunctionModelHandler(load, output_dim=DIM, keep_input_as=anonymize.INPUT_COPY)
    argv = ["--input", str(src), "--output", str(out), "--model", "gate", *flags]
    if quick and "--policy" not in flags and "--no-audit" not in flags:
        argv += ["--policy", str(QUICK["path"])]
    return anonymize.run(argv, model_handler=handler, model_info=info)


def _files(directory) -> dict[str, bytes]:
    d = str(directory)
    if not os.path.isdir(d):
        return {}
    return {n: open(os.path.join(d, n), "rb").read() for n in sorted(os.listdir(d))}


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return _write(tmp_path_factory.mktemp("gate") / "in.parquet")


@pytest.mark.slow
def test_a_passing_audit_publishes_with_its_verdict_in_the_manifest(src, tmp_path, monkeypatch):
    from mass.modifiers import AffineSpec

    out, report = tmp_path / "rel", tmp_path / "rep"
    monkeypatch.chdir(tmp_path)  # the built-in policy, not the checkout's params.yaml
    # Erase is a projection: an affine modifier without noise, so the built-in policy's
    # key-compromised view is the release itself (judged, and passing, like it)
    info = {**INFO, "modifier": {"kind": "affine", "spec": AffineSpec(DIM).to_dict()},
            "stochastic": False}  # fmt: skip
    summary = _run(src, out, ERASE, "--report", str(report), quick=False, info=info)
    assert summary["audited"] and summary["rows_out"] == ROWS
    audit = json.loads((report / "audit.json").read_text())
    assert audit["pass"] is True and set(audit["attributes"]) == {"digit", "colour"}
    assert audit["policy"]["gate_key_compromised"] is True  # the defaults
    assert "the key-compromised view is the release" in audit["key_compromised_status"]
    assert (report / "privacy_utility.png").exists()
    manifest = json.loads((out / RELEASE_MARKER).read_text())
    assert manifest["format"] == "mass-release/1" and manifest["audited"] is True
    assert manifest["audit"]["verdict"] == "pass"
    assert manifest["audit"]["report"] == str(report / "audit.json")
    assert manifest["rows"] == ROWS and manifest["model"] == "gate"
    part = manifest["parts"][0]
    assert part["file"] == "part-00000-of-00001.parquet" and part["rows"] == ROWS
    import hashlib

    assert part["sha256"] == hashlib.sha256((out / part["file"]).read_bytes()).hexdigest()
    from mass.io import read_table

    assert read_table(str(out)).num_rows == ROWS  # our reader skips the marker too
    table = pq.read_table(out)  # the marker is invisible to Parquet readers
    assert table.column_names == ["id", "emb"]  # the label columns are never released
    assert table.schema.metadata[b"mass.audited"] == b"true"


@pytest.mark.slow
def test_a_failing_audit_publishes_nothing_and_names_the_attribute(src, tmp_path):
    out, report = tmp_path / "rel", tmp_path / "rep"
    _run(src, out, ERASE, "--report", str(report))
    before = _files(out)
    with pytest.raises(AuditFailedError) as info:
        _run(src, out, ROTATE, "--report", str(report))
    msg = str(info.value)
    assert "attribute 'digit'" in msg and "nothing published" in msg and str(report) in msg
    assert "'colour'" not in msg  # the preserved attribute passed: only digit is named
    assert _files(out) == before  # the previous release, byte for byte
    audit = json.loads((report / "audit.json").read_text())  # the failing report is written
    assert audit["pass"] is False and audit["attributes"]["digit"]["pass"] is False
    assert audit["attributes"]["digit"]["worst"] > 0.9
    assert sorted(os.listdir(tmp_path)) == ["rel", "rel_quarantine", "rep"]  # no staging left


def test_the_built_in_policy_refuses_a_release_naming_no_modifier_and_says_why(src, tmp_path):
    """The key-compromised view of a release whose metadata names no modifier (these stand-ins;
    a remote server without --repository) cannot be computed: the gate fails closed, and the
    error says so, since every bound on the release itself is within its limit."""
    policy = tmp_path / "builtin-gate.yaml"  # the gate as built in, the attackers cheaper
    policy.write_text("audit:\n  families: [logreg]\n  folds: 3\n  curve: false\n")
    out = tmp_path / "rel"
    with pytest.raises(AuditFailedError) as info:
        _run(src, out, ERASE, "--policy", str(policy))
    msg = str(info.value)
    assert "attribute 'digit'" in msg and "'colour'" not in msg and "nothing published" in msg
    assert ("key-compromised view (audit.gate_key_compromised) was not judged: no "
            "mass.modifier metadata" in msg)  # fmt: skip
    assert not out.exists()


@pytest.mark.slow
def test_a_failing_audit_leaves_no_release_where_there_was_none(src, tmp_path):
    out = tmp_path / "rel"
    with pytest.raises(AuditFailedError, match="attribute 'digit'"):
        _run(src, out, ROTATE)
    assert not out.exists()
    assert (tmp_path / "rel_report" / "audit.json").exists()  # the default report path


def test_without_labels_the_job_refuses_unless_no_audit(tmp_path):
    bare = _write(tmp_path / "bare.parquet", labels=False)
    out = tmp_path / "rel"
    with pytest.raises(ConfigError, match=r"no column\(s\) \['digit', 'colour'\].*--no-audit"):
        _run(bare, out, ERASE)
    assert not out.exists() and sorted(os.listdir(tmp_path)) == ["bare.parquet"]
    summary = _run(bare, out, ERASE, "--no-audit")
    assert summary["audited"] is False
    manifest = json.loads((out / RELEASE_MARKER).read_text())
    assert manifest["audited"] is False and manifest["audit"] is None
    assert pq.read_schema(out / "part-00000-of-00001.parquet").metadata[b"mass.audited"] == (
        b"false"
    )
    assert not (tmp_path / "rel_report").exists()


def test_a_model_without_suppressed_attributes_needs_no_audit(src, tmp_path):
    out = tmp_path / "rel"
    with pytest.raises(ConfigError, match="names no suppressed attribute.*--no-audit"):
        _run(src, out, ERASE, info={**INFO, "suppress": []})
    assert sorted(os.listdir(tmp_path)) == []


@pytest.mark.slow
def test_labels_from_a_separate_file(src, tmp_path):
    """--labels: id + label columns only; the input supplies the original embeddings."""
    bare = _write(tmp_path / "bare.parquet", labels=False)
    labels = tmp_path / "labels.parquet"
    pq.write_table(pq.read_table(src, columns=["id", "digit", "colour"]), str(labels))
    out, report = tmp_path / "rel", tmp_path / "rep"
    with pytest.raises(AuditFailedError, match="attribute 'digit'"):
        _run(bare, out, ROTATE, "--labels", str(labels), "--report", str(report))
    assert not out.exists()
    _run(bare, out, ERASE, "--labels", str(labels), "--report", str(report))
    assert json.loads((out / RELEASE_MARKER).read_text())["audit"]["verdict"] == "pass"
    # a refused run over it says the release there is kept (the first said nothing was there)
    with pytest.raises(AuditFailedError, match=f"a previous release at {out} is kept"):
        _run(bare, out, ROTATE, "--labels", str(labels), "--report", str(report))
    assert json.loads((out / RELEASE_MARKER).read_text())["audit"]["verdict"] == "pass"


@pytest.mark.slow
def test_policy_file_is_used_and_a_strict_one_fails_the_gate(src, tmp_path):
    """The same release passes the default policy and fails one that demands more utility."""
    strict = tmp_path / "strict.yaml"
    strict.write_text("audit:\n  min_utility_fraction: 1.5\n  folds: 3\n  curve: false\n"
                      + NO_KEY_VIEW)  # fmt: skip
    out = tmp_path / "rel"
    with pytest.raises(AuditFailedError, match="attribute 'colour' \\(preserved"):
        _run(src, out, ERASE, "--policy", str(strict))
    assert not out.exists()


@pytest.mark.slow
def test_quarantined_rows_are_left_out_of_the_audit(tmp_path):
    """The audit reads the input's labels without the rows the job quarantined (its readers
    refuse NaN rows), and the release passes."""
    path = tmp_path / "in.parquet"
    _write(path)
    table = pq.read_table(path)
    x = np.stack(table.column("emb").to_numpy(zero_copy_only=False))
    x[[3, 30]] = np.nan
    table = table.set_column(1, "emb", embedding_array(x.astype(np.float32)))
    pq.write_table(table, str(path))
    summary = _run(path, tmp_path / "rel", ERASE, "--max-quarantined", "2")
    assert summary["audited"] and (summary["rows_out"], summary["quarantined"]) == (ROWS - 2, 2)
    audit = json.loads((tmp_path / "rel_report" / "audit.json").read_text())
    assert audit["pass"] is True and audit["rows"]["audited"] == ROWS - 2


@pytest.mark.slow
def test_separate_labels_of_quarantined_rows_and_of_other_ids_are_left_out(tmp_path):
    """--labels (the README's route) holding the rows the job quarantined and ids of rows not
    in this input: the audit reads the released ids' labels only, and the release passes
    (before: "Row count equals the labels'" failed it after the whole run)."""
    path = tmp_path / "in.parquet"
    _write(path)
    table = pq.read_table(path)
    x = np.stack(table.column("emb").to_numpy(zero_copy_only=False))
    x[[3, 30]] = np.nan
    pq.write_table(table.select(["id"]).append_column("emb", embedding_array(x.astype(
        np.float32))), str(path))  # fmt: skip
    wider = pq.read_table(_write(tmp_path / "more.parquet", rows=2 * ROWS, seed=1))
    others = wider.filter(pc.greater_equal(wider.column("id"), ROWS)).select(["id", "digit",
                                                                             "colour"])  # fmt: skip
    labels = tmp_path / "labels.parquet"
    pq.write_table(pa.concat_tables([table.select(["id", "digit", "colour"]), others]), labels)
    summary = _run(str(path), tmp_path / "rel", ERASE, "--labels", str(labels),
                   "--max-quarantined", "2")  # fmt: skip
    assert summary["audited"] and (summary["rows_out"], summary["quarantined"]) == (ROWS - 2, 2)
    audit = json.loads((tmp_path / "rel_report" / "audit.json").read_text())
    assert audit["pass"] is True, audit["failed_expectations"]
    assert audit["rows"]["labels"] == audit["rows"]["audited"] == ROWS - 2


@pytest.mark.parametrize("factor", [None, 1.0000001, 3.0], ids=["normalised", "1+1e-7", "x3"])
def test_a_model_returning_its_input_up_to_scale_is_refused(src, tmp_path, factor):
    """Cosine similarity > 1 - 1e-6 to the input is a bypass: exact equality missed these."""
    out = tmp_path / "rel"
    with pytest.raises(ReleaseError, match=f"{ROWS} released row\\(s\\) equal their input"):
        _run(src, out, Scale(factor), "--no-audit")
    assert not out.exists()
    assert sorted(os.listdir(tmp_path)) == ["rel_quarantine"]  # nothing staged left behind


@pytest.mark.slow
def test_a_forced_suppressed_column_fails_the_gate(src, tmp_path):
    """--force-allow lets the job write the column, the audit still forbids it in a release."""
    out = tmp_path / "rel"
    with pytest.raises(AuditFailedError, match="attribute 'digit'") as info:
        _run(src, out, ERASE, "--allow-columns", "digit", "--force-allow")
    assert "digit" in str(info.value)
    assert not out.exists()


@pytest.mark.slow  # moto server + three audits: about a minute on 2 loaded cores
def test_the_gate_audits_a_staged_object_store_release_and_uploads_the_report(src, tmp_path):
    """Input, release and report in an S3-compatible store (moto's server): the staged
    version is audited, the report uploaded, and `mass audit` reads the committed version; a
    failing audit leaves the previous pointer and version byte-identical."""
    from mass import fs
    from mass.audit import AuditRequest, run_audit
    from mass.audit.policy import AuditPolicy
    from mass.formats import committed_parts
    from mass.testing.services import moto_s3

    with moto_s3(str(tmp_path), "gate"):
        with open(src, "rb") as f:
            fs.write_bytes("s3://gate/in/in.parquet", f.read())
        out = "s3://gate/rel"
        summary = _run("s3://gate/in/in.parquet", out, ERASE)
        assert summary["audited"] and summary["rows_out"] == ROWS
        assert fs.read_json(f"{out}_report/audit.json")["pass"] is True
        assert fs.isfile(f"{out}_report/privacy_utility.png")
        manifest = fs.read_json(f"{out}/{RELEASE_MARKER}")
        assert manifest["audit"]["report"] == f"{out}_report/audit.json"
        assert manifest["datasheet"]["embedding"]["rows"] == ROWS  # from the parts' footers
        parts = committed_parts(out)
        with pytest.raises(AuditFailedError, match="attribute 'digit'"):
            _run("s3://gate/in/in.parquet", out, ROTATE)
        assert fs.read_json(f"{out}/{RELEASE_MARKER}") == manifest
        assert committed_parts(out) == parts and all(fs.isfile(p) for p in parts)
        req = AuditRequest(release=out, labels="s3://gate/in/in.parquet", suppress=("digit",),
                           preserve=("colour",), policy=AuditPolicy(folds=3, curve=False),
                           report_dir=str(tmp_path / "rep"))  # fmt: skip
        assert run_audit(req).counts["release"] == ROWS


# ERASE, and also the watch attribute's dimensions (8-10): loses 'thick'.
ERASE_WATCH = ZeroDims([*range(5), 8, 9, 10])


@pytest.mark.slow
def test_the_gate_reports_and_can_gate_a_watch_attribute(tmp_path):
    """--watch (or the policy's audit.watch): audit.json and _RELEASE.md say how much of an
    attribute no flag named the release keeps; audit.watch_min_kept fails a release that
    drops it, which then publishes nothing."""
    src = _write(tmp_path / "in.parquet")
    table = pq.read_table(src)
    thick = np.random.default_rng(3).integers(0, 3, ROWS)
    x = np.stack(table.column("emb").to_numpy(zero_copy_only=False)).astype(np.float32)
    x[np.arange(ROWS), 8 + thick] += 2.0
    table = table.set_column(1, "emb", embedding_array(x)).append_column("thick", pa.array(thick))
    pq.write_table(table, str(tmp_path / "watched.parquet"))
    src = str(tmp_path / "watched.parquet")
    gated = tmp_path / "gated.yaml"
    gated.write_text("audit:\n  folds: 3\n  curve: false\n  watch_min_kept: 0.8\n" + NO_KEY_VIEW)
    out, report = tmp_path / "rel", tmp_path / "rep"
    _run(src, out, ERASE, "--watch", "thick", "--report", str(report), "--policy", str(gated))
    kept = json.loads((report / "audit.json").read_text())["unnamed"]["watch"]["thick"]["kept"]
    assert kept > 0.9
    assert f"thick (watch, named by no flag): kept {kept:.2f}" in (out / "_RELEASE.md").read_text()
    with pytest.raises(AuditFailedError):
        _run(src, tmp_path / "rel2", ERASE_WATCH, "--watch", "thick", "--report",
             str(tmp_path / "rep2"), "--policy", str(gated))  # fmt: skip
    assert not (tmp_path / "rel2").exists()
    failed = json.loads((tmp_path / "rep2" / "audit.json").read_text())["failed_expectations"]
    assert failed and all(f.startswith("watch_utility:") for f in failed)
