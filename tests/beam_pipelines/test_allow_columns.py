"""`mass anonymize --allow-columns` judges each allowed column ALONE against the suppressed
attributes, by the audit's own rule, before any inference: a proxy of a suppressed label is
refused (nothing staged, published or served), an independent column is released, and
--force-allow records the proxy in ``mass.forced_columns``, after which the gate's audit of
the staged release fails it.

In-process (FunctionModelHandler stand-ins, real Beam, real GX audit); one test uses a real
exported model repository with a server address where nothing listens.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beam_pipelines import anonymize
from mass.embeddings import embedding_array
from mass.errors import AuditFailedError, ProxyColumnError
from mass.formats import RELEASE_MARKER
from mass.report.html import REPORT_NAME
from transforms.inference.function import FunctionModelHandler

DIM, ROWS = 16, 1600
INFO = {"name": "gate", "version": 1, "sha256": "abc", "method": "test",
        "suppress": ["digit"], "preserve": ["colour"], "config_hash": "h", "dim": DIM}  # fmt: skip
# the audit's rule with two attacker families and 5 folds: the rule, faster. The stand-in names
# no modifier (no mass.modifier): no key view to judge, which the built-in policy refuses.
POLICY = "audit:\n  families: [logreg, knn]\n  folds: 5\n  gate_key_compromised: false\n"


def _unit(v):
    n = np.linalg.norm(v, axis=1, keepdims=True)
    return (v / np.where(n > 0, n, 1)).astype(np.float32)


class Erase:
    """Drops the digit dimensions (0-4), keeps colour (5-7): the embedding passes the audit.
    ``touched``: a file created when the model is loaded (it never is before a refusal)."""

    def __init__(self, touched: str | None = None) -> None:
        self.touched = touched

    def __call__(self):
        if self.touched:
            open(self.touched, "w").close()

        def infer(t):
            x = np.array(t["EMBEDDING"], np.float32)
            x[:, :5] = 0.0
            return _unit(x)

        return infer


def _write(path, *, rows=ROWS, seed=0):
    """digit (5 classes) in dims 0-4, colour (3) in dims 5-7; ``copy`` is digit as text,
    ``noisy`` digit plus unit Gaussian noise, ``indep`` an unrelated 4-level integer."""
    rng = np.random.default_rng(seed)
    digit, colour = rng.integers(0, 5, rows), rng.integers(0, 3, rows)
    x = 0.3 * rng.normal(size=(rows, DIM))
    x[np.arange(rows), digit] += 3.0
    x[np.arange(rows), 5 + colour] += 2.0
    table = pa.table({
        "id": pa.array(np.arange(rows, dtype=np.int64)),
        "emb": embedding_array(x.astype(np.float32)),
        "digit": pa.array(digit), "colour": pa.array(colour),
        "copy": pa.array([f"d{d}" for d in digit]),
        "noisy": pa.array(digit + rng.normal(size=rows)),
        "indep": pa.array(rng.integers(0, 4, rows)),
    })  # fmt: skip
    pq.write_table(table, str(path), row_group_size=500)
    return str(path)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("allow")
    (d / "policy.yaml").write_text(POLICY)
    return _write(d / "in.parquet"), str(d / "policy.yaml")


def _run(src, out, load, *flags, policy):
    handler = FunctionModelHandler(load, output_dim=DIM, keep_input_as=anonymize.INPUT_COPY)
    argv = ["--input", src, "--output", str(out), "--model", "gate", "--policy", policy, *flags]
    return anonymize.run(argv, model_handler=handler, model_info=INFO)


@pytest.mark.parametrize("column", ["copy", "noisy"])
def test_a_proxy_column_is_refused_before_any_inference(data, tmp_path, column):
    src, policy = data
    touched = str(tmp_path / "model-loaded")
    with pytest.raises(ProxyColumnError) as info:
        _run(src, tmp_path / "rel", Erase(touched), "--allow-columns", f"indep,{column}",
             policy=policy)  # fmt: skip
    msg = str(info.value)
    assert f"column '{column}' alone predicts suppressed attribute 'digit'" in msg
    assert "limit 0.2" in msg and "--force-allow" in msg and "'indep'" not in msg
    assert os.listdir(tmp_path) == []  # no model load, nothing staged, published or reported


def test_an_independent_column_passes_and_is_released(data, tmp_path):
    src, policy = data
    out = tmp_path / "rel"
    summary = _run(src, out, Erase(), "--allow-columns", "indep", policy=policy)
    [verdict] = summary["allow_check"]
    assert verdict["column"] == "indep" and verdict["attribute"] == "digit"
    assert verdict["passed"] and verdict["upper"] <= verdict["limit"]
    table = pq.read_table(out)
    assert table.column_names == ["id", "emb", "indep"]
    assert json.loads(table.schema.metadata[b"mass.forced_columns"]) == []
    assert json.loads((out / RELEASE_MARKER).read_text())["audit"]["verdict"] == "pass"
    report = tmp_path / "rel_report"  # every output of the audit, by report.write_all
    assert {"audit.json", "privacy_utility.png", REPORT_NAME} <= set(os.listdir(report))


def test_force_allow_records_the_proxy_and_the_gate_fails_the_release(data, tmp_path):
    """--force-allow overrides the up-front refusal, not the gate: the proxy is recorded in
    mass.forced_columns of the staged release, whose audit (attackers on the embedding and
    every released column) then fails digit, so nothing is published."""
    src, policy = data
    out, report = tmp_path / "rel", tmp_path / "rep"
    with pytest.raises(AuditFailedError, match="attribute 'digit'"):
        _run(src, out, Erase(), "--allow-columns", "noisy", "--force-allow",
             "--report", str(report), policy=policy)  # fmt: skip
    assert not out.exists()
    audit = json.loads((report / "audit.json").read_text())
    assert audit["release"]["forced_columns"] == ["noisy"]
    assert audit["release"]["columns"] == ["id", "emb", "noisy"]
    assert audit["attributes"]["digit"]["pass"] is False
    assert audit["attributes"]["digit"]["worst"] > 0.4  # read off the column (chance 0.2)


def test_a_proxy_is_refused_with_labels_from_a_separate_file(data, tmp_path):
    """--labels: the labelled sample is joined to the input's allowed columns by id."""
    src, policy = data
    bare = tmp_path / "bare.parquet"
    pq.write_table(pq.read_table(src).drop_columns(["digit", "colour"]), str(bare))
    labels = tmp_path / "labels.parquet"
    held_out = pq.read_table(src, columns=["id", "digit", "colour"]).slice(400)  # a subset
    pq.write_table(held_out, str(labels))
    with pytest.raises(ProxyColumnError, match="'copy' alone predicts .* 'digit'.* 1200 sampled"):
        _run(str(bare), tmp_path / "rel", Erase(), "--allow-columns", "copy", "--labels",
             str(labels), policy=policy)  # fmt: skip
    assert sorted(os.listdir(tmp_path)) == ["bare.parquet", "labels.parquet"]


