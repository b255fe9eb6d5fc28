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
        return self

    def __exit__(self, *exc) -> bool:
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
            self._parts[0].write(pa.Table.from_batches([batch]))
            return
        shards = shard_of(batch.column(self._id_col), self._n)
        for s in np.unique(shards):
            part = batch.filter(pa.array(shards == s))
            self._parts[int(s)].write(pa.Table.from_batches([part]))

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
