"""Local stand-ins for the services a cluster run uses, as real separate processes: an
S3-compatible server (moto's server mode, what s3fs and others test against in CI) and a
dask.distributed cluster (``dask scheduler`` + ``dask worker`` processes, each worker with its
own working and scratch directory, so nothing on local disk is shared). Used by the object
store tests (tests/beam_pipelines/test_object_store.py) and ``bench/objstore.py``.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time

from mass.serving.server import free_port

BIN = os.path.dirname(sys.executable)
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def wait_port(port: int, proc: subprocess.Popen, what: str, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise RuntimeError(f"{what} not listening on 127.0.0.1:{port} after {timeout} s")


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in reversed(procs):
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()


@contextlib.contextmanager
def moto_s3(logdir: str, bucket: str):
    """moto_server on 127.0.0.1 with ``bucket``; sets the standard AWS_* variables (restored
    after) and yields them."""
    from mass import fs

    port = free_port()
    log = open(os.path.join(logdir, "moto.log"), "wb")
    proc = subprocess.Popen([os.path.join(BIN, "moto_server"), "-H", "127.0.0.1", "-p",
                             str(port)], stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_EC2_METADATA_DISABLED": "true"}  # fmt: skip
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        wait_port(port, proc, "moto_server")
        import boto3

        boto3.client("s3").create_bucket(Bucket=bucket)
        yield env
    finally:
        _stop([proc])
        log.close()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        fs._FS.clear()  # clients built for this endpoint


@contextlib.contextmanager
def dask_cluster(root: str, workers: int = 2, *, env: dict | None = None, trace: bool = False):
    """``dask scheduler`` + ``workers`` x ``dask worker`` (1 thread each) as processes; worker
    ``i`` runs in ``root/w<i>`` with its scratch (``--local-directory``, TMPDIR) below it.
    With ``trace`` each worker logs every file it opens to ``root/w<i>/trace.log``
    (:data:`mass.fs.TRACE_ENV`). Yields the scheduler address."""
    from mass import fs

    port = free_port()
    base = {**os.environ, **(env or {}), "PYTHONPATH": REPO}
    procs: list[subprocess.Popen] = []
    try:
        os.makedirs(os.path.join(root, "scheduler"), exist_ok=True)
        procs.append(_spawn([os.path.join(BIN, "dask"), "scheduler", "--host", "127.0.0.1",
                             "--port", str(port), "--no-dashboard"],
                            os.path.join(root, "scheduler"), base))  # fmt: skip
        wait_port(port, procs[0], "dask scheduler")
        for i in range(1, workers + 1):
            home = os.path.join(root, f"w{i}")
            scratch = os.path.join(home, "scratch")
            os.makedirs(scratch, exist_ok=True)
            wenv = {**base, "TMPDIR": scratch}
            if trace:
                wenv[fs.TRACE_ENV] = os.path.join(home, "trace.log")
            procs.append(_spawn([os.path.join(BIN, "dask"), "worker", f"tcp://127.0.0.1:{port}",
                                 "--nthreads", "1", "--nworkers", "1", "--local-directory",
                                 scratch, "--no-dashboard", "--name", f"w{i}"], home, wenv))  # fmt: skip
        from dask.distributed import Client

        address = f"tcp://127.0.0.1:{port}"
        with Client(address, timeout=60) as client:
            client.wait_for_workers(workers, timeout=120)
        yield address
    finally:
        _stop(procs)


def _spawn(cmd: list[str], cwd: str, env: dict) -> subprocess.Popen:
    with open(os.path.join(cwd, "log"), "wb") as log:
        return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
