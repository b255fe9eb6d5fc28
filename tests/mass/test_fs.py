"""mass.fs: the object-store glob agrees with the local one; atomic writes; local paths keep
their errno. (Object-store behaviour end to end: tests/beam_pipelines/test_object_store.py.)"""

from __future__ import annotations

import glob
import os

import pytest

from mass import fs
from mass.errors import InputError, MissingInputError


@pytest.mark.parametrize("pattern", ["*.parquet", "a/*.parquet", "**/*.parquet", "a/**",
                                     "a/p[12].parquet", "a/p?.parquet", "**/p[!1]*",
                                     "a/*/*.parquet", "**"])  # fmt: skip
def test_the_store_glob_matches_what_the_local_glob_matches(tmp_path, pattern):
    for name in ("x.parquet", "a/p1.parquet", "a/p2.parquet", "a/p3.txt", "a/b/p4.parquet",
                 "a/b/c/p5.parquet", "d/p1.parquet"):  # fmt: skip
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    root = str(tmp_path)
    local = {os.path.relpath(p, root) for p in glob.glob(os.path.join(root, pattern),
                                                         recursive=True)}  # fmt: skip
    local.discard(".")
    every = {os.path.relpath(os.path.join(h, n), root) for h, ds, ns in os.walk(root)
             for n in [*ds, *ns]}  # fmt: skip
    rx = fs._glob_regex(pattern)
    store = {p for p in every if rx.match(p)}
    assert store == {p.rstrip("/") for p in local}


def test_atomic_output_leaves_nothing_on_failure_and_replaces_on_success(tmp_path):
    path = str(tmp_path / "d" / "f.bin")
    fs.write_bytes(path, b"v1")
    with pytest.raises(RuntimeError), fs.atomic_output(path) as f:
        f.write(b"partial")
        raise RuntimeError("killed")
    assert open(path, "rb").read() == b"v1" and os.listdir(tmp_path / "d") == ["f.bin"]
    fs.write_json(path, {"a": 1})
    assert fs.read_json(path) == {"a": 1}


def test_local_paths_keep_their_errno_and_uris_are_told_apart(tmp_path):
    with pytest.raises(FileNotFoundError):
        fs.stat_key(str(tmp_path / "missing"))
    assert not fs.is_remote(str(tmp_path)) and not fs.is_remote("file:///x")
    assert fs.is_remote("s3://b/k") and fs.join("s3://b/k/", "x") == "s3://b/k/x"
    assert fs.normpath("s3://b/k/../y/") == "s3://b/y" and fs.basename("s3://b/k/") == "k"
    with pytest.raises(OSError, match="no rename"):
        fs.replace("s3://b/a", "s3://b/b")


def _three_readers(tmp_path):
    """The JSON objects the product reads: a run's metrics.json, an audit.json, the manifest
    a datasheet merges into; each through its own public reader, (reader, file, error)."""
    from mass.errors import ReleaseError, UnreadableInputError
    from mass.report.datasheet import write_datasheet
    from mass.report.view import read_audit
    from mass.rundir import read_metrics

    def datasheet(d: str) -> None:
        write_datasheet(d, metadata={}, audit=None, report_path=None)

    return [
        (read_metrics, "metrics.json", UnreadableInputError),
        (read_audit, "audit.json", InputError),
        (datasheet, "_release.json", ReleaseError),
    ]


@pytest.mark.parametrize(("text", "what"), [("[1, 2]", "expected a JSON object; "),
                                            ('{"a": ', "not readable JSON (")])  # fmt: skip
def test_every_json_object_reader_names_the_file_with_one_message(tmp_path, text, what):
    for i, (read, name, error) in enumerate(_three_readers(tmp_path)):
        d = tmp_path / str(i)
        d.mkdir()
        (d / name).write_text(text)
        with pytest.raises(error) as got:
            read(str(d))
        assert str(got.value).startswith(f"{d / name}: {what}"), str(got.value)


def test_read_json_object_names_a_missing_file_and_returns_the_object(tmp_path):
    path = str(tmp_path / "x.json")
    with pytest.raises(MissingInputError, match=r"x\.json: missing; do this"):
        fs.read_json_object(path, remedy="do this")
    fs.write_json(path, {"a": [1]})
    assert fs.read_json_object(path, remedy="do this") == {"a": [1]}
