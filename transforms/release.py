"""Fail-closed release publication: stage, verify every invariant, then rename into place.

The job writes into ``OUT.tmp-<pid>-<uuid>``; :func:`publish_release` checks the staged files
(rows out == rows in, ids one-to-one with the input, no row equal to its input embedding up
to scale (cosine similarity > 1 - 1e-6), finite values, only allow-listed columns, provenance
metadata on every file), runs the audit gate on them, and only then swaps the directory into ``OUT`` (one atomic ``renameat2`` exchange on Linux; elsewhere via
``OUT.old-<pid>-<uuid>``), so a crash leaves the previous release or none, never a partial
one; :func:`recover_output` clears a killed job's leftovers before the next run.

Ownership: a release directory carries ``_release.json`` (a quarantine ``_quarantine.json``),
written by us last before the swap: a format tag plus the manifest (part files with sha256 and
row counts, audit verdict and report path, provenance). :func:`check_outputs` lets the job
replace only a directory holding that marker (or a path that does not exist), never the input,
a parent or child of it, or the other output; files, symbolic links and mount points are
refused before any work. The marker names start with ``_`` so Parquet readers that expand a
directory (pyarrow, pandas, Spark, :func:`mass.io.expand_paths`) never read them as data.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import uuid
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mass.digest import sha256_file
from mass.errors import OutputPathError, ReleaseError, SchemaError
from transforms.parquet_io import fill_empty_shards, read_sidecars, remove_sidecars

META_KEYS = (
    "mass.model",
    "mass.model_version",
    "mass.sha256",
    "mass.method",
    "mass.suppress",
    "mass.preserve",
    "mass.config_hash",
    "mass.forced_columns",
    "mass.audited",
    "mass.noise_key_fingerprint",
    "mass.modifier",
)
RELEASE_MARKER = "_release.json"
QUARANTINE_MARKER = "_quarantine.json"
RELEASE_FORMAT = "mass-release/1"
QUARANTINE_FORMAT = "mass-quarantine/1"
MARKER_FORMATS = {RELEASE_MARKER: RELEASE_FORMAT, QUARANTINE_MARKER: QUARANTINE_FORMAT}
# Test-only: SIGKILL the job at a publication point ("before-swap", "after-swap") so the
# crash tests kill inside the swap itself (tests/failclosed/test_atomic_publish.py).
KILL_AT_ENV = "MASS_TEST_KILL_AT"
RAW_MEDIA_NAMES = {
    "image",
    "images",
    "audio",
    "text",
    "raw",
    "pixels",
    "video",
    "bytes",
    "binary",
    "blob",
}


def resolve_allow_columns(
    allow: list[str],
    *,
    schema: pa.Schema,
    suppress: list[str],
    id_col: str,
    emb_col: str,
    force: bool = False,
) -> list[str]:
    """Check the allow-list; return the columns kept only because of ``force`` (recorded)."""
    forced = []
    for col in allow:
        if col in (id_col, emb_col):
            raise ReleaseError(
                f"--allow-columns names '{col}', which is always released; remove it from the list"
            )
        if col not in schema.names:
            raise SchemaError(
                f"--allow-columns names '{col}', not a column of the input "
                f"(columns: {schema.names})"
            )
        typ = schema.field(col).type
        media = (
            col.lower() in RAW_MEDIA_NAMES
            or pa.types.is_binary(typ)
            or pa.types.is_large_binary(typ)
            or (pa.types.is_list(typ) or pa.types.is_fixed_size_list(typ))
            and pa.types.is_integer(typ.value_type)
            and typ.value_type.bit_width == 8
        )
        why = (
            "a suppressed attribute" if col in suppress else "a raw media column" if media else None
        )
        if why is None:
            continue
        if not force:
            raise ReleaseError(
                f"--allow-columns names '{col}', {why}: releasing it would undo "
                "the anonymization; drop it or pass --force-allow (recorded in "
                "the release metadata)"
            )
        forced.append(col)
    return forced


def release_metadata(
    info: dict,
    *,
    forced_columns: list[str] | tuple[str, ...] = (),
    audited: bool = True,
    noise_key_fingerprint: str = "",
) -> dict[bytes, bytes]:
    """``mass.*`` schema metadata of every part. ``mass.audited`` is "false" only for a release
    published with ``--no-audit`` (an audited one is published only if it passed);
    ``noise_key_fingerprint`` names the owner key that seeded the noise ("" if none was used)
    and never reveals it."""
    values = {
        "mass.model": str(info.get("name") or ""),
        "mass.model_version": str(info.get("version") or ""),
        "mass.sha256": str(info.get("sha256") or ""),
        "mass.method": str(info.get("method") or ""),
        "mass.suppress": json.dumps(list(info.get("suppress") or [])),
        "mass.preserve": json.dumps(list(info.get("preserve") or [])),
        "mass.config_hash": str(info.get("config_hash") or ""),
        "mass.forced_columns": json.dumps(list(forced_columns)),
        "mass.audited": "true" if audited else "false",
        "mass.noise_key_fingerprint": str(noise_key_fingerprint or ""),
        "mass.modifier": json.dumps(info.get("modifier") or {}, sort_keys=True),
    }
    return {k.encode(): v.encode() for k, v in values.items()}


def staging_dir(out: str, kind: str = "tmp") -> str:
    """``OUT.<kind>-<pid>-<uuid>``: the pid lets a later run tell a crashed job's leftovers."""
    return f"{os.path.normpath(out)}.{kind}-{os.getpid()}-{uuid.uuid4().hex[:12]}"


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def holds_marker(directory: str, marker: str = RELEASE_MARKER) -> bool:
    """True when ``directory`` holds our ``marker`` file with its format tag."""
    path = os.path.join(directory, marker)
    if os.path.islink(path) or not os.path.isfile(path) or os.path.getsize(path) > 1 << 24:
        return False
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and doc.get("format") == MARKER_FORMATS[marker]


def _real(path: str) -> str:
    return os.path.realpath(os.path.abspath(path))


def _inside(a: str, b: str) -> bool:
    """``a`` equals ``b`` or lies below it (both real, absolute)."""
    return a == b or a.startswith(b.rstrip(os.sep) + os.sep)


def input_roots(spec: str) -> list[str]:
    """The paths ``spec`` reads: itself (file or directory), or each file a glob matches."""
    if "://" in spec:
        return []
    if not os.path.lexists(spec) and any(ch in spec for ch in "*?["):
        return sorted(glob.glob(spec, recursive=True))
    return [spec]


def check_replaceable(flag: str, path: str, marker: str) -> None:
    """Refuse ``path`` unless it does not exist or is a directory holding our ``marker``."""
    p = os.path.normpath(path)
    if os.path.islink(p):
        raise OutputPathError(
            f"{flag} {path}: is a symbolic link (to {os.readlink(p)}); the job never replaces "
            "a link or publishes through one: pass the real directory"
        )
    if not os.path.lexists(p):
        parent = os.path.dirname(os.path.abspath(p))
        while not os.path.lexists(parent):
            parent = os.path.dirname(parent)
        if not os.path.isdir(parent):
            raise OutputPathError(f"{flag} {path}: {parent} is not a directory")
        return
    if os.path.ismount(p):
        raise OutputPathError(
            f"{flag} {path}: is a mount point; a release is published by renaming a "
            "directory into place, which a mount point cannot take: pass a directory inside it"
        )
    if not os.path.isdir(p):
        raise OutputPathError(
            f"{flag} {path}: is an existing file, not a directory written by mass; the job "
            "never replaces it: choose another path or remove the file yourself"
        )
    if not holds_marker(p, marker):
        raise OutputPathError(
            f"{flag} {path}: is an existing directory without the {marker} marker that mass "
            "writes into its own outputs; the job replaces only those (or a path that does "
            "not exist): choose a new path, or move the directory away yourself"
        )


