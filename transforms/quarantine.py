"""Row-level validation with a dead-letter (quarantine) output instead of a crash.

Bad rows never reach the model or the release: they go to ``OUT_quarantine/`` with a reason,
the job summary counts them and ``--max-quarantined`` decides whether the job may publish.
Reasons: ``null`` (no embedding), ``wrong-dimension`` (a list of the wrong length),
``non-finite`` (NaN/Inf) and ``zero-vector``. All-zero rows are quarantined because n(0) = 0
in eq. 1: the modifier sees no input at all and G(0) = n(0 + n(MLP(0))) is one constant
vector for every such row (exactly 0 for a model whose MLP maps 0 to 0). That output is
neither a privatized version of real data nor useful downstream; releasing it would only
hide an upstream bug (a failed extraction usually yields zeros).

The job applies :func:`validate_batch` inside :class:`transforms.modify.ModifyRowGroupFn`,
which emits bad rows as ``("bad", batch)`` tagged tuples (DaskRunner does not route tagged
outputs).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mass.errors import SchemaError
from mass.io import embedding_array
from transforms.parquet_io import fill_empty_shards, remove_sidecars

REASONS = ("ok", "null", "wrong-dimension", "non-finite", "zero-vector")
OK, NULL, WRONG_DIM, NONFINITE, ZERO = range(len(REASONS))
QUARANTINE_SCHEMA_FIELDS = ("reason",)


def validate_batch(
    batch: pa.RecordBatch, *, id_col: str, emb_col: str, dim: int
) -> tuple[pa.RecordBatch, pa.RecordBatch]:
    """Split ``batch`` into (good rows with a float32 fixed-size-list ``emb_col``, bad rows).

    Bad rows keep only the id and a ``reason`` column: the quarantine is not anonymized, so
    it must not copy the raw embedding or labels.
    """
    arr = batch.column(emb_col)
    n = batch.num_rows
    typ = arr.type
    if pa.types.is_fixed_size_list(typ):
        if typ.list_size != dim:
            raise SchemaError(
                f"column '{emb_col}' has dimension {typ.list_size}, the model "
                f"expects {dim}; pass the matching --model or --emb-col"
            )
        values = arr.values.slice(arr.offset * dim, n * dim)
        right_dim = np.ones(n, bool)
        mat = (
            pc.fill_null(values.cast(pa.float32()), np.nan)
            .to_numpy(zero_copy_only=False)
            .reshape(n, dim)
        )
    elif pa.types.is_list(typ) or pa.types.is_large_list(typ):
        lengths = pc.fill_null(pc.list_value_length(arr), -1).to_numpy(zero_copy_only=False)
        right_dim = lengths == dim
        mat = np.full((n, dim), np.nan, np.float32)
        good = arr.filter(pa.array(right_dim))
        if len(good):
            mat[right_dim] = (
                pc.fill_null(good.flatten().cast(pa.float32()), np.nan)
                .to_numpy(zero_copy_only=False)
                .reshape(-1, dim)
            )
    else:
        raise SchemaError(f"column '{emb_col}' has type {typ}; expected a list of floats")
    codes = np.zeros(n, np.int8)
    finite = np.isfinite(mat).all(axis=1)
    codes[~finite] = NONFINITE
    codes[finite & ~mat.any(axis=1)] = ZERO
    codes[~right_dim] = WRONG_DIM
    codes[arr.is_null().to_numpy(zero_copy_only=False)] = NULL
    ok = codes == OK
    if ok.all() and pa.types.is_fixed_size_list(typ) and typ.value_type == pa.float32():
        # the usual case, all rows valid and already float32: pass the batch on uncopied
        return batch, pa.RecordBatch.from_arrays(
            [batch.column(id_col).slice(0, 0), pa.array([], pa.string())], names=[id_col, "reason"]
        )
    good = batch.filter(pa.array(ok))
    idx = good.schema.get_field_index(emb_col)
    good = good.set_column(idx, emb_col, embedding_array(mat[ok]))
    bad_codes = codes[~ok]
    bad = pa.RecordBatch.from_arrays(
        [
            batch.column(id_col).filter(pa.array(~ok)),
            pa.array(REASONS).take(pa.array(bad_codes.astype(np.int32))),
        ],
        names=[id_col, "reason"],
    )
    return good, bad


def quarantine_schema(id_type: pa.DataType, id_col: str) -> pa.Schema:
    return pa.schema([(id_col, id_type), ("reason", pa.string())])


def publish_quarantine(staging: str, out: str, *, schema: pa.Schema) -> dict:
    """Complete the staged quarantine, write its ``_quarantine.json`` marker + manifest and
    swap it into ``out``; return the manifest (``rows``, ``parts``)."""
    fill_empty_shards(staging, schema, 1)
    remove_sidecars(staging)
    # one publication path (and one ownership marker scheme) for both outputs
    from transforms.release import swap_into_place, write_quarantine_manifest

    doc = write_quarantine_manifest(staging)
    swap_into_place(staging, out)
    return doc


def quarantine_reasons(directory: str) -> dict[str, int]:
    """``{reason: count}`` of a published quarantine directory (for the job summary)."""
    table = pq.read_table(directory, columns=["reason"])
    counts = pc.value_counts(table.column("reason").combine_chunks())
    return {c["values"].as_py(): c["counts"].as_py() for c in counts}
