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
* ``--backend-config=python,shm-region-prefix-name=<random>`` names this server's shared-memory
  regions in ``/dev/shm`` (``mass_<24 random hex>_``, unpredictable) so :meth:`TritonServer.stop`
  removes any that a killed stub left behind. The server starts with umask 077, so those
  regions (which hold raw input embeddings) are mode 0600, not 0644. The default 1 MiB per-stub
  shm (``shm-default-byte-size``) grows on demand (``shm-growth-byte-size``).

Hardening (docs/failure-modes.md, "Untrusted files and the local server"):

* ``--grpc-restricted-protocol=shared-memory,model-repository:<header>=<token>`` and
  ``--http-restricted-api=...`` (same value): registering/unregistering/listing shared memory
  and loading/unloading models need the header :data:`ACCESS_HEADER` with a random token that
  only the process that started the server holds (:attr:`TritonServer.client_headers`,
  :func:`client_headers`). Inference, health and metadata stay open. The token is on the
  server's command line, readable in ``/proc`` by other local users unless ``/proc`` is
  mounted ``hidepid=2`` (Triton has no other way to take it).
* Before launching, every model of the repository that ``mass export`` wrote (has an
  ``export.json``) is verified (:func:`mass.triton_adapters.verify_version_dir`: signed
  manifest, no unlisted file, config.pbtxt unchanged), so a foreign ``model.py`` or a config
  pointing at one is never imported; the served adapters verify again in ``initialize``.
  The owner key reaches the stubs through ``MASS_SIGNING_KEY_FILE`` in their environment.
* The work directory (``/tmp/mass-triton-*``) is removed on every exit path: a failed start,
  an exception, SIGINT, and SIGTERM (a handler that raises :class:`SystemExit` is installed
  while a server runs, when the main thread has none of its own).
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
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from mass.errors import ChecksumMismatchError, ServingError

LOG = logging.getLogger(__name__)
SHA256_PARAMETER = "mass_sha256"
_LOG_TAIL_LINES = 40
ACCESS_HEADER = "mass-access-token"
ACCESS_FILE_ENV = "MASS_TRITON_ACCESS_FILE"
RESTRICTED = "shared-memory,model-repository"
GRPC_HEADER_PREFIX = "triton-grpc-protocol-"  # Triton prefixes gRPC restricted header keys
_ACCESS: dict[str, str] = {}  # grpc/http address -> access token of servers started here
_SIGTERM_USERS = 0  # running servers that rely on the SIGTERM -> SystemExit handler

# The python backend creates its shared-memory regions (raw input embeddings) through boost,
# which fchmod()s them to 0644 whatever the umask. This LD_PRELOAD shim, built at start with
# the system C compiler, drops the group/other bits of every fchmod() in tritonserver and its
# stubs, so the regions are 0600 from the moment they exist.
_SHM_SHIM_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sys/stat.h>
#include <sys/types.h>
int fchmod(int fd, mode_t mode) {
    static int (*real)(int, mode_t) = 0;
    if (!real) real = (int (*)(int, mode_t))dlsym(RTLD_NEXT, "fchmod");
    return real(fd, mode & ~(mode_t)(S_IRWXG | S_IRWXO));
}
"""


def client_headers(url: str | None, *, protocol: str = "grpc") -> dict[str, str]:
    """The gRPC (or ``protocol="http"``) header that opens the restricted APIs of the server
    at ``url``: the token of the server this process started there, else the one in the file
    named by ``MASS_TRITON_ACCESS_FILE`` (written by ``mass serve``), else ``{}`` (shared
    memory and model loading are then refused by the server)."""
    token = _ACCESS.get(_strip_scheme(url)) if url else None
    if token is None:
        token = _access_file_token()
    if token is None:
        return {}
    return {(GRPC_HEADER_PREFIX if protocol == "grpc" else "") + ACCESS_HEADER: token}


def write_access_file(path: str | os.PathLike[str], token: str) -> None:
    """``mass serve``: the token for other processes of this user (mode 0600, new file)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"{ACCESS_HEADER}={token}\n")


