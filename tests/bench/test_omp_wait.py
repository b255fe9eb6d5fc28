"""bench/omp_wait.py: each wait policy really reaches the child that fits."""

from __future__ import annotations

import json

import pytest

from bench.omp_wait import main


@pytest.mark.slow
def test_one_line_per_policy_each_child_under_its_own_policy(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")  # as under `mass bench`: not inherited
    out = tmp_path / "omp.json"
    assert main(["--hogs", "0", "--repeat", "1", "--rows", "300", "--dim", "16",
                 "--out", str(out)]) == 0  # fmt: skip
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(d["omp_wait_policy"], d["env"]) for d in lines] == [
        ("default", None), ("PASSIVE", "PASSIVE")]  # fmt: skip
    assert all(d["cpu"] > 0 and d["wall"] > 0 and d["hogs"] == 0 for d in lines)
    assert json.loads(out.read_text())["runs"] == lines
