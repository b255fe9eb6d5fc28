"""Part 2, Triton alone: the anonymize job's own client, driven from memory (no Parquet).

What is timed is :class:`transforms.inference.triton.TritonModelHandler` over its
:class:`mass.serving.triton_client.TritonClient` - the handler the job runs inside
``RunInference`` - applied to in-memory RecordBatches: keyed ``ROW_SEED``s,
requests of ``batch`` rows, ``concurrency`` of them in flight (the job's ``request_rows`` and
``in_flight``), gRPC payloads or system shared memory, response validation and the output
column. Each element handed to the handler holds ``batch * concurrency`` rows, so every
element keeps ``concurrency`` requests in flight; latency percentiles are per element.
"""

from __future__ import annotations

import secrets
import time

import numpy as np
import pyarrow as pa

from bench.measure import measured
from bench.throughput_parts.data import MODEL, matrix

TIMEOUT_S = 300.0  # per request: generous, the bench may share a loaded machine


def bench_seeds():
    """Keyed ROW_SEEDs as the job computes them, under a throw-away key (nothing is published)."""
    from mass.keys import OwnerKey
    from mass.noise import KeyedSeeds

    return KeyedSeeds.of(OwnerKey(secrets.token_bytes(32), source="<bench>"), context="bench")


def _percentiles(lat: list[float]) -> dict:
    ms = np.asarray(lat) * 1e3
    return {
        "p50_ms": round(float(np.percentile(ms, 50)), 2),
        "p99_ms": round(float(np.percentile(ms, 99)), 2),
    }


def run_triton(
    url: str,
    table: pa.Table,
    seeds,
    *,
    batch: int,
    concurrency: int,
    shm: bool,
    expected: np.ndarray | None = None,
) -> dict:
    """Send every row of ``table`` (``id``, ``emb``) through the job's handler; time it.

    ``expected``: the in-process model's output for the first rows (same ``seeds``), checked
    against the warm-up answer, so wrong shared-memory offsets would not go unnoticed.
    """
    from mass.serving.tensors import ModifierInputs
    from mass.serving.triton_client import TritonClient
    from transforms.inference.triton import TritonModelHandler

    handler = TritonModelHandler(
        url,
        MODEL,
        inputs=ModifierInputs(seeds=seeds),
        request_rows=batch,
        in_flight=concurrency,
        shared_memory=shm,  # True: shared memory or an error; False: gRPC payloads
        timeout_s=TIMEOUT_S,
    )
    element = batch * concurrency
    batches = table.combine_chunks().to_batches(max_chunksize=element)
    rec = {"batch": batch, "concurrency": concurrency, "shm": shm, "element_rows": element}
    lat: list[float] = []
    conn = handler.create_client()
    try:
        # warm-up (first-call costs stay out of the numbers), checked against the model
        (got,) = handler.request(batches[0], conn)
        if expected is not None:
            n = min(len(expected), got.num_rows)
            if not np.allclose(matrix(got, "emb")[:n], expected[:n], atol=1e-4):
                raise RuntimeError(f"Triton answer differs from the in-process model ({rec})")
        sent = dict(TritonClient.shm_sent)
        with measured(rec, table.num_rows):
            for b in batches:
                t0 = time.perf_counter()
                handler.request(b, conn)
                lat.append(time.perf_counter() - t0)
        shm_requests = TritonClient.shm_sent["requests"] - sent["requests"]
    finally:
        conn.close()
    if shm and shm_requests == 0:  # the number must be what its label says
        raise RuntimeError(f"no request went through shared memory ({rec})")
    rec["shm_requests"] = shm_requests
    rec.update(_percentiles(lat))
    return rec
