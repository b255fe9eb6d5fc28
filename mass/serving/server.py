"""The local Triton Inference Server (the real binary shipped in the ``nvidia-pytriton`` wheel).

:class:`TritonServer` starts ``tritonserver`` on a model repository, bound to 127.0.0.1 only,
waits until it is ready and stops it (and its python-backend stub processes) on exit. What the
wheel's server needs to run here is in :mod:`mass.serving.install`; health checks of any
server in :mod:`mass.serving.health`.

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
  :func:`mass.serving.access.client_headers`). Inference, health and metadata stay open. The
  token is on the server's command line, readable in ``/proc`` by other local users unless
  ``/proc`` is mounted ``hidepid=2`` (Triton has no other way to take it).
* The server never sees the user's repository: the models it may serve (``models``; default
  every signed export) are copied into ``<work dir>/models`` and verified there with the owner
  key (:mod:`mass.serving.staging`); a requested folder nobody signed is refused by name before
  launching and every other folder is never loaded. Model control is always explicit
  (``--load-model=NAME`` for each staged model, never ``*``): a second wall. The served
  adapters check their staged copy again in ``initialize`` against the digests the job wrote,
  with no key: neither the owner key nor a key-file path is in the server's or a stub's
  environment (:func:`mass.serving.install.server_env` drops them).
* The work directory (``/tmp/mass-triton-<pid>-*``, 0700, with an owner marker) is removed on
  every exit path: a failed start, an exception, SIGINT, and SIGTERM (a handler that raises
  :class:`SystemExit` is installed while a server runs, when the main thread has none of its
  own); one left by a SIGKILLed owner is swept, with its shm regions, at the next start
  (:func:`mass.scratch.sweep`).
* ``--exit-timeout-secs`` is lowered from 30 s so SIGTERM shutdowns are quick.
* The server runs in its own session (``killpg`` reaches the stubs) and, when started from the
  main thread, gets ``PR_SET_PDEATHSIG`` so a crashed caller leaves no orphan server.

Startup time is the stubs' imports: ~1 s for an empty repository, ~5 s for numpy-only models,
and 15-45 s for three torch models on the 2 shared cores here (each stub imports torch in its
own process); a sentence-transformers model adds about a minute. ``startup_timeout`` must allow
for that on a loaded machine.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from mass.errors import ServingError
from mass.keys import SIGNING_KEY_ENV, resolve_key
from mass.scratch import private_dir, sweep
from mass.serving import access
from mass.serving.contract import ACCESS_HEADER, GRPC_HEADER_PREFIX, RESTRICTED
from mass.serving.health import grpc_client, ready
from mass.serving.install import (
    build_shm_shim,
    find_tritonserver,
    prepare_backends,
    server_env,
)
from mass.serving.manifest import signing_key
from mass.serving.process import (
    child_setup,
    child_setup_main,
    descendants,
    hold_sigterm,
    in_main_thread,
    kill_pids,
    release_sigterm,
    signal_group,
)
from mass.serving.staging import StagedModel, stage_models, wanted_models

LOG = logging.getLogger(__name__)
_LOG_TAIL_LINES = 40


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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

    Ports default to free ones; everything binds to 127.0.0.1. ``models`` names what the
    server may serve (names, ``name:version`` or ``{name: version}``; default: the newest
    version of every signed export); they are staged and verified (``signing_key_file`` or
    ``MASS_SIGNING_KEY_FILE``) before launching. ``model_control`` ``none`` loads them all;
    ``explicit`` loads those in ``load_models`` (default all) and a client loads the other
    staged ones later (``InferenceServerClient.load_model``, with :attr:`client_headers`).
    ``poll`` is refused: it would load whatever appears in the repository, unverified.
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
        signing_key_file: str | os.PathLike[str] | None = None,
        models=None,
    ) -> None:
        self.repository = Path(repository).resolve()
        if not self.repository.is_dir():
            raise ServingError(
                f"model repository {self.repository} does not exist or is not a folder"
            )
        if model_control == "poll":
            raise ServingError(
                "model control 'poll' would load whatever appears in the repository, unverified; "
                "use 'none' or 'explicit' and restart the server after `mass export`"
            )
        if model_control not in ("none", "explicit"):
            raise ServingError(f"model_control={model_control!r}: use 'none' or 'explicit'")
        self._fixed_ports = (grpc_port, http_port, metrics_port)
        self.grpc_port, self.http_port, self.metrics_port = grpc_port, http_port, metrics_port
        self.startup_timeout = startup_timeout
        self.model_control = model_control
        self.exit_timeout = exit_timeout
        if load_models is not None and model_control != "explicit":
            raise ServingError("load_models needs model_control='explicit'")
        self.load_models = None if load_models is None else tuple(load_models)
        self.models = wanted_models(models)
        self.staged: list[StagedModel] = []
        self.extra_args = tuple(extra_args)
        self._install = find_tritonserver()
        self._workdir: Path | None = None
        self._user_log = Path(log_path) if log_path is not None else None
        self._shm_prefix = f"mass_{secrets.token_hex(12)}_"
        self._token = secrets.token_hex(32)
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

    @property
    def staged_repository(self) -> Path:
        """The private repository the server runs on (verified copies, see module docs)."""
        assert self._workdir is not None, "server not started"
        return self._workdir / "models"

    def start(self) -> TritonServer:
        """Stage and verify the models, start the server and block until it (and every
        model) is ready; on any failure nothing is left running and the work dir is gone."""
        if self.process is not None and self.process.poll() is None:
            raise ServingError(f"tritonserver (pid {self.process.pid}) is already running")
        key = signing_key(resolve_key(self.signing_key_file, SIGNING_KEY_ENV))
        sweep("mass-triton-")
        self._catch_sigterm()
        try:
            if self._workdir is None:
                self._workdir = private_dir("mass-triton-", shm_prefix=self._shm_prefix)
            self.staged = stage_models(self.repository, self.staged_repository, self.models, key)
            self._check_load_models()
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

    def _check_load_models(self) -> None:
        names = [m.name for m in self.staged]
        unknown = sorted(set(self.load_models or ()) - set(names))
        if unknown:
            raise ServingError(
                f"load_models {unknown}: not staged (staged: {names}); name them in models"
            )
        LOG.info("serving %s", ", ".join(f"{m.name} version {m.version}" for m in self.staged))

    def _catch_sigterm(self) -> None:
        """SIGTERM unwinds like Ctrl-C while this server runs (:func:`hold_sigterm`)."""
        if not self._holds_sigterm:
            self._holds_sigterm = hold_sigterm()

    def _release_sigterm(self) -> None:
        if self._holds_sigterm and in_main_thread():
            self._holds_sigterm = False
            release_sigterm()

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
        backends = prepare_backends(self._workdir, self._install)
        cmd = [
            str(self._install.binary),
            f"--model-repository={self.staged_repository}",
            f"--backend-directory={backends}",
            "--http-address=127.0.0.1",
            "--grpc-address=127.0.0.1",
            "--metrics-address=127.0.0.1",
            f"--http-port={self.http_port}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-port={self.metrics_port}",
            "--model-control-mode=explicit",  # only what is named below ever loads
            f"--exit-timeout-secs={self.exit_timeout}",
            f"--backend-config=python,shm-region-prefix-name={self._shm_prefix}",
            f"--grpc-restricted-protocol={RESTRICTED}:{ACCESS_HEADER}={self._token}",
            f"--http-restricted-api={RESTRICTED}:{ACCESS_HEADER}={self._token}",
        ]
        load = [m.name for m in self.staged] if self.load_models is None else self.load_models
        cmd += [f"--load-model={m}" for m in load]
        return cmd + list(self.extra_args)

    def _env(self) -> dict[str, str]:
        env = server_env(self._install)
        assert self._workdir is not None
        shim = build_shm_shim(self._workdir)
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
                preexec_fn=child_setup_main if in_main_thread() else child_setup,
            )
        for address in (self.grpc_url, self.http_url):
            access.register(address, self._token)
        LOG.info(
            "tritonserver pid %d on grpc %s, http %s; log %s",
            self.process.pid,
            self.grpc_url,
            self.http_url,
            self.log_path,
        )
        client = grpc_client(self.grpc_url)
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
            if ready(client):
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
            children = descendants(proc.pid)
            if proc.poll() is None:
                signal_group(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=self.exit_timeout + 10)
                except subprocess.TimeoutExpired:
                    signal_group(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=10)
            # Stubs normally exit with the server; kill any that outlived it (e.g. after SIGKILL).
            kill_pids(children)
        for leftover in Path("/dev/shm").glob(f"{self._shm_prefix}*"):
            leftover.unlink(missing_ok=True)
        for address in (self.grpc_url, self.http_url):
            access.forget(address, self._token)
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
            children = descendants(self.process.pid)  # stubs are orphaned by the kill
            signal_group(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
            kill_pids(children)

    def write_access_file(self) -> Path:
        """``<workdir>/access`` (0600): the token other processes of this user need for shared
        memory (``MASS_TRITON_ACCESS_FILE``); removed with the work dir when the server stops."""
        assert self._workdir is not None, "server not started"
        path = self._workdir / "access"
        path.unlink(missing_ok=True)
        access.write_access_file(path, self._token)
        return path

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        return _log_tail(self.log_path, lines)
