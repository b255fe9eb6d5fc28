"""Fail-closed release publication: stage, verify every invariant, then rename into place.

The job writes into ``OUT.tmp-<pid>-<uuid>``; :func:`publish_release` checks the staged files
(rows out == rows in, ids one-to-one with the input, no row equal to its input embedding up
to scale (cosine similarity > 1 - 1e-6), finite values, only allow-listed columns, provenance
metadata on every file), runs the audit gate on them, and only then swaps the directory into ``OUT`` (one atomic ``renameat2`` exchange on Linux; elsewhere via
``OUT.old-<pid>-<uuid>``), so a crash leaves the previous release or none, never a partial
one; :func:`mass.release.commit.recover_output` clears a killed job's leftovers before the next run.

The marker + manifest (:mod:`mass.release.manifest`) is written last before the swap, so a
staged directory without it was never complete; the names are :mod:`mass.release.format`'s,
the column rules :mod:`mass.release.columns`', and where and how the release is committed
(ownership checks, staging, recovery, the swap; on an object store a versioned prefix plus a
pointer written last) :mod:`mass.release.commit`'s. Also here: the writer's per-part sidecars
(``_part-NNNNN.json``, read by :func:`verify_release`) and the empty shards that complete a
part set. Every file is read and written through :mod:`mass.fs`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mass import fs
from mass.batches.id_index import IDS_DIR
from mass.batches.parquet import WRITE_OPTIONS, open_parquet
from mass.batches.spill import (
    SPILLS_DIR,
    disk_full,
)
from mass.errors import ReleaseError
from mass.release.columns import META_KEYS
from mass.release.commit import discard_staging, kill_point, swap_into_place
from mass.release.format import (
    RELEASE_MARKER,
    part_files,
    shard_path,
)
from mass.release.manifest import write_release_manifest


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


# A modifier that leaves more than this fraction of rows equal to their input (cosine > 1 -
# 1e-6) is identity-like, even where it does so itself: refused. A rank-1 eraser leaves the rows
# whose erased component is ~0 (0.7 % at d=16, ~2.5 % expected at d=512); an identity map, 100 %.
MAX_UNCHANGED_FRACTION = 0.5


def unchanged_counts(stats: list[dict]) -> dict:
    """Rows the signed modifier itself left (near) its input, summed over the sidecars:
    ``unchanged_rows`` (cosine > 1 - 1e-6) and ``near_rows`` (above the audit's max_cosine)."""
    return {"unchanged_rows": sum(int(s.get("own_unchanged") or 0) for s in stats),
            "near_rows": sum(int(s.get("own_near") or 0) for s in stats)}  # fmt: skip


def _check_unchanged(stats: list[dict]) -> None:
    rows = sum(int(s.get("rows") or 0) for s in stats)
    same = unchanged_counts(stats)["unchanged_rows"]
    if rows and same > MAX_UNCHANGED_FRACTION * rows:
        first = min((s["first_own_unchanged_id"] for s in stats if s.get("own_unchanged")),
                    default=None)  # fmt: skip
        raise ReleaseError(
            f"{same} of {rows} released rows ({same / rows:.1%}) equal their input embedding "
            f"up to scale (first id {first!r}), more than the {MAX_UNCHANGED_FRACTION:.0%} a "
            "modifier may leave unchanged: the signed modifier itself is (near-)identity; "
            "retrain it; nothing published"
        )


def verify_release(
    staging: str,
    *,
    expected_ids,
    id_col: str,
    emb_col: str,
    allow_columns: list[str],
    num_shards: int,
    required_metadata: tuple[str, ...] = META_KEYS,
    quarantined: pa.Array | None = None,
) -> int:
    """Raise :class:`ReleaseError` unless the staged release satisfies every invariant.

    ``expected_ids``: the valid input ids (an array), or a :class:`mass.batches.id_index.IdIndex`
    of all input ids with the ``quarantined`` ones to leave out (streamed, bounded memory).
    """
    stats = read_sidecars(staging)
    files = part_files(staging)
    if len(files) != num_shards:
        raise ReleaseError(f"{staging}: {len(files)} part files, expected {num_shards}")
    for s in stats:
        if s.get("unmodified"):
            raise ReleaseError(
                f"{s['unmodified']} released row(s) equal their input embedding up to scale "
                f"(cosine similarity > 1 - 1e-6; first id {s['first_unmodified_id']!r}) and "
                "the signed modifier, recomputed in-process, would have changed them (or "
                "the job had no signed modifier to recompute with: pass --repository): the "
                "modifier was bypassed; nothing published"
            )
        if s.get("mismatch"):
            raise ReleaseError(
                f"{s['mismatch']} released row(s) differ from the signed modifier's own output "
                f"recomputed in-process (first id {s['first_mismatch_id']!r}): the server "
                "serves another model than the export the job verified; check --triton-url "
                "and --repository; nothing published"
            )
        if s.get("nonfinite"):
            raise ReleaseError(
                f"{s['nonfinite']} row(s) with NaN/Inf (first id "
                f"{s['first_nonfinite_id']!r}); nothing published"
            )
    _check_unchanged(stats)
    allowed = {id_col, emb_col, *allow_columns}
    ids = []
    for path in files:
        pf = open_parquet(path)
        schema = pf.schema_arrow
        extra = [c for c in schema.names if c not in allowed]
        if extra:
            raise ReleaseError(f"{path}: columns {extra} are not allow-listed; nothing published")
        missing = [k for k in required_metadata if k.encode() not in (schema.metadata or {})]
        if missing:
            raise ReleaseError(f"{path}: metadata {missing} missing; nothing published")
        typ = schema.field(emb_col).type
        if not (pa.types.is_fixed_size_list(typ) and typ.value_type == pa.float32()):
            raise ReleaseError(f"{path}: column '{emb_col}' is {typ}, expected float32 list")
        if isinstance(expected_ids, pa.Array | pa.ChunkedArray):
            ids.append(pf.read(columns=[id_col]).column(id_col))
    if not isinstance(expected_ids, pa.Array | pa.ChunkedArray):
        from mass.batches.id_index import verify_against_index

        return verify_against_index(staging, expected_ids, id_col=id_col, quarantined=quarantined)
    got = pa.chunked_array([c for a in ids for c in a.chunks], type=expected_ids.type)
    if len(got) != len(expected_ids):
        raise ReleaseError(
            f"{staging}: {len(got)} rows released for {len(expected_ids)} "
            "valid input rows; nothing published"
        )
    if got.null_count or len(pc.unique(got)) != len(got):
        raise ReleaseError(f"{staging}: null or duplicate ids in the release; nothing published")
    a = pc.take(got, pc.sort_indices(got)).combine_chunks()
    b = pc.take(expected_ids, pc.sort_indices(expected_ids))
    if not a.equals(b.combine_chunks() if isinstance(b, pa.ChunkedArray) else b):
        raise ReleaseError(f"{staging}: released ids differ from the input ids; nothing published")
    return len(got)


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


def fill_empty_shards(directory: str, schema: pa.Schema, num_shards: int) -> None:
    """Write the shards that got no row as empty files, so the file set is always complete."""
    with disk_full(directory, "an empty shard"):
        fs.makedirs(directory)
        have = set(fs.listdir(directory))
        for s in range(num_shards):
            path = shard_path(directory, s, num_shards)
            if fs.basename(path) not in have:
                with fs.atomic_output(path) as f:
                    pq.write_table(schema.empty_table(), f, **WRITE_OPTIONS)


def _sidecar(name: str) -> bool:
    return name.startswith("_part-") and name.endswith(".json")


def read_sidecars(directory: str) -> list[dict]:
    return [fs.read_json(fs.join(directory, n)) for n in fs.listdir(directory) if _sidecar(n)]


def remove_sidecars(directory: str) -> None:
    """Drop the writer's bookkeeping (sidecars, and spills of retried bundles)."""
    fs.rmtree(fs.join(directory, SPILLS_DIR))
    fs.rmtree(fs.join(directory, IDS_DIR))
    for name in fs.listdir(directory):
        if _sidecar(name):
            fs.remove(fs.join(directory, name))
