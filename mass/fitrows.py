"""Transductive fits: a modifier fitted on exactly the rows it releases, bound to them.

A batch anonymization job knows the suppressed label of the rows it releases (the audit reads
it from the same input), so a repair can be fitted on those rows themselves: its guarantee
(every class of S transported to one distribution) then holds on the release, not only on a
training sample (docs/calibration.md, "transductive repair"). The guarantee says nothing about
other rows, so the fitted modifier records which rows it was fitted on - their count, the
SHA-256 of their sorted ids (``fit_ids_sha256``) and the SHA-256 of their content
(``fit_rows_sha256``: the sorted ids and each row's embedding, as float32, in that order) - and
the anonymize job refuses any other input (:class:`mass.errors.TransductiveRowsError`) before a
row is sent to the model. The content digest is what binds: the fitted ids carrying other
embeddings are other rows, and the repair's guarantee says nothing about them. A spec with the
ids digest alone (written before the content was bound) cannot tell, so it is refused too.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mass.embeddings import embedding_matrix
from mass.errors import TransductiveRowsError
from mass.io import check_ids, read_table


def ids_digest(ids: pa.Array) -> str:
    """SHA-256 of the sorted ids (integers as int64, strings as length-prefixed UTF-8): the
    same rows in any order or file layout give the same digest."""
    return _ids_hash(ids, hashlib.sha256()).hexdigest()


def rows_digest(ids: pa.Array, x: np.ndarray) -> str:
    """SHA-256 of the rows' content: the sorted ids as :func:`ids_digest` hashes them, then
    ``f32:<dim>:`` and each row's embedding (float32 little-endian) in the ids' order; the same
    rows in any order or file layout give the same digest, any changed embedding bit another."""
    ids = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
    if len(ids) != len(x):
        raise ValueError(f"rows_digest: {len(ids)} ids for {len(x)} embeddings")
    h = _ids_hash(ids, hashlib.sha256())
    order = pc.sort_indices(ids).to_numpy(zero_copy_only=False)
    rows = np.ascontiguousarray(np.asarray(x, dtype="<f4")[order])
    h.update(b"f32:%d:" % (rows.shape[1] if rows.ndim == 2 else 0))
    h.update(rows.tobytes())
    return h.hexdigest()


def _ids_hash(ids: pa.Array, h):
    ids = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
    ordered = ids.take(pc.sort_indices(ids))
    if pa.types.is_integer(ordered.type):
        h.update(b"int64:")
        h.update(ordered.cast(pa.int64()).to_numpy(zero_copy_only=False).astype("<i8").tobytes())
    else:  # a fresh array (take): offsets from 0, its buffers are the canonical bytes
        text = ordered.cast(pa.large_string()).take(pa.array(np.arange(len(ordered))))
        _, offsets, data = text.buffers()
        end = int(np.frombuffer(offsets, dtype="<i8")[len(text)])
        h.update(b"utf8:")
        h.update(offsets.to_pybytes()[: 8 * (len(text) + 1)])
        h.update(data.to_pybytes()[:end] if data is not None else b"")
    return h


def fitted_rows(spec: dict) -> tuple[int, str, str] | None:
    """(rows, ids digest, content digest or "") a modifier spec (export.json's
    ``modifier.spec``; chains searched part by part) is bound to, or None for a modifier
    fitted to apply to any rows."""
    if spec.get("fit_ids_sha256") or spec.get("fit_rows_sha256"):
        return (
            int(spec.get("fit_rows", 0)),
            str(spec.get("fit_ids_sha256") or ""),
            str(spec.get("fit_rows_sha256") or ""),
        )
    for part in spec.get("parts") or []:
        found = fitted_rows(dict(part.get("spec") or {}))
        if found:
            return found
    return None


def check_fitted_rows(info: dict, input_spec: str, *, id_col: str, emb_col: str = "emb") -> None:
    """Refuse to release ``input_spec`` with a transductive model fitted on other rows: other
    ids, another count, or the fitted ids with other embeddings (the content digest).

    ``info`` is the model's export.json (or the in-process model info); a model without the
    record (every inductive method) passes untouched.
    """
    bound = fitted_rows(dict((info.get("modifier") or {}).get("spec") or {}))
    if bound is None:
        return
    rows, ids_sha, rows_sha = bound
    what = f"model '{info.get('name', '?')}' (sha256 {str(info.get('sha256', '?'))[:12]})"
    todo = (
        "Its privacy holds only on the rows it was fitted on: train it on this input "
        "(`mass train --data INPUT --transductive`) or release these rows with an "
        "inductive model; nothing was read or published"
    )
    if not rows_sha:
        raise TransductiveRowsError(
            f"{input_spec}: {what} is a transductive repair bound to its rows' ids alone "
            "(no fit_rows_sha256 in its spec), so the fitted ids carrying other embeddings "
            f"cannot be told from its own rows. Re-train it with this version. {todo}"
        )
    table = read_table(input_spec, columns=[id_col, emb_col])
    ids = check_ids(table, id_col, source=input_spec)
    if len(ids) != rows or (ids_sha and ids_digest(ids) != ids_sha):
        raise TransductiveRowsError(
            f"{input_spec}: {what} is a transductive repair fitted on {rows} rows with ids "
            f"digest {ids_sha[:12]}; this input has {len(ids)} rows"
            f"{'' if len(ids) != rows else ' with other ids'} (column '{id_col}'). {todo}"
        )
    x = embedding_matrix(table, emb_col, source=input_spec)
    if rows_digest(ids, x) != rows_sha:
        raise TransductiveRowsError(
            f"{input_spec}: {what} is a transductive repair fitted on {rows} rows with content "
            f"digest {rows_sha[:12]}; this input has the same ids with other embeddings "
            f"(column '{emb_col}'), so they are other rows. {todo}"
        )
