"""The anonymize job's hot path as one DoFn per work item (an input row group, or consecutive
tiny row groups planned together, :func:`mass.batches.parquet.plan_row_groups`): read ->
quarantine -> modify -> spill sorted runs.

Beam encodes every element of every PCollection it samples for size estimates, and pickles
RecordBatches between stages; a chain of ParDos over RecordBatches (read, validate, split,
RunInference, progress, key-by-shard) paid that on every step (docs/performance.md). Here
the only elements are row-group specs in and ``(shard, run path)`` pairs out, so the rows
never leave Arrow buffers between the Parquet reader, the model handler and the spill files.
The next batch's read and validation overlap the current batch's model call (one helper
thread; pyarrow and gRPC release the GIL). Works with any handler of
:mod:`transforms.inference` (``load_model`` / ``run_inference``), so tests and
in-process runs swap the server for a function without changing the graph.

Outputs are tagged tuples (DaskRunner does not route tagged outputs): ``("run", (shard,
path))`` for :class:`transforms.parquet_write.MergeShards` and ``("bad", RecordBatch)`` with the
quarantined ids and reasons.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

import apache_beam as beam

from mass.batches.parquet import RowGroupSpec, read_row_group
from mass.batches.quarantine import validate_batch
from mass.batches.spill import BYPASS_COSINE, ShardSpiller, row_flags
from mass.progress import RateLog

log = logging.getLogger("mass.anonymize")


class ModifyRowGroupFn(beam.DoFn):
    def __init__(
        self,
        handler,
        *,
        stage: str,
        columns: list[str],
        batch_rows: int,
        id_col: str,
        emb_col: str,
        dim: int,
        num_shards: int,
        verify_col: str,
        progress_every: int = 50,
        reference=None,
        near: float | None = None,
        seeds=None,
    ) -> None:
        self._handler = handler
        self._stage, self._columns, self._batch_rows = stage, columns, int(batch_rows)
        self._id_col, self._emb_col, self._dim = id_col, emb_col, int(dim)
        self._num_shards, self._verify_col = int(num_shards), verify_col
        self._every = progress_every
        # the signed modifier recomputed in-process on flagged + sampled rows
        # (mass.batches.reference); ``near``: the audit's max_cosine (rows above it are checked)
        self._reference, self._seeds = reference, seeds
        self._near = BYPASS_COSINE if near is None else float(near)
        self._quarantined = beam.metrics.Metrics.counter("mass", "quarantined")

    def setup(self):
        self._model = self._handler.load_model()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="mass-read")
        self._rate = RateLog(log, "anonymize", self._every)

    def teardown(self):
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown(wait=False)
        close = getattr(getattr(self, "_model", None), "close", None)
        if close is not None:  # the Triton connection: unregister its shared memory now
            close()

    def _validated(self, spec: RowGroupSpec):
        for batch in read_row_group(spec, self._columns, self._batch_rows):
            yield validate_batch(batch, id_col=self._id_col, emb_col=self._emb_col, dim=self._dim)

    def process(self, spec: RowGroupSpec):
        spiller = ShardSpiller(
            self._stage,
            id_col=self._id_col,
            num_shards=self._num_shards,
            emb_col=self._emb_col,
            verify_col=self._verify_col,
        )
        batches = self._validated(spec)
        nxt = self._pool.submit(next, batches, None)
        while True:
            item = nxt.result()
            if item is None:
                break
            nxt = self._pool.submit(next, batches, None)  # read ahead while the model runs
            good, bad = item
            if bad.num_rows:
                self._quarantined.inc(bad.num_rows)
                yield "bad", bad
            if good.num_rows:
                (out,) = self._handler.run_inference([good], self._model)
                for run in spiller.add(out, self._flags(out)):
                    yield "run", run
            self._rate.add(good.num_rows + bad.num_rows)
        for run in spiller.flush():
            yield "run", run

    def _flags(self, out):
        """The writer's per-row flags, judged against the signed modifier when one is at hand
        (else None: the spiller computes the plain cosine flags)."""
        if self._reference is None:
            return None
        flags = row_flags(out, self._emb_col, self._verify_col, self._near)
        return self._reference.verify(out, flags, id_col=self._id_col, emb_col=self._emb_col,
                                      verify_col=self._verify_col, seeds=self._seeds)  # fmt: skip


def pick(element, tag):
    if element[0] == tag:
        yield element[1]
