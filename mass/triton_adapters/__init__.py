"""Thin adapters that the generated Triton ``model.py`` files call (python backend).

``model.py`` is a bootstrap plus one import; the adapter classes here do the work:
:mod:`.modifier` (EMBEDDING + ROW_SEED -> PRIVATIZED), :mod:`.extractor` (IMAGE -> EMBEDDING),
:mod:`.minilm` (TEXT -> EMBEDDING). Those modules import ``triton_python_backend_utils`` and so
load only inside Triton; this module holds the checksum logic shared with :mod:`mass.export`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from mass.errors import ChecksumMismatchError

EXPORT_JSON = "export.json"
SHA256SUMS = "SHA256SUMS"
SHA256_PARAMETER = "mass_sha256"


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_sha256sums(folder: Path, names: list[str]) -> None:
    """``sha256sum -c SHA256SUMS`` compatible listing of ``names`` inside ``folder``."""
    lines = [f"{sha256_file(folder / n)}  {n}\n" for n in sorted(names)]
    (folder / SHA256SUMS).write_text("".join(lines))


def version_parameter(version: int | str) -> str:
    """Config parameter holding one version's weights sha256 (``mass_sha256_v3``)."""
    return f"{SHA256_PARAMETER}_v{version}"


def verify_version_dir(version_dir: str | Path, model_config: dict | None = None) -> dict:
    """Check a version folder before loading it; returns its ``export.json``.

    Refuses (:class:`ChecksumMismatchError`) when the weights' sha256 differs from the one
    recorded in ``export.json``, from ``SHA256SUMS``, or from the served config's parameter.
    """
    folder = Path(version_dir)
    try:
        meta = json.loads((folder / EXPORT_JSON).read_text())
    except (OSError, ValueError) as e:
        raise ChecksumMismatchError(
            f"{folder / EXPORT_JSON}: missing or unreadable ({e}); re-export with `mass export`"
        ) from e
    weights = _weights_path(folder, meta)
    actual = sha256_file(weights)
    if actual != meta["sha256"]:
        raise ChecksumMismatchError(
            f"{weights}: sha256 {actual} differs from {meta['sha256']} recorded in export.json; "
            "the weights were modified or corrupted after export — re-export, do not serve them"
        )
    sums = folder / SHA256SUMS
    if sums.exists():
        for line in sums.read_text().splitlines():
            digest, _, name = line.partition("  ")
            if name and sha256_file(folder / name) != digest:
                raise ChecksumMismatchError(
                    f"{folder / name}: content differs from {sums}; re-export this version"
                )
    if model_config is not None:
        params = model_config.get("parameters", {})
        key = version_parameter(folder.name)
        recorded = params.get(key, {}).get("string_value")
        if recorded is not None and recorded != actual:
            raise ChecksumMismatchError(
                f"{weights}: sha256 {actual} differs from {recorded} in config.pbtxt ({key})"
            )
    return meta


def _weights_path(folder: Path, meta: dict) -> Path:
    weights = meta.get("weights")
    if weights is None:
        raise ChecksumMismatchError(f"{folder / EXPORT_JSON}: no 'weights' entry; re-export")
    path = Path(weights)
    return path if path.is_absolute() else folder / path