def check_outputs(*, output: str, quarantine: str, inputs: str, report: str | None = None) -> None:
    """Decide, before any work, that the job may replace ``output`` and ``quarantine`` (and
    write its audit report into ``report``); raise :class:`OutputPathError` naming the path.
    """
    outs = (("--output", output, RELEASE_MARKER), ("--quarantine", quarantine, QUARANTINE_MARKER))
    roots = [(r, _real(r)) for r in input_roots(inputs)]
    for flag, path, marker in outs:
        real = _real(path)
        for shown, root in roots:
            if _inside(real, root) or _inside(root, real):
                how = ("is" if real == root else "lies inside" if _inside(real, root)
                       else "contains")  # fmt: skip
                raise OutputPathError(
                    f"{flag} {path}: {how} the input {shown}; replacing it would destroy the "
                    "input: choose a directory outside it"
                )
        check_replaceable(flag, path, marker)
    o, q = _real(output), _real(quarantine)
    if _inside(o, q) or _inside(q, o):
        how = "are the same directory" if o == q else "are nested"
        raise OutputPathError(
            f"--output {output} and --quarantine {quarantine} {how}; give each its own directory"
        )
    if report is None:
        return
    r = os.path.normpath(report)
    if os.path.lexists(r) and not os.path.isdir(r):
        raise OutputPathError(f"--report {report}: is an existing file; pass a directory")
    for flag, path, _ in outs:
        if _inside(_real(r), _real(path)):
            raise OutputPathError(
                f"--report {report}: lies inside {flag} {path}, which the job replaces; "
                "put the report elsewhere"
            )
    for shown, root in roots:
        if _inside(_real(r), root):
            raise OutputPathError(
                f"--report {report}: lies inside the input {shown}; the job never writes "
                "into its input: put the report elsewhere"
            )


def _parts(directory: str) -> list[dict]:
    return [
        {"file": os.path.basename(p), "rows": pq.ParquetFile(p).metadata.num_rows,
         "sha256": sha256_file(p)}
        for p in sorted(glob.glob(os.path.join(directory, "part-*.parquet")))
    ]  # fmt: skip


