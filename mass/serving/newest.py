"""The signed record of a model's newest export: removing a version never rolls a job back.

Triton (and a job) serve the newest version folder on disk. Deleting the newest signed
version would make them serve the one before it, which still verifies, with no word. So
``mass export`` also writes ``<model>/mass-newest.json``: the highest version it ever exported
for the model and its weights' sha256, signed (HMAC under the owner key's ``sign`` subkey), and
marks every export.json it writes (``"newest_record": "mass-newest.json"``, covered by the
version's signature). A job that serves "the newest" (no ``--model-version``) refuses
(:class:`mass.errors.ModelRollbackError`) when the newest verifiable version on disk is older
than the record, or when the record is gone although the version says one was written;
``--model-version N`` serves an older version on purpose.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from mass.errors import ChecksumMismatchError, ModelRollbackError
from mass.keys import OwnerKey
from mass.serving.contract import SIGN_PURPOSE

NEWEST = "mass-newest.json"
FLAG = "newest_record"  # the export.json field that says a record was written with it
_FORMAT = "mass-newest-v1"


def _signed(name: str, version: int, sha256: str) -> bytes:
    return f"{_FORMAT}\n{name}\n{version}\n{sha256}\n".encode()


def read_newest(model_dir: Path, key: OwnerKey) -> dict | None:
    """The verified record of ``model_dir``, or None when there is none."""
    path = model_dir / NEWEST
    if not path.exists():
        return None
    try:
        rec = json.loads(path.read_text())
        version, sha, tag = int(rec["version"]), str(rec["sha256"]), str(rec["tag"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ChecksumMismatchError(f"{path}: unreadable ({e}); re-export the model") from e
    if not key.verify(SIGN_PURPOSE, _signed(model_dir.name, version, sha), tag):
        raise ChecksumMismatchError(
            f"{path}: signature does not match (edited, copied from another model or signed "
            "with another key); re-export the model with the owner key"
        )
    return {"version": version, "sha256": sha}


def record_newest(model_dir: Path, version: int, sha256: str, key: OwnerKey) -> None:
    """After an export: record ``version`` unless a higher one is recorded already."""
    try:
        current = read_newest(model_dir, key)
    except ChecksumMismatchError:
        current = None  # a bad record is replaced by this export's
    if current is not None and current["version"] > version:
        return
    tag = key.mac(SIGN_PURPOSE, _signed(model_dir.name, version, sha256))
    rec = {"format": _FORMAT, "name": model_dir.name, "version": version, "sha256": sha256,
           "tag": tag}  # fmt: skip
    tmp = model_dir / f".{NEWEST}.tmp"
    tmp.write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, model_dir / NEWEST)


def check_not_rolled_back(model_dir: Path, version: int, meta: dict, key: OwnerKey) -> None:
    """Refuse to serve ``version`` (the newest on disk, export.json ``meta``) as "the newest"
    when the signed record names a newer export, or was removed."""
    rec = read_newest(model_dir, key)
    if rec is None:
        if meta.get(FLAG):
            raise ModelRollbackError(
                f"{model_dir / NEWEST}: missing, but version {version} was exported with one: "
                "newer versions may have been removed. Pass --model-version "
                f"{version} to serve this one on purpose, or re-export"
            )
        return
    if rec["version"] > version:
        raise ModelRollbackError(
            f"{model_dir}: the newest signed export is version {rec['version']} ({NEWEST}) "
            f"but the newest version on disk is {version}; a removed version is never "
            f"replaced silently by an older one: restore version {rec['version']}, or pass "
            f"--model-version {version} to serve it on purpose"
        )
