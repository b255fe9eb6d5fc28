"""Fail-closed publication: verify the staged release, audit it, then commit it.

:func:`publish_release` completes the staged part set, checks every invariant
(:mod:`mass.release.verify`), runs the audit gate on the staged files, writes the marker +
manifest (:mod:`mass.release.manifest`) and the ``_RELEASE.md`` datasheet last, and only then
commits (:mod:`mass.release.commit`: one atomic swap on local disk, a version copied under the
prefix plus a pointer on an object store), so a crash leaves the previous release or none,
never a partial one. :func:`publish_quarantine` commits the staged quarantine the same way.
The names are :mod:`mass.formats`'s, the writer's bookkeeping :mod:`mass.release.staged`'s.
Every file is read and written through :mod:`mass.fs`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable

import pyarrow as pa

from mass import fs
from mass.formats import RELEASE_MARKER, part_files
from mass.release.columns import META_KEYS
from mass.release.commit import discard_staging, kill_point, swap_into_place
from mass.release.manifest import write_quarantine_manifest, write_release_manifest
from mass.release.staged import fill_empty_shards, read_sidecars, remove_sidecars, unchanged_counts
from mass.release.verify import verify_release


def _write_datasheet(staging: str, manifest: dict, audit: dict | None) -> None:
    """_RELEASE.md + the datasheet merged into _release.json (:mod:`mass.report.datasheet`)."""
    from mass.report.datasheet import write_datasheet

    metrics = None
    if audit is not None and audit.get("report"):
        metrics = fs.read_json(audit["report"])
    report = fs.join(fs.dirname(audit["report"]), "report.html") if audit else None
    if not fs.is_remote(staging):
        write_datasheet(staging, metadata=manifest["metadata"], audit=metrics, report_path=report)
        return
    # An object-store version: the datasheet reads only the parts' footers, so it is written
    # on a local copy of the manifest beside footer-only stubs of the parts, then uploaded.
    with tempfile.TemporaryDirectory(prefix="mass-datasheet-") as tmp:
        for path in part_files(staging):
            with fs.open_input(path) as f:
                size = f.size()
                f.seek(size - 8)
                n = int.from_bytes(f.read(4), "little") + 8
                f.seek(size - n)
                tail = f.read(n)
            with open(os.path.join(tmp, fs.basename(path)), "wb") as out:
                out.write(b"PAR1" + tail)
        names = [RELEASE_MARKER]
        with open(os.path.join(tmp, RELEASE_MARKER), "wb") as out:
            out.write(fs.read_bytes(fs.join(staging, RELEASE_MARKER)))
        write_datasheet(tmp, metadata=manifest["metadata"], audit=metrics, report_path=report)
        names += [n for n in os.listdir(tmp) if n.endswith(".md")]
        for name in names:
            with open(os.path.join(tmp, name), "rb") as f:
                fs.write_bytes(fs.join(staging, name), f.read())


def publish_release(
    staging: str,
    out: str,
    *,
    expected_ids: pa.Array,
    id_col: str,
    emb_col: str,
    allow_columns: list[str],
    num_shards: int,
    schema: pa.Schema,
    required_metadata: tuple[str, ...] = META_KEYS,
    quarantined: pa.Array | None = None,
    gate: Callable[[str], dict | None] | None = None,
    manifest: bool = False,
    quarantine: dict | None = None,
    unchanged: dict | None = None,
) -> int:
    """Verify ``staging`` and atomically make it ``out``; on any failure remove it and raise.

    ``gate(staging)`` runs after the invariants hold, on the complete staged release (the
    audit; it raises to refuse publication) and returns what the manifest records as the
    audit. With ``manifest`` the ``_release.json`` marker + manifest is written last, so a
    staged directory without it was never complete. ``unchanged`` (a dict) is filled with
    :func:`unchanged_counts` before the gate runs, and the manifest records it.
    """
    try:
        fill_empty_shards(staging, schema, num_shards)
        counts = unchanged_counts(read_sidecars(staging))
        if unchanged is not None:
            unchanged.update(counts)
        rows = verify_release(
            staging,
            expected_ids=expected_ids,
            id_col=id_col,
            emb_col=emb_col,
            allow_columns=allow_columns,
            num_shards=num_shards,
            required_metadata=required_metadata,
            quarantined=quarantined,
        )
        remove_sidecars(staging)
        audit = gate(staging) if gate is not None else None
        if manifest:
            doc = write_release_manifest(staging, audit=audit, quarantine=quarantine,
                                         unchanged=counts)  # fmt: skip
            _write_datasheet(staging, doc, audit)
        kill_point("before-swap")
        swap_into_place(staging, out, published=lambda: kill_point("after-swap"))
        return rows
    finally:
        if fs.is_remote(staging):
            discard_staging(staging)
        elif os.path.exists(staging):
            shutil.rmtree(staging, ignore_errors=True)


def publish_quarantine(staging: str, out: str, *, schema: pa.Schema) -> dict:
    """Complete the staged quarantine, write its ``_quarantine.json`` marker + manifest and
    commit it to ``out``; return the manifest (``rows``, ``parts``)."""
    fill_empty_shards(staging, schema, 1)
    remove_sidecars(staging)
    doc = write_quarantine_manifest(staging)
    swap_into_place(staging, out)
    return doc
