"""The release's names: part files, markers and their format tags, object-store versions.

A release directory (or object-store prefix) holds ``part-NNNNN-of-NNNNN.parquet`` files and
the ``_release.json`` marker + manifest (a quarantine: ``_quarantine.json``); on an object
store the marker is a pointer naming one immutable version under ``_versions/`` (see
:mod:`mass.release.commit`). Names starting with ``_`` are not data to Parquet readers.
"""

from __future__ import annotations

import os

from mass import fs

RELEASE_MARKER = "_release.json"  # a release's marker + manifest (on a store: its pointer)
QUARANTINE_MARKER = "_quarantine.json"
VERSIONS = "_versions"  # object stores: OUT/_versions/<pid>-<uuid>-<host>/ (mass.release.commit)


def resolve_release(spec: str) -> list[str] | None:
    """The part files of the release committed at ``spec`` on an object store (its
    ``_release.json`` / ``_quarantine.json`` pointer names a version prefix and the parts, see
    :mod:`mass.release.commit`), or None when ``spec`` holds no pointer."""
    return committed_parts(spec) if fs.is_remote(spec) else None


def committed_parts(spec: str) -> list[str] | None:
    """Part files of the version that ``spec``'s pointer names (None: no pointer there)."""
    for marker in (RELEASE_MARKER, QUARANTINE_MARKER):
        path = fs.join(spec, marker)
        if not fs.isfile(path):
            continue
        doc = fs.read_json(path)
        version = doc.get("version") if isinstance(doc, dict) else None
        if isinstance(version, str) and version.startswith(VERSIONS + "/"):
            return [fs.join(spec, version, p["file"]) for p in doc.get("parts") or []]
    return None


RELEASE_FORMAT = "mass-release/1"
QUARANTINE_FORMAT = "mass-quarantine/1"
MARKER_FORMATS = {RELEASE_MARKER: RELEASE_FORMAT, QUARANTINE_MARKER: QUARANTINE_FORMAT}


def holds_marker(directory: str, marker: str = RELEASE_MARKER) -> bool:
    """True when ``directory`` holds our ``marker`` file with its format tag."""
    path = fs.join(directory, marker)
    if fs.is_remote(path):
        if not fs.isfile(path):
            return False
    elif os.path.islink(path) or not os.path.isfile(path) or os.path.getsize(path) > 1 << 24:
        return False
    try:
        doc = fs.read_json(path)
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and doc.get("format") == MARKER_FORMATS[marker]


def part_files(directory: str) -> list[str]:
    """``directory``'s ``part-*.parquet`` files, sorted (any filesystem)."""
    names = fs.listdir(directory) if fs.isdir(directory) else []
    return [fs.join(directory, n) for n in names
            if n.startswith("part-") and n.endswith(".parquet")]  # fmt: skip


def shard_path(directory: str, shard: int, num_shards: int) -> str:
    return fs.join(directory, f"part-{shard:05d}-of-{num_shards:05d}.parquet")
