"""The certificate through the real audit (mass.audit.certified): an ot_repair cell release
of rows the cells never saw gets a certificate block in audit.json beside the retrained
attackers (its bound above every one of them); a continuous release gets none, with the
reason; ``audit.gate_certificate`` judges it: a release without one fails, a codebook whose
cells follow the preserved attribute only passes."""

from __future__ import annotations

import json
import shutil
from html import escape

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from mass.audit import AuditRequest, policy_from_dict, run_audit
from mass.audit.report import audit_metrics, format_table, write_all
from mass.audit.suite import REQUIRED_METADATA
from mass.demo.summary import metrics, summarize
from mass.embeddings import embedding_array
from mass.errors import ConfigError
from mass.io import EmbeddingDataset, LabelEncoding
from mass.methods import get_method
from mass.methods._common import subset
from mass.modifiers.codebook import CodebookModifier, CodebookSpec
from mass.report.datasheet import write_datasheet

POLICY = {"families": ["logreg", "knn"], "folds": 3, "curve": False}


def _data(n: int = 7200, dim: int = 6, seed: int = 0) -> EmbeddingDataset:
    """s shifts x0, u (preserved, independent of s) sets x1, x2 = 4; the rest is noise."""
    rng = np.random.default_rng(seed)
    s, u = rng.integers(0, 2, (2, n))
    x = rng.normal(scale=0.5, size=(n, dim))
    x[:, 0] += 1.2 * (2 * s - 1)
    x[:, 1] += 2.0 * (2 * u - 1)
    x[:, 2] = 4.0
    labels = {"s": s.astype(np.int64), "u": u.astype(np.int64)}
    return EmbeddingDataset(
        ids=pa.array(np.arange(n, dtype=np.int64) + 100), x=x.astype(np.float32), labels=labels,
        encodings={k: LabelEncoding(k, (0, 1)) for k in labels}, source="certified",
    )  # fmt: skip


def _audit(tmp, model, ds: EmbeddingDataset, policy: dict, run_dir: str | None = None):
    with torch.no_grad():
        xp = model.eval()(torch.as_tensor(ds.x)).numpy()
    ids = ds.ids.to_numpy()
    meta = {k: "x" for k in REQUIRED_METADATA}
    meta.update({
        "mass.sha256": "m", "mass.suppress": '["s"]', "mass.preserve": '["u"]',
        "mass.forced_columns": "[]",
        "mass.modifier": json.dumps({"kind": model.kind, "spec": model.spec.to_dict()}),
    })  # fmt: skip
    tmp.mkdir()
    table = pa.table({"id": ids, "emb": embedding_array(xp)}).replace_schema_metadata(meta)
    pq.write_table(table, tmp / "release.parquet")
    pq.write_table(pa.table({"id": ids, "emb": embedding_array(ds.x), **ds.labels}),
                   tmp / "labels.parquet")  # fmt: skip
    req = AuditRequest(release=str(tmp / "release.parquet"), labels=str(tmp / "labels.parquet"),
                       suppress=("s",), preserve=("u",), policy=policy_from_dict(policy),
                       run_dir=run_dir)  # fmt: skip
    return run_audit(req)


@pytest.fixture(scope="module")
def fits():
    torch.set_num_threads(1)
    ds = _data()
    train, fresh = subset(ds, np.arange(1200)), subset(ds, np.arange(1200, len(ds)))
    out = {}
    for name, params in (("cells", {"cell_rows": 100}), ("continuous", {})):
        out[name] = get_method("ot_repair").fit(train, suppress=["s"], preserve=["u"], seed=0,
                                                progress=False, params=params).modifier  # fmt: skip
    return out, fresh


def test_a_cell_release_carries_its_certificate_beside_the_attackers(tmp_path, fits):
    models, fresh = fits
    result = _audit(tmp_path / "a", models["cells"], fresh, POLICY)
    row = audit_metrics(result)["attributes"]["s"]
    cert = row["certificate"]
    assert cert["certified"] and cert["reason"] is None, cert
    assert cert["rows"] == len(fresh) and 2 <= cert["cells"] <= 6  # 1,200 / (100 x 2) cells
    # the bound holds every retrained attacker (they see the same vectors) and is a real
    # statement: well below 1 on 6,000 rows of a handful of cells
    for judge in ("logreg", "knn"):
        assert row[judge] <= cert["accuracy"] and row["balanced"][judge] <= cert["balanced"]
    assert cert["balanced"] < 0.65 and cert["delta"] == 0.05
    assert cert["gated"] is False and cert["limit"] == row["limit"]
    assert "s: certified (any attacker, 95%): accuracy <=" in format_table(result)
    # reported, not gating: whatever the attackers decided, the certificate is no judge
    assert all("certificate" not in e.observed for e in result.outcome.failed)
    _shown_everywhere(tmp_path, result, cert)


def _shown_everywhere(tmp_path, result, cert: dict) -> None:
    """report.html, _RELEASE.md, the CLI/demo summary and metrics/summary.json show it."""
    audit = write_all(result, str(tmp_path / "report"), chart=False)
    bound = (f"any attacker's accuracy <= {cert['accuracy']:.3f}, balanced <= "
             f"{cert['balanced']:.3f}")  # fmt: skip
    page = (tmp_path / "report" / "report.html").read_text()
    assert "certificate (cell release)" in page and escape(bound) in page
    release = tmp_path / "release"
    release.mkdir()
    shutil.copy(tmp_path / "a" / "release.parquet", release / "part-0.parquet")
    write_datasheet(str(release), metadata=result.release_meta, audit=audit, report_path=None)
    sheet = (release / "_RELEASE.md").read_text()
    assert f"  - certificate: any attacker's accuracy \\<= {cert['accuracy']:.3f}" in sheet
    assert any(line.startswith("Certificate:  s  " + bound)
               for line in summarize(audit, str(release)))  # fmt: skip
    row = metrics(audit)["suppressed"]["s"]
    assert row["certified_balanced"] == round(cert["balanced"], 4)
    assert row["certified_accuracy"] == round(cert["accuracy"], 4)


def test_a_continuous_release_has_none_and_fails_only_when_the_policy_gates_on_it(tmp_path, fits):
    models, fresh = fits
    gated = {**POLICY, "gate_certificate": True}
    result = _audit(tmp_path / "c", models["continuous"], fresh, gated)
    cert = audit_metrics(result)["attributes"]["s"]["certificate"]
    assert not cert["certified"] and cert["accuracy"] is None
    assert cert["reason"].startswith(f"continuous release: {len(fresh)} distinct vectors")
    s = next(r for r in result.reports if r.name == "s")
    assert not s.passed and not result.success
    failed = [e for e in result.outcome.failed if e.attribute == "s"]
    assert failed and "certificate" in failed[0].observed


def test_cells_that_ignore_s_are_certified_within_the_limit_under_the_gate(tmp_path, fits):
    """A codebook of 4 unit centres in the (x1, x2) plane: a row's cell is decided by x1
    (u and noise) alone, the same partition for both classes of s; the certificate is within
    the limit and the gated audit passes."""
    _, fresh = fits
    angle = torch.tensor([-0.6, -0.2, 0.2, 0.6])
    centres = torch.zeros(4, fresh.x.shape[1])
    centres[:, 1], centres[:, 2] = torch.sin(angle), torch.cos(angle)
    book = CodebookModifier(CodebookSpec(dim=fresh.x.shape[1], cells=4)).set(centres)
    result = _audit(tmp_path / "u", book, fresh, {**POLICY, "gate_certificate": True})
    block = audit_metrics(result)["attributes"]["s"]["certificate"]
    assert block["gated"] and block["within_limit"] and block["cells"] == 4, block
    assert block["balanced"] < 0.55, block
    assert result.success, result.outcome.failed


def test_cells_fitted_on_the_released_rows_get_no_certificate(tmp_path, fits):
    """A transductive fit (mass.fitrows) saw the audited rows: the bound's premise fails."""
    _, fresh = fits
    rows = subset(fresh, np.arange(1200))
    model = get_method("ot_repair").fit(rows, suppress=["s"], preserve=["u"], seed=0,
                                        progress=False,
                                        params={"cell_rows": 100, "transductive": True}).modifier  # fmt: skip
    result = _audit(tmp_path / "t", model, rows, POLICY)
    cert = audit_metrics(result)["attributes"]["s"]["certificate"]
    assert not cert["certified"] and cert["reason"].startswith("transductive fit"), cert


def test_the_gate_key_is_off_by_default_and_validated():
    assert policy_from_dict(None).gate_certificate is False
    assert policy_from_dict({"gate_certificate": True}).to_dict()["gate_certificate"] is True
    with pytest.raises(ConfigError, match="audit.gate_certificate: expected true or false"):
        policy_from_dict({"gate_certificate": "yes"})


