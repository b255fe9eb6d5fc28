"""Keyed pseudonymous ids (``mass anonymize --pseudonymize-ids``; docs/threat-model.md).

A released id is ``HMAC-SHA256(subkey("release-ids"), canonical(id))``, its first 128 bits as
32 hex digits, under the data owner's key (:class:`mass.keys.OwnerKey`; the sub-key is derived
for this purpose only, so it is neither the key nor the noise sub-key). Without the key the
pseudonym says nothing about the id (no order, no blocks, no prefixes: it is a PRF); the owner
maps back by computing the pseudonyms of their own ids (:func:`pseudonymize`) and joining.

``canonical(id)``: ``i:<decimal>`` for integers, ``s:<utf-8>`` for strings, ``b:<bytes>`` for
binary, so ``7`` and ``"7"`` never collide. 128 bits make a collision among 10^9 ids about
10^-21 likely; the job's unique-id check runs on the pseudonyms anyway (fail closed).

Scopes (``--pseudonym-scope``). ``stable`` (the default, the construction above): one pseudonym
per id per key, the same in every release and for every model, so any two releases under
one key join on their ids. ``model`` and ``release`` key the id HMAC with a *scope key*
``HMAC-SHA256(subkey("release-ids"), "mass-pseudonym-scope:" + label)`` instead, where the
label is ``model:<model name>`` (every release of one model name shares pseudonyms, other
models' differ) or ``release:<32 random hex digits drawn by the job>`` (no two releases
share one). Only the key holder can compute a scope key. For ``release`` the random label is
kept nowhere but in the owner's private map (:func:`map_path`), a Parquet file of
(id, pseudonym) pairs written 0600 under :func:`mass.keys.state_dir` and never under a
release prefix; the release names the map (``mass.ids``), not the label.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets

import pyarrow as pa

from mass.errors import SchemaError

PURPOSE = "release-ids"
HEX_DIGITS = 32
DESCRIPTION = f"pseudonymous: HMAC-SHA256 under the owner key's '{PURPOSE}' sub-key, 128 bits hex"
SCOPES = ("stable", "model", "release")
SCOPE_PREFIX = b"mass-pseudonym-scope:"
MAPS_DIR = "pseudonym-maps"


def scope_label(scope: str, model: str) -> str:
    """The label of a scope ("" for stable): ``model:<name>`` or a fresh ``release:<hex>``."""
    if scope not in SCOPES:
        raise ValueError(f"pseudonym scope {scope!r}: one of {SCOPES}")
    if scope == "stable":
        return ""
    return f"model:{model}" if scope == "model" else f"release:{secrets.token_hex(16)}"


def describe(scope: str, model: str, map_id: str = "") -> str:
    """``mass.ids`` of a release: :data:`DESCRIPTION` for stable (unchanged), else the scope
    (the model's name for ``model``; the private map's id for ``release``, never its label)."""
    if scope == "stable":
        return DESCRIPTION
    which = f"model '{model}'" if scope == "model" else "this release only"
    where = f"; the owner's map is {MAPS_DIR}/{map_id}.parquet" if map_id else ""
    return (f"pseudonymous per {scope} ({which}): HMAC-SHA256 under a scope key derived from "
            f"the owner key's '{PURPOSE}' sub-key, 128 bits hex{where}")  # fmt: skip


def map_path(state: str, map_id: str) -> str:
    """Where the owner's (id, pseudonym) map of one release lives (private state)."""
    return os.path.join(state, MAPS_DIR, f"{map_id}.parquet")


def _id_key(key, label: str) -> bytes:
    base = key.subkey(PURPOSE)
    if not label:
        return base
    return hmac.new(base, SCOPE_PREFIX + label.encode(), hashlib.sha256).digest()


def _canonical(arr: pa.Array) -> list[bytes]:
    typ = arr.type
    if pa.types.is_integer(typ):
        return [b"i:%d" % v for v in arr.to_pylist()]
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        return [b"s:" + v.encode() for v in arr.to_pylist()]
    if pa.types.is_binary(typ) or pa.types.is_large_binary(typ):
        return [b"b:" + v for v in arr.to_pylist()]
    raise SchemaError(f"--pseudonymize-ids: id type {typ} is not an integer, string or binary")


def pseudonymize(ids: pa.Array | pa.ChunkedArray, key, label: str = "") -> pa.Array:
    """The pseudonyms of ``ids`` (no nulls: the input check refuses null ids first) in the
    scope ``label`` ("" = stable, see :func:`scope_label`)."""
    arr = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if arr.null_count:
        raise SchemaError("--pseudonymize-ids: null ids cannot be pseudonymized; fix the input")
    inner, outer = _hmac_states(_id_key(key, label))
    out = []
    for data in _canonical(arr):  # HMAC-SHA256(key, data), from the two keyed states
        h = inner.copy()
        h.update(data)
        o = outer.copy()
        o.update(h.digest())
        out.append(o.hexdigest()[:HEX_DIGITS])
    return pa.array(out, pa.string())


def _hmac_states(key: bytes) -> tuple:
    """HMAC-SHA256's inner and outer SHA-256 states after the padded key (RFC 2104), to be
    copied per message: the same digests as an ``hmac`` object, at less than half its cost per
    id (docs/performance.md, "How the job's hot path is built")."""
    if len(key) > 64:
        key = hashlib.sha256(key).digest()
    key = key.ljust(64, b"\0")
    return (hashlib.sha256(bytes(b ^ 0x36 for b in key)),
            hashlib.sha256(bytes(b ^ 0x5C for b in key)))  # fmt: skip
