"""The local Triton Inference Server (the real binary shipped in the ``nvidia-pytriton`` wheel).

:class:`TritonServer` starts ``tritonserver`` on a model repository, bound to 127.0.0.1 only,
waits until it is ready and stops it (and its python-backend stub processes) on exit.
:func:`wait_until_ready` and :func:`check_server` health-check any Triton given by gRPC URL
(the local one or a production NGC container) before a job sends it data.

What the wheel's server needs to run python-backend models here (found by experiment):

* ``--backend-directory``: the wheel's ``backends/python`` holds ``libtriton_python.so`` but no
  ``triton_python_backend_stub``; pytriton copies the stub for the running Python version from
  ``python_backend_stubs/3.X/`` at runtime. We do the same into a private temporary
  ``backends/python`` folder. The copied ``.so`` loses its ``$ORIGIN`` RPATH, so the wheel's
  ``nvidia_pytriton.libs`` goes on ``LD_LIBRARY_PATH``.
* ``LD_LIBRARY_PATH`` starts with ``sys.base_prefix/lib``: the stub links ``libpython3.11.so.1.0``
  and would otherwise pick the system one, whose stdlib clashes with this interpreter's.
* The stub embeds Python in *isolated* mode (``sys.flags.isolated == 1``): ``PYTHONPATH`` is
  ignored. We still export it (repo root + this interpreter's site-packages) and every
  ``model.py`` we generate starts with a three-line bootstrap that adds those folders to
  ``sys.path`` (with ``.pth`` processing, so the editable ``mass`` install and torch resolve).
  Without it ``import torch`` fails inside Triton (the base interpreter's site-packages is used).
* No GPU/driver here: the "CUDA driver version is insufficient", "CudaDriverHelper has not been
  initialized" and "DCGM unable to start" log lines are harmless; models use ``KIND_CPU``.
* ``--backend-config=python,shm-region-prefix-name=<unique>`` names this server's shared-memory
  regions in ``/dev/shm`` so :meth:`TritonServer.stop` removes any that a killed stub left behind.
  The default 1 MiB per-stub shm (``shm-default-byte-size``) grows on demand
  (``shm-growth-byte-size``); no flag is needed for batches of a few thousand 128-d rows.
* ``--exit-timeout-secs`` is lowered from 30 s so SIGTERM shutdowns are quick.
* The server runs in its own session (``killpg`` reaches the stubs) and, when started from the
  main thread, gets ``PR_SET_PDEATHSIG`` so a crashed caller leaves no orphan server.

Startup time is the stubs' imports: ~1 s for an empty repository, ~5 s for numpy-only models,
and 15-45 s for three torch models on the 2 shared cores here (each stub imports torch in its
own process); a sentence-transformers model adds about a minute. ``startup_timeout`` must allow
for that on a loaded machine.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from mass.errors import ChecksumMismatchError, ServingError

LOG = logging.getLogger(__name__)
SHA256_PARAMETER = "mass_sha256"
_LOG_TAIL_LINES = 40


@dataclass(frozen=True)
class TritonInstall:
    """Where the ``nvidia-pytriton`` wheel keeps the server, its python backend and its libs."""

    binary: Path
    python_backend: Path
    stub: Path
    libs: Path


def find_tritonserver() -> TritonInstall:
    """Locate ``tritonserver`` and the python backend inside the installed nvidia-pytriton wheel."""
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        raise ServingError("nvidia-pytriton is not installed; `pip install nvidia-pytriton`")
    root = Path(next(iter(spec.submodule_search_locations)))
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    install = TritonInstall(
        binary=root / "tritonserver" / "bin" / "tritonserver",
        python_backend=root / "tritonserver" / "backends" / "python",
        stub=root
        / "tritonserver"
        / "python_backend_stubs"
        / version
        / "triton_python_backend_stub",
        libs=root.parent / "nvidia_pytriton.libs",
    )
    for path in (install.binary, install.python_backend, install.stub):
        if not path.exists():
            raise ServingError(
                f"{path} is missing from the nvidia-pytriton wheel (Python {version}); "
                "reinstall nvidia-pytriton for this Python version"
            )
    return install


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def python_path_for_models() -> list[str]:
    """Folders a model.py must put on ``sys.path``: the repo root, then this venv's site-packages."""
    repo_root = str(Path(__file__).resolve().parent.parent)
    site = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    out: list[str] = []
    for p in [repo_root, *site, *extra]:
        if p not in out:
            out.append(p)
    return out


