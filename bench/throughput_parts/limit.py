"""Part 1, the in-process limit: pyarrow read -> the same PyTorch modifier -> pyarrow write."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from bench.measure import measured
from bench.throughput_parts.data import _tensor, matrix


def run_limit(data: Path, weights: Path, out: Path, *, batch_rows: int, threads: int) -> dict:
    import torch

    from mass.batches.parquet import WRITE_OPTIONS
    from mass.embeddings import embedding_array
    from mass.modifiers import load_modifier
    from mass.noise import row_seeds

    torch.set_num_threads(threads)
    model = load_modifier(str(weights))
    opts = {k: v for k, v in WRITE_OPTIONS.items() if k != "row_group_size"}
    pf = pq.ParquetFile(data)
    rec: dict = {"batch_rows": batch_rows, "threads": threads}
    t_model = 0.0
    with measured(rec, pf.metadata.num_rows), torch.inference_mode():
        writer = None
        for batch in pf.iter_batches(batch_size=batch_rows, columns=["id", "emb"]):
            x = _tensor(matrix(batch, "emb"))
            # public row_seeds: a throughput benchmark, its output is never published
            seeds = torch.from_numpy(row_seeds(batch.column("id")))
            t0 = time.perf_counter()
            y = model(x, seeds).numpy()
            t_model += time.perf_counter() - t0
            res = pa.RecordBatch.from_arrays(
                [batch.column("id"), embedding_array(y)], names=["id", "emb"]
            )
            writer = writer or pq.ParquetWriter(out, res.schema, **opts)
            writer.write_batch(res)
        writer.close()
    rec["model_seconds"] = round(t_model, 3)
    return rec
