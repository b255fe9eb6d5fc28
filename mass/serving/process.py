"""Process plumbing of the local server: its own session (``killpg`` reaches the python-backend
stubs), umask 077 for the regions the stubs create, ``PR_SET_PDEATHSIG`` when started from the
main thread, SIGTERM unwinding as :class:`SystemExit`, and its descendants (to kill stubs that
outlive a crashed server)."""

from __future__ import annotations

import os
import signal
import threading


def in_main_thread() -> bool:
    # PR_SET_PDEATHSIG fires when the starting *thread* exits, so only tie the server's life
    # to the main thread's (a crashed test run or CLI then leaves no orphan server behind).
    return threading.current_thread() is threading.main_thread()


def exit_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)


def child_setup() -> None:
    # The python stubs create their shared-memory regions (raw embeddings) with the default
    # 0666 & ~umask: 077 makes them 0600, readable by this user only.
    os.umask(0o077)


def child_setup_main() -> None:
    child_setup()
    _die_with_parent()


def _die_with_parent() -> None:
    import ctypes

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def descendants(pid: int) -> list[int]:
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil comes with dask.distributed
        return []
    try:
        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []
