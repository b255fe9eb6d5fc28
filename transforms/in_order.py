"""The single-process in-order writer: when one worker reads the whole input and its ids are
strictly ascending in read order, each shard's rows already arrive in id order, so they go
straight into the shard's part file: no spill runs, no merge reading them back.

Whether the input is in order is known before any inference: the id index streams every id in
the job's read order (:attr:`transforms.id_index.IdIndex.in_order`). Any other input, a runner
with several workers, or shards whose pending row groups would not fit
:data:`IN_ORDER_BYTES` take the spill + merge path (:mod:`transforms.runs`); both paths write
the same part files, byte for byte (:class:`transforms.parquet_write.PartWriter`: one row
group per ``row_group_size`` rows of the sorted shard). Rows that reach the writer out of
order anyway (the input changed after the index read it) raise :class:`ReleaseError`: the
unfinished parts are removed, nothing is published.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pyarrow as pa
from apache_beam.options.pipeline_options import DirectOptions, StandardOptions

from mass.embeddings import fixed_view
from mass.errors import ReleaseError
from transforms.modify import ModifyRowGroupFn
from transforms.parquet_io import WRITE_OPTIONS, footer
from transforms.parquet_write import part_writer
from transforms.runs import disk_full, row_flags, shard_of

# Rows the in-order writer may hold for all shards together before their row groups are
# complete (num_shards x row_group_size rows, estimated from the input's column sizes); the
# merge path holds one shard's row group at a time.
IN_ORDER_BYTES = 512 << 20
LOCAL_RUNNERS = (None, "DirectRunner", "FnApiRunner", "SwitchingDirectRunner")


def single_worker(pipeline) -> bool:
    """Whether ``pipeline`` runs on the in-process runner with one worker (the default)."""
    opts = pipeline.options
    runner = opts.view_as(StandardOptions).runner
    name = runner if runner is None or isinstance(runner, str) else type(runner).__name__
    return name in LOCAL_RUNNERS and (opts.view_as(DirectOptions).direct_num_workers or 0) == 1


def use_in_order(pipeline, checked, *, columns: list[str], num_shards: int) -> bool:
    """The in-order writer for ``checked`` (a :class:`transforms.validate.CheckedInput`):
    ids ascending in read order, one worker, pending row groups within budget."""
    return (checked.index.in_order and single_worker(pipeline)
            and fits(checked.files, columns, num_shards))  # fmt: skip


def fits(files, columns: list[str], num_shards: int) -> bool:
    """Whether ``num_shards`` pending row groups of ``columns`` fit :data:`IN_ORDER_BYTES`."""
    rows = nbytes = 0
    for path in files:
        meta = footer(path)
        for i in range(meta.num_row_groups):
            rg = meta.row_group(i)
            rows += rg.num_rows
            for j in range(rg.num_columns):
                col = rg.column(j)
                if col.path_in_schema.split(".")[0] in columns:
                    nbytes += col.total_uncompressed_size
    per_row = nbytes / max(rows, 1) + 16  # + the flag byte and Arrow offsets/validity
    return num_shards * WRITE_OPTIONS["row_group_size"] * per_row <= IN_ORDER_BYTES


class InOrderWriter:
    """Every shard's part file open at once; rows in strictly ascending id order go straight
    in (see the module docstring). A context manager: on an error no part appears."""

    def __init__(self, directory: str, *, id_col: str, emb_col: str, num_shards: int,
                 schema: pa.Schema, verify_col: str) -> None:  # fmt: skip
        self._dir, self._id_col, self._emb_col = directory, id_col, emb_col
        self._n, self._schema, self._verify_col = int(num_shards), schema, verify_col
        self._last = None

    def __enter__(self) -> InOrderWriter:
        with contextlib.ExitStack() as stack:
            stack.enter_context(disk_full(self._dir, "the release's part files"))
            self._parts = [
                stack.enter_context(part_writer(self._dir, s, self._n, id_col=self._id_col,
                                                schema=self._schema, verify_col=self._verify_col))
                for s in range(self._n)
            ]  # fmt: skip
            self._stack = stack.pop_all()
        self._pending: list[list[tuple[pa.RecordBatch, np.ndarray | None]]] = [
            [] for _ in range(self._n)
        ]
        return self

    def __exit__(self, *exc) -> bool:
        if exc[0] is None:
            try:  # each shard's last, partial row group
                for part, pending in zip(self._parts, self._pending, strict=True):
                    if pending:
                        part.write(_gather(pending, sum(_len(p) for p in pending)))
            except BaseException as e:
                if not self._stack.__exit__(type(e), e, e.__traceback__):
                    raise
                return False
        return self._stack.__exit__(*exc)

    def add(self, batch: pa.RecordBatch, flags: np.ndarray | None) -> None:
        """``batch``: model output with the input copy in ``verify_col``; ``flags``: its
        checked :func:`transforms.runs.row_flags` (computed here when None)."""
        self._check_order(batch)
        if flags is None:
            flags = row_flags(batch, self._emb_col, self._verify_col)
        idx = batch.schema.get_field_index(self._verify_col)
        batch = batch.set_column(idx, self._verify_col, pa.array(flags))
        if self._n == 1:
            self._add(0, batch, None)
            return
        shards = shard_of(batch.column(self._id_col), self._n)
        for s in np.unique(shards):
            self._add(int(s), batch, np.flatnonzero(shards == s))

    def _add(self, shard: int, batch: pa.RecordBatch, rows: np.ndarray | None) -> None:
        pending = self._pending[shard]
        pending.append((batch, rows))
        group = WRITE_OPTIONS["row_group_size"]
        while sum(_len(p) for p in pending) >= group:
            self._parts[shard].write(_gather(pending, group))

    def _check_order(self, batch: pa.RecordBatch) -> None:
        ids = batch.column(self._id_col).to_numpy(zero_copy_only=False)
        if not len(ids):
            return
        if (self._last is not None and ids[0] <= self._last) or bool((ids[1:] <= ids[:-1]).any()):
            raise ReleaseError(
                f"{self._dir}: rows reached the in-order writer out of id order (near id "
                f"{ids[0]!r}), though the input's ids were ascending when the job checked "
                "them: the input changed during the job; re-run it; nothing published"
            )
        self._last = ids[-1]


def _len(piece: tuple[pa.RecordBatch, np.ndarray | None]) -> int:
    batch, rows = piece
    return batch.num_rows if rows is None else len(rows)


def _gather(pending: list, n: int) -> pa.Table:
    """The first ``n`` rows of ``pending`` (``(batch, row indices or None for all)`` in order)
    as a table of one chunk per column, copied once (filtering each batch and then combining
    the pieces into a row group copied every row twice); the rows taken leave ``pending``."""
    pieces, left = [], n
    while left:
        batch, rows = pending[0]
        k = _len(pending[0])
        if k <= left:
            pieces.append((batch, rows, k))
            pending.pop(0)
        else:
            pieces.append((batch, rows, left))
            pending[0] = (batch.slice(left), None) if rows is None else (batch, rows[left:])
            k = left
        left -= k
    schema = pieces[0][0].schema
    cols = [_gather_column([(b.column(i), r, k) for b, r, k in pieces], n)
            for i in range(len(schema))]  # fmt: skip
    return pa.Table.from_arrays(cols, schema=schema)


def _gather_column(pieces: list, n: int) -> pa.Array:
    """One column of :func:`_gather`: numpy copies the rows of a null-free primitive or
    fixed-size-list-of-primitive column straight into one buffer; other types go through
    Arrow's ``take`` + ``concat_arrays``."""
    typ = pieces[0][0].type
    fixed = pa.types.is_fixed_size_list(typ)
    base = typ.value_type if fixed else typ
    plain = (pa.types.is_integer(base) or pa.types.is_floating(base)) and all(
        c.null_count == 0 and (not fixed or c.values.null_count == 0) for c, _, _ in pieces
    )
    if not plain:
        return pa.concat_arrays([c.slice(0, k) if r is None else c.take(pa.array(r[:k]))
                                 for c, r, k in pieces])  # fmt: skip
    width = typ.list_size if fixed else 1
    dtype = np.dtype(base.to_pandas_dtype())
    # from Arrow's memory pool, which reuses its pages: a fresh numpy buffer of a row group
    # (128 MB at d=512) costs a page fault per 4 KiB every time
    buf = pa.allocate_buffer(n * width * dtype.itemsize)
    out = np.frombuffer(buf, dtype).reshape(n, width)
    at = 0
    for c, r, k in pieces:
        view = fixed_view(c, None) if fixed else c.to_numpy().reshape(-1, 1)
        if r is None:
            out[at : at + k] = view[:k]
        else:
            np.take(view, r[:k], axis=0, out=out[at : at + k], mode="clip")  # unbuffered
        at += k
    values = pa.Array.from_buffers(base, n * width, [None, buf])
    return pa.FixedSizeListArray.from_arrays(values, type=typ) if fixed else values


class ModifyInOrderFn(ModifyRowGroupFn):
    """:class:`transforms.modify.ModifyRowGroupFn` over the whole plan (one element: every
    work item, in read order), writing the release's parts in order (:class:`InOrderWriter`);
    yields only ``("bad", RecordBatch)`` for the quarantine."""

    def __init__(self, handler, *, out: str, schema: pa.Schema, **kwargs) -> None:
        super().__init__(handler, **kwargs)
        self._out, self._schema = out, schema

    def process(self, specs):
        with InOrderWriter(self._out, id_col=self._id_col, emb_col=self._emb_col,
                           num_shards=self._num_shards, schema=self._schema,
                           verify_col=self._verify_col) as writer:  # fmt: skip
            for tag, batch, flags in self._modified(list(specs)):
                if tag == "bad":
                    yield "bad", batch
                else:
                    writer.add(batch, flags)
