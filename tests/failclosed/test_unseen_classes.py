"""Classes the modifier never saw at training are refused by name before any work
(mass.trained_classes): ``mass export`` records the trained classes in export.json, and a job
whose input holds a suppressed or preserved class outside them fails naming the file, column
and value (not as "the id column alone predicts it" after the job, nor published silently)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beam_pipelines import anonymize
from mass.embeddings import embedding_array
from mass.errors import LabelError
from mass.testing.stand_ins import PinDim
from transforms.inference.function import FunctionModelHandler

DIM, ROWS = 8, 300
INFO = {"name": "m", "version": 1, "sha256": "abc", "method": "test", "suppress": ["g"],
        "preserve": ["r"], "config_hash": "h", "dim": DIM,
        "classes": {"g": [0, 1], "r": ["a", "b"]}}  # fmt: skip


PIN = PinDim(0, 5.0)


def _write(path, g, r):
    x = np.random.default_rng(0).normal(size=(ROWS, DIM)).astype(np.float32)
    pq.write_table(pa.table({"id": pa.array(np.arange(ROWS)), "emb": embedding_array(x),
                             "g": pa.array(g), "r": pa.array(r)}), str(path))  # fmt: skip


def _run(src, out, *flags):
    handler = FunctionModelHandler(PIN, output_dim=DIM, keep_input_as=anonymize.INPUT_COPY)
    argv = ["--input", str(src), "--output", str(out), "--model", "m", *flags]
    return anonymize.run(argv, model_handler=handler, model_info=INFO)


@pytest.mark.parametrize(
    ("column", "value", "rows"),
    [("g", 2, [40, 41, 299]), ("r", "c", [7])],
    ids=["suppressed class only in the release", "preserved class only in the release"],
)
@pytest.mark.parametrize("audit", [True, False], ids=["audited", "--no-audit"])
def test_a_class_unseen_at_training_is_refused_by_name(tmp_path, column, value, rows, audit):
    rng = np.random.default_rng(1)
    g = rng.integers(0, 2, ROWS).astype(object)
    r = np.where(rng.random(ROWS) < 0.5, "a", "b").astype(object)
    (g if column == "g" else r)[rows] = value
    src, out = tmp_path / "in.parquet", tmp_path / "rel"
    _write(src, list(g), list(r))
    (tmp_path / "quick.yaml").write_text("audit:\n  folds: 3\n  curve: false\n"
                                         "  gate_key_compromised: false\n")  # fmt: skip
    flags = (["--policy", str(tmp_path / "quick.yaml"), "--report", str(tmp_path / "report")]
             if audit else ["--no-audit"])  # fmt: skip
    expected = (rf"^{src}: label column '{column}' has value {value!r} \({len(rows)} rows?, "
                rf"first at row {rows[0]}\), unseen at training time by model 'm'")  # fmt: skip
    with pytest.raises(LabelError, match=expected):
        _run(src, out, *flags)
    assert not out.exists() and not (tmp_path / "rel_quarantine").exists()


def test_a_null_label_is_refused_by_name_before_any_work(tmp_path):
    """A null class in a judged label column: refused naming file, column and row, as `mass
    train` and `mass audit` refuse it (before: a TypeError from the unseen-class count)."""
    from mass.errors import InvalidValueError

    rng = np.random.default_rng(1)
    g = [int(v) for v in rng.integers(0, 2, ROWS)]
    g[5] = None
    src, out = tmp_path / "in.parquet", tmp_path / "rel"
    _write(src, g, ["a"] * ROWS)
    with pytest.raises(InvalidValueError, match=rf"^{src}: label column 'g' has 1 null \(first "
                                                r"at row 5\)"):  # fmt: skip
        _run(src, out, "--no-audit")
    assert not out.exists() and not (tmp_path / "rel_quarantine").exists()


def test_export_records_the_trained_classes(tmp_path):
    import torch

    from mass.modifiers import DataModifier, ModifierSpec, save_modifier
    from mass.serving.export import export_modifier

    torch.manual_seed(0)
    run = tmp_path / "run"
    run.mkdir()
    save_modifier(DataModifier(ModifierSpec(DIM, hidden=(8,))), str(run / "modifier.pt"),
                  method="mass", suppress=["g"], preserve=["r"], config_hash="h",
                  encodings={"g": [0, 1], "r": ["a", "b"], "w": [5]})  # fmt: skip
    result = export_modifier(run, tmp_path / "repo", "m", max_batch_size=8)
    meta = json.loads((result.version_dir / "export.json").read_text())
    assert meta["classes"] == {"g": [0, 1], "r": ["a", "b"]}  # the judged attributes only
