"""Where a release is committed: ownership checks, staging, crash recovery and the commit.

Local disk: the job stages into ``OUT.tmp-<pid>-<uuid>`` beside ``OUT`` and swaps it into place
(one atomic ``renameat2`` exchange on Linux; elsewhere via ``OUT.old-<pid>-<uuid>``, put back by
:func:`recover_output` after a crash between the two renames).

Object stores (``s3://``, ``gs://``, ... through :mod:`mass.fs`) have no rename. There a
release is a set of immutable versions under ``OUT/_versions/<pid>-<uuid>-<host>/`` (staged
there, written once) and a small pointer object ``OUT/_release.json`` (``OUT/_quarantine.json``
for a quarantine): the version's manifest plus ``"version"``, the prefix it names. The
pointer is written LAST, in one PUT, which S3 and GCS make atomic (a reader sees the previous
pointer or the new one, never a mix). So: a reader resolving the pointer
(:func:`mass.formats.committed_parts`, used by :func:`mass.io.expand_paths`, hence ``mass audit``,
``mass train`` and the jobs' own readers) sees exactly one complete release; the previous
version stays readable until the new pointer is written and is deleted only afterwards; a
crash before the pointer leaves the previous release (the orphaned version is removed by the
next run, :func:`recover_output`). ``_versions`` starts with ``_``, so readers that do not know
the pointer (Spark, pyarrow datasets on ``OUT``) see no data rather than a mixed set; point
them at ``OUT/<version>`` from the pointer.

Ownership is the same on both: the job replaces only a path that does not exist or holds our
marker with its format tag (an object-store prefix holding only our ``_versions/`` counts as
ours: a first run that crashed before its first commit).
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import uuid
from collections.abc import Callable

from mass import fs, scratch
from mass.errors import ReleaseError
from mass.formats import (
    QUARANTINE_MARKER,
    RELEASE_FORMAT,
    RELEASE_MARKER,
    VERSIONS,
    holds_marker,
)
from mass.release.manifest import part_entries
from mass.scratch import pid_alive

# Test-only: SIGKILL the job at a publication point ("before-swap", "after-swap") so the
# crash tests kill inside the swap itself (tests/failclosed/test_atomic_publish.py).
KILL_AT_ENV = "MASS_TEST_KILL_AT"
SCRATCH_PREFIX = "mass-job-"  # a job's private scratch (scratch_root)
_COMMITTED: set[str] = set()  # staged versions this process committed (never discarded)


def staging_dir(out: str, kind: str = "tmp") -> str:
    """``OUT.<kind>-<pid>-<uuid>``: the pid lets a later run tell a crashed job's leftovers.
    On an object store: a new version prefix ``OUT/_versions/<pid>-<uuid>-<host>``."""
    if fs.is_remote(out):
        name = f"{os.getpid()}-{uuid.uuid4().hex[:12]}-{socket.gethostname()}"
        return fs.join(fs.normpath(out), VERSIONS, name)
    return f"{os.path.normpath(out)}.{kind}-{os.getpid()}-{uuid.uuid4().hex[:12]}"


def private_dir(path: str) -> str:
    """Create the local directory ``path`` mode 0700 (whatever the umask) before anything is
    written into it: the job's staging holds input embeddings and labels. A store path is
    left to the store's own permissions."""
    if not fs.is_remote(path):
        os.makedirs(path, mode=0o700, exist_ok=True)
        os.chmod(path, 0o700)
    return path


