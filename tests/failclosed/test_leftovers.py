"""No raw data left behind (issue 23, item 7).

* The audit's spill (``$TMPDIR/mass-audit-<pid>-*/labels-*.arrow``: ids, labels and the
  original embeddings) is 0700, removed when ``mass audit`` gets SIGTERM mid-spill, and swept
  by the next run when a SIGKILL left it (only directories with our owner marker whose owner
  is dead; a look-alike without the marker is never touched).
* SIGKILL of ``mass anonymize`` while Triton loads its model: no stub of that job remains
  (the processes are the job's own descendants, recorded before the kill) and the next
  server start sweeps the job's ``mass-triton-*`` work directory and its shm regions.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from mass.scratch import MARKER, sweep

AUDIT = """
import sys
import numpy as np, pyarrow as pa, pyarrow.parquet as pq
from mass.audit import AuditRequest, policy_from_dict, run_audit
from mass.embeddings import embedding_array

tmp, n = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)
x = rng.normal(size=(n, 32)).astype(np.float32)
ids, s = np.arange(n, dtype=np.int64), rng.integers(0, 2, n)
pq.write_table(pa.table({"id": ids, "emb": embedding_array(x), "s": s}), tmp + "/labels.parquet",
               row_group_size=5000)
pq.write_table(pa.table({"id": ids, "emb": embedding_array(x)}), tmp + "/release.parquet",
               row_group_size=5000)
print("written", flush=True)
req = AuditRequest(release=tmp + "/release.parquet", labels=tmp + "/labels.parquet",
                   suppress=("s",), policy=policy_from_dict({"families": ["logreg"], "folds": 2}),
                   partition_rows=n // 20)
run_audit(req)
"""


def _spill_seen(scratch: Path, proc: subprocess.Popen, timeout: float = 120) -> Path:
    """The audit's spill directory once a labels partition file is in it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for d in scratch.glob("mass-audit-*"):
            if list(d.glob("labels-*.arrow")):
                return d
        assert proc.poll() is None, "the audit ended before it spilled"
        time.sleep(0.005)
    raise AssertionError("no spill directory appeared")


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_killed_audit_leaves_no_spill(sig, tmp_path, monkeypatch, child):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch), "OMP_NUM_THREADS": "1"}
    err = open(tmp_path / "stderr", "w")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen([sys.executable, "-c", AUDIT, str(tmp_path), "400000"], env=env,
                            stdout=subprocess.PIPE, stderr=err, text=True)  # fmt: skip
    try:
        assert child.first_line(proc, "the audit (writing its input)").strip() == "written"
        spill = _spill_seen(scratch, proc)
        assert stat.S_IMODE(os.stat(spill).st_mode) == 0o700
        proc.send_signal(sig)
        code = child.exit_code(proc, f"the audit after {sig.name}")
    finally:
        child.stop(proc)
    err.close()
    assert code == (143 if sig == signal.SIGTERM else -9)
    # a SIGTERM says so on stderr (before: exit 143 and no line)
    said = "stopped by SIGTERM (exit 143)" in (tmp_path / "stderr").read_text()
    assert said == (sig == signal.SIGTERM)
    if sig == signal.SIGKILL:
        assert spill.exists()  # nothing in the process could run: the next run sweeps it
        foreign = scratch / "mass-audit-999999-notours"  # no marker: never touched
        foreign.mkdir()
        monkeypatch.setattr("tempfile.tempdir", str(scratch))
        from mass.audit.stream import Scratch

        with Scratch(10, 1) as sc:  # the next audit that spills
            assert Path(sc.path).parent == scratch
        assert foreign.exists()
        foreign.rmdir()
    assert list(scratch.iterdir()) == []