def test_a_certificate_over_its_limit_says_what_resolution_costs(tmp_path, fits):
    """200 cells on 1,200 audited rows, each cell decided by noise alone (x3..x5), so S is
    independent of the cell and only the plug-in's optimism lifts the bound over its limit:
    the audit says how many rows those cells need and how many cells these rows allow."""
    from mass.metrics.certificate import cells_allowed, rows_needed

    _, fresh = fits
    rows = subset(fresh, np.arange(1200))
    rng = np.random.default_rng(1)
    centres = torch.as_tensor(rng.normal(size=(200, fresh.x.shape[1])), dtype=torch.float32)
    centres[:, :3] = 0.0  # no s (x0), u (x1) or constant (x2): cells follow the noise columns
    centres = centres / centres.norm(dim=1, keepdim=True)
    book = CodebookModifier(CodebookSpec(dim=fresh.x.shape[1], cells=200)).set(centres)
    result = _audit(tmp_path / "r", book, rows, POLICY)
    block = audit_metrics(result)["attributes"]["s"]["certificate"]
    assert block["certified"] and block["within_limit"] is False, block
    plan = block["resolution_plan"]
    shares = np.bincount(rows.labels["s"])
    assert plan["margin"] == 0.05
    assert plan["rows_needed"] == rows_needed(block["cells"], shares, 0.05) > 1200
    assert plan["cells_allowed"] == cells_allowed(1200, shares, 0.05) < block["cells"]
    assert "Resolution alone (cells independent of S)" in format_table(result)


def _leaky_book(fresh) -> CodebookModifier:
    """4 unit centres in the (x0, x2) plane: a row's cell follows x0, which s shifts."""
    angle = torch.tensor([-0.6, -0.2, 0.2, 0.6])
    centres = torch.zeros(4, fresh.x.shape[1])
    centres[:, 0], centres[:, 2] = torch.sin(angle), torch.cos(angle)
    return CodebookModifier(CodebookSpec(dim=fresh.x.shape[1], cells=4)).set(centres)


def _run_dir(path, rows: int, release_rows: int | None):
    path.mkdir()
    (path / "calibration.json").write_text(
        json.dumps({"validation": {"rows": rows, "release_rows": release_rows}})
    )
    return str(path)


def test_a_failing_cell_release_smaller_than_calibrated_names_the_flag(tmp_path, fits,
                                                                       monkeypatch):  # fmt: skip
    """A cell release that fails its audit on fewer rows than its cells were calibrated for
    says so and names `mass train --release-rows`: with the release size calibration was told
    (or about as many validated rows), a passing release, or no readable calibration.json,
    nothing is added."""
    from mass.audit import runner
    from mass.audit.certified import calibrated_size_hint

    _, fresh = fits
    rows = subset(fresh, np.arange(1200))
    monkeypatch.setattr(runner, "load_judges", lambda run_dir: ({}, {}))  # no branch models
    run = _run_dir(tmp_path / "run", 6000, None)
    result = _audit(tmp_path / "a", _leaky_book(fresh), rows, POLICY, run_dir=run)
    assert not result.success
    hint = [w for w in result.warnings if "--release-rows" in w]
    assert hint == [f"s: this cell release fails its audit on 1200 audited rows, and its "
                    f"model's cells were calibrated for releases of 6000 "
                    f"({run}/calibration.json); each cell holds fewer rows here and reads S "
                    f"with wider bounds: for a release of this size, calibrate with `mass "
                    f"train --release-rows 1200`"], result.warnings  # fmt: skip
    assert f"WARNING {hint[0]}" in format_table(result)
    reports = result.reports
    assert calibrated_size_hint(reports, _run_dir(tmp_path / "told", 6000, 1200)) == []
    assert calibrated_size_hint(reports, _run_dir(tmp_path / "near", 1400, None)) == []
    assert calibrated_size_hint(reports, str(tmp_path / "none")) == []
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "calibration.json").write_text("{not json")
    assert calibrated_size_hint(reports, str(tmp_path / "bad")) == []
    assert calibrated_size_hint(reports, None) == []
    passing = _audit(tmp_path / "p", fits[0]["cells"], rows, POLICY)
    assert passing.success  # the same rows under cells that hide s: no hint
    assert calibrated_size_hint(passing.reports, run) == []