def kill_point(name: str) -> None:
    """Test-only crash hook: SIGKILL this process when ``$MASS_TEST_KILL_AT`` is ``name``."""
    if os.environ.get(KILL_AT_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


def recover_output(out: str) -> list[str]:
    """Clean up after a job that was killed (SIGKILL, OOM, power) while publishing ``out``.

    Staging (``.tmp-``) and displaced (``.old-``) directories whose job is no longer running
    are removed; if ``out`` itself is missing but a dead job's ``.old-`` copy exists (a crash
    between the two renames of the non-atomic fallback), that previous release is put back.
    Returns the paths removed or restored (for the log).
    """
    if fs.is_remote(out):
        return _recover_remote(fs.normpath(out))
    base = os.path.normpath(out)
    touched = []
    for kind in ("old", "tmp"):
        for path in sorted(glob.glob(f"{glob.escape(base)}.{kind}-*")):
            pid = path.rsplit(f".{kind}-", 1)[1].split("-", 1)[0]
            if pid.isdigit() and pid_alive(int(pid)) and int(pid) != os.getpid():
                continue  # another live job's directory: not ours to touch
            if kind == "old" and not os.path.exists(base):
                os.replace(path, base)
            else:
                shutil.rmtree(path, ignore_errors=True)
            touched.append(path)
    return touched


def _exchange(a: str, b: str) -> bool:
    """Atomically swap two directories (Linux ``renameat2(RENAME_EXCHANGE)``); False if
    the platform or filesystem cannot, so the caller falls back to two renames."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    rc = fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)
    return rc == 0


def _public_mode(staging: str) -> None:
    """A staging directory is created 0700 (beam_pipelines.plan.Staging); the published one
    gets the mode a directory made under the process's umask would have."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(staging, 0o777 & ~mask)


def swap_into_place(staging: str, out: str, *, published: Callable[[], None] | None = None) -> None:
    """Make ``staging`` the new ``out``; the previous ``out`` is removed only afterwards.

    Where the kernel can, the two directories are exchanged in one atomic step, so every
    observer (and every crash) sees either the whole previous release or the whole new one.
    Elsewhere the previous one is first renamed to ``.old-<pid>-...``; a crash between the two
    renames leaves it there and :func:`recover_output` (run by the next job) puts it back.
    On an object store the staged version is committed by its pointer (module docstring).
    """
    if fs.is_remote(out):
        return _commit_remote(staging, fs.normpath(out), published)
    _public_mode(staging)
    if os.path.isdir(out) and _exchange(staging, out):
        if published is not None:
            published()
        shutil.rmtree(staging, ignore_errors=True)  # now holds the previous release
        return
    old = None
    if os.path.exists(out):
        old = staging_dir(out, "old")
        os.replace(out, old)
    try:
        os.replace(staging, out)
    except OSError as e:
        if old is not None:
            os.replace(old, out)
        raise ReleaseError(f"{out}: could not publish ({e}); the previous release is kept") from e
    if published is not None:
        published()
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _version_owner(name: str) -> tuple[int | None, str]:
    pid, _, rest = name.partition("-")
    return (int(pid) if pid.isdigit() else None), rest.partition("-")[2]


def _recover_remote(out: str) -> list[str]:
    """Remove staged versions of ``out`` that no pointer names and whose job (on this host)
    is gone. Versions staged on another host are left alone: their job may still run."""
    current = None
    for marker in (RELEASE_MARKER, QUARANTINE_MARKER):
        if holds_marker(out, marker):
            current = fs.read_json(fs.join(out, marker)).get("version")
    root = fs.join(out, VERSIONS)
    touched = []
    for name in fs.listdir(root) if fs.isdir(root) else []:
        pid, host = _version_owner(name)
        if f"{VERSIONS}/{name}" == current or host != socket.gethostname():
            continue
        if pid is not None and pid != os.getpid() and pid_alive(pid):
            continue  # another live job's version: not ours to touch
        fs.rmtree(fs.join(root, name))
        touched.append(fs.join(root, name))
    return touched


def _pointer(staging: str) -> tuple[str, dict]:
    """(marker name, manifest) of a staged version; a staging without a manifest (extract)
    gets a minimal one naming its part files."""
    for marker in (RELEASE_MARKER, QUARANTINE_MARKER):
        if fs.isfile(fs.join(staging, marker)):
            return marker, fs.read_json(fs.join(staging, marker))
    parts = part_entries(staging)
    return RELEASE_MARKER, {"format": RELEASE_FORMAT, "rows": sum(p["rows"] for p in parts),
                            "parts": parts}  # fmt: skip


def _commit_remote(staging: str, out: str, published: Callable[[], None] | None) -> None:
    """Write the pointer naming the staged version (one PUT: the commit), then drop the
    previous version. A crash before the PUT leaves the previous release, after it the new one.

    A release staged privately (local scratch or ``--temp_location``: :func:`scratch_root`) is
    copied to a new version under ``out`` only here, after its audit passed: nothing unaudited
    is ever under the release prefix. A version already staged under ``out/_versions/`` (the
    features of `mass extract`, which are no release) is committed in place."""
    if fs.normpath(fs.dirname(staging)) == fs.normpath(fs.join(out, VERSIONS)):
        target = fs.normpath(staging)
    else:
        target = staging_dir(out)
        try:
            fs.copy_tree(staging, target)
        except BaseException:
            fs.rmtree(target)  # a partial copy is never left (nor named by a pointer)
            raise
    version = f"{VERSIONS}/{fs.basename(target)}"
    marker, doc = _pointer(target)
    previous = (
        fs.read_json(fs.join(out, marker)).get("version") if holds_marker(out, marker) else None
    )
    fs.write_json(fs.join(out, marker), {**doc, "version": version})
    _COMMITTED.add(target)
    if published is not None:
        published()
    if previous and previous != version and previous.startswith(VERSIONS + "/"):
        fs.rmtree(fs.join(out, previous))


def scratch_root(temp_location: str | None) -> str:
    """A new private directory for one job's raw intermediates (the staged release and
    quarantine, spills holding each row's input embedding, the pseudonymized input copy, the
    audit's filtered labels) when they may not be staged beside the output: below
    ``temp_location`` when given (a store prefix or local path every worker reaches and release
    readers do not), else in the local temp directory, mode 0700 with an owner marker
    (:mod:`mass.scratch`). Named ``mass-job-<pid>-...`` so that the next run removes a killed
    job's leftovers (:func:`sweep_scratch`)."""
    if temp_location is None or not fs.is_remote(temp_location):
        if temp_location is not None:
            os.makedirs(temp_location, exist_ok=True)
        return str(scratch.private_dir(SCRATCH_PREFIX, root=temp_location))
    name = f"{SCRATCH_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}-{socket.gethostname()}"
    return fs.join(fs.normpath(temp_location), name)


def sweep_scratch(temp_location: str | None) -> list[str]:
    """Remove the :func:`scratch_root` directories of jobs that are gone: locally those with
    our owner marker whose owner died (:func:`mass.scratch.sweep`); on a store those named by
    a dead process of this host (another host's job may still run)."""
    if temp_location is None or not fs.is_remote(temp_location):
        return [str(p) for p in scratch.sweep(SCRATCH_PREFIX, temp_location)]
    root = fs.normpath(temp_location)
    removed = []
    for name in fs.listdir(root) if fs.isdir(root) else []:
        if not name.startswith(SCRATCH_PREFIX):
            continue
        pid, host = _version_owner(name[len(SCRATCH_PREFIX) :])
        if pid is None or host != socket.gethostname() or pid == os.getpid() or pid_alive(pid):
            continue
        fs.rmtree(fs.join(root, name))
        removed.append(fs.join(root, name))
    return removed


def discard_staging(path: str) -> None:
    """Remove a staging directory / version unless this process committed it."""
    if fs.normpath(path) in _COMMITTED:
        return
    if fs.is_remote(path):
        fs.rmtree(path)
    else:
        shutil.rmtree(path, ignore_errors=True)
