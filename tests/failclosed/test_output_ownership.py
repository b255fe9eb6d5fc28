"""Ownership of outputs: `mass anonymize` replaces only directories it wrote (the
``_release.json`` / ``_quarantine.json`` marker) or paths that do not exist; never the input,
a parent or child of it, or the other output; files, symbolic links and mount points are
refused. Every refusal happens up front (the server URL is a closed port: a check that let the
job start would fail with ServingError instead), names the path, leaves every user file
byte-identical and leaves nothing behind (no staging, no report).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from mass.errors import OutputPathError
from mass.formats import QUARANTINE_MARKER, RELEASE_MARKER
from mass.serving import free_port


@dataclass(frozen=True)
class Case:
    name: str
    # (tmp dir, input path) -> (extra argv, the path the message must name, its wording)
    build: Callable[[Path, Path], tuple[list[str], str, str]]


def _notes(d: Path) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "todo.txt").write_text("my notes\n")
    (d / "draft.parquet").write_bytes(b"not ours either")
    return d


def _ours(d: Path) -> Path:
    """A previous release of ours (what the symlink case points at)."""
    d.mkdir()
    (d / RELEASE_MARKER).write_text('{"format": "mass-release/1"}\n')
    return d


def _input_dir(t: Path, src: Path) -> Path:
    d = t / "data" / "in"
    d.mkdir(parents=True)
    os.replace(src, d / "part-0.parquet")
    return d


def _symlink(t: Path, target: Path) -> Path:
    link = t / "release"
    link.symlink_to(target, target_is_directory=True)
    return link


CASES = [
    Case("output-is-the-input-directory",
         lambda t, s: (["--input", str(d := _input_dir(t, s)), "--output", str(d)],
                       str(d), "is the input")),
    Case("output-is-a-parent-of-the-input",
         lambda t, s: (["--input", str(_input_dir(t, s)), "--output", str(t / "data")],
                       str(t / "data"), "contains the input")),
    Case("output-is-a-child-of-the-input",
         lambda t, s: (["--input", str(d := _input_dir(t, s)), "--output", str(d / "release")],
                       str(d / "release"), "lies inside the input")),
    Case("output-contains-files-of-an-input-glob",
         lambda t, s: (["--input", str(_input_dir(t, s) / "*.parquet"), "--output",
                        str(t / "data")], str(t / "data"), "contains the input")),
    Case("output-is-the-input-file",
         lambda t, s: (["--output", str(s)], str(s), "is the input")),
    Case("output-is-a-folder-of-notes",
         lambda t, s: (["--output", str(_notes(t / "notes"))], str(t / "notes"),
                       f"without the {RELEASE_MARKER} marker")),
    Case("output-is-an-empty-folder-not-ours",
         lambda t, s: ((t / "empty").mkdir() or ["--output", str(t / "empty")],
                       str(t / "empty"), f"without the {RELEASE_MARKER} marker")),
    Case("output-holds-only-a-quarantine-marker",
         lambda t, s: ((t / "q").mkdir() or (t / "q" / QUARANTINE_MARKER).write_text(
             '{"format": "mass-quarantine/1"}') and ["--output", str(t / "q")],
                       str(t / "q"), f"without the {RELEASE_MARKER} marker")),
    Case("quarantine-is-a-folder-of-notes",  # refused even though no row would be quarantined
         lambda t, s: (["--output", str(t / "release"), "--quarantine",
                        str(_notes(t / "notes"))], str(t / "notes"),
                       f"without the {QUARANTINE_MARKER} marker")),
    Case("quarantine-is-a-release-of-ours",
         lambda t, s: (["--output", str(t / "release"), "--quarantine", str(_ours(t / "old"))],
                       str(t / "old"), f"without the {QUARANTINE_MARKER} marker")),
    Case("quarantine-is-the-input-file",
         lambda t, s: (["--output", str(t / "release"), "--quarantine", str(s)],
                       str(s), "is the input")),
    Case("output-is-an-existing-file",
         lambda t, s: ((t / "release").write_text("a file\n") and ["--output",
                       str(t / "release")], str(t / "release"), "is an existing file")),
    Case("output-is-a-symlink-to-a-release-of-ours",
         lambda t, s: (["--output", str(_symlink(t, _ours(t / "real")))],
                       str(t / "release"), "is a symbolic link")),
    Case("output-is-a-dangling-symlink",
         lambda t, s: (["--output", str(_symlink(t, t / "nowhere"))],
                       str(t / "release"), "is a symbolic link")),
    Case("output-is-a-mount-point",
         lambda t, s: (["--output", "/proc"], "/proc", "is a mount point")),
    Case("output-equals-quarantine",
         lambda t, s: (["--output", str(t / "x"), "--quarantine", str(t / "x")],
                       str(t / "x"), "are the same directory")),
    Case("quarantine-inside-output",
         lambda t, s: (["--output", str(t / "x"), "--quarantine", str(t / "x" / "q")],
                       str(t / "x" / "q"), "are nested")),
    Case("report-inside-output",
         lambda t, s: (["--output", str(t / "x"), "--report", str(t / "x" / "rep")],
                       str(t / "x" / "rep"), "lies inside --output")),
    Case("report-is-an-existing-file",
         lambda t, s: ((t / "rep").write_text("mine\n") and ["--output", str(t / "x"),
                       "--report", str(t / "rep")], str(t / "rep"), "is an existing file")),
]  # fmt: skip


def _tree(root: Path) -> dict[str, bytes | str]:
    """Every entry under ``root`` (links by target, files by bytes, dirs by name)."""
    out: dict[str, bytes | str] = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(dirpath) / name
            key = str(p.relative_to(root))
            if p.is_symlink():
                out[key] = f"-> {os.readlink(p)}"
            elif p.is_file():
                out[key] = p.read_bytes()
            else:
                out[key] = "dir"
    return out


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_job_refuses_a_path_it_does_not_own_before_any_work(case, tmp_path, fc, fc_repo):
    src = tmp_path / "in.parquet"
    fc.write_input(src)
    extra, path, wording = case.build(tmp_path, src)
    argv = ["anonymize", "--input", str(src), "--model", "mod", "--repository",
            str(fc_repo / "repo"), "--triton-url", f"127.0.0.1:{free_port()}", *extra]  # fmt: skip
    before = _tree(tmp_path)
    with pytest.raises(OutputPathError) as info:
        fc.mass_command(argv)
    err = info.value
    assert type(err) is OutputPathError
    assert path in str(err) and wording in str(err), str(err)
    assert _tree(tmp_path) == before  # every user file and link byte-identical, nothing added
    leaked = [p for p in tmp_path.rglob("*") if ".tmp-" in p.name or ".old-" in p.name]
    assert leaked == []


def test_the_cli_prints_the_refusal_and_exits_2(tmp_path, fc, fc_repo, capsys):
    from mass.cli import main

    src = tmp_path / "in.parquet"
    fc.write_input(src)
    notes = _notes(tmp_path / "notes")
    rc = main(["anonymize", "--input", str(src), "--output", str(notes), "--model", "mod",
               "--repository", str(fc_repo / "repo"), "--no-audit"])  # fmt: skip
    assert rc == 2
    assert f"error: OutputPathError: --output {notes}:" in capsys.readouterr().err
    assert sorted(os.listdir(notes)) == ["draft.parquet", "todo.txt"]
