"""Shared fixtures: a real Triton server factory (session-scoped, torn down at the end)."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile

import pytest

# bench/ is a top-level directory of the checkout, not an installed package: tests import it
# from here however pytest was started (`pytest`, `python -m pytest`, any cwd).
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.append(_ROOT)
os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
os.environ.setdefault("DVC_NO_ANALYTICS", "1")


def _session_owner_key() -> None:
    """One owner key for the whole test session (noise and signatures), outside the repo.

    Set in the environment at import so CLI subprocesses and Triton servers inherit it; tests
    of the no-key paths unset the variables themselves (monkeypatch.delenv).
    """
    import atexit
    import shutil
    import tempfile

    from mass.keys import NOISE_KEY_ENV, SIGNING_KEY_ENV, write_key

    if os.environ.get(NOISE_KEY_ENV) and os.environ.get(SIGNING_KEY_ENV):
        return
    d = tempfile.mkdtemp(prefix="mass-test-key-")
    atexit.register(shutil.rmtree, d, True)
    path = os.path.join(d, "owner.key")
    write_key(path)
    os.environ.setdefault(NOISE_KEY_ENV, path)
    os.environ.setdefault(SIGNING_KEY_ENV, path)


_session_owner_key()
# A checkout where `make demo` ran holds .mass/local.yaml naming its key: tests never read it
# (tests of the no-key paths would find that key; tests of the local config set their own).
os.environ["MASS_LOCAL_CONFIG"] = ""
# The owner's newest-version ledger (mass.serving.newest) lives in this session's own directory.
os.environ["MASS_STATE_DIR"] = tempfile.mkdtemp(prefix="mass-state-")
atexit.register(shutil.rmtree, os.environ["MASS_STATE_DIR"], ignore_errors=True)  # ours only


def _apply_mutant() -> None:
    """Env MASS_MUTANT=<name>: run this session against one hand-made mutant
    (tests/mutation/mutants.py; driven by tests/mutation/run.py, never set in CI)."""
    name = os.environ.get("MASS_MUTANT")
    if not name:
        return
    import importlib.util
    import sys
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "mass_test_mutants", Path(__file__).parent / "mutation" / "mutants.py"
    )
    mutants = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mutants  # dataclasses look their module up there
    spec.loader.exec_module(mutants)
    mutants.apply(name)


_apply_mutant()


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "extra(name, *modules): needs the optional extra `name` (those importable modules); "
        "skipped without it, except under CI (env CI set), where a missing extra fails",
    )


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def pytest_runtest_setup(item):
    import importlib.util

    for mark in item.iter_markers("extra"):
        name, *modules = mark.args
        missing = [m for m in modules if importlib.util.find_spec(m) is None]
        if missing:
            msg = (
                f"needs the `{name}` extra (pip install -e '.[{name}]'); "
                f"not importable: {', '.join(missing)}"
            )
            if _in_ci():
                pytest.fail(f"CI is set: {msg}", pytrace=False)
            pytest.skip(msg)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under CI a test skipped for a missing module (pytest.importorskip) is a failure."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and _in_ci() and call.excinfo is not None:
        reason = str(call.excinfo.value)
        if "could not import" in reason or "needs the `" in reason:
            report.outcome = "failed"
            report.longrepr = f"CI is set and an optional dependency is missing: {reason}"


@pytest.fixture(scope="session")
def triton_server_factory():
    """``start(repository, **kwargs) -> TritonServer``: a started real tritonserver.

    Servers bind free 127.0.0.1 ports and are stopped (stubs and shm included) when the test
    session ends; call ``server.stop()`` earlier to free the cores. Each start costs seconds
    (the python stubs import torch), so share one server per module or session where possible.
    Keyword arguments go to :class:`mass.serving.TritonServer` (e.g. ``model_control="explicit"``).
    """
    from mass.serving import TritonServer

    servers: list[TritonServer] = []

    def start(repository, **kwargs) -> TritonServer:
        server = TritonServer(repository, **kwargs)
        servers.append(server)
        return server.start()

    try:
        yield start
    finally:
        for server in servers:
            server.stop()


TINY_MODEL = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy() * 2)]) for r in requests]
"""


def sign_handmade(version_dir, weights: str = "model.py") -> None:
    """Sign a hand-written version folder with the session key, as `mass export` would
    (``export.json`` naming ``weights``, the ``__pycache__`` blocker, SHA256SUMS + signature):
    a server of ours serves only signed models."""
    import json
    from pathlib import Path

    from mass.digest import sha256_file
    from mass.serving.manifest import sign_version_dir, signing_key

    folder = Path(version_dir)
    meta = {"name": folder.parent.name, "version": int(folder.name), "weights": weights,
            "sha256": sha256_file(folder / weights)}  # fmt: skip
    (folder / "export.json").write_text(json.dumps(meta))
    (folder / "__pycache__").write_bytes(b"")
    sign_version_dir(folder, signing_key())


