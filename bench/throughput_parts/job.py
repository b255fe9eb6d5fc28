"""Part 3, the Beam job: ``beam_pipelines.anonymize.run`` on each runner against one server."""

from __future__ import annotations

import shutil
from contextlib import contextmanager
from pathlib import Path

from bench.measure import measured
from bench.throughput_parts.data import MODEL

RUNNERS = ("fnapi", "fnapi_mp2", "dask2")


@contextmanager
def runner_flags(runner: str):
    if runner == "fnapi":
        yield []
    elif runner == "fnapi_mp2":
        yield ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]
    else:
        from dask.distributed import LocalCluster

        with LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster:
            yield ["--runner=DaskRunner", f"--dask_client_address={cluster.scheduler_address}"]


def run_job(
    data: Path,
    repo: Path,
    url: str,
    out: Path,
    *,
    runner: str,
    batch_rows: int,
    shards: int,
    rows: int,
    shm: str = "auto",
) -> dict:
    from beam_pipelines import anonymize

    rec: dict = {"runner": runner, "batch_rows": batch_rows, "shards": shards, "shm": shm}
    with runner_flags(runner) as flags, measured(rec, rows):
        summary = anonymize.run(
            [
                "--input",
                str(data),
                "--output",
                str(out),
                "--model",
                MODEL,
                "--repository",
                str(repo),
                "--triton-url",
                url,
                "--batch-rows",
                str(batch_rows),
                "--shards",
                str(shards),
                "--progress-every",
                "1000000",
                "--triton-shm",
                shm,
                "--no-audit",  # job throughput; the audit gate is timed on its own (README)
                *flags,
            ]
        )
    if summary["rows_out"] != rows:
        raise RuntimeError(f"job released {summary['rows_out']} of {rows} rows")
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(f"{out}_quarantine", ignore_errors=True)
    return rec
