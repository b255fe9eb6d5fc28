"""sha256 of a file, streamed in 1 MiB chunks: the one helper every caller uses (exports and
their signed manifests, release part files, extractor checkpoints)."""

from __future__ import annotations

import hashlib
import os


def sha256_file(path: str | os.PathLike[str]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def code_sha256(package_dir: str | os.PathLike[str] | None = None) -> str:
    """sha256 over the ``*.py`` sources of the ``mass`` package (or ``package_dir``): each
    file's path relative to it, a NUL, its sha256, a newline, in sorted order. The served
    adapters import from this package, so export.json records it as the served code's digest:
    two exports with the same digest ran the same code (any edit to ``mass`` changes it)."""
    root = os.path.abspath(package_dir or os.path.dirname(__file__))
    files = sorted(
        os.path.relpath(os.path.join(d, f), root)
        for d, dirs, names in os.walk(root)
        if "__pycache__" not in d.split(os.sep)
        for f in names
        if f.endswith(".py")
    )
    h = hashlib.sha256()
    for rel in files:
        h.update(f"{rel.replace(os.sep, '/')}\0{sha256_file(os.path.join(root, rel))}\n".encode())
    return h.hexdigest()
