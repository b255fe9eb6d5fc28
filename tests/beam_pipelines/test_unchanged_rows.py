"""Rows a modifier itself leaves (nearly) unchanged are released and counted; a server that
returns its inputs is still refused (mass.batches.reference: the job recomputes the flagged and a
seeded sample of rows with the signed modifier it verified, and compares).

One repository, one real tritonserver: ``lea`` (LEACE, no release noise, trained where the
suppressed attribute is one coordinate, so some rows have an erased component ~0), ``ident`` (a
signed identity affine map) and ``lea_bypass`` (the same signed LEACE weights, served by a
model.py that returns its input)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from beam_pipelines import anonymize
from mass.embeddings import embedding_array
from mass.errors import ReleaseError
from mass.io import LabelEncoding
from mass.methods import get_method
from mass.methods._common import EmbeddingDataset
from mass.rows import normalize_rows

pytestmark = [pytest.mark.triton, pytest.mark.slow]
ROWS, DIM = 3000, 16
RETURNS_INPUT = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("PRIVATIZED", np.array(
            pb_utils.get_input_tensor_by_name(r, "EMBEDDING").as_numpy(), np.float32))])
            for r in requests]
"""


def _data() -> EmbeddingDataset:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(ROWS, DIM))
    a, b = (x[:, 0] > 0).astype(np.int64), (x[:, 1] > 0).astype(np.int64)
    return EmbeddingDataset(
        ids=pa.array(np.arange(ROWS, dtype=np.int64)), x=normalize_rows(x),
        labels={"a": a, "b": b}, source="one-coordinate",
        encodings={"a": LabelEncoding("a", (0, 1)), "b": LabelEncoding("b", (0, 1))},
    )  # fmt: skip


@pytest.fixture(scope="module")
def served(tmp_path_factory, triton_server_factory):
    from mass.modifiers import save_modifier
    from mass.modifiers.affine import AffineModifier, AffineSpec
    from mass.serving.export import export_modifier
    from mass.serving.manifest import sign_version_dir, signing_key

    base = tmp_path_factory.mktemp("unchanged")
    ds = _data()
    torch.manual_seed(0)
    fit = get_method("leace").fit(ds, suppress=["a"], preserve=["b"], params={}, seed=0,
                                  progress=False)  # fmt: skip
    for name, model in (("lea", fit.modifier.eval()), ("ident", AffineModifier(AffineSpec(DIM)))):
        run = base / name
        run.mkdir()
        save_modifier(model, str(run / "modifier.pt"), method="leace", suppress=["a"],
                      preserve=["b"], config_hash=name)  # fmt: skip
        export_modifier(run, base / "repo", name)
    export_modifier(base / "lea", base / "repo", "lea_bypass")
    version = base / "repo" / "lea_bypass" / "1"
    (version / "model.py").write_text(RETURNS_INPUT)  # the signed weights, served bypassed
    shutil.rmtree(version / "__pycache__", ignore_errors=True)
    sign_version_dir(version, signing_key())
    src = base / "input.parquet"
    table = pa.table({"id": ds.ids, "emb": embedding_array(ds.x.astype(np.float32)),
                      "a": ds.labels["a"], "b": ds.labels["b"]})  # fmt: skip
    pq.write_table(table, src, row_group_size=1000)
    return base, src, fit.modifier.eval(), triton_server_factory(base / "repo")


def _anonymize(served, model: str, out, *extra: str) -> dict:
    base, src, _, server = served
    return anonymize.run(["--input", str(src), "--output", str(out), "--model", model,
                          "--repository", str(base / "repo"), "--triton-url", server.grpc_url,
                          "--batch-rows", "512", *extra])  # fmt: skip


def test_rows_a_deterministic_eraser_leaves_unchanged_are_released_and_counted(served, tmp_path):
    _, src, lea, _ = served
    x = torch.as_tensor(normalize_rows(_data().x).astype(np.float32))
    with torch.no_grad():
        y = lea(x, torch.zeros(ROWS, dtype=torch.int64)).numpy().astype(np.float64)
    cos = (y * x.numpy()).sum(1) / np.linalg.norm(y, axis=1)
    same, near = int((cos > 1 - 1e-6).sum()), int((cos >= 0.9999 - 1e-6).sum())
    assert same > 0  # the case of the issue: rows the eraser barely moves

    out = tmp_path / "release"
    policy = tmp_path / "policy.yaml"  # a quick audit: this test is about its cosine check
    policy.write_text("audit:\n  families: [logreg, knn]\n  folds: 5\n  curve: false\n"
                      "  attacker_margin: {logreg: 0.1, knn: 0.1}\n")  # fmt: skip
    summary = _anonymize(served, "lea", out, "--report", str(tmp_path / "report"),
                         "--policy", str(policy))  # fmt: skip
    assert summary["rows_out"] == ROWS and summary["audited"]
    assert summary["verified_in_process"]
    # every row at or above the audit's max_cosine was recomputed and found the modifier's own
    assert summary["unchanged_rows"] + summary["near_rows"] == near
    assert abs(summary["unchanged_rows"] - same) <= 2  # float32 server vs float64 here
    doc = json.loads((out / "_release.json").read_text())
    assert doc["unchanged"] == {"unchanged_rows": summary["unchanged_rows"],
                                "near_rows": summary["near_rows"]}  # fmt: skip
    audit = json.loads((tmp_path / "report" / "audit.json").read_text())
    assert audit["rows"]["verified_near"] == near
    rel = pq.read_table(out).sort_by("id")
    got = np.stack(rel.column("emb").to_numpy(zero_copy_only=False))
    np.testing.assert_allclose(got, y, atol=1e-5)