def _write_json(path: str, doc: dict) -> None:
    with open(path + ".part", "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(path + ".part", path)


def write_release_manifest(
    directory: str, *, audit: dict | None, quarantine: dict | None = None
) -> dict:
    """Write ``directory/_release.json``: the marker that makes the directory ours, and the
    manifest. Deterministic (no time, no host), so a re-run gives the same bytes.

    ``audit``: ``{"verdict", "report", "policy"}`` of the gate, or None (``--no-audit``).
    """
    parts = _parts(directory)
    meta = {}
    if parts:
        raw = pq.read_schema(os.path.join(directory, parts[0]["file"])).metadata or {}
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
    _write_json(os.path.join(directory, RELEASE_MARKER), doc)
    return doc


def _write_datasheet(staging: str, manifest: dict, audit: dict | None) -> None:
    """_RELEASE.md + the datasheet merged into _release.json (:mod:`mass.report.datasheet`)."""
    from mass.report.datasheet import write_datasheet

    metrics = None
    if audit is not None and audit.get("report"):
        with open(audit["report"]) as f:
            metrics = json.load(f)
    report = os.path.join(os.path.dirname(audit["report"]), "report.html") if audit else None
    write_datasheet(staging, metadata=manifest["metadata"], audit=metrics, report_path=report)


def write_quarantine_manifest(directory: str) -> dict:
    """``directory/_quarantine.json``: the marker of a quarantine directory, with its parts."""
    parts = _parts(directory)
    doc = {"format": QUARANTINE_FORMAT, "written_by": "mass anonymize",
           "rows": sum(p["rows"] for p in parts), "parts": parts}  # fmt: skip
    _write_json(os.path.join(directory, QUARANTINE_MARKER), doc)
    return doc


def kill_point(name: str) -> None:
    """Test-only crash hook: SIGKILL this process when ``$MASS_TEST_KILL_AT`` is ``name``."""
    if os.environ.get(KILL_AT_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


def recover_output(out: str) -> list[str]:
    """Clean up after a job that was killed (SIGKILL, OOM, power) while publishing ``out``.

    Staging (``.tmp-``) and displaced (``.old-``) directories whose job is no longer running
    are removed; if ``out`` itself is missing but a dead job's ``.old-`` copy exists (a crash
    between the two renames of the non-atomic fallback), that previous release is put back.
    Returns the paths removed or restored (for the log).
    """
    base = os.path.normpath(out)
    touched = []
    for kind in ("old", "tmp"):
        for path in sorted(glob.glob(f"{glob.escape(base)}.{kind}-*")):
            pid = path.rsplit(f".{kind}-", 1)[1].split("-", 1)[0]
            if pid.isdigit() and pid_alive(int(pid)) and int(pid) != os.getpid():
                continue  # another live job's directory: not ours to touch
            if kind == "old" and not os.path.exists(base):
                os.replace(path, base)
            else:
                shutil.rmtree(path, ignore_errors=True)
            touched.append(path)
    return touched


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

    ``expected_ids``: the valid input ids (an array), or a :class:`transforms.id_index.IdIndex`
    of all input ids with the ``quarantined`` ones to leave out (streamed, bounded memory).
    """
    stats = read_sidecars(staging)
    files = sorted(glob.glob(os.path.join(staging, "part-*.parquet")))
    if len(files) != num_shards:
        raise ReleaseError(f"{staging}: {len(files)} part files, expected {num_shards}")
    for s in stats:
        if s.get("unmodified"):
            raise ReleaseError(
                f"{s['unmodified']} released row(s) equal their input embedding up to scale "
                f"(cosine similarity > 1 - 1e-6; first id {s['first_unmodified_id']!r}): the "
                "modifier was bypassed or is near-identity; nothing published"
            )
        if s.get("nonfinite"):
            raise ReleaseError(
                f"{s['nonfinite']} row(s) with NaN/Inf (first id "
                f"{s['first_nonfinite_id']!r}); nothing published"
            )
    allowed = {id_col, emb_col, *allow_columns}
    ids = []
    for path in files:
        pf = pq.ParquetFile(path)
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
        from transforms.id_index import verify_against_index

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
) -> int:
    """Verify ``staging`` and atomically make it ``out``; on any failure remove it and raise.

    ``gate(staging)`` runs after the invariants hold, on the complete staged release (the
    audit; it raises to refuse publication) and returns what the manifest records as the
    audit. With ``manifest`` the ``_release.json`` marker + manifest is written last, so a
    staged directory without it was never complete.
    """
    try:
        fill_empty_shards(staging, schema, num_shards)
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
            doc = write_release_manifest(staging, audit=audit, quarantine=quarantine)
            _write_datasheet(staging, doc, audit)
        kill_point("before-swap")
        swap_into_place(staging, out, published=lambda: kill_point("after-swap"))
        return rows
    finally:
        if os.path.exists(staging):
            shutil.rmtree(staging, ignore_errors=True)


def _exchange(a: str, b: str) -> bool:
    """Atomically swap two directories (Linux ``renameat2(RENAME_EXCHANGE)``); False if
    the platform or filesystem cannot, so the caller falls back to two renames."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    rc = fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)
    return rc == 0


def swap_into_place(staging: str, out: str, *, published: Callable[[], None] | None = None) -> None:
    """Make ``staging`` the new ``out``; the previous ``out`` is removed only afterwards.

    Where the kernel can, the two directories are exchanged in one atomic step, so every
    observer (and every crash) sees either the whole previous release or the whole new one.
    Elsewhere the previous one is first renamed to ``.old-<pid>-...``; a crash between the two
    renames leaves it there and :func:`recover_output` (run by the next job) puts it back.
    """
    if os.path.isdir(out) and _exchange(staging, out):
        if published is not None:
            published()
        shutil.rmtree(staging, ignore_errors=True)  # now holds the previous release
        return
    old = None
    if os.path.exists(out):
        old = staging_dir(out, "old")
        os.replace(out, old)
    try:
        os.replace(staging, out)
    except OSError as e:
        if old is not None:
            os.replace(old, out)
        raise ReleaseError(f"{out}: could not publish ({e}); the previous release is kept") from e
    if published is not None:
        published()
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
