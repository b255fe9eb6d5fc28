"""Input path rules (mass.io.expand_paths): literal paths first, globs only for specs that do
not exist, ``_``/``.``-prefixed files and directories skipped like Spark/Hadoop/pyarrow."""

from __future__ import annotations

import logging

import pyarrow.dataset as ds
import pytest

from mass.errors import MissingInputError
from mass.io import expand_paths
from mass.testing.stand_ins import write_embeddings


def _write(path, rows=5, offset=0):
    path.parent.mkdir(parents=True, exist_ok=True)
    write_embeddings(str(path), rows=rows, dim=4, id_offset=offset)
    return str(path)


def test_an_existing_name_with_glob_characters_is_that_file_not_a_pattern(tmp_path):
    literal = _write(tmp_path / "scores[1].parquet")
    _write(tmp_path / "scores1.parquet")  # what the name matches as a glob
    assert expand_paths(literal) == [literal]
    star = _write(tmp_path / "a*b?.parquet")
    _write(tmp_path / "axxbz.parquet")
    assert expand_paths(star) == [star]


def test_a_spec_that_does_not_exist_is_a_glob(tmp_path):
    a, b = _write(tmp_path / "p1.parquet"), _write(tmp_path / "p2.parquet")
    assert expand_paths(str(tmp_path / "p[12].parquet")) == [a, b]
    assert expand_paths(str(tmp_path / "p*.parquet")) == [a, b]
    with pytest.raises(MissingInputError, match="no such file"):
        expand_paths(str(tmp_path / "p3.parquet"))


def _spark_output(root):
    """A Spark job's output directory, mid-write: visible parts and in-progress/meta files."""
    good = [_write(root / "part-0.parquet"), _write(root / "sub" / "part-1.parquet", offset=5)]
    _write(root / "_temporary" / "0" / "task" / "part-2.parquet", offset=10)
    _write(root / ".staging" / "part-3.parquet", offset=15)
    _write(root / ".part-4.parquet", offset=20)
    _write(root / "_part-5.parquet", offset=25)
    (root / "_SUCCESS").write_text("")
    (root / "notes.txt").write_text("not data")
    return good


def test_a_directory_skips_underscore_and_dot_files_and_directories_and_logs_the_count(
    tmp_path, caplog
):
    good = _spark_output(tmp_path / "out")
    with caplog.at_level(logging.INFO, logger="mass.io"):
        assert expand_paths(str(tmp_path / "out")) == good
        assert expand_paths(str(tmp_path / "out")) == good
    lines = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert len(lines) == 1  # once, however often the job expands the spec
    assert "skipped 5 file(s) under '_'/'.'-prefixed names and 1 not named *.parquet" in lines[0]


def test_the_directory_rule_agrees_with_pyarrow_datasets(tmp_path):
    good = _spark_output(tmp_path / "out")
    (tmp_path / "out" / "notes.txt").unlink()  # pyarrow would try to read it; we skip it
    assert sorted(ds.dataset(str(tmp_path / "out"), format="parquet").files) == good


def test_globs_skip_hidden_names_below_their_literal_prefix(tmp_path):
    good = _spark_output(tmp_path / "_out")  # a '_' in the literal prefix is the user's choice
    assert expand_paths(str(tmp_path / "_out" / "**" / "*.parquet")) == good
    other = _spark_output(tmp_path / "out2")
    assert expand_paths(str(tmp_path / "o?t2")) == other  # a matched directory is walked
    with pytest.raises(MissingInputError, match="1 skipped"):  # like Hadoop's globStatus
        expand_paths(str(tmp_path / "_o?t"))


def test_an_explicitly_named_hidden_file_is_used(tmp_path):
    hidden = _write(tmp_path / ".x.parquet")
    assert expand_paths(hidden) == [hidden]


def test_a_directory_of_only_skipped_files_says_what_was_skipped(tmp_path):
    _write(tmp_path / "d" / "_temporary" / "part-0.parquet")
    (tmp_path / "d" / "_SUCCESS").write_text("")
    with pytest.raises(MissingInputError, match=r"matches no Parquet file \(2 skipped"):
        expand_paths(str(tmp_path / "d"))
