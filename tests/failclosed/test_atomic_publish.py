"""Atomic publication: a job SIGKILLed at any point leaves the previous release or the whole
new one, never a partial one, and a re-run produces the same bytes as an uninterrupted run;
the release's own invariants hold.

The publication kills happen INSIDE the swap: the job's test-only hook
(``mass.release.commit.KILL_AT_ENV``) SIGKILLs the job right before the directory exchange
(staged, verified, marker written) or right after it (before the previous release is
removed), so both outcomes are reached on every run, not by timing luck."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from mass.formats import RELEASE_MARKER
from mass.release.commit import KILL_AT_ENV, recover_output, swap_into_place

ROWS = 20_000
CLI = "import sys; from mass.cli import main; sys.exit(main(sys.argv[1:]))"


def _argv(src, out, server, repo):
    return ["anonymize", "--input", str(src), "--output", str(out), "--model", "mod",
            "--repository", str(repo), "--triton-url", server.grpc_url, "--batch-rows", "500",
            "--shards", "8", "--no-audit"]  # fmt: skip


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, fc):
    base = tmp_path_factory.mktemp("atomic")
    fc.write_input(base / "in.parquet", rows=ROWS, row_group=5000, image=None, note=None)
    fc.write_input(base / "old.parquet", rows=ROWS, seed=1, row_group=5000, image=None, note=None)
    return base


def _job(argv, kill_at: str | None = None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    if kill_at:
        env[KILL_AT_ENV] = kill_at
    return subprocess.Popen([sys.executable, "-c", CLI, *argv], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip


def _assert_complete_release(out: Path, rows: int) -> None:
    """The manifest matches the files: every part's sha256 and row count, nothing extra."""
    manifest = json.loads((out / RELEASE_MARKER).read_text())
    assert manifest["format"] == "mass-release/1" and manifest["rows"] == rows
    parts = sorted(p.name for p in out.glob("part-*.parquet"))
    assert [p["file"] for p in manifest["parts"]] == parts and len(parts) == 8
    for p in manifest["parts"]:
        assert hashlib.sha256((out / p["file"]).read_bytes()).hexdigest() == p["sha256"]
        assert pq.ParquetFile(out / p["file"]).metadata.num_rows == p["rows"]
    assert sorted(os.listdir(out)) == sorted([*parts, RELEASE_MARKER, "_RELEASE.md"])
    assert pq.read_table(out).num_rows == rows


@pytest.mark.triton
@pytest.mark.slow
@pytest.mark.parametrize("phase", ["inference", "before-swap", "after-swap"])
def test_sigkilled_job_leaves_previous_or_whole_new_release_and_rerun_is_byte_identical(
    phase, inputs, tmp_path, request, fc, fc_repo
):
    server = request.getfixturevalue("fc_server")
    repo = fc_repo / "repo"
    clean, out = tmp_path / "clean", tmp_path / "release"
    assert fc.mass_command(_argv(inputs / "in.parquet", clean, server, repo)) == 0
    fc.mass_command(_argv(inputs / "old.parquet", out, server, repo))  # the previous release
    previous, expected = fc.snapshot(out), fc.snapshot(clean)
    assert previous != expected

    argv = _argv(inputs / "in.parquet", out, server, repo)
    if phase == "inference":  # a few batches went through the model, nothing staged yet
        served = fc.requests_served(server)
        proc = _job(argv)
        deadline = time.monotonic() + 300
        while (proc.poll() is None and fc.requests_served(server) < served + 5
               and time.monotonic() < deadline):  # fmt: skip
            time.sleep(0.002)
        proc.send_signal(signal.SIGKILL)
    else:  # the job kills itself inside the swap
        proc = _job(argv, kill_at=phase)
    assert proc.wait(timeout=300) == -signal.SIGKILL, "the job finished before it was killed"

    after_crash = fc.snapshot(out)
    if phase == "after-swap":  # the exchange happened: the whole new release, valid
        assert after_crash == expected
        _assert_complete_release(out, ROWS)
        # the displaced previous release is still in the killed job's staging directory
        assert [n.split("-")[0] for n in fc.leftovers(out)] == ["release.tmp"]
    else:  # killed before the exchange: the previous release, byte for byte
        assert after_crash == previous
    # Re-run: leftovers of the killed job are cleared, the output equals the clean run's.
    assert fc.mass_command(argv) == 0
    assert fc.snapshot(out) == expected
    _assert_complete_release(out, ROWS)
    assert fc.leftovers(out) == []
    assert not list(tmp_path.glob("release_quarantine.*-*"))


@pytest.mark.triton
def test_the_published_release_satisfies_its_invariants(inputs, tmp_path, request, fc, fc_repo):
    """Read back from the files: ids one-to-one with the input, every embedding modified,
    only id + embedding columns, provenance metadata on every part."""
    server = request.getfixturevalue("fc_server")
    out = tmp_path / "release"
    fc.mass_command(_argv(inputs / "in.parquet", out, server, fc_repo / "repo"))
    src = pq.read_table(inputs / "in.parquet").sort_by("id")
    rel = pq.read_table(out).sort_by("id")
    assert rel.column_names == ["id", "emb"]
    assert rel.column("id").equals(src.column("id"))
    x = np.stack(src.column("emb").to_numpy(zero_copy_only=False))
    y = np.stack(rel.column("emb").to_numpy(zero_copy_only=False))
    assert np.isfinite(y).all() and np.all(np.any(x != y, axis=1))
    parts = sorted(out.glob("part-*.parquet"))
    assert parts
    for part in parts:
        meta = pq.read_schema(part).metadata
        assert meta[b"mass.model"] == b"mod" and len(meta[b"mass.sha256"]) == 64


def _dir(path: Path, text: str) -> Path:
    path.mkdir()
    (path / "part-00000-of-00001.parquet").write_text(text)
    return path


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_recovery_puts_back_a_release_displaced_by_a_killed_job(tmp_path, fc):
    """Crash between the two renames of the non-atomic fallback: OUT is missing and the
    previous release sits under ``OUT.old-<dead pid>-...``; the next job restores it."""
    out, pid = tmp_path / "release", _dead_pid()
    _dir(tmp_path / f"release.old-{pid}-abc", "previous")
    _dir(tmp_path / f"release.tmp-{pid}-def", "half written")
    touched = recover_output(str(out))
    assert len(touched) == 2
    assert (out / "part-00000-of-00001.parquet").read_text() == "previous"
    assert fc.leftovers(out) == []


def test_recovery_leaves_a_live_job_alone(tmp_path, fc):
    out = _dir(tmp_path / "release", "current")
    live = _dir(tmp_path / f"release.tmp-{os.getppid()}-abc", "someone else's staging")
    assert recover_output(str(out)) == []
    assert live.exists() and (out / "part-00000-of-00001.parquet").read_text() == "current"


def test_swap_exchanges_whole_directories_and_drops_the_previous(tmp_path, fc):
    out = _dir(tmp_path / "release", "previous")
    staging = _dir(tmp_path / "release.tmp-1-x", "new")
    (out / "only-in-previous.parquet").write_text("stale")
    swap_into_place(str(staging), str(out))
    assert sorted(os.listdir(out)) == ["part-00000-of-00001.parquet"]  # no stale part mixed in
    assert (out / "part-00000-of-00001.parquet").read_text() == "new"
    assert fc.leftovers(out) == [] and not staging.exists()
