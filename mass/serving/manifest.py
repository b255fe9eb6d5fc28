"""Signed export manifests (docs/contracts.md, "Signed export manifest").

``<version>/SHA256SUMS`` lists the sha256 of EVERY file of the version folder and of the
model's ``../config.pbtxt`` (and ``../configs/*``); ``<version>/SHA256SUMS.sig`` is an
HMAC-SHA256 of the model name, the version and those exact bytes under the owner key's
``sign`` subkey. :func:`verify_version_dir` refuses a bad or missing signature, a listed file
whose content differs, and any file in the version folder that the manifest does not list;
:func:`verify_repository` checks every exported model of a repository; a server verifies the
copies it stages (:mod:`mass.serving.staging`) and the adapters check them with
:func:`verify_staged_version`, with no key.
It imports nothing heavy (no torch) so the served model checks before anything is unpickled;
:mod:`mass.serving.export` signs, :mod:`mass.serving.adapters` and the jobs verify.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from mass.digest import sha256_file
from mass.errors import ChecksumMismatchError
from mass.keys import SIGNING_KEY_ENV, OwnerKey, looked_for, resolve_key
from mass.serving.contract import (
    EXPORT_JSON,
    MANIFEST_FORMAT,
    SHA256SUMS,
    SIGN_PURPOSE,
    SIGNATURE,
    STAGED_DIGESTS,
    version_parameter,
)

_UNLISTED_OK = (SHA256SUMS, SIGNATURE)  # the manifest and its signature cover the rest


def write_sha256sums(folder: Path, names: list[str]) -> None:
    """``sha256sum -c SHA256SUMS`` compatible listing of ``names`` inside ``folder``."""
    lines = [f"{sha256_file(folder / n)}  {n}\n" for n in sorted(names)]
    (folder / SHA256SUMS).write_text("".join(lines))


def manifest_names(version_dir: str | Path) -> list[str]:
    """What the manifest of ``version_dir`` lists: every file in it (recursively, except the
    manifest and its signature), then ``../config.pbtxt`` and every ``../configs/*`` file."""
    folder = Path(version_dir)
    names = [n for n in _files_under(folder) if n not in _UNLISTED_OK]
    model_dir = folder.parent
    if not (model_dir / "config.pbtxt").is_file():
        raise ChecksumMismatchError(f"{model_dir / 'config.pbtxt'}: missing; re-export the model")
    names.append("../config.pbtxt")
    if (model_dir / "configs").is_dir():
        names += [f"../configs/{n}" for n in _files_under(model_dir / "configs")]
    return names


def sign_version_dir(version_dir: str | Path, key: OwnerKey) -> None:
    """Write ``SHA256SUMS`` (every file, see :func:`manifest_names`) and its signature."""
    folder = Path(version_dir)
    write_sha256sums(folder, manifest_names(folder))
    tag = key.mac(SIGN_PURPOSE, _signed_bytes(folder, (folder / SHA256SUMS).read_bytes()))
    text = f"{MANIFEST_FORMAT} hmac-sha256 {key.fingerprint} {tag}\n"
    tmp = folder / f".{SIGNATURE}.tmp"
    tmp.write_text(text)
    os.replace(tmp, folder / SIGNATURE)


def signing_key(
    key: OwnerKey | None = None, *, purpose: str = "verify", flag: str | None = None
) -> OwnerKey:
    """``key``, else the key file named by ``MASS_SIGNING_KEY_FILE``; a clear error if none.
    ``flag``: the calling command's own key-file flag, named in the error (only a command
    that has one passes it: the message names no flag the command lacks)."""
    from mass.errors import ConfigError

    found = key or resolve_key(None, SIGNING_KEY_ENV)
    if found is None:
        how = f"pass {flag} FILE or set {SIGNING_KEY_ENV}" if flag else f"set {SIGNING_KEY_ENV}"
        raise ConfigError(
            f"no signing key to {purpose} exports with (looked in {looked_for(SIGNING_KEY_ENV)}): "
            f"{how} to the owner key file (create one with `mass keygen FILE`)"
        )
    return found


def verify_version_dir(
    version_dir: str | Path, model_config: dict | None = None, *, key: OwnerKey | None = None
) -> dict:
    """Check a version folder before loading it; returns its ``export.json``.

    Refuses (:class:`ChecksumMismatchError`) an unsigned folder, a signature made with another
    key or over other bytes, a listed file whose sha256 differs (``config.pbtxt`` included), a
    file the manifest does not list (or a symlink), weights whose sha256 differs from
    ``export.json``, and a served config parameter that disagrees. ``key`` defaults to
    ``MASS_SIGNING_KEY_FILE`` (:class:`mass.errors.ConfigError` when neither is given).
    """
    folder = Path(version_dir)
    key = signing_key(key)
    meta = _export_json(folder)
    return check_listed_files(folder, _verified_manifest(folder, key), meta, model_config)


def verify_staged_version(version_dir: str | Path, model_config: dict | None = None) -> dict:
    """What a served adapter checks in ``initialize``, with no key: the version folder against
    the digests that the job wrote into its private staging copy after verifying the signed
    manifest with the owner key (:mod:`mass.serving.staging`, ``../STAGED_DIGESTS``).

    A folder with no such file was not staged by mass (a ``tritonserver`` started by hand): it
    is verified with the key of ``MASS_SIGNING_KEY_FILE`` when that is set, else refused.
    """
    folder = Path(version_dir)
    digests = folder.parent / STAGED_DIGESTS
    if not digests.is_file():
        if os.environ.get(SIGNING_KEY_ENV):
            return verify_version_dir(folder, model_config)
        raise ChecksumMismatchError(
            f"{folder}: not staged by mass (no {digests.name}) and no {SIGNING_KEY_ENV} to "
            "verify it with; serve exports with `mass serve` or the job's own server"
        )
    try:
        record = json.loads(digests.read_text())
        listed = dict(record["files"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ChecksumMismatchError(f"{digests}: unreadable ({e}); restart the job") from e
    if str(record.get("version")) != folder.name:
        raise ChecksumMismatchError(
            f"{folder}: the staged digests are for version {record.get('version')}; restart the job"
        )
    return check_listed_files(folder, listed, _export_json(folder), model_config)


def _export_json(folder: Path) -> dict:
    try:
        return json.loads((folder / EXPORT_JSON).read_text())
    except (OSError, ValueError) as e:
        raise ChecksumMismatchError(
            f"{folder / EXPORT_JSON}: missing or unreadable ({e}); re-export with `mass export`"
        ) from e


def check_listed_files(
    folder: Path, listed: dict[str, str], meta: dict, model_config: dict | None = None
) -> dict:
    """Every file of ``folder`` (and its config) is in ``listed`` with that sha256, nothing
    else is there, and the weights match ``export.json`` (and the served config); ``meta``."""
    for name, digest in listed.items():
        path = folder / name
        if not path.is_file() or path.is_symlink():
            raise ChecksumMismatchError(
                f"{path}: listed in {folder / SHA256SUMS} but missing (or not a regular file); "
                "re-export this version"
            )
        actual = sha256_file(path)
        if actual != digest:
            raise ChecksumMismatchError(
                f"{path}: content differs from the signed {folder / SHA256SUMS} (sha256 "
                f"{actual}, signed {digest}); the file was modified after export; re-export, "
                "do not serve it"
            )
    unlisted = sorted(set(manifest_names(folder)) - set(listed))
    if unlisted:
        raise ChecksumMismatchError(
            f"{folder}: {', '.join(unlisted)} not listed in the signed {SHA256SUMS}; files that "
            "`mass export` did not write are never served: remove them or re-export"
        )
    weights = _weights_path(folder, meta)
    try:
        actual = sha256_file(weights)
    except OSError as e:
        raise ChecksumMismatchError(f"{weights}: unreadable ({e}); re-export") from e
    if actual != meta.get("sha256"):
        raise ChecksumMismatchError(
            f"{weights}: sha256 {actual} differs from {meta.get('sha256')} recorded in "
            "export.json; the weights were modified or corrupted after export — re-export, do "
            "not serve them"
        )
    if model_config is not None:
        params = model_config.get("parameters", {})
        param = version_parameter(folder.name)
        recorded = params.get(param, {}).get("string_value")
        if recorded is not None and recorded != actual:
            raise ChecksumMismatchError(
                f"{weights}: sha256 {actual} differs from {recorded} in config.pbtxt ({param})"
            )
    return meta


def verified_manifest(folder: str | Path, key: OwnerKey) -> dict[str, str]:
    """``{name: sha256}`` of a version folder's SHA256SUMS once its signature checks out."""
    return _verified_manifest(Path(folder), key)


def _verified_manifest(folder: Path, key: OwnerKey) -> dict[str, str]:
    """``{name: sha256}`` from SHA256SUMS once its signature checks out under ``key``."""
    sums, sig = folder / SHA256SUMS, folder / SIGNATURE
    if not sums.is_file() or not sig.is_file():
        raise ChecksumMismatchError(
            f"{folder}: unsigned export (no {SHA256SUMS} or {SIGNATURE}); exports made before "
            "signatures, or altered, are refused: re-export with `mass export` and the owner key"
        )
    data = sums.read_bytes()
    fields = sig.read_text(errors="replace").split()
    if len(fields) != 4 or fields[:2] != [MANIFEST_FORMAT, "hmac-sha256"]:
        raise ChecksumMismatchError(f"{sig}: not a {MANIFEST_FORMAT} signature; re-export")
    fingerprint, tag = fields[2], fields[3]
    if fingerprint != key.fingerprint:
        raise ChecksumMismatchError(
            f"{sig}: signed with another key (fingerprint {fingerprint}; the owner key given "
            f"has fingerprint {key.fingerprint}); use the owner key that exported it or re-export"
        )
    if not key.verify(SIGN_PURPOSE, _signed_bytes(folder, data), tag):
        raise ChecksumMismatchError(
            f"{sig}: signature does not match {sums} (the manifest was edited or the folder "
            "was moved to another model or version); re-export, do not serve it"
        )
    listed: dict[str, str] = {}
    for n, line in enumerate(data.decode(errors="replace").splitlines(), 1):
        digest, sep, name = line.partition("  ")
        if not sep or len(digest) != 64 or not _allowed_name(name):
            raise ChecksumMismatchError(f"{sums}:{n}: malformed line {line[:80]!r}; re-export")
        listed[name] = digest
    return listed


def _signed_bytes(folder: Path, sums: bytes) -> bytes:
    """What the signature covers: format, model name, version, then the manifest bytes."""
    head = f"{MANIFEST_FORMAT}\n{folder.parent.name}\n{folder.name}\n".encode()
    return head + sums


def _allowed_name(name: str) -> bool:
    parts = name.split("/")
    if name in ("", SHA256SUMS, SIGNATURE) or name.startswith("/") or "\\" in name:
        return False
    if parts[0] == "..":  # only the model's own config files live outside the version
        return name == "../config.pbtxt" or (
            len(parts) >= 3 and parts[1] == "configs" and ".." not in parts[2:]
        )
    return ".." not in parts and "" not in parts and "." not in parts


def _files_under(folder: Path) -> list[str]:
    """Relative names of every file under ``folder``; symlinks and odd entries are refused."""
    out = []
    for root, dirs, files in os.walk(folder, followlinks=False):
        for d in dirs:
            if os.path.islink(os.path.join(root, d)):
                raise ChecksumMismatchError(
                    f"{os.path.join(root, d)}: a symlink inside an export is never followed; "
                    "remove it or re-export"
                )
        for f in files:
            path = os.path.join(root, f)
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode):
                raise ChecksumMismatchError(
                    f"{path}: not a regular file (symlink, fifo, ...) inside an export; remove it "
                    "or re-export"
                )
            out.append(os.path.relpath(path, folder).replace(os.sep, "/"))
    return sorted(out)


def _weights_path(folder: Path, meta: dict) -> Path:
    weights = meta.get("weights")
    if weights is None:
        raise ChecksumMismatchError(f"{folder / EXPORT_JSON}: no 'weights' entry; re-export")
    path = Path(weights)
    return path if path.is_absolute() else folder / path


def verify_repository(
    repository: str | os.PathLike[str], *, signing_key_file: str | os.PathLike[str] | None = None
) -> list[Path]:
    """Verify every version folder that ``mass export`` wrote (export.json, SHA256SUMS or its
    signature present) under ``repository``; returns them. Raises
    :class:`ChecksumMismatchError` naming the first that fails (nothing is launched)."""
    marks = (EXPORT_JSON, SHA256SUMS, SIGNATURE)
    ours = sorted(
        v
        for m in Path(repository).iterdir()
        if m.is_dir() and not m.name.startswith(".")
        for v in m.iterdir()
        if v.name.isdigit() and v.is_dir() and any((v / n).exists() for n in marks)
    )
    if ours:
        key = resolve_key(os.fspath(signing_key_file) if signing_key_file else None,
                          SIGNING_KEY_ENV)  # fmt: skip
        for version_dir in ours:
            verify_version_dir(version_dir, key=key)
    return ours