def test_a_server_returning_its_input_is_refused_though_the_weights_are_signed(served, tmp_path):
    with pytest.raises(ReleaseError, match="equal their input embedding.*bypassed"):
        _anonymize(served, "lea_bypass", tmp_path / "release", "--no-audit")
    assert not (tmp_path / "release").exists()


def test_a_signed_identity_modifier_is_refused(served, tmp_path):
    with pytest.raises(ReleaseError, match=f"{ROWS} of {ROWS} released rows .*identity"):
        _anonymize(served, "ident", tmp_path / "release", "--no-audit")
    assert not (tmp_path / "release").exists()


def _later_audit(served, release, report, *extra: str) -> int:
    """`mass audit` of ``release`` by the key holder, the labels carrying the originals."""
    from mass.cli import parse_command, run_command

    base, src, _, _ = served
    policy = base / "quick.yaml"
    policy.write_text("audit:\n  families: [logreg, knn]\n  folds: 5\n  curve: false\n"
                      "  attacker_margin: {logreg: 0.1, knn: 0.1}\n")  # fmt: skip
    argv = ["audit", "--release", str(release), "--labels", str(src), "--suppress", "a",
            "--preserve", "b", "--params", str(policy), "--report", str(report), "--no-chart",
            *extra]  # fmt: skip
    args, beam = parse_command(argv)
    return run_command(args, beam)


def test_a_later_audit_given_the_signed_model_verifies_its_near_rows(served, tmp_path):
    """Without the model a standalone audit cannot tell the eraser's own near rows from a
    bypass and fails them (docs/audit.md); with ``--model`` it recomputes them as the job did
    and passes, and rows put back to their originals still fail; another export is refused."""
    from mass.errors import ConfigError

    base, src, _, _ = served
    out = tmp_path / "release"
    _anonymize(served, "lea", out, "--no-audit")
    model = ["--model", "lea", "--repository", str(base / "repo")]
    assert _later_audit(served, out, tmp_path / "plain") == 1
    plain = json.loads((tmp_path / "plain" / "audit.json").read_text())
    assert plain["rows"]["verified_near"] == 0
    assert _later_audit(served, out, tmp_path / "model", *model) == 0
    rows = json.loads((tmp_path / "model" / "audit.json").read_text())["rows"]
    assert rows["recomputed_near"] == rows["verified_near"] > 0

    # a release with five rows bypassed (their originals put back) fails with the model too
    bypassed = tmp_path / "bypassed"
    shutil.copytree(out, bypassed)
    part = sorted(bypassed.glob("*.parquet"))[0]
    t = pq.read_table(part)
    orig = pq.read_table(src).to_pandas().set_index("id")["emb"]
    emb = [np.asarray(v, np.float32) for v in t.column("emb").to_pylist()]
    for k in range(5):
        emb[k] = np.asarray(orig[t.column("id")[k].as_py()], np.float32)
    pq.write_table(t.set_column(t.schema.get_field_index("emb"), "emb", embedding_array(
        np.stack(emb))).replace_schema_metadata(t.schema.metadata), part)  # fmt: skip
    assert _later_audit(served, bypassed, tmp_path / "bypass", *model) == 1
    rows = json.loads((tmp_path / "bypass" / "audit.json").read_text())["rows"]
    assert rows["recomputed_near"] == rows["verified_near"] + 5

    with pytest.raises(ConfigError, match="is not the modifier that made --release"):
        _later_audit(served, out, tmp_path / "other", "--model", "ident", "--repository",
                     str(base / "repo"))  # fmt: skip


def test_the_beam_gate_verifies_the_near_rows_its_anonymize_step_served(served, tmp_path):
    """transforms.api.AuditGate recomputes the rows at or above max_cosine with the step's
    signed modifier (before: every such row failed the gate, though Anonymize released it)."""
    import apache_beam as beam
    from apache_beam.testing.test_pipeline import TestPipeline

    from transforms.api import Anonymize, AuditGate

    base, src, _, server = served
    table = pq.read_table(src)
    rows = [{"id": int(i), "emb": list(map(float, e))}
            for i, e in zip(table.column("id").to_pylist(), table.column("emb").to_pylist(),
                            strict=True)]  # fmt: skip
    policy = tmp_path / "policy.yaml"
    policy.write_text("audit:\n  families: [logreg, knn]\n  folds: 5\n  curve: false\n"
                      "  attacker_margin: {logreg: 0.1, knn: 0.1}\n")  # fmt: skip
    anon = Anonymize("lea", repository=str(base / "repo"), triton_url=server.grpc_url)
    with TestPipeline() as p:
        gated = (p | beam.Create(rows) | anon).rows | AuditGate(
            str(src), str(policy), anonymize=anon, report_dir=str(tmp_path / "report")
        )
        _ = gated | beam.combiners.Count.Globally()
    audit = json.loads((tmp_path / "report" / "audit.json").read_text())
    assert audit["rows"]["recomputed_near"] == audit["rows"]["verified_near"] > 0
    assert audit["pass"] is True, audit["failed_expectations"]
