"""Row-level validation with a dead-letter (quarantine) output instead of a crash.

Bad rows never reach the model or the release: they go to ``OUT_quarantine/`` with a reason,
the job summary counts them and ``--max-quarantined`` decides whether the job may publish.
Reasons: ``null`` (no embedding), ``wrong-dimension`` (a list of the wrong length),
``non-finite`` (NaN/Inf, or a null value inside the list) and three norm rules on the
float32 row the model would see (norm computed in float64, so it neither underflows nor
overflows):

* ``zero-vector``: every value is exactly 0;
* ``tiny-norm``: ``0 < ||x|| < NORM_MIN * sqrt(d)`` (``NORM_MIN`` = 1e-6), e.g. denormals
  (1e-40) or an extraction that cancelled to rounding residue;
* ``huge-norm``: ``||x|| > NORM_MAX`` (2**60 ~ 1.2e18), e.g. a 3e38 value.

Why these bounds (docs/failure-modes.md, 'Degenerate rows'): the modifier starts with
n(x) = x / ||x|| in float32 (eq. 1). n(0) = 0, so G maps every zero row to one constant
vector G(0) = n(n(MLP(0))): not a privatized version of real data, and zeros usually mean a
failed extraction. Denormal rows and rows with an overflowing norm end the same way: float32
squares of values below ~4e-23 underflow to 0 (1e-40 has ||x||_float32 = 0) and a norm
above ~1.8e19 overflows to inf (x / inf = 0), so both are released as the same G(0); a row
just above the underflow is normalised to a direction of rounding residue, not data. The
lower bound is about 8x the float32 rounding residue of unit-scale components (eps * sqrt(d),
eps = 1.2e-7) and at least four orders of magnitude below a unit-norm embedding for any
d <= 10**4: nothing an extractor produces on purpose is that small. The upper bound keeps
``||x||**2`` (1.3e36) more than 200x below the float32 maximum (3.4e38), so the served
model's float32 sum of squares and residual sum stay finite.

The job applies :func:`validate_batch` inside :class:`transforms.modify.ModifyRowGroupFn`,
which emits bad rows as ``("bad", batch)`` tagged tuples (DaskRunner does not route tagged
outputs).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mass.batches.parquet import decode_dictionaries
from mass.embeddings import PER_ROW, decode, embedding_array

REASONS = ("ok", "null", "wrong-dimension", "non-finite", "zero-vector", "tiny-norm",
           "huge-norm")  # fmt: skip
OK, NULL, WRONG_DIM, NONFINITE, ZERO, TINY, HUGE = range(len(REASONS))
QUARANTINE_SCHEMA_FIELDS = ("reason",)
NORM_MIN = 1e-6  # rows with ||x|| < NORM_MIN * sqrt(d) are quarantined (tiny-norm)
NORM_MAX = float(2**60)  # rows with ||x|| > NORM_MAX are quarantined (huge-norm)


def norm_codes(mat: np.ndarray, finite: np.ndarray) -> np.ndarray:
    """``ZERO``/``TINY``/``HUGE`` (else ``OK``) per row of float32 ``mat`` (finite rows only).

    The float32 sum of squares decides the clear cases; rows near either bound, or whose
    float32 sum under- or overflows, are recomputed in float64 (a handful per batch).
    """
    n, dim = mat.shape
    low, high = NORM_MIN * np.sqrt(max(dim, 1)), NORM_MAX
    with np.errstate(over="ignore", invalid="ignore"):
        sq = np.einsum("ij,ij->i", mat, mat)
    unsure = finite & ~((sq > 4 * low * low) & (sq < high * high / 4))
    codes = np.zeros(n, np.int8)
    if unsure.any():
        rows = mat[unsure].astype(np.float64)
        norm = np.sqrt(np.einsum("ij,ij->i", rows, rows))
        sub = np.where(norm == 0, ZERO, np.where(norm < low, TINY,
                                                 np.where(norm > high, HUGE, OK)))  # fmt: skip
        codes[unsure] = sub
    return codes


def validate_batch(
    batch: pa.RecordBatch, *, id_col: str, emb_col: str, dim: int
) -> tuple[pa.RecordBatch, pa.RecordBatch]:
    """Split ``batch`` into (good rows with a float32 fixed-size-list ``emb_col``, bad rows).

    Bad rows keep only the id and a ``reason`` column: the quarantine is not anonymized, so
    it must not copy the raw embedding or labels.
    """
    batch = decode_dictionaries(batch)  # a pandas category id/column is its values
    arr = batch.column(emb_col)
    n, typ = batch.num_rows, arr.type
    decoded = decode(arr, column=emb_col, dim=dim, policy=PER_ROW)
    mat, right_dim = decoded.x, decoded.right_dim
    codes = np.zeros(n, np.int8)
    finite = np.isfinite(mat).all(axis=1)
    codes[~finite] = NONFINITE
    degenerate = norm_codes(mat, finite)
    codes[finite] = degenerate[finite]
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


def quarantine_reasons(directory: str) -> dict[str, int]:
    """``{reason: count}`` of a published quarantine directory (for the job summary)."""
    table = pq.read_table(directory, columns=["reason"])
    counts = pc.value_counts(table.column("reason").combine_chunks())
    return {c["values"].as_py(): c["counts"].as_py() for c in counts}
