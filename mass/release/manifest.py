"""The manifest in a release's marker: its parts (file, rows, sha256), the audit, provenance.
Deterministic (no time, no host), so a re-run gives the same bytes."""

from __future__ import annotations

import hashlib
import json

from mass import fs
from mass.batches.parquet import footer
from mass.digest import sha256_file
from mass.formats import (
    QUARANTINE_FORMAT,
    QUARANTINE_MARKER,
    RELEASE_FORMAT,
    RELEASE_MARKER,
    part_files,
)


def _sha256(path: str) -> str:
    if not fs.is_remote(path):
        return sha256_file(path)
    h = hashlib.sha256()  # an object: streamed, never staged on local disk
    with fs.open_input(path) as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def part_entries(directory: str) -> list[dict]:
    return [
        {"file": fs.basename(p), "rows": footer(p).num_rows, "sha256": _sha256(p)}
        for p in part_files(directory)
    ]  # fmt: skip


def _write_json(path: str, doc: dict) -> None:
    fs.write_json(path, doc)


def write_release_manifest(
    directory: str,
    *,
    audit: dict | None,
    quarantine: dict | None = None,
    unchanged: dict | None = None,
) -> dict:
    """Write ``directory/_release.json``: the marker that makes the directory ours, and the
    manifest. Deterministic (no time, no host), so a re-run gives the same bytes.

    ``audit``: ``{"verdict", "report", "policy"}`` of the gate, or None (``--no-audit``).
    """
    parts = part_entries(directory)
    meta = {}
    if parts:
        raw = footer(fs.join(directory, parts[0]["file"])).schema.to_arrow_schema().metadata or {}
        meta = {k.decode(): v.decode(errors="replace") for k, v in sorted(raw.items())
                if k.startswith(b"mass.")}  # fmt: skip
    modifier = meta.get("mass.modifier")
    try:
        modifier = json.loads(modifier) if modifier else None
    except ValueError:
        pass
    doc = {
        "format": RELEASE_FORMAT,
        "written_by": "mass anonymize",
        "rows": sum(p["rows"] for p in parts),
        "parts": parts,
        "audited": audit is not None,
        "audit": audit,
        "model": meta.get("mass.model"),
        "model_version": meta.get("mass.model_version"),
        "sha256": meta.get("mass.sha256"),
        "method": meta.get("mass.method"),
        "config_hash": meta.get("mass.config_hash"),
        "noise_key_fingerprint": meta.get("mass.noise_key_fingerprint"),
        "modifier": modifier,
        "metadata": meta,
        "quarantine": quarantine,
    }
    if unchanged and any(unchanged.values()):  # rows the modifier itself left (verified)
        doc["unchanged"] = dict(unchanged)
    _write_json(fs.join(directory, RELEASE_MARKER), doc)
    return doc


def write_quarantine_manifest(directory: str) -> dict:
    """``directory/_quarantine.json``: the marker of a quarantine directory, with its parts."""
    parts = part_entries(directory)
    doc = {"format": QUARANTINE_FORMAT, "written_by": "mass anonymize",
           "rows": sum(p["rows"] for p in parts), "parts": parts}  # fmt: skip
    _write_json(fs.join(directory, QUARANTINE_MARKER), doc)
    return doc
