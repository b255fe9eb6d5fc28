"""bench/memory.py deletes only data directories it wrote (the marker), never a user's."""

from __future__ import annotations

import pytest

from bench import memory


def test_generate_marks_its_directory_and_refuses_a_foreign_one(tmp_path):
    d = memory.generate(str(tmp_path), rows=60, dim=32)
    assert (tmp_path / "d60" / memory.MARKER).is_file()
    assert (tmp_path / "d60" / "labels.parquet").is_file()
    assert memory.generate(str(tmp_path), rows=60, dim=32) == d  # reused, not regenerated
    foreign = tmp_path / "d70"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit, match="not written by this script"):
        memory.generate(str(tmp_path), rows=70, dim=32)
    assert (foreign / "notes.txt").read_text() == "mine"
