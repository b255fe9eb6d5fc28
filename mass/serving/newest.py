"""The signed record of a model's newest export: removing a version never rolls a job back.

Triton (and a job) serve the newest version folder on disk. Deleting the newest signed
version would make them serve the one before it, which still verifies, with no word. So
``mass export`` also writes ``<model>/mass-newest.json``: the highest version it ever exported
for the model, its weights' sha256, the model's name and its *lineage* (a random id drawn at
the model's first export and kept by every later one), signed (HMAC under the owner key's
``sign`` subkey). Every export.json it writes says so (``"newest_record"``), carries the
lineage and names its predecessor (the version and sha256 the record named before it, or
null), all covered by the version's signature.

A job that serves "the newest" (no ``--model-version``) refuses
(:class:`mass.errors.ModelRollbackError`) when the newest verifiable version on disk is older
than the record, or is not the export the record names (another sha256 or lineage), or when
the record is gone although the version says one was written. A record signed for another
model (name) fails its signature. An older record restored after the newer version was
deleted (from a backup, the DVC cache) is itself a valid signed file, so the repository alone
cannot tell it from the past: the owner's *ledger* remembers, per lineage and model directory,
the highest version every export and every job on this machine has seen (``$MASS_STATE_DIR/newest-ledger.json``,
default ``$XDG_STATE_HOME/mass`` or ``~/.local/state/mass``; a 0700 directory outside any
repository or release). A record older than the ledger's is refused as replayed.
``--model-version N`` serves an older version on purpose.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

from mass.errors import ChecksumMismatchError, ConfigError, ModelRollbackError
from mass.keys import STATE_ENV, OwnerKey, state_dir
from mass.serving.contract import SIGN_PURPOSE

NEWEST = "mass-newest.json"
FLAG = "newest_record"  # the export.json field that says a record was written with it
LINEAGE = "newest_lineage"  # export.json: the lineage of the record written with it
PREDECESSOR = "predecessor"  # export.json: {version, sha256} the record named before, or None
LEDGER = "newest-ledger.json"
_FORMAT = "mass-newest-v2"


def _signed(name: str, version: int, sha256: str, lineage: str) -> bytes:
    return f"{_FORMAT}\n{name}\n{version}\n{sha256}\n{lineage}\n".encode()


def read_newest(model_dir: Path, key: OwnerKey) -> dict | None:
    """The verified record of ``model_dir`` ({version, sha256, lineage}), or None."""
    path = model_dir / NEWEST
    if not path.exists():
        return None
    try:
        rec = json.loads(path.read_text())
        version, sha, tag = int(rec["version"]), str(rec["sha256"]), str(rec["tag"])
        lineage = str(rec["lineage"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ChecksumMismatchError(
            f"{path}: unreadable or of an older format ({e}); re-export the model"
        ) from e
    if not key.verify(SIGN_PURPOSE, _signed(model_dir.name, version, sha, lineage), tag):
        raise ChecksumMismatchError(
            f"{path}: signature does not match (edited, copied from another model or signed "
            "with another key); re-export the model with the owner key"
        )
    return {"version": version, "sha256": sha, "lineage": lineage}


def next_record(model_dir: Path, key: OwnerKey) -> dict:
    """What an export about to be written signs into its export.json: the lineage (kept, or
    new for a model without a valid record) and its predecessor (the record, or None)."""
    try:
        current = read_newest(model_dir, key)
    except ChecksumMismatchError:
        current = None  # a bad record is replaced by this export's
    if current is None:
        return {LINEAGE: secrets.token_hex(16), PREDECESSOR: None}
    pred = {"version": current["version"], "sha256": current["sha256"]}
    return {LINEAGE: current["lineage"], PREDECESSOR: pred}


def record_newest(model_dir: Path, version: int, sha256: str, key: OwnerKey,
                  lineage: str | None = None) -> None:  # fmt: skip
    """After an export: record ``version`` unless a higher one of this lineage is recorded
    (``lineage`` None: the current record's, else a new one; :func:`next_record`)."""
    try:
        current = read_newest(model_dir, key)
    except ChecksumMismatchError:
        current = None
    if lineage is None:
        lineage = str(next_record(model_dir, key)[LINEAGE])
    if current is not None and current["lineage"] == lineage and current["version"] > version:
        return
    tag = key.mac(SIGN_PURPOSE, _signed(model_dir.name, version, sha256, lineage))
    rec = {"format": _FORMAT, "name": model_dir.name, "version": version, "sha256": sha256,
           "lineage": lineage, "tag": tag}  # fmt: skip
    tmp = model_dir / f".{NEWEST}.tmp"
    tmp.write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, model_dir / NEWEST)
    remember(model_dir, version, sha256, lineage)


def check_not_rolled_back(model_dir: Path, version: int, meta: dict, key: OwnerKey) -> None:
    """Refuse to serve ``version`` (the newest on disk, export.json ``meta``) as "the newest"
    when the signed record names a newer or another export, was removed, or is older than
    the ledger remembers (a replayed record)."""
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
    if rec["version"] == version and (
        meta.get("sha256", rec["sha256"]) != rec["sha256"]
        or meta.get(LINEAGE, rec["lineage"]) != rec["lineage"]
    ):
        raise ModelRollbackError(
            f"{model_dir / NEWEST}: names version {version} with weights "
            f"{rec['sha256'][:12]} (lineage {rec['lineage'][:8]}), but version {version} on "
            f"disk is {str(meta.get('sha256'))[:12]} (lineage {str(meta.get(LINEAGE))[:8]}): "
            "a record of another export; re-export, or pass --model-version to serve it"
        )
    seen = _ledger().get(_entry(model_dir, rec["lineage"]))
    if seen and int(seen["version"]) > rec["version"]:
        raise ModelRollbackError(
            f"{model_dir / NEWEST}: a replayed record: it names version {rec['version']}, but "
            f"version {seen['version']} (sha256 {str(seen['sha256'])[:12]}) of this model was "
            f"exported or served before ({ledger_path()}); a newer version was removed and an "
            f"older record restored. Restore version {seen['version']}, or pass "
            f"--model-version {version} to serve this one on purpose"
        )
    remember(model_dir, rec["version"], rec["sha256"], rec["lineage"])


def ledger_path() -> Path:
    return Path(state_dir()) / LEDGER


def _ledger() -> dict:
    path = ledger_path()
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise ConfigError(
            f"{path}: unreadable newest-version ledger ({e}); it guards against replayed "
            f"{NEWEST} records: fix it, or set ${STATE_ENV} to a private directory"
        ) from e
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: not a newest-version ledger (a JSON object expected)")
    return doc


def _entry(model_dir: Path, lineage: str) -> str:
    """A ledger entry: the lineage at this model directory (a copy of the directory elsewhere,
    exported on from there, has its own entry and never makes this one look replayed)."""
    return f"{lineage}@{os.path.realpath(model_dir)}"


def remember(model_dir: Path, version: int, sha256: str, lineage: str) -> None:
    """Raise the ledger's version of ``lineage`` at ``model_dir`` to ``version`` (never lower)."""
    path = ledger_path()
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        doc = _ledger()
        entry = _entry(model_dir, lineage)
        seen = doc.get(entry)
        if seen and int(seen["version"]) >= version:
            return
        doc[entry] = {"name": model_dir.name, "version": version, "sha256": sha256}
        tmp = path.parent / f".{LEDGER}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, path)
    except OSError as e:
        raise ConfigError(
            f"{path}: cannot write the newest-version ledger ({e}); set ${STATE_ENV} to a "
            "private directory you can write"
        ) from e
