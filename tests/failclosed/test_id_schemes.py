"""Public id schemes are read by the id judges: a character position of a string id
(codice-fiscale-like ids, whose characters 10-11 carry the day of birth plus 40 for women)
and an integer id's value modulo a prime up to 100 (``id mod 11`` carrying gender) fail the
gate naming the id column; nothing is published. Ids released verbatim are named loudly in
the job's summary and in _RELEASE.md."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beam_pipelines import anonymize
from mass.embeddings import embedding_array
from mass.errors import AuditFailedError
from mass.testing.stand_ins import PinDim
from transforms.inference.function import FunctionModelHandler

DIM, ROWS = 16, 2000
INFO = {"name": "ids", "version": 1, "sha256": "abc", "method": "test",
        "suppress": ["gender"], "preserve": [], "config_hash": "h", "dim": DIM}  # fmt: skip
LETTERS = np.array(list("ABCDEFGHIJKLMNOPQRSTUVWXYZ"))


PIN = PinDim(0, 5.0)


def _fiscal(gender, rng):
    """RSSMRA85T50A562S-like: surname, name, year, month letter, day (+40 for women),
    place, check letter."""
    n = gender.size
    letters = lambda k: ["".join(r) for r in rng.choice(LETTERS, (n, k))]  # noqa: E731
    day = rng.integers(1, 29, n) + 40 * gender
    months = np.array(list("ABCDEHLMPRST"))[rng.integers(0, 12, n)]
    ids = [f"{a}{y:02d}{m}{d:02d}{p}{q:03d}{c}" for a, y, m, d, p, q, c in zip(
        letters(6), rng.integers(0, 100, n), months, day, LETTERS[rng.integers(0, 26, n)],
        rng.integers(0, 1000, n), LETTERS[rng.integers(0, 26, n)], strict=True)]  # fmt: skip
    assert len(set(ids)) == n
    return pa.array(ids)


def _mod11(gender, rng):
    """Residues 0-4 of 11 for men, 5-9 for women; nothing in any modulus the judges read."""
    base = rng.choice(10**7, gender.size, replace=False)
    return pa.array(11 * base + rng.integers(0, 5, gender.size) + 5 * gender, pa.int64())


def _write(path, ids_of):
    rng = np.random.default_rng(4)
    gender = rng.integers(0, 2, ROWS)
    x = 0.3 * rng.normal(size=(ROWS, DIM))
    x[:, 0] += 3.0 * gender
    cols = {"id": ids_of(gender, rng), "emb": embedding_array(x.astype(np.float32)),
            "gender": pa.array(gender)}  # fmt: skip
    pq.write_table(pa.table(cols), str(path))


def _run(tmp_path, src, out, *flags):
    (tmp_path / "quick.yaml").write_text("audit:\n  folds: 3\n  curve: false\n"
                                         "  gate_key_compromised: false\n")  # fmt: skip
    handler = FunctionModelHandler(PIN, output_dim=DIM, keep_input_as=anonymize.INPUT_COPY)
    argv = ["--input", str(src), "--output", str(out), "--model", "ids",
            "--policy", str(tmp_path / "quick.yaml"), "--report", str(tmp_path / "report"),
            *flags]  # fmt: skip
    return anonymize.run(argv, model_handler=handler, model_info=INFO)


@pytest.mark.parametrize("ids_of", [_fiscal, _mod11], ids=["fiscal-code", "mod11"])
@pytest.mark.slow
def test_public_id_schemes_fail_the_gate(tmp_path, ids_of):
    src, out = tmp_path / "in.parquet", tmp_path / "release"
    _write(src, ids_of)
    with pytest.raises(AuditFailedError) as info:
        _run(tmp_path, src, out)
    assert "the id column 'id' alone predicts it" in str(info.value)
    assert not os.path.exists(out)


def test_verbatim_ids_are_named_loudly_in_the_summary_and_the_datasheet(tmp_path, capsys):
    src, out = tmp_path / "in.parquet", tmp_path / "release"
    rng = np.random.default_rng(5)
    _write(src, lambda g, r: pa.array(rng.permutation(g.size), pa.int64()))
    _run(tmp_path, src, out)
    said = capsys.readouterr().out
    assert "WARNING: ids released verbatim" in said and "--pseudonymize-ids" in said
    md = (out / "_RELEASE.md").read_text()
    assert "WARNING: ids released verbatim" in md and "--pseudonymize-ids" in md