def server_env(install: TritonInstall) -> dict[str, str]:
    """The environment ``tritonserver`` and its python stubs need (see the module docstring)."""
    env = dict(os.environ)
    lib_dirs = [os.path.join(sys.base_prefix, "lib"), str(install.libs)]
    if env.get("LD_LIBRARY_PATH"):
        lib_dirs.append(env["LD_LIBRARY_PATH"])
    env["LD_LIBRARY_PATH"] = os.pathsep.join(lib_dirs)
    env["PYTHONPATH"] = os.pathsep.join(python_path_for_models())
    # model.py imports must not drop __pycache__ into the (DVC-tracked) model repository
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    # One thread per stub: the stubs share the machine with the caller (Beam workers).
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _prepare_backends(workdir: Path, install: TritonInstall) -> Path:
    backends = workdir / "backends"
    target = backends / "python"
    target.mkdir(parents=True, exist_ok=True)
    # Unlink first: after a SIGKILL the old stubs may still run these files, and copying
    # over a running executable fails with ETXTBSY (a restart must not depend on timing).
    for item in install.python_backend.iterdir():
        if item.is_file():
            (target / item.name).unlink(missing_ok=True)
            shutil.copy2(item, target / item.name)
    (target / "triton_python_backend_stub").unlink(missing_ok=True)
    shutil.copy2(install.stub, target / "triton_python_backend_stub")
    return backends


def _log_tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    # Drop the wide ASCII tables Triton prints; they hide the real error.
    kept = [ln for ln in text if not ln.startswith(("+", "|"))]
    return "\n".join(kept[-lines:])


