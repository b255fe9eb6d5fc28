"""The anonymize job's hot path as one DoFn per work item (an input row group, or consecutive
tiny row groups planned together, :func:`mass.batches.parquet.plan_row_groups`): read ->
quarantine -> modify -> spill sorted runs.

What happens to each batch (validate -> infer -> flag, checked against the signed weights) is
:class:`BatchModifier`, the one core that :class:`transforms.api.Anonymize` runs too; the job
adds only the row-group reads, the spills and (later) the sharded merge.

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
import numpy as np
import pyarrow as pa

from mass.batches.parquet import RowGroupSpec, read_row_group
from mass.batches.quarantine import validate_batch
from mass.batches.spill import (
    BYPASS_COSINE,
    MISMATCH,
    NONFINITE,
    UNMODIFIED,
    ShardSpiller,
    row_flags,
)
from mass.errors import ConfigError, ServingError
from mass.progress import RateLog

log = logging.getLogger("mass.anonymize")

REFUSED = UNMODIFIED | MISMATCH | NONFINITE  # flags no release may carry (mass.release.verify)


class BatchModifier:
    """One batch of rows -> (privatized rows with their flags, quarantined rows): the core that
    both the `mass anonymize` job (:class:`ModifyRowGroupFn`) and
    :class:`transforms.api.Anonymize` run, so a change to any step reaches both.

    :meth:`validate` keeps ``columns`` and splits the rows the model may see from the bad
    ones (id + reason, :func:`mass.batches.quarantine.validate_batch`); :meth:`modify` runs
    the model handler on the good rows (its input kept beside its output as ``verify_col``)
    and returns their per-row flags (:func:`mass.batches.spill.row_flags`), the flagged and
    sampled rows recomputed with the signed weights when ``reference`` is given
    (:mod:`mass.batches.reference`; rows whose cosine to their input is above ``near``, the
    audit's ``max_cosine``, are recomputed too). ``seeds``, the owner-keyed ROW_SEED, is bound
    here to the handler's inputs and to the recompute alike. Holds no Beam: reading, batching
    and writing stay with each caller; the job reads and validates the next batch on a helper
    thread while :meth:`modify` runs (:meth:`validate` touches no state).
    """

    def __init__(self, handler, *, columns: list[str], id_col: str, emb_col: str, dim: int,
                 verify_col: str, reference=None, near: float | None = None,
                 seeds=None) -> None:  # fmt: skip
        kept = getattr(handler, "input_copy", verify_col)
        if kept != verify_col:
            raise ConfigError(f"model handler {getattr(handler, 'model_name', handler)!r} keeps "
                              f"its input as {kept!r}; the bypass check reads it as "
                              f"{verify_col!r}: build it with keep_input_as={verify_col!r}")  # fmt: skip
        self.handler = handler.with_row_seeds(seeds)
        self.columns, self.id_col, self.emb_col = list(columns), id_col, emb_col
        self.dim, self.verify_col = int(dim), verify_col
        self.reference, self.seeds = reference, seeds
        # without the signed weights a row near its input is no finding: only bypasses count
        self.near = BYPASS_COSINE if near is None or reference is None else float(near)
        self._model = None

    def load(self) -> None:
        """Load the model (once per worker, Beam's ``setup``)."""
        self._model = self.handler.load_model()

    def close(self) -> None:
        """Release the model (the Triton connection unregisters its shared memory now)."""
        close, self._model = getattr(self._model, "close", None), None
        if close is not None:
            close()

    def validate(self, batch: pa.RecordBatch) -> tuple[pa.RecordBatch, pa.RecordBatch]:
        """(rows the model may see, quarantined rows: id + reason); ``batch`` holds
        ``columns`` (others are dropped here)."""
        if batch.schema.names != self.columns:
            batch = batch.select(self.columns)
        return validate_batch(batch, id_col=self.id_col, emb_col=self.emb_col, dim=self.dim)

    def modify(self, good: pa.RecordBatch) -> tuple[pa.RecordBatch, np.ndarray]:
        """(the handler's output with ``verify_col``, its uint8 flags) for validated rows."""
        (out,) = self.handler.run_inference([good], self._model)
        flags = row_flags(out, self.emb_col, self.verify_col, self.near)
        if self.reference is not None:
            flags = self.reference.verify(out, flags, id_col=self.id_col, emb_col=self.emb_col,
                                          verify_col=self.verify_col, seeds=self.seeds)  # fmt: skip
        return out, flags

    def process(self, batch: pa.RecordBatch):
        """``(out, flags, bad)``: :meth:`validate` then :meth:`modify` (``out`` and ``flags``
        are None when no row is valid)."""
        good, bad = self.validate(batch)
        if not good.num_rows:
            return None, None, bad
        return (*self.modify(good), bad)

    def refuse(self, out: pa.RecordBatch, flags: np.ndarray, what: str) -> None:
        """Raise :class:`mass.errors.ServingError` when a row carries a :data:`REFUSED` flag
        (the job counts them per shard instead and refuses the staged release,
        :func:`mass.release.verify.verify_release`)."""
        bad = np.flatnonzero(flags & REFUSED)
        if not len(bad):
            return
        row = int(bad[0])
        why = ("unmodified" if flags[row] & UNMODIFIED else "not finite"
               if flags[row] & NONFINITE else "not the signed model's output")  # fmt: skip
        raise ServingError(f"{what}: {len(bad)} row(s) came back {why} (first {self.id_col} "
                           f"{out.column(self.id_col)[row].as_py()!r}); the server does not run "
                           "the signed model; nothing may be released")  # fmt: skip


class ModifyRowGroupFn(beam.DoFn):
    """The job's work item: its row groups read in ``batch_rows`` batches, each through a
    :class:`BatchModifier` (quarantined rows out as ``("bad", batch)``), the privatized rows
    and their flags spilled id-sorted per shard (``("run", (shard, path))``)."""

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
        # ``reference``: the signed modifier recomputed in-process on flagged + sampled rows
        # (mass.batches.reference); ``near``: the audit's max_cosine (rows above it are checked)
        self._core = BatchModifier(handler, columns=columns, id_col=id_col, emb_col=emb_col,
                                   dim=dim, verify_col=verify_col, reference=reference,
                                   near=near, seeds=seeds)  # fmt: skip
        self._stage, self._batch_rows = stage, int(batch_rows)
        self._num_shards = int(num_shards)
        self._every = progress_every
        self._quarantined = beam.metrics.Metrics.counter("mass", "quarantined")

    def setup(self):
        self._core.load()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="mass-read")
        self._rate = RateLog(log, "anonymize", self._every)

    def teardown(self):
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown(wait=False)
        self._core.close()

    def _validated(self, spec: RowGroupSpec):
        for batch in read_row_group(spec, self._core.columns, self._batch_rows):
            yield self._core.validate(batch)

    def process(self, spec: RowGroupSpec):
        core = self._core
        spiller = ShardSpiller(
            self._stage,
            id_col=core.id_col,
            num_shards=self._num_shards,
            emb_col=core.emb_col,
            verify_col=core.verify_col,
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
                for run in spiller.add(*core.modify(good)):
                    yield "run", run
            self._rate.add(good.num_rows + bad.num_rows)
        for run in spiller.flush():
            yield "run", run


def needs_noise_key(info: dict) -> bool:
    """Whether the model's release noise must be keyed by the owner key: unless its
    export.json says it is a deterministic modifier (``stochastic: false`` counts only beside
    ``modifier``: older exports recorded false for the noise baselines; ``{}``, a remote
    server with no export at hand, may be stochastic)."""
    return not (info.get("modifier") and info.get("stochastic") is False)


def model_seeds(key, info: dict, *, read_on_worker: bool = False):
    """The ROW_SEED source of a release of ``info``'s model: the owner-keyed PRF of the ids
    (:class:`mass.noise.KeyedSeeds`), None (all zeros) without a key."""
    from mass.noise import KeyedSeeds

    if key is None:
        return None
    # bound to the modifier: two modifiers never share a row's noise (docs/threat-model.md)
    context = str(info.get("sha256") or "")
    return KeyedSeeds.of(key, context=context, read_on_worker=read_on_worker)


def pick(element, tag):
    if element[0] == tag:
        yield element[1]
