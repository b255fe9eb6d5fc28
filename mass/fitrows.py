"""Transductive fits: a modifier fitted on exactly the rows it releases, bound to them.

A batch anonymization job knows the suppressed label of the rows it releases (the audit reads
it from the same input), so a repair can be fitted on those rows themselves: its guarantee
(every class of S transported to one distribution) then holds on the release, not only on a
training sample (docs/calibration.md, "transductive repair"). The guarantee says nothing about
other rows, so the fitted modifier records which rows it was fitted on - their count and the
SHA-256 of their sorted ids - and the anonymize job refuses any other input
(:class:`mass.errors.TransductiveRowsError`) before a row is sent to the model.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mass.errors import TransductiveRowsError
from mass.io import check_ids, read_table


def ids_digest(ids: pa.Array) -> str:
    """SHA-256 of the sorted ids (integers as int64, strings as length-prefixed UTF-8): the
    same rows in any order or file layout give the same digest."""
    ids = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
    ordered = ids.take(pc.sort_indices(ids))
    h = hashlib.sha256()
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
    return h.hexdigest()


def fitted_rows(spec: dict) -> tuple[int, str] | None:
    """(rows, ids digest) a modifier spec (export.json's ``modifier.spec``; chains searched
    part by part) is bound to, or None for a modifier fitted to apply to any rows."""
    if spec.get("fit_ids_sha256"):
        return int(spec.get("fit_rows", 0)), str(spec["fit_ids_sha256"])
    for part in spec.get("parts") or []:
        found = fitted_rows(dict(part.get("spec") or {}))
        if found:
            return found
    return None


def check_fitted_rows(info: dict, input_spec: str, *, id_col: str) -> None:
    """Refuse to release ``input_spec`` with a transductive model fitted on other rows.

    ``info`` is the model's export.json (or the in-process model info); a model without the
    record (every inductive method) passes untouched.
    """
    bound = fitted_rows(dict((info.get("modifier") or {}).get("spec") or {}))
    if bound is None:
        return
    rows, digest = bound
    ids = check_ids(read_table(input_spec, columns=[id_col]), id_col, source=input_spec)
    what = f"model '{info.get('name', '?')}' (sha256 {str(info.get('sha256', '?'))[:12]})"
    if len(ids) != rows or ids_digest(ids) != digest:
        raise TransductiveRowsError(
            f"{input_spec}: {what} is a transductive repair fitted on {rows} rows with ids "
            f"digest {digest[:12]}; this input has {len(ids)} rows"
            f"{'' if len(ids) != rows else ' with other ids'} (column '{id_col}'). Its privacy "
            "holds only on the rows it was fitted on: train it on this input "
            "(`mass train --data INPUT --transductive`) or release these rows with an "
            "inductive model; nothing was read or published"
        )
