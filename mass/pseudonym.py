"""Keyed pseudonymous ids (``mass anonymize --pseudonymize-ids``, issue 23 item 2).

A released id is ``HMAC-SHA256(subkey("release-ids"), canonical(id))``, its first 128 bits as
32 hex digits, under the data owner's key (:class:`mass.keys.OwnerKey`; the sub-key is derived
for this purpose only, so it is neither the key nor the noise sub-key). Without the key the
pseudonym says nothing about the id (no order, no blocks, no prefixes: it is a PRF); the owner
maps back by computing the pseudonyms of their own ids (:func:`pseudonymize`) and joining.

``canonical(id)``: ``i:<decimal>`` for integers, ``s:<utf-8>`` for strings, ``b:<bytes>`` for
binary, so ``7`` and ``"7"`` never collide. 128 bits make a collision among 10^9 ids about
10^-21 likely; the job's unique-id check runs on the pseudonyms anyway (fail closed).
"""

from __future__ import annotations

import hashlib
import hmac

import pyarrow as pa

from mass.errors import SchemaError

PURPOSE = "release-ids"
HEX_DIGITS = 32
DESCRIPTION = f"pseudonymous: HMAC-SHA256 under the owner key's '{PURPOSE}' sub-key, 128 bits hex"


def _canonical(arr: pa.Array) -> list[bytes]:
    typ = arr.type
    if pa.types.is_integer(typ):
        return [b"i:%d" % v for v in arr.to_pylist()]
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        return [b"s:" + v.encode() for v in arr.to_pylist()]
    if pa.types.is_binary(typ) or pa.types.is_large_binary(typ):
        return [b"b:" + v for v in arr.to_pylist()]
    raise SchemaError(f"--pseudonymize-ids: id type {typ} is not an integer, string or binary")


def pseudonymize(ids: pa.Array | pa.ChunkedArray, key) -> pa.Array:
    """The pseudonyms of ``ids`` (no nulls: the input check refuses null ids first)."""
    arr = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if arr.null_count:
        raise SchemaError("--pseudonymize-ids: null ids cannot be pseudonymized; fix the input")
    # one HMAC state keyed once, copied per id (the per-id cost is two SHA-256 blocks)
    base = hmac.new(key.subkey(PURPOSE), digestmod=hashlib.sha256)
    out = []
    for data in _canonical(arr):
        h = base.copy()
        h.update(data)
        out.append(h.hexdigest()[:HEX_DIGITS])
    return pa.array(out, pa.string())
