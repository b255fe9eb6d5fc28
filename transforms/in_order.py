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
        self._groups: list[_RowGroup | None] = [None] * self._n
        return self

    def __exit__(self, *exc) -> bool:
        if exc[0] is None:
            try:  # each shard's last, partial row group
                for part, group in zip(self._parts, self._groups, strict=True):
                    if group is not None and group.n:
                        part.write(group.table())
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
        """Copy ``batch``'s rows of ``shard`` (``rows``; None: all) into its row group; write
        each row group as it fills."""
        total, pos = (batch.num_rows if rows is None else len(rows)), 0
        while pos < total:
            group = self._groups[shard]
            if group is None:
                group = self._groups[shard] = _RowGroup(
                    batch.schema, WRITE_OPTIONS["row_group_size"]
                )
            k = min(total - pos, group.rows - group.n)
            group.put(batch, rows, pos, k)
            pos += k
            if group.n == group.rows:
                part = self._parts[shard]
                part.write(group.table())
                if part.pending_rows:  # the sink kept rows: they may share the buffers
                    raise RuntimeError(f"shard {shard}: a full row group was not written")
                group.n = 0  # written and released: the buffers are filled again (no new pages)

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


class _RowGroup:
    """One shard's row group, filled as its rows arrive: each row is copied once, and the
    model's output batches are freed as soon as every shard has its rows (holding the
    batches until a row group is complete, or filtering each batch per shard and combining
    the pieces into a row group, kept more memory alive or copied every row twice). Once a
    full group is written (the part's sink keeps no row of it) its buffers are filled again:
    fresh buffers per group cost a page fault and a zeroed huge page per 2 MiB each time
    (``clear_page_erms``, 17 % of a job's samples in a perf profile)."""

    def __init__(self, schema: pa.Schema, rows: int) -> None:
        self._schema, self.rows, self.n = schema, int(rows), 0
        self._cols = [_Column(f.type, self.rows) for f in schema]

    def put(self, batch: pa.RecordBatch, rows: np.ndarray | None, start: int, k: int) -> None:
        """Rows ``rows[start:start + k]`` of ``batch`` (``rows`` None: ``batch[start:...]``)."""
        for col, arr in zip(self._cols, batch.columns, strict=True):
            col.put(arr, None if rows is None else rows[start : start + k], start, k, self.n)
        self.n += k

    def table(self) -> pa.Table:
        return pa.Table.from_arrays([c.array(self.n) for c in self._cols], schema=self._schema)


class _Column:
    """One column of a :class:`_RowGroup`: a null-free integer or float column, or a
    fixed-size list of them (ids, embeddings, flags), is copied by numpy straight into one
    buffer from Arrow's memory pool; anything else (or a piece with nulls) is kept as Arrow
    ``take``/``slice`` pieces and concatenated at the end."""

    def __init__(self, typ: pa.DataType, rows: int) -> None:
        self._type, self._fixed = typ, pa.types.is_fixed_size_list(typ)
        self._base = typ.value_type if self._fixed else typ
        self._numpy = pa.types.is_integer(self._base) or pa.types.is_floating(self._base)
        self._pieces: list[pa.Array] = []
        self._buf = None
        if self._numpy:
            self._width = typ.list_size if self._fixed else 1
            dtype = np.dtype(self._base.to_pandas_dtype())
            self._buf = pa.allocate_buffer(rows * self._width * dtype.itemsize)
            self._view = np.frombuffer(self._buf, dtype).reshape(rows, self._width)

    def put(self, arr: pa.Array, rows: np.ndarray | None, start: int, k: int, at: int) -> None:
        if not at:  # a new row group
            self._pieces, self._numpy = [], self._buf is not None
        if self._numpy and (arr.null_count or (self._fixed and arr.values.null_count)):
            # what is filled so far is copied out: the buffer is refilled for the next group
            self._pieces, self._numpy = [pa.concat_arrays([self._filled(at)])], False
        if not self._numpy:
            self._pieces.append(arr.slice(start, k) if rows is None else arr.take(pa.array(rows)))
            return
        src = fixed_view(arr, None) if self._fixed else arr.to_numpy().reshape(-1, 1)
        if rows is None:
            self._view[at : at + k] = src[start : start + k]
        else:
            np.take(src, rows, axis=0, out=self._view[at : at + k], mode="clip")  # unbuffered

    def _filled(self, n: int) -> pa.Array:
        values = pa.Array.from_buffers(self._base, n * self._width, [None, self._buf])
        return pa.FixedSizeListArray.from_arrays(values, type=self._type) if self._fixed else values

    def array(self, n: int) -> pa.Array:
        if self._numpy:
            return self._filled(n)
        return self._pieces[0] if len(self._pieces) == 1 else pa.concat_arrays(self._pieces)


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
