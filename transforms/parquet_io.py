"""Arrow-batch Parquet IO that every Beam runner can execute, DaskRunner included.

Beam's DaskRunner translates only Create, ParDo, GroupByKey and Flatten, so reading is
``Create(row-group specs) | ParDo(read)`` instead of ``ReadFromParquetBatched`` (a Read
source), and writing is ``ParDo(spill sorted runs) | GroupByKey(shard -> run paths) |
ParDo(merge)`` instead of ``WriteToParquetBatched`` (a Reshuffle + finalize sink). Rows go to
shard ``row_seeds(id) % num_shards`` and are sorted by id inside a shard, so the files depend
only on the rows and the shard count: the same input gives byte-identical files on any
runner, batch size or input layout (what DVC needs to see an unchanged output). Rows never
travel through the GroupByKey (only run file paths do) and the merge holds one record batch
per open run, so memory stays bounded whatever the number of rows (an external sort,
:mod:`mass.batches.spill`). Every path is a :mod:`mass.fs` path: a local file or an object-store
URI; run files live where every worker can reach them (the staging location or
``--temp_location``), so no worker opens another machine's local file.
"""

from __future__ import annotations

import copyreg

import apache_beam as beam
import pyarrow as pa

from mass.batches.parquet import RowGroupSpec, decode_dictionaries, plan_row_groups, read_row_group


def _restore_batch(buf) -> pa.RecordBatch:
    return pa.ipc.open_stream(buf).read_next_batch()


def _reduce_batch(batch: pa.RecordBatch):
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return _restore_batch, (sink.getvalue(),)


# Beam pickles RecordBatches between stages and, to estimate PCollection sizes, nearly every
# one inside a fused stage too. pyarrow's own pickle writes a slice's whole parent buffers
# (a to_batches() slice of a 64k-row group: 6x its size); Arrow IPC writes only the slice.
copyreg.pickle(pa.RecordBatch, _reduce_batch)


class _ReadRowGroupFn(beam.DoFn):
    def __init__(self, columns: list[str] | None, batch_rows: int) -> None:
        self._columns = columns
        self._batch_rows = batch_rows

    def process(self, spec: RowGroupSpec):
        for batch in read_row_group(spec, self._columns, self._batch_rows):
            yield decode_dictionaries(batch)


class ReadArrowBatches(beam.PTransform):
    """Parquet ``spec`` -> PCollection of ``pa.RecordBatch`` of at most ``batch_rows`` rows."""

    def __init__(
        self, spec: str, *, columns: list[str] | None = None, batch_rows: int = 4096
    ) -> None:
        super().__init__()
        self._specs = plan_row_groups(spec)
        self._columns = columns
        self._batch_rows = int(batch_rows)

    def expand(self, pbegin):
        return (
            pbegin
            | "RowGroups" >> beam.Create(self._specs)
            | "ReadRowGroup" >> beam.ParDo(_ReadRowGroupFn(self._columns, self._batch_rows))
        )
