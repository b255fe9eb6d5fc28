"""What columns a release may hold (the allow-list rules) and the ``mass.*`` metadata every
part file carries."""

from __future__ import annotations

import json

import pyarrow as pa

from mass.batches.validate import plain_field
from mass.errors import ReleaseError, SchemaError

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
    ids: str = "",
) -> dict[bytes, bytes]:
    """``mass.*`` schema metadata of every part. ``mass.audited`` is "false" only for a release
    published with ``--no-audit`` (an audited one is published only if it passed);
    ``noise_key_fingerprint`` names the owner key that seeded the noise ("" if none was used)
    and never reveals it. ``ids``: how the released ids were made, recorded as ``mass.ids``
    when not verbatim (:data:`mass.pseudonym.DESCRIPTION`)."""
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
    if ids:
        values["mass.ids"] = ids
    return {k.encode(): v.encode() for k, v in values.items()}


def release_schema(
    schema: pa.Schema,
    *,
    id_col: str,
    emb_col: str,
    dim: int,
    columns=(),
    metadata: dict[bytes, bytes] | None = None,
) -> pa.Schema:
    """The release's schema: id, float32 ``[dim]`` embedding, allow-listed ``columns``, and
    only ``mass.*`` schema metadata; the input's field and schema metadata are dropped and
    dictionary-encoded columns are released as their values."""
    ours = {
        k: v for k, v in (metadata or {}).items()
        if (k if isinstance(k, bytes) else k.encode()).startswith(b"mass.")
    }  # fmt: skip
    return pa.schema(
        [
            plain_field(schema.field(id_col)),
            pa.field(emb_col, pa.list_(pa.float32(), dim)),
            *[plain_field(schema.field(c)) for c in columns],
        ],
        metadata=ours,
    )