def _access_file_token() -> str | None:
    path = os.environ.get(ACCESS_FILE_ENV)
    if not path:
        return None
    try:
        st = os.stat(path)
        text = Path(path).read_text().strip()
    except OSError as e:
        raise ServingError(f"{ACCESS_FILE_ENV}={path}: unreadable ({e}); unset it or fix it") from e
    if st.st_mode & 0o077:
        raise ServingError(f"{path}: readable by others; run `chmod 600 {path}`")
    key, sep, value = text.partition("=")
    if not sep or key != ACCESS_HEADER or not value:
        raise ServingError(f"{path}: not an access file of `mass serve` ({ACCESS_HEADER}=...)")
    return value


def _build_shm_shim(workdir: Path) -> Path | None:
    """Compile the fchmod shim (see ``_SHM_SHIM_C``) into ``workdir``; None without a compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        LOG.warning(
            "no C compiler: the python backend's shared-memory regions will be 0644 (readable "
            "by other local users); install cc or run the server as its own user"
        )
        return None
    src, lib = workdir / "shm0600.c", workdir / "libmass_shm0600.so"
    src.write_text(_SHM_SHIM_C)
    res = subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(lib), str(src), "-ldl"],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    if res.returncode != 0:
        LOG.warning("could not build the shm shim (%s); regions will be 0644", res.stderr[-300:])
        return None
    return lib


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


def server_env(install: TritonInstall, signing_key_file: str | None = None) -> dict[str, str]:
    """The environment ``tritonserver`` and its python stubs need (see the module docstring).

    ``MASS_SIGNING_KEY_FILE`` (``signing_key_file``, else inherited) is passed as an absolute
    path: the served adapters verify the export's signature with it before loading anything.
    """
    from mass.keys import SIGNING_KEY_ENV

    env = dict(os.environ)
    key_file = signing_key_file or env.get(SIGNING_KEY_ENV)
    if key_file:
        env[SIGNING_KEY_ENV] = os.path.abspath(key_file)
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


def verify_repository(
    repository: str | os.PathLike[str], *, signing_key_file: str | os.PathLike[str] | None = None
) -> list[Path]:
    """Verify every version folder that ``mass export`` wrote (export.json, SHA256SUMS or its
    signature present) under ``repository``; returns them. Raises
    :class:`ChecksumMismatchError` naming the first that fails (nothing is launched)."""
    from mass.keys import SIGNING_KEY_ENV, resolve_key
    from mass.triton_adapters import EXPORT_JSON, SHA256SUMS, SIGNATURE, verify_version_dir

    marks = (EXPORT_JSON, SHA256SUMS, SIGNATURE)
    ours = sorted(
        v
        for m in Path(repository).iterdir()
        if m.is_dir() and not m.name.startswith(".")
        for v in m.iterdir()
        if v.name.isdigit() and v.is_dir() and any((v / n).exists() for n in marks)
    )
    if ours:
        key = resolve_key(os.fspath(signing_key_file) if signing_key_file else None,
                          SIGNING_KEY_ENV)  # fmt: skip
        for version_dir in ours:
            verify_version_dir(version_dir, key=key)
    return ours


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
    client loads others later (``InferenceServerClient.load_model``, with
    :attr:`client_headers`). ``verify_models`` checks every exported model's signed manifest
    before launching (``signing_key_file`` or ``MASS_SIGNING_KEY_FILE``); turn it off only to
    test the served models' own check.
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
        verify_models: bool = True,
        signing_key_file: str | os.PathLike[str] | None = None,
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
        self._shm_prefix = f"mass_{secrets.token_hex(12)}_"
        self._token = secrets.token_hex(32)
        self.verify_models = verify_models
        self.signing_key_file = os.fspath(signing_key_file) if signing_key_file else None
        self._holds_sigterm = False
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
    def client_headers(self) -> dict[str, str]:
        """The gRPC header a client sends to use shared memory or load/unload models here."""
        return {GRPC_HEADER_PREFIX + ACCESS_HEADER: self._token}

    @property
    def http_headers(self) -> dict[str, str]:
        """The same for the HTTP endpoint."""
        return {ACCESS_HEADER: self._token}

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
        """Verify the repository's exports, start the server and block until it (and every
        model) is ready; on any failure nothing is left running and the work dir is gone."""
        if self.process is not None and self.process.poll() is None:
            raise ServingError(f"tritonserver (pid {self.process.pid}) is already running")
        if self.verify_models:
            verify_repository(self.repository, signing_key_file=self.signing_key_file)
        self._catch_sigterm()
        try:
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
        except BaseException:
            self.stop()  # a failed start (or SIGTERM/Ctrl-C while starting) leaves nothing
            raise
        return self

    def _catch_sigterm(self) -> None:
        """SIGTERM unwinds like Ctrl-C (SystemExit), so ``with``/``finally`` blocks clean up;
        only from the main thread and only when nobody installed a handler of their own. The
        handler stays while any server started this way runs."""
        global _SIGTERM_USERS
        if not _in_main_thread() or self._holds_sigterm:
            return
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _exit_on_sigterm)
        if signal.getsignal(signal.SIGTERM) is _exit_on_sigterm:
            _SIGTERM_USERS += 1
            self._holds_sigterm = True

    def _release_sigterm(self) -> None:
        global _SIGTERM_USERS
        if not self._holds_sigterm or not _in_main_thread():
            return
        self._holds_sigterm = False
        _SIGTERM_USERS -= 1
        if _SIGTERM_USERS == 0 and signal.getsignal(signal.SIGTERM) is _exit_on_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)

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
            f"--grpc-restricted-protocol={RESTRICTED}:{ACCESS_HEADER}={self._token}",
            f"--http-restricted-api={RESTRICTED}:{ACCESS_HEADER}={self._token}",
        ]
        if self.model_control == "explicit":
            cmd += [f"--load-model={m}" for m in self.load_models]
        if self.model_control == "poll":
            cmd.append("--repository-poll-secs=2")
        return cmd + list(self.extra_args)

    def _env(self) -> dict[str, str]:
        env = server_env(self._install, self.signing_key_file)
        assert self._workdir is not None
        shim = _build_shm_shim(self._workdir)
        if shim is not None:
            env["LD_PRELOAD"] = os.pathsep.join(p for p in (str(shim), env.get("LD_PRELOAD")) if p)
        return env

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
                env=self._env(),
                cwd=self._workdir,
                start_new_session=True,
                preexec_fn=_child_setup_main if _in_main_thread() else _child_setup,
            )
        for address in (self.grpc_url, self.http_url):
            _ACCESS[address] = self._token
        LOG.info(
            "tritonserver pid %d on grpc %s, http %s; log %s",
            self.process.pid,
            self.grpc_url,
            self.http_url,
            self.log_path,
        )
        client = _grpc_client(self.grpc_url)
        try:
            self._wait(client, started)
        finally:
            client.close()

    def _wait(self, client, started: float) -> None:
        deadline = started + self.startup_timeout
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
        for address in (self.grpc_url, self.http_url):
            if _ACCESS.get(address) == self._token:
                del _ACCESS[address]
        if not _keep_workdir:
            if self._workdir is not None:
                shutil.rmtree(self._workdir, ignore_errors=True)  # a user --log lives elsewhere
                self._workdir = None
            self._release_sigterm()

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

    def write_access_file(self) -> Path:
        """``<workdir>/access`` (0600): the token other processes of this user need for shared
        memory (``MASS_TRITON_ACCESS_FILE``); removed with the work dir when the server stops."""
        assert self._workdir is not None, "server not started"
        path = self._workdir / "access"
        path.unlink(missing_ok=True)
        write_access_file(path, self._token)
        return path

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        return _log_tail(self.log_path, lines)


def _in_main_thread() -> bool:
    # PR_SET_PDEATHSIG fires when the starting *thread* exits, so only tie the server's life
    # to the main thread's (a crashed test run or CLI then leaves no orphan server behind).
    return threading.current_thread() is threading.main_thread()


def _exit_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)


def _child_setup() -> None:
    # The python stubs create their shared-memory regions (raw embeddings) with the default
    # 0666 & ~umask: 077 makes them 0600, readable by this user only.
    os.umask(0o077)


def _child_setup_main() -> None:
    _child_setup()
    _die_with_parent()


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
        available = _model_versions(client, model, url)
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


def _model_versions(client, model: str, url: str) -> list[str]:
    from tritonclient.utils import InferenceServerException

    try:
        index = client.get_model_repository_index(as_json=True, headers=client_headers(url))
    except InferenceServerException:
        return []
    return sorted(
        m.get("version", "")
        for m in index.get("models", [])
        if m.get("name") == model and m.get("state") == "READY"
    )
