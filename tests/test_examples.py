"""examples/ run as a user runs them (a subprocess, from a clean working directory): the
notebook route (a DataFrame: fit, transform, audit, export) and the Beam route (JSON lines ->
Triton -> gate -> Parquet) on the model the first exported. Both routes must reach the same
audit verdict on the same rows, and the Beam sink writes only when it passes."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _run(script: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MASS_LOCAL_CONFIG": ""}
    return subprocess.run([sys.executable, str(ROOT / "examples" / script), *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=1200)  # fmt: skip


@pytest.fixture(scope="module")
def notebook(tmp_path_factory):
    work = tmp_path_factory.mktemp("notebook")
    done = _run("notebook.py", "--workdir", str(work), cwd=work)
    assert done.returncode in (0, 1), done.stderr[-3000:]  # 1: the audit failed, said so
    return work, done


def test_the_notebook_example_fits_audits_and_exports(notebook):
    work, done = notebook
    verdict = json.loads((work / "report" / "audit.json").read_text())
    assert ("audit PASSED" in done.stdout) == (done.returncode == 0)
    assert verdict["pass"] == (done.returncode == 0)
    exported = json.loads((work / "triton_models" / "mine" / "1" / "export.json").read_text())
    assert exported["suppress"] == ["s"] and exported["preserve"] == ["u"]
    assert (work / "triton_models" / "mine" / "1" / "SHA256SUMS.sig").exists()
    assert len((work / "heldout.jsonl").read_text().splitlines()) == 2000


@pytest.mark.triton
def test_the_beam_example_gates_its_sink_as_the_notebook_audit_judged(notebook):
    work, first = notebook
    out = work / "out"
    done = _run("beam_jsonl.py", "--input", str(work / "heldout.jsonl"), "--labels",
                str(work / "labels.parquet"), "--repository", str(work / "triton_models"),
                "--model", "mine", "--output", str(out), "--report", str(work / "gate"),
                cwd=work)  # fmt: skip
    parts = glob.glob(str(out / "part*"))
    if first.returncode == 0:
        assert done.returncode == 0, done.stderr[-3000:]
        import pyarrow.parquet as pq

        assert sum(pq.read_metadata(p).num_rows for p in parts) == 2000
    else:
        assert done.returncode != 0 and "AuditGate: the audit of" in done.stderr
        assert parts == []
    assert (work / "gate" / "report.html").exists()
