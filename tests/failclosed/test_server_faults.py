"""Fault injection on the real Triton server: SIGKILL it in the middle of an anonymize job.

The two allowed outcomes, both shown:
(a) with retries, the job rides out the crash and the restart: retries > 0, every row is
    released exactly once and the files equal an uninterrupted run's, byte for byte;
(b) without retries, the job fails with :class:`ServingError` and publishes nothing (the
    previous release stays byte-identical, nothing staged is left).
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pyarrow.parquet as pq
import pytest

from beam_pipelines import anonymize
from mass.errors import ServingError

pytestmark = [pytest.mark.triton, pytest.mark.slow]
ROWS = 40_000


@pytest.fixture(scope="module")
def fault_server(fc_repo, triton_server_factory, tmp_path_factory):
    """A server of its own (it gets killed) serving only the good modifier."""
    repo = tmp_path_factory.mktemp("fault") / "repo"
    repo.mkdir()
    import shutil

    shutil.copytree(fc_repo / "repo" / "mod", repo / "mod")
    return triton_server_factory(repo), repo


@pytest.fixture(scope="module")
def big_input(tmp_path_factory, fc):
    path = tmp_path_factory.mktemp("big") / "in.parquet"
    fc.write_input(path, rows=ROWS, row_group=10_000, image=None, note=None)
    return str(path)


def _kill_when_busy(fc, server, *, after: float, restart: bool, log: list) -> threading.Thread:
    """SIGKILL the server once it has served ``after`` more requests; optionally restart."""
    start = fc.requests_served(server)

    def killer():
        deadline = time.monotonic() + 300
        while fc.requests_served(server) < start + after and time.monotonic() < deadline:
            time.sleep(0.05)
        log.append(("killed at requests", fc.requests_served(server) - start))
        server.kill()
        if restart:
            time.sleep(1.0)  # the job sees a dead server for a while
            t0 = time.monotonic()
            server.restart()
            log.append(("restart seconds", round(time.monotonic() - t0, 1)))

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    return thread


def _argv(src, out, server, *flags):
    return ["--input", src, "--output", str(out), "--model", "mod", "--repository",
            str(server[1]), "--triton-url", server[0].grpc_url, "--batch-rows", "250",
            "--shards", "2", "--no-audit", *flags]  # fmt: skip


def test_killed_and_restarted_server_completes_exactly_once(fault_server, big_input, tmp_path,
                                                            fc):  # fmt: skip
    server = fault_server[0]
    clean = tmp_path / "clean"
    anonymize.run(_argv(big_input, clean, fault_server))
    log: list = []
    out = tmp_path / "faulted"
    killer = _kill_when_busy(fc, server, after=40, restart=True, log=log)
    summary = anonymize.run(_argv(big_input, out, fault_server, "--max-retries", "8"))
    killer.join(timeout=120)
    print("fault log:", log, "summary:", summary)
    assert log and log[0][0] == "killed at requests"
    assert summary["retries"] > 0  # the crash was seen and ridden out
    assert summary["rows_out"] == summary["rows_in"] == ROWS
    ids = pq.read_table(out, columns=["id"]).column("id").to_numpy()
    assert len(ids) == len(np.unique(ids)) == ROWS  # every row exactly once
    assert fc.snapshot(out) == fc.snapshot(clean)  # same bytes as the uninterrupted run


def test_killed_server_without_retries_fails_and_publishes_nothing(fault_server, big_input,
                                                                   tmp_path, fc):  # fmt: skip
    server = fault_server[0]
    out = tmp_path / "release"
    before = fc.fake_previous_release(out)
    log: list = []
    killer = _kill_when_busy(fc, server, after=20, restart=False, log=log)
    try:
        with pytest.raises(ServingError) as info:
            anonymize.run(_argv(big_input, out, fault_server, "--max-retries", "0"))
    finally:
        killer.join(timeout=60)
        server.restart()  # leave a live server to later tests
    print("fault log:", log, "error:", info.value)
    assert "UNAVAILABLE" in str(info.value) and "'mod'" in str(info.value)
    assert fc.snapshot(out) == before
    assert fc.leftovers(out) == []
