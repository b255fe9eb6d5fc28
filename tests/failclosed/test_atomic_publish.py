"""Atomic publication: a job SIGKILLed at any point leaves the previous release or none, and a
re-run produces the same bytes as an uninterrupted run; the release's own invariants hold."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from transforms.release import recover_output, swap_into_place

ROWS = 20_000
CLI = "import sys; from mass.cli import main; sys.exit(main(sys.argv[1:]))"


def _argv(src, out, server, repo):
    return ["anonymize", "--input", str(src), "--output", str(out), "--model", "mod",
            "--repository", str(repo), "--triton-url", server.grpc_url, "--batch-rows", "500",
            "--shards", "8"]  # fmt: skip


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, fc):
    base = tmp_path_factory.mktemp("atomic")
    fc.write_input(base / "in.parquet", rows=ROWS, row_group=5000, image=None, note=None)
    fc.write_input(base / "old.parquet", rows=ROWS, seed=1, row_group=5000, image=None, note=None)
    return base


def _staging_exists(out: Path) -> bool:
    return any(out.parent.glob(f"{out.name}.tmp-*"))


@pytest.mark.triton
@pytest.mark.slow
@pytest.mark.parametrize("phase", ["inference", "publication"])
def test_sigkilled_job_leaves_previous_release_and_rerun_is_byte_identical(
    phase, inputs, tmp_path, request, fc, fc_repo
):
    server = request.getfixturevalue("fc_server")
    repo = fc_repo / "repo"
    clean, out = tmp_path / "clean", tmp_path / "release"
    assert fc.mass_command(_argv(inputs / "in.parquet", clean, server, repo)) == 0
    fc.mass_command(_argv(inputs / "old.parquet", out, server, repo))  # the previous release
    previous, expected = fc.snapshot(out), fc.snapshot(clean)
    assert previous != expected

    proc = fc.run_script(CLI, *_argv(inputs / "in.parquet", out, server, repo),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    served = fc.requests_served(server)
    if phase == "publication":  # the writers have started staging the new release
        ready = _staging_exists
    else:  # a few batches went through the model; the staging only appears at the end
        ready = lambda o: fc.requests_served(server) >= served + 5  # noqa: E731
    deadline = time.monotonic() + 300
    while proc.poll() is None and not ready(out) and time.monotonic() < deadline:
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL, "the job finished before it was killed"

    after_crash = fc.snapshot(out)
    assert after_crash in (previous, expected)  # whole previous or whole new, never partial
    # Re-run: leftovers of the killed job are cleared, the output equals the clean run's.
    assert fc.mass_command(_argv(inputs / "in.parquet", out, server, repo)) == 0
    assert fc.snapshot(out) == expected
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
