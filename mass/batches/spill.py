"""External sort by id, per release shard: the write path's spills and their k-way merge.

A worker buffers rows per shard (``row_seeds(id) % num_shards``) and spills each buffer as an
id-sorted Arrow IPC spill file; one merge per shard streams the spills back holding one record
batch per open spill (:data:`FAN_IN` at a time, multi-pass above that), so memory stays bounded
whatever the number of rows. Spill files live under the staging location (:mod:`mass.fs`: a local
directory or an object-store prefix); only their paths cross the GroupByKey, so with staging in
a store every worker can reach (the default for an object-store ``--output``, or
``--temp_location``), no worker ever opens a path local to another machine.

With ``verify_col`` (the model input carried next to the output) the spiller compares the two
and keeps one flag byte per row instead of the input copy (:func:`row_flags`).
"""

from __future__ import annotations

import contextlib
import errno
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mass import fs
from mass.embeddings import fixed_view
from mass.errors import ReleaseError
from mass.noise import row_seeds

DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


@contextlib.contextmanager
def disk_full(path: str, what: str):
    """Turn ``ENOSPC``/``EDQUOT`` while writing under ``path`` into a :class:`ReleaseError`
    naming the path (the callers' staging is removed by the job; nothing is published)."""
    try:
        yield
    except OSError as e:
        if e.errno not in DISK_FULL and not any(
            f"[errno {n}]" in str(e) for n in DISK_FULL
        ):  # pyarrow's IOError carries the errno in its text
            raise
        raise ReleaseError(
            f"{path}: no space left on the device while writing {what} ({e}); free space "
            "there or point --output at another filesystem; nothing published"
        ) from e


def shard_of(ids: pa.Array, num_shards: int) -> np.ndarray:
    """Shard of each row: a pure function of its id (stable across processes and runners)."""
    return (row_seeds(ids) % num_shards).astype(np.int64)


SPILLS_DIR = "_spills"  # sorted spills inside the staging directory (removed before publishing)
SPILL_BATCH_BYTES = (
    1 << 20
)  # bytes per record batch of a spill file: what the merge holds per open spill
FAN_IN = 32  # spills merged at once; more are first merged into longer spills (bounded memory)
SPILL_BYTES = 64 << 20  # rows a writer buffers per worker before it spills them, sorted


def _sorted(table: pa.Table, id_col: str) -> pa.Table:
    """``table`` in id order; returned as it is when it already is (a worker reading its row
    groups in id order: the usual case, where the sort's take would copy every row)."""
    if _ascending(table.column(id_col)):
        return table
    return table.take(pc.sort_indices(table, sort_keys=[(id_col, "ascending")]))


def _ascending(ids: pa.ChunkedArray | pa.Array) -> bool:
    """Whether ``ids`` never decrease (integer ids; anything else is sorted to be sure)."""
    if not pa.types.is_integer(ids.type) or ids.null_count:
        return False
    chunks = ids.chunks if isinstance(ids, pa.ChunkedArray) else [ids]
    last = None
    for chunk in chunks:
        if not len(chunk):
            continue
        a = chunk.to_numpy(zero_copy_only=False)
        if (last is not None and a[0] < last) or bool((a[1:] < a[:-1]).any()):
            return False
        last = a[-1]
    return True


