"""Stated and true (issue 23, item 9): ``_release.json`` and ``_RELEASE.md`` are byte-stable
across re-runs of the same inputs (the audit's time and the paths it read, a staging directory
named by pid among them, stay in the report's audit.json), and an --output/--report under a
regular file is refused before any work, naming the flag, with nothing published."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beam_pipelines import anonymize
from mass.embeddings import embedding_array
from mass.errors import OutputPathError
from mass.testing.stand_ins import PinDim
from transforms.inference.function import FunctionModelHandler

DIM, ROWS = 16, 2000
INFO = {"name": "st", "version": 1, "sha256": "abc", "method": "test",
        "suppress": ["gender"], "preserve": [], "config_hash": "h", "dim": DIM}  # fmt: skip


PIN = PinDim(0, 1.0)


def _run(tmp_path, out, report):
    src = tmp_path / "in.parquet"
    if not src.exists():
        rng = np.random.default_rng(4)
        gender = rng.integers(0, 2, ROWS)
        x = 0.3 * rng.normal(size=(ROWS, DIM))
        x[:, 0] += 3.0 * gender
        pq.write_table(pa.table({"id": pa.array(rng.permutation(ROWS)), "gender": gender,
                                 "emb": embedding_array(x.astype(np.float32))}), str(src))  # fmt: skip
        # the stand-in names no modifier: no key view to judge, which the built-in policy refuses
        (tmp_path / "quick.yaml").write_text("audit:\n  folds: 3\n  curve: false\n"
                                             "  gate_key_compromised: false\n")  # fmt: skip
    handler = FunctionModelHandler(PIN, output_dim=DIM, keep_input_as=anonymize.INPUT_COPY)
    argv = ["--input", str(src), "--output", str(out), "--model", "st",
            "--policy", str(tmp_path / "quick.yaml"), "--report", str(report)]  # fmt: skip
    return anonymize.run(argv, model_handler=handler, model_info=INFO)


@pytest.mark.slow
def test_a_rerun_gives_the_same_release_manifest_bytes(tmp_path):
    out, report = tmp_path / "release", tmp_path / "report"
    _run(tmp_path, out, report)
    first = {n: (out / n).read_bytes() for n in ("_release.json", "_RELEASE.md")}
    _run(tmp_path, out, report)
    again = {n: (out / n).read_bytes() for n in ("_release.json", "_RELEASE.md")}
    assert again == first
    assert b'"time"' not in first["_release.json"] and b".tmp-" not in first["_release.json"]


@pytest.mark.parametrize("flag", ["--report", "--output"])
def test_a_path_under_a_regular_file_is_refused_up_front(tmp_path, flag):
    blocker = tmp_path / "plain.txt"
    blocker.write_text("not a directory\n")
    out, report = tmp_path / "release", tmp_path / "report"
    bad = blocker / "sub"
    with pytest.raises(OutputPathError) as info:
        _run(tmp_path, bad if flag == "--output" else out, bad if flag == "--report" else report)
    assert str(info.value) == (
        f"{flag} {bad}: {blocker} is a file, not a directory, so nothing can be written under "
        f"it; choose a {flag} path under a directory; nothing was read or published"
    )
    assert not out.exists() and not report.exists() and blocker.read_text() == "not a directory\n"
    assert sorted(os.listdir(tmp_path)) == ["in.parquet", "plain.txt", "quick.yaml"]
