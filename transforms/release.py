"""Fail-closed release publication: stage, verify every invariant, then rename into place.

The job writes into ``OUT.tmp-<pid>-<uuid>``; :func:`publish_release` checks the staged files
(rows out == rows in, ids one-to-one with the input, no row equal to its input embedding,
finite values, only allow-listed columns, provenance metadata on every file) and only then
swaps the directory into ``OUT`` (one atomic ``renameat2`` exchange on Linux; elsewhere via
``OUT.old-<pid>-<uuid>``), so a crash leaves the previous release or none, never a partial
one; :func:`recover_output` clears a killed job's leftovers before the next run.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import uuid

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mass.errors import ReleaseError, SchemaError, ServingError
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
)
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


def export_info(repository: str, model: str, version: str | int | None = None) -> dict:
    """``export.json`` of ``repository/model/<version>`` (latest numeric version if None)."""
    base = os.path.join(repository, model)
    if version in (None, ""):
        versions = (
            sorted((int(v) for v in os.listdir(base) if v.isdigit()), reverse=True)
            if os.path.isdir(base)
            else []
        )
        if not versions:
            raise ServingError(f"{base}: no numeric version folder; run `mass export` first")
        version = versions[0]
    path = os.path.join(base, str(version), "export.json")
    try:
        with open(path) as f:
            info = json.load(f)
    except FileNotFoundError as e:
        raise ServingError(f"{path}: missing; re-export the model with `mass export`") from e
    info.setdefault("name", model)
    info.setdefault("version", int(version))
    return info


def server_info(url: str, model: str, version: str = "") -> dict:
    """Provenance from the served model's config ``parameters`` (no repository at hand)."""
    import tritonclient.grpc as grpcclient

    try:
        cfg = grpcclient.InferenceServerClient(url).get_model_config(model, version, as_json=True)[
            "config"
        ]
    except Exception as e:
        raise ServingError(f"Triton at {url}: no config for model '{model}' ({e})") from e
    params = {
        k.removeprefix("mass."): v.get("string_value", "")
        for k, v in cfg.get("parameters", {}).items()
    }
    info = {"name": model, "version": version or params.get("version", "")}
    for key in ("sha256", "method", "config_hash", "dim"):
        info[key] = params.get(key, "")
    for key in ("suppress", "preserve"):
        info[key] = json.loads(params[key]) if params.get(key) else []
    if not info["sha256"]:
        raise ServingError(
            f"Triton at {url}: model '{model}' carries no sha256 parameter; "
            "pass --repository so the release records export.json"
        )
    return info


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
    noise_key_fingerprint: str = "",
) -> dict[bytes, bytes]:
    """Provenance for the release schema; ``noise_key_fingerprint`` names the owner key that
    seeded the noise ("" if none was used) and never reveals it."""
    values = {
        "mass.model": str(info.get("name") or ""),
        "mass.model_version": str(info.get("version") or ""),
        "mass.sha256": str(info.get("sha256") or ""),
        "mass.method": str(info.get("method") or ""),
        "mass.suppress": json.dumps(list(info.get("suppress") or [])),
        "mass.preserve": json.dumps(list(info.get("preserve") or [])),
        "mass.config_hash": str(info.get("config_hash") or ""),
        "mass.forced_columns": json.dumps(list(forced_columns)),
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
                f"{s['unmodified']} released row(s) equal their input embedding (first id "
                f"{s['first_unmodified_id']!r}): the modifier was bypassed; nothing published"
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
) -> int:
    """Verify ``staging`` and atomically make it ``out``; on any failure remove it and raise."""
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
        swap_into_place(staging, out)
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


def swap_into_place(staging: str, out: str) -> None:
    """Make ``staging`` the new ``out``; the previous ``out`` is removed only afterwards.

    Where the kernel can, the two directories are exchanged in one atomic step, so every
    observer (and every crash) sees either the whole previous release or the whole new one.
    Elsewhere the previous one is first renamed to ``.old-<pid>-...``; a crash between the two
    renames leaves it there and :func:`recover_output` (run by the next job) puts it back.
    """
    if os.path.isdir(out) and _exchange(staging, out):
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
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
