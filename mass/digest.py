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
