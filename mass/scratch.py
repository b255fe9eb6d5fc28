"""Private scratch directories that never outlive their owner for long.

The server's work directory (``mass-triton-*``: staged models, logs, the access token) and the
audit's spill directory (``mass-audit-*``: ids, labels and original embeddings) hold raw data.
:func:`private_dir` creates one in ``$TMPDIR`` with mode 0700 and a marker file
(:data:`MARKER`: owner pid, its start time, and extra fields such as the server's shared-memory
prefix); the owner removes it on every exit path it can see (exceptions, SIGINT, SIGTERM).
SIGKILL leaves it behind: :func:`sweep` (run at the next start) removes every directory of that
prefix that carries our marker, belongs to this user and whose owner process is gone, with the
``/dev/shm`` regions its marker names. A directory without our marker is never touched.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import tempfile
import threading
from pathlib import Path

LOG = logging.getLogger("mass")
MARKER = ".mass-owner"


def _start_time(pid: int) -> float | None:
    try:
        import psutil

        return float(psutil.Process(pid).create_time())
    except Exception:  # psutil missing or the process is gone
        return None


def private_dir(prefix: str, root: str | None = None, **extra: str) -> Path:
    """``<root or $TMPDIR>/<prefix><pid>-<random>``, mode 0700, with our owner marker."""
    path = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=root))
    os.chmod(path, 0o700)
    record = {"pid": os.getpid(), "start": _start_time(os.getpid()), **extra}
    fd = os.open(path / MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(record, f)
    return path


def owner_alive(record: dict) -> bool:
    """Whether the process that wrote ``record`` still runs (same pid and start time)."""
    try:
        pid = int(record["pid"])
    except (KeyError, TypeError, ValueError):
        return False
    start = _start_time(pid)
    if start is None:
        return False
    recorded = record.get("start")
    return recorded is None or abs(float(recorded) - start) < 1.0


def sweep(prefix: str, root: str | None = None) -> list[Path]:
    """Remove ``<root>/<prefix>*`` directories that carry our marker, are this user's and
    whose owner is dead (and the shm regions their marker names); returns what was removed."""
    base = Path(root or tempfile.gettempdir())
    removed = []
    for path in base.glob(f"{prefix}*"):
        try:
            st = os.lstat(path)
            if not path.is_dir() or path.is_symlink() or st.st_uid != os.getuid():
                continue
            record = json.loads((path / MARKER).read_text())
        except (OSError, ValueError):
            continue  # not ours (no marker): never touched
        if not isinstance(record, dict) or owner_alive(record):
            continue
        shm = record.get("shm_prefix")
        if isinstance(shm, str) and shm.startswith("mass_") and "/" not in shm:
            for region in Path("/dev/shm").glob(f"{shm}*"):
                region.unlink(missing_ok=True)
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    if removed:
        LOG.warning("removed %d leftover(s) of killed runs: %s", len(removed),
                    ", ".join(map(str, removed)))  # fmt: skip
    return removed


def _exit_on_sigterm(signum, frame) -> None:
    logging.getLogger(__name__).error("stopped by SIGTERM (exit %d): removing this run's private "
                                      "files", 128 + signum)  # fmt: skip
    raise SystemExit(128 + signum)


class PrivateDir:
    """``with PrivateDir("mass-audit-") as path``: sweep dead owners' leftovers, create a
    :func:`private_dir`, remove it on exit. While it exists, SIGTERM unwinds like Ctrl-C
    (:class:`SystemExit`) when the main thread has no handler of its own, so it is removed on
    SIGTERM too; SIGKILL leaves it for the next run's :func:`sweep`."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.path: Path | None = None
        self._installed = False

    def __enter__(self) -> Path:
        sweep(self.prefix)
        main = threading.current_thread() is threading.main_thread()
        if main and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _exit_on_sigterm)
            self._installed = True
        self.path = private_dir(self.prefix)
        return self.path

    def __exit__(self, *exc) -> None:
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)
            self.path = None
        if self._installed and signal.getsignal(signal.SIGTERM) is _exit_on_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        self._installed = False


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
