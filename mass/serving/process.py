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


_SIGTERM_USERS = 0  # running servers that rely on the SIGTERM -> SystemExit handler


def hold_sigterm() -> bool:
    """SIGTERM unwinds like Ctrl-C (SystemExit), so ``with``/``finally`` blocks clean up; only
    from the main thread and only when nobody installed a handler of their own. True when the
    caller now holds the handler (it stays while any holder runs; :func:`release_sigterm`)."""
    global _SIGTERM_USERS
    if not in_main_thread():
        return False
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, exit_on_sigterm)
    if signal.getsignal(signal.SIGTERM) is not exit_on_sigterm:
        return False
    _SIGTERM_USERS += 1
    return True


def release_sigterm() -> None:
    """One holder of :func:`hold_sigterm` is done (main thread): the last one puts back the
    default action, unless someone installed a handler of their own since."""
    global _SIGTERM_USERS
    _SIGTERM_USERS -= 1
    if _SIGTERM_USERS == 0 and signal.getsignal(signal.SIGTERM) is exit_on_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


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


def kill_pids(pids: list[int]) -> None:
    """SIGKILL each of ``pids`` still alive (stubs that outlived their server)."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
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
