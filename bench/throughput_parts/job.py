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


def job_argv(src: str, out: str, repo: Path, url: str, *, batch_rows: int, shards: int,
             shm: str = "auto", flags: tuple[str, ...] | list[str] = ()) -> list[str]:  # fmt: skip
    """The anonymize job's command line against the served benchmark model, no audit."""
    return ["--input", src, "--output", out, "--model", MODEL, "--repository", str(repo),
            "--triton-url", url, "--batch-rows", str(batch_rows), "--shards", str(shards),
            "--progress-every", "1000000", "--triton-shm", shm,
            "--no-audit",  # job throughput; the audit gate is timed on its own (README)
            *flags]  # fmt: skip


def timed_job(rec: dict, argv: list[str], rows: int) -> dict:
    """Run the job once under :func:`bench.measure.measured` into ``rec``; check its rows."""
    from beam_pipelines import anonymize

    with measured(rec, rows):
        summary = anonymize.run(argv)
    if summary["rows_out"] != rows:
        raise RuntimeError(f"job released {summary['rows_out']} of {rows} rows")
    return rec


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
    rec: dict = {"runner": runner, "batch_rows": batch_rows, "shards": shards, "shm": shm}
    with runner_flags(runner) as flags:
        argv = job_argv(str(data), str(out), repo, url, batch_rows=batch_rows, shards=shards,
                        shm=shm, flags=flags)  # fmt: skip
        timed_job(rec, argv, rows)
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(f"{out}_quarantine", ignore_errors=True)
    return rec
