"""The server's private model repository: copies of exactly the verified versions it serves.

``tritonserver`` loads every model of the repository it is pointed at and imports each
python-backend ``model.py`` in a stub process that runs as this user. A folder nobody signed
(``repo/evil/1/model.py``) would run that way inside the job's server. So no server of ours
is ever pointed at the user's repository: :func:`stage_models` copies the models a job needs
(``mass anonymize``: the modifier; ``mass extract``: the extractor; ``mass serve``: the models
it names, else every signed export) into ``<work dir>/models`` (mode 0700), verifies each copy's
signed manifest with the owner key *after* copying (nothing can change between check and
load), and writes the verified digests beside it (``<model>/mass-staged.json``), which the
served adapter checks in ``initialize`` with no key
(:func:`mass.serving.manifest.verify_staged_version`). One version per model is staged: the
newest (refused when a newer signed export was removed, :mod:`mass.serving.newest`), or the
one a job names.

* A requested model that is no signed export (no ``export.json``/``SHA256SUMS``/signature in a
  version folder) is refused by name (:class:`mass.errors.UnsignedModelError`) before any
  server starts; one that is signed but does not verify raises
  :class:`mass.errors.ChecksumMismatchError` naming the file.
* Every other folder of the repository is left out and named in one log line: it is never
  loaded, whatever it holds.
* An ensemble (signed too, ``mass export --kind ensemble``) brings its steps along.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from mass.errors import ChecksumMismatchError, ConfigError, UnsignedModelError
from mass.keys import OwnerKey
from mass.serving.contract import EXPORT_JSON, SHA256SUMS, SIGNATURE, STAGED_DIGESTS, export_info
from mass.serving.manifest import check_listed_files, verified_manifest, verify_version_dir
from mass.serving.newest import check_not_rolled_back

LOG = logging.getLogger(__name__)
_MARKS = (EXPORT_JSON, SHA256SUMS, SIGNATURE)


@dataclass(frozen=True)
class StagedModel:
    """One staged model: its name, the version served and the folder it was copied from."""

    name: str
    version: int
    source: Path
    sha256: str


def versions_of(model_dir: Path) -> list[int]:
    """Numeric version folders of ``model_dir``, ascending."""
    if not model_dir.is_dir():
        return []
    return sorted(int(p.name) for p in model_dir.iterdir() if p.name.isdigit() and p.is_dir())


def is_signed_export(model_dir: Path) -> bool:
    """Whether a version folder of ``model_dir`` carries what `mass export` writes."""
    return any((model_dir / str(v) / m).exists() for v in versions_of(model_dir) for m in _MARKS)


def wanted_models(models: Mapping[str, int | None] | Iterable[str] | None) -> dict | None:
    """``{name: version or None}`` from names, ``name:version`` strings or a mapping."""
    if models is None:
        return None
    if isinstance(models, Mapping):
        return {str(k): _version(str(k), v) for k, v in models.items()}
    out: dict[str, int | None] = {}
    for item in models:
        name, _, version = str(item).partition(":")
        out[name] = _version(name, version)
    return out


def _version(name: str, version: object) -> int | None:
    if version in (None, ""):
        return None
    if not str(version).isdigit() or int(str(version)) < 1:
        raise ConfigError(f"model {name!r} version {version!r}: versions are integers >= 1")
    return int(str(version))


def stage_models(
    repository: str | os.PathLike[str],
    target: Path,
    models: Mapping[str, int | None] | None,
    key: OwnerKey,
) -> list[StagedModel]:
    """Copy, verify and record the wanted models of ``repository`` under ``target`` (created
    0700); ``models`` None stages the newest version of every signed export."""
    repo = Path(repository)
    present = sorted(p.name for p in repo.iterdir() if p.is_dir() and not p.name.startswith("."))
    exports = [n for n in present if is_signed_export(repo / n)]
    queue = dict(models) if models is not None else {n: None for n in exports}
    for name in queue:
        _check_requested(repo, name, present, exports)
    target.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(target, 0o700)
    staged: dict[str, StagedModel] = {}
    while queue:
        name, version = queue.popitem()
        if name in staged:
            continue
        model, meta = _stage_one(repo / name, target / name, version, key)
        staged[name] = model
        for step in meta.get("steps") or []:  # an ensemble's steps are served with it
            _check_requested(repo, step, present, exports)
            queue.setdefault(step, None)
    # a folder nobody signed is worth a warning; another signed export, not asked for, is the
    # usual case (a repository holding the extractor and the modifier) and only informational
    unsigned = [n for n in present if n not in staged and n not in exports]
    unrequested = [n for n in present if n not in staged and n in exports]
    if unsigned:
        LOG.warning("%s: never loaded (not a signed export): %s", repo, ", ".join(unsigned))
    if unrequested:
        LOG.info("%s: not requested, not loaded (signed exports): %s", repo,
                 ", ".join(unrequested))  # fmt: skip
    return [staged[n] for n in sorted(staged)]


def checked_export(repository: str | os.PathLike[str], model: str, version: str | int | None,
                   key: OwnerKey) -> dict:  # fmt: skip
    """``export.json`` of the version a job serves, checked before anything starts (`mass
    anonymize`'s preflight and :class:`transforms.api.Anonymize`): a signed export, its files
    the signed ones, and "the newest" (``version`` empty) never an older version because a
    newer one was removed (:func:`mass.serving.newest.check_not_rolled_back`); a ``version``
    given serves that one on purpose."""
    require_signed_export(repository, model)
    info = export_info(str(repository), model, version or None)
    meta = verify_version_dir(Path(repository, model, str(info["version"])), key=key)
    if not version:
        check_not_rolled_back(Path(repository, model), int(info["version"]), meta, key)
    return info


def require_signed_export(repository: str | os.PathLike[str], name: str) -> None:
    """Refuse (by name, before anything starts) a model folder that is no signed export."""
    repo = Path(repository)
    present = [name] if (repo / name).is_dir() else []
    _check_requested(repo, name, present, present if is_signed_export(repo / name) else [])


def _check_requested(repo: Path, name: str, present: list[str], exports: list[str]) -> None:
    if name not in present:
        raise UnsignedModelError(
            f"{repo / name}: no such model folder in {repo}; export it with `mass export` or "
            "name one the repository holds"
        )
    if name not in exports:
        raise UnsignedModelError(
            f"{repo / name}: not a signed export (no {EXPORT_JSON}, {SHA256SUMS} or "
            f"{SIGNATURE} in any version folder), so it is never served; re-export it with "
            "`mass export` and the owner key, or remove the folder"
        )


def _stage_one(
    model_dir: Path, dest: Path, version: int | None, key: OwnerKey
) -> tuple[StagedModel, dict]:
    versions = versions_of(model_dir)
    chosen = versions[-1] if version is None else int(version)
    if chosen not in versions:
        raise UnsignedModelError(
            f"{model_dir / str(chosen)}: no such version (on disk: "
            f"{', '.join(map(str, versions)) or 'none'}); pick one with --model-version"
        )
    source = model_dir / str(chosen)
    meta = verify_version_dir(source, key=key)  # a clear error naming the user's file
    if version is None:  # "the newest": never an older one because a newer was removed
        check_not_rolled_back(model_dir, chosen, meta, key)
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(mode=0o700)
    _copy_regular(model_dir / "config.pbtxt", dest / "config.pbtxt")
    if (model_dir / "configs").is_dir():
        shutil.copytree(model_dir / "configs", dest / "configs", symlinks=True)
    shutil.copytree(source, dest / str(chosen), symlinks=True)
    # Verify the copy itself: what the server loads is what was checked, whatever happens to
    # the user's folder from now on.
    copy = dest / str(chosen)
    listed = verified_manifest(copy, key)
    meta = json.loads((copy / EXPORT_JSON).read_text())
    check_listed_files(copy, listed, meta)
    record = {"version": chosen, "files": listed, "source": str(source)}
    (dest / STAGED_DIGESTS).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return StagedModel(model_dir.name, chosen, source, str(meta.get("sha256", ""))), meta


def _copy_regular(src: Path, dst: Path) -> None:
    try:
        st = os.lstat(src)
    except OSError as e:
        raise ChecksumMismatchError(f"{src}: missing ({e}); re-export the model") from e
    if not stat.S_ISREG(st.st_mode):
        raise ChecksumMismatchError(f"{src}: not a regular file; re-export the model")
    shutil.copyfile(src, dst)
