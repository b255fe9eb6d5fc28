"""Removing the newest signed version never makes a job serve an older one silently
(issue 23, item 1: rollback). ``mass export`` writes a signed record of the newest version it
exported (``<model>/mass-newest.json``); a job serving "the newest" refuses when the newest
version on disk is older than that record, or when the record is gone although the version
says one was written; ``--model-version N`` serves an older version on purpose, and the
release records the version served."""

from __future__ import annotations

import json
import shutil

import pyarrow.parquet as pq
import pytest

from mass import errors as E
from mass.serving import TritonServer, free_port


def _repo(tmp_path, fc):
    repo = tmp_path / "repo"
    fc.export_mod(tmp_path / "a", repo, seed=0)
    fc.export_mod(tmp_path / "b", repo, seed=1)
    assert json.loads((repo / "mod" / "mass-newest.json").read_text())["version"] == 2
    return repo


@pytest.mark.parametrize("how", ["version removed", "version and record removed"])
def test_a_removed_newest_version_is_refused_before_any_work(how, tmp_path, fc):
    repo = _repo(tmp_path, fc)
    shutil.rmtree(repo / "mod" / "2")
    expected = "newest signed export is version 2 .* --model-version 1"
    if how == "version and record removed":
        (repo / "mod" / "mass-newest.json").unlink()
        expected = "mass-newest.json: missing, but version 1 was exported with one"
    src, out = tmp_path / "in.parquet", tmp_path / "release"
    fc.write_input(src)
    argv = ["anonymize", "--input", str(src), "--output", str(out), "--model", "mod",
            "--repository", str(repo), "--no-audit", "--triton-url", f"127.0.0.1:{free_port()}"]  # fmt: skip
    with pytest.raises(E.ModelRollbackError, match=expected):
        fc.mass_command(argv)
    assert not out.exists() and fc.leftovers(out) == []
    with pytest.raises(E.ModelRollbackError, match=expected):  # mass serve / extract / bench
        TritonServer(repo, models=["mod"]).start()
    # naming the version is the way to serve it on purpose (the closed port is the next error)
    with pytest.raises(E.ServingError, match="unreachable"):
        fc.mass_command([*argv, "--model-version", "1"])


def test_a_forged_record_is_refused(tmp_path, fc):
    repo = _repo(tmp_path, fc)
    path = repo / "mod" / "mass-newest.json"
    rec = json.loads(path.read_text())
    path.write_text(json.dumps({**rec, "version": 1}))  # "roll back" the record without the key
    with pytest.raises(E.ChecksumMismatchError, match="mass-newest.json: signature does not"):
        TritonServer(repo, models=["mod"]).start()


@pytest.mark.slow
@pytest.mark.triton
def test_an_older_version_named_on_purpose_is_served_and_recorded(tmp_path, fc):
    repo = _repo(tmp_path, fc)
    shutil.rmtree(repo / "mod" / "2")
    src, out = tmp_path / "in.parquet", tmp_path / "release"
    fc.write_input(src)
    fc.mass_command(["anonymize", "--input", str(src), "--output", str(out), "--model", "mod",
                     "--repository", str(repo), "--no-audit", "--model-version", "1"])  # fmt: skip
    part = next(out.glob("part-*.parquet"))
    assert pq.read_schema(part).metadata[b"mass.model_version"] == b"1"


def _anonymize_argv(tmp_path, fc, repo) -> list[str]:
    src, out = tmp_path / "in.parquet", tmp_path / "release"
    fc.write_input(src)
    return ["anonymize", "--input", str(src), "--output", str(out), "--model", "mod",
            "--repository", str(repo), "--no-audit", "--triton-url", f"127.0.0.1:{free_port()}"]  # fmt: skip


def test_a_replayed_older_record_is_refused(tmp_path, fc):
    """v2 deleted and v1's own signed record restored (from a backup, the DVC cache): the
    repository looks as it did before v2, but the owner's ledger remembers v2."""
    repo = tmp_path / "repo"
    fc.export_mod(tmp_path / "a", repo, seed=0)
    old = (repo / "mod" / "mass-newest.json").read_bytes()
    fc.export_mod(tmp_path / "b", repo, seed=1)
    v2 = json.loads((repo / "mod" / "2" / "export.json").read_text())
    assert v2["predecessor"]["version"] == 1  # each export names the one before it
    shutil.rmtree(repo / "mod" / "2")
    (repo / "mod" / "mass-newest.json").write_bytes(old)
    argv = _anonymize_argv(tmp_path, fc, repo)
    expected = r"mass-newest.json: a replayed record: it names version 1, but version 2"
    with pytest.raises(E.ModelRollbackError, match=expected):
        fc.mass_command(argv)
    assert not (tmp_path / "release").exists()
    with pytest.raises(E.ModelRollbackError, match=expected):
        TritonServer(repo, models=["mod"]).start()
    with pytest.raises(E.ServingError, match="unreachable"):  # on purpose: allowed
        fc.mass_command([*argv, "--model-version", "1"])


def test_a_record_of_the_same_name_from_another_repository_is_refused(tmp_path, fc):
    """Same model name, same key, another repository's v1 record over this one's after its
    v2 was deleted: the record binds the export (weights and lineage), not the number alone."""
    repo, other = tmp_path / "repo", tmp_path / "other"
    fc.export_mod(tmp_path / "a", repo, seed=0)
    fc.export_mod(tmp_path / "b", repo, seed=1)
    fc.export_mod(tmp_path / "c", other, seed=2)
    shutil.rmtree(repo / "mod" / "2")
    shutil.copy(other / "mod" / "mass-newest.json", repo / "mod" / "mass-newest.json")
    with pytest.raises(
        E.ModelRollbackError, match=r"names version 1 with weights .* another export"
    ):
        fc.mass_command(_anonymize_argv(tmp_path, fc, repo))


def test_another_models_record_copied_over_is_refused(tmp_path, fc):
    repo = tmp_path / "repo"
    fc.export_mod(tmp_path / "a", repo, seed=0)
    fc.export_mod(tmp_path / "b", repo, seed=1, name="twin")
    shutil.copy(repo / "twin" / "mass-newest.json", repo / "mod" / "mass-newest.json")
    with pytest.raises(E.ChecksumMismatchError, match="mass-newest.json: signature does not"):
        TritonServer(repo, models=["mod"]).start()


def test_a_copy_exported_on_elsewhere_never_makes_the_original_look_replayed(tmp_path, fc):
    """The ledger is per model directory: a copy of `mod` (same lineage) given a v2 elsewhere
    leaves the original's v1 the newest of its own directory."""
    repo = tmp_path / "repo"
    fc.export_mod(tmp_path / "a", repo, seed=0)
    copy = fc.copy_tree(repo / "mod", tmp_path / "copy" / "mod").parent
    fc.export_mod(tmp_path / "b", copy, seed=1)
    with pytest.raises(E.ServingError, match="unreachable"):  # past every rollback check
        fc.mass_command(_anonymize_argv(tmp_path, fc, repo))
