"""The publication gate end to end on the real Triton server, through the command line: the
fixture's random MaSS modifier keeps the digit readable from embeddings that encode it, so
the audit of the staged release fails; nothing is published (the previous release stays
byte-identical), the report is written, the error names the attribute, the CLI exits 2."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from mass.embeddings import embedding_array
from mass.errors import AuditFailedError

pytestmark = pytest.mark.triton
DIM, ROWS = 16, 600


def _leaky_input(fc, path):
    """digit (0-9) written into dims 0-9 of the embedding, so a retrained attacker reads it."""
    rng = np.random.default_rng(3)
    digit = rng.integers(0, 10, ROWS)
    x = 0.3 * rng.normal(size=(ROWS, DIM))
    x[np.arange(ROWS), digit] += 3.0
    fc.write_input(path, emb=embedding_array(x.astype(np.float32)), digit=pa.array(digit),
                   parity=pa.array(digit % 2), image=None, note=None)  # fmt: skip


@pytest.mark.slow
def test_a_served_release_that_fails_its_audit_is_never_published(tmp_path, request, fc,
                                                                   fc_repo, capsys):  # fmt: skip
    from mass.cli import main

    server = request.getfixturevalue("fc_server")
    src, out, report = tmp_path / "in.parquet", tmp_path / "release", tmp_path / "report"
    _leaky_input(fc, src)
    before = fc.fake_previous_release(out)
    argv = ["anonymize", "--input", str(src), "--output", str(out), "--model", "mod",
            "--repository", str(fc_repo / "repo"), "--triton-url", server.grpc_url,
            "--report", str(report), "--policy", str(tmp_path / "none.yaml")]  # fmt: skip
    # the default rule with 3 folds and no learning curve: the point is the failing verdict,
    # and a tenth of the default's fits keeps this test in the inner loop
    (tmp_path / "none.yaml").write_text("audit:\n  folds: 3\n  curve: false\n")
    with pytest.raises(AuditFailedError) as info:
        fc.mass_command(argv)
    assert "attribute 'digit' (suppressed: worst" in str(info.value)
    assert fc.snapshot(out) == before and fc.leftovers(out) == []
    audit = json.loads((report / "audit.json").read_text())
    assert audit["pass"] is False and audit["attributes"]["digit"]["worst"] > 0.5
    assert (report / "privacy_utility.png").exists() and (report / "data_docs").is_dir()
    capsys.readouterr()
    assert main(argv) == 2
    assert "error: AuditFailedError:" in capsys.readouterr().err
    assert fc.snapshot(out) == before and fc.leftovers(out) == []
