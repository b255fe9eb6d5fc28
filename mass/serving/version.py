"""One signed version of an exported model: the folder staged and renamed into place whole,
its export.json chained to the model's newest record (:mod:`mass.serving.newest`), the model's
configs rewritten with the new digests, then every version that verified before signed again
(:mod:`mass.serving.manifest`). The kinds of export and the layout: :mod:`mass.serving.export`."""

from __future__ import annotations

import json
import logging
import shutil
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from mass.digest import code_sha256, sha256_file
from mass.errors import ChecksumMismatchError, ConfigError
from mass.keys import OwnerKey
from mass.serving import contract as C
from mass.serving.manifest import sign_version_dir, verify_version_dir
from mass.serving.newest import FLAG, LINEAGE, NEWEST, next_record, record_newest
from mass.serving.repository import (
    MODEL_PY,
    atomic_write,
    check_model_name,
    model_config,
    next_version,
    sha_parameters,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExportResult:
    name: str
    version: int
    model_dir: Path
    version_dir: Path
    sha256: str


def write_version(
    repository,
    name,
    *,
    version,
    adapter,
    files,
    weights,
    record,
    tensors,
    max_batch_size,
    instances,
    gpu_variant,
    key: OwnerKey,
) -> ExportResult:
    """Write version ``version`` (or the next) of model ``name`` under ``repository``: the
    files staged and renamed in whole, export.json recorded in the model's signed lineage, the
    model configs rewritten, and every version that verified before re-signed (the layout in
    :mod:`mass.serving.export`)."""
    check_model_name(name)
    if max_batch_size < 1:
        raise ConfigError(f"--max-batch-size {max_batch_size}: must be >= 1")
    if instances < 1:
        raise ConfigError(f"--instances {instances}: must be >= 1")
    model_dir = Path(repository) / name
    model_dir.mkdir(parents=True, exist_ok=True)
    version = next_version(model_dir, version)
    chain = next_record(model_dir, key)
    staging = model_dir / f".staging-{uuid.uuid4().hex[:8]}"
    staging.mkdir()
    try:
        for rel, src in files.items():
            (staging / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, staging / rel)
        (staging / "model.py").write_text(MODEL_PY.format(module=adapter))
        # Triton's stub runs Python isolated (PYTHONDONTWRITEBYTECODE ignored) and would cache
        # model.py as __pycache__/*.pyc, a file no manifest lists and that Python would run
        # instead of model.py. An empty FILE of that name (listed, signed) stops the cache
        # being written or read; replacing it with a folder changes a signed file.
        (staging / C.PYCACHE_BLOCKER).write_bytes(b"")
        wpath = Path(weights) if Path(weights).is_absolute() else staging / weights
        sha = sha256_file(wpath)
        meta = {
            "name": name,
            "version": version,
            "sha256": sha,
            "weights": weights,
            **record,
            # the served code: model.py imports the adapter from this mass package
            "code_sha256": code_sha256(),
            "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
            FLAG: NEWEST,  # signed with the version: the record must exist (mass.serving.newest)
            **chain,  # its lineage and predecessor: a record of another export is refused
        }
        (staging / C.EXPORT_JSON).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        # Older versions are signed over the current config; check them before it changes.
        still_good = _verified_versions(model_dir, key)
        staging.rename(model_dir / str(version))  # a half-written version is never visible
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    params = sha_parameters(model_dir)
    for kind, filename in [("KIND_CPU", "config.pbtxt")] + (
        [("KIND_GPU", "configs/gpu.pbtxt")] if gpu_variant else []
    ):
        text = model_config(
            name,
            inputs=tensors[0],
            outputs=tensors[1],
            max_batch_size=max_batch_size,
            instances=instances,
            kind=kind,
            parameters=params,
        )
        atomic_write(model_dir / filename, text)
    # Sign last: until then the new version is unsigned and would be refused (fail closed).
    for folder in [*still_good, model_dir / str(version)]:
        sign_version_dir(folder, key)
    record_newest(model_dir, version, sha, key, chain[LINEAGE])
    return ExportResult(name, version, model_dir, model_dir / str(version), sha)


def _verified_versions(model_dir: Path, key: OwnerKey) -> list[Path]:
    """Existing version folders whose signed manifest verifies now (to re-sign later)."""
    good = []
    for folder in sorted(p for p in model_dir.iterdir() if p.name.isdigit() and p.is_dir()):
        try:
            verify_version_dir(folder, key=key)
        except ChecksumMismatchError as e:
            log.warning("%s does not verify and is left unsigned (it will be refused): %s",
                        folder, e)  # fmt: skip
            continue
        good.append(folder)
    return good