def test_a_proxy_is_refused_before_the_server_is_contacted(data, tmp_path, capsys):
    """Through the CLI, with a real exported model and a server address where nothing
    listens: the refusal (exit 2) comes before the job would have connected (which would be
    a ServingError)."""
    import torch

    from mass.cli import main
    from mass.modifiers import DataModifier, ModifierSpec, save_modifier
    from mass.serving.export import export_modifier

    src, policy = data
    torch.manual_seed(0)
    run = tmp_path / "run"
    run.mkdir()
    save_modifier(DataModifier(ModifierSpec(DIM, hidden=(8,), noise_dim=2)),
                  str(run / "modifier.pt"), method="mass", suppress=["digit"],
                  preserve=["colour"], config_hash="h1")  # fmt: skip
    export_modifier(run, tmp_path / "repo", "mod", max_batch_size=64)
    rc = main(["anonymize", "--input", src, "--output", str(tmp_path / "rel"), "--model", "mod",
               "--repository", str(tmp_path / "repo"), "--triton-url", "127.0.0.1:9",
               "--policy", policy, "--allow-columns", "copy"])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and "ProxyColumnError" in err and "ServingError" not in err
    assert "column 'copy' alone predicts suppressed attribute 'digit'" in err
    assert sorted(os.listdir(tmp_path)) == ["repo", "run"]
