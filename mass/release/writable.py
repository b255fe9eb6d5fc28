"""Every local path a job will write is proven writable before any work.

:func:`mass.release.ownership.check_outputs` decides *whether* the job may replace its outputs;
this module decides whether it *can*: for each local output path it creates (and removes) a
probe directory in the directory the job will write into - the nearest existing ancestor of
the path's parent for ``--output``/``--quarantine`` (replaced as a whole), of the path itself
for ``--report`` (written into) - so a path under ``/proc``, a read-only mount or a directory
without write permission (root included, which ``os.access`` would wave through) fails with
:class:`mass.errors.OutputPathError` naming the flag, before a row is read, not with a
traceback after the job has published. Object-store paths are checked by their own writers.
"""

from __future__ import annotations

import os
import tempfile

from mass import fs
from mass.errors import OutputPathError


def _nearest_existing(path: str) -> str:
    p = os.path.abspath(path)
    while not os.path.lexists(p):
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    return p


def probe_writable(flag: str, path: str, *, into: bool) -> None:
    """Refuse ``flag path`` unless a directory can be created where the job will write:
    inside ``path`` (``into``: the job writes into it) or beside it (it is replaced)."""
    if fs.is_remote(path):
        return
    local = path.removeprefix("file://")
    where = _nearest_existing(local if into else os.path.dirname(os.path.abspath(local)))
    if not os.path.isdir(where):
        raise OutputPathError(
            f"{flag} {path}: {where} is not a directory, so nothing can be written there; "
            "choose a path under a writable directory; nothing was read or published"
        )
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".mass-probe-", dir=where))
    except OSError as e:
        raise OutputPathError(
            f"{flag} {path}: cannot write under {where} ({e.strerror or e}); choose a path "
            "under a writable directory; nothing was read or published"
        ) from e
