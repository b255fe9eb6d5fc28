"""Output ownership, decided before any work: the job replaces only a path that does not
exist or holds our marker with its format tag (an object-store prefix holding only our
``_versions/`` counts as ours: a first run that crashed before its first commit), never an
input, a link, a mount point or a file; its outputs do not nest, its report lies outside
them, and its raw intermediates (``--temp_location``) lie outside every output and input.
The commit itself is :mod:`mass.release.commit`'s."""

from __future__ import annotations

import glob
import os

from mass import fs
from mass.errors import OutputPathError
from mass.formats import QUARANTINE_MARKER, RELEASE_MARKER, VERSIONS, holds_marker


def _real(path: str) -> str:
    if fs.is_remote(path):
        return fs.normpath(path)
    return os.path.realpath(os.path.abspath(path))


def _inside(a: str, b: str) -> bool:
    """``a`` equals ``b`` or lies below it (both real, absolute, or both URIs)."""
    sep = "/" if fs.is_remote(b) else os.sep
    return a == b or a.startswith(b.rstrip(sep) + sep)


def lies_inside(path: str, root: str) -> bool:
    """``path`` is ``root`` or lies below it, links resolved (local paths or URIs)."""
    return _inside(_real(path), _real(root))


def input_roots(spec: str) -> list[str]:
    """The paths ``spec`` reads: itself (file or directory), or each file a glob matches."""
    if fs.is_remote(spec):
        globbed = not fs.exists(spec) and any(ch in spec for ch in "*?[")
        return fs.glob(spec) if globbed else [spec]
    if not os.path.lexists(spec) and any(ch in spec for ch in "*?["):
        return sorted(glob.glob(spec, recursive=True))
    return [spec]


def check_replaceable(flag: str, path: str, marker: str) -> None:
    """Refuse ``path`` unless it does not exist or is a directory holding our ``marker``."""
    if fs.is_remote(path):
        return _check_replaceable_remote(flag, fs.normpath(path), marker)
    p = os.path.normpath(path)
    if os.path.islink(p):
        raise OutputPathError(
            f"{flag} {path}: is a symbolic link (to {os.readlink(p)}); the job never replaces "
            "a link or publishes through one: pass the real directory"
        )
    if not os.path.lexists(p):
        parent = os.path.dirname(os.path.abspath(p))
        while not os.path.lexists(parent):
            parent = os.path.dirname(parent)
        if not os.path.isdir(parent):
            raise OutputPathError(f"{flag} {path}: {parent} is not a directory")
        return
    if os.path.ismount(p):
        raise OutputPathError(
            f"{flag} {path}: is a mount point; a release is published by renaming a "
            "directory into place, which a mount point cannot take: pass a directory inside it"
        )
    if not os.path.isdir(p):
        raise OutputPathError(
            f"{flag} {path}: is an existing file, not a directory written by mass; the job "
            "never replaces it: choose another path or remove the file yourself"
        )
    if not holds_marker(p, marker):
        raise OutputPathError(
            f"{flag} {path}: is an existing directory without the {marker} marker that mass "
            "writes into its own outputs; the job replaces only those (or a path that does "
            "not exist): choose a new path, or move the directory away yourself"
        )


def check_outputs(*, output: str, quarantine: str, inputs: str, report: str | None = None,
                  temp: str | None = None) -> None:  # fmt: skip
    """Decide, before any work, that the job may replace ``output`` and ``quarantine`` (and
    write its audit report into ``report``, its raw intermediates below ``temp``, Beam's
    --temp_location); raise :class:`OutputPathError` naming the path.
    """
    outs = (("--output", output, RELEASE_MARKER), ("--quarantine", quarantine, QUARANTINE_MARKER))
    for flag, path in (*((f, p) for f, p, _ in outs), ("--report", report)):
        if path is not None and (above := fs.file_ancestor(path)) is not None:
            raise OutputPathError(
                f"{flag} {path}: {above} is a file, not a directory, so nothing can be written "
                f"under it; choose a {flag} path under a directory; nothing was read or published"
            )
    roots = [(r, _real(r)) for r in input_roots(inputs)]
    for flag, path, marker in outs:
        real = _real(path)
        for shown, root in roots:
            if _inside(real, root) or _inside(root, real):
                how = ("is" if real == root else "lies inside" if _inside(real, root)
                       else "contains")  # fmt: skip
                raise OutputPathError(
                    f"{flag} {path}: {how} the input {shown}; replacing it would destroy the "
                    "input: choose a directory outside it"
                )
        check_replaceable(flag, path, marker)
    o, q = _real(output), _real(quarantine)
    if _inside(o, q) or _inside(q, o):
        how = "are the same directory" if o == q else "are nested"
        raise OutputPathError(
            f"--output {output} and --quarantine {quarantine} {how}; give each its own directory"
        )
    if temp is not None:
        _check_temp(temp, outs=[(f, p) for f, p, _ in outs] + [("--report", report)],
                    roots=roots)  # fmt: skip
    if report is None:
        return
    r = fs.normpath(report)
    if (
        fs.is_remote(r)
        and fs.isfile(r)
        or not fs.is_remote(r)
        and os.path.lexists(r)
        and not os.path.isdir(r)
    ):
        raise OutputPathError(f"--report {report}: is an existing file; pass a directory")
    for flag, path, _ in outs:
        if _inside(_real(r), _real(path)):
            raise OutputPathError(
                f"--report {report}: lies inside {flag} {path}, which the job replaces; "
                "put the report elsewhere"
            )
    for shown, root in roots:
        if _inside(_real(r), root):
            raise OutputPathError(
                f"--report {report}: lies inside the input {shown}; the job never writes "
                "into its input: put the report elsewhere"
            )


def _check_temp(temp: str, *, outs, roots) -> None:
    """The job's raw intermediates go below --temp_location: never where the release, its
    quarantine or report are read, nor into an input."""
    t = _real(temp)
    for flag, path in outs:
        if path is not None and _inside(t, _real(path)):
            raise OutputPathError(
                f"--temp_location {temp}: lies inside {flag} {path}; the job's raw "
                "intermediates (input copies, spills, the unaudited release) would be readable "
                "where that output is read: choose a private location outside it"
            )
    for shown, root in roots:
        if _inside(t, root):
            raise OutputPathError(
                f"--temp_location {temp}: lies inside the input {shown}; the job never writes "
                "into its input: choose a private location outside it"
            )


def _check_replaceable_remote(flag: str, p: str, marker: str) -> None:
    if fs.isfile(p):
        raise OutputPathError(
            f"{flag} {p}: is an existing object, not a release prefix written by mass; the "
            "job never replaces it: choose another path or remove it yourself"
        )
    if not fs.isdir(p) or holds_marker(p, marker):
        return
    if fs.listdir(p) == [VERSIONS]:
        return  # only our staged versions: a first run that never committed
    raise OutputPathError(
        f"{flag} {p}: holds objects but no {marker} pointer that mass writes into its own "
        "outputs; the job replaces only those (or an empty prefix): choose a new prefix, or "
        "move the objects away yourself"
    )