class TritonServer:
    """A running ``tritonserver`` on ``repository``; use as a context manager.

    Ports default to free ones; everything binds to 127.0.0.1. ``model_control`` is Triton's
    ``--model-control-mode`` (``none``, ``explicit`` or ``poll``); in ``explicit`` mode the
    models named in ``load_models`` (default: all, ``--load-model=*``) load at startup and a
    client loads others later (``InferenceServerClient.load_model``).
    """

    def __init__(
        self,
        repository: str | os.PathLike[str],
        *,
        grpc_port: int | None = None,
        http_port: int | None = None,
        metrics_port: int | None = None,
        log_path: str | os.PathLike[str] | None = None,
        startup_timeout: float = 120.0,
        model_control: str = "none",
        exit_timeout: int = 5,
        load_models: tuple[str, ...] | None = None,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.repository = Path(repository).resolve()
        if not self.repository.is_dir():
            raise ServingError(
                f"model repository {self.repository} does not exist or is not a folder"
            )
        if model_control not in ("none", "explicit", "poll"):
            raise ServingError(f"model_control={model_control!r}: use 'none', 'explicit' or 'poll'")
        self._fixed_ports = (grpc_port, http_port, metrics_port)
        self.grpc_port, self.http_port, self.metrics_port = grpc_port, http_port, metrics_port
        self.startup_timeout = startup_timeout
        self.model_control = model_control
        self.exit_timeout = exit_timeout
        if load_models is not None and model_control != "explicit":
            raise ServingError("load_models needs model_control='explicit'")
        self.load_models = ("*",) if load_models is None else tuple(load_models)
        self.extra_args = tuple(extra_args)
        self._install = find_tritonserver()
        self._workdir: Path | None = None
        self._user_log = Path(log_path) if log_path is not None else None
        self._shm_prefix = f"mass{os.getpid()}_{uuid.uuid4().hex[:8]}_"
        self.process: subprocess.Popen | None = None
        self.startup_seconds: float | None = None

    # -- addresses -------------------------------------------------------------------------
    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    @property
    def log_path(self) -> Path:
        if self._user_log is not None:
            return self._user_log
        assert self._workdir is not None, "server not started"
        return self._workdir / "tritonserver.log"

    # -- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> TritonServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> TritonServer:
        """Start the server and block until it (and every model) is ready."""
        if self.process is not None and self.process.poll() is None:
            raise ServingError(f"tritonserver (pid {self.process.pid}) is already running")
        if self._workdir is None:
            self._workdir = Path(tempfile.mkdtemp(prefix="mass-triton-"))
        attempts = 1 if all(self._fixed_ports) else 3
        for attempt in range(attempts):
            self._pick_ports(fresh=attempt > 0)
            try:
                self._launch_and_wait()
                return self
            except ServingError as e:
                self.stop(_keep_workdir=True)
                if attempt + 1 < attempts and "already in use" in str(e).lower():
                    continue  # another process grabbed a free port between pick and bind
                raise
        return self

    def _pick_ports(self, *, fresh: bool) -> None:
        g, h, m = self._fixed_ports
        if fresh or self.grpc_port is None:
            self.grpc_port = g or free_port()
        if fresh or self.http_port is None:
            self.http_port = h or free_port()
        if fresh or self.metrics_port is None:
            self.metrics_port = m or free_port()

    def command(self) -> list[str]:
        assert self._workdir is not None
        backends = _prepare_backends(self._workdir, self._install)
        cmd = [
            str(self._install.binary),
            f"--model-repository={self.repository}",
            f"--backend-directory={backends}",
            "--http-address=127.0.0.1",
            "--grpc-address=127.0.0.1",
            "--metrics-address=127.0.0.1",
            f"--http-port={self.http_port}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-port={self.metrics_port}",
            f"--model-control-mode={self.model_control}",
            f"--exit-timeout-secs={self.exit_timeout}",
            f"--backend-config=python,shm-region-prefix-name={self._shm_prefix}",
        ]
        if self.model_control == "explicit":
            cmd += [f"--load-model={m}" for m in self.load_models]
        if self.model_control == "poll":
            cmd.append("--repository-poll-secs=2")
        return cmd + list(self.extra_args)

    def _launch_and_wait(self) -> None:
        cmd = self.command()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        with open(self.log_path, "ab") as log:
            # Own session: stop() signals the whole group, python stubs included.
            self.process = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=server_env(self._install),
                cwd=self._workdir,
                start_new_session=True,
                preexec_fn=_die_with_parent if _in_main_thread() else None,
            )
        LOG.info(
            "tritonserver pid %d on grpc %s, http %s; log %s",
            self.process.pid,
            self.grpc_url,
            self.http_url,
            self.log_path,
        )
        deadline = started + self.startup_timeout
        client = _grpc_client(self.grpc_url)
        while True:
            code = self.process.poll()
            if code is not None:
                raise ServingError(
                    f"tritonserver exited with code {code} while starting on {self.repository}; "
                    f"log tail ({self.log_path}):\n{_log_tail(self.log_path)}"
                )
            if _ready(client):
                break
            if time.monotonic() > deadline:
                raise ServingError(
                    f"tritonserver on {self.repository} not ready after {self.startup_timeout:.0f} s "
                    f"(raise startup_timeout on a loaded machine); log tail ({self.log_path}):\n"
                    f"{_log_tail(self.log_path)}"
                )
            time.sleep(0.2)
        self.startup_seconds = time.monotonic() - started
        LOG.info("tritonserver ready in %.1f s", self.startup_seconds)

    def stop(self, *, _keep_workdir: bool = False) -> None:
        """SIGTERM the server's process group, SIGKILL what is left, clean shm and temp files."""
        proc, self.process = self.process, None
        if proc is not None:
            children = _descendants(proc.pid)
            if proc.poll() is None:
                _signal_group(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=self.exit_timeout + 10)
                except subprocess.TimeoutExpired:
                    _signal_group(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=10)
            # Stubs normally exit with the server; kill any that outlived it (e.g. after SIGKILL).
            for pid in children:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        for leftover in Path("/dev/shm").glob(f"{self._shm_prefix}*"):
            leftover.unlink(missing_ok=True)
        if not _keep_workdir and self._workdir is not None:
            if self._user_log is None:
                shutil.rmtree(self._workdir, ignore_errors=True)
                self._workdir = None
            else:
                shutil.rmtree(self._workdir / "backends", ignore_errors=True)

    def restart(self) -> TritonServer:
        """Stop and start again on the same ports (fault-injection tests use this)."""
        self._fixed_ports = (self.grpc_port, self.http_port, self.metrics_port)
        self.stop(_keep_workdir=True)
        return self.start()

    def kill(self) -> None:
        """SIGKILL the server without a clean shutdown (simulates a crash); stop() still cleans."""
        if self.process is not None and self.process.poll() is None:
            children = _descendants(self.process.pid)  # stubs are orphaned by the kill
            _signal_group(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
            for pid in children:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        return _log_tail(self.log_path, lines)


def _in_main_thread() -> bool:
    # PR_SET_PDEATHSIG fires when the starting *thread* exits, so only tie the server's life
    # to the main thread's (a crashed test run or CLI then leaves no orphan server behind).
    return threading.current_thread() is threading.main_thread()


def _die_with_parent() -> None:
    import ctypes

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _descendants(pid: int) -> list[int]:
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil comes with dask.distributed
        return []
    try:
        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


# -- health checks for any server ---------------------------------------------------------------
def _strip_scheme(url: str) -> str:
    for scheme in ("grpc://", "http://", "https://"):
        if url.startswith(scheme):
            return url[len(scheme) :]
    return url


def _grpc_client(url: str):
    import tritonclient.grpc as grpcclient

    return grpcclient.InferenceServerClient(url=_strip_scheme(url))


def _ready(client, model: str | None = None, version: str = "") -> bool:
    from tritonclient.utils import InferenceServerException

    try:
        if not client.is_server_ready(client_timeout=2.0):
            return False
        return model is None or client.is_model_ready(model, version, client_timeout=2.0)
    except InferenceServerException:
        return False


def wait_until_ready(
    url: str, *, model: str | None = None, version: str | int | None = None, timeout: float = 60.0
) -> None:
    """Block until the server at gRPC ``url`` (and ``model``, if given) is ready."""
    client = _grpc_client(url)
    deadline = time.monotonic() + timeout
    while not _ready(client, model, "" if version is None else str(version)):
        if time.monotonic() > deadline:
            what = f"model {model!r}" if model else "server"
            raise ServingError(
                f"Triton at {url}: {what} not ready after {timeout:.0f} s; check that the server "
                "runs (`mass serve --repository DIR`) and the model loaded (see the server log)"
            )
        time.sleep(0.25)


def check_server(
    url: str,
    *,
    model: str,
    version: str | int | None = None,
    expected_sha256: str | None = None,
    timeout: float = 5.0,
) -> dict:
    """Health-check ``model`` on the Triton at gRPC ``url`` before a job uses it.

    Returns ``{"name", "version" (the one checked), "versions" (loaded), "sha256"}``.
    Raises :class:`ServingError` when the server is
    unreachable, the model or version is not ready, and :class:`ChecksumMismatchError` when the
    served weights' recorded sha256 differs from ``expected_sha256``.
    """
    from tritonclient.utils import InferenceServerException

    client = _grpc_client(url)
    try:
        live = client.is_server_live(client_timeout=timeout)
    except InferenceServerException as e:
        raise ServingError(
            f"Triton at {url} is unreachable ({e.message()}); start it with "
            "`mass serve --repository DIR` or pass the right --triton-url"
        ) from e
    if not live:
        raise ServingError(f"Triton at {url} answers but is not live; see its log")
    wanted = "" if version is None else str(version)
    try:
        ready = client.is_model_ready(model, wanted, client_timeout=timeout)
    except InferenceServerException as e:
        ready = False
        detail = e.message()
    else:
        detail = ""
    if not ready:
        available = _model_versions(client, model)
        if available and wanted:
            raise ServingError(
                f"Triton at {url}: model {model!r} version {wanted} is not loaded (loaded "
                f"versions: {available}); export that version or ask for one of those"
            )
        raise ServingError(
            f"Triton at {url}: model {model!r} is not loaded {detail}; check the repository "
            "(`mass export ... --name NAME`) and the server log"
        )
    try:
        config = client.get_model_config(model, wanted, as_json=True, client_timeout=timeout)[
            "config"
        ]
        meta = client.get_model_metadata(model, wanted, as_json=True, client_timeout=timeout)
    except InferenceServerException as e:
        raise ServingError(
            f"Triton at {url}: cannot read config of {model!r}: {e.message()}"
        ) from e
    params = config.get("parameters", {})
    versions = sorted((str(v) for v in meta.get("versions", [])), key=int)
    # Compare with the served version's own recorded sha (pinned, else the newest loaded).
    served_version = wanted or (versions[-1] if versions else "")
    key = f"{SHA256_PARAMETER}_v{served_version}"
    served = params.get(key if key in params else SHA256_PARAMETER, {}).get("string_value")
    if expected_sha256 is not None and served != expected_sha256:
        raise ChecksumMismatchError(
            f"Triton at {url}: model {model!r} version {served_version or '?'} serves weights "
            f"with sha256 {served or '(none)'} but {expected_sha256} was expected; re-export "
            "the run or point at the right model/version"
        )
    return {"name": model, "version": served_version, "versions": versions, "sha256": served}


def _model_versions(client, model: str) -> list[str]:
    from tritonclient.utils import InferenceServerException

    try:
        index = client.get_model_repository_index(as_json=True)
    except InferenceServerException:
        return []
    return sorted(
        m.get("version", "")
        for m in index.get("models", [])
        if m.get("name") == model and m.get("state") == "READY"
    )
