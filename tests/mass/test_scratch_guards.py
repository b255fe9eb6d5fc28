"""Sweeping leftovers never removes a running owner's private directory (mass/scratch.py,
issue 37): only directories whose owner process is gone are swept."""

from __future__ import annotations

import json
import subprocess
import sys

from mass.scratch import MARKER, private_dir, sweep


def test_a_live_owners_directory_is_kept_and_a_dead_owners_removed(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)  # re-read TMPDIR
    live = private_dir("mass-guard-")  # owned by this (running) process
    assert live.parent == tmp_path
    (live / "rows.arrow").write_bytes(b"raw data")
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)  # fmt: skip
    dead = tmp_path / "mass-guard-dead"
    dead.mkdir(mode=0o700)
    (dead / MARKER).write_text(json.dumps({"pid": int(child.stdout), "start": 1.0}))
    assert sweep("mass-guard-", str(tmp_path)) == [dead]
    assert not dead.exists()
    assert (live / "rows.arrow").read_bytes() == b"raw data"
    assert sweep("mass-guard-", str(tmp_path)) == []