def write_tiny_model(repo, model_py: str = TINY_MODEL, name: str = "double"):
    """``repo/<name>``: X FP32[2] -> Y = 2 X (numpy only), signed with the session key."""
    model = repo / name
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.py").write_text(model_py)
    (model / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 8\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 2 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] } ]\n'
        "instance_group [ { kind: KIND_CPU } ]\n"
    )
    sign_handmade(model / "1")
    return repo


@pytest.fixture(scope="session")
def sign_handmade_model():
    """:func:`sign_handmade` (test modules cannot import a conftest under importlib mode)."""
    return sign_handmade


def write_key_file(path, secret: bytes) -> str:
    """A key file as `mass keygen` writes it (0600, one line) holding the given ``secret``:
    a fixed key, so a test's keyed outputs are the same on every run, or a weak one."""
    from mass.keys import PREFIX

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(PREFIX + secret.hex() + "\n")
    return str(path)


@pytest.fixture(scope="session")
def key_file_of():
    """:func:`write_key_file` (test modules cannot import a conftest under importlib mode)."""
    return write_key_file


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A moto S3 server on 127.0.0.1 (one per test module) with the bucket ``mass-test``; the
    AWS_* variables point at it until the module's last test."""
    from mass.testing.services import moto_s3

    with moto_s3(str(tmp_path_factory.mktemp("moto")), "mass-test") as env:
        yield env


@pytest.fixture()
def tiny_repo(tmp_path):
    """A numpy-only python-backend repository: model ``double`` (X FP32[2] -> Y = 2 X),
    signed with the session key."""
    return write_tiny_model(tmp_path / "repo")


@pytest.fixture
def beam_pipeline():
    """Beam test pipelines on FnApiRunner (the stock DirectRunner would try to download
    Prism); imported here, not at the top, so tests that use no Beam load none."""
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from apache_beam.testing.test_pipeline import TestPipeline

    return lambda: TestPipeline(runner=FnApiRunner())


# -- children that talk through a stdout PIPE: every wait bounded, every pipe drained ------------
def _proc_state(pid: int) -> str:
    """``State`` and kernel wait channel of ``pid`` from /proc (what a failure message needs)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            state = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("State")), "?")
        with open(f"/proc/{pid}/wchan") as f:
            return f"state {state}, waiting in {f.read().strip() or '-'}"
    except OSError:
        return "no /proc entry"


def _stop(proc) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=30)  # SIGKILLed: ends at once (an unkillable D state fails here, loudly)


def child_first_line(proc, what: str, timeout: float = 300.0) -> str:
    """The first line ``proc`` writes to its stdout PIPE. Read by a helper thread, so a child
    that hangs before printing fails the test after ``timeout`` s (killed, with its /proc
    state) instead of blocking the suite; a child that exits first fails with its exit code."""
    import queue
    import threading

    box: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: box.put(proc.stdout.readline()), daemon=True).start()
    try:
        line = box.get(timeout=timeout)
    except queue.Empty:
        state = _proc_state(proc.pid)
        _stop(proc)
        pytest.fail(f"{what}: printed no line in {timeout:.0f} s ({state}); killed")
    if not line:
        _stop(proc)
        pytest.fail(f"{what}: exited with code {proc.returncode} before printing its line")
    return line


def child_exit_code(proc, what: str, timeout: float = 60.0) -> int:
    """``proc``'s exit code, its PIPEs drained meanwhile (``communicate``: a child blocked on
    a full, unread pipe never exits); still running after ``timeout`` s, it is killed and the
    test fails naming ``what`` and where the child was waiting."""
    import subprocess

    try:
        proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        if proc.poll() is not None:  # it ended, but a process it started holds the pipe open
            pytest.fail(f"{what}: exited with code {proc.returncode}, but its stdout was still "
                        f"open {timeout:.0f} s later (held by a process it started)")  # fmt: skip
        state = _proc_state(proc.pid)
        _stop(proc)
        pytest.fail(f"{what}: still running {timeout:.0f} s later ({state}); killed")
    return proc.returncode


@pytest.fixture(scope="session")
def child():
    """``child.first_line(proc, what)`` and ``child.exit_code(proc, what)`` (bounded reads of a
    subprocess's stdout PIPE; test modules cannot import a conftest under importlib mode)."""
    from types import SimpleNamespace

    return SimpleNamespace(first_line=child_first_line, exit_code=child_exit_code, stop=_stop)