def chunk_rows(table: pa.Table) -> int:
    row = max(1, table.nbytes // max(1, table.num_rows)) if table.num_rows else 1
    return max(256, SPILL_BATCH_BYTES // row)


def write_spill(directory: str, table: pa.Table, id_col: str) -> str:
    """Sort ``table`` by id and write it as one Arrow IPC spill file; return its path (a spill is
    referenced only once complete: :func:`mass.fs.atomic_output`)."""
    table = _sorted(table, id_col)  # chunks are kept: the IPC writer slices them anyway
    path = fs.join(directory, f"spill-{uuid.uuid4().hex}.arrow")
    with disk_full(directory, "a sorted spill"):
        with fs.atomic_output(path) as sink, pa.ipc.new_file(sink, table.schema) as w:
            w.write_table(table, max_chunksize=chunk_rows(table))
    return path


class ShardSpiller:
    """Buffers a worker's rows per shard and spills them as id-sorted spill files.

    Memory is bounded by ``budget`` bytes whatever the number of rows; each spill is
    reported as ``(shard, path)`` for the merge. With ``verify_col`` (the model input
    carried next to the output), the comparison happens here and one flag byte per row
    replaces the input copy (see :func:`row_flags`).
    """

    def __init__(
        self,
        directory: str,
        *,
        id_col: str,
        num_shards: int,
        emb_col: str | None = None,
        verify_col: str | None = None,
        budget: int | None = None,
    ) -> None:
        self._dir = fs.join(directory, SPILLS_DIR)
        self._id_col, self._n = id_col, num_shards
        self._emb_col, self._verify_col = emb_col, verify_col
        self._budget = SPILL_BYTES if budget is None else budget  # read now: tests shrink it
        self._buf: dict[int, list[pa.RecordBatch]] = {}
        self._bytes = 0

    def add(self, batch: pa.RecordBatch, flags: np.ndarray | None = None) -> list[tuple[int, str]]:
        """Buffer ``batch``; ``flags``: its :func:`row_flags` when the caller computed (and
        checked, :mod:`mass.batches.reference`) them, else computed here."""
        if self._verify_col is not None:
            if flags is None:
                flags = row_flags(batch, self._emb_col, self._verify_col)
            idx = batch.schema.get_field_index(self._verify_col)
            batch = batch.set_column(idx, self._verify_col, pa.array(flags))
        shards = shard_of(batch.column(self._id_col), self._n)
        for s in np.unique(shards):
            part = batch if self._n == 1 else batch.filter(pa.array(shards == s))
            self._buf.setdefault(int(s), []).append(part)
        self._bytes += batch.nbytes
        return self.flush() if self._bytes >= self._budget else []

    def flush(self) -> list[tuple[int, str]]:
        out = []
        for s, parts in sorted(self._buf.items()):
            out.append((s, write_spill(self._dir, pa.Table.from_batches(parts), self._id_col)))
        self._buf, self._bytes = {}, 0
        return out


class _Cursor:
    """Read position in one sorted spill file (one record batch in memory at a time)."""

    def __init__(self, path: str, id_col: str) -> None:
        self._file = fs.open_input(path)
        self._reader = pa.ipc.open_file(self._file)
        self._next, self._id_col = 0, id_col
        self.batch: pa.RecordBatch | None = None
        self._load()

    def _load(self) -> None:
        self.batch = None
        while self.batch is None and self._next < self._reader.num_record_batches:
            b = self._reader.get_batch(self._next)
            self._next += 1
            self.batch = b if b.num_rows else None
        if self.batch is None:
            self._file.close()

    def last_id(self):
        return self.batch.column(self._id_col)[-1].as_py()

    def take_upto(self, bound) -> pa.RecordBatch:
        """Rows with id <= ``bound`` (a prefix: the spill is sorted); loads the next batch."""
        ids = self.batch.column(self._id_col)
        k = pc.sum(pc.less_equal(ids, pa.scalar(bound, ids.type))).as_py() or 0
        head = self.batch.slice(0, k)
        self.batch = self.batch.slice(k)
        if not self.batch.num_rows:
            self._load()
        return head


def merge_sorted_spills(paths: list[str], id_col: str):
    """k-way merge of id-sorted spills: yields id-sorted tables, holding one batch per spill."""
    cursors = [c for c in (_Cursor(p, id_col) for p in paths) if c.batch is not None]
    while cursors:
        # every row <= the smallest "last id" of the loaded batches is final: none can follow
        bound = min(c.last_id() for c in cursors)
        pieces = [c.take_upto(bound) for c in cursors]
        table = pa.Table.from_batches([p for p in pieces if p.num_rows])
        yield _sorted(table, id_col)
        cursors = [c for c in cursors if c.batch is not None]


def reduce_spills(paths: list[str], directory: str, id_col: str) -> list[str]:
    """Merge spills FAN_IN at a time until at most FAN_IN remain (multi-pass external sort)."""
    while len(paths) > FAN_IN:
        merged = []
        for i in range(0, len(paths), FAN_IN):
            group = paths[i : i + FAN_IN]
            if len(group) == 1:
                merged.append(group[0])
                continue
            out = fs.join(directory, f"spill-{uuid.uuid4().hex}.arrow")
            writer = None
            with fs.atomic_output(out) as sink:
                for table in merge_sorted_spills(group, id_col):
                    if writer is None:
                        writer = pa.ipc.new_file(sink, table.schema)
                    writer.write_table(table, max_chunksize=chunk_rows(table))
                if writer is not None:
                    writer.close()
            for p in group:
                fs.remove(p)
            merged.append(out)
        paths = merged
    return paths


# Bits of the per-row flags that replace the input copy. UNMODIFIED and MISMATCH refuse the
# release; OWN_UNCHANGED / OWN_NEAR rows are the signed modifier's own output, recomputed
# in-process (mass.batches.reference): released and counted. NEAR marks a row above the caller's
# ``near`` cosine before that check (it becomes OWN_NEAR or MISMATCH).
UNMODIFIED, NONFINITE, OWN_UNCHANGED, NEAR, MISMATCH = 1, 2, 4, 8, 16
FLAG_NAMES = (("unmodified", UNMODIFIED), ("nonfinite", NONFINITE),
              ("own_unchanged", OWN_UNCHANGED), ("own_near", NEAR), ("mismatch", MISMATCH))  # fmt: skip
# A released row whose cosine similarity to its input exceeds this is the input (up to scale
# and float rounding: a bypassed model, one that returns n(x) or x * (1 + 1e-7)): refused.
# 1 - cos ~ angle**2 / 2, so this is an angle of ~0.08 degrees; any real modifier moves a
# row much further (MaSS adds a unit vector to a unit vector: cos <= 0.71 unless aligned).
BYPASS_COSINE = 1.0 - 1e-6


def row_flags(
    batch: pa.RecordBatch, emb_col: str | None, verify_col: str, near: float = BYPASS_COSINE
) -> np.ndarray:
    """uint8 per row: UNMODIFIED if the output is the carried input up to scale (cosine
    similarity > :data:`BYPASS_COSINE`, computed in float64), NONFINITE if not finite, NEAR
    if the cosine is above ``near`` (< BYPASS_COSINE: the audit's ``max_cosine``) only.

    The float64 test runs only on the rows :func:`near_parallel` keeps (float32 cosine within
    its rounding bound of the threshold, or undefined); no other row can pass it, so the flags
    are those of the float64 test on every row, at a fraction of the cost (docs/performance.md).
    """
    n = batch.num_rows
    out = fixed_view(batch.column(emb_col))
    src = fixed_view(batch.column(verify_col), None)
    finite = np.isfinite(out).all(axis=1)
    same = np.zeros(n, bool)
    if src.shape == out.shape:
        rows = near_parallel(out, src, min(near, BYPASS_COSINE))
        hit, out, src = same, out[rows], src[rows]  # from here on: the kept rows only
        a = np.where(finite[rows][:, None], out, 0.0).astype(np.float64)
        b = np.nan_to_num(src.astype(np.float64), nan=0.0, posinf=0.0, neginf=0.0)
        dot = np.einsum("ij,ij->i", a, b)
        norms = np.sqrt(np.einsum("ij,ij->i", a, a) * np.einsum("ij,ij->i", b, b))
        cos = np.divide(dot, norms, out=np.zeros(len(rows)), where=norms > 0)
        # an exact copy is a bypass whatever its norm (a zero row is quarantined upstream)
        same = (cos > BYPASS_COSINE) | (out == src).all(axis=1)
        hit[rows] = same
        close = np.zeros(n, bool)
        close[rows] = ~same & (cos > near)
        same = hit
    else:
        close = np.zeros(n, bool)
    flags = np.where(same, UNMODIFIED, np.where(close, NEAR, 0)).astype(np.uint8)
    flags[~finite] |= NONFINITE
    return flags


_NORMAL = 1e-30  # squared norms below this may hold float32 subnormals: checked in float64


def near_parallel(out: np.ndarray, src: np.ndarray, near: float = BYPASS_COSINE) -> np.ndarray:
    """Indices of the rows whose float64 cosine could exceed ``near`` (:data:`BYPASS_COSINE`).

    In float32, ``|cos32 - cos| <= ~d * eps`` for rows of normal-range numbers (each dot
    product of d terms is off by at most ``d * eps / 2`` times ``|out| |src|``); a row is
    dropped only when its float32 cosine is below the threshold by a margin of
    ``1e-3 + 8 * d * eps`` and both squared norms are finite and normal. Every other row (near
    parallel, zero, tiny, huge, NaN/Inf anywhere) is kept; non-float32 input keeps all rows.
    """
    if out.dtype != np.float32 or src.dtype != np.float32 or not len(out):
        return np.arange(len(out))
    with np.errstate(all="ignore"):
        dot = np.einsum("ij,ij->i", out, src)
        nn = np.einsum("ij,ij->i", out, out) * np.einsum("ij,ij->i", src, src)
        cos = dot / np.sqrt(nn)
    margin = 1e-3 + 8 * out.shape[1] * float(np.finfo(np.float32).eps)
    dropped = (cos < near - margin) & (nn > _NORMAL) & np.isfinite(nn)
    return np.flatnonzero(~dropped)


def count_flags(counts: dict, table: pa.Table, id_col: str, verify_col: str) -> None:
    """Add one sorted chunk's flags to ``counts`` (first ids are the smallest: spills are sorted)."""
    flags = table.column(verify_col).combine_chunks().to_numpy(zero_copy_only=False)
    ids = table.column(id_col)
    for key, bit in FLAG_NAMES:
        mask = (flags & bit) > 0
        if mask.any():
            counts[key] += int(mask.sum())
            if counts[f"first_{key}_id"] is None:
                counts[f"first_{key}_id"] = ids[int(np.flatnonzero(mask)[0])].as_py()