def _stubs_of(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _gone(procs: list[psutil.Process]) -> bool:
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.Error:
            continue
    return True


@pytest.mark.slow
@pytest.mark.triton
def test_sigkill_of_the_job_while_triton_loads_leaves_no_stub(tmp_path, fc, monkeypatch, child):
    repo = tmp_path / "repo"
    fc.export_mod(tmp_path / "run", repo, seed=0)
    src, out = tmp_path / "in.parquet", tmp_path / "release"
    fc.write_input(src)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mass.cli", "anonymize", "--input", str(src), "--output",
         str(out), "--model", "mod", "--repository", str(repo), "--no-audit"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    tree: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 180
        while not any("triton_python_backend_stub" in " ".join(_cmd(p)) for p in tree):
            assert proc.poll() is None and time.monotonic() < deadline, "no stub started"
            time.sleep(0.05)
            tree = _stubs_of(proc.pid)
        proc.kill()  # SIGKILL while the stub imports torch (the model is still loading)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 45
        while not _gone(tree) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = [p.pid for p in tree if not _gone([p])]
    finally:
        child.stop(proc)
        for p in tree:  # a failing run must not leave them running either
            try:
                p.kill()
            except psutil.Error:
                pass
    assert left == [], f"processes of the killed job still run: {left}"
    (workdir,) = scratch.glob(f"mass-triton-{proc.pid}-*")  # SIGKILL: nothing could clean up
    record = json.loads((workdir / MARKER).read_text())
    assert record["pid"] == proc.pid and record["shm_prefix"].startswith("mass_")
    monkeypatch.setattr("tempfile.tempdir", str(scratch))
    assert sweep("mass-triton-") == [workdir]  # what the next server start runs first
    assert not workdir.exists()
    assert not list(Path("/dev/shm").glob(f"{record['shm_prefix']}*"))


def _cmd(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []


TRAIN = """
import sys
import numpy as np, pyarrow as pa, pyarrow.parquet as pq
from mass.cli import main
from mass.embeddings import embedding_array

tmp = sys.argv[1]
rng = np.random.default_rng(0)
n = 20000
x = rng.normal(size=(n, 16)).astype(np.float32)
pq.write_table(pa.table({"id": np.arange(n), "emb": embedding_array(x),
                         "s": rng.integers(0, 2, n), "u": rng.integers(0, 3, n)}),
               tmp + "/train.parquet")
print("written", flush=True)
sys.exit(main(["train", "--data", tmp + "/train.parquet", "--suppress", "s", "--preserve", "u",
               "--method", "mass", "--epochs", "500", "--no-progress", "--out", tmp + "/run"]))
"""


@pytest.mark.slow
def test_ctrl_c_stops_a_command_by_name_without_a_traceback(tmp_path, child):
    """SIGINT (Ctrl-C, or a scheduler's interrupt) unwinds like SIGTERM: `mass train` exits 130
    with one line saying so, no traceback, and a run directory it made is not left empty
    (before: a KeyboardInterrupt traceback, exit 1 and an empty --out)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MASS_LOCAL_CONFIG": ""}
    err = open(tmp_path / "stderr", "w")  # noqa: SIM115 (closed below)
    # a shell's background job (CI's, nohup's) starts with SIGINT ignored, and Python then
    # installs no handler: the child gets the default disposition, as at a terminal
    proc = subprocess.Popen([sys.executable, "-c", TRAIN, str(tmp_path)], env=env,
                            stdout=subprocess.PIPE, stderr=err, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    run = tmp_path / "run"
    try:
        assert child.first_line(proc, "the training (writing its input)").strip() == "written"
        deadline = time.monotonic() + 120
        while not run.exists() and time.monotonic() < deadline:  # made just before the fit
            assert proc.poll() is None, "mass train ended before it made --out"
            time.sleep(0.01)
        time.sleep(1.0)  # inside the fit
        proc.send_signal(signal.SIGINT)
        code = child.exit_code(proc, "mass train after SIGINT")
    finally:
        child.stop(proc)
    err.close()
    said = (tmp_path / "stderr").read_text()
    assert code == 130, said
    assert "mass train: interrupted (SIGINT, exit 130)" in said
    assert "Traceback" not in said and "KeyboardInterrupt" not in said
    assert not run.exists() or {p.name for p in run.iterdir()} <= {"checkpoint.pt"}
